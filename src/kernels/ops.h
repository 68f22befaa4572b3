// Compute kernels for the forward pass. Plain, vectorisable loops; matrix products go through CBLAS
// (OpenBLAS). Each kernel has a naive reference in tests/test_kernels.cpp.
//
// Shapes use the legend in tensor/tensor.h. All arrays are row-major and contiguous.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/attn_rule.h"
#include "kernels/kinds.h"
#include "kernels/kv_types.h"

namespace ss {

// y (T, out) = x (T, in) · W^T, W (out, in) as nn.Linear stores it; y += bias if bias != null.
void MatMul(const float* x, const float* w, const float* bias, float* y, int T, int in, int out);
// y (out) = W x for one row x (in): MatVecBatch with one job, MatMul's decode path (rows over the
// threads once W is large enough to pay for them).
void MatVec(const float* x, const float* w, float* y, int in, int out);
// One product of MatVecBatch: y (out) = W x (+ bias if not null), W (out, in).
struct MatVecJob {
  const float* w;
  const float* bias;
  float* y;
  int out;
};
// Every job's product of the same x (in) in one parallel region: the jobs' rows taken as one range
// and split over the threads, so a decode step's q, k and v (or gate and up) cost one hand-off
// between threads instead of one each. Each y equals MatVec's bit for bit: a row's dot product is
// computed the same way however the rows are split.
void MatVecBatch(const float* x, int in, std::span<const MatVecJob> jobs);

// out (T, D) = x / sqrt(mean(x^2) + eps) * (weight_offset + weight). `out` may alias `x`.
// weight_offset is 1 for Gemma (Gemma2RMSNorm multiplies by 1 + weight), else 0.
void RmsNorm(const float* x, const float* weight, float* out, int T, int D, float eps,
             float weight_offset = 0.0f);
// out (T, D) = (x - mean) / sqrt(var + eps) * weight + bias (biased variance, as
// torch.nn.LayerNorm).
void LayerNorm(const float* x, const float* weight, const float* bias, float* out, int T, int D,
               float eps);

// Rotary position embedding in place on x (T, n_heads * head_dim); token t uses positions[t].
// Rotates the first rot_dim dims of each head by angle pos * theta^(-2i/rot_dim) for pair i.
// kInterleaved pairs (2i, 2i+1) (llama2.c); kHalf pairs (i, i + rot_dim/2) (HF rotate_half).
void Rope(float* x, std::span<const int> positions, int n_heads, int head_dim, int rot_dim,
          float theta, RopeKind kind);
// The same with explicit inverse frequencies inv_freq (rot_dim / 2): pair i turns by
// pos * inv_freq[i]. Used for rescaled RoPE (linear, Llama 3) where the frequencies are not a pure
// power of theta.
void RopeWithFrequencies(float* x, std::span<const int> positions, int n_heads, int head_dim,
                         int rot_dim, const double* inv_freq, RopeKind kind);
// out (n) = c * tanh(x / c): logit soft-capping (Gemma 2). In place allowed.
void SoftCap(float* x, int64_t n, float cap);

// In-place numerically stable softmax over n values.
void Softmax(float* x, int n);
// The same with one more logit `sink` whose column is dropped after the softmax (a learned sink
// slot); returns its probability, 1 - sum(x). sink = -inf is Softmax, returning 0.
float SoftmaxWithSink(float* x, int n, float sink);
// -log softmax(logits)[target], computed in double: the per-token negative log-likelihood.
double TokenNll(const float* logits, int n, int target);

float Silu(float x);
float Gelu(float x);      // exact erf form (torch "gelu")
float GeluTanh(float x);  // tanh approximation (torch "gelu_new" / "gelu_pytorch_tanh")
// gate (n) = act(gate) * up (SwiGLU when act is SiLU). In place on gate.
void GatedActivation(float* gate, const float* up, int64_t n, ActKind kind);
void ActivationInPlace(float* x, int64_t n, ActKind kind);
// gpt-oss's expert activation (modeling_gpt_oss.py GptOssExperts, alpha = 1.702): with
// g = min(gate, limit) and u = clamp(up, -limit, limit), gate (n) = (u + 1) * g * sigmoid(1.702 g).
// In place on gate.
void ClampedGlu(float* gate, const float* up, int64_t n, float limit);

// Statistics of the attention probabilities, accumulated inside the attention kernel so that the
// (H, T, S) pattern never has to be stored (DESIGN.md "Hook points"). All arrays are optional.
struct AttnStats {
  int first_k = 0;             // K: how many leading key positions to record
  float* first_k_probs;        // (H, T, K) A[h][t][j] for j < K (0 where j is not visible)
  int* top_key;                // (H, T) argmax_j A[h][t][j] (cache index)
  float* top_prob;             // (H, T) the max probability
  float* sum_sq;               // (H, T) sum_j A[h][t][j]^2 (the cone model's concentration term)
  float* sink_prob = nullptr;  // (H, T) the mass on the learned sink slot (0 without sink logits)
  // (H, T) the weights' sum over the keys before the statistics' normalisation: 1 - p_slot for
  // softmax, the unnormalised total for sigmoid attention (how much the query attends at all).
  float* row_sum = nullptr;
};

// What a layer's attention adds to plain causal softmax attention.
//   window: the query sees only the last `window` keys (sliding-window layers); 0: all earlier
//   keys. sink_logits: (H) one learned logit per head that joins every row's softmax as an extra
//   column
//     with no value (gpt-oss, modeling_gpt_oss.py: softmax over [q.k / sqrt(Dh), s_h], the last
//     column dropped), so a row's probabilities over the keys sum to 1 - p_sink. Null: none.
//     A logit of -inf gives plain attention.
//   softcap: scores = c * tanh(scores / c) before the softmax (Gemma 2's attn_logit_softcapping,
//     applied after the 1 / sqrt(Dh) scaling); 0: off.
//   slot_logits, slot_values: a learnable key/value bias (Sun et al. 2024, arXiv 2402.17762,
//     section 4.3; the trainer's attention=kv-bias): one more softmax column per row whose logit
//     is given per head and query, slot_logits (H, T) [h * T + t] (it replaces sink_logits), and
//     whose value slot_values (Hkv, Dh) is added with the slot's probability. Null: none.
//   rule: how a row's scores become weights (kernels/attn_rule.h): null is softmax; other rules
//     (sigmoid, softpick) come from the model's attention variant (model/attention.h). A slot
//     needs a rule that takes one. The statistics describe the weights times the rule's
//     stat_scale (sigmoid: each row divided by its sum); pattern holds the weights themselves.
struct AttnOptions {
  int window = 0;
  const float* sink_logits = nullptr;
  float softcap = 0.0f;
  const float* slot_logits = nullptr;
  const float* slot_values = nullptr;
  const AttnRule* rule = nullptr;
  const AttnRule& Rule() const { return rule ? *rule : SoftmaxRule(); }
};

// Causal grouped-query attention of T new queries over S cached keys (the last T of which are the
// new tokens): query t sees keys [0, S - T + t] (and only the last opt.window of those if it is >
// 0); learned sink logits and soft-capping as AttnOptions says.
//   q (T, H*Dh) rotated;  k, v (S, Hkv*Dh) cache;  out (T, H*Dh)
//   pattern: if not null, receives the full probabilities (H, T, S), zero where masked.
//   bf16: the tiled path's two products (q k^T and p v) with bf16 operands and f32 sums
//         (--precision bf16; kernels/gemm_bf16.h); softmax and statistics stay f32. The
//         materialised path (pattern != null) is always f32, and so are calls with fewer than
//         kBf16AttentionRows queries (decode): packing K and V costs O(S) per call, more than
//         the few queries' products save.
void Attention(const float* q, const float* k, const float* v, float* out, int T, int S,
               int n_heads, int n_kv_heads, int head_dim, const AttnOptions& opt, float* pattern,
               const AttnStats* stats, bool bf16 = false);
inline constexpr int kBf16AttentionRows = 16;

// out (Dh) += p * kv head kvh's kv-bias slot value (opt.slot_values; nothing without one): the
// slot's share of a query's output, which the attention kernels add and which a caller that
// recomputes z from an edited pattern adds back.
void AddSlotValue(const AttnOptions& opt, int kvh, int head_dim, float p, float* out);

// Attention for an attention-sink streaming cache (StreamingLLM, Xiao et al. 2023, section 3.2).
// The cache holds `sinks` fixed rows (the first tokens of the stream) followed by a ring of `ring`
// rows for recent tokens: stream index m >= sinks lives in row sinks + (m - sinks) % ring.
// Query t has stream index m = first_index + t and sees
//   sink rows [0, min(sinks, m + 1))                              scored with q_sink
//   recent stream indices [max(sinks, m - window + 1), m]         scored with q_recent
// Two rotations of the same query let keys stay cached after RoPE at their stream index while every
// score equals the one with positions inside the cache (see docs/STREAMING.md): q_recent is rotated
// at m (relative distance to a recent key = stream distance), q_sink at the query's cache position.
//   q_recent, q_sink (T, H*Dh);  k, v (sinks + ring, Hkv*Dh);  out (T, H*Dh)
// The caller guarantees every visible row holds the right entry (ring >= window - 1 + T).
// opt: learned sink logits and soft-capping as in Attention; opt.window > 0 (a sliding-window
// layer) further limits what the query sees to the keys less than opt.window cache positions before
// it, as a fresh forward over the cache's contents would: sink row j at cache distance (query cache
// position - j), a recent key at its stream distance (the same inside the cache).
void SinkWindowAttention(const float* q_recent, const float* q_sink, const float* k, const float* v,
                         float* out, int T, int n_heads, int n_kv_heads, int head_dim, int sinks,
                         int window, int ring, int64_t first_index, const AttnOptions& opt = {});
// The cache rows of SinkWindowAttention as a streaming cache stores them (--kv-type, f32 included).
// Each row is cut into panels of panel_values values (0: one panel, the whole row); panel g of row
// r is an encoded row of those values (KvEncodeRow) at bytes + g * panel_bytes + r * row_bytes. A
// streaming cache stores panels of whole heads, each panel's rows contiguous (head-major,
// kernels/kv_types.h KvPanelValues); row_bytes = KvRowBytes(type, kv_row) and one panel is the
// row-major layout. Rows with kept_slot[r] >= 0 are f32 rows of `kept` instead (kv_row floats
// each: entries kept exact, --kv-keep). A head reads its slice of a run of rows decoded in
// registers (KvRowDots, KvAddWeightedRows) or, where those do not apply, decoded to f32 a chunk
// at a time: either way the scores and sums are the f32 kernel's on the dequantised cache.
// With f32 set, the rows are plain row-major f32 rows of kv_row floats (the other fields unused).
struct KvRows {
  const float* f32 = nullptr;
  KvType type = KvType::kF32;
  const uint8_t* bytes = nullptr;
  size_t row_bytes = 0;            // from a row of a panel to the next
  int panel_values = 0;            // values of a row per panel; 0: the whole row
  size_t panel_bytes = 0;          // from a panel to the next
  const int* kept_slot = nullptr;  // per row, or null: none kept
  const float* kept = nullptr;
};
void SinkWindowAttention(const float* q_recent, const float* q_sink, const KvRows& k,
                         const KvRows& v, float* out, int T, int n_heads, int n_kv_heads,
                         int head_dim, int sinks, int window, int ring, int64_t first_index,
                         const AttnOptions& opt);

// out (T, H*Dh) = pattern (H, T, S) · V: the second half of attention from given probabilities
// (used when an intervention rewrote the pattern).
void AttentionFromPattern(const float* pattern, const float* v, float* out, int T, int S,
                          int n_heads, int n_kv_heads, int head_dim);

}  // namespace ss
