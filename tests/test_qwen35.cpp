// Qwen3-Next / Qwen3.5 / Qwen3.5-MoE beyond the per-family round trip of test_arch.cpp: a prefill
// longer than the mixer's row chunks against token-by-token decode and the float64 reference,
// image-text checkpoints whose vision and multi-token-prediction tensors are never read, streaming
// with the DeltaNet state beside the sink + window cache, and bad configs and checkpoints refused
// by name.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "analysis/analyze.h"
#include "common/error.h"
#include "io/hf_config.h"
#include "io/load.h"
#include "io/safetensors.h"
#include "naive_hf.h"
#include "stream/stream.h"
#include "test_util.h"

namespace ss {
namespace {

// Linear, linear, full (interval 3), two value heads per key head, experts with a shared one.
const char* kNext = R"({"architectures": ["Qwen3NextForCausalLM"], "hidden_size": 24,
  "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
  "vocab_size": 53, "max_position_embeddings": 4096, "partial_rotary_factor": 0.5,
  "full_attention_interval": 3, "linear_num_key_heads": 1, "linear_num_value_heads": 2,
  "linear_key_head_dim": 8, "linear_value_head_dim": 4, "num_experts": 3, "num_experts_per_tok": 2,
  "moe_intermediate_size": 8, "shared_expert_intermediate_size": 8})";

const char* kImageText = R"({"architectures": ["Qwen3_5ForConditionalGeneration"],
  "tie_word_embeddings": true, "text_config": {"hidden_size": 16, "intermediate_size": 24,
  "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
  "vocab_size": 37, "max_position_embeddings": 64, "partial_rotary_factor": 0.5,
  "full_attention_interval": 2, "linear_num_key_heads": 1, "linear_num_value_heads": 1,
  "linear_key_head_dim": 4, "linear_value_head_dim": 4}})";

// f() throws ss::Error whose message names `needle`.
template <typename F>
void ExpectError(F f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one naming " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << e.what() << "\n(expected it to name " << needle << ")";
  }
}

std::vector<int> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> t(n);
  for (int& x : t) x = static_cast<int>(rng() % vocab);
  return t;
}

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data(), t.data() + t.numel());
}

TEST(Qwen35, LongPrefillMatchesDecodeAndTheReference) {
  // 700 tokens: the mixer's 512-row chunks, the delta rule's 64-token blocks and a ragged end.
  const ModelConfig config = ParseHfConfig(kNext, "next");
  const test::HfTensors weights = test::RandomHfWeights(config, 11);
  const Model model = test::LoadRandomHf(kNext, 11, "qwen35_long");
  const std::vector<int> tokens = RandomTokens(700, config.vocab_size, 3);
  KVCache cache = KVCache::Create(model.config, 700);
  RunState state;
  ForwardRequest all;
  all.tokens = tokens;
  const std::vector<float> prefill = Values(Forward(model, cache, state, all));
  const std::vector<float> reference = test::NaiveHfForward(config, weights, tokens);
  EXPECT_LT(test::MaxRelDiff(prefill, reference, "700-token prefill vs float64 reference"), 1e-4);
  cache.Clear();
  std::vector<float> decode;
  for (size_t t = 0; t < tokens.size(); ++t) {
    ForwardRequest one;
    one.tokens = std::span<const int>(tokens).subspan(t, 1);
    const std::vector<float> row = Values(Forward(model, cache, state, one));
    decode.insert(decode.end(), row.begin(), row.end());
  }
  EXPECT_LT(test::MaxRelDiff(decode, prefill, "token-by-token decode vs prefill"), 1e-4);
  // The linear layers keep no keys: the cache holds one attention layer's entries and two states.
  EXPECT_TRUE(cache.k[0].empty() && cache.k[1].empty() && !cache.k[2].empty());
  EXPECT_FALSE(cache.delta_state[0].empty());
  EXPECT_TRUE(cache.delta_state[2].empty());
}

TEST(Qwen35, VisionAndMultiTokenPredictionTensorsAreNeverRead) {
  const ModelConfig config = ParseHfConfig(kImageText, "image-text");
  test::HfTensors weights = test::RandomHfWeights(config, 5);
  const std::vector<int> tokens = RandomTokens(9, config.vocab_size, 1);
  const std::vector<float> reference = test::NaiveHfForward(config, weights, tokens);
  // What the Hub's checkpoints hold beside the language model (model.visual.*, mtp.*), with
  // layer numbers beyond the language model's.
  for (const char* name :
       {"model.visual.blocks.0.attn.qkv.weight", "model.visual.blocks.9.norm1.weight",
        "model.visual.merger.norm.weight", "mtp.fc.weight", "mtp.layers.0.input_layernorm.weight",
        "mtp.layers.0.self_attn.q_proj.weight"})
    weights[name] = Tensor::Zeros({3, 4});
  const std::string dir = test::TempDir("qwen35_image_text");
  WriteHfConfig(dir + "/config.json", config);
  std::vector<std::pair<std::string, Tensor>> list(weights.begin(), weights.end());
  WriteSafetensors(dir + "/model.safetensors", list);
  const Model model = LoadModel(dir);
  KVCache cache = KVCache::Create(model.config, 9);
  RunState state;
  ForwardRequest req;
  req.tokens = tokens;
  EXPECT_LT(test::MaxRelDiff(Values(Forward(model, cache, state, req)), reference,
                             "image-text checkpoint vs reference"),
            1e-5);
  // Vision weights alone (no language model) are refused before anything is read.
  const std::string vision = test::TempDir("qwen35_vision_only");
  WriteHfConfig(vision + "/config.json", config);
  WriteSafetensors(vision + "/model.safetensors",
                   {{"model.visual.blocks.0.attn.qkv.weight", Tensor::Zeros({3, 4})}});
  ExpectError([&] { LoadModel(vision); }, "2 layers, but the file holds only 1 tensors");
}

TEST(Qwen35, StreamsWithTheStateBesideTheSinkWindowCache) {
  const Model model = test::LoadRandomHf(kNext, 2, "qwen35_stream");
  const std::vector<int> tokens = RandomTokens(300, model.config.vocab_size, 9);
  // A window longer than the stream: streaming computes what one forward does.
  stream::StreamOptions wide;
  wide.sinks = 4;
  wide.window = 400;
  auto cache = stream::MakeStreamCache(model, wide);
  const std::vector<float> streamed = Values(cache->Prefill(tokens));
  KVCache full = KVCache::Create(model.config, 300);
  RunState state;
  ForwardRequest req;
  req.tokens = tokens;
  req.logits = LogitsMode::kLast;
  EXPECT_LT(test::MaxRelDiff(streamed, Values(Forward(model, full, state, req)),
                             "stream (window > tokens) vs forward"),
            1e-4);
  // A short window: the cache's bytes stop growing once it fills; the states are constant.
  stream::StreamOptions narrow;
  narrow.sinks = 4;
  narrow.window = 32;
  narrow.first_ring = 8;
  auto small = stream::MakeStreamCache(model, narrow);
  int64_t bytes_at_100 = 0;
  for (size_t t = 0; t < tokens.size(); ++t) {
    small->Step(tokens[t]);
    if (t == 99) bytes_at_100 = small->kv_bytes();
  }
  EXPECT_GT(bytes_at_100, 0);
  EXPECT_EQ(small->kv_bytes(), bytes_at_100);
}

TEST(Qwen35, AnalysisReportsNoAttentionMapOnTheDeltaNetLayers) {
  const Model model = test::LoadRandomHf(kNext, 4, "qwen35_analyze");
  const std::vector<std::vector<int>> samples = {RandomTokens(40, model.config.vocab_size, 1),
                                                 RandomTokens(40, model.config.vocab_size, 2)};
  for (analysis::AttnPath path : {analysis::AttnPath::kFused, analysis::AttnPath::kMaterialised,
                                  analysis::AttnPath::kMaterialisedKeepAll}) {
    analysis::AnalyzeOptions o;
    o.path = path;
    const analysis::ConditionResult r =
        analysis::AnalyzeSamples(model, analysis::Condition::kNoBos, samples, o);
    ASSERT_EQ(r.linear_layers.size(), 3u);
    for (int l = 0; l < 3; ++l) {
      const bool linear = l < 2;
      EXPECT_EQ(r.LinearLayer(l), linear);
      for (int h = 0; h < r.n_heads; ++h) {
        EXPECT_EQ(std::isnan(r.Alpha(0, l, h)), linear) << l << " " << h;
        EXPECT_EQ(std::isnan(r.top_share[l * r.n_heads + h]), linear);
      }
      EXPECT_EQ(std::isnan(r.sink_rate_per_layer[l]), linear);
      EXPECT_EQ(std::isnan(r.gate_p0[l]), linear);
      EXPECT_TRUE(std::isfinite(r.p0_norm_ratio[l]));  // hidden states: every layer
    }
    // The whole-model rate is the attention layer's heads' share.
    double heads = 0;
    for (int h = 0; h < r.n_heads; ++h) heads += r.Alpha(0, 2, h) > o.eps;
    EXPECT_NEAR(r.sink_rate_of_mean_alpha[0], heads / r.n_heads, 1e-12);
    EXPECT_GT(r.gate_p0[2], 0.0);
  }
}

TEST(Qwen35, DeltaNetHooksShowTheStateAndAnAblationChangesTheOutput) {
  const Model model = test::LoadRandomHf(kNext, 4, "qwen35_hooks");
  const std::vector<int> tokens = RandomTokens(20, model.config.vocab_size, 6);
  std::vector<int64_t> shape;
  Hooks hooks;
  hooks.Add("blocks.1.linear_attn.hook_state",
            [&](const HookContext&, Tensor& s) { shape = s.shape(); });
  hooks.Add("blocks.0.linear_attn.hook_out", [&](const HookContext&, Tensor& o) {
    for (int64_t i = 0; i < o.numel(); ++i) o[i] = 0;  // zero ablation of the mixer's output
  });
  KVCache cache = KVCache::Create(model.config, 20);
  RunState state;
  ForwardRequest req;
  req.tokens = tokens;
  const std::vector<float> plain = Values(Forward(model, cache, state, req));
  cache.Clear();
  req.hooks = &hooks;
  const std::vector<float> ablated = Values(Forward(model, cache, state, req));
  EXPECT_EQ(shape, (std::vector<int64_t>{2, 8, 4}));  // (nv, dk, dv)
  EXPECT_GT(test::MaxDiff(plain, ablated, "layer 0 mixer zeroed vs not"), 1e-3);
}

// `edit` changes kNext's config.json text; the error must name `needle`.
void ExpectConfigError(const std::string& json, const std::string& needle) {
  ExpectError([&] { ParseHfConfig(json, "config.json"); }, needle);
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? s : s.replace(at, from.size(), to);
}

TEST(Qwen35, BadConfigsAreRefusedByName) {
  const std::string next = kNext;
  ExpectConfigError(Replace(next, R"("full_attention_interval": 3,)",
                            R"("full_attention_interval": 3, "layer_types": ["linear_attention",
                            "full_attention", "full_attention"],)"),
                    "full_attention_interval");
  ExpectConfigError(Replace(next, R"("full_attention_interval": 3,)",
                            R"("layer_types": ["linear_attention", "full_attention"],)"),
                    "layer_types");
  ExpectConfigError(Replace(next, R"("full_attention_interval": 3,)",
                            R"("layer_types": ["linear_attention", "mamba", "full_attention"],)"),
                    "mamba");
  ExpectConfigError(Replace(next, R"("linear_num_key_heads": 1, "linear_num_value_heads": 2)",
                            R"("linear_num_key_heads": 2, "linear_num_value_heads": 3)"),
                    "linear_num_value_heads");
  ExpectConfigError(Replace(next, R"("full_attention_interval": 3,)",
                            R"("full_attention_interval": 3, "linear_conv_kernel_dim": 0,)"),
                    "linear_conv_kernel_dim");
  ExpectConfigError(Replace(next, R"("full_attention_interval": 3,)",
                            R"("full_attention_interval": 3, "attention_bias": true,)"),
                    "attention_bias");
  ExpectConfigError(Replace(next, R"("full_attention_interval": 3,)",
                            R"("full_attention_interval": 3, "sinkscope_attn_kv_bias": true,)"),
                    "kv-bias");
  const std::string image = kImageText;
  ExpectConfigError(Replace(image, R"("text_config": {)", R"("text_configs": {)"), "text_config");
  ExpectConfigError(Replace(image, R"("partial_rotary_factor": 0.5,)",
                            R"("partial_rotary_factor": 0.5, "attn_output_gate": false,)"),
                    "attn_output_gate");
  ExpectConfigError(Replace(image, R"("partial_rotary_factor": 0.5,)",
                            R"("rope_parameters": {"rope_type": "default", "partial_rotary_factor":
                            0.5, "mrope_section": [1, 1, 1]},)"),
                    "mrope_section");
  ExpectConfigError(Replace(image, R"("num_hidden_layers": 2,)",
                            R"("num_hidden_layers": 2, "tie_word_embeddings": false,)"),
                    "tie_word_embeddings");
}

TEST(Qwen35, CheckpointsWhoseTensorsDoNotMatchTheLayerKindsAreRefused) {
  // A missing A_log.
  ExpectError(
      [&] {
        test::LoadRandomHf(kNext, 1, "qwen35_no_alog",
                           [](test::HfTensors& w) { w.erase("model.layers.0.linear_attn.A_log"); });
      },
      "model.layers.0.linear_attn.A_log");
  // Layer 0 stored as full attention where the config makes it linear.
  ExpectError(
      [&] {
        test::LoadRandomHf(kNext, 1, "qwen35_swapped", [](test::HfTensors& w) {
          for (const char* part : {"in_proj_qkvz.weight", "in_proj_ba.weight", "conv1d.weight",
                                   "dt_bias", "A_log", "norm.weight", "out_proj.weight"})
            w.erase(std::string("model.layers.0.linear_attn.") + part);
          w["model.layers.0.self_attn.q_proj.weight"] = w["model.layers.2.self_attn.q_proj.weight"];
        });
      },
      "model.layers.0.linear_attn.in_proj_qkvz.weight");
}

}  // namespace
}  // namespace ss
