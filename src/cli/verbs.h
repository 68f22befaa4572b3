// The computations behind analyze, explain, trace and stream, shared by the command line
// (cli/cmd_<verb>.cpp) and the Python module (python/): the validated settings and the input token
// stream go in, the report structure comes out, and each front end renders it (the same JSON from
// both). The verbs' flag parsing, output paths and terminal printing stay in cmd_<verb>.cpp.
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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
};

// Checks the settings that need no model (flag domains, the condition list, the attention path).
void ValidateAnalyze(const AnalyzeRequest& request);
// The samples analyze cuts from `input` for one condition (a single sample with a prompt).
std::vector<std::vector<int>> AnalysisSamples(const Model& model, const SampleStream& input,
                                              const AnalyzeRequest& request,
                                              analysis::Condition condition);
// Cuts the samples of every condition from `input`, runs them and returns the report (model identity
// and settings filled in). Progress lines per condition (report::Progress, which also runs the
// installed poll).
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
  std::string precision = "f32";
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
  double MeanNll() const;
};

// Streams `tokens` through a cache under `options` (teacher forcing), scoring tokens 1..n-1. Rows
// "position,token,nll" go to `csv` when it is open (with the policy first when with_policy); the
// per-token NLL is kept in the result when keep_nll.
StreamRun RunStreamPolicy(const Model& model, const stream::StreamOptions& options,
                          const std::vector<int>& tokens, std::FILE* csv, bool with_policy,
                          bool keep_nll);

struct StreamDocument {
  std::string model, text;  // names for the report: the model path and the input
  int64_t tokens = 0;
  bool bos = true;
  int sinks = 4, window = 252;
  bool force = false;
  int64_t max_tokens = 0;
};
// The sinkscope.stream/1 document.
nlohmann::json StreamJson(const StreamDocument& doc, const std::vector<StreamRun>& runs);

}  // namespace ss::cli
