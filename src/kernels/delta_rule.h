// Gated DeltaNet's token mixer (Yang, Kautz and Hatamizadeh 2024, "Gated Delta Networks: Improving
// Mamba2 with Delta Rule", arXiv 2412.06464; the linear-attention layers of Qwen3-Next and
// Qwen3.5): the causal short convolution with its state, l2-normed keys and queries, and the gated
// delta rule over a (dk, dv) state per value head, in two forms that compute the same thing:
//  - recurrent (decode, and the reference): per token, S <- exp(g) S; S <- S + k (beta (v - S^T
//  k))^T;
//    o = S^T q (the read after the update, as transformers' torch_recurrent_gated_delta_rule);
//  - chunked (prefill): blocks of kDeltaChunk tokens in the WY form of the paper's section 3 (a
//    unit lower-triangular solve per block, then block products), T x state work instead of T^2.
// Shapes (row-major): q, k (T, n_k, dk); v, out (T, n_v, dv); g, beta (T, n_v); state (n_v, dk,
// dv). Value head h reads key head h / (n_v / n_k). q and k enter as the layer computed them; the
// kernel l2-normalises both per head (eps 1e-6 under the root) and scales q by 1 / sqrt(dk).
#pragma once

#include <cstdint>

namespace ss {

inline constexpr int kDeltaChunk = 64;
inline constexpr float kDeltaL2Eps = 1e-6f;

struct DeltaRuleShape {
  int n_k = 0, n_v = 0, dk = 0, dv = 0;  // n_v a multiple of n_k
};

// Runs T tokens on `state` (updated in place, from zero at a sequence's start). `chunked` picks the
// form; both agree to float rounding (tests/test_delta_rule.cpp).
void GatedDeltaRule(const float* q, const float* k, const float* v, const float* g,
                    const float* beta, float* state, float* out, int T, const DeltaRuleShape& s,
                    bool chunked);

// The depthwise causal convolution over time with SiLU, per channel c of C:
// out[t][c] = silu(sum_j w[c][j] x[t - (K - 1) + j][c]), with the K - 1 inputs before the first
// token taken from `state` (C, K - 1; oldest first), which then holds the last K - 1 inputs.
void CausalConvSilu(const float* x, const float* w, float* state, float* out, int T, int C, int K);

// The gated RMSNorm of the mixer's output, per (token, head) row of dv values:
// y = w * (o / sqrt(mean(o^2) + eps)) * silu(z); w (dv) is shared by the heads. In place on o.
void GatedRmsNorm(float* o, const float* z, const float* w, int rows, int dv, float eps);

}  // namespace ss
