// What `sinkscope analyze` writes: the JSON document (schema "sinkscope.analyze/1"), the terminal
// summary and the self-contained HTML page. Built from ConditionResults; no model is run here.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/analyze.h"

namespace ss::analysis {

inline constexpr const char* kAnalyzeSchema = "sinkscope.analyze/1";

struct ModelIdentity {
  std::string path, format, arch;
  int n_layers = 0, n_heads = 0, n_kv_heads = 0, dim = 0, head_dim = 0, hidden_dim = 0;
  int vocab_size = 0, max_seq_len = 0;
  int64_t parameters = 0;
  int64_t file_bytes = -1;  // size of the model file (sum over a directory's files); -1 unknown
  std::string sha256;       // of the model file; empty for directories or files over the limit
  std::string precision = "f32";    // the products' arithmetic the run used (--precision)
  std::string activations = "f32";  // x of the quantised products: f32 or int8 (--activations)
};

// Reads the model's dimensions and its file's size, and hashes files up to `hash_limit_bytes`.
ModelIdentity IdentifyModel(const Model& model, int64_t hash_limit_bytes = int64_t{4} << 30);
// The "model" object every report's JSON carries (analyze, explain).
nlohmann::json ModelIdentityJson(const ModelIdentity& m);

struct AnalyzeSettings {
  std::string source;  // "text FILE", "prompt", "default text data/default_text.txt"
  int samples = 0;     // N
  int length = 0;      // T (for --prompt: the prompt's tokens, +1 with bos/random-p0)
  uint64_t seed = 0;
  int first_k = 4;
  double eps = 0.3;
  std::string attn_path = "fused";
  std::string patterns;  // the --patterns spec as given
  bool allow_long_context = false;
};

struct AnalyzeReport {
  ModelIdentity model;
  AnalyzeSettings settings;
  std::vector<ConditionResult> conditions;
};

nlohmann::json ReportJson(const AnalyzeReport& report);
// A compact text summary for the terminal (per-layer Sink_0 per condition, top sink heads, P0 norm
// ratios), using report::FormatTable.
std::string ReportSummary(const AnalyzeReport& report);
// The whole HTML page (report::HtmlPage): charts as inline SVG, no scripts, no network.
std::string ReportHtml(const AnalyzeReport& report);

}  // namespace ss::analysis
