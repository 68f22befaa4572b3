// attention=softpick (model/attn_softpick.cpp) against the paper's definition: the kernels' rows
// (tiled and materialised, with windows, several key tiles and decode) against a naive double
// computation of softpick(x)_i = ReLU(e^{x_i} - 1) / (sum_j |e^{x_j} - 1| + eps); the trainer's
// backward against central differences (the op and the whole model); a short run that trains,
// reloads, analyses on both paths and streams. tests/test_attn_registry.cpp holds the trainer to
// the engine and the checkpoint to the trainer for softpick as for every variant.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <vector>

#include "analysis/analyze.h"
#include "common/file_util.h"
#include "grad_check.h"
#include "io/load.h"
#include "model/attention.h"
#include "stream/stream.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace ss {
namespace {

const AttnRule& Softpick() { return FindAttnVariant("softpick", "test").rule(); }

std::vector<float> RandomFloats(size_t n, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// The paper's definition on one row of scores, in double.
std::vector<double> NaiveSoftpick(const std::vector<double>& x) {
  double denom = 1e-6;
  for (double s : x) denom += std::abs(std::exp(s) - 1.0);
  std::vector<double> w(x.size());
  for (size_t j = 0; j < x.size(); ++j) w[j] = std::max(std::exp(x[j]) - 1.0, 0.0) / denom;
  return w;
}

TEST(Softpick, KernelRowsMatchThePapersDefinitionOnBothPaths) {
  struct Case {
    int T, S, H, Hkv, Dh, window;
  };
  double worst = 0;
  int64_t empty_rows = 0, rows = 0;
  double min_sum = 1, max_sum = 0;
  AttnOptions opt;
  opt.rule = &Softpick();
  for (Case c :
       {Case{20, 20, 4, 2, 16, 0}, Case{600, 700, 4, 2, 32, 0}, Case{130, 130, 4, 4, 8, 17},
        Case{1, 900, 4, 1, 16, 0}, Case{300, 300, 4, 2, 16, 64}}) {
    const auto q = RandomFloats(c.T * c.H * c.Dh, 41, 1.5f),
               k = RandomFloats(c.S * c.Hkv * c.Dh, 42, 1.5f),
               v = RandomFloats(c.S * c.Hkv * c.Dh, 43, 1.0f);
    const int K = 3, HT = c.H * c.T;
    // Naive: the weights (H, T, S) and the output (T, H*Dh), with sum |w v| for the tolerance.
    std::vector<double> ref_w(static_cast<size_t>(HT) * c.S, 0.0), ref_out(c.T * c.H * c.Dh, 0.0),
        ref_abs(ref_out.size(), 0.0);
    for (int h = 0; h < c.H; ++h)
      for (int t = 0; t < c.T; ++t) {
        const int kvh = h / (c.H / c.Hkv), last = c.S - c.T + t;
        const int first = c.window > 0 ? std::max(0, last - c.window + 1) : 0;
        std::vector<double> x;
        for (int j = first; j <= last; ++j) {
          double d = 0;
          for (int e = 0; e < c.Dh; ++e)
            d += static_cast<double>(q[(t * c.H + h) * c.Dh + e]) * k[(j * c.Hkv + kvh) * c.Dh + e];
          x.push_back(d / std::sqrt(static_cast<double>(c.Dh)));
        }
        const std::vector<double> w = NaiveSoftpick(x);
        for (int j = first; j <= last; ++j) {
          ref_w[(static_cast<size_t>(h) * c.T + t) * c.S + j] = w[j - first];
          for (int e = 0; e < c.Dh; ++e) {
            const double term = w[j - first] * v[(j * c.Hkv + kvh) * c.Dh + e];
            ref_out[(t * c.H + h) * c.Dh + e] += term;
            ref_abs[(t * c.H + h) * c.Dh + e] += std::abs(term);
          }
        }
      }
    opt.window = c.window;
    for (bool materialised : {false, true}) {
      std::vector<float> out(ref_out.size()), fk(HT * K), tp(HT), ss(HT), sp(HT), rs(HT),
          pattern(materialised ? static_cast<size_t>(HT) * c.S : 0);
      std::vector<int> tk(HT);
      AttnStats stats{K, fk.data(), tk.data(), tp.data(), ss.data(), sp.data(), rs.data()};
      Attention(q.data(), k.data(), v.data(), out.data(), c.T, c.S, c.H, c.Hkv, c.Dh, opt,
                materialised ? pattern.data() : nullptr, &stats);
      const std::string label = fmt::format(
          "{} T={} S={} W={}", materialised ? "materialised" : "tiled", c.T, c.S, c.window);
      for (size_t i = 0; i < out.size(); ++i)
        worst = std::max(worst, std::abs(out[i] - ref_out[i]) / std::max(1.0, ref_abs[i]));
      for (size_t i = 0; i < pattern.size(); ++i)
        worst = std::max(worst, std::abs(pattern[i] - ref_w[i]));
      for (int i = 0; i < HT; ++i) {
        const double* w = &ref_w[static_cast<size_t>(i) * c.S];
        double total = 0, sq = 0;
        int best = 0;
        for (int j = 0; j < c.S; ++j) {
          EXPECT_GE(w[j], 0.0);
          total += w[j], sq += w[j] * w[j];
          if (w[j] > w[best]) best = j;
        }
        EXPECT_LE(total, 1.0) << label;
        // A row of weights all 0 has no top key: only its weight (0) is compared.
        EXPECT_NEAR(w[tk[i]], w[best], 1e-6) << label << " row " << i;
        worst = std::max({worst, std::abs(tp[i] - w[best]), std::abs(ss[i] - sq),
                          std::abs(rs[i] - total), static_cast<double>(std::abs(sp[i]))});
        for (int j = 0; j < K; ++j) worst = std::max(worst, std::abs(fk[i * K + j] - w[j]));
        if (!materialised) {
          empty_rows += total == 0, ++rows;
          min_sum = std::min(min_sum, total), max_sum = std::max(max_sum, total);
        }
      }
    }
  }
  std::printf(
      "softpick rows vs the paper's definition: largest diff %.3g (out relative to max(1, sum "
      "|w v|), pattern, statistics); %lld of %lld rows attend to nothing; row sums %.3g .. %.6f\n",
      worst, static_cast<long long>(empty_rows), static_cast<long long>(rows), min_sum, max_sum);
  EXPECT_LT(worst, 1e-5);
  EXPECT_GT(empty_rows, 0);  // rows whose scores are all <= 0 take no key
  EXPECT_LT(max_sum, 1.0);
}

}  // namespace

namespace train {
namespace {

using namespace gradcheck;

// The op: dq, dk, dv of softpick rows against central differences. Scores are kept away from 0,
// where softpick's ReLU and |.| have their kinks (a difference across a kink is not a derivative).
TEST(Softpick, AttentionGradientMatchesFiniteDifferences) {
  AttnGradCase c(17, 1.5);
  double closest = 1e30;
  for (int b = 0; b < c.B; ++b)
    for (int h = 0; h < c.H; ++h)
      for (int t = 0; t < c.T; ++t)
        for (int j = 0; j <= t; ++j) {
          double s = 0;
          for (int d = 0; d < c.Dh; ++d)
            s += c.q[((b * c.T + t) * c.H + h) * c.Dh + d] *
                 c.k[((b * c.T + j) * c.Hkv + h / 2) * c.Dh + d];
          closest = std::min(closest, std::abs(s));
        }
  std::printf("softpick gradient case: smallest |q . k| %.3g\n", closest);
  ASSERT_GT(closest, 1e-3);
  Vec saved(c.B * c.H * c.T * c.T);
  auto rows = [&] {
    AttnRows<double> r;
    r.rule = &Softpick();
    r.saved = saved.data();
    return r;
  };
  c.Check("softpick attention", rows);
}

TEST(Softpick, WholeModelGradientMatchesFiniteDifferences) {
  TrainConfig c = Tiny();
  c.attention = "softpick";
  EXPECT_LT(CheckModel("dense softpick", c, 2, 5), 1e-5);
}

// A short run: the loss falls; the checkpoint says softpick, reloads to the run's validation loss,
// analyses the same on the fused and materialised paths (alpha is the weights themselves), and
// streams: a sinks cache that has evicted nothing equals the dense forward token for token, and
// one that evicts stays finite.
TEST(Softpick, TrainsReloadsAnalysesAndStreams) {
  const std::string dir = std::string(SINKSCOPE_BINARY_DIR) + "/test_tmp/attn_softpick";
  std::filesystem::remove_all(dir);
  TrainConfig c = Preset("quick");
  c.dim = 16;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.vocab_size = 16;
  c.batch_size = 4;
  c.seq_len = 16;
  c.steps = 20;
  c.warmup_steps = 3;
  c.eval_every = 10;
  c.checkpoint_every = 10;
  c.eval_batches = 1;
  c.threads = 1;
  c.attention = "softpick";
  c.out = dir + "/run";
  TrainerOptions quiet;
  quiet.quiet = true;
  const TrainResult r = RunTraining(c, quiet);
  std::printf("softpick run: loss %.4f -> %.4f, val %.4f\n", r.losses.front(), r.losses.back(),
              r.val_loss);
  EXPECT_LT(r.losses.back(), r.losses.front());
  EXPECT_NE(ReadFile(r.last_checkpoint + "/config.json").find("\"sinkscope_attn_softpick\": true"),
            std::string::npos);
  EXPECT_LT(
      std::abs(EvaluateCheckpoint(r.last_checkpoint, c.eval_batches) - r.val_loss) / r.val_loss,
      1e-5);
  const Model model = LoadModel(r.last_checkpoint);
  ASSERT_TRUE(model.config.attn_softpick);

  std::vector<std::vector<int>> samples(2, std::vector<int>(16));
  for (int n = 0; n < 2; ++n)
    for (int t = 0; t < 16; ++t) samples[n][t] = t == 0 ? 0 : 1 + (5 * t + n) % (c.vocab_size - 1);
  analysis::AnalyzeOptions fused, materialised;
  materialised.path = analysis::AttnPath::kMaterialisedKeepAll;
  const auto a = analysis::AnalyzeSamples(model, analysis::Condition::kBos, samples, fused);
  const auto b = analysis::AnalyzeSamples(model, analysis::Condition::kBos, samples, materialised);
  EXPECT_LT(test::MaxDiff(std::vector<float>(a.alpha.begin(), a.alpha.end()),
                          std::vector<float>(b.alpha.begin(), b.alpha.end()),
                          "softpick alpha fused vs materialised"),
            1e-6);
  EXPECT_FALSE(a.has_sink_slot);
  for (double x : a.alpha) EXPECT_TRUE(x >= 0 && x <= 1) << x;

  const std::vector<int>& tokens = samples[0];
  stream::StreamOptions o;
  o.sinks = 2;
  o.window = 14;  // S + W = 16: nothing is evicted from 16 tokens
  auto cache = stream::MakeStreamCache(model, o);
  KVCache dense = KVCache::Create(model.config, 16);
  RunState state;
  ForwardRequest req;
  req.tokens = tokens;
  const Tensor logits = Forward(model, dense, state, req);
  double worst = 0;
  for (int t = 0; t < 16; ++t) {
    const Tensor step = cache->Step(tokens[t]);
    for (int v = 0; v < c.vocab_size; ++v)
      worst = std::max(worst, double(std::abs(step[v] - logits.row(t)[v])));
  }
  std::printf("softpick stream (nothing evicted) vs dense forward: largest logit diff %.3g\n",
              worst);
  EXPECT_LT(worst, 1e-4);
  o.window = 5;  // evicting
  auto evicting = stream::MakeStreamCache(model, o);
  for (int i = 0; i < 40; ++i) {
    const Tensor step = evicting->Step(tokens[i % 16]);
    for (int v = 0; v < c.vocab_size; ++v) ASSERT_TRUE(std::isfinite(step[v]));
  }
}

}  // namespace
}  // namespace train
}  // namespace ss
