// Sink metrics over a set of samples (DESIGN.md "Metric definitions"), measured by running the
// model once per sample with observers attached:
//   - attention: alpha_k^{l,h}, Sink_k^eps, top-key statistics. Either from the statistics the
//     attention kernel accumulates on the fly (the fused path, memory O(L x H x T x K)), or from
//     the full (H, T, T) patterns read at blocks.{l}.attn.hook_pattern (the materialised path, the
//     way HF output_attentions / TransformerLens run_with_cache work). Both give the same numbers.
//   - residual stream (blocks.{l}.hook_resid_post): P0 norm ratio, massive activations, direction
//     consistency. Computed inside the hook, so no hidden state is kept.
//
// Averaging over N samples: every per-sample metric (alpha, Sink rates, top-key share, norm ratios,
// median |x|) is computed on each sample alone and the result is the mean over the N samples.
// Two metrics are pooled instead: the most frequent top key per head (counted over all queries of
// all samples) and direction consistency, which is defined across samples.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "analysis/conditions.h"
#include "model/model.h"

namespace ss::analysis {

enum class AttnPath {
  kFused,                // AttnStatsBuffers filled inside the attention kernel
  kMaterialised,         // full patterns per layer, reduced inside the pattern hook, then dropped
  kMaterialisedKeepAll,  // every layer's full pattern kept until the forward ends, then reduced
                         // (what output_attentions=True costs: L x H x T^2 floats)
};

struct HeadRef {
  int layer = 0;
  int head = 0;
  bool operator==(const HeadRef&) const = default;
};

// Parses "--patterns" ("0:3,1:*": layer:head pairs, * = every head of that layer). Throws ss::Error
// naming `flag` for bad syntax or a layer/head outside the model.
std::vector<HeadRef> ParsePatternSpec(const std::string& spec, const ModelConfig& config,
                                      const std::string& flag);

struct AnalyzeOptions {
  int first_k = 4;   // K: alpha_k for k = 0..K-1
  double eps = 0.3;  // Sink_k^eps threshold, in (0, 1]
  AttnPath path = AttnPath::kFused;
  std::vector<HeadRef> patterns;  // heads whose full (T, T) pattern is kept (mean over samples)
  // Called after each sample (done, total) for a progress line; may be empty.
  std::function<void(int64_t, int64_t)> progress;
  // Also the mean next-token NLL over the samples (ConditionResult::loss), from the same forward:
  // trace's validation loss costs the LM head, not a second pass.
  bool loss = false;
};

// Sun et al. 2024, "Massive Activations in Large Language Models", section 2: an activation is
// massive when |x| > 100 and |x| > 1000 x the median |x| of that layer's hidden states.
inline constexpr double kMassiveAbsolute = 100.0;
inline constexpr double kMassiveRelative = 1000.0;

struct Activation {
  int layer = 0;
  int sample = 0;
  int position = 0;
  int dim = 0;
  float value = 0;
  double median_abs = 0;  // median |x| of that sample's layer
  bool massive = false;   // meets Sun et al.'s criterion
};

struct CapturedPattern {
  HeadRef head;
  int T = 0;
  std::vector<float> mean;  // (T, T) A[i][j] averaged over the samples
};

// Results for one condition. Flattened arrays; index helpers below.
struct ConditionResult {
  Condition condition = Condition::kBos;
  int samples = 0;  // N
  int length = 0;   // T
  int n_layers = 0, n_heads = 0, first_k = 0;
  double eps = 0.3;
  std::vector<double> alpha;                 // (K, L, H) mean over samples of alpha_k^{l,h}
  std::vector<double> sink_rate;             // (K) Sink_k^eps over all (l, h)
  std::vector<double> sink_rate_per_layer;   // (K, L)
  std::vector<double> sink_rate_from_layer;  // (K, L) Sink_k^eps[l:] over layers >= l
  // The threshold applied once to the sample-mean alpha instead (a head counts when its mean
  // alpha_k > eps): what a reader of a mean-alpha heatmap sees; lower than the mean of per-sample
  // rates when single samples cross eps.
  std::vector<double> sink_rate_of_mean_alpha;            // (K)
  std::vector<double> sink_rate_of_mean_alpha_per_layer;  // (K, L)
  std::vector<double> top_share;      // (L, H) mean over queries i >= 1 of max_j A[i, j]
  std::vector<int> top_mode;          // (L, H) most frequent top key position (queries i >= 1)
  std::vector<double> top_mode_rate;  // (L, H) share of queries whose top key is top_mode
  std::vector<double> top_p0_rate;    // (L, H) share of queries whose top key is position 0
  std::vector<double> p0_norm_ratio;  // (L) ||h_0|| / median_{i>=1} ||h_i||
  std::vector<double> p1_norm_ratio;  // (L) the same for position 1 (an ordinary position)
  std::vector<double> max_other_norm_ratio;  // (L) max_{i>=1} ||h_i|| / median_{i>=1} ||h_i||
  std::vector<double> median_abs;            // (L) median |x| of the layer's hidden states
  std::vector<int64_t> massive_count;        // (L) massive activations over all samples
  std::vector<std::vector<Activation>> top_activations;  // (L)[<= 3] largest |x|, massive or not
  std::vector<double> p0_cosine;     // (L) mean pairwise cosine of h_0 across samples
  std::vector<double> other_cosine;  // (L) the same over positions >= 1 (pooled)
  std::vector<CapturedPattern> patterns;
  // AnalyzeOptions::loss: mean over samples and positions t < T - 1 of -log p(token t+1 | 0..t),
  // in nats (NaN when not asked for).
  double loss = std::numeric_limits<double>::quiet_NaN();
  // Models with learned sink logits (gpt-oss): the mass each head puts on its sink slot, which
  // the rows' probabilities over the keys then lack (they sum to 1 - alpha_sink).
  bool has_sink_slot = false;
  std::vector<double> alpha_sink;  // (L, H) mean over samples and queries i in [0, T-1]
  double sink_slot_rate = 0;       // share of (l, h) with alpha_sink > eps, per sample
  std::vector<double> sink_slot_rate_per_layer;  // (L)
  // Models with an output gate (gated attention): the gate's mean over heads and dimensions at
  // position 0 and over positions >= 1, per layer, averaged over samples (Qiu et al. report the
  // gate small where a plain model's heads would sink).
  bool has_output_gate = false;
  std::vector<double> gate_p0, gate_rest;  // (L)
  // Per head (L, H): gbar_h(i) is the mean of head h's gate over its Dh values at query i.
  // gate_head_p0 = gbar_h(0), gate_head_rest = mean over i >= 1 of gbar_h(i), and gated_alpha0 =
  // mean over queries i in [0, T-1] of A[i, 0] gbar_h(i): the share of the head's output that comes
  // from position 0 once the gate has scaled it (alpha_0 when the gate is open). NaN on linear
  // layers.
  std::vector<double> gate_head_p0, gate_head_rest, gated_alpha0;
  // Sigmoid attention (weights not normalised): alpha, the top-key share and the cone statistics
  // above are of each row's weights divided by their sum (Gu et al. 2024's proxy attention
  // scores); these are the weights themselves, mean over samples and queries i in [0, T-1]: the
  // weight on position 0 and the row's total (how much the query attends at all).
  bool has_sigmoid_weights = false;
  std::vector<double> alpha0_raw, row_sum;  // (L, H)
  // Each layer's sliding window (0: global). A sliding layer's queries past the window cannot see
  // position 0, so its alpha_0 is reported apart from the global layers'.
  std::vector<int> layer_window;  // (L)
  double sink_rate_global = 0;    // Sink_0^eps over global layers' heads (per sample)
  double sink_rate_sliding = 0;   // the same over sliding layers' heads; NaN if none

  // Gated DeltaNet layers (Qwen3-Next, Qwen3.5): linear attention, no attention map. Their
  // per-head and per-layer attention metrics are NaN (JSON null), the sink rates count the
  // attention layers' heads only, and their hidden-state metrics are as any layer's. Empty: none.
  std::vector<bool> linear_layers;
  bool LinearLayer(int l) const { return !linear_layers.empty() && linear_layers[l]; }

  // Heads whose attention sinks (alpha_0 > eps) while their gate passes at most eps of it
  // (gated_alpha0 <= eps): the gate closes where plain attention would sink. (layer, head).
  std::vector<std::pair<int, int>> GateClosedSinks() const;

  double Alpha(int k, int l, int h) const {
    return alpha[(static_cast<size_t>(k) * n_layers + l) * n_heads + h];
  }
};

// Runs every sample through the model and returns the metrics. All samples must have the same
// length T >= max(2, K). Throws ss::Error if T exceeds the KV cache the model can hold in memory.
ConditionResult AnalyzeSamples(const Model& model, Condition condition,
                               const std::vector<std::vector<int>>& samples,
                               const AnalyzeOptions& options);

}  // namespace ss::analysis
