// sinkscope serve: a local web server and a single-page sink viewer (docs/SERVE.md). The page
// (serve/viewer.html, compiled in) talks to JSON endpoints that reuse the CLI's computations and
// schemas (cli/verbs.h):
//   GET  /                 the viewer
//   GET  /api/model        the model's identity, the server-side texts that may be chosen, limits
//   POST /api/analyze      {text | file, conditions, samples, length, seed, prompt,
//                          allow_long_context} -> {run, report (sinkscope.analyze/1), tokens}
//   GET  /api/pattern      ?run&condition&layer&head[&q0&q1&k0&k1&bins] -> a max-pooled tile
//                          of one head's attention pattern on the run's first sample (at most
//                          bins x bins values: a T = 8192 pattern is never sent whole)
//   GET  /api/row          ?run&condition&layer&head&query[&top] -> the query's top keys
//   POST /api/explain      {text | file, condition, samples, length, seed} -> sinkscope.explain/1
//   POST /api/stream       {text | file, policies, sinks, window, max_tokens} ->
//                          sinkscope.stream/1 plus each policy's per-token NLL
// Requests are validated (sizes, lengths, names); a bad one gets HTTP 400 with {"error": message}
// and the server goes on. Requests run on the server's thread pool, so one slow analysis does not
// block the others. Only the model and the files given with --texts are ever read.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/weights.h"

namespace ss::serve {

// One head's attention pattern, max-pooled over a window of queries x keys into at most
// bins x bins cells (exact values when the window fits). Computed from the layer's queries and
// keys after RoPE (blocks.{l}.attn.hook_q / hook_k) with the engine's own attention kernel, a
// block of queries at a time, so memory is O(block x T) rather than O(T^2).
struct PatternTile {
  int q0 = 0, q1 = 0, k0 = 0, k1 = 0;  // the window, [q0, q1) x [k0, k1)
  int rows = 0, cols = 0;              // cells
  int row_step = 1, col_step = 1;      // queries / keys per cell (the last cell may hold fewer)
  std::vector<float> values;           // (rows, cols) max probability within each cell
};
// The layer's own attention applies: its window, learned sink logits (the rows then sum to
// 1 - p_sink), soft-cap, query scaling and sigmoid weights. A kv-bias model's slot logits come
// from the queries before RoPE, which q (hook_q) is not: `slot_logits` (H, T), as the forward
// computed them (RunState::slot_logits), is required for such a model.
PatternTile ComputePatternTile(const Model& model, int layer, const float* q, const float* k, int T,
                               int head, int q0, int q1, int k0, int k1, int bins,
                               const float* slot_logits = nullptr);
// The probabilities of one query row (T keys, zero beyond the query).
std::vector<float> ComputePatternRow(const Model& model, int layer, const float* q, const float* k,
                                     int T, int head, int query,
                                     const float* slot_logits = nullptr);

// Registers the `serve` verb.
void RegisterServe(CLI::App& app);

}  // namespace ss::serve
