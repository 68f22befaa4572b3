// sinkscope analyze: the metrics against brute-force computations and the float64 reference, the
// fused attention statistics against the materialised patterns, sample construction, and the
// report.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "analysis/analyze.h"
#include "analysis/analyze_report.h"
#include "analysis/conditions.h"
#include "common/error.h"
#include "common/file_util.h"
#include "common/sha256.h"
#include "common/stats.h"
#include "io/llama2c.h"
#include "naive_hf.h"
#include "random_model.h"
#include "test_util.h"

namespace ss::analysis {
namespace {

std::vector<float> ToFloat(const std::vector<double>& v) { return {v.begin(), v.end()}; }
std::vector<float> ToFloat(const std::vector<int>& v) { return {v.begin(), v.end()}; }

std::vector<int> Stream(int n, int vocab, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<int> s(n);
  for (int& t : s) t = 3 + static_cast<int>(rng.Below(vocab - 3));
  return s;
}

// ---- fused == materialised

// Compares every attention-derived metric of two results; returns the largest difference.
double CompareAttention(const ConditionResult& a, const ConditionResult& b,
                        const std::string& label) {
  double worst = 0;
  worst = std::max(worst, test::MaxDiff(ToFloat(a.alpha), ToFloat(b.alpha), label + " alpha"));
  worst =
      std::max(worst, test::MaxDiff(ToFloat(a.sink_rate_per_layer), ToFloat(b.sink_rate_per_layer),
                                    label + " sink rate per layer"));
  worst = std::max(worst,
                   test::MaxDiff(ToFloat(a.top_share), ToFloat(b.top_share), label + " top share"));
  worst =
      std::max(worst, test::MaxDiff(ToFloat(a.top_mode), ToFloat(b.top_mode), label + " top mode"));
  worst = std::max(worst, test::MaxDiff(ToFloat(a.top_mode_rate), ToFloat(b.top_mode_rate),
                                        label + " top mode rate"));
  worst = std::max(worst, test::MaxDiff(ToFloat(a.p0_norm_ratio), ToFloat(b.p0_norm_ratio),
                                        label + " p0 norm ratio"));
  EXPECT_EQ(a.patterns.size(), b.patterns.size());
  for (size_t i = 0; i < std::min(a.patterns.size(), b.patterns.size()); ++i)
    worst = std::max(worst, test::MaxDiff(a.patterns[i].mean, b.patterns[i].mean,
                                          label + " captured pattern " + std::to_string(i)));
  return worst;
}

struct RandomCase {
  test::RandomModelShape shape;
  int T;
};

class FusedEqualsMaterialised : public ::testing::TestWithParam<RandomCase> {};

TEST_P(FusedEqualsMaterialised, OnRandomModels) {
  const RandomCase& rc = GetParam();
  Model model = test::RandomLlama(rc.shape);
  SampleSpec spec{3, rc.T, 11, model.config.vocab_size, 1, 2};
  auto samples =
      BuildSamples(Stream(500, model.config.vocab_size, 5), Condition::kBos, spec, "test");
  AnalyzeOptions options;
  options.first_k = 4;
  options.patterns = {{0, 1}, {rc.shape.n_layers - 1, 0}};
  ConditionResult fused = AnalyzeSamples(model, Condition::kBos, samples, options);
  options.path = AttnPath::kMaterialised;
  ConditionResult mat = AnalyzeSamples(model, Condition::kBos, samples, options);
  options.path = AttnPath::kMaterialisedKeepAll;
  ConditionResult all = AnalyzeSamples(model, Condition::kBos, samples, options);
  EXPECT_LT(CompareAttention(fused, mat, "fused vs materialised"), 1e-5);
  EXPECT_LT(CompareAttention(fused, all, "fused vs keep-all"), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FusedEqualsMaterialised,
    ::testing::Values(RandomCase{{2, 4, 2, 32, 64, 97, 4096, 1}, 40},
                      RandomCase{{3, 6, 6, 48, 96, 211, 4096, 2}, 17},    // multi-head, no GQA
                      RandomCase{{1, 8, 1, 64, 128, 50, 4096, 3}, 65}));  // multi-query

TEST(Analyze, FusedEqualsMaterialisedOnStories260K) {
  Model model = LoadLlama2c(test::RepoPath("models/stories260K/stories260K.bin"));
  std::vector<int> stream;
  for (const char* name : {"lily_bos", "cat_nobos", "park_bos"}) {
    std::ifstream in(test::RepoPath(std::string("tests/data/reference/") + name + ".json"));
    auto tokens = nlohmann::json::parse(in)["tokens"].get<std::vector<int>>();
    for (int t : tokens)
      if (t != 1) stream.push_back(t);
  }
  SampleSpec spec{5, 24, 3, model.config.vocab_size, 1, 2};
  for (Condition c :
       {Condition::kBos, Condition::kNoBos, Condition::kRandomP0, Condition::kRepeat}) {
    auto samples = BuildSamples(stream, c, spec, "reference tokens");
    AnalyzeOptions options;
    options.patterns = {{1, 2}};
    ConditionResult fused = AnalyzeSamples(model, c, samples, options);
    options.path = AttnPath::kMaterialised;
    ConditionResult mat = AnalyzeSamples(model, c, samples, options);
    EXPECT_LT(CompareAttention(fused, mat, "stories260K " + ConditionName(c)), 1e-5);
  }
}

// ---- metrics against brute force from the full patterns and hidden states

struct Full {
  std::vector<std::vector<float>> hidden;   // per layer (T, D)
  std::vector<std::vector<float>> pattern;  // per layer (H, T, T)
};

Full RunFull(const Model& model, const std::vector<int>& tokens) {
  const ModelConfig& c = model.config;
  Full f;
  f.hidden.resize(c.n_layers);
  f.pattern.resize(c.n_layers);
  Hooks hooks;
  hooks.Add(HookPoint::kResidPost, -1, [&](const HookContext& ctx, Tensor& x) {
    f.hidden[ctx.layer].assign(x.data(), x.data() + x.numel());
  });
  hooks.Add(HookPoint::kPattern, -1, [&](const HookContext& ctx, Tensor& p) {
    f.pattern[ctx.layer].assign(p.data(), p.data() + p.numel());
  });
  KVCache cache = KVCache::Create(c, static_cast<int>(tokens.size()));
  RunState state;
  ForwardRequest req;
  req.tokens = tokens;
  req.hooks = &hooks;
  Forward(model, cache, state, req);
  return f;
}

double NumpyMedian(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The radix-selection median of magnitudes is the sorted median exactly: odd and even counts, the
// two middle values in one bin or in two, many ties, zeros, a spread over many exponents, sizes
// below the fallback threshold, and a negative value (which falls back).
TEST(Analyze, MedianOfMagnitudesIsTheSortedMedian) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> small(0, 3);
  int checked = 0;
  for (size_t n : {size_t{1}, size_t{2}, size_t{1000}, size_t{65535}, size_t{65536}, size_t{65537},
                   size_t{393216}, size_t{100001}}) {
    for (int kind = 0; kind < 4; ++kind) {
      std::vector<float> v(n);
      for (float& f : v) {
        switch (kind) {
          case 0:
            f = std::fabs(normal(rng));
            break;  // |N(0, 1)|
          case 1:
            f = std::exp(8.0f * normal(rng));
            break;  // many exponents
          case 2:
            f = static_cast<float>(small(rng));
            break;  // ties, zeros
          default:
            f = std::fabs(normal(rng)) * (small(rng) == 0 ? 1e4f : 1.0f);
            break;
        }
      }
      std::vector<double> d(v.begin(), v.end());
      const double want = NumpyMedian(d);
      std::vector<float> w = v;
      EXPECT_EQ(MedianOfMagnitudes(w), want) << "n " << n << " kind " << kind;
      ++checked;
    }
  }
  // Two middle values in different bins: 1.0 (bin 0x3F80) and 2.0 (bin 0x4000), n even.
  std::vector<float> split(70000, 1.0f);
  std::fill(split.begin() + 35000, split.end(), 2.0f);
  EXPECT_EQ(MedianOfMagnitudes(split), 1.5);
  // A negative value: the plain Median decides.
  std::vector<float> negative(70001, 3.0f);
  negative[7] = -1.0f;
  EXPECT_EQ(MedianOfMagnitudes(negative), 3.0);
  EXPECT_EQ(checked, 32);
}

TEST(Analyze, MetricsMatchBruteForce) {
  test::RandomModelShape shape{3, 4, 2, 32, 64, 97, 4096, 7};
  Model model = test::RandomLlama(shape);
  // Plant a massive activation: one embedding dimension of token 50 far larger than the rest,
  // carried by the residual stream through every layer.
  model.weights.token_embedding.row(50)[5] = 5000.0f;
  const int N = 4, T = 20, L = 3, H = 4, D = 32, K = 3;
  std::vector<std::vector<int>> samples;
  for (int s = 0; s < N; ++s) {
    auto tokens = Stream(T, 97, 100 + s);
    tokens[0] = 1;
    std::replace(tokens.begin(), tokens.end(), 50, 51);
    if (s == 2) tokens[7] = 50;
    samples.push_back(tokens);
  }
  AnalyzeOptions options;
  options.first_k = K;
  options.eps = 0.1;
  ConditionResult r = AnalyzeSamples(model, Condition::kBos, samples, options);

  std::vector<double> alpha(K * L * H, 0), sink_layer(K * L, 0), p0(L, 0), med_abs(L, 0),
      share(L * H, 0);
  std::vector<std::vector<std::vector<float>>> h0(L), hi(L);  // layer, sample, (D) / ((T-1) D)
  for (int s = 0; s < N; ++s) {
    Full f = RunFull(model, samples[s]);
    for (int l = 0; l < L; ++l) {
      const auto& P = f.pattern[l];
      for (int h = 0; h < H; ++h) {
        for (int k = 0; k < K; ++k) {
          double a = 0;
          for (int i = k; i < T; ++i) a += P[(h * T + i) * T + k];
          a /= T - k;
          alpha[(k * L + l) * H + h] += a / N;
          sink_layer[k * L + l] += (a > options.eps) / double(H * N);
        }
        double sh = 0;
        for (int i = 1; i < T; ++i)
          sh += *std::max_element(&P[(h * T + i) * T], &P[(h * T + i) * T] + i + 1);
        share[l * H + h] += sh / (T - 1) / N;
      }
      const auto& X = f.hidden[l];
      std::vector<double> norms, mags;
      for (int i = 0; i < T; ++i) {
        double n2 = 0;
        for (int d = 0; d < D; ++d) n2 += double(X[i * D + d]) * X[i * D + d];
        norms.push_back(std::sqrt(n2));
      }
      for (float x : X) mags.push_back(std::fabs(x));
      p0[l] += norms[0] / NumpyMedian({norms.begin() + 1, norms.end()}) / N;
      med_abs[l] += NumpyMedian(mags) / N;
      h0[l].push_back({X.begin(), X.begin() + D});
      hi[l].push_back({X.begin() + D, X.end()});
    }
  }
  auto cosine = [&](const float* a, const float* b) {
    double ab = 0, aa = 0, bb = 0;
    for (int d = 0; d < D; ++d)
      ab += double(a[d]) * b[d], aa += double(a[d]) * a[d], bb += double(b[d]) * b[d];
    return ab / std::sqrt(aa * bb);
  };
  std::vector<double> cos0(L, 0), cos_other(L, 0);
  for (int l = 0; l < L; ++l) {
    int pairs = 0, other_pairs = 0;
    for (int a = 0; a < N; ++a)
      for (int b = 0; b < N; ++b) {
        if (a == b) continue;
        cos0[l] += cosine(h0[l][a].data(), h0[l][b].data());
        ++pairs;
        for (int i = 0; i < T - 1; ++i)
          for (int j = 0; j < T - 1; ++j, ++other_pairs)
            cos_other[l] += cosine(&hi[l][a][i * D], &hi[l][b][j * D]);
      }
    cos0[l] /= pairs;
    cos_other[l] /= other_pairs;
  }
  EXPECT_LT(test::MaxDiff(ToFloat(r.alpha), ToFloat(alpha), "alpha vs brute force"), 1e-6);
  EXPECT_LT(test::MaxDiff(ToFloat(r.sink_rate_per_layer), ToFloat(sink_layer), "sink per layer"),
            1e-9);
  EXPECT_LT(test::MaxDiff(ToFloat(r.top_share), ToFloat(share), "top share"), 1e-6);
  EXPECT_LT(test::MaxRelDiff(ToFloat(r.p0_norm_ratio), ToFloat(p0), "p0 norm ratio"), 1e-6);
  EXPECT_LT(test::MaxRelDiff(ToFloat(r.median_abs), ToFloat(med_abs), "median |x|"), 1e-6);
  EXPECT_LT(test::MaxDiff(ToFloat(r.p0_cosine), ToFloat(cos0), "h_0 cosine"), 1e-6);
  EXPECT_LT(test::MaxDiff(ToFloat(r.other_cosine), ToFloat(cos_other), "other cosine"), 1e-6);
  // The planted activation is the largest of every layer, flagged massive, at sample 2, pos 7,
  // dim 5.
  for (int l = 0; l < L; ++l) {
    ASSERT_FALSE(r.top_activations[l].empty());
    const Activation& a = r.top_activations[l][0];
    EXPECT_EQ(a.sample, 2);
    EXPECT_EQ(a.position, 7);
    EXPECT_EQ(a.dim, 5);
    EXPECT_GT(std::fabs(a.value), 1000.0f);
    EXPECT_TRUE(a.massive);
    EXPECT_GE(r.massive_count[l], 1);
  }
  // The threshold on the mean alpha, by brute force.
  std::vector<double> of_mean(K * L, 0);
  for (int k = 0; k < K; ++k)
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < H; ++h)
        of_mean[k * L + l] += (alpha[(k * L + l) * H + h] > options.eps) / double(H);
  EXPECT_LT(test::MaxDiff(ToFloat(r.sink_rate_of_mean_alpha_per_layer), ToFloat(of_mean),
                          "sink rate of mean alpha"),
            1e-9);
  // Sink rates over layers >= l are means of the per-layer rates (each layer has H heads).
  for (int k = 0; k < K; ++k) EXPECT_NEAR(r.sink_rate_from_layer[k * L + 0], r.sink_rate[k], 1e-12);
}

TEST(Analyze, NoMassiveActivationsInAnOrdinaryRandomModel) {
  Model model = test::RandomLlama({2, 4, 2, 32, 64, 97, 4096, 9});
  SampleSpec spec{2, 16, 1, 97, 1, 2};
  auto r = AnalyzeSamples(model, Condition::kNoBos,
                          BuildSamples(Stream(100, 97, 1), Condition::kNoBos, spec, "t"), {});
  for (int l = 0; l < 2; ++l) {
    EXPECT_EQ(r.massive_count[l], 0);
    ASSERT_EQ(r.top_activations[l].size(), 3u);
    EXPECT_FALSE(r.top_activations[l][0].massive);
  }
}

// ---- the float64 reference (tests/data/reference, from ../shared/data/reference)

class Reference : public ::testing::TestWithParam<std::string> {};

TEST_P(Reference, AlphaAndNormRatiosMatch) {
  std::ifstream in(test::RepoPath("tests/data/reference/" + GetParam() + ".json"));
  ASSERT_TRUE(in);
  nlohmann::json ref = nlohmann::json::parse(in);
  Model model = LoadLlama2c(test::RepoPath("models/stories260K/stories260K.bin"));
  std::vector<int> tokens = ref["tokens"].get<std::vector<int>>();
  AnalyzeOptions options;
  options.first_k = 2;
  for (AttnPath path : {AttnPath::kFused, AttnPath::kMaterialised}) {
    options.path = path;
    ConditionResult r = AnalyzeSamples(model, Condition::kNoBos, {tokens}, options);
    const std::string label = GetParam() + (path == AttnPath::kFused ? " fused" : " materialised");
    std::vector<float> a0(r.alpha.begin(), r.alpha.begin() + 40),
        a1(r.alpha.begin() + 40, r.alpha.end());
    std::vector<float> flat0, flat1;
    for (const auto& row : ref["alpha0"])
      for (float v : row) flat0.push_back(v);
    for (const auto& row : ref["alpha1"])
      for (float v : row) flat1.push_back(v);
    EXPECT_LT(test::MaxDiff(a0, flat0, label + " alpha0"), 1e-4);
    EXPECT_LT(test::MaxDiff(a1, flat1, label + " alpha1"), 1e-4);
    EXPECT_LT(test::MaxDiff(ToFloat(r.p0_norm_ratio),
                            ref["p0_norm_ratio_per_layer"].get<std::vector<float>>(),
                            label + " p0 norm ratio"),
              1e-4);
    EXPECT_LT(test::MaxDiff(std::vector<float>(r.sink_rate_per_layer.begin(),
                                               r.sink_rate_per_layer.begin() + 5),
                            ref["sink0_rate_eps0.3_per_layer"].get<std::vector<float>>(),
                            label + " Sink_0^0.3 per layer"),
              1e-9);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Reference, ::testing::Values("lily_bos", "cat_nobos", "park_bos"));

// ---- conditions and sample construction

// ---- learned sink slots (gpt-oss)

// A random gpt_oss model (2 layers: sliding window 8, then global) with every head's sink logit
// set to `sink`.
Model RandomGptOss(float sink) {
  Model model = test::LoadRandomHf(test::SmallGptOssConfig(), 11, "analyze_gpt_oss");
  for (auto& layer : model.weights.layers) {  // a copy: the loaded tensor views the file
    layer.attn_sinks = Tensor::Zeros({model.config.n_heads});
    std::fill_n(layer.attn_sinks.data(), model.config.n_heads, sink);
  }
  return model;
}

// With large sink logits the mass goes to the slot and analyze says so, on both attention paths;
// with -inf logits the numbers are a plain model's, and the report names no slot sink.
TEST(Analyze, LearnedSinkSlotIsReportedNotPositionZero) {
  std::vector<std::vector<int>> samples = {Stream(24, 61, 1), Stream(24, 61, 2)};
  AnalyzeOptions fused, materialised;
  materialised.path = AttnPath::kMaterialised;
  const Model big = RandomGptOss(12.0f);
  const ConditionResult a = AnalyzeSamples(big, Condition::kBos, samples, fused);
  const ConditionResult b = AnalyzeSamples(big, Condition::kBos, samples, materialised);
  ASSERT_TRUE(a.has_sink_slot);
  EXPECT_LT(test::MaxDiff(ToFloat(a.alpha_sink), ToFloat(b.alpha_sink),
                          "alpha_sink fused vs materialised"),
            1e-5);
  EXPECT_LT(CompareAttention(a, b, "gpt_oss"), 1e-5);
  double min_slot = 1;
  for (double v : a.alpha_sink) min_slot = std::min(min_slot, v);
  std::printf("sink logit 12: alpha_sink >= %.4f, Sink_0 rate %.3f, slot rate %.3f\n", min_slot,
              a.sink_rate[0], a.sink_slot_rate);
  EXPECT_GT(min_slot, 0.9);
  EXPECT_EQ(a.sink_slot_rate, 1.0);
  EXPECT_EQ(a.sink_rate[0], 0.0);
  EXPECT_EQ(a.layer_window, (std::vector<int>{8, 0}));
  AnalyzeReport report;
  report.conditions = {a};
  const std::string summary = ReportSummary(report);
  EXPECT_NE(summary.find("the learned sink slot (100 % of heads), not position 0"),
            std::string::npos)
      << summary;
  EXPECT_NE(summary.find("sliding-window layers"), std::string::npos) << summary;
  const nlohmann::json j = ReportJson(report);
  EXPECT_EQ(j["conditions"][0]["sink_slot"]["rate"], 1.0);

  // -inf: the slot takes nothing and every metric is the plain model's, bit for bit.
  Model off = RandomGptOss(-INFINITY);
  Model plain = RandomGptOss(-INFINITY);
  plain.config.attn_sinks = false;
  const ConditionResult c = AnalyzeSamples(off, Condition::kBos, samples, fused);
  const ConditionResult d = AnalyzeSamples(plain, Condition::kBos, samples, fused);
  for (double v : c.alpha_sink) EXPECT_EQ(v, 0.0);
  EXPECT_EQ(c.alpha, d.alpha);
  EXPECT_EQ(c.top_share, d.top_share);
  EXPECT_EQ(c.p0_norm_ratio, d.p0_norm_ratio);
  EXPECT_FALSE(d.has_sink_slot);
}

TEST(Conditions, SamplesDifferOnlyInTheFirstToken) {
  std::vector<int> stream = Stream(300, 500, 2);
  SampleSpec spec{6, 32, 42, 512, 1, 2};
  auto bos = BuildSamples(stream, Condition::kBos, spec, "s");
  auto nobos = BuildSamples(stream, Condition::kNoBos, spec, "s");
  auto random = BuildSamples(stream, Condition::kRandomP0, spec, "s");
  auto repeat = BuildSamples(stream, Condition::kRepeat, spec, "s");
  auto starts = DrawWindowStarts(300, spec, "s");
  ASSERT_EQ(bos.size(), 6u);
  std::set<int> random_tokens;
  for (int s = 0; s < 6; ++s) {
    ASSERT_EQ(bos[s].size(), 32u);
    EXPECT_EQ(bos[s][0], 1);
    EXPECT_TRUE(std::equal(nobos[s].begin(), nobos[s].end(), stream.begin() + starts[s]));
    EXPECT_TRUE(std::equal(bos[s].begin() + 1, bos[s].end(), nobos[s].begin()));
    EXPECT_TRUE(std::equal(random[s].begin() + 1, random[s].end(), nobos[s].begin()));
    EXPECT_NE(random[s][0], 1);
    EXPECT_NE(random[s][0], 2);
    random_tokens.insert(random[s][0]);
    EXPECT_EQ(std::count(repeat[s].begin(), repeat[s].end(), nobos[s][0]), 32);
    EXPECT_LE(starts[s], 300 - 32);
  }
  EXPECT_GT(random_tokens.size(), 1u);
  // Deterministic for a seed, different for another.
  EXPECT_EQ(BuildSamples(stream, Condition::kRandomP0, spec, "s"), random);
  spec.seed = 43;
  EXPECT_NE(BuildSamples(stream, Condition::kNoBos, spec, "s"), nobos);
  // The generator is fixed by its specification: the first SplitMix64 output for seed 0.
  EXPECT_EQ(SplitMix64(0).Next(), 0xe220a8397b1dcdafull);
}

TEST(Conditions, PromptSamples) {
  SampleSpec spec{1, 0, 0, 512, 1, 2};
  std::vector<int> prompt = {10, 11, 12};
  EXPECT_EQ(PromptSample(prompt, Condition::kBos, spec), (std::vector<int>{1, 10, 11, 12}));
  EXPECT_EQ(PromptSample(prompt, Condition::kNoBos, spec), prompt);
  EXPECT_EQ(PromptSample(prompt, Condition::kRepeat, spec), (std::vector<int>{10, 10, 10}));
  auto r = PromptSample(prompt, Condition::kRandomP0, spec);
  EXPECT_EQ(r.size(), 4u);
  EXPECT_TRUE(std::equal(r.begin() + 1, r.end(), prompt.begin()));
}

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Conditions, BadInputGivesClearErrors) {
  std::string e = ErrorOf([] { ParseConditions("bos,nobos", "--conditions"); });
  EXPECT_NE(e.find("--conditions"), std::string::npos) << e;
  EXPECT_NE(e.find("'nobos'"), std::string::npos) << e;
  EXPECT_NE(ErrorOf([] { ParseConditions("bos,bos", "--conditions"); }).find("twice"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { ParseConditions("", "--conditions"); }).find("unknown condition ''"),
            std::string::npos);
  EXPECT_EQ(ParseConditions("repeat,bos", "x"),
            (std::vector<Condition>{Condition::kRepeat, Condition::kBos}));
  SampleSpec spec{4, 64, 0, 512, 1, 2};
  e = ErrorOf([&] { BuildSamples(std::vector<int>(63, 5), Condition::kBos, spec, "story.txt"); });
  EXPECT_NE(e.find("story.txt"), std::string::npos) << e;
  EXPECT_NE(e.find("63 tokens"), std::string::npos) << e;
  EXPECT_NE(e.find("T = 64"), std::string::npos) << e;
  EXPECT_NO_THROW(BuildSamples(std::vector<int>(64, 5), Condition::kBos, spec, "story.txt"));

  ModelConfig c;
  c.n_layers = 5;
  c.n_heads = 8;
  EXPECT_EQ(ParsePatternSpec("0:3,1:*", c, "--patterns").size(), 9u);
  EXPECT_EQ(ParsePatternSpec("0:3,0:3", c, "--patterns").size(), 1u);
  EXPECT_NE(ErrorOf([&] { ParsePatternSpec("5:0", c, "--patterns"); }).find("layer 5"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { ParsePatternSpec("0:8", c, "--patterns"); }).find("head 8"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { ParsePatternSpec("0-3", c, "--patterns"); }).find("LAYER:HEAD"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { ParsePatternSpec("a:3", c, "--patterns"); }).find("LAYER:HEAD"),
            std::string::npos);
}

// ---- report

// Gated attention: the gate-weighted alpha_0 of every head (mean over queries of A[i, 0] times the
// head's mean gate at query i) and the gate means per head, against the patterns and gates read
// at the hooks; the fused and materialised paths agree; the heads whose gate passes at most eps of
// a sink are the ones the brute force finds, and the report names them.
TEST(Analyze, GateWeightedAlphaMatchesBruteForce) {
  const Model model =
      test::LoadRandomHf(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 32,
      "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "vocab_size": 61, "max_position_embeddings": 64, "sinkscope_attn_output_gate": true})",
                         31, "analyze_gated");
  ASSERT_TRUE(model.config.attn_output_gate);
  const int N = 3, T = 20, L = 2, H = 4, Dh = 8;
  std::vector<std::vector<int>> samples;
  for (int s = 0; s < N; ++s) samples.push_back(Stream(T, 61, 40 + s));
  std::vector<double> gated(L * H, 0), gate_p0(L * H, 0), gate_rest(L * H, 0);
  for (int s = 0; s < N; ++s) {
    std::vector<std::vector<float>> pattern(L), gate(L);
    Hooks hooks;
    hooks.Add(HookPoint::kPattern, -1, [&](const HookContext& ctx, Tensor& p) {
      pattern[ctx.layer].assign(p.data(), p.data() + p.numel());
    });
    hooks.Add(HookPoint::kAttnGate, -1, [&](const HookContext& ctx, Tensor& g) {
      gate[ctx.layer].assign(g.data(), g.data() + g.numel());  // (T, H, Dh)
    });
    KVCache cache = KVCache::Create(model.config, T);
    RunState state;
    ForwardRequest req;
    req.tokens = samples[s];
    req.hooks = &hooks;
    Forward(model, cache, state, req);
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < H; ++h) {
        double weighted = 0, rest = 0;
        for (int i = 0; i < T; ++i) {
          double g = 0;
          for (int d = 0; d < Dh; ++d) g += gate[l][(i * H + h) * Dh + d];
          g /= Dh;
          weighted += pattern[l][(h * T + i) * T] * g;
          if (i == 0) gate_p0[l * H + h] += g / N;
          if (i > 0) rest += g;
        }
        gated[l * H + h] += weighted / T / N;
        gate_rest[l * H + h] += rest / (T - 1) / N;
      }
  }
  AnalyzeOptions options;
  options.eps = 0.12;  // between the heads' alpha_0 (about 0.18 at T = 20) and half of it
  ConditionResult fused = AnalyzeSamples(model, Condition::kBos, samples, options);
  options.path = AttnPath::kMaterialised;
  ConditionResult mat = AnalyzeSamples(model, Condition::kBos, samples, options);
  for (const ConditionResult* r : {&fused, &mat}) {
    ASSERT_TRUE(r->has_output_gate);
    EXPECT_LT(test::MaxDiff(ToFloat(r->gated_alpha0), ToFloat(gated), "gated alpha_0"), 1e-6);
    EXPECT_LT(test::MaxDiff(ToFloat(r->gate_head_p0), ToFloat(gate_p0), "gate at P0"), 1e-6);
    EXPECT_LT(test::MaxDiff(ToFloat(r->gate_head_rest), ToFloat(gate_rest), "gate elsewhere"),
              1e-6);
  }
  std::vector<std::pair<int, int>> closed;
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h)
      if (fused.Alpha(0, l, h) > options.eps && gated[l * H + h] <= options.eps)
        closed.emplace_back(l, h);
  ASSERT_FALSE(closed.empty()) << "eps does not separate alpha_0 from the gated alpha_0";
  EXPECT_EQ(fused.GateClosedSinks(), closed);
  AnalyzeReport rep;
  rep.model = IdentifyModel(model);
  rep.conditions.push_back(fused);
  const std::string summary = ReportSummary(rep);
  EXPECT_NE(summary.find("the gate closes where the head sinks"), std::string::npos) << summary;
  EXPECT_NE(summary.find(fmt::format("{}:{} (alpha_0", closed[0].first, closed[0].second)),
            std::string::npos)
      << summary;
  const nlohmann::json j = ReportJson(rep);
  EXPECT_EQ(j["conditions"][0]["output_gate"]["gate_closed_sinks"].size(), closed.size());
  EXPECT_EQ(j["conditions"][0]["output_gate"]["gated_alpha0"].size(), size_t(L));
  EXPECT_NE(ReportHtml(rep).find("gate-weighted alpha_0, bos"), std::string::npos);
}

TEST(Report, JsonHasTheSchemaAndShapes) {
  Model model = test::RandomLlama({2, 4, 2, 32, 64, 97, 4096, 1});
  SampleSpec spec{2, 12, 0, 97, 1, 2};
  auto stream = Stream(100, 97, 3);
  AnalyzeReport rep;
  rep.model = IdentifyModel(model);
  rep.settings.samples = 2;
  rep.settings.length = 12;
  AnalyzeOptions options;
  options.patterns = {{1, 3}};
  for (Condition c : {Condition::kBos, Condition::kRepeat})
    rep.conditions.push_back(AnalyzeSamples(model, c, BuildSamples(stream, c, spec, "s"), options));
  nlohmann::json j = ReportJson(rep);
  EXPECT_EQ(j["schema"], "sinkscope.analyze/1");
  ASSERT_EQ(j["conditions"].size(), 2u);
  const auto& c0 = j["conditions"][0];
  EXPECT_EQ(c0["name"], "bos");
  EXPECT_EQ(c0["alpha"].size(), 4u);        // K
  EXPECT_EQ(c0["alpha"][0].size(), 2u);     // L
  EXPECT_EQ(c0["alpha"][0][0].size(), 4u);  // H
  for (const char* key :
       {"sink_rate", "sink_rate_per_layer", "p0_norm_ratio_per_layer", "massive_activations",
        "p0_cosine_per_layer", "other_cosine_per_layer", "top_key", "patterns"})
    EXPECT_TRUE(c0.contains(key)) << key;
  EXPECT_EQ(c0["patterns"][0]["layer"], 1);
  EXPECT_EQ(j["model"]["n_layers"], 2);
  const std::string summary = ReportSummary(rep);
  EXPECT_NE(summary.find("Sink_0"), std::string::npos) << summary;
  EXPECT_NE(summary.find("repeat"), std::string::npos) << summary;
  const std::string html = ReportHtml(rep);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("bos: layer 1 head 3"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  // No URL other than the SVG namespace: the page needs no network.
  for (size_t at = html.find("http"); at != std::string::npos; at = html.find("http", at + 1))
    EXPECT_EQ(html.compare(at, 26, "http://www.w3.org/2000/svg"), 0) << html.substr(at, 60);
  EXPECT_NE(html.find("data:image/png;base64,"), std::string::npos);
}

TEST(Sha256, KnownVectors) {
  // FIPS 180-4 examples (NIST CSRC "SHA256.pdf").
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // The shipped model's hash as ../shared/data/README.md lists it.
  EXPECT_EQ(Sha256File(test::RepoPath("models/stories260K/stories260K.bin")),
            "b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696");
}

// A file's hash (OpenSSL's where the build has it) equals the plain FIPS 180-4 code's on the same
// bytes, across lengths that end inside, at and past a 64-byte block and a 1 MiB read.
TEST(Sha256, FileHashEqualsTheReference) {
  const std::string dir = test::TempDir("sha256_file");
  uint64_t x = 12345;
  for (size_t n : {size_t{0}, size_t{55}, size_t{56}, size_t{64}, size_t{1000}, size_t{1} << 20,
                   (size_t{3} << 20) + 17}) {
    std::string bytes(n, '\0');
    for (char& c : bytes) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      c = static_cast<char>(x >> 56);
    }
    const std::string path = dir + "/data.bin";
    WriteFileAtomic(path, bytes);
    EXPECT_EQ(Sha256File(path), Sha256Hex(bytes)) << n << " bytes";
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ss::analysis
