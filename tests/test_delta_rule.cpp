// Gated DeltaNet's kernels (kernels/delta_rule.h) against an independent float64 recurrence written
// from the paper's equations (arXiv 2412.06464, eq. 10: S_t = a_t (I - beta_t k_t k_t^T) S_{t-1} +
// beta_t k_t v_t^T, o_t = S_t^T q_t): the recurrent and the chunked form at lengths around the
// chunk size, a prefill followed by token-by-token decode, grouped heads; the causal convolution
// with its state; the gated RMSNorm.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/delta_rule.h"
#include "test_util.h"

namespace ss {
namespace {

struct Inputs {
  std::vector<float> q, k, v, g, beta;
};

Inputs Draw(int T, const DeltaRuleShape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  Inputs in;
  auto fill = [&](std::vector<float>& x, size_t n) {
    x.resize(n);
    for (float& e : x) e = n01(rng);
  };
  fill(in.q, static_cast<size_t>(T) * s.n_k * s.dk);
  fill(in.k, static_cast<size_t>(T) * s.n_k * s.dk);
  fill(in.v, static_cast<size_t>(T) * s.n_v * s.dv);
  in.g.resize(static_cast<size_t>(T) * s.n_v);
  in.beta.resize(in.g.size());
  // Log-decays as the layer makes them, -exp(A_log) softplus(a + dt_bias): below 0, mostly small.
  for (size_t i = 0; i < in.g.size(); ++i) {
    in.g[i] = -0.5f * std::log1p(std::exp(2.0f * n01(rng) - 1.0f));
    in.beta[i] = 1.0f / (1.0f + std::exp(-n01(rng)));
  }
  return in;
}

// The recurrence in double, token by token, from the paper's form (the state update written as
// a (I - beta k k^T) S + beta k v^T, unlike the kernel's delta form).
std::vector<double> Reference(const Inputs& in, int T, const DeltaRuleShape& s,
                              std::vector<double>& S) {
  std::vector<double> out(static_cast<size_t>(T) * s.n_v * s.dv);
  const int r = s.n_v / s.n_k;
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < s.n_v; ++h) {
      const float* qr = &in.q[(static_cast<size_t>(t) * s.n_k + h / r) * s.dk];
      const float* kr = &in.k[(static_cast<size_t>(t) * s.n_k + h / r) * s.dk];
      const float* vr = &in.v[(static_cast<size_t>(t) * s.n_v + h) * s.dv];
      double nq = 0, nk = 0;
      for (int i = 0; i < s.dk; ++i) nq += double(qr[i]) * qr[i], nk += double(kr[i]) * kr[i];
      std::vector<double> q(s.dk), k(s.dk);
      for (int i = 0; i < s.dk; ++i) {
        q[i] = qr[i] / std::sqrt(nq + 1e-6) / std::sqrt(double(s.dk));
        k[i] = kr[i] / std::sqrt(nk + 1e-6);
      }
      const double a = std::exp(double(in.g[static_cast<size_t>(t) * s.n_v + h]));
      const double b = in.beta[static_cast<size_t>(t) * s.n_v + h];
      double* St = &S[static_cast<size_t>(h) * s.dk * s.dv];
      // kS[j] = sum_i k_i S[i][j]; S' = a (S - b k kS) + b k v.
      std::vector<double> kS(s.dv, 0.0);
      for (int i = 0; i < s.dk; ++i)
        for (int j = 0; j < s.dv; ++j) kS[j] += k[i] * St[i * s.dv + j];
      for (int i = 0; i < s.dk; ++i)
        for (int j = 0; j < s.dv; ++j)
          St[i * s.dv + j] = a * (St[i * s.dv + j] - b * k[i] * kS[j]) + b * k[i] * vr[j];
      for (int j = 0; j < s.dv; ++j) {
        double o = 0;
        for (int i = 0; i < s.dk; ++i) o += St[i * s.dv + j] * q[i];
        out[(static_cast<size_t>(t) * s.n_v + h) * s.dv + j] = o;
      }
    }
  return out;
}

double WorstRel(const std::vector<float>& got, const std::vector<double>& want) {
  double worst = 0, scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::fabs(got[i] - want[i]) / std::max(scale, 1e-30));
  return worst;
}

TEST(DeltaRule, BothFormsAgreeWithTheFloat64Recurrence) {
  const DeltaRuleShape s{2, 4, 16, 8};  // two value heads per key head
  double worst_rec = 0, worst_chunk = 0;
  for (int T : {1, 5, 63, 64, 65, 130, 200}) {
    const Inputs in = Draw(T, s, 11 + T);
    std::vector<double> S_ref(static_cast<size_t>(s.n_v) * s.dk * s.dv, 0.0);
    const std::vector<double> want = Reference(in, T, s, S_ref);
    for (bool chunked : {false, true}) {
      std::vector<float> S(S_ref.size(), 0.0f), out(want.size());
      GatedDeltaRule(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), S.data(),
                     out.data(), T, s, chunked);
      const double e = WorstRel(out, want);
      (chunked ? worst_chunk : worst_rec) = std::max(chunked ? worst_chunk : worst_rec, e);
      EXPECT_LT(e, 2e-5) << "T " << T << (chunked ? " chunked" : " recurrent");
      EXPECT_LT(WorstRel(S, S_ref), 2e-5) << "state, T " << T;
    }
  }
  std::printf("delta rule vs float64: recurrent %.3g, chunked %.3g (of the largest output)\n",
              worst_rec, worst_chunk);
}

TEST(DeltaRule, PrefillThenDecodeContinuesTheState) {
  const DeltaRuleShape s{1, 2, 32, 16};
  const int T = 150, split = 97;  // a prefill that ends inside its second chunk
  const Inputs in = Draw(T, s, 5);
  std::vector<double> S_ref(static_cast<size_t>(s.n_v) * s.dk * s.dv, 0.0);
  const std::vector<double> want = Reference(in, T, s, S_ref);
  std::vector<float> S(S_ref.size(), 0.0f), out(want.size());
  const int64_t qk = static_cast<int64_t>(s.n_k) * s.dk, vv = static_cast<int64_t>(s.n_v) * s.dv;
  GatedDeltaRule(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), S.data(),
                 out.data(), split, s, /*chunked=*/true);
  for (int t = split; t < T; ++t)
    GatedDeltaRule(in.q.data() + t * qk, in.k.data() + t * qk, in.v.data() + t * vv,
                   in.g.data() + t * s.n_v, in.beta.data() + t * s.n_v, S.data(),
                   out.data() + t * vv, 1, s, /*chunked=*/false);
  const double e = WorstRel(out, want);
  std::printf("prefill %d chunked + %d decoded vs float64: %.3g\n", split, T - split, e);
  EXPECT_LT(e, 2e-5);
  EXPECT_LT(WorstRel(S, S_ref), 2e-5);
}

TEST(DeltaRule, CausalConvolutionCarriesItsState) {
  const int T = 23, C = 7, K = 4;
  std::mt19937 rng(3);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<float> x(T * C), w(C * K);
  for (float& e : x) e = n01(rng);
  for (float& e : w) e = n01(rng);
  std::vector<double> want(T * C);
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c) {
      double acc = 0;
      for (int j = 0; j < K; ++j) {
        const int tau = t - (K - 1) + j;
        if (tau >= 0) acc += double(w[c * K + j]) * x[tau * C + c];
      }
      want[t * C + c] = acc / (1.0 + std::exp(-acc));
    }
  std::vector<float> state(C * (K - 1), 0.0f), whole(T * C);
  CausalConvSilu(x.data(), w.data(), state.data(), whole.data(), T, C, K);
  EXPECT_LT(WorstRel(whole, want), 1e-6);
  // In pieces of 2, 1, 1 and the rest, the state carrying the inputs across: the same values.
  std::vector<float> st(C * (K - 1), 0.0f), pieces(T * C);
  int at = 0;
  for (int n : {2, 1, 1, T - 4}) {
    CausalConvSilu(x.data() + at * C, w.data(), st.data(), pieces.data() + at * C, n, C, K);
    at += n;
  }
  EXPECT_EQ(pieces, whole);
  EXPECT_EQ(st, state);
  for (int i = 0; i < K - 1; ++i)
    for (int c = 0; c < C; ++c) EXPECT_EQ(state[c * (K - 1) + i], x[(T - K + 1 + i) * C + c]);
}

TEST(DeltaRule, GatedRmsNormIsNormThenGate) {
  const int rows = 6, dv = 16;
  std::mt19937 rng(9);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<float> o(rows * dv), z(rows * dv), w(dv);
  for (float& e : o) e = n01(rng);
  for (float& e : z) e = n01(rng);
  for (float& e : w) e = 1.0f + 0.1f * n01(rng);
  std::vector<double> want(rows * dv);
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < dv; ++i) ss += double(o[r * dv + i]) * o[r * dv + i];
    for (int i = 0; i < dv; ++i) {
      const double zi = z[r * dv + i];
      want[r * dv + i] =
          w[i] * o[r * dv + i] / std::sqrt(ss / dv + 1e-6) * zi / (1 + std::exp(-zi));
    }
  }
  GatedRmsNorm(o.data(), z.data(), w.data(), rows, dv, 1e-6f);
  EXPECT_LT(WorstRel(o, want), 1e-6);
}

}  // namespace
}  // namespace ss
