// Qwen3-Next / Qwen3.5 / Qwen3.5-MoE beyond the per-family round trip of test_arch.cpp: a prefill
// longer than the mixer's row chunks against token-by-token decode and the float64 reference,
// image-text checkpoints whose vision and multi-token-prediction tensors are never read, streaming
// with the DeltaNet state beside the sink + window cache, bad configs and checkpoints refused by
// name, and GGUF files laid out by hand as llama.cpp's converter lays them out.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "analysis/analyze.h"
#include "common/error.h"
#include "common/file_util.h"
#include "gguf_writer.h"
#include "io/gguf.h"
#include "io/hf_config.h"
#include "io/load.h"
#include "io/model_files.h"
#include "io/safetensors.h"
#include "kernels/dequant.h"
#include "model/blocks.h"
#include "model/precision.h"
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

// ---- GGUF as llama.cpp writes it (docs/specs/qwen3_next.md section 8), built here by hand from
// the Hugging Face tensors with the converter's transforms written out independently of
// sinkscope's tensor map: norms stored as 1 + w (not ssm_norm), ssm_a = -exp(A_log), qwen35*'s
// value heads in tiled order (stored head s holds HF head (s % nk) r + s / nk), qwen3next's
// in_proj_qkvz regrouped flat into attn_qkv / attn_gate, conv1d as (C, K).

// Qwen3.5-MoE, text only: linear, linear, full; two key heads of 4, four value heads of 6.
const char* kMoe = R"({"architectures": ["Qwen3_5MoeForCausalLM"], "hidden_size": 16,
  "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
  "vocab_size": 29, "max_position_embeddings": 64, "partial_rotary_factor": 0.5,
  "full_attention_interval": 3, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
  "linear_key_head_dim": 4, "linear_value_head_dim": 6, "linear_conv_kernel_dim": 3,
  "num_experts": 3, "num_experts_per_tok": 2, "moe_intermediate_size": 8,
  "shared_expert_intermediate_size": 12, "tie_word_embeddings": false})";

// Qwen3-Next with two key heads of two value heads each (grouped in_proj_qkvz).
const char* kNextGrouped = R"({"architectures": ["Qwen3NextForCausalLM"], "hidden_size": 16,
  "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
  "vocab_size": 29, "max_position_embeddings": 64, "partial_rotary_factor": 0.25,
  "full_attention_interval": 2, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
  "linear_key_head_dim": 4, "linear_value_head_dim": 6, "num_experts": 3,
  "num_experts_per_tok": 2, "moe_intermediate_size": 8, "shared_expert_intermediate_size": 12,
  "tie_word_embeddings": true})";

// What a hand-built file departs from the good one by.
struct GgufEdits {
  bool drop_ssm_a = false;
  float ssm_a_value = 0;  // nonzero: blk.0.ssm_a[1] holds it
  std::vector<int32_t> sections = {1, 1, 0, 0};
  int recurrent_flags = 4;  // attention.recurrent_layers entries (block_count 4: one MTP layer)
};

class HandGguf {
 public:
  void Add(const std::string& name, const Tensor& t) {  // t in PyTorch order: ne reversed
    while (data_.size() % 32 != 0) data_ += '\0';
    w.Tensor(name, std::vector<uint64_t>(t.shape().rbegin(), t.shape().rend()), /*F32=*/0,
             data_.size());
    data_.append(reinterpret_cast<const char*>(t.data()), sizeof(float) * t.numel());
  }
  std::string Write(const std::string& tag) {
    const std::string path = test::TempDir(tag) + "/model.gguf";
    WriteFileAtomic(path, w.Build(data_));
    return path;
  }
  test::GgufWriter w;

 private:
  std::string data_;
};

Tensor Rows(const Tensor& t, int64_t first, int64_t count) {  // rows of a 2-D (or 1-D) tensor
  const int64_t width = t.numel() / t.dim(0);
  std::vector<int64_t> shape = t.shape();
  shape[0] = count;
  Tensor out = Tensor::Zeros(shape);
  std::memcpy(out.data(), t.data() + first * width, sizeof(float) * count * width);
  return out;
}

Tensor Stack(const std::vector<Tensor>& parts) {  // along dim 0
  int64_t rows = 0;
  for (const Tensor& p : parts) rows += p.dim(0);
  std::vector<int64_t> shape = parts[0].shape();
  shape[0] = rows;
  Tensor out = Tensor::Zeros(shape);
  float* at = out.data();
  for (const Tensor& p : parts) {
    std::memcpy(at, p.data(), sizeof(float) * p.numel());
    at += p.numel();
  }
  return out;
}

Tensor PlusOne(const Tensor& t) {
  Tensor out = t.Copy();
  for (int64_t i = 0; i < out.numel(); ++i) out[i] += 1.0f;
  return out;
}

// Stored head s of a tiled block of `heads` blocks of `size` rows is HF head (s % nk) r + s / nk.
Tensor Tiled(const Tensor& t, int64_t first, int64_t size, int nk, int nv) {
  std::vector<Tensor> parts;
  if (first > 0) parts.push_back(Rows(t, 0, first));
  for (int s = 0; s < nv; ++s)
    parts.push_back(Rows(t, first + ((s % nk) * (nv / nk) + s / nk) * size, size));
  const int64_t end = first + nv * size;
  if (end < t.dim(0)) parts.push_back(Rows(t, end, t.dim(0) - end));
  return Stack(parts);
}

Tensor Transpose(const Tensor& t) {
  Tensor out = Tensor::Zeros({t.dim(1), t.dim(0)});
  for (int64_t i = 0; i < t.dim(0); ++i)
    for (int64_t j = 0; j < t.dim(1); ++j) out[j * t.dim(0) + i] = t[i * t.dim(1) + j];
  return out;
}

// The GGUF llama.cpp's converter makes of `w` (HF names) for `c` (qwen3_5_moe_text or qwen3_next).
std::string BuildLlamaCppGguf(const ModelConfig& c, const test::HfTensors& w,
                              const std::string& tag, const GgufEdits& edits = {}) {
  const bool next = c.arch == "qwen3_next";
  const std::string arch = next ? "qwen3next" : "qwen35moe", p = arch + ".";
  const int nk = c.linear_k_heads, nv = c.linear_v_heads, r = nv / nk;
  const int64_t dk = c.linear_k_dim, dv = c.linear_v_dim, Kd = c.linear_qk_dim();
  HandGguf g;
  g.w.KeyString("general.architecture", arch);
  const int mtp = next ? 0 : 1;
  g.w.KeyU32(p + "block_count", c.n_layers + mtp);
  if (mtp) g.w.KeyU32(p + "nextn_predict_layers", mtp);
  g.w.KeyU32(p + "embedding_length", c.dim);
  g.w.KeyU32(p + "context_length", c.max_seq_len);
  g.w.KeyU32(p + "attention.head_count", c.n_heads);
  g.w.KeyU32(p + "attention.head_count_kv", c.n_kv_heads);
  g.w.KeyU32(p + "attention.key_length", c.head_dim);
  g.w.KeyU32(p + "attention.value_length", c.head_dim);
  g.w.KeyF32(p + "attention.layer_norm_rms_epsilon", c.norm_eps);
  g.w.KeyF32(p + "rope.freq_base", c.rope_theta);
  g.w.KeyU32(p + "rope.dimension_count", c.rot_dim());
  if (!next) g.w.KeyI32s(p + "rope.dimension_sections", edits.sections);
  g.w.KeyU32(p + "ssm.conv_kernel", c.linear_conv);
  g.w.KeyU32(p + "ssm.state_size", dk);
  g.w.KeyU32(p + "ssm.group_count", nk);
  g.w.KeyU32(p + "ssm.time_step_rank", nv);
  g.w.KeyU32(p + "ssm.inner_size", nv * dv);
  g.w.KeyU32(p + "expert_count", c.n_experts);
  g.w.KeyU32(p + "expert_used_count", c.n_experts_per_tok);
  g.w.KeyU32(p + "expert_feed_forward_length", c.hidden_dim);
  g.w.KeyU32(p + "expert_shared_feed_forward_length", c.shared_expert_hidden_dim);
  if (next) {
    g.w.KeyU32(p + "full_attention_interval", 2);
  } else {
    // The flags override the interval (which alone would make layer 1 full attention).
    g.w.KeyU32(p + "full_attention_interval", 2);
    std::string flags;
    test::GgufWriter::Put<uint32_t>(flags, 7);  // bool
    test::GgufWriter::Put<uint64_t>(flags, edits.recurrent_flags);
    for (int l = 0; l < edits.recurrent_flags; ++l)
      test::GgufWriter::Put<uint8_t>(flags, l < c.n_layers && c.LinearLayer(l));
    g.w.KeyRaw(p + "attention.recurrent_layers", 9, flags);
  }
  const std::string hf = "model.";
  auto get = [&](const std::string& name) { return w.at(name); };
  g.Add("token_embd.weight", get(hf + "embed_tokens.weight"));
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string at = fmt::format("{}layers.{}.", hf, l), blk = fmt::format("blk.{}.", l);
    g.Add(blk + "attn_norm.weight", PlusOne(get(at + "input_layernorm.weight")));
    g.Add(blk + "post_attention_norm.weight", PlusOne(get(at + "post_attention_layernorm.weight")));
    if (c.LinearLayer(l)) {
      const std::string la = at + "linear_attn.";
      Tensor qkv, z, conv = get(la + "conv1d.weight").Reshaped({2 * Kd + nv * dv, c.linear_conv});
      if (next) {  // per key head [q | k | v of its r heads | z of them] -> [all q | all k | all v]
        const Tensor qkvz = get(la + "in_proj_qkvz.weight");
        const int64_t G = 2 * dk + 2 * r * dv;
        std::vector<Tensor> q, k, v, zs;
        for (int h = 0; h < nk; ++h) {
          q.push_back(Rows(qkvz, h * G, dk));
          k.push_back(Rows(qkvz, h * G + dk, dk));
          v.push_back(Rows(qkvz, h * G + 2 * dk, r * dv));
          zs.push_back(Rows(qkvz, h * G + 2 * dk + r * dv, r * dv));
        }
        std::vector<Tensor> all = q;
        all.insert(all.end(), k.begin(), k.end());
        all.insert(all.end(), v.begin(), v.end());
        qkv = Stack(all);
        z = Stack(zs);
        g.Add(blk + "ssm_ba.weight", get(la + "in_proj_ba.weight"));
      } else {
        qkv = Tiled(get(la + "in_proj_qkv.weight"), 2 * Kd, dv, nk, nv);
        z = Tiled(get(la + "in_proj_z.weight"), 0, dv, nk, nv);
        conv = Tiled(conv, 2 * Kd, dv, nk, nv);
        g.Add(blk + "ssm_beta.weight", Tiled(get(la + "in_proj_b.weight"), 0, 1, nk, nv));
        g.Add(blk + "ssm_alpha.weight", Tiled(get(la + "in_proj_a.weight"), 0, 1, nk, nv));
      }
      g.Add(blk + "attn_qkv.weight", qkv);
      g.Add(blk + "attn_gate.weight", z);
      g.Add(blk + "ssm_conv1d.weight", conv);
      Tensor a = get(la + "A_log").Copy(), dt = get(la + "dt_bias");
      for (int64_t i = 0; i < a.numel(); ++i) a[i] = -std::exp(a[i]);
      if (!next) {
        a = Tiled(a, 0, 1, nk, nv);
        dt = Tiled(dt, 0, 1, nk, nv);
      }
      if (l == 0 && edits.ssm_a_value != 0) a[1] = edits.ssm_a_value;
      if (!(l == 0 && edits.drop_ssm_a)) g.Add(blk + "ssm_a", a);
      g.Add(blk + "ssm_dt.bias", dt);
      g.Add(blk + "ssm_norm.weight", get(la + "norm.weight"));  // not 1 + w
      Tensor out = get(la + "out_proj.weight");
      if (!next) out = Transpose(Tiled(Transpose(out), 0, dv, nk, nv));
      g.Add(blk + "ssm_out.weight", out);
    } else {
      const std::string sa = at + "self_attn.";
      g.Add(blk + "attn_q.weight", get(sa + "q_proj.weight"));
      g.Add(blk + "attn_k.weight", get(sa + "k_proj.weight"));
      g.Add(blk + "attn_v.weight", get(sa + "v_proj.weight"));
      g.Add(blk + "attn_output.weight", get(sa + "o_proj.weight"));
      g.Add(blk + "attn_q_norm.weight", PlusOne(get(sa + "q_norm.weight")));
      g.Add(blk + "attn_k_norm.weight", PlusOne(get(sa + "k_norm.weight")));
    }
    const std::string mlp = at + "mlp.";
    const int64_t E = c.n_experts, F = c.hidden_dim;
    g.Add(blk + "ffn_gate_inp.weight", get(mlp + "gate.weight"));
    std::vector<Tensor> gates, ups, downs;
    for (int64_t e = 0; e < E; ++e) {
      if (next) {
        const std::string ex = fmt::format("{}experts.{}.", mlp, e);
        gates.push_back(get(ex + "gate_proj.weight"));
        ups.push_back(get(ex + "up_proj.weight"));
        downs.push_back(get(ex + "down_proj.weight"));
      } else {  // gate_up_proj (E, 2F, D): expert e's gate rows, then its up rows
        const Tensor gu = get(mlp + "experts.gate_up_proj").Reshaped({E * 2 * F, c.dim});
        gates.push_back(Rows(gu, e * 2 * F, F));
        ups.push_back(Rows(gu, e * 2 * F + F, F));
        downs.push_back(
            Rows(get(mlp + "experts.down_proj").Reshaped({E * c.dim, F}), e * c.dim, c.dim));
      }
    }
    g.Add(blk + "ffn_gate_exps.weight", Stack(gates).Reshaped({E, F, c.dim}));
    g.Add(blk + "ffn_up_exps.weight", Stack(ups).Reshaped({E, F, c.dim}));
    g.Add(blk + "ffn_down_exps.weight", Stack(downs).Reshaped({E, c.dim, F}));
    g.Add(blk + "ffn_gate_inp_shexp.weight",
          get(mlp + "shared_expert_gate.weight").Reshaped({c.dim}));
    g.Add(blk + "ffn_gate_shexp.weight", get(mlp + "shared_expert.gate_proj.weight"));
    g.Add(blk + "ffn_up_shexp.weight", get(mlp + "shared_expert.up_proj.weight"));
    g.Add(blk + "ffn_down_shexp.weight", get(mlp + "shared_expert.down_proj.weight"));
  }
  if (mtp) {  // the multi-token-prediction block after the model's layers: never read
    const std::string blk = fmt::format("blk.{}.", c.n_layers);
    g.Add(blk + "nextn.eh_proj.weight", Tensor::Zeros({c.dim, 2 * c.dim}));
    g.Add(blk + "attn_q.weight", Tensor::Zeros({2 * c.q_dim(), c.dim}));
    g.Add(blk + "ffn_gate_inp.weight", Tensor::Zeros({c.n_experts, c.dim}));
  }
  g.Add("output_norm.weight", PlusOne(get(hf + "norm.weight")));
  if (!c.tied_embeddings) g.Add("output.weight", get("lm_head.weight"));
  return g.Write(tag);
}

TEST(Qwen35Gguf, LlamaCppLayoutReadsAsTheReference) {
  for (const char* json : {kMoe, kNextGrouped}) {
    const ModelConfig config = ParseHfConfig(json, "config.json");
    const test::HfTensors weights = test::RandomHfWeights(config, 23);
    const std::string path = BuildLlamaCppGguf(config, weights, "qwen35_llamacpp_" + config.arch);
    const Model model = LoadModel(path);
    EXPECT_EQ(model.format, "gguf");
    EXPECT_EQ(model.config.arch, config.arch);
    EXPECT_EQ(model.config.n_layers, config.n_layers);
    EXPECT_EQ(model.config.linear_layers, config.linear_layers);
    EXPECT_EQ(model.config.rot_dim(), config.rot_dim());
    const std::vector<int> tokens = RandomTokens(11, config.vocab_size, 4);
    KVCache cache = KVCache::Create(model.config, 11);
    RunState state;
    ForwardRequest req;
    req.tokens = tokens;
    const std::vector<float> got = Values(Forward(model, cache, state, req));
    EXPECT_LT(test::MaxRelDiff(got, test::NaiveHfForward(config, weights, tokens),
                               config.arch + " llama.cpp-layout GGUF vs float64 reference"),
              1e-5);
  }
}

TEST(Qwen35Gguf, BadFilesAreRefusedByName) {
  const ModelConfig config = ParseHfConfig(kMoe, "config.json");
  const test::HfTensors weights = test::RandomHfWeights(config, 23);
  auto expect = [&](const GgufEdits& edits, const std::string& tag, const std::string& needle) {
    const std::string path = BuildLlamaCppGguf(config, weights, tag, edits);
    ExpectError([&] { LoadModel(path); }, path);
    ExpectError([&] { LoadModel(path); }, needle);
  };
  expect({.drop_ssm_a = true}, "qwen35_gguf_no_ssm_a", "'blk.0.ssm_a'");
  expect({.ssm_a_value = 0.5f}, "qwen35_gguf_positive_a", "'blk.0.ssm_a' holds 0.5 at element 1");
  expect({.sections = {1, 1, 1, 0}}, "qwen35_gguf_sections", "qwen35moe.rope.dimension_sections");
  expect({.recurrent_flags = 2}, "qwen35_gguf_flags", "qwen35moe.attention.recurrent_layers");
}

// Widths of whole 256-value blocks, so that every 2-D weight and expert stack is written Q4_K.
const char* kMoeWide = R"({"architectures": ["Qwen3_5MoeForConditionalGeneration"],
  "text_config": {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 2,
  "num_key_value_heads": 1, "head_dim": 128, "vocab_size": 300, "max_position_embeddings": 64,
  "partial_rotary_factor": 0.25, "full_attention_interval": 2, "linear_num_key_heads": 2,
  "linear_num_value_heads": 4, "linear_key_head_dim": 32, "linear_value_head_dim": 64,
  "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 256,
  "shared_expert_intermediate_size": 256, "tie_word_embeddings": false}})";

// convert --to gguf --type q4_k --expert-type q4_k of a random Qwen3.5-MoE image-text model: every
// weight Q4_K but the router, the 1-D tensors (norms, ssm_a, dt bias, the shared expert's gate)
// F32. The logits move by a measured amount (largest difference over the largest logit 0.155 from
// f32; greedy token 20 / 24), which the bound holds at about twice; another seed's logits are 1.35
// away. (Q8_0 and Q6_K, measured on the dense twin: 0.010 and 0.032; each type's steps 4 times
// coarser move them about 4 times as far.) --precision native keeps the expert stacks in their Q4_K
// bytes and gives the same logits as the dequantised f32 load.
std::vector<float> Logits(const Model& model, const std::vector<int>& tokens) {
  KVCache cache = KVCache::Create(model.config, static_cast<int>(tokens.size()));
  RunState state;
  ForwardRequest req;
  req.tokens = tokens;
  return Values(Forward(model, cache, state, req));
}

// The random weights' std 0.2 over rows of 256 would multiply each projection's output by 3, and
// every layer's quantisation error with it: the projections and experts are scaled to std 0.02
// (the embedding and head kept), so that each layer adds to the residual stream rather than
// replacing it, as in a trained model.
void Temper(test::HfTensors& w) {
  for (auto& [name, t] : w)
    if (t.rank() >= 2 && name.find("conv1d") == std::string::npos &&
        name.find("embed_tokens") == std::string::npos && name != "lm_head.weight")
      for (int64_t i = 0; i < t.numel(); ++i) t[i] *= 0.1f;
}

TEST(Qwen35Gguf, Q4KWithinMeasuredTolerance) {
  const Model model = test::LoadRandomHf(kMoeWide, 3, "qwen35_q4k_hf", Temper);
  const int V = model.config.vocab_size;
  const std::vector<int> tokens = RandomTokens(24, V, 6);
  const std::vector<float> want = Logits(model, tokens);
  const double unrelated =
      test::MaxRelDiff(Logits(test::LoadRandomHf(kMoeWide, 4, "qwen35_q4k_other", Temper), tokens),
                       want, "another seed (unrelated logits)");
  const std::string path = test::TempDir("qwen35_q4k") + "/model.gguf";
  GgufWriter writer;
  AddGgufModel(model, writer, kGgmlTypeQ4_K, /*expert_type=*/kGgmlTypeQ4_K);
  writer.Write(path);
  const GgufFile file = GgufFile::Open(path);
  for (const GgufTensorInfo& t : file.tensors()) {
    // The router and the convolution stay F32, as llama.cpp's quantiser keeps them (its ssm_conv
    // operator asserts on F16 weights: a file with them crashes llama-perplexity).
    const bool f32 = t.name.find("ffn_gate_inp.weight") != std::string::npos ||
                     t.name.find("ssm_conv1d") != std::string::npos;
    const uint32_t want_type = t.shape.size() >= 2 && !f32 ? kGgmlTypeQ4_K : kGgmlTypeF32;
    EXPECT_EQ(GgmlTypeName(t.type), std::string(GgmlTypeName(want_type))) << t.name;
  }
  const Model q4 = LoadModel(path);
  EXPECT_EQ(q4.config.arch, "qwen3_5_moe_text");
  const std::vector<float> got = Logits(q4, tokens);
  const double diff = test::MaxRelDiff(got, want, "qwen3.5-moe gguf q4_k vs f32");
  EXPECT_LT(diff, 0.3);
  EXPECT_LT(0.3, unrelated / 3) << "the bound would not catch unrelated weights";
  size_t same = 0;
  for (size_t t = 0; t < tokens.size(); ++t)
    same += std::max_element(got.begin() + t * V, got.begin() + (t + 1) * V) - got.begin() ==
            std::max_element(want.begin() + t * V, want.begin() + (t + 1) * V) - want.begin();
  std::printf("q4_k: greedy token agrees at %zu of %zu positions\n", same, tokens.size());
  EXPECT_GE(same, tokens.size() * 3 / 4);
  const Model native = LoadModel(path, Precision::kNative);
  ASSERT_TRUE(native.weights.layers[0].packed);
  EXPECT_EQ(native.weights.layers[0].packed->moe_w1.ggml.type, kGgmlTypeQ4_K);
  EXPECT_EQ(native.weights.layers[1].packed->moe_w2.ggml.type, kGgmlTypeQ4_K);
  EXPECT_LT(test::MaxRelDiff(Logits(native, tokens), got, "q4_k native vs dequantised"), 1e-2);
  // The DeltaNet projections the map splits (attn_qkv) or reorders (attn_gate, ssm_out: tiled value
  // heads) cannot stay in their Q4_K bytes: at native they are held as BF16 rows, not f32.
  ASSERT_TRUE(native.config.LinearLayer(0));
  const LayerWeights& n0 = native.weights.layers[0];
  for (const auto& [f, p] : {std::pair{&n0.lin_wq, &n0.packed->lin_wq},
                             {&n0.lin_wz, &n0.packed->lin_wz},
                             {&n0.lin_out, &n0.packed->lin_out}}) {
    EXPECT_TRUE(f->empty());
    EXPECT_EQ(p->ggml.type, kGgmlTypeBF16);
  }
  // An F32 file's: they stay f32 at native.
  const std::string f32_path = test::TempDir("qwen35_f32gguf") + "/model.gguf";
  GgufWriter f32_writer;
  AddGgufModel(model, f32_writer, kGgmlTypeF32);
  f32_writer.Write(f32_path);
  const Model f32_native = LoadModel(f32_path, Precision::kNative);
  EXPECT_FALSE(f32_native.weights.layers[0].lin_wq.empty());
}

// The DeltaNet projections are packed at bf16 and q8_0 as the attention and MLP projections are
// (their f32 copies dropped): each packed product against the f32 product of the same weights
// dequantised (ProjectionF32) differs only by the activations' rounding, and a tempered model's
// logits stay within the precisions' usual distance of f32.
TEST(Qwen35, DeltaNetProjectionsArePackedAtReducedPrecision) {
  const std::string dir = test::WriteRandomHf(kNext, 12, "qwen35_packed", Temper);
  const Model f32 = LoadModel(dir, Precision::kF32);
  const std::vector<int> tokens = RandomTokens(40, f32.config.vocab_size, 5);
  const std::vector<float> want = Logits(f32, tokens);
  for (auto [precision, bound] : {std::pair{Precision::kBf16, 2e-2}, {Precision::kQ8_0, 2e-2}}) {
    const Model m = LoadModel(dir, precision);
    const std::string name = PrecisionName(precision);
    const LayerWeights& l = m.weights.layers[0];
    ASSERT_TRUE(m.config.LinearLayer(0) && l.packed);
    std::vector<float> x(3 * m.config.dim);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.7 * i));
    for (const auto& [f, p] : {std::pair{&l.lin_wq, &l.packed->lin_wq},
                               {&l.lin_wk, &l.packed->lin_wk},
                               {&l.lin_wv, &l.packed->lin_wv},
                               {&l.lin_wz, &l.packed->lin_wz},
                               {&l.lin_out, &l.packed->lin_out}}) {
      ASSERT_TRUE(f->empty());
      ASSERT_FALSE(p->empty());
      const Tensor w = ProjectionF32(Tensor(), p);
      const int out = p->out(), in = p->in();
      std::vector<float> got(3 * out), ref(3 * out);
      Project(x.data(), Tensor(), p, Tensor(), got.data(), 3, in, out);
      Project(x.data(), w, nullptr, Tensor(), ref.data(), 3, in, out);
      EXPECT_LT(test::MaxRelDiff(got, ref, name + " packed DeltaNet projection vs its weights"),
                1e-2);
    }
    EXPECT_LT(test::MaxRelDiff(Logits(m, tokens), want, name + " vs f32"), bound);
  }
}

}  // namespace
}  // namespace ss
