// Forward and backward of every op the trainer uses, templated on the scalar type so that the
// same code runs in float (training) and in double (finite-difference gradient checks,
// tests/test_train_grad.cpp). Shapes use the legend in tensor/tensor.h with N = B * T rows.
//
// Backward conventions: "dx +=" accumulates into dx (residual-stream gradients add up), "dx ="
// overwrites; parameter gradients always accumulate (dW +=). Every loop that writes an output is
// either serial or parallel over distinct outputs, so results are bit-identical for a given thread
// count (the OpenBLAS gemm is deterministic for a fixed thread count as well).
#pragma once

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "kernels/attn_rule.h"
#include "kernels/kinds.h"
#include "kernels/vecmath.h"

namespace ss::train {

// ---- C (M, N) = alpha op(A) op(B) + beta C, row-major.
inline void Gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
                 const float* B, float beta, float* C) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, trans_a ? M : K, B,
              trans_b ? K : N, beta, C, N);
}
inline void Gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A,
                 const double* B, double beta, double* C) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, trans_a ? M : K, B,
              trans_b ? K : N, beta, C, N);
}

// Runs two independent products a() and b() of `macs_each` multiply-adds each: side by side, one
// per thread, when the process has exactly two threads, is not inside a parallel region and each
// has at least 2^20 multiply-adds (OpenBLAS runs single-threaded inside a parallel region); else
// one after the other, each split over the threads by OpenBLAS. At the trainer's widths (128-512)
// sgemm's own split of one product over two threads scales poorly, so two threads gain more from
// two products at once (measured +10-14 % a training step for the backward pairs, +2-4 % more for
// the forward ones). With more threads sgemm's own split is kept.
template <typename A, typename B>
void RunSideBySide(int64_t macs_each, A&& a, B&& b) {
  if (omp_get_max_threads() == 2 && !omp_in_parallel() && macs_each >= (int64_t{1} << 20)) {
#pragma omp parallel sections num_threads(2)
    {
#pragma omp section
      a();
#pragma omp section
      b();
    }
    return;
  }
  a();
  b();
}

// ---- Linear: y (N, out) = x (N, in) W^T, W (out, in) as nn.Linear stores it.
template <typename Real>
void LinearForward(const Real* x, const Real* w, Real* y, int N, int in, int out) {
  Gemm(false, true, N, out, in, Real(1), x, w, Real(0), y);
}
// dx (N, in) = dy W (overwritten, or added when accumulate); dW (out, in) += dy^T x. The two
// products (the same number of multiply-adds) go through RunSideBySide.
template <typename Real>
void LinearBackward(const Real* dy, const Real* x, const Real* w, Real* dx, Real* dw, int N, int in,
                    int out, bool accumulate_dx = false) {
  auto input_grad = [&] {
    Gemm(false, false, N, in, out, Real(1), dy, w, accumulate_dx ? Real(1) : Real(0), dx);
  };
  auto weight_grad = [&] { Gemm(true, false, out, in, N, Real(1), dy, x, Real(1), dw); };
  if (dx)
    RunSideBySide(int64_t(N) * in * out, input_grad, weight_grad);
  else
    weight_grad();
}

// ---- RMSNorm (Zhang & Sennrich 2019): y = x * r * w, r = (mean(x^2) + eps)^(-1/2).
template <typename Real>
void RmsNormForward(const Real* x, const Real* w, Real* y, Real* rstd, int N, int D, float eps) {
#pragma omp parallel for schedule(static) if (N * D > 65536)
  for (int n = 0; n < N; ++n) {
    const Real* xr = x + int64_t(n) * D;
    Real* yr = y + int64_t(n) * D;
    Real ss = 0;
    for (int i = 0; i < D; ++i) ss += xr[i] * xr[i];
    Real r = Real(1) / std::sqrt(ss / D + Real(eps));
    if (!std::isfinite(ss)) {  // squares overflowed on finite input: as the forward's RmsNorm
      double s = 0;
      for (int i = 0; i < D; ++i) s += static_cast<double>(xr[i]) * xr[i];
      r = static_cast<Real>(1.0 / std::sqrt(s / D + eps));
    }
    rstd[n] = r;
    for (int i = 0; i < D; ++i) yr[i] = xr[i] * r * w[i];
  }
}
// dx_i += r (dy_i w_i) - r^3 / D * x_i * sum_j dy_j w_j x_j;   dw_i += sum_n dy_i x_i r.
template <typename Real>
void RmsNormBackward(const Real* dy, const Real* x, const Real* w, const Real* rstd, Real* dx,
                     Real* dw, int N, int D) {
#pragma omp parallel for schedule(static) if (N * D > 65536)
  for (int n = 0; n < N; ++n) {
    const Real* xr = x + int64_t(n) * D;
    const Real* dyr = dy + int64_t(n) * D;
    Real* dxr = dx + int64_t(n) * D;
    const Real r = rstd[n];
    Real dot = 0;
    for (int i = 0; i < D; ++i) dot += dyr[i] * w[i] * xr[i];
    const Real c = r * r * r * dot / D;
    for (int i = 0; i < D; ++i) dxr[i] += r * dyr[i] * w[i] - c * xr[i];
  }
  for (int n = 0; n < N; ++n) {  // serial: a fixed summation order over rows
    const Real* xr = x + int64_t(n) * D;
    const Real* dyr = dy + int64_t(n) * D;
    const Real r = rstd[n];
    for (int i = 0; i < D; ++i) dw[i] += dyr[i] * xr[i] * r;
  }
}

// ---- RoPE on x (N, heads * Dh), row n at position n % T. A rotation of each pair by angle
// pos * theta^(-2i/Dh) (Su et al. 2021, eq. 34); the backward pass rotates by the negative angle
// (the transpose of a rotation is its inverse).
struct RopeTable {
  int T = 0, half = 0;
  std::vector<double> cos_v, sin_v;  // (T, Dh/2), angles computed in double as kernels/ops.cpp does
  RopeTable(int T_, int head_dim, float theta) : T(T_), half(head_dim / 2) {
    cos_v.resize(size_t(T) * half);
    sin_v.resize(size_t(T) * half);
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < half; ++i) {
        const double freq = std::pow(static_cast<double>(theta), -2.0 * i / (2 * half));
        cos_v[size_t(t) * half + i] = static_cast<float>(std::cos(t * freq));
        sin_v[size_t(t) * half + i] = static_cast<float>(std::sin(t * freq));
      }
  }
};
template <typename Real>
void RopeApply(Real* x, const RopeTable& table, int N, int heads, int head_dim, RopeKind kind,
               bool inverse) {
  if (kind == RopeKind::kNone) return;
  const int half = head_dim / 2;
#pragma omp parallel for schedule(static) if (int64_t(N) * heads * head_dim > 65536)
  for (int n = 0; n < N; ++n) {
    const int t = n % table.T;
    for (int h = 0; h < heads; ++h) {
      Real* v = x + (int64_t(n) * heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const Real c = static_cast<Real>(table.cos_v[size_t(t) * half + i]);
        const Real s = inverse ? -static_cast<Real>(table.sin_v[size_t(t) * half + i])
                               : static_cast<Real>(table.sin_v[size_t(t) * half + i]);
        const int a = kind == RopeKind::kInterleaved ? 2 * i : i;
        const int b = kind == RopeKind::kInterleaved ? 2 * i + 1 : i + half;
        const Real x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
      }
    }
  }
}

// General matrix product with leading dimensions (sub-blocks of wider row-major arrays).
inline void GemmLd(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                   const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}
inline void GemmLd(bool ta, bool tb, int M, int N, int K, double alpha, const double* A, int lda,
                   const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// Softmax in place over row[0, n): the attention kernels' own (kernels/attn_rule.h; float rows
// take the vectorised kernels, double rows, for the finite-difference checks, plain loops).
template <typename Real>
void SoftmaxRow(Real* row, int n) {
  SoftmaxRule().Row(row, n, Real(-INFINITY), static_cast<Real*>(nullptr));
}

// ---- Causal grouped-query self-attention over B sequences of T tokens.
//   q (N, H*Dh) rotated; k, v (N, Hkv*Dh); probs (B, H, T, T) saved (0 above the diagonal);
//   z (N, H*Dh). Head h reads kv head h / (H / Hkv).
// Per (sequence, head) three small GEMMs: S = q k^T / sqrt(Dh) (T, T), the rows' weights, z = P v.
// Computing the masked upper triangle too costs 2x the FLOPs of a causal loop but runs at BLAS
// speed, several times faster than scalar loops at these head sizes. Inside the parallel region
// OpenBLAS (OpenMP build) runs each call single-threaded.
//
// A row's weights are its rule's (kernels/attn_rule.h: the forward and backward the engine's
// kernels run too; softmax unless the attention variant has another, model/attention.h). Beside
// the rule, AttnRows carries a slot column:
//   slot_logits (B, H, T): the slot's logit per query (a per-head sink logit broadcast, or a
//     kv-bias slot's q . k* / sqrt(Dh), both computed by the caller); null: no slot;
//   slot_values (Hkv, Dh): the slot's value, added to z with its probability (kv-bias); or null;
//   slot_probs (B, H, T): receives each row's slot probability (needed with a slot);
//   saved (B, H, T, T): the rule's own saved rows, when it keeps them (AttnRule::SavesRow).
template <typename Real>
struct AttnRows {
  const AttnRule* rule = nullptr;
  const Real* slot_logits = nullptr;
  const Real* slot_values = nullptr;
  Real* slot_probs = nullptr;
  Real* saved = nullptr;
  const AttnRule& Rule() const { return rule ? *rule : SoftmaxRule(); }
};

template <typename Real>
void AttentionForward(const Real* q, const Real* k, const Real* v, Real* probs, Real* z, int B,
                      int T, int H, int Hkv, int Dh, const AttnRows<Real>& rows = {}) {
  const int group = H / Hkv, qd = H * Dh, kvd = Hkv * Dh;
  const Real scale = Real(1) / std::sqrt(static_cast<Real>(Dh));
  const AttnRule& rule = rows.Rule();
#pragma omp parallel for schedule(static) if (int64_t(B) * H * T * T * Dh > 65536)
  for (int bh = 0; bh < B * H; ++bh) {
    const int b = bh / H, h = bh % H, kh = h / group;
    const Real* qb = q + int64_t(b) * T * qd + h * Dh;
    const Real* kb = k + int64_t(b) * T * kvd + kh * Dh;
    const Real* vb = v + int64_t(b) * T * kvd + kh * Dh;
    Real* P = probs + int64_t(bh) * T * T;
    Real* zb = z + int64_t(b) * T * qd + h * Dh;
    GemmLd(false, true, T, T, Dh, scale, qb, qd, kb, kvd, Real(0), P, T);
    for (int t = 0; t < T; ++t) {
      Real* p = P + int64_t(t) * T;
      Real* saved = rows.saved ? rows.saved + (int64_t(bh) * T + t) * T : nullptr;
      const Real slot = rows.slot_logits ? rows.slot_logits[int64_t(bh) * T + t] : Real(-INFINITY);
      const AttnRowInfo<Real> info = rule.Row(p, t + 1, slot, saved);
      if (rows.slot_logits) rows.slot_probs[int64_t(bh) * T + t] = info.slot_p;
      for (int j = t + 1; j < T; ++j) p[j] = 0;
      if (saved) std::fill(saved + t + 1, saved + T, Real(0));
    }
    GemmLd(false, false, T, Dh, T, Real(1), P, T, vb, kvd, Real(0), zb, qd);
    if (rows.slot_values) {
      const Real* sv = rows.slot_values + int64_t(kh) * Dh;
      for (int t = 0; t < T; ++t) {
        const Real ps = rows.slot_probs[int64_t(bh) * T + t];
        for (int d = 0; d < Dh; ++d) zb[int64_t(t) * qd + d] += ps * sv[d];
      }
    }
  }
}
// dP = dz v^T; each row's rule turns dP into dS (softmax: dS_ij = P_ij (dP_ij - sum_j' P_ij'
// dP_ij')); dq = scale dS k; dk = scale sum_heads dS^T q; dv = sum_heads P^T dz. dq, dk, dv are
// overwritten. Parallel over (sequence, kv head): the heads of one group write the same dk/dv rows,
// so they run in one task in a fixed order.
// With a slot of probability p_s and value v* (0 without one): dp_s = dz . v*, and the rule returns
// the slot logit's gradient, written per row into dslot_logits (B, H, T); dslot_values[kv head] +=
// sum over heads, sequences and queries of p_s dz.
template <typename Real>
void AttentionBackward(const Real* dz, const Real* q, const Real* k, const Real* v,
                       const Real* probs, Real* dq, Real* dk, Real* dv, int B, int T, int H,
                       int Hkv, int Dh, const AttnRows<Real>& rows = {},
                       Real* dslot_logits = nullptr, Real* dslot_values = nullptr) {
  const int group = H / Hkv, qd = H * Dh, kvd = Hkv * Dh;
  const Real scale = Real(1) / std::sqrt(static_cast<Real>(Dh));
  const AttnRule& rule = rows.Rule();
  // Per (sequence, head) slot-value gradients, summed over sequences in order below (thread-count
  // independent).
  std::vector<Real> dvalue_bh(rows.slot_values ? size_t(B) * H * Dh : 0, Real(0));
#pragma omp parallel for schedule(static) if (int64_t(B) * H * T * T * Dh > 65536)
  for (int bk = 0; bk < B * Hkv; ++bk) {
    const int b = bk / Hkv, kh = bk % Hkv;
    std::vector<Real> dS(size_t(T) * T);
    const Real* kb = k + int64_t(b) * T * kvd + kh * Dh;
    const Real* vb = v + int64_t(b) * T * kvd + kh * Dh;
    Real* dkb = dk + int64_t(b) * T * kvd + kh * Dh;
    Real* dvb = dv + int64_t(b) * T * kvd + kh * Dh;
    const Real* sv = rows.slot_values ? rows.slot_values + int64_t(kh) * Dh : nullptr;
    for (int h = kh * group; h < (kh + 1) * group; ++h) {
      const int64_t bh = int64_t(b) * H + h;
      const Real* P = probs + bh * T * T;
      const Real* dzb = dz + int64_t(b) * T * qd + h * Dh;
      const Real* qb = q + int64_t(b) * T * qd + h * Dh;
      const Real first = h == kh * group ? Real(0) : Real(1);  // overwrite, then accumulate
      GemmLd(true, false, T, Dh, T, Real(1), P, T, dzb, qd, first, dvb, kvd);
      GemmLd(false, true, T, T, Dh, Real(1), dzb, qd, vb, kvd, Real(0), dS.data(), T);
      for (int t = 0; t < T; ++t) {
        const Real* p = P + int64_t(t) * T;
        const Real* saved = rows.saved ? rows.saved + (bh * T + t) * T : nullptr;
        Real* ds = dS.data() + int64_t(t) * T;
        AttnSlotGrad<Real> slot;
        if (rows.slot_logits) {
          slot.p = rows.slot_probs[bh * T + t];
          const Real* dzt = dzb + int64_t(t) * qd;
          if (sv) {
            for (int d = 0; d < Dh; ++d) {
              slot.d_p += dzt[d] * sv[d];
              dvalue_bh[size_t(bh) * Dh + d] += slot.p * dzt[d];
            }
          }
        }
        const Real dslot =
            rule.RowBackward(p, saved, ds, t + 1, rows.slot_logits ? &slot : nullptr);
        if (dslot_logits) dslot_logits[bh * T + t] = dslot;
        for (int j = t + 1; j < T; ++j) ds[j] = 0;
      }
      GemmLd(false, false, T, Dh, T, scale, dS.data(), T, kb, kvd, Real(0),
             dq + int64_t(b) * T * qd + h * Dh, qd);
      GemmLd(true, false, T, Dh, T, scale, dS.data(), T, qb, qd, first, dkb, kvd);
    }
  }
  if (dslot_values)
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < Dh; ++d)
          dslot_values[int64_t(h / group) * Dh + d] += dvalue_bh[(size_t(b) * H + h) * Dh + d];
}

// ---- SwiGLU (Shazeer 2020): g = silu(a) * u.  da = dg * u * silu'(a), du = dg * silu(a),
// silu'(a) = s (1 + a (1 - s)), s = sigmoid(a).
// Float runs in chunks of kEltChunk through the vectorised kernels, chunks spread over the threads.
constexpr int64_t kEltChunk = 16384;

template <typename Real>
void SwigluForward(const Real* a, const Real* u, Real* g, int64_t n) {
  if constexpr (std::is_same_v<Real, float>) {
    const int64_t chunks = (n + kEltChunk - 1) / kEltChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t i0 = c * kEltChunk, len = std::min(kEltChunk, n - i0);
      std::copy(a + i0, a + i0 + len, g + i0);
      SiluMul(g + i0, u + i0, len);
    }
  } else {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) g[i] = a[i] / (Real(1) + std::exp(-a[i])) * u[i];
  }
}
template <typename Real>
void SwigluBackward(const Real* dg, const Real* a, const Real* u, Real* da, Real* du, int64_t n) {
  const int64_t chunks = (n + kEltChunk - 1) / kEltChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t i0 = c * kEltChunk, i1 = std::min(n, i0 + kEltChunk);
    Real s_buf[kEltChunk];
    if constexpr (std::is_same_v<Real, float>) {
      Sigmoid(a + i0, s_buf, i1 - i0);
    } else {
      for (int64_t i = i0; i < i1; ++i) s_buf[i - i0] = Real(1) / (Real(1) + std::exp(-a[i]));
    }
    for (int64_t i = i0; i < i1; ++i) {
      const Real s = s_buf[i - i0];
      da[i] = dg[i] * u[i] * s * (Real(1) + a[i] * (Real(1) - s));
      du[i] = dg[i] * a[i] * s;
    }
  }
}

// ---- Softmax cross-entropy, mean over the N rows. Turns logits (N, V) into probabilities in
// place and returns the mean of -log p[target]; the sum runs serially in double.
template <typename Real>
double CrossEntropyForward(Real* logits, const int* targets, int N, int V) {
  std::vector<double> nll(N);
#pragma omp parallel for schedule(static) if (int64_t(N) * V > 65536)
  for (int n = 0; n < N; ++n) {
    Real* row = logits + int64_t(n) * V;
    SoftmaxRow(row, V);
    nll[n] = -std::log(static_cast<double>(row[targets[n]]));
  }
  double total = 0;
  for (double x : nll) total += x;
  return total / N;
}
// dlogits (N, V) = (p - onehot(target)) * scale, in place on the probabilities.
template <typename Real>
void CrossEntropyBackward(Real* probs, const int* targets, int N, int V, Real scale) {
#pragma omp parallel for schedule(static) if (int64_t(N) * V > 65536)
  for (int n = 0; n < N; ++n) {
    Real* row = probs + int64_t(n) * V;
    row[targets[n]] -= Real(1);
    for (int i = 0; i < V; ++i) row[i] *= scale;
  }
}

}  // namespace ss::train
