// The computations behind analyze, explain, trace and stream, shared by the command line
// (cli/cmd_<verb>.cpp) and the Python module (python/): the validated settings and the input token
// stream go in, the report structure comes out, and each front end renders it (the same JSON from
// both). The verbs' flag parsing, output paths and terminal printing stay in cmd_<verb>.cpp.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/analyze_report.h"
#include "cli/common.h"
#include "explain/explain_report.h"
#include "model/weights.h"
#include "stream/stream.h"
#include "trace/trace.h"

namespace ss::cli {

// ---- analyze

struct AnalyzeRequest {
  SampleOptions input;  // samples, length, seed; input.has_prompt(): the whole stream is one sample
  std::vector<analysis::Condition> conditions;
  SinkOptions sink;
  std::string patterns;             // --patterns spec ("" none)
  std::string attn_path = "fused";  // or "materialised"
  bool allow_long_context = false;
  std::string allow_long_name = std::string(kAllowLongFlag);  // as messages spell it
};

// Checks the settings that need no model (flag domains, the condition list, the attention path).
void ValidateAnalyze(const AnalyzeRequest& request);
// The samples analyze cuts from `input` for one condition (a single sample with a prompt).
std::vector<std::vector<int>> AnalysisSamples(const Model& model, const SampleStream& input,
                                              const AnalyzeRequest& request,
                                              analysis::Condition condition);
// Cuts the samples of every condition from `input`, runs them and returns the report (model
// identity and settings filled in). Progress lines per condition (report::Progress, which also runs
// the installed poll).
analysis::AnalyzeReport RunAnalysis(const Model& model, const SampleStream& input,
                                    const AnalyzeRequest& request);

// ---- explain

struct ExplainRequest {
  SampleOptions input;
  analysis::Condition condition = analysis::Condition::kBos;
  explain::ExplainOptions options;  // eps and the thresholds filled in by the front end
  std::string ablate;               // --ablate spec ("" none)
  std::string ablation = "mean";    // or "zero"
};

void ValidateExplain(const ExplainRequest& request);
explain::ExplainReport RunExplanation(const Model& model, const SampleStream& input,
                                      const ExplainRequest& request);

// ---- trace

struct TraceRequest {
  std::vector<std::string> checkpoints;
  SampleOptions input;  // samples, length, seed, text_file, tokenizer
  SinkOptions sink;
  LayerThresholdOptions layers;
  int early_blocks = 1;
  double other_share = 0.1;
  int stable_window = 3;
  bool no_cache = false;
  std::string precision;  // --precision; empty: the checkpoints' own (FilePrecision)
};

struct TraceRun {
  std::vector<trace::CheckpointResult> results;  // every checkpoint on rank 0; stages assigned
  trace::TraceSettings settings;
};

void ValidateTrace(const TraceRequest& request);
// Where the trace's samples come from ("bigram-backcopy V=... table_seed=...", "text FILE
// sha256=..., tokenizer ..."): runs compared side by side must agree on it.
std::string TraceSamplesSource(const TraceRequest& request);
// Finds the checkpoints, plans the samples and analyses the checkpoints of this rank (all of them
// with ranks = 1), gathering the results on rank 0. `log` receives one line per checkpoint.
TraceRun RunTraceAnalysis(const TraceRequest& request, int rank, int ranks,
                          const std::function<void(const std::string&)>& log);

// ---- stream

inline constexpr int kStreamBlock = 1000;  // tokens per perplexity block

struct StreamRun {
  stream::Policy policy = stream::Policy::kSinks;
  int sinks = 0, window = 0, budget = 0;  // what the policy actually keeps
  int64_t scored = 0;
  double sum_nll = 0;
  std::vector<double> block_sum;
  std::vector<int64_t> block_count;
  std::vector<float> nll;  // per scored token, when asked for (RunStreamPolicy's keep_nll)
  double seconds = 0;
  int64_t peak_kv_bytes = 0;
  // The cache's storage (stream::StreamOptions k_type, v_type, keep) and, in a comparison of
  // storage types (RunKvComparison), the divergence of each next-token distribution from the f32
  // cache's: KL(p_f32 || p) summed and its largest value.
  KvType k_type = KvType::kF32, v_type = KvType::kF32;
  std::string keep = "none";
  int64_t kv_bytes_per_token = 0;
  double sum_kl = 0, max_kl = 0;
  double MeanNll() const;
};

// Streams `tokens` through a cache under `options` (teacher forcing), scoring tokens 1..n-1. Rows
// "position,token,nll" go to `csv` when it is open (with the policy first when with_policy); the
// per-token NLL is kept in the result when keep_nll.
StreamRun RunStreamPolicy(const Model& model, const stream::StreamOptions& options,
                          const std::vector<int>& tokens, std::FILE* csv, bool with_policy,
                          bool keep_nll);

// --kv-type, --kv-type-k, --kv-type-v and --kv-keep of stream, generate and chat (declared in
// cli/options.cpp with the cache policy: CacheOptions).
struct KvCacheFlags {
  std::string type = "f32", type_k, type_v, keep = "none";
  void Add(CLI::App* cmd);
  bool typed() const;  // parses the types (ss::Error naming the flag)
  // Sets the cache's types and kept entries; "detected" is resolved on `tokens` (ResolveKvKeep).
  void Apply(const Model& model, const std::vector<int>& tokens,
             stream::StreamOptions* options) const;
};

// One cache storage of a comparison: "q8_0", "q8_0/q4_0" (keys / values), each optionally
// "+first:N" or "+detected" (which entries stay f32).
struct KvConfig {
  KvType k_type = KvType::kF32, v_type = KvType::kF32;
  std::string keep = "none";  // the spec as given
  std::vector<int64_t> keep_indices;
};
// Parses --compare-kv's comma-separated list (ss::Error naming the flag on a bad item): an item
// given twice runs once; at most kMaxKvConfigs different items (each is a run over the text).
inline constexpr int kMaxKvConfigs = 16;
std::vector<KvConfig> ParseKvConfigs(const std::string& list, const std::string& flag);
// Resolves "detected" against the stream's first min(W, n) tokens (stream::DetectSinkPositions);
// when the model has no sink there, falls back to first:S (S = options.sinks, at least 1) and says
// so in the log. Returns the indices for `spec`.
std::vector<int64_t> ResolveKvKeep(const Model& model, const stream::StreamOptions& options,
                                   const std::string& spec, const std::vector<int>& tokens);
// Streams `tokens` through an f32 cache and, in lockstep, through each storage of `configs`
// (same policy, sinks, window): per token, each one's NLL and its KL divergence from the f32
// cache's next-token distribution. The first run returned is the f32 reference.
std::vector<StreamRun> RunKvComparison(const Model& model, const stream::StreamOptions& base,
                                       const std::vector<KvConfig>& configs,
                                       const std::vector<int>& tokens);

struct StreamDocument {
  std::string model, text;  // names for the report: the model path and the input
  int64_t tokens = 0;
  bool bos = true;
  int sinks = 4, window = 252;
  bool force = false;
  int64_t max_tokens = 0;
  std::string precision = "f32";    // the model's (PrecisionName)
  std::string activations = "f32";  // ActivationsName
};
// The sinkscope.stream/1 document.
nlohmann::json StreamJson(const StreamDocument& doc, const std::vector<StreamRun>& runs);

}  // namespace ss::cli
