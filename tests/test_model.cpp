// The real stories260K model against the independent float64 reference
// (tests/data/reference/*.json, copied from ../shared/data/reference; see README there).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "common/file_util.h"
#include "io/llama2c.h"
#include "model/arch.h"
#include "model/generate.h"
#include "model/model.h"
#include "reference/naive_llama.h"
#include "test_util.h"

namespace ss {
namespace {

const std::string kModelPath = test::RepoPath("models/stories260K/stories260K.bin");

Model LoadStories() { return LoadLlama2c(kModelPath); }

std::vector<float> Flatten(const nlohmann::json& j) {
  std::vector<float> out;
  std::function<void(const nlohmann::json&)> rec = [&](const nlohmann::json& x) {
    if (x.is_array())
      for (const auto& e : x) rec(e);
    else
      out.push_back(x.get<float>());
  };
  rec(j);
  return out;
}

// Runs the model over `tokens` with hooks capturing every block's residual stream and pattern.
struct Capture {
  std::vector<float> logits;
  std::vector<float> hidden;    // (L, T, D)
  std::vector<float> patterns;  // (L, H, T, T)
};

Capture RunCaptured(const Model& model, const std::vector<int>& tokens) {
  const ModelConfig& c = model.config;
  const int T = static_cast<int>(tokens.size());
  Capture cap;
  cap.hidden.resize(static_cast<size_t>(c.n_layers) * T * c.dim);
  cap.patterns.resize(static_cast<size_t>(c.n_layers) * c.n_heads * T * T);
  Hooks hooks;
  hooks.Add(HookPoint::kResidPost, -1, [&](const HookContext& ctx, Tensor& x) {
    std::copy(x.data(), x.data() + x.numel(),
              cap.hidden.begin() + static_cast<size_t>(ctx.layer) * T * c.dim);
  });
  hooks.Add(HookPoint::kPattern, -1, [&](const HookContext& ctx, Tensor& p) {
    EXPECT_EQ(p.shape(), (std::vector<int64_t>{c.n_heads, T, T}));
    std::copy(p.data(), p.data() + p.numel(),
              cap.patterns.begin() + static_cast<size_t>(ctx.layer) * c.n_heads * T * T);
  });
  KVCache cache = KVCache::Create(c, T);
  RunState state;
  ForwardRequest req;
  req.tokens = tokens;
  req.hooks = &hooks;
  Tensor logits = Forward(model, cache, state, req);
  cap.logits.assign(logits.data(), logits.data() + logits.numel());
  return cap;
}

std::vector<float> Nll(const std::vector<float>& logits, const std::vector<int>& tokens, int V) {
  std::vector<float> nll;
  for (size_t t = 0; t + 1 < tokens.size(); ++t) {
    const float* row = &logits[t * V];
    double mx = *std::max_element(row, row + V), z = 0;
    for (int i = 0; i < V; ++i) z += std::exp(row[i] - mx);
    nll.push_back(static_cast<float>(std::log(z) + mx - row[tokens[t + 1]]));
  }
  return nll;
}

class Stories260KReference : public ::testing::TestWithParam<std::string> {};

TEST_P(Stories260KReference, MatchesFloat64Reference) {
  std::ifstream in(test::RepoPath("tests/data/reference/" + GetParam() + ".json"));
  ASSERT_TRUE(in) << GetParam();
  nlohmann::json ref = nlohmann::json::parse(in);
  Model model = LoadStories();
  std::vector<int> tokens = ref["tokens"].get<std::vector<int>>();
  Capture cap = RunCaptured(model, tokens);
  const double tol = 1e-4;
  EXPECT_LT(test::MaxRelDiff(cap.logits, Flatten(ref["logits"]), GetParam() + " logits"), tol);
  const int L = model.config.n_layers, T = static_cast<int>(tokens.size());
  std::vector<float> ref_hidden = Flatten(ref["hidden_after_block"]);
  std::vector<float> ref_attn = Flatten(ref["attn"]);
  for (int l = 0; l < L; ++l) {
    const size_t hd = static_cast<size_t>(T) * model.config.dim;
    std::vector<float> h(cap.hidden.begin() + l * hd, cap.hidden.begin() + (l + 1) * hd);
    std::vector<float> hr(ref_hidden.begin() + l * hd, ref_hidden.begin() + (l + 1) * hd);
    EXPECT_LT(test::MaxRelDiff(h, hr, GetParam() + " hidden block " + std::to_string(l)), tol);
    const size_t pd = static_cast<size_t>(model.config.n_heads) * T * T;
    std::vector<float> p(cap.patterns.begin() + l * pd, cap.patterns.begin() + (l + 1) * pd);
    std::vector<float> pr(ref_attn.begin() + l * pd, ref_attn.begin() + (l + 1) * pd);
    EXPECT_LT(test::MaxRelDiff(p, pr, GetParam() + " attn block " + std::to_string(l)), tol);
  }
  std::vector<float> nll = Nll(cap.logits, tokens, model.config.vocab_size);
  EXPECT_LT(test::MaxDiff(nll, ref["nll"].get<std::vector<float>>(), GetParam() + " nll"), tol);
}

INSTANTIATE_TEST_SUITE_P(Cases, Stories260KReference,
                         ::testing::Values("lily_bos", "cat_nobos", "park_bos"));

TEST(Model, DecodeWithCacheEqualsPrefillAtEveryStep) {
  Model model = LoadStories();
  std::vector<int> tokens = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395};
  const int T = static_cast<int>(tokens.size()), V = model.config.vocab_size;
  KVCache full_cache = KVCache::Create(model.config, T);
  RunState full_state;
  ForwardRequest full;
  full.tokens = tokens;
  std::vector<float> prefill = [&] {
    Tensor l = Forward(model, full_cache, full_state, full);
    return std::vector<float>(l.data(), l.data() + l.numel());
  }();
  KVCache cache = KVCache::Create(model.config, T);
  RunState state;
  double worst = 0;
  for (int t = 0; t < T; ++t) {
    ForwardRequest step;
    step.tokens = std::span<const int>(&tokens[t], 1);
    step.logits = LogitsMode::kLast;
    Tensor l = Forward(model, cache, state, step);
    // Relative to the largest logit: gemv (decode) and gemm (prefill) sum in different orders.
    std::vector<float> got(l.data(), l.data() + V), want(&prefill[t * V], &prefill[(t + 1) * V]);
    worst = std::max(worst, test::MaxRelDiff(got, want, "decode step " + std::to_string(t)));
  }
  EXPECT_LT(worst, 1e-5);
  EXPECT_EQ(cache.length, T);
}

TEST(Model, ChunkedPrefillEqualsOneShot) {
  Model model = LoadStories();
  std::vector<int> tokens;
  for (int i = 0; i < 40; ++i) tokens.push_back(3 + (i * 37) % 500);
  const int V = model.config.vocab_size;
  KVCache a = KVCache::Create(model.config, 40), b = KVCache::Create(model.config, 40);
  RunState sa, sb;
  ForwardRequest one;
  one.tokens = tokens;
  Tensor la = Forward(model, a, sa, one);
  std::vector<float> ref(la.data(), la.data() + la.numel());
  ForwardRequest first, second;
  first.tokens = std::span<const int>(tokens.data(), 25);
  Forward(model, b, sb, first);
  second.tokens = std::span<const int>(tokens.data() + 25, 15);
  Tensor lb = Forward(model, b, sb, second);
  std::vector<float> got(lb.data(), lb.data() + 15 * V), want(&ref[25 * V], &ref[40 * V]);
  EXPECT_LT(test::MaxRelDiff(got, want, "chunked prefill"), 1e-5);
}

TEST(Model, HooksInterveneAndObserve) {
  Model model = LoadStories();
  std::vector<int> tokens = {1, 403, 407, 261};
  KVCache cache = KVCache::Create(model.config, 8);
  RunState state;
  ForwardRequest req;
  req.tokens = tokens;
  Tensor base = Forward(model, cache, state, req);
  std::vector<float> base_logits(base.data(), base.data() + base.numel());
  // Zero-ablating every MLP output must change the logits; an identity hook must not.
  Hooks identity;
  int calls = 0;
  identity.Add("blocks.1.hook_mlp_out", [&](const HookContext& ctx, Tensor& x) {
    EXPECT_EQ(ctx.Name(), "blocks.1.hook_mlp_out");
    EXPECT_EQ(x.dim(0), 4);
    ++calls;
  });
  cache.Clear();
  req.hooks = &identity;
  Tensor same = Forward(model, cache, state, req);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(test::MaxDiff(same.data(), base_logits.data(), base_logits.size(), "identity hook"),
            0.0);
  Hooks ablate;
  ablate.Add(HookPoint::kMlpOut, -1, [](const HookContext&, Tensor& x) { x.Fill(0.0f); });
  cache.Clear();
  req.hooks = &ablate;
  Tensor changed = Forward(model, cache, state, req);
  EXPECT_GT(test::MaxDiff(changed.data(), base_logits.data(), base_logits.size(), "ablated"), 0.1);
  EXPECT_THROW(ablate.Add("blocks.x.hook_nothing", [](const HookContext&, Tensor&) {}), Error);
  HookPoint p;
  int layer;
  ASSERT_TRUE(Hooks::Parse("blocks.12.attn.hook_pattern", &p, &layer));
  EXPECT_EQ(p, HookPoint::kPattern);
  EXPECT_EQ(layer, 12);
}

TEST(Model, InspectFigures) {
  Model model = LoadStories();
  const ModelConfig& c = model.config;
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_seq_len, 512);
  EXPECT_TRUE(c.tied_embeddings);
  // 512*64 + 5*(64 + 64*64 + 2*32*64 + 64*64 + 64 + 3*172*64) + 64 = 32768 + 5*45440 + 64
  EXPECT_EQ(model.ParameterCount(), 260032);
}

// ---- Bad input: each gets one clear error naming the file and what is wrong.

std::string TempDir() {
  auto dir =
      std::filesystem::temp_directory_path() / ("sinkscope_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string ErrorOf(const std::string& path) {
  try {
    LoadLlama2c(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Llama2cLoader, BadInputsGiveClearErrors) {
  std::string bytes = ReadFile(kModelPath);
  std::string dir = TempDir();
  EXPECT_NE(ErrorOf(dir + "/missing.bin").find("cannot open"), std::string::npos);

  std::string truncated = dir + "/truncated.bin";
  WriteFileAtomic(truncated, std::string_view(bytes).substr(0, bytes.size() - 100));
  std::string msg = ErrorOf(truncated);
  EXPECT_NE(msg.find(truncated), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1056540"), std::string::npos) << msg;  // the size the header implies

  std::string longer = dir + "/longer.bin";
  WriteFileAtomic(longer, bytes + "xxxx");
  EXPECT_NE(ErrorOf(longer).find("implies"), std::string::npos);

  std::string tiny = dir + "/tiny.bin";
  WriteFileAtomic(tiny, "abc");
  EXPECT_NE(ErrorOf(tiny).find("too short"), std::string::npos);

  std::string garbage = dir + "/garbage.bin";
  std::string g = bytes;
  int32_t bad = -5;
  std::memcpy(g.data(), &bad, 4);
  WriteFileAtomic(garbage, g);
  EXPECT_NE(ErrorOf(garbage).find("dim = -5"), std::string::npos) << ErrorOf(garbage);

  std::string v2 = dir + "/v2.bin";
  std::string h(256, '\0');
  uint32_t magic = 0x616b3432;
  int32_t version = 2;
  std::memcpy(h.data(), &magic, 4);
  std::memcpy(h.data() + 4, &version, 4);
  WriteFileAtomic(v2, h);
  EXPECT_NE(ErrorOf(v2).find("version 2"), std::string::npos) << ErrorOf(v2);
  EXPECT_NE(ErrorOf(dir).find("directory"), std::string::npos) << ErrorOf(dir);
  std::filesystem::remove_all(dir);
}

TEST(Model, RejectsOutOfRangeTokensAndFullCache) {
  Model model = LoadStories();
  KVCache cache = KVCache::Create(model.config, 2);
  RunState state;
  std::vector<int> bad = {1, 9999};
  ForwardRequest req;
  req.tokens = bad;
  EXPECT_THROW(Forward(model, cache, state, req), Error);
  std::vector<int> three = {1, 2, 3};
  req.tokens = three;
  EXPECT_THROW(Forward(model, cache, state, req), Error);
}

TEST(Architectures, RegistryListsLlamaAndRejectsUnknown) {
  EXPECT_FALSE(Architectures().empty());
  for (const auto& a : Architectures()) EXPECT_NE(a.forward, nullptr) << a.name;
  EXPECT_EQ(std::string(FindArchitecture("llama").name), "llama");
  try {
    FindArchitecture("mamba");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mamba"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("llama"), std::string::npos);
  }
}

}  // namespace
}  // namespace ss

// ---- The fast path against the independent naive path, on a random GQA model and stories260K.

namespace ss {
namespace {

Model RandomLlama(int dim, int hidden, int layers, int heads, int kv_heads, int vocab, int ctx,
                  RopeKind rope, uint32_t seed) {
  Model m;
  ModelConfig& c = m.config;
  c.dim = dim, c.hidden_dim = hidden, c.n_layers = layers, c.n_heads = heads;
  c.n_kv_heads = kv_heads, c.head_dim = dim / heads, c.vocab_size = vocab, c.max_seq_len = ctx;
  c.rope = rope;
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.3f);
  auto rnd = [&](std::vector<int64_t> shape) {
    Tensor t = Tensor::Zeros(std::move(shape));
    for (int64_t i = 0; i < t.numel(); ++i) t[i] = dist(rng);
    return t;
  };
  auto ones = [&](int64_t n) {
    Tensor t = rnd({n});
    for (int64_t i = 0; i < n; ++i) t[i] = 1.0f + 0.2f * t[i];
    return t;
  };
  m.weights.token_embedding = rnd({vocab, dim});
  for (int l = 0; l < layers; ++l) {
    LayerWeights lw;
    lw.attn_norm = ones(dim);
    lw.wq = rnd({c.q_dim(), dim});
    lw.wk = rnd({c.kv_dim(), dim});
    lw.wv = rnd({c.kv_dim(), dim});
    lw.wo = rnd({dim, c.q_dim()});
    lw.ffn_norm = ones(dim);
    lw.w1 = rnd({hidden, dim});
    lw.w2 = rnd({dim, hidden});
    lw.w3 = rnd({hidden, dim});
    m.weights.layers.push_back(lw);
  }
  m.weights.final_norm = ones(dim);
  m.weights.lm_head = m.weights.token_embedding;
  return m;
}

void CompareWithNaive(const Model& model, const std::vector<int>& tokens,
                      const std::string& label) {
  const int T = static_cast<int>(tokens.size()), V = model.config.vocab_size;
  KVCache cache = KVCache::Create(model.config, T);
  RunState state;
  ForwardRequest req;
  req.tokens = tokens;
  Tensor fast = Forward(model, cache, state, req);
  NaiveLlama naive(model);
  std::vector<float> slow;
  for (int t = 0; t < T; ++t) {
    const auto& l = naive.Step(tokens[t]);
    slow.insert(slow.end(), l.begin(), l.end());
  }
  std::vector<float> got(fast.data(), fast.data() + static_cast<int64_t>(T) * V);
  EXPECT_LT(test::MaxRelDiff(got, slow, label + " fast vs naive"), 1e-5);
}

TEST(Model, FastPathMatchesNaivePath) {
  std::vector<int> tokens;
  for (int i = 0; i < 48; ++i) tokens.push_back((i * 31 + 7) % 97);
  CompareWithNaive(RandomLlama(48, 80, 3, 6, 2, 97, 64, RopeKind::kInterleaved, 1), tokens,
                   "random gqa interleaved");
  CompareWithNaive(RandomLlama(32, 64, 2, 4, 4, 97, 64, RopeKind::kHalf, 2), tokens,
                   "random mha half");
  CompareWithNaive(LoadStories(), {1, 403, 407, 261, 378, 432, 383, 286, 261, 376}, "stories260K");
  // Longer than two MLP chunks (kMlpRows), with a partial last chunk.
  std::vector<int> long_tokens;
  for (int i = 0; i < 2 * kMlpRows + 77; ++i) long_tokens.push_back((i * 31 + 7) % 97);
  CompareWithNaive(RandomLlama(16, 24, 2, 2, 1, 97, 2048, RopeKind::kHalf, 3), long_tokens,
                   "random, T > 2 MLP chunks");
}

TEST(Model, SingleUseCacheEqualsFullCacheAndRefusesASecondCall) {
  const Model model = RandomLlama(32, 64, 3, 4, 2, 97, 256, RopeKind::kHalf, 4);
  std::vector<int> tokens;
  for (int i = 0; i < 200; ++i) tokens.push_back((i * 13 + 5) % 97);
  const int T = static_cast<int>(tokens.size());
  KVCache full = KVCache::Create(model.config, T);
  KVCache single = KVCache::CreateSingleUse(model.config, T);
  EXPECT_EQ(single.Bytes() * model.config.n_layers, full.Bytes());
  RunState s1, s2;
  ForwardRequest req;
  req.tokens = tokens;
  const Tensor a = Forward(model, full, s1, req);
  const Tensor b = Forward(model, single, s2, req);
  std::vector<float> va(a.data(), a.data() + a.numel()), vb(b.data(), b.data() + b.numel());
  EXPECT_EQ(test::MaxDiff(va, vb, "single-use vs full cache logits"), 0.0);
  EXPECT_THROW(Forward(model, single, s2, req), Error);
  single.Clear();
  const Tensor c = Forward(model, single, s2, req);
  EXPECT_EQ(c[123], va[123]);
}

TEST(Generate, GreedyIsDeterministicAndStopsAtContext) {
  Model model = LoadStories();
  GenerateOptions opt;
  opt.steps = 40;
  opt.sampler.temperature = 0.0f;
  std::vector<int> streamed;
  auto a = Generate(model, {1}, opt, [&](int, int tok) { streamed.push_back(tok); });
  auto b = Generate(model, {1}, opt, nullptr);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, streamed);
  EXPECT_LE(a.size(), 39u);
  // Greedy equals the argmax of a full prefill over the generated sequence.
  std::vector<int> seq = {1};
  seq.insert(seq.end(), a.begin(), a.end());
  KVCache cache = KVCache::Create(model.config, static_cast<int>(seq.size()));
  RunState state;
  ForwardRequest req;
  req.tokens = seq;
  Tensor logits = Forward(model, cache, state, req);
  for (size_t t = 0; t + 1 < seq.size(); ++t)
    EXPECT_EQ(Argmax(logits.row(t), model.config.vocab_size), seq[t + 1]) << "step " << t;
  opt.sampler.temperature = 1.0f;
  opt.sampler.top_p = 0.9f;
  opt.sampler.seed = 7;
  EXPECT_EQ(Generate(model, {1}, opt, nullptr), Generate(model, {1}, opt, nullptr));
}

// Argmax is the first position of the largest value (as std::max_element), on lengths around the
// vector widths and with the maximum repeated, at the start, in the tail, and with a NaN present.
TEST(Sampler, ArgmaxIsTheFirstLargest) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist;
  for (int n : {1, 7, 8, 9, 31, 32000}) {
    std::vector<float> x(n);
    for (float& v : x) v = dist(rng);
    EXPECT_EQ(Argmax(x.data(), n), std::max_element(x.begin(), x.end()) - x.begin()) << n;
    x[n - 1] = 100.0f;
    EXPECT_EQ(Argmax(x.data(), n), n - 1) << n;
    x[n / 2] = 100.0f;
    EXPECT_EQ(Argmax(x.data(), n), n / 2) << n;
    x[0] = 100.0f;
    EXPECT_EQ(Argmax(x.data(), n), 0) << n;
  }
  std::vector<float> with_nan = {1.0f, NAN, 3.0f, 2.0f};
  const int at = Argmax(with_nan.data(), 4);
  EXPECT_TRUE(at >= 0 && at < 4) << at;
}

TEST(Sampler, TopPKeepsOnlyTheNucleus) {
  // p = softmax([log .6, log .3, log .1]); top_p 0.5 keeps only token 0.
  std::vector<float> logits = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  Sampler s({.temperature = 1.0f, .top_p = 0.5f, .seed = 3});
  for (int i = 0; i < 200; ++i) ASSERT_EQ(s.Sample(logits.data(), 3), 0);
  Sampler full({.temperature = 1.0f, .top_p = 1.0f, .seed = 3});
  int counts[3] = {0, 0, 0};
  for (int i = 0; i < 20000; ++i) counts[full.Sample(logits.data(), 3)]++;
  EXPECT_NEAR(counts[0] / 20000.0, 0.6, 0.02);
  EXPECT_NEAR(counts[2] / 20000.0, 0.1, 0.02);
}

}  // namespace
}  // namespace ss

namespace ss {
namespace {

TEST(Generate, GreedyStoryMatchesNaivePathTokenForToken) {
  // 256 steps from BOS, greedy, with the fast path and with the independent naive path.
  Model model = LoadStories();
  GenerateOptions opt;
  opt.steps = 256;
  opt.sampler.temperature = 0.0f;
  std::vector<int> fast = Generate(model, {1}, opt, nullptr);
  NaiveLlama naive(model);
  std::vector<int> slow;
  int token = 1;
  for (int pos = 1; pos < 256; ++pos) {
    const auto& logits = naive.Step(token);
    token = Argmax(logits.data(), model.config.vocab_size);
    if (token == 1 || token == 2) break;
    slow.push_back(token);
  }
  std::printf("greedy story: %zu tokens\n", fast.size());
  EXPECT_EQ(fast.size(), 255u);
  EXPECT_EQ(fast, slow);
}

}  // namespace
}  // namespace ss
