// sinkscope explain: locate the P0 attention-sink circuit, test it with interventions, and fit the
// cone model (DESIGN.md "explain", issue 5). Everything is measured by running the model with
// hooks:
//
// Clean pass (one forward per sample, reused by everything below):
//   - norm decomposition per layer l: with h = resid_pre, a = attn_out, m = mlp_out and
//     h' = resid_post = h + a + m, let u = h' / ||h'||. Then exactly
//         ||h'|| = u.h + u.a + u.m          (carry + attention + MLP)
//     and u.a splits further over heads: a = sum_h W_O[:, h] z_h (+ b_O), so u.a = sum_h
//     u.(W_O[:, h] z_h) + u.b_O. Reported for position 0 and as the mean over positions >= 1
//     (per-head terms for positions >= 1 on up to kOtherPositions evenly spaced positions, so the
//     cost stays O(D^2) per layer rather than O(T D^2)). A family whose residual is not the plain
//     sum (post-norms) shows the gap as "unexplained".
//   - Sink_0^eps per layer (alpha_0 from the fused attention statistics), the strongest sink on any
//     other position k in [1, T/2] (alpha_k from the pattern), P0 norm ratio per layer.
//   - amplification layer: first layer whose mean P0 norm ratio exceeds the threshold (default 3);
//     sink onset layer: first layer whose Sink_0^eps rate exceeds the threshold (default 0.5).
//   - cone model per head (see ConeFit).
// Interventions (one forward each, on the first `intervention_samples` samples), all at position 0
// only: zero / mean MLP output (hook_mlp_out; mean = the mean over positions >= 1 of the same
// sample), zero one head (hook_z), patch h_0 after block l from a donor input with a different
// first token (hook_resid_post; the donor's first token is the token at position 1 of another
// sample), "first-token" (the donor itself: semantics-independence) and shift (the donor's first
// token prepended and the last token dropped, so the former P0 content sits at position 1). Effect
// = Sink_0^eps over the layers after the intervened one, and the largest P0 norm ratio over layers
// >= that layer, clean vs intervened. Circuit search: greedy over zero-ablations of MLPs and heads
// at P0 (see CircuitSearch).
//
// Cheap ranking, exact verification (issue 33). The L H head rows dominate the cost of the table
// (one forward each), so by default every MLP, head and patch row is first *estimated* and only
// the `verify_top` best by estimate are measured with the full intervention; the circuit search
// draws its candidates from the measured rows only, so the circuit and the verdict rest on
// measured effects alone. The estimate (method "p0-recompute") exploits the causal mask: position
// 0 attends only to itself, so an intervention at P0 in block l changes h_0 from block l on
// exactly as a forward of position 0 alone does (all rows of block l in one call of H + 2
// one-token rows, ForwardRequest::self_attention_only; a patch row reads the donor's own forward).
// The new h_0 reaches the other positions only through its key and value in later blocks: the
// estimate keeps every other position clean (recorded once per sample) and recomputes their
// attention on position 0 from the new key 0 against the clean queries, keeping the clean
// scores of keys >= 1: with p_i0 the clean probability and s_i0 the clean score,
//     p'_i0 = sigmoid(logit(p_i0) + g(s'_i0) - g(s_i0))   (g(s) = s; log sigmoid(s) for sigmoid
// attention), exact for h_0 (so for the P0 norm ratio's numerator) and for the block right after
// the intervention, first order beyond it (the other positions' own changes, through V_0, are
// left out). `exhaustive` measures every row (and still estimates them, to compare).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/model.h"

namespace ss::explain {

inline constexpr int kOtherPositions = 16;

// kMixer: a Gated DeltaNet layer's output (Qwen3.5 / Qwen3-Next linear attention), before its
// out_proj. kGate: the output gates of a gated-attention layer's heads; knocking a gate out at
// position 0 forces it open (1) under zero-ablation, to its mean over positions >= 1 under
// mean-ablation.
enum class ComponentKind { kMlp, kHead, kMixer, kGate };
struct Component {
  ComponentKind kind = ComponentKind::kMlp;
  int layer = 0;
  int head = -1;             // kHead only
  std::string Name() const;  // "mlp.1", "head.0.3", "mixer.2", "gate.3"
  bool operator==(const Component&) const = default;
};

// How a component's output at position 0 is knocked out: set to zero, or to its mean over the
// positions >= 1 of the same input (mean-ablation, which keeps the activation on-distribution;
// zero-ablation can push later layers off it and even strengthen a sink).
enum class Ablation { kZero, kMean };
std::string AblationName(Ablation a);  // "zero", "mean"

struct ExplainOptions {
  double eps = 0.3;                      // Sink_k^eps threshold on alpha_k, in (0, 1]
  double amplification_threshold = 3.0;  // P0 norm ratio, > 0
  double onset_threshold = 0.5;          // per-layer sink rate, in (0, 1)
  double share = 0.8;            // share of the downstream sink a circuit must remove, (0, 1]
  int max_components = 6;        // greedy search stops here
  int greedy_width = 8;          // candidates (best single effects) tried per later step
  int intervention_samples = 8;  // samples the interventions run on; 0: all
  std::function<void(int64_t, int64_t)> progress;  // (forwards done, forwards planned)
  Ablation ablation = Ablation::kMean;  // for the head rows, the circuit search and --ablate
  std::vector<Component> ablate;        // a set given by the user (--ablate), measured as "set"
  // Interventions at block l resume the forward at block l from the clean run's residual stream
  // (blocks before l cannot change), keeping the clean metrics of blocks < l. Exact; false runs
  // every intervention from the embedding (the tests compare both).
  bool resume_at_block = true;
  // Rows measured after the P0 estimates (see the top of this file): the verify_top best MLP,
  // head and patch rows by estimate (>= 1; more than there are rows measures them all), or every
  // row with `exhaustive` (--exhaustive).
  int verify_top = 16;
  bool exhaustive = false;
  // The estimates rank the rows from the first estimate_samples intervention samples (0: all of
  // them); a row the ranking leaves unmeasured reports the estimate over those samples.
  int estimate_samples = 2;
  // Sample counts are upper bounds (issue 33: no work the verdict does not need). Intervention
  // samples are measured one at a time; after at least two, the table stops once the verdict and
  // the circuit are settled (StoppingSummary); early_stop = false measures all of them.
  bool early_stop = true;
  double confidence = 0.95;  // of the stopping rule's one-sided bounds, in [0.5, 1)
};

// Validates options; throws ss::Error naming the flag (--eps, --share, ...).
void CheckOptions(const ExplainOptions& options);

// Parses "mlp.1,head.0.3" (components by layer, head). Throws ss::Error naming `flag` for bad
// syntax or a layer / head outside the model.
std::vector<Component> ParseComponents(const std::string& spec, const ModelConfig& config,
                                       const std::string& flag);

struct LayerDecomposition {
  // Learned sink logits (gpt-oss): mean alpha_sink over the layer's heads and the share above eps.
  double mean_alpha_sink = 0, sink_slot_rate = 0;
  // Position 0 (means over samples).
  double p0_norm_pre = 0, p0_norm_post = 0;
  double p0_carry = 0, p0_attn = 0, p0_mlp = 0, p0_unexplained = 0;  // sum = p0_norm_post
  double p0_cos_pre = 0, p0_cos_attn = 0, p0_cos_mlp = 0;            // cosine with h'_0
  double p0_attn_norm = 0, p0_mlp_norm = 0;
  std::vector<double> p0_head;  // (H) u.(W_O[:, h] z_h)
  // Positions >= 1 (means over positions, then samples).
  double other_norm_pre = 0, other_norm_post = 0;
  double other_carry = 0, other_attn = 0, other_mlp = 0;
  double other_cos_attn = 0, other_cos_mlp = 0;
  std::vector<double> other_head;  // (H)
  double p0_norm_ratio = 0;        // ||h'_0|| / median_{i>=1} ||h'_i||
  double sink_rate = 0;            // Sink_0^eps of this layer
  double mean_alpha0 = 0;          // mean over heads of alpha_0
  double other_sink_rate = 0;      // share of heads with max_{1<=k<=T/2} alpha_k > eps
  // A Gated DeltaNet layer: no attention map, so sink_rate, mean_alpha0 and other_sink_rate are
  // NaN, and no head terms or cone fits.
  bool linear = false;
  // Gated attention: per head (H), the mean over queries of alpha_0 at query i times the head's
  // mean gate at i (analyze's gate-weighted alpha_0), and the share of heads above eps (means
  // over samples). Empty without output gates.
  std::vector<double> gated_alpha0;
  double gated_sink_rate = 0;
};

// The effect quantities of one intervention row, as measured or as estimated.
struct EffectValues {
  double sink_after = 0;        // Sink_0^eps over layers > layer with the intervention
  double removed_share = 0;     // 1 - after / clean over those layers (0 when clean is 0)
  double norm_ratio_after = 0;  // max over layers >= max(layer, 0) of the mean P0 norm ratio
  // Over the search's target layers (>= EstimateSummary::target_from_layer): the share of
  // Sink_0^eps removed (what the circuit search ranks single components by) and the share of the
  // attention mass on position 0 removed (1 - sum alpha_0 after / clean; continuous, so it also
  // orders rows that move no head across eps).
  double target_share = 0;
  double alpha0_share = 0;
  std::vector<double> layer_sink_after;        // (L) Sink_0^eps per layer
  std::vector<double> layer_p0_norm_after;     // (L) mean ||h'_0|| per layer
  std::vector<double> layer_norm_ratio_after;  // (L) mean P0 norm ratio per layer
};

struct InterventionEffect {
  // "mlp-zero", "mlp-mean", "head-mean" or "head-zero" (options.ablation), "mixer-zero",
  // "mixer-mean" (Gated DeltaNet layers), "gate-open", "gate-mean" (output gates), "patch-p0",
  // "first-token", "shift", "set" (--ablate; layer = its last layer)
  std::string kind;
  int layer = -1;  // intervened layer (-1: the input)
  int head = -1;
  int samples = 0;
  double sink_clean = 0;        // Sink_0^eps over layers > layer, clean
  double sink_after = 0;        // the same with the intervention
  double removed_share = 0;     // 1 - after / clean (0 when clean is 0)
  double norm_ratio_clean = 0;  // max over layers >= max(layer, 0) of the mean P0 norm ratio
  double norm_ratio_after = 0;
  double sink1_after = -1;  // shift only: Sink_1^eps over all layers (the former P0 content)
  std::vector<double> layer_sink_after;       // (L) Sink_0^eps per layer with the intervention
  double target_share = 0, alpha0_share = 0;  // see EffectValues
  std::vector<double> layer_p0_norm_after, layer_norm_ratio_after;  // (L) each
  // Where the values above come from: measured (true: full intervened forwards, method "exact")
  // or, for a row that was estimated but not verified, the estimate (method "p0-recompute").
  bool measured = true;
  bool estimated = false;  // MLP, head and patch rows: `estimate` and `rank` are set
  EffectValues estimate;
  int rank = -1;  // 1-based rank by estimate among the estimated rows (target share, then alpha_0)
  const char* Method() const { return measured ? "exact" : "p0-recompute"; }
};

// How the intervention table was ranked and verified.
struct EstimateSummary {
  bool exhaustive = false;
  int verify_top = 0;         // the option
  int candidates = 0;         // rows estimated (2 L MLP + L H head + L - 1 patch rows)
  int verified = 0;           // of them measured
  int target_from_layer = 1;  // max(1, onset layer); 1 without an onset
  // Spearman's rank correlation, estimate vs measurement over the verified rows, of target_share,
  // alpha0_share and norm_ratio_after (NaN where undefined: fewer than two rows, or one side
  // constant, e.g. no sink anywhere).
  double spearman_target = 0, spearman_alpha0 = 0, spearman_norm_ratio = 0;
  int64_t recompute_calls = 0;  // forwards of position-0 rows (one per block and estimated sample)
  int64_t recompute_rows = 0;   // one-token block evaluations in them
  int samples = 0;              // intervention samples the estimates ran on
};

// When the intervention table stopped adding samples. The verdict comes from the clean pass
// (onset, slot and other-position layers); only a P0 sink has a circuit to search. So:
//   - no P0 sink: nothing the verdict needs comes from the interventions; the table stops after
//     min_samples (2) samples ("verdict from the clean pass");
//   - a P0 sink: after each sample n >= 2 the circuit is searched on samples 0..n-1, and the table
//     stops once (a) the search gives the same outcome (found or not, and the same components) as
//     on one sample fewer, and (b) one-sided Student t bounds at `confidence` over the per-sample
//     shares of the target removed put the outcome clear of --share: a found circuit's lower
//     bound >= share and, with several components, each one-smaller subset's upper bound < share
//     (it is minimal); no circuit found: the best set's upper bound < share ("circuit settled").
// With a constant share (a planted circuit removes all of every sample's sink) the bounds equal
// the mean and two samples settle it; noisy shares need more. Otherwise the table runs to
// upper_bound ("upper bound reached"), or early stopping is off ("early stopping off").
struct StoppingSummary {
  bool early_stop = true;
  double confidence = 0.95;
  int min_samples = 0;  // min(2, upper_bound)
  int upper_bound = 0;  // --intervention-samples (at most the samples)
  int used = 0;         // intervention samples measured
  std::string reason;
  // The last search's bounds on the per-sample removed share (NaN when not computed): of the
  // circuit (or best set), and the largest upper bound over its one-smaller subsets.
  double circuit_lower = NAN, circuit_upper = NAN, subset_upper = NAN;
};

// Greedy search: the target is the number of (sample, layer, head) with alpha_0 > eps over layers
// >= from_layer = max(1, onset layer) (attention in a layer is computed before that layer's own
// outputs, so block-0 sinks cannot be removed by any component). Step 1 takes the component whose
// zero-ablation at P0 removes the largest share; each later step tries the greedy_width best
// remaining single components added to the set, until the share is reached or max_components.
// Then each member is dropped again if the rest still reaches the share (a smaller set).
struct CircuitSearch {
  bool ran = false;
  bool found = false;
  int from_layer = 0;
  double target_clean = 0;  // Sink_0^eps over layers >= from_layer, clean
  std::vector<Component> components;
  double removed_share = 0;                // of the final set
  std::vector<double> removed_after_step;  // share after each greedy step
};

// Cone model (Gu et al.; DESIGN.md): value vectors of a head lie in a cone with axis u (normalised
// mean of the unit value vectors) and mean cosine a to u; then E||o_i||^2 ~ a^2 + (1 - a^2) sum_j
// p_ij^2 for unit-norm values. Measured norms are normalised the same way:
// ||o_i||^2 / mean_j ||v_j||^2 (o = hook_z of the head, v its values, same sample).
struct ConeFit {
  int layer = 0, head = 0;
  double a = 0;                 // mean over samples
  double correlation = 0;       // Pearson, predicted vs measured, pooled over samples and positions
  double p0_predicted_max = 0;  // share of samples where position 0 has the largest predicted norm
  double p0_measured_max = 0;   // the same for the measured norm
  double predicted_p0 = 0, measured_p0 = 0;        // means at position 0
  double predicted_other = 0, measured_other = 0;  // means over positions >= 1
};

struct ExplainResult {
  int samples = 0, length = 0, n_layers = 0, n_heads = 0;
  ExplainOptions options;
  std::vector<LayerDecomposition> layers;  // (L)
  int amplification_layer = -1;
  int onset_layer = -1;
  int other_sink_layer = -1;   // first layer whose other_sink_rate exceeds the onset threshold
  double sink_rate = 0;        // Sink_0^eps over all layers
  bool has_sink_slot = false;  // the model has learned sink logits (gpt-oss)
  double sink_slot_rate = 0;   // share of heads with alpha_sink > eps, over all layers
  int slot_onset_layer = -1;   // first layer whose sink_slot_rate exceeds the onset threshold
  std::vector<InterventionEffect> interventions;
  CircuitSearch circuit;
  std::vector<ConeFit> cones;  // (L * H)
  // "p0-circuit-in-blocks-0-1", "p0-circuit-elsewhere", "p0-sink-no-circuit-found",
  // "sink-suppressed-by-output-gate" (the attention maps sink on position 0 from the onset layer,
  // but in no layer do more than the onset threshold's share of heads pass more than eps of it
  // through their output gates: the gate-weighted alpha_0), "sink-on-learned-slot" (the mass is
  // on learned sink logits, not a position), "sink-not-at-p0", "no-sink".
  std::string verdict;
  int64_t forward_passes = 0;
  int64_t block_evaluations = 0;  // blocks run over all passes (< passes x L when resuming)
  EstimateSummary estimates;
  StoppingSummary stopping;
  // Wall time per phase; estimate_seconds is the part of intervention_seconds spent on the P0
  // estimates and the ranking.
  double clean_seconds = 0, intervention_seconds = 0, search_seconds = 0, estimate_seconds = 0;
};

// All samples must have the same length T >= 4.
ExplainResult Explain(const Model& model, const std::vector<std::vector<int>>& samples,
                      const ExplainOptions& options);

}  // namespace ss::explain
