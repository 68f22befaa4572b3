// Gated DeltaNet's token mixer as Qwen3-Next and Qwen3.5 run it (docs/specs/qwen3_next.md section
// 4, from transformers' Qwen3NextGatedDeltaNet / Qwen3_5GatedDeltaNet): project q, k, v, z, b, a
// from the normed input; a causal depthwise convolution with SiLU over the q | k | v channels;
// beta = sigmoid(b), the log decay g = -exp(A_log) softplus(a + dt_bias); the gated delta rule
// (kernels/delta_rule.h: chunked over a prefill, recurrent for one token); the gated RMSNorm
// (plain weight, gate silu(z)); the output projection. No softmax and no attention map: the layer
// reads the past only through its (nv, dk, dv) state and the convolution's last K - 1 inputs.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/delta_rule.h"
#include "model/blocks.h"

namespace ss {

namespace {

// Rows of a prefill the mixer works on at a time: the state carries across chunks, so the result
// is the whole call's, with (rows, C) buffers instead of (T, C). A multiple of kDeltaChunk, so
// the chunked rule's blocks fall where they would over the whole call.
constexpr int kLinearRows = 512;
static_assert(kLinearRows % kDeltaChunk == 0);

// softplus(x) = log(1 + e^x), as torch computes it (the identity above 20).
float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

}  // namespace

void LinearAttention(ForwardContext& ctx, int layer, const float* in, float* out) {
  const ModelConfig& c = ctx.config;
  const LayerWeights& w = ctx.model.weights.layers[layer];
  RunState& s = ctx.state;
  const int T = ctx.T, D = c.dim, nv = c.linear_v_heads, dv = c.linear_v_dim;
  const int Kd = c.linear_qk_dim(), Vd = c.linear_value_dim(), K = c.linear_conv;
  Tensor& conv_state = ctx.cache.conv_state[layer];
  Tensor& delta_state = ctx.cache.delta_state[layer];
  SS_ASSERT(!conv_state.empty() && !delta_state.empty());
  auto clear_state = [&] {
    std::fill_n(conv_state.data(), conv_state.numel(), 0.0f);
    std::fill_n(delta_state.data(), delta_state.numel(), 0.0f);
  };
  // A call that starts the sequence starts from zero (the cache may hold an earlier sequence's).
  const bool starts = ctx.request.stream ? ctx.request.stream->first_index == 0 : ctx.start == 0;
  if (starts) clear_state();
  // Each token alone (self_attention_only: T one-token sequences) runs one row at a time from
  // zero; otherwise rows in chunks that carry the state.
  const bool alone = ctx.request.self_attention_only;
  const int chunk = alone ? 1 : std::min(T, kLinearRows);
  // Per row: q, k (Kd each), v, z (Vd each), their convolved q, k, v, the output o (Vd), b, a,
  // beta and g (nv each).
  const int64_t per_row = 4 * static_cast<int64_t>(Kd) + 4 * static_cast<int64_t>(Vd) + 4 * nv;
  if (s.linear.numel() < chunk * per_row) s.linear = Tensor::Zeros({chunk * per_row});
  float* xq = s.linear.data();
  float* xk = xq + static_cast<int64_t>(chunk) * Kd;
  float* xv = xk + static_cast<int64_t>(chunk) * Kd;
  float* z = xv + static_cast<int64_t>(chunk) * Vd;
  float* cq = z + static_cast<int64_t>(chunk) * Vd;
  float* ck = cq + static_cast<int64_t>(chunk) * Kd;
  float* cv = ck + static_cast<int64_t>(chunk) * Kd;
  float* o = cv + static_cast<int64_t>(chunk) * Vd;
  float* b = o + static_cast<int64_t>(chunk) * Vd;
  float* a = b + static_cast<int64_t>(chunk) * nv;
  const DeltaRuleShape shape{c.linear_k_heads, nv, c.linear_k_dim, dv};
  const float* conv_w = w.lin_conv.data();  // (C, K): q channels, then k, then v
  float* conv_h = conv_state.data();        // (C, K - 1) in the same channel order
  const int64_t hist = K - 1;
  for (int t0 = 0; t0 < T; t0 += chunk) {
    const int rows = std::min(chunk, T - t0);
    if (alone) clear_state();
    const float* x = in + static_cast<int64_t>(t0) * D;
    ProjectEach(x,
                {{w.lin_wq, Packed(w, &LayerPacked::lin_wq), Tensor(), xq, Kd},
                 {w.lin_wk, Packed(w, &LayerPacked::lin_wk), Tensor(), xk, Kd},
                 {w.lin_wv, Packed(w, &LayerPacked::lin_wv), Tensor(), xv, Vd},
                 {w.lin_wz, Packed(w, &LayerPacked::lin_wz), Tensor(), z, Vd}},
                rows, D);
    ProjectEach(x, {{w.lin_wb, nullptr, Tensor(), b, nv}, {w.lin_wa, nullptr, Tensor(), a, nv}},
                rows, D);
    CausalConvSilu(xq, conv_w, conv_h, cq, rows, Kd, K);
    CausalConvSilu(xk, conv_w + static_cast<int64_t>(Kd) * K, conv_h + Kd * hist, ck, rows, Kd, K);
    CausalConvSilu(xv, conv_w + static_cast<int64_t>(2 * Kd) * K, conv_h + 2 * Kd * hist, cv, rows,
                   Vd, K);
    // beta = sigmoid(b) in place of b; g = -exp(A_log) softplus(a + dt_bias) in place of a.
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < nv; ++h) {
        const int64_t i = static_cast<int64_t>(r) * nv + h;
        b[i] = 1.0f / (1.0f + std::exp(-b[i]));
        a[i] = -std::exp(w.lin_a_log[h]) * Softplus(a[i] + w.lin_dt_bias[h]);
      }
    GatedDeltaRule(cq, ck, cv, a, b, delta_state.data(), o, rows, shape, rows > 1);
    if (ctx.HookActive(HookPoint::kLinearOut, layer))
      ctx.RunHook(HookPoint::kLinearOut, layer, o, {rows, nv, dv});
    GatedRmsNorm(o, z, w.lin_norm.data(), rows * nv, dv, c.norm_eps);
    Project(o, w.lin_out, Packed(w, &LayerPacked::lin_out), Tensor(),
            out + static_cast<int64_t>(t0) * D, rows, Vd, D);
  }
  if (ctx.HookActive(HookPoint::kLinearState, layer))
    ctx.RunHook(HookPoint::kLinearState, layer, delta_state.data(),
                {nv, c.linear_k_dim, c.linear_v_dim});
  // The layer has no attention map: its statistics rows are NaN, which the analyses read as
  // "linear attention" (never as zeros).
  if (AttnStatsBuffers* st = ctx.request.stats; st && st->first_k > 0) {
    const int64_t n = static_cast<int64_t>(c.n_heads) * T, offset = layer * n;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::fill_n(st->first_k_probs.data() + offset * st->first_k, n * st->first_k, nan);
    std::fill_n(st->top_prob.data() + offset, n, nan);
    std::fill_n(st->sum_sq.data() + offset, n, nan);
    std::fill_n(st->sink_prob.data() + offset, n, nan);
    std::fill_n(st->row_sum.data() + offset, n, nan);
    std::fill_n(st->top_key.data() + offset, n, -1);
  }
  if (ctx.HookActive(HookPoint::kAttnOut, layer))
    ctx.RunHook(HookPoint::kAttnOut, layer, out, {T, D});
}

}  // namespace ss
