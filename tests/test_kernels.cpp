// Each kernel against a naive double-precision reference on random inputs: the fast paths are
// optimised separately, so each is held to a slow one written independently; every test prints its
// largest difference.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/gemm_bf16.h"
#include "kernels/ops.h"
#include "kernels/parallel.h"
#include "kernels/vecmath.h"
#include "model/attention.h"
#include "tensor/half.h"
#include "test_util.h"

namespace ss {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

struct MatMulCase {
  int T, in, out;
  bool bias;
};

TEST(Kernels, MatMulMatchesNaive) {
  for (MatMulCase c : {MatMulCase{1, 64, 172, false}, MatMulCase{7, 64, 64, true},
                       MatMulCase{33, 100, 3, true}, MatMulCase{1, 5, 9, true},
                       // Large enough for the BLAS path (gemm) and the threaded matrix-vector
                       // product; rows not a multiple of its 4 streams, `in` not of 16 or 8.
                       MatMulCase{1, 768, 512, true}, MatMulCase{40, 128, 100, false},
                       MatMulCase{1, 300, 1003, true}, MatMulCase{1, 17, 9, false},
                       MatMulCase{1, 4096, 70, false}, MatMulCase{1, 8, 3, true}}) {
    auto x = Random(c.T * c.in, 1), w = Random(c.out * c.in, 2), b = Random(c.out, 3);
    std::vector<float> y(c.T * c.out), ref(c.T * c.out);
    for (int t = 0; t < c.T; ++t)
      for (int o = 0; o < c.out; ++o) {
        double acc = c.bias ? b[o] : 0.0;
        for (int i = 0; i < c.in; ++i)
          acc += static_cast<double>(x[t * c.in + i]) * w[o * c.in + i];
        ref[t * c.out + o] = static_cast<float>(acc);
      }
    // The plain loops are compiled for the baseline and for AVX2 + FMA: both.
    const SimdLevel best = ActiveSimdLevel();
    for (SimdLevel level : {SimdLevel::kPortable, best}) {
      ForceSimdLevel(level);
      std::fill(y.begin(), y.end(), NAN);
      MatMul(x.data(), w.data(), c.bias ? b.data() : nullptr, y.data(), c.T, c.in, c.out);
      EXPECT_LT(test::MaxDiff(y, ref,
                              "matmul " + SimdLevelName(level) + " T=" + std::to_string(c.T) +
                                  " in=" + std::to_string(c.in) + " out=" + std::to_string(c.out)),
                1e-4);
    }
    ForceSimdLevel(best);
  }
}

// The decode products are bitwise independent of the thread count, and MatVecBatch (several
// products of one x in one parallel region, with biases) equals one MatVec per product.
TEST(Kernels, MatVecBatchEqualsMatVecAtAnyThreadCount) {
  const int threads = ThreadCount();
  const int in = 300;
  const int outs[] = {1003, 77, 77, 5};
  const auto x = Random(in, 31);
  std::vector<std::vector<float>> w, bias, single, batched, first;
  for (int j = 0; j < 4; ++j) {
    w.push_back(Random(static_cast<size_t>(outs[j]) * in, 32 + j));
    bias.push_back(Random(outs[j], 40 + j));
  }
  for (int n : {1, 2, 3}) {
    SetThreadCount(n);
    std::vector<MatVecJob> jobs;
    single.assign(4, {});
    batched.assign(4, {});
    for (int j = 0; j < 4; ++j) {
      single[j].assign(outs[j], NAN);
      batched[j].assign(outs[j], NAN);
      MatMul(x.data(), w[j].data(), bias[j].data(), single[j].data(), 1, in, outs[j]);
      jobs.push_back({w[j].data(), bias[j].data(), batched[j].data(), outs[j]});
    }
    MatVecBatch(x.data(), in, jobs);
    if (n == 1) first = single;
    for (int j = 0; j < 4; ++j) {
      EXPECT_TRUE(batched[j] == single[j]) << "threads " << n << " job " << j;
      EXPECT_TRUE(single[j] == first[j]) << "threads " << n << " vs 1, job " << j;
    }
  }
  SetThreadCount(threads);
}

TEST(Kernels, RmsNormAndLayerNorm) {
  const int T = 5, D = 64;
  auto x = Random(T * D, 4, 3.0f), w = Random(D, 5), b = Random(D, 6);
  std::vector<float> y(T * D), ref(T * D);
  RmsNorm(x.data(), w.data(), y.data(), T, D, 1e-5f);
  for (int t = 0; t < T; ++t) {
    double ss = 0;
    for (int i = 0; i < D; ++i) ss += static_cast<double>(x[t * D + i]) * x[t * D + i];
    double scale = 1.0 / std::sqrt(ss / D + 1e-5);
    for (int i = 0; i < D; ++i) ref[t * D + i] = static_cast<float>(x[t * D + i] * scale * w[i]);
  }
  EXPECT_LT(test::MaxDiff(y, ref, "rmsnorm"), 1e-5);
  LayerNorm(x.data(), w.data(), b.data(), y.data(), T, D, 1e-5f);
  for (int t = 0; t < T; ++t) {
    double mean = 0, var = 0;
    for (int i = 0; i < D; ++i) mean += x[t * D + i];
    mean /= D;
    for (int i = 0; i < D; ++i) var += (x[t * D + i] - mean) * (x[t * D + i] - mean);
    var /= D;
    for (int i = 0; i < D; ++i)
      ref[t * D + i] =
          static_cast<float>((x[t * D + i] - mean) / std::sqrt(var + 1e-5) * w[i] + b[i]);
  }
  EXPECT_LT(test::MaxDiff(y, ref, "layernorm"), 1e-5);
}

TEST(Kernels, RopeBothLayoutsMatchComplexRotation) {
  const int T = 4, H = 3, Dh = 8;
  for (RopeKind kind : {RopeKind::kInterleaved, RopeKind::kHalf}) {
    for (int rot : {8, 4}) {
      auto x = Random(T * H * Dh, 7);
      std::vector<float> y = x, ref = x;
      std::vector<int> pos = {0, 1, 17, 1000};
      Rope(y.data(), pos, H, Dh, rot, 10000.0f, kind);
      for (int t = 0; t < T; ++t)
        for (int h = 0; h < H; ++h)
          for (int i = 0; i < rot / 2; ++i) {
            int a = kind == RopeKind::kInterleaved ? 2 * i : i;
            int b = kind == RopeKind::kInterleaved ? 2 * i + 1 : i + rot / 2;
            double angle = pos[t] * std::pow(10000.0, -2.0 * i / rot);
            int base = (t * H + h) * Dh;
            double re = x[base + a], im = x[base + b];
            ref[base + a] = static_cast<float>(re * std::cos(angle) - im * std::sin(angle));
            ref[base + b] = static_cast<float>(re * std::sin(angle) + im * std::cos(angle));
          }
      EXPECT_LT(test::MaxDiff(y, ref, "rope"), 1e-5);
    }
  }
}

TEST(Kernels, SoftmaxAndActivations) {
  std::vector<float> x = {1000.0f, 1001.0f, 999.0f};  // overflow-safe
  Softmax(x.data(), 3);
  double e0 = std::exp(-1.0), e2 = std::exp(-2.0), z = 1 + e0 + e2;
  EXPECT_NEAR(x[1], 1 / z, 1e-6);
  EXPECT_NEAR(x[0], e0 / z, 1e-6);
  EXPECT_NEAR(Silu(2.0f), 2.0 / (1 + std::exp(-2.0)), 1e-6);
  EXPECT_NEAR(Gelu(1.0f), 0.8413447460685429, 1e-6);
  EXPECT_NEAR(GeluTanh(1.0f), 0.8411919906082768, 1e-6);
}

// Naive causal GQA attention in double, materialising everything. sinks (H): a learned logit per
// head appended to each row before the softmax and dropped after it (gpt-oss); softcap: c
// tanh(s/c).
void NaiveAttention(const std::vector<float>& q, const std::vector<float>& k,
                    const std::vector<float>& v, int T, int S, int H, int Hkv, int Dh, int window,
                    std::vector<float>* out, std::vector<float>* probs,
                    const std::vector<float>* sinks = nullptr, double softcap = 0,
                    std::vector<float>* sink_probs = nullptr) {
  if (sink_probs) sink_probs->assign(static_cast<size_t>(H) * T, 0.0f);
  out->assign(T * H * Dh, 0.0f);
  probs->assign(static_cast<size_t>(H) * T * S, 0.0f);
  for (int h = 0; h < H; ++h)
    for (int t = 0; t < T; ++t) {
      int kvh = h / (H / Hkv);
      int last = S - T + t;
      std::vector<double> sc(S, -INFINITY);
      double mx = -INFINITY;
      for (int j = 0; j <= last; ++j) {
        if (window > 0 && j <= last - window) continue;
        double d = 0;
        for (int e = 0; e < Dh; ++e)
          d += static_cast<double>(q[(t * H + h) * Dh + e]) * k[(j * Hkv + kvh) * Dh + e];
        sc[j] = d / std::sqrt(static_cast<double>(Dh));
        if (softcap > 0) sc[j] = softcap * std::tanh(sc[j] / softcap);
        mx = std::max(mx, sc[j]);
      }
      const double sink = sinks ? (*sinks)[h] : -INFINITY;
      mx = std::max(mx, sink);
      double z = std::isinf(sink) ? 0 : std::exp(sink - mx);
      for (int j = 0; j < S; ++j) z += std::isinf(sc[j]) ? 0 : std::exp(sc[j] - mx);
      if (sink_probs && !std::isinf(sink))
        (*sink_probs)[h * T + t] = static_cast<float>(std::exp(sink - mx) / z);
      for (int j = 0; j < S; ++j) {
        double p = std::isinf(sc[j]) ? 0 : std::exp(sc[j] - mx) / z;
        (*probs)[(h * T + t) * S + j] = static_cast<float>(p);
        for (int e = 0; e < Dh; ++e)
          (*out)[(t * H + h) * Dh + e] += static_cast<float>(p * v[(j * Hkv + kvh) * Dh + e]);
      }
    }
}

TEST(Kernels, AttentionMatchesNaiveWithStatistics) {
  struct Case {
    int T, S, H, Hkv, Dh, window;
  };
  for (Case c : {Case{5, 5, 4, 2, 8, 0}, Case{1, 9, 8, 4, 8, 0}, Case{3, 10, 2, 2, 16, 0},
                 Case{6, 6, 4, 1, 8, 3}, Case{64, 64, 12, 12, 64, 0}, Case{130, 150, 4, 2, 16, 0},
                 Case{100, 100, 2, 1, 8, 40},
                 // Several query blocks (64 below T = 1,024, 256 from there) and 512-key tiles, a
                 // partial last block, a cached prefix, a window.
                 Case{530, 700, 2, 1, 16, 0}, Case{300, 300, 2, 2, 8, 60},
                 Case{1100, 1200, 2, 1, 8, 0}, Case{1030, 1030, 1, 1, 8, 300}}) {
    auto q = Random(c.T * c.H * c.Dh, 8), k = Random(c.S * c.Hkv * c.Dh, 9),
         v = Random(c.S * c.Hkv * c.Dh, 10);
    std::vector<float> out(c.T * c.H * c.Dh), pattern(static_cast<size_t>(c.H) * c.T * c.S);
    const int K = 4;
    std::vector<float> first_k(c.H * c.T * K), top_prob(c.H * c.T), sum_sq(c.H * c.T);
    std::vector<int> top_key(c.H * c.T);
    AttnStats stats{K, first_k.data(), top_key.data(), top_prob.data(), sum_sq.data()};
    Attention(q.data(), k.data(), v.data(), out.data(), c.T, c.S, c.H, c.Hkv, c.Dh, {c.window},
              pattern.data(), &stats);
    std::vector<float> ref_out, ref_probs;
    NaiveAttention(q, k, v, c.T, c.S, c.H, c.Hkv, c.Dh, c.window, &ref_out, &ref_probs);
    EXPECT_LT(test::MaxDiff(out, ref_out, "attention out"), 1e-5);
    EXPECT_LT(test::MaxDiff(pattern, ref_probs, "attention probs"), 1e-6);
    std::vector<float> ref_first_k(first_k.size()), ref_top(top_prob.size()), ref_sq(sum_sq.size());
    for (int h = 0; h < c.H; ++h)
      for (int t = 0; t < c.T; ++t) {
        const float* p = &ref_probs[(h * c.T + t) * c.S];
        int best = 0;
        double sq = 0;
        for (int j = 0; j < c.S; ++j) {
          if (p[j] > p[best]) best = j;
          sq += static_cast<double>(p[j]) * p[j];
        }
        for (int j = 0; j < K; ++j) ref_first_k[(h * c.T + t) * K + j] = j < c.S ? p[j] : 0.0f;
        ref_top[h * c.T + t] = p[best];
        ref_sq[h * c.T + t] = static_cast<float>(sq);
        EXPECT_EQ(top_key[h * c.T + t], best);
      }
    EXPECT_LT(test::MaxDiff(first_k, ref_first_k, "fused first-K probs"), 1e-6);
    EXPECT_LT(test::MaxDiff(top_prob, ref_top, "fused top prob"), 1e-6);
    EXPECT_LT(test::MaxDiff(sum_sq, ref_sq, "fused sum p^2"), 1e-6);
    // The second half of attention from a given pattern reproduces the output.
    std::vector<float> out2(out.size());
    AttentionFromPattern(pattern.data(), v.data(), out2.data(), c.T, c.S, c.H, c.Hkv, c.Dh);
    EXPECT_LT(test::MaxDiff(out2, ref_out, "attention from pattern"), 1e-5);
  }
}

// One call of Attention with every statistic asked for (K leading keys) and, when materialised, the
// pattern: out, first-K probabilities, top prob, sum p^2, slot prob (-1 where unset), pattern, top
// key, the weights' row sums.
struct StatsRun {
  std::vector<float> out, fk, tp, ss, sp, pattern;
  std::vector<int> tk;
  std::vector<float> rs;
};
StatsRun RunWithStats(const std::vector<float>& q, const std::vector<float>& k,
                      const std::vector<float>& v, int T, int S, int H, int Hkv, int Dh,
                      const AttnOptions& opt, bool materialised, int K) {
  const int HT = H * T;
  StatsRun r{std::vector<float>(static_cast<size_t>(T) * H * Dh),
             std::vector<float>(HT * K),
             std::vector<float>(HT),
             std::vector<float>(HT),
             std::vector<float>(HT, -1.0f),
             std::vector<float>(materialised ? static_cast<size_t>(HT) * S : 0),
             std::vector<int>(HT),
             std::vector<float>(HT, -1.0f)};
  AttnStats stats{K, r.fk.data(), r.tk.data(), r.tp.data(), r.ss.data(), r.sp.data(), r.rs.data()};
  Attention(q.data(), k.data(), v.data(), r.out.data(), T, S, H, Hkv, Dh, opt,
            materialised ? r.pattern.data() : nullptr, &stats);
  return r;
}

// Learned sink logits (gpt-oss) and soft-capping (Gemma 2) on both paths against naive double
// attention: sink logits from far below to far above the scores (one head's rows almost all on the
// sink slot), with windows, several key tiles, a cached prefix and decode. The rows then sum to
// 1 - p_sink, and the statistics report p_sink.
TEST(Kernels, LearnedSinksAndSoftCapMatchNaiveOnBothPaths) {
  struct Case {
    int T, S, H, Hkv, Dh, window;
    float softcap;
  };
  double worst = 0, worst_sink = 0, min_sink = 1, max_sink = 0;
  for (Case c : {Case{20, 20, 4, 2, 16, 0, 0.0f}, Case{600, 700, 4, 2, 32, 0, 0.0f},
                 Case{130, 130, 4, 4, 8, 17, 0.0f}, Case{1, 900, 4, 1, 16, 0, 0.0f},
                 Case{70, 70, 4, 2, 16, 0, 1.5f}, Case{1, 600, 4, 2, 16, 100, 2.0f},
                 Case{300, 300, 4, 2, 16, 64, 0.7f}}) {
    auto q = Random(c.T * c.H * c.Dh, 21, 2.0f), k = Random(c.S * c.Hkv * c.Dh, 22, 2.0f),
         v = Random(c.S * c.Hkv * c.Dh, 23);
    const std::vector<float> sinks = {-30.0f, 0.0f, 2.5f, 40.0f};  // head 3: nearly all on the slot
    const int K = 3, HT = c.H * c.T;
    std::vector<float> ref_out, ref_probs, ref_sink;
    NaiveAttention(q, k, v, c.T, c.S, c.H, c.Hkv, c.Dh, c.window, &ref_out, &ref_probs, &sinks,
                   c.softcap, &ref_sink);
    const AttnOptions opt{c.window, sinks.data(), c.softcap};
    for (bool materialised : {false, true}) {
      auto [out, fk, tp, ss, sp, pattern, tk, rs] =
          RunWithStats(q, k, v, c.T, c.S, c.H, c.Hkv, c.Dh, opt, materialised, K);
      const std::string label =
          fmt::format("{} T={} S={} W={} cap={}", materialised ? "materialised" : "tiled", c.T, c.S,
                      c.window, c.softcap);
      worst = std::max(worst, test::MaxDiff(out, ref_out, label + " out"));
      worst_sink = std::max(worst_sink, test::MaxDiff(sp, ref_sink, label + " p_sink"));
      if (materialised)
        worst = std::max(worst, test::MaxDiff(pattern, ref_probs, label + " pattern"));
      for (int i = 0; i < HT; ++i) {
        const float* p = &ref_probs[static_cast<size_t>(i) * c.S];
        double sq = 0, total = 0;
        int best = 0;
        for (int j = 0; j < c.S; ++j) {
          if (p[j] > p[best]) best = j;
          sq += static_cast<double>(p[j]) * p[j];
          total += p[j];
        }
        // The keys' mass and the slot's make one distribution.
        EXPECT_NEAR(total + ref_sink[i], 1.0, 1e-6) << label;  // probabilities stored as float
        // Soft-capping saturates scores into float ties: the reported key must hold the top mass.
        EXPECT_NEAR(p[tk[i]], p[best], 1e-6) << label << " row " << i;
        worst =
            std::max({worst, static_cast<double>(std::abs(tp[i] - p[best])), std::abs(ss[i] - sq)});
        for (int j = 0; j < K; ++j) worst = std::max<double>(worst, std::abs(fk[i * K + j] - p[j]));
        min_sink = std::min<double>(min_sink, sp[i]);
        max_sink = std::max<double>(max_sink, sp[i]);
      }
    }
  }
  std::printf(
      "sink logits + soft-cap: largest diff %.3g (out, pattern, statistics), p_sink %.3g; "
      "p_sink spans %.3g .. %.6f\n",
      worst, worst_sink, min_sink, max_sink);
  EXPECT_LT(worst, 1e-5);
  EXPECT_LT(worst_sink, 1e-6);
  EXPECT_LT(min_sink, 1e-9);   // the -30 head: the slot takes nothing
  EXPECT_GT(max_sink, 0.999);  // the +40 head: the slot takes nearly everything
  // A -inf logit is plain attention, bit for bit.
  const int T = 40, S = 40, H = 2, Dh = 16;
  auto q = Random(T * H * Dh, 24), k = Random(S * H * Dh, 25), v = Random(S * H * Dh, 26);
  const std::vector<float> off = {-INFINITY, -INFINITY};
  for (bool materialised : {false, true}) {
    std::vector<float> a(T * H * Dh), b(a.size()), pattern(materialised ? H * T * S : 0);
    float* pat = materialised ? pattern.data() : nullptr;
    Attention(q.data(), k.data(), v.data(), a.data(), T, S, H, H, Dh, {0, off.data()}, pat,
              nullptr);
    Attention(q.data(), k.data(), v.data(), b.data(), T, S, H, H, Dh, {}, pat, nullptr);
    EXPECT_EQ(a, b) << (materialised ? "materialised" : "tiled");
  }
}

// A kv-bias slot (a logit per head and query, a value per kv head; the trainer's attention=kv-bias)
// and sigmoid attention (no normalisation; attention=sigmoid) on both paths against a naive double
// computation: outputs, the pattern (sigmoid: the weights), the statistics (sigmoid: over the
// weights divided by their sum) and the slot's probability, with windows, several key tiles, a
// cached prefix and decode.
TEST(Kernels, KvBiasSlotAndSigmoidMatchNaiveOnBothPaths) {
  struct Case {
    int T, S, H, Hkv, Dh, window;
  };
  double worst = 0, worst_slot = 0, min_slot = 1, max_slot = 0;
  for (bool sigmoid : {false, true})
    for (Case c :
         {Case{20, 20, 4, 2, 16, 0}, Case{600, 700, 4, 2, 32, 0}, Case{130, 130, 4, 4, 8, 17},
          Case{1, 900, 4, 1, 16, 0}, Case{300, 300, 4, 2, 16, 64}}) {
      auto q = Random(c.T * c.H * c.Dh, 31, 2.0f), k = Random(c.S * c.Hkv * c.Dh, 32, 2.0f),
           v = Random(c.S * c.Hkv * c.Dh, 33);
      const int K = 3, HT = c.H * c.T;
      // Slot logits from far below to far above the scores, per query; values per kv head.
      std::vector<float> slot_logits = Random(HT, 34, 3.0f), slot_values = Random(c.Hkv * c.Dh, 35);
      for (int t = 0; t < c.T; ++t) slot_logits[t] -= 30.0f, slot_logits[3 * c.T + t] += 40.0f;
      std::vector<double> ref_out(c.T * c.H * c.Dh, 0.0), ref_abs(ref_out.size(), 0.0),
          ref_w(static_cast<size_t>(HT) * c.S, 0.0), ref_slot(HT, 0.0);
      for (int h = 0; h < c.H; ++h)
        for (int t = 0; t < c.T; ++t) {
          const int kvh = h / (c.H / c.Hkv), last = c.S - c.T + t;
          const int first = c.window > 0 ? std::max(0, last - c.window + 1) : 0;
          std::vector<double> w(c.S, 0.0);
          double mx = sigmoid ? 0.0 : static_cast<double>(slot_logits[h * c.T + t]);
          for (int j = first; j <= last; ++j) {
            double d = 0;
            for (int e = 0; e < c.Dh; ++e)
              d += static_cast<double>(q[(t * c.H + h) * c.Dh + e]) *
                   k[(j * c.Hkv + kvh) * c.Dh + e];
            w[j] = d / std::sqrt(static_cast<double>(c.Dh));
            mx = std::max(mx, w[j]);
          }
          double z = sigmoid ? 0.0 : std::exp(slot_logits[h * c.T + t] - mx);
          for (int j = first; j <= last; ++j) {
            w[j] = sigmoid ? 1.0 / (1.0 + std::exp(-w[j])) : std::exp(w[j] - mx);
            z += w[j];
          }
          const double slot = sigmoid ? 0.0 : std::exp(slot_logits[h * c.T + t] - mx) / z;
          ref_slot[h * c.T + t] = slot;
          for (int j = first; j <= last; ++j) {
            if (!sigmoid) w[j] /= z;
            ref_w[(static_cast<size_t>(h) * c.T + t) * c.S + j] = w[j];
            for (int e = 0; e < c.Dh; ++e) {
              ref_out[(t * c.H + h) * c.Dh + e] += w[j] * v[(j * c.Hkv + kvh) * c.Dh + e];
              ref_abs[(t * c.H + h) * c.Dh + e] += std::abs(w[j] * v[(j * c.Hkv + kvh) * c.Dh + e]);
            }
          }
          for (int e = 0; e < c.Dh; ++e)
            ref_out[(t * c.H + h) * c.Dh + e] += slot * slot_values[kvh * c.Dh + e];
        }
      AttnOptions opt{c.window};
      if (sigmoid) {
        opt.rule = &FindAttnVariant("sigmoid", "test").rule();  // model/attn_sigmoid.cpp
      } else {
        opt.slot_logits = slot_logits.data();
        opt.slot_values = slot_values.data();
      }
      for (bool materialised : {false, true}) {
        auto [out, fk, tp, ss, sp, pattern, tk, rs] =
            RunWithStats(q, k, v, c.T, c.S, c.H, c.Hkv, c.Dh, opt, materialised, K);
        const std::string label =
            fmt::format("{} {} T={} S={} W={}", sigmoid ? "sigmoid" : "kv-bias",
                        materialised ? "materialised" : "tiled", c.T, c.S, c.window);
        // Sigmoid outputs are unnormalised sums of up to 900 terms: float rounding grows with the
        // sum of the terms' magnitudes, so the difference is taken relative to it (when above 1).
        for (size_t i = 0; i < out.size(); ++i)
          worst = std::max(worst, std::abs(out[i] - ref_out[i]) / std::max(1.0, ref_abs[i]));
        if (materialised)
          for (size_t i = 0; i < pattern.size(); ++i)
            worst = std::max(worst, std::abs(pattern[i] - ref_w[i]));
        for (int i = 0; i < HT; ++i) {
          const double* w = &ref_w[static_cast<size_t>(i) * c.S];
          double total = 0, sq = 0;
          int best = 0;
          for (int j = 0; j < c.S; ++j) {
            total += w[j];
            if (w[j] > w[best]) best = j;
          }
          const double norm = sigmoid ? 1.0 / total : 1.0;  // sigmoid: statistics of w / sum(w)
          for (int j = 0; j < c.S; ++j) sq += w[j] * norm * w[j] * norm;
          if (!sigmoid) {
            EXPECT_NEAR(total + ref_slot[i], 1.0, 1e-9) << label;
          }
          EXPECT_NEAR(w[tk[i]], w[best], 1e-6) << label << " row " << i;
          worst = std::max({worst, std::abs(tp[i] - w[best] * norm), std::abs(ss[i] - sq)});
          for (int j = 0; j < K; ++j)
            worst = std::max(worst, std::abs(fk[i * K + j] - w[j] * norm));
          worst_slot = std::max(worst_slot, std::abs(sp[i] - ref_slot[i]));
          // The row sum: the keys' share (1 - p_slot), or sigmoid's unnormalised total.
          worst = std::max(worst, std::abs(rs[i] - total) / std::max(1.0, total));
          if (!sigmoid) {
            min_slot = std::min<double>(min_slot, sp[i]);
            max_slot = std::max<double>(max_slot, sp[i]);
          }
        }
      }
    }
  std::printf(
      "kv-bias slot + sigmoid: largest diff %.3g (out relative to max(1, sum |w v|), pattern, "
      "statistics), p_slot %.3g; "
      "p_slot spans %.3g .. %.6f\n",
      worst, worst_slot, min_slot, max_slot);
  EXPECT_LT(worst, 1e-5);
  EXPECT_LT(worst_slot, 1e-6);
  EXPECT_LT(min_slot, 1e-9);   // head 0's logits 30 below: the slot takes nothing
  EXPECT_GT(max_slot, 0.999);  // head 3's 40 above: the slot takes nearly everything
}

// The tiled online-softmax path (no pattern asked for) against the naive double attention and
// against the materialised path, with several key tiles, cached prefixes, windows and decode.
TEST(Kernels, TiledAttentionMatchesNaiveAndMaterialised) {
  struct Case {
    int T, S, H, Hkv, Dh, window;
  };
  double worst_out = 0, worst_stats = 0, worst_vs_mat = 0;
  for (Case c :
       {Case{700, 700, 2, 1, 64, 0}, Case{300, 1100, 4, 2, 16, 0}, Case{600, 600, 2, 2, 32, 200},
        Case{1, 1500, 4, 1, 64, 0}, Case{1, 1500, 2, 2, 16, 700}, Case{65, 65, 3, 3, 8, 0},
        Case{130, 1200, 2, 1, 8, 513},
        // Decode with head sizes past the value sum's 64-float register block, and a
        // cache shorter than the score product's 4 streams.
        Case{1, 900, 4, 2, 80, 0}, Case{1, 600, 2, 1, 128, 0}, Case{1, 3, 2, 1, 64, 0}}) {
    auto q = Random(c.T * c.H * c.Dh, 11, 2.0f), k = Random(c.S * c.Hkv * c.Dh, 12, 2.0f),
         v = Random(c.S * c.Hkv * c.Dh, 13);
    const int K = 4, HT = c.H * c.T;
    std::vector<float> out(c.T * c.H * c.Dh), fk(HT * K), tp(HT), ss(HT);
    std::vector<int> tk(HT);
    AttnStats stats{K, fk.data(), tk.data(), tp.data(), ss.data()};
    Attention(q.data(), k.data(), v.data(), out.data(), c.T, c.S, c.H, c.Hkv, c.Dh, {c.window},
              nullptr, &stats);
    std::vector<float> mat_out(out.size()), pattern(static_cast<size_t>(HT) * c.S), mfk(HT * K),
        mtp(HT), mss(HT);
    std::vector<int> mtk(HT);
    AttnStats mstats{K, mfk.data(), mtk.data(), mtp.data(), mss.data()};
    Attention(q.data(), k.data(), v.data(), mat_out.data(), c.T, c.S, c.H, c.Hkv, c.Dh, {c.window},
              pattern.data(), &mstats);
    std::vector<float> ref_out, ref_probs;
    NaiveAttention(q, k, v, c.T, c.S, c.H, c.Hkv, c.Dh, c.window, &ref_out, &ref_probs);
    const std::string label = "tiled T=" + std::to_string(c.T) + " S=" + std::to_string(c.S) +
                              " W=" + std::to_string(c.window);
    worst_out = std::max(worst_out, test::MaxDiff(out, ref_out, label + " out vs naive"));
    if (c.T == 1) {  // decode's score dots and value sums have a baseline and an AVX2 body
      const SimdLevel best = ActiveSimdLevel();
      ForceSimdLevel(SimdLevel::kPortable);
      std::vector<float> plain(out.size());
      Attention(q.data(), k.data(), v.data(), plain.data(), c.T, c.S, c.H, c.Hkv, c.Dh, {c.window},
                nullptr, nullptr);
      ForceSimdLevel(best);
      worst_out =
          std::max(worst_out, test::MaxDiff(plain, ref_out, label + " portable out vs naive"));
    }
    worst_vs_mat =
        std::max(worst_vs_mat, test::MaxDiff(out, mat_out, label + " out vs materialised"));
    worst_vs_mat =
        std::max(worst_vs_mat, test::MaxDiff(fk, mfk, label + " first-K vs materialised"));
    worst_vs_mat =
        std::max(worst_vs_mat, test::MaxDiff(tp, mtp, label + " top prob vs materialised"));
    worst_vs_mat =
        std::max(worst_vs_mat, test::MaxDiff(ss, mss, label + " sum p^2 vs materialised"));
    for (int i = 0; i < HT; ++i) {
      const int h = i / c.T, t = i % c.T;
      const float* p = &ref_probs[static_cast<size_t>(i) * c.S];
      int best = 0;
      double sq = 0;
      for (int j = 0; j < c.S; ++j) {
        if (p[j] > p[best]) best = j;
        sq += static_cast<double>(p[j]) * p[j];
      }
      EXPECT_EQ(tk[i], best) << label << " h=" << h << " t=" << t;
      worst_stats = std::max(
          {worst_stats, static_cast<double>(std::abs(tp[i] - p[best])), std::abs(ss[i] - sq)});
      for (int j = 0; j < K; ++j)  // keys past the cache have no probability
        worst_stats =
            std::max<double>(worst_stats, std::abs(fk[i * K + j] - (j < c.S ? p[j] : 0.0f)));
    }
  }
  std::printf(
      "tiled attention: largest diff out %.3g, statistics %.3g (vs double); vs materialised %.3g\n",
      worst_out, worst_stats, worst_vs_mat);
  EXPECT_LT(worst_out, 1e-5);
  EXPECT_LT(worst_stats, 2e-6);  // probabilities, absolute: float sums over up to 1,500 keys
  EXPECT_LT(worst_vs_mat, 1e-5);
}

// The tiled attention at bf16 (--precision bf16) on every path (AMX, AVX-512 BF16, AVX2, portable),
// against naive double-precision attention on the bf16-rounded q, k and v. The head sizes make the
// scale 1/sqrt(Dh) a power of two, so rounding q * scale equals scaling the rounded q: the scores
// are then exact products summed in f32, and the statistics (from the scores) must match double as
// closely as the f32 path does. The output also rounds the unnormalised probabilities to bf16 (2^-9
// relative each) and is held to that bound.
TEST(Kernels, TiledAttentionBf16MatchesDoubleOnRoundedOperands) {
  struct Case {
    int T, S, H, Hkv, Dh, window;
  };
  auto round_bf16 = [](std::vector<float> x) {
    for (float& v : x) v = BF16ToF32(F32ToBF16(v));
    return x;
  };
  const SimdLevel best = ActiveSimdLevel();
  const bool has_avx2 = CpuSimdLevel() != SimdLevel::kPortable;
  struct Run {
    SimdLevel level;
    bool amx;  // the products of 16 rows and more on AMX tiles, where the CPU has them
  };
  for (Run run : {Run{SimdLevel::kAvx512, true}, Run{SimdLevel::kAvx512, false},
                  Run{SimdLevel::kAvx2, false}, Run{SimdLevel::kPortable, false}}) {
    const SimdLevel level = run.level;
    if (level == SimdLevel::kAvx512 && !(CpuHasAvx512Bf16() && best == SimdLevel::kAvx512))
      continue;
    if (run.amx && !CpuHasAmxBf16()) continue;
    if (level == SimdLevel::kAvx2 && !(has_avx2 && best != SimdLevel::kPortable)) continue;
    ForceSimdLevel(level);
    AllowAmx(run.amx);
    const std::string path = SimdLevelName(level) + (run.amx ? " (AMX)" : "");
    double worst_out = 0, worst_stats = 0, worst_f32 = 0;
    for (Case c : {Case{700, 700, 2, 1, 64, 0}, Case{300, 1100, 4, 2, 16, 0},
                   Case{600, 600, 2, 2, 64, 200}, Case{kBf16AttentionRows, 1500, 4, 1, 64, 0},
                   Case{65, 65, 3, 3, 16, 0}, Case{130, 1200, 2, 1, 16, 513}}) {
      const auto q = Random(c.T * c.H * c.Dh, 21, 2.0f), k = Random(c.S * c.Hkv * c.Dh, 22, 2.0f),
                 v = Random(c.S * c.Hkv * c.Dh, 23);
      const int K = 4, HT = c.H * c.T;
      std::vector<float> out(c.T * c.H * c.Dh), fk(HT * K), tp(HT), ss(HT), f32_out(out.size());
      std::vector<int> tk(HT);
      AttnStats stats{K, fk.data(), tk.data(), tp.data(), ss.data()};
      Attention(q.data(), k.data(), v.data(), out.data(), c.T, c.S, c.H, c.Hkv, c.Dh, {c.window},
                nullptr, &stats, /*bf16=*/true);
      Attention(q.data(), k.data(), v.data(), f32_out.data(), c.T, c.S, c.H, c.Hkv, c.Dh,
                {c.window}, nullptr, nullptr);
      std::vector<float> ref_out, ref_probs;
      NaiveAttention(round_bf16(q), round_bf16(k), round_bf16(v), c.T, c.S, c.H, c.Hkv, c.Dh,
                     c.window, &ref_out, &ref_probs);
      const std::string label = path + " bf16 T=" + std::to_string(c.T) +
                                " S=" + std::to_string(c.S) + " W=" + std::to_string(c.window);
      worst_out = std::max(worst_out, test::MaxRelDiff(out, ref_out, label + " out vs double"));
      worst_f32 = std::max(worst_f32, test::MaxRelDiff(out, f32_out, label + " out vs f32 path"));
      for (int i = 0; i < HT; ++i) {
        const float* p = &ref_probs[static_cast<size_t>(i) * c.S];
        int top = 0;
        double sq = 0;
        for (int j = 0; j < c.S; ++j) {
          if (p[j] > p[top]) top = j;
          sq += static_cast<double>(p[j]) * p[j];
        }
        // A tie within f32 rounding may pick either key; the probability must agree regardless.
        if (tk[i] != top) {
          EXPECT_NEAR(p[tk[i]], p[top], 1e-6) << label << " query " << i;
        }
        worst_stats = std::max(
            {worst_stats, static_cast<double>(std::abs(tp[i] - p[top])), std::abs(ss[i] - sq)});
        for (int j = 0; j < K; ++j)
          worst_stats = std::max<double>(worst_stats, std::abs(fk[i * K + j] - p[j]));
      }
    }
    std::printf(
        "%s bf16 tiled attention: largest rel diff of out %.3g vs double on rounded operands, "
        "%.3g vs the f32 path; statistics %.3g (absolute, vs double)\n",
        path.c_str(), worst_out, worst_f32, worst_stats);
    EXPECT_LT(worst_out, 8e-3);  // p rounded to bf16: 2^-9 each, over sums of many terms
    // As the f32 path on AVX-512 (scores: exact products summed in f32 over 16 lanes); the portable
    // path sums each score in one float sequentially, and uses its own exp.
    EXPECT_LT(worst_stats, level == SimdLevel::kAvx512 ? 2e-6 : 1e-5);
    EXPECT_GT(worst_f32, 0.0);  // the bf16 path ran
    EXPECT_LT(worst_f32, 3e-2);
  }
  ForceSimdLevel(best);
  AllowAmx(true);
}

}  // namespace
}  // namespace ss

namespace ss {
namespace {

// Every SIMD path of kernels/vecmath.h against double precision, on values from deep underflow to
// overflow of exp, with lengths that leave every tail size.
TEST(VecMath, EveryPathMatchesDouble) {
  const SimdLevel best = ActiveSimdLevel();
  std::vector<float> x;
  for (float v = -120.0f; v <= 120.0f; v += 0.173f) x.push_back(v);
  for (float v : {0.0f, -0.0f, 1e-8f, -1e-8f, 88.0f, -87.0f, -87.5f, -200.0f, 1e-3f})
    x.push_back(v);
  for (SimdLevel level : {SimdLevel::kPortable, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (level > best) continue;
    ForceSimdLevel(level);
    const std::string name = SimdLevelName(level);
    for (int n : {1, 7, 8, 15, 16, 17, 33, static_cast<int>(x.size())}) {
      // exp through ExpShiftSum on values <= 0 (softmax's domain) and its sum.
      std::vector<float> e(x.begin(), x.begin() + n);
      const float shift = MaxOf(e.data(), n);
      double ref_max = -INFINITY;
      for (int i = 0; i < n; ++i) ref_max = std::max<double>(ref_max, x[i]);
      ASSERT_EQ(shift, static_cast<float>(ref_max)) << name;
      const float sum = ExpShiftSum(e.data(), n, shift);
      double ref_sum = 0, worst = 0;
      for (int i = 0; i < n; ++i) {
        const double r =
            std::exp(static_cast<double>(x[i] - shift));  // the kernel's float argument
        ref_sum += r;
        worst = std::max(worst, std::abs(e[i] - r) / std::max(r, 1e-30));
        if (r < 1e-38) worst = std::max(worst, static_cast<double>(e[i]) * 1e30);  // 0 or denormal
      }
      EXPECT_LT(worst, 5e-7) << name << " exp n=" << n;
      EXPECT_LT(std::abs(sum - ref_sum) / ref_sum, 1e-6) << name << " sum n=" << n;
    }
    // Activations: error relative to max(|ref|, 1) (absolute below 1, where the negative tails of
    // the GELUs cancel in float whatever the method).
    auto check = [&](const char* what, void (*fn)(float*, int64_t), double (*ref)(double),
                     double tol) {
      std::vector<float> y(x.begin(), x.end());
      for (float& v : y) v = std::clamp(v, -30.0f, 30.0f);
      std::vector<float> in = y;
      fn(y.data(), static_cast<int64_t>(y.size()));
      double worst = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        const double r = ref(in[i]);
        worst = std::max(worst, std::abs(y[i] - r) / std::max(std::abs(r), 1.0));
      }
      std::printf("vecmath %s %s: max rel diff %.3g over %zu values\n", name.c_str(), what, worst,
                  y.size());
      EXPECT_LT(worst, tol) << name << " " << what;
    };
    check(
        "silu", SiluInPlace, [](double v) { return v / (1 + std::exp(-v)); }, 1e-6);
    check(
        "gelu_tanh", GeluTanhInPlace,
        [](double v) {
          return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
        },
        2e-6);
    check(
        "gelu", GeluErfInPlace,
        [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }, 3e-6);
    std::vector<float> g(x.begin(), x.end()), up(x.size());
    for (size_t i = 0; i < up.size(); ++i) up[i] = 0.01f * static_cast<float>(i % 97) - 0.3f;
    for (float& v : g) v = std::clamp(v, -30.0f, 30.0f);
    std::vector<float> g0 = g;
    SiluMul(g.data(), up.data(), static_cast<int64_t>(g.size()));
    double worst = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      const double r = g0[i] / (1 + std::exp(-static_cast<double>(g0[i]))) * up[i];
      worst = std::max(worst, std::abs(g[i] - r) / std::max(std::abs(r), 1.0));
    }
    EXPECT_LT(worst, 1e-6) << name << " silu*up";
  }
  ForceSimdLevel(best);
}

// Decode-sized calls (fewer than kBf16AttentionRows queries) run the f32 attention even at bf16:
// packing the whole cache's K and V for one query would cost more than it saves.
TEST(Kernels, Bf16AttentionFallsBackToF32ForFewQueries) {
  const int S = 300, H = 4, Hkv = 2, Dh = 32;
  for (int T : {1, kBf16AttentionRows - 1}) {
    const auto q = Random(T * H * Dh, 31, 1.0f), k = Random(S * Hkv * Dh, 32, 1.0f),
               v = Random(S * Hkv * Dh, 33);
    std::vector<float> a(T * H * Dh), b(a.size());
    Attention(q.data(), k.data(), v.data(), a.data(), T, S, H, Hkv, Dh, {}, nullptr, nullptr, true);
    Attention(q.data(), k.data(), v.data(), b.data(), T, S, H, Hkv, Dh, {}, nullptr, nullptr,
              false);
    EXPECT_EQ(a, b) << "T=" << T;
  }
}

}  // namespace
}  // namespace ss
