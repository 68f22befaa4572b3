#include "kernels/delta_rule.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"

namespace ss {
namespace {

// Each (token, head) row of x (T, n, d) divided by its l2 norm (eps under the root), times scale,
// into out (T, n, d).
void L2Normalise(const float* x, int T, int n, int d, float scale, float* out) {
  for (int64_t r = 0; r < static_cast<int64_t>(T) * n; ++r) {
    const float* row = x + r * d;
    double ss = 0;
    for (int i = 0; i < d; ++i) ss += static_cast<double>(row[i]) * row[i];
    const float f = static_cast<float>(scale / std::sqrt(ss + kDeltaL2Eps));
    for (int i = 0; i < d; ++i) out[r * d + i] = row[i] * f;
  }
}

// A buffer of at least n floats kept by the calling thread: decode runs the rule once a token per
// layer, and its scratch is reused instead of allocated each time.
float* Scratch(std::vector<float>& buffer, size_t n) {
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

// One value head over T tokens, token by token. qh / kh point at the head's key head in token 0;
// rows are `stride_qk` apart, v / out rows `stride_v`, g / beta `n_v`.
void RecurrentHead(const float* qh, const float* kh, const float* vh, const float* gh,
                   const float* bh, float* S, float* oh, int T, int dk, int dv, int64_t stride_qk,
                   int64_t stride_v, int n_v) {
  thread_local std::vector<float> m_buffer;
  float* m = Scratch(m_buffer, dv);
  for (int t = 0; t < T; ++t) {
    const float* q = qh + t * stride_qk;
    const float* k = kh + t * stride_qk;
    const float* v = vh + t * stride_v;
    const float decay = std::exp(gh[static_cast<int64_t>(t) * n_v]);
    const float beta = bh[static_cast<int64_t>(t) * n_v];
    std::fill(m, m + dv, 0.0f);
    for (int i = 0; i < dk; ++i) {
      float* s = S + static_cast<int64_t>(i) * dv;
      for (int j = 0; j < dv; ++j) {
        s[j] *= decay;
        m[j] += s[j] * k[i];
      }
    }
    for (int j = 0; j < dv; ++j) m[j] = beta * (v[j] - m[j]);  // the delta, in place
    float* o = oh + t * stride_v;
    std::fill(o, o + dv, 0.0f);
    for (int i = 0; i < dk; ++i) {
      float* s = S + static_cast<int64_t>(i) * dv;
      for (int j = 0; j < dv; ++j) {
        s[j] += k[i] * m[j];
        o[j] += s[j] * q[i];
      }
    }
  }
}

// One value head in blocks of kDeltaChunk tokens (the WY form). Per block of n tokens with the
// cumulative log-decay G and the state S entering it:
//   A[i][j] = beta_i (k_i . k_j) exp(G_i - G_j) for j < i;
//   (I + A) V' = diag(beta) (V - diag(exp(G)) K S), by forward substitution;
//   o_i = exp(G_i) S^T q_i + sum_{j <= i} (q_i . k_j) exp(G_i - G_j) V'_j;
//   S <- exp(G_last) S + sum_j exp(G_last - G_j) k_j V'_j^T.
// The products with S and the block's (n x n) score matrices are sgemm calls (inside the heads'
// parallel loop, so single-threaded); only the forward substitution is a loop.
void ChunkedHead(const float* qh, const float* kh, const float* vh, const float* gh,
                 const float* bh, float* S, float* oh, int T, int dk, int dv, int64_t stride_qk,
                 int64_t stride_v, int n_v) {
  const int C = kDeltaChunk;
  thread_local std::vector<float> buffer;
  float* G = Scratch(buffer, static_cast<size_t>(C) * (1 + 2 * C + 3 * dv + dk));
  float* KK = G + C;                             // (n, n) k_i . k_j, then A
  float* QK = KK + C * C;                        // (n, n) q_i . k_j, then the decayed causal scores
  float* KS = QK + C * C;                        // (n, dv) K S
  float* QS = KS + static_cast<size_t>(C) * dv;  // (n, dv) Q S
  float* U = QS + static_cast<size_t>(C) * dv;   // (n, dv) V'
  float* Kd = U + static_cast<size_t>(C) * dv;   // (n, dk) exp(G_last - G_j) k_j
  const int lqk = static_cast<int>(stride_qk), lv = static_cast<int>(stride_v);
  for (int c0 = 0; c0 < T; c0 += C) {
    const int n = std::min(C, T - c0);
    const float* Kc = kh + c0 * stride_qk;
    const float* Qc = qh + c0 * stride_qk;
    const float* Vc = vh + c0 * stride_v;
    float* Oc = oh + c0 * stride_v;
    float acc = 0;
    for (int i = 0; i < n; ++i) G[i] = acc += gh[static_cast<int64_t>(c0 + i) * n_v];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, dv, dk, 1.0f, Kc, lqk, S, dv, 0.0f,
                KS, dv);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, dv, dk, 1.0f, Qc, lqk, S, dv, 0.0f,
                QS, dv);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, dk, 1.0f, Kc, lqk, Kc, lqk, 0.0f, KK,
                n);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, dk, 1.0f, Qc, lqk, Kc, lqk, 0.0f, QK,
                n);
    // V' = (I + A)^-1 diag(beta) (V - diag(exp(G)) K S), one row at a time.
    for (int i = 0; i < n; ++i) {
      const float beta = bh[static_cast<int64_t>(c0 + i) * n_v], eg = std::exp(G[i]);
      float* u = U + static_cast<size_t>(i) * dv;
      const float* v = Vc + i * stride_v;
      const float* ks = KS + static_cast<size_t>(i) * dv;
      for (int b = 0; b < dv; ++b) u[b] = beta * (v[b] - eg * ks[b]);
      for (int j = 0; j < i; ++j) {
        const float aij = beta * KK[i * n + j] * std::exp(G[i] - G[j]);
        const float* uj = U + static_cast<size_t>(j) * dv;
        for (int b = 0; b < dv; ++b) u[b] -= aij * uj[b];
      }
    }
    // O = diag(exp(G)) Q S + (causal decayed Q K^T) V'.
    for (int i = 0; i < n; ++i) {
      float* row = QK + i * n;
      for (int j = 0; j < n; ++j) row[j] = j <= i ? row[j] * std::exp(G[i] - G[j]) : 0.0f;
      float* o = Oc + i * stride_v;
      const float eg = std::exp(G[i]);
      const float* qs = QS + static_cast<size_t>(i) * dv;
      for (int b = 0; b < dv; ++b) o[b] = eg * qs[b];
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, dv, n, 1.0f, QK, n, U, dv, 1.0f, Oc,
                lv);
    // S <- exp(G_last) S + Kd^T V'.
    const float last = G[n - 1];
    for (int j = 0; j < n; ++j) {
      const float f = std::exp(last - G[j]);
      const float* k = Kc + j * stride_qk;
      for (int a = 0; a < dk; ++a) Kd[static_cast<size_t>(j) * dk + a] = f * k[a];
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, dk, dv, n, 1.0f, Kd, dk, U, dv,
                std::exp(last), S, dv);
  }
}

float Silu(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace

void GatedDeltaRule(const float* q, const float* k, const float* v, const float* g,
                    const float* beta, float* state, float* out, int T, const DeltaRuleShape& s,
                    bool chunked) {
  SS_ASSERT(s.n_k > 0 && s.n_v % s.n_k == 0 && s.dk > 0 && s.dv > 0 && T >= 0);
  if (T == 0) return;
  thread_local std::vector<float> q_buffer, k_buffer;
  const size_t n = static_cast<size_t>(T) * s.n_k * s.dk;
  float* qn = Scratch(q_buffer, n);
  float* kn = Scratch(k_buffer, n);
  L2Normalise(q, T, s.n_k, s.dk, 1.0f / std::sqrt(float(s.dk)), qn);
  L2Normalise(k, T, s.n_k, s.dk, 1.0f, kn);
  const int ratio = s.n_v / s.n_k;
  const int64_t stride_qk = static_cast<int64_t>(s.n_k) * s.dk;
  const int64_t stride_v = static_cast<int64_t>(s.n_v) * s.dv;
#pragma omp parallel for schedule(static)
  for (int h = 0; h < s.n_v; ++h) {
    const int64_t qk_off = static_cast<int64_t>(h / ratio) * s.dk;
    const int64_t v_off = static_cast<int64_t>(h) * s.dv;
    float* S = state + static_cast<int64_t>(h) * s.dk * s.dv;
    (chunked ? ChunkedHead : RecurrentHead)(qn + qk_off, kn + qk_off, v + v_off, g + h, beta + h, S,
                                            out + v_off, T, s.dk, s.dv, stride_qk, stride_v, s.n_v);
  }
}

void CausalConvSilu(const float* x, const float* w, float* state, float* out, int T, int C, int K) {
  SS_ASSERT(K >= 1 && K <= 64 && C >= 1 && T >= 0);
  const int H = K - 1;  // history columns
  // Blocks of channels, each walking the tokens: a token's row of the block is contiguous, where
  // a channel at a time strided through x by C.
  constexpr int kBlock = 64;
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(T) * C >= 65536)
  for (int c0 = 0; c0 < C; c0 += kBlock) {
    const int nc = std::min(kBlock, C - c0);
    float wt[64][kBlock];  // (tap, channel)
    for (int c = 0; c < nc; ++c)
      for (int j = 0; j < K; ++j) wt[j][c] = w[static_cast<int64_t>(c0 + c) * K + j];
    float acc[kBlock];
    for (int t = 0; t < T; ++t) {
      std::fill(acc, acc + nc, 0.0f);
      // Tap j reads the input K - 1 - j tokens back; those before token 0 come from the state.
      for (int j = 0; j < K; ++j) {
        const int tau = t - (K - 1 - j);
        if (tau >= 0) {
          const float* src = x + static_cast<int64_t>(tau) * C + c0;
          for (int c = 0; c < nc; ++c) acc[c] += wt[j][c] * src[c];
        } else {
          for (int c = 0; c < nc; ++c) acc[c] += wt[j][c] * state[(c0 + c) * H + H + tau];
        }
      }
      float* dst = out + static_cast<int64_t>(t) * C + c0;
      for (int c = 0; c < nc; ++c) dst[c] = Silu(acc[c]);
    }
    // The last K - 1 inputs, oldest first: from the state where T < K - 1.
    for (int c = 0; c < nc; ++c) {
      float* hist = state + static_cast<int64_t>(c0 + c) * H;
      float keep[64];
      for (int i = 0; i < H; ++i) {
        const int tau = T - H + i;
        keep[i] = tau >= 0 ? x[static_cast<int64_t>(tau) * C + c0 + c] : hist[H + tau];
      }
      std::copy(keep, keep + H, hist);
    }
  }
}

void GatedRmsNorm(float* o, const float* z, const float* w, int rows, int dv, float eps) {
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(rows) * dv >= 65536)
  for (int r = 0; r < rows; ++r) {
    float* row = o + static_cast<int64_t>(r) * dv;
    const float* zr = z + static_cast<int64_t>(r) * dv;
    double ss = 0;
    for (int i = 0; i < dv; ++i) ss += static_cast<double>(row[i]) * row[i];
    const float scale = static_cast<float>(1.0 / std::sqrt(ss / dv + eps));
    for (int i = 0; i < dv; ++i) row[i] = w[i] * (row[i] * scale) * Silu(zr[i]);
  }
}

}  // namespace ss
