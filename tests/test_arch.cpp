// Architecture families: a tiny random model per family is written in Hugging Face layout by the
// project's writers (WriteSafetensors + WriteHfConfig), loaded back with LoadModel, run through the
// family's forward pass, and compared with the independent naive reference in naive_hf.cpp. Each
// is then round-tripped through GGUF (and back to HF) and must give the same logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "common/file_util.h"
#include "common/note.h"
#include "io/gguf.h"
#include "io/hf_config.h"
#include "io/load.h"
#include "io/model_files.h"
#include "io/safetensors.h"
#include "kernels/dequant.h"
#include "model/arch.h"
#include "model/model.h"
#include "naive_hf.h"
#include "test_util.h"

namespace ss {
namespace {

namespace fs = std::filesystem;

struct FamilyCase {
  std::string label;
  std::string config_json;  // config.json as a user's checkpoint would have it
  bool gguf = true;         // false: GGUF cannot hold it, and writing one must be refused
};

std::ostream& operator<<(std::ostream& os, const FamilyCase& c) { return os << c.label; }

const char* kLlamaCore = R"("hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 61,
  "max_position_embeddings": 64, "rms_norm_eps": 1e-5)";

std::string Llama(const std::string& architecture, const std::string& extra) {
  return "{\"architectures\": [\"" + architecture + "\"], " + kLlamaCore +
         (extra.empty() ? "" : ", " + extra) + "}";
}

const FamilyCase kCases[] = {
    {"llama_gqa_untied_llama3_scaling",
     Llama("LlamaForCausalLM",
           R"("rope_theta": 500000.0, "tie_word_embeddings": false, "rope_scaling": {"rope_type":
           "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 16})")},
    {"llama_biases_tied_linear_scaling_softcap",
     Llama("LlamaForCausalLM",
           R"("attention_bias": true, "mlp_bias": true, "tie_word_embeddings": true,
           "rope_scaling": {"type": "linear", "factor": 2.0}, "final_logit_softcapping": 3.0)")},
    {"mistral_sliding_window", Llama("MistralForCausalLM", R"("sliding_window": 4)")},
    // sinkscope's gated-attention extension (the trainer's attention=gated): z * sigmoid(x Wg^T).
    {"llama_output_gate", Llama("LlamaForCausalLM", R"("sinkscope_attn_output_gate": true)")},
    // The kv-bias slot (attention=kv-bias) and sigmoid attention (attention=sigmoid).
    {"llama_kv_bias", Llama("LlamaForCausalLM", R"("sinkscope_attn_kv_bias": true)")},
    {"qwen3_kv_bias_qk_norm",
     Llama("Qwen3ForCausalLM", R"("head_dim": 16, "sinkscope_attn_kv_bias": true)")},
    {"llama_sigmoid", Llama("LlamaForCausalLM", R"("sinkscope_attn_sigmoid": true)")},
    {"qwen2_qkv_bias_tied", Llama("Qwen2ForCausalLM", R"("tie_word_embeddings": true)")},
    {"qwen3_qk_norm_head_dim16", Llama("Qwen3ForCausalLM", R"("head_dim": 16)")},
    {"olmo2_post_norms", Llama("Olmo2ForCausalLM", "")},
    {"gpt2",
     R"({"architectures": ["GPT2LMHeadModel"], "n_embd": 32, "n_head": 4, "n_layer": 2,
        "n_positions": 64, "vocab_size": 61, "layer_norm_epsilon": 1e-5})"},
    {"gpt_neox_parallel_partial_rotary",
     R"({"architectures": ["GPTNeoXForCausalLM"], "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 61,
        "max_position_embeddings": 64, "rotary_pct": 0.5, "use_parallel_residual": true})"},
    // transformers >= 5 writes rotary_pct as rope_parameters.partial_rotary_factor.
    {"gpt_neox_v5_rope_parameters",
     R"({"architectures": ["GPTNeoXForCausalLM"], "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 61,
        "max_position_embeddings": 64, "rope_parameters": {"rope_type": "default",
        "rope_theta": 5000.0, "partial_rotary_factor": 0.5}, "use_parallel_residual": true})"},
    {"gpt_neox_sequential_no_attention_bias",
     R"({"architectures": ["GPTNeoXForCausalLM"], "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 61,
        "max_position_embeddings": 64, "rotary_pct": 0.25, "use_parallel_residual": false,
        "attention_bias": false})"},
    {"qwen3_moe_top2_of_4_normalised",
     R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 32, "moe_intermediate_size": 24,
        "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 61, "max_position_embeddings": 64,
        "num_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": true})"},
    {"olmoe_top2_of_4_unnormalised",
     Llama("OlmoeForCausalLM",
           R"("num_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": false)")},
    {"mixtral_top2_of_4_window",
     Llama("MixtralForCausalLM",
           R"("num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 5)")},
    // gpt-oss: learned sinks (RandomHfWeights spreads them from about -3 to +6, so one head puts
    // most of its mass on the slot), 3 layers alternating sliding (window 4, shorter than the 12
    // tokens) and full, YaRN with truncate false, a clamp low enough to bite.
    {"gpt_oss_sinks_alternating_window_yarn",
     R"({"architectures": ["GptOssForCausalLM"], "hidden_size": 32, "intermediate_size": 24,
        "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
        "vocab_size": 61, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
        "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 4,
        "swiglu_limit": 1.0, "rope_theta": 150000.0, "tie_word_embeddings": false,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
        "truncate": false, "original_max_position_embeddings": 16}})"},
    // Gemma 2: sliding 4 / global / sliding, attention soft-cap low enough to bite, final
    // soft-cap, query_pre_attn_scalar != head_dim, tied head.
    {"gemma2_softcaps_alternating_window",
     R"({"architectures": ["Gemma2ForCausalLM"], "hidden_size": 32, "intermediate_size": 48,
        "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
        "vocab_size": 61, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
        "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 12,
        "sliding_window": 4, "attn_logit_softcapping": 1.5, "final_logit_softcapping": 3.0})"},
    // Gemma 3: per-head q/k norms, a sliding pattern of 2 (sliding, global, sliding), a local RoPE
    // base for sliding layers and linear scaling on the global one only, untied head.
    {"gemma3_qk_norm_local_rope",
     R"({"architectures": ["Gemma3ForCausalLM"], "hidden_size": 32, "intermediate_size": 48,
        "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 8,
        "vocab_size": 61, "max_position_embeddings": 64, "query_pre_attn_scalar": 8,
        "sliding_window": 5, "sliding_window_pattern": 2, "rope_theta": 1000000.0,
        "rope_local_base_freq": 100.0, "rope_scaling": {"rope_type": "linear", "factor": 2.0},
        "tie_word_embeddings": false})"},
    // Qwen2 with use_sliding_window: layers from max_window_layers (1) on slide, window 4 < 12
    // tokens. llama.cpp has no key for it, so no GGUF.
    {"qwen2_sliding_from_max_window_layers",
     Llama("Qwen2ForCausalLM",
           R"("use_sliding_window": true, "sliding_window": 4, "max_window_layers": 1)"),
     false},
    {"qwen3_layer_types_listed",
     Llama("Qwen3ForCausalLM", R"("head_dim": 8, "use_sliding_window": true, "sliding_window": 3,
           "max_window_layers": 28, "layer_types": ["sliding_attention", "full_attention"])"),
     false},
    // Qwen3-MoE with dense layers among the expert layers: mlp_only_layers [0] and
    // decoder_sparse_step 2 give dense, experts, dense, with a dense width (40) unlike the
    // experts'.
    {"qwen3_moe_dense_and_expert_layers",
     R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 32, "moe_intermediate_size": 24,
        "intermediate_size": 40, "num_hidden_layers": 3, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 61, "max_position_embeddings": 64,
        "num_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": true,
        "decoder_sparse_step": 2, "mlp_only_layers": [0]})",
     false},
    // Phi-3: fused qkv_proj and gate_up_proj, partial rotary (0.5 of 8: 4 dims), a window of 5
    // over every layer.
    {"phi3_fused_partial_rotary_window",
     Llama("Phi3ForCausalLM",
           R"("sliding_window": 5, "partial_rotary_factor": 0.5, "tie_word_embeddings": false)")},
    // Qwen3-Next: linear, full, linear (interval 2); grouped in_proj_qkvz / in_proj_ba with two
    // value heads per key head and dk != dv; a 3-tap convolution; partial rotary 0.5; 4 experts
    // top-2 renormalised and a gated shared expert; untied head.
    {"qwen3_next_deltanet_gated_moe",
     R"({"architectures": ["Qwen3NextForCausalLM"], "hidden_size": 32, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 61,
        "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "partial_rotary_factor": 0.5, "full_attention_interval": 2, "linear_num_key_heads": 2,
        "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 6,
        "linear_conv_kernel_dim": 3, "num_experts": 4, "num_experts_per_tok": 2,
        "moe_intermediate_size": 16, "shared_expert_intermediate_size": 12,
        "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [],
        "tie_word_embeddings": false})"},
    // Qwen3.5 as the Hub ships it: an image-text config with the language model under
    // text_config, rope_parameters with M-RoPE sections (text: plain partial RoPE), layer_types
    // listed, tied embeddings at the top level, dense MLP; one key head for two value heads.
    {"qwen3_5_image_text_dense",
     R"({"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
        "tie_word_embeddings": true, "image_token_id": 248056,
        "text_config": {"model_type": "qwen3_5_text", "hidden_size": 32, "intermediate_size": 40,
        "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 16, "vocab_size": 61, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000.0,
        "partial_rotary_factor": 0.25, "mrope_section": [1, 1, 0], "mrope_interleaved": true},
        "partial_rotary_factor": 0.25, "full_attention_interval": 4,
        "layer_types": ["linear_attention", "linear_attention", "linear_attention",
        "full_attention"], "linear_num_key_heads": 1, "linear_num_value_heads": 2,
        "linear_key_head_dim": 8, "linear_value_head_dim": 8, "linear_conv_kernel_dim": 4},
        "vision_config": {"depth": 2, "hidden_size": 16}})"},
    {"qwen3_5_text_only_dense",
     R"({"architectures": ["Qwen3_5ForCausalLM"], "hidden_size": 32, "intermediate_size": 40,
        "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
        "head_dim": 8, "vocab_size": 61, "max_position_embeddings": 64, "rope_theta": 500.0,
        "partial_rotary_factor": 0.5, "full_attention_interval": 2, "linear_num_key_heads": 2,
        "linear_num_value_heads": 2, "linear_key_head_dim": 4, "linear_value_head_dim": 8,
        "tie_word_embeddings": false})"},
    // Qwen3.6 (Qwen3.5-MoE): fused experts.gate_up_proj / down_proj, untied, nested config; two
    // value heads per key head over two key heads, which llama.cpp stores in its tiled order.
    {"qwen3_5_moe_image_text_fused_experts",
     R"({"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
        "text_config": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 61,
        "max_position_embeddings": 64, "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
        "full_attention_interval": 2, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
        "linear_key_head_dim": 8, "linear_value_head_dim": 8, "num_experts": 5,
        "num_experts_per_tok": 2, "moe_intermediate_size": 12,
        "shared_expert_intermediate_size": 16, "tie_word_embeddings": false}})"},
    {"qwen3_5_moe_text_only",
     R"({"architectures": ["Qwen3_5MoeForCausalLM"], "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 8, "vocab_size": 61,
        "max_position_embeddings": 64, "partial_rotary_factor": 0.5,
        "layer_types": ["full_attention", "linear_attention"], "linear_num_key_heads": 1,
        "linear_num_value_heads": 3, "linear_key_head_dim": 8, "linear_value_head_dim": 4,
        "num_experts": 3, "num_experts_per_tok": 1, "moe_intermediate_size": 12,
        "shared_expert_intermediate_size": 8})"},
    {"gpt_oss_layer_types_listed",
     R"({"architectures": ["GptOssForCausalLM"], "hidden_size": 32, "intermediate_size": 16,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 8,
        "vocab_size": 61, "max_position_embeddings": 64, "num_local_experts": 3,
        "num_experts_per_tok": 1, "sliding_window": 3,
        "layer_types": ["full_attention", "sliding_attention"]})"},
};

const std::vector<int> kTokens = {1, 17, 5, 60, 33, 2, 9, 41, 41, 0, 58, 12};

std::vector<float> RunAll(const Model& model, const std::vector<int>& tokens) {
  KVCache cache = KVCache::Create(model.config, static_cast<int>(tokens.size()));
  RunState state;
  ForwardRequest req;
  req.tokens = tokens;
  Tensor logits = Forward(model, cache, state, req);
  return std::vector<float>(logits.data(), logits.data() + logits.numel());
}

// Prefill of the first half, then one token at a time through the cache.
std::vector<float> RunIncremental(const Model& model, const std::vector<int>& tokens) {
  KVCache cache = KVCache::Create(model.config, static_cast<int>(tokens.size()));
  RunState state;
  std::vector<float> out;
  const size_t half = tokens.size() / 2;
  for (size_t start = 0; start < tokens.size();) {
    size_t n = start == 0 ? half : 1;
    ForwardRequest req;
    req.tokens = std::span<const int>(tokens).subspan(start, n);
    Tensor logits = Forward(model, cache, state, req);
    out.insert(out.end(), logits.data(), logits.data() + logits.numel());
    start += n;
  }
  return out;
}

class Family : public ::testing::TestWithParam<FamilyCase> {};

TEST_P(Family, HfLayoutMatchesNaiveReferenceAndRoundTripsThroughGguf) {
  const FamilyCase& fc = GetParam();
  const ModelConfig config = ParseHfConfig(fc.config_json, fc.label);
  test::HfTensors weights = test::RandomHfWeights(config, 7);
  const std::string dir = test::TempDir("arch_" + fc.label) + "/hf";
  fs::create_directories(dir);
  WriteHfConfig(dir + "/config.json", config);
  std::vector<std::pair<std::string, Tensor>> list(weights.begin(), weights.end());
  WriteSafetensors(dir + "/model.safetensors", list);

  Model model = LoadModel(dir);
  EXPECT_EQ(model.config.arch, config.arch);
  EXPECT_EQ(model.format, "hf");
  const std::vector<float> reference = test::NaiveHfForward(config, weights, kTokens);
  const std::vector<float> fast = RunAll(model, kTokens);
  EXPECT_LT(test::MaxRelDiff(fast, reference, fc.label + " hf vs naive"), 1e-5);
  EXPECT_LT(test::MaxRelDiff(RunIncremental(model, kTokens), reference,
                             fc.label + " cached decode vs naive"),
            1e-5);
  // Resuming at the last block from its recorded input gives the same logits, bit for bit.
  {
    const int last = model.config.n_layers - 1;
    std::vector<float> resid;
    Hooks hooks;
    hooks.Add(HookPoint::kResidPre, last,
              [&](const HookContext&, Tensor& x) { resid.assign(x.data(), x.data() + x.numel()); });
    KVCache cache = KVCache::CreateSingleUse(model.config, static_cast<int>(kTokens.size()));
    RunState state;
    ForwardRequest req;
    req.tokens = kTokens;
    req.hooks = &hooks;
    Forward(model, cache, state, req);
    cache.Clear();
    ForwardRequest resumed;
    resumed.tokens = kTokens;
    resumed.first_layer = last;
    resumed.resid_pre = resid.data();
    const Tensor logits = Forward(model, cache, state, resumed);
    const std::vector<float> got(logits.data(), logits.data() + logits.numel());
    EXPECT_EQ(test::MaxDiff(got, fast, fc.label + " resumed at the last block vs full"), 0.0);
    resumed.resid_pre = nullptr;
    cache.Clear();
    EXPECT_THROW(Forward(model, cache, state, resumed), Error);
  }
  // Stopping after block 0 (last_layer) leaves block 0's output as the full forward computes it,
  // bit for bit, runs nothing deeper, and has no logits to give.
  {
    std::vector<float> full, stopped;
    int deeper = 0;
    Hooks hooks;
    hooks.Add(HookPoint::kResidPost, -1, [&](const HookContext& ctx, Tensor& x) {
      if (ctx.layer == 0)
        (full.empty() ? full : stopped).assign(x.data(), x.data() + x.numel());
      else
        deeper += 1;
    });
    KVCache cache = KVCache::CreateSingleUse(model.config, static_cast<int>(kTokens.size()));
    RunState state;
    ForwardRequest req;
    req.tokens = kTokens;
    req.hooks = &hooks;
    req.logits = LogitsMode::kNone;
    Forward(model, cache, state, req);
    const int full_deeper = deeper;
    deeper = 0;
    cache.Clear();
    req.last_layer = 0;
    EXPECT_TRUE(Forward(model, cache, state, req).empty());
    EXPECT_EQ(full_deeper, model.config.n_layers - 1);
    EXPECT_EQ(deeper, 0);
    EXPECT_EQ(test::MaxDiff(stopped, full, fc.label + " stopped after block 0 vs full"), 0.0);
    cache.Clear();
    req.logits = LogitsMode::kAll;
    if (model.config.n_layers > 1) {
      EXPECT_THROW(Forward(model, cache, state, req), Error);
    }
    req.logits = LogitsMode::kNone;
    req.last_layer = model.config.n_layers;
    cache.Clear();
    EXPECT_THROW(Forward(model, cache, state, req), Error);
  }
  // Tokens that each attend to themselves alone at position 0 (self_attention_only) compute, row
  // for row, the one-token forward of each: how explain recomputes position 0 in one call.
  {
    const std::vector<int> firsts(kTokens.begin(), kTokens.begin() + 4), zeros(4, 0);
    KVCache cache = KVCache::Create(model.config, 4);
    RunState state;
    ForwardRequest req;
    req.tokens = firsts;
    req.positions = zeros;
    req.self_attention_only = true;
    const Tensor batch = Forward(model, cache, state, req);
    const std::vector<float> got(batch.data(), batch.data() + batch.numel());
    std::vector<float> want;
    for (int t = 0; t < 4; ++t) {
      const std::vector<float> one = RunAll(model, {firsts[t]});
      want.insert(want.end(), one.begin(), one.end());
    }
    EXPECT_LT(
        test::MaxRelDiff(got, want, fc.label + " self-attention-only rows vs one-token forwards"),
        1e-5);
  }

  // GGUF (F32) and back to HF: the same logits.
  const std::string gguf = test::TempDir("arch_" + fc.label) + "/model.gguf";
  if (!fc.gguf) {
    GgufWriter refused;
    EXPECT_THROW(AddGgufModel(model, refused, kGgmlTypeF32), Error) << fc.label;
    return;
  }
  GgufWriter writer;
  AddGgufModel(model, writer, kGgmlTypeF32);
  writer.Write(gguf);
  Model from_gguf = LoadModel(gguf);
  EXPECT_EQ(from_gguf.format, "gguf");
  // An image-text checkpoint's GGUF holds the language model: it reads as the text-only family.
  const std::string text_arch = config.arch == "qwen3_5"       ? "qwen3_5_text"
                                : config.arch == "qwen3_5_moe" ? "qwen3_5_moe_text"
                                                               : config.arch;
  EXPECT_EQ(from_gguf.config.arch, text_arch);
  EXPECT_LT(test::MaxRelDiff(RunAll(from_gguf, kTokens), reference, fc.label + " gguf vs naive"),
            1e-5);

  const std::string dir2 = test::TempDir("arch_" + fc.label) + "/hf2";
  fs::create_directories(dir2);
  WriteHfModel(from_gguf, dir2, SafetensorsDtype::kF32);
  Model back = LoadModel(dir2);
  // config.json comes back the same, except what a tokenizer-less GGUF cannot carry (BOS/EOS ids
  // live in tokenizer.ggml.*) and the dtype the writer records.
  ModelConfig want = ReadHfConfig(dir), got = ReadHfConfig(dir2);
  want.torch_dtype = "float32";
  want.bos_id = want.eos_id = -1;
  want.eos_ids.clear();
  want.arch = text_arch;
  EXPECT_EQ(got, want) << "config.json changed in the round trip";
  // The tensors come back bit for bit, except Gemma's and Qwen3.5's norms: GGUF stores 1 + w
  // (llama.cpp's convention), so w returns through one f32 rounding of 1 + w, within half an ulp
  // of 1 + w; and Qwen3.5's A_log, through -exp(A_log) rounded to f32 (a relative 2^-24, so
  // 2^-24 in A_log) and the rounding of the log.
  SafetensorsDir a = SafetensorsDir::Open(dir), b = SafetensorsDir::Open(dir2);
  // The image-text layout's language model is the text-only layout's model.
  auto text_name = [&](std::string name) {
    const std::string nested = "model.language_model.";
    if (text_arch != config.arch && name.rfind(nested, 0) == 0)
      name = "model." + name.substr(nested.size());
    return name;
  };
  std::vector<std::string> a_names;
  for (const std::string& name : a.names()) a_names.push_back(text_name(name));
  std::sort(a_names.begin(), a_names.end());
  std::vector<std::string> b_names = b.names();
  std::sort(b_names.begin(), b_names.end());
  EXPECT_EQ(a_names, b_names);
  const bool one_plus_w = fc.label.rfind("gemma", 0) == 0 || fc.label.rfind("qwen3", 0) == 0;
  for (const std::string& a_name : a.names()) {
    const std::string name = text_name(a_name);
    if (!b.Has(name)) continue;
    Tensor x = a.Load(a_name), y = b.Load(name);
    ASSERT_EQ(x.shape(), y.shape()) << name;
    if (name.ends_with("A_log")) {
      for (int64_t i = 0; i < x.numel(); ++i)
        EXPECT_LE(std::fabs(x[i] - y[i]), 6.1e-8f + std::fabs(std::nextafter(x[i], 2e38f) - x[i]))
            << name << " " << i;
      continue;
    }
    if (one_plus_w && name.find("norm") != std::string::npos) {
      for (int64_t i = 0; i < x.numel(); ++i)
        EXPECT_LE(std::fabs(x[i] - y[i]), 0.5f * std::nextafter(1.0f + std::fabs(x[i]), 2e38f) -
                                              0.5f * (1.0f + std::fabs(x[i])) + 1e-12f)
            << name << " " << i;
      continue;
    }
    EXPECT_EQ(0, std::memcmp(x.data(), y.data(), sizeof(float) * x.numel())) << name;
  }
  EXPECT_LT(test::MaxRelDiff(RunAll(back, kTokens), reference, fc.label + " hf->gguf->hf vs naive"),
            1e-5);
}

INSTANTIATE_TEST_SUITE_P(Families, Family, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return info.param.label; });

// gpt-oss's bad inputs: each names the file and the key or tensor.
// The pattern hook on a kv-bias model: the rows sum to 1 - p_slot, and recomputing z from an
// unchanged pattern (AttentionFromPattern, then the slot's value with the mass it had) gives the
// logits of the fused path; halving every key's probability moves them (the slot keeps its own).
// A sigmoid model's hook sees weights that do not sum to 1.
TEST(FamilyConfig, PatternHookOnKvBiasAndSigmoidModels) {
  for (const char* ext : {"sinkscope_attn_kv_bias", "sinkscope_attn_sigmoid"}) {
    const Model model =
        test::LoadRandomHf(Llama("LlamaForCausalLM", fmt::format(R"("{}": true)", ext)), 41,
                           std::string("hook_") + ext);
    std::vector<int> ids(20);
    for (int i = 0; i < 20; ++i) ids[i] = (i * 13 + 2) % 61;
    auto logits = [&](Hooks* hooks) {
      KVCache cache = KVCache::CreateSingleUse(model.config, 20);
      RunState state;
      ForwardRequest req;
      req.tokens = ids;
      req.logits = LogitsMode::kAll;
      req.hooks = hooks;
      return Forward(model, cache, state, req);
    };
    const Tensor plain = logits(nullptr);
    double min_row = 1e9, max_row = 0;
    Hooks same;
    same.Add(HookPoint::kPattern, -1, [&](const HookContext&, Tensor& p) {
      for (int64_t row = 0; row < p.dim(0) * p.dim(1); ++row) {
        double sum = 0;
        for (int64_t j = 0; j < p.dim(2); ++j) sum += p.data()[row * p.dim(2) + j];
        min_row = std::min(min_row, sum), max_row = std::max(max_row, sum);
      }
    });
    const Tensor hooked = logits(&same);
    EXPECT_LT(test::MaxDiff(hooked.data(), plain.data(), plain.numel(),
                            std::string(ext) + " unchanged pattern"),
              1e-5);
    std::printf("%s: pattern row sums %.3f .. %.3f\n", ext, min_row, max_row);
    EXPECT_LT(min_row, 0.95);  // kv-bias: the slot's share; sigmoid: not normalised
    Hooks halve;
    halve.Add(HookPoint::kPattern, -1, [](const HookContext&, Tensor& p) {
      for (int64_t i = 0; i < p.numel(); ++i) p.data()[i] *= 0.5f;
    });
    const Tensor halved = logits(&halve);
    double moved = 0;
    for (int64_t i = 0; i < plain.numel(); ++i)
      moved = std::max(moved, double(std::fabs(halved.data()[i] - plain.data()[i])));
    EXPECT_GT(moved, 1e-3) << ext;
  }
}

TEST(FamilyConfig, GptOssBadInputIsRefusedByName) {
  const std::string core = R"({"architectures": ["GptOssForCausalLM"], "hidden_size": 32,
      "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 1, "head_dim": 8, "vocab_size": 61, "max_position_embeddings": 64,
      "num_local_experts": 3, "num_experts_per_tok": 1)";
  auto error = [&](const std::string& extra) {
    try {
      const bool window = extra.find("sliding_window") != std::string::npos;
      ParseHfConfig(core + ", " + extra + (window ? "" : R"(, "sliding_window": 4)") + "}",
                    "gptoss/config.json");
    } catch (const Error& e) {
      std::printf("error: %s\n", e.what());
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  auto expect = [&](const std::string& extra, const std::string& key) {
    const std::string e = error(extra);
    EXPECT_NE(e.find("gptoss/config.json"), std::string::npos) << e;
    EXPECT_NE(e.find(key), std::string::npos) << e;
  };
  expect(R"("layer_types": ["full_attention", "chunked_attention"])", "layer_types[1]");
  expect(R"("layer_types": ["full_attention"])", "layer_types");
  expect(R"("sliding_window": 0)", "sliding_window");
  expect(R"("sliding_window": 65)", "sliding_window");
  expect(R"("swiglu_limit": -1)", "swiglu_limit");
  expect(R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0, "mscale": 1.0})", "mscale");
  expect(
      R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32})",
      "original_max_position_embeddings");
  // MXFP4 is read (tests/test_mxfp4.cpp); other quantisation methods are refused by name.
  expect(R"("quantization_config": {"quant_method": "gptq"})", "quantization_config.quant_method");
  EXPECT_EQ(error(R"("quantization_config": {"quant_method": "mxfp4"})"), "(accepted)");
  expect(R"("attn_logit_softcapping": 30.0)", "attn_logit_softcapping");

  // A checkpoint without its sinks: the missing tensor is named.
  const ModelConfig config = ParseHfConfig(core + R"(, "sliding_window": 4})", "gptoss");
  test::HfTensors weights = test::RandomHfWeights(config, 3);
  weights.erase("model.layers.1.self_attn.sinks");
  const std::string dir = test::TempDir("gpt_oss_no_sinks");
  WriteHfConfig(dir + "/config.json", config);
  std::vector<std::pair<std::string, Tensor>> list(weights.begin(), weights.end());
  WriteSafetensors(dir + "/model.safetensors", list);
  try {
    LoadModel(dir);
    ADD_FAILURE() << "a gpt_oss checkpoint without self_attn.sinks loaded";
  } catch (const Error& e) {
    std::printf("error: %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("model.layers.1.self_attn.sinks"), std::string::npos)
        << e.what();
  }
}

// Gemma's bad inputs: soft-caps of zero or below, unknown layer kinds, windows of zero or beyond
// the context, a zero query scalar, the multimodal Gemma 3 class: each named with its file and key.
TEST(FamilyConfig, GemmaBadInputIsRefusedByName) {
  auto error = [](const std::string& arch, const std::string& extra) {
    try {
      ParseHfConfig(R"({"architectures": [")" + arch + R"("], "hidden_size": 32,
          "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 8,
          "vocab_size": 61, "max_position_embeddings": 64, "sliding_window": 4)" +
                        (extra.empty() ? "" : ", " + extra) + "}",
                    "gemma/config.json");
    } catch (const Error& e) {
      std::printf("error: %s\n", e.what());
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  auto expect = [&](const std::string& arch, const std::string& extra, const std::string& key) {
    const std::string e = error(arch, extra);
    EXPECT_NE(e.find("gemma/config.json"), std::string::npos) << e;
    EXPECT_NE(e.find(key), std::string::npos) << e;
  };
  EXPECT_EQ(error("Gemma2ForCausalLM", ""), "(accepted)");
  expect("Gemma2ForCausalLM", R"("attn_logit_softcapping": 0)", "attn_logit_softcapping");
  expect("Gemma2ForCausalLM", R"("final_logit_softcapping": -30)", "final_logit_softcapping");
  expect("Gemma3ForCausalLM", R"("layer_types": ["sliding_attention", "local"])", "layer_types[1]");
  expect("Gemma3ForCausalLM", R"("query_pre_attn_scalar": 0)", "query_pre_attn_scalar");
  expect("Gemma3ForCausalLM", R"("attention_bias": true)", "attention_bias");
  expect("Gemma3ForConditionalGeneration", "", "Gemma3ForConditionalGeneration");
  // A window beyond the context (the sliding_window key given twice would be a JSON error).
  try {
    ParseHfConfig(
        R"({"architectures": ["Gemma2ForCausalLM"], "hidden_size": 32, "intermediate_size": 48,
        "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 61,
        "max_position_embeddings": 64, "sliding_window": 65})",
        "gemma/config.json");
    ADD_FAILURE() << "a window beyond the context was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'sliding_window' 65 is beyond the context"),
              std::string::npos)
        << e.what();
  }
}

// An HF directory holding `config_json` as given (not rewritten by WriteHfConfig) and `weights`.
std::string WriteHfDir(const std::string& config_json, const test::HfTensors& weights,
                       const std::string& name) {
  const std::string dir = test::TempDir(name) + "/hf";
  fs::create_directories(dir);
  WriteFileAtomic(dir + "/config.json", config_json);
  std::vector<std::pair<std::string, Tensor>> list(weights.begin(), weights.end());
  WriteSafetensors(dir + "/model.safetensors", list);
  return dir;
}

// Gemma 3 saved by transformers 5: rope_parameters per layer type, sliding layers with the local
// base and full layers with the global base and the scaling. The engine (prefill and cached
// decode) gives the logits of the same model written with rope_theta + rope_local_base_freq +
// rope_scaling, bit for bit, and matches the naive reference. Before, the nested form read as no
// scaling and the default bases without a word.
TEST(FamilyConfig, Gemma3RopeParametersPerLayerTypeMatchLegacyFormAndNaive) {
  const std::string core = R"({"architectures": ["Gemma3ForCausalLM"], "hidden_size": 32,
      "intermediate_size": 48, "num_hidden_layers": 3, "num_attention_heads": 4,
      "num_key_value_heads": 1, "head_dim": 8, "vocab_size": 61, "max_position_embeddings": 64,
      "query_pre_attn_scalar": 8, "sliding_window": 5, "sliding_window_pattern": 2,
      "tie_word_embeddings": false, )";
  struct Case {
    const char* label;
    const char* legacy;
    const char* v5;
  };
  const Case cases[] = {
      {"linear", R"("rope_theta": 1000000.0, "rope_local_base_freq": 100.0,
          "rope_scaling": {"rope_type": "linear", "factor": 8.0}})",
       R"("rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
          "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}}})"},
      {"llama3",
       R"("rope_theta": 500000.0, "rope_local_base_freq": 30.0, "rope_scaling": {"rope_type":
          "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 16}})",
       R"("rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 30.0},
          "full_attention": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 16, "rope_theta": 500000.0}}})"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.label);
    const ModelConfig config = ParseHfConfig(core + k.legacy, "legacy");
    const test::HfTensors weights = test::RandomHfWeights(config, 17);
    const Model legacy = LoadModel(
        WriteHfDir(core + k.legacy, weights, std::string("gemma3_rope_legacy_") + k.label));
    const Model v5 =
        LoadModel(WriteHfDir(core + k.v5, weights, std::string("gemma3_rope_v5_") + k.label));
    EXPECT_EQ(v5.config, legacy.config);
    const std::vector<float> reference = test::NaiveHfForward(config, weights, kTokens);
    const std::vector<float> got = RunAll(v5, kTokens);
    EXPECT_EQ(test::MaxDiff(got, RunAll(legacy, kTokens), "v5 form vs legacy form"), 0.0);
    EXPECT_LT(test::MaxRelDiff(got, reference, std::string(k.label) + " v5 form vs naive"), 1e-5);
    EXPECT_LT(test::MaxRelDiff(RunIncremental(v5, kTokens), reference, "cached decode vs naive"),
              1e-5);
    // What the nested form read as before (no scaling, the default local base) is another model.
    ModelConfig misread = config;
    misread.rope_scaling = RopeScalingKind::kNone;
    misread.rope_local_theta = 10000.0f;
    EXPECT_GT(test::MaxRelDiff(test::NaiveHfForward(misread, weights, kTokens), reference,
                               "misread vs naive"),
              1e-3);
  }
}

// transformers' Gemma3Attention does not pass attn_logit_softcapping to the attention function
// (Gemma 3 normalises q and k instead); Gemma2Attention does. A Gemma 3 config with the key set
// gives the logits of one without it (and a note says it is not applied); Gemma 2 still caps.
TEST(FamilyConfig, AttnLogitSoftcappingAppliesToGemma2NotGemma3) {
  std::vector<std::string> notes;
  const NoteSink previous = SetNoteSink([&](const std::string& line) { notes.push_back(line); });
  for (const std::string arch : {"Gemma3ForCausalLM", "Gemma2ForCausalLM"}) {
    SCOPED_TRACE(arch);
    const std::string core = R"({"architectures": [")" + arch + R"("], "hidden_size": 32,
        "intermediate_size": 48, "num_hidden_layers": 3, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 61, "max_position_embeddings": 64,
        "query_pre_attn_scalar": 12, "sliding_window": 4, "final_logit_softcapping": 3.0, )";
    const std::string capped = core + R"("attn_logit_softcapping": 1.5})";
    const std::string uncapped = core + R"("attn_logit_softcapping": null})";
    notes.clear();
    const ModelConfig config = ParseHfConfig(capped, "gemma/config.json");
    const test::HfTensors weights = test::RandomHfWeights(config, 19);
    const Model with_cap = LoadModel(WriteHfDir(capped, weights, "softcap_" + arch));
    const Model without = LoadModel(WriteHfDir(uncapped, weights, "no_softcap_" + arch));
    const std::vector<float> logits = RunAll(with_cap, kTokens);
    const std::vector<float> reference = test::NaiveHfForward(config, weights, kTokens);
    EXPECT_LT(test::MaxRelDiff(logits, reference, arch + " vs naive"), 1e-5);
    EXPECT_LT(test::MaxRelDiff(RunIncremental(with_cap, kTokens), reference,
                               arch + " cached decode vs naive"),
              1e-5);
    const double moved =
        test::MaxRelDiff(logits, RunAll(without, kTokens), arch + " capped vs uncapped");
    if (arch == "Gemma3ForCausalLM") {
      EXPECT_EQ(config.attn_logit_softcap, 0.0f);
      EXPECT_EQ(moved, 0.0);
      ASSERT_FALSE(notes.empty());
      EXPECT_NE(notes[0].find("gemma/config.json: attn_logit_softcapping 1.5 is not applied"),
                std::string::npos)
          << notes[0];
    } else {
      EXPECT_EQ(config.attn_logit_softcap, 1.5f);
      EXPECT_GT(moved, 1e-2);
      EXPECT_TRUE(notes.empty());
    }
  }
  SetNoteSink(previous);
}

// GPT-NeoX's rotary fraction from either place, and the two keys that gave wrong numbers without a
// word before: rope_parameters.partial_rotary_factor was ignored (0.25 used), and partial rotary
// on a family that rotates whole heads is now refused by name.
// Per-layer settings as transformers derives them: Qwen's window from max_window_layers on (or as
// layer_types lists), Qwen-MoE's dense layers from mlp_only_layers and decoder_sparse_step; bad
// values are refused naming the file and the key.
TEST(FamilyConfig, QwenPerLayerWindowsAndDenseLayers) {
  auto parse = [](const std::string& json) { return ParseHfConfig(json, "q/config.json"); };
  auto error = [&](const std::string& json) {
    try {
      parse(json);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const std::string qwen2 = R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 32,
      "intermediate_size": 48, "num_attention_heads": 4, "vocab_size": 61, )";
  const std::string four = R"("num_hidden_layers": 4, "max_position_embeddings": 64, )";
  ModelConfig c = parse(
      qwen2 + four + R"("use_sliding_window": true, "sliding_window": 8, "max_window_layers": 2})");
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_EQ((std::vector<int>{c.Window(0), c.Window(1), c.Window(2), c.Window(3)}),
            (std::vector<int>{0, 0, 8, 8}));
  // The window applies nowhere: no window at all, and the config says so when written.
  c = parse(qwen2 + four +
            R"("use_sliding_window": true, "sliding_window": 8, "max_window_layers": 4})");
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_TRUE(c.layer_attention.empty());
  // use_sliding_window false: sliding_window is ignored, as transformers ignores it.
  EXPECT_EQ(
      parse(qwen2 + four + R"("use_sliding_window": false, "sliding_window": 8})").sliding_window,
      0);
  // Defaults: window 4096 from layer 28 on; written back and read again unchanged.
  c = parse(
      qwen2 +
      R"("use_sliding_window": true, "max_position_embeddings": 8192, "num_hidden_layers": 30})");
  EXPECT_EQ(c.Window(27), 0);
  EXPECT_EQ(c.Window(28), 4096);
  EXPECT_EQ(ParseHfConfig(HfConfigJson(c), "again"), c);
  EXPECT_NE(error(qwen2 + four + R"("use_sliding_window": true, "sliding_window": 65})")
                .find("'sliding_window' 65 is beyond the context"),
            std::string::npos);
  EXPECT_NE(error(qwen2 + four + R"("use_sliding_window": true, "sliding_window": 0})")
                .find("'sliding_window' must be a positive size"),
            std::string::npos);
  EXPECT_NE(
      error(
          qwen2 + four +
          R"("use_sliding_window": true, "sliding_window": 8, "layer_types": ["full_attention"]})")
          .find(
              "q/config.json: 'layer_types' must list one attention kind for each of the 4 layers"),
      std::string::npos);

  const std::string moe = R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 32,
      "moe_intermediate_size": 24, "num_hidden_layers": 6, "num_attention_heads": 4, "head_dim": 8,
      "vocab_size": 61, "num_experts": 4, "num_experts_per_tok": 2, )";
  c = parse(moe + R"("intermediate_size": 40, "decoder_sparse_step": 3, "mlp_only_layers": [5]})");
  // Experts where (l + 1) % 3 == 0 and l is not listed: layer 2 only (layer 5 is listed).
  std::vector<bool> kinds;
  for (int l = 0; l < 6; ++l) kinds.push_back(c.MoeLayer(l));
  EXPECT_EQ(kinds, (std::vector<bool>{false, false, true, false, false, false}));
  EXPECT_EQ(c.FfnWidth(0), 40);
  EXPECT_EQ(c.FfnWidth(2), 24);
  EXPECT_EQ(ParseHfConfig(HfConfigJson(c), "again"), c);
  // Every layer MoE (the published Qwen3-MoE configs): no dense layers recorded.
  EXPECT_TRUE(
      parse(moe + R"("decoder_sparse_step": 1, "mlp_only_layers": []})").dense_layers.empty());
  EXPECT_NE(error(moe + R"("intermediate_size": 40, "mlp_only_layers": [6]})")
                .find("'mlp_only_layers' lists layer 6; the model has layers 0 to 5"),
            std::string::npos);
  EXPECT_NE(error(moe + R"("intermediate_size": 40, "decoder_sparse_step": 0})")
                .find("'decoder_sparse_step' must be 1 or more"),
            std::string::npos);
  EXPECT_NE(error(moe + R"("mlp_only_layers": [1]})").find("intermediate_size"), std::string::npos);
  EXPECT_NE(error(moe + R"("intermediate_size": 40, "mlp_only_layers": "1"})")
                .find("'mlp_only_layers' must be a list of integers"),
            std::string::npos);
}

TEST(FamilyConfig, PartialRotaryFactorIsReadOrRefusedByName) {
  const std::string neox = R"({"architectures": ["GPTNeoXForCausalLM"], "hidden_size": 64,
      "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 61)";
  EXPECT_EQ(ParseHfConfig(neox + "}", "old").rot_dim(), 4);  // GPTNeoXConfig's default 0.25 of 16
  const ModelConfig v5 =
      ParseHfConfig(neox + R"(, "rope_parameters": {"rope_type": "default", "rope_theta": 5000.0,
      "partial_rotary_factor": 0.5}})",
                    "v5");
  EXPECT_EQ(v5.rot_dim(), 8);
  EXPECT_EQ(v5.rope_theta, 5000.0f);
  EXPECT_EQ(ParseHfConfig(neox + R"(, "rotary_pct": 1.0})", "full").rot_dim(), 16);
  auto error = [](const std::string& json) {
    try {
      ParseHfConfig(json, "cfg.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(
      error(neox + R"(, "rotary_pct": 0.25, "rope_parameters": {"rope_type": "default",
      "partial_rotary_factor": 0.5}})")
          .find("cfg.json: rotary_pct 0.25 and rope_parameters.partial_rotary_factor 0.5 disagree"),
      std::string::npos);
  EXPECT_NE(
      error(neox + R"(, "rope_parameters": {"partial_rotary_factor": 0.0}})")
          .find("cfg.json: 'rope_parameters.partial_rotary_factor' must be in (0, 1], found 0"),
      std::string::npos);
  const std::string llama = Llama("LlamaForCausalLM", R"("partial_rotary_factor": 0.5)");
  EXPECT_NE(error(llama).find("cfg.json: partial_rotary_factor 0.5 (rotating part of each head) is "
                              "not supported for llama"),
            std::string::npos)
      << error(llama);
  EXPECT_NE(error(Llama("Qwen2ForCausalLM", R"("rope_parameters": {"rope_type": "default",
      "rope_theta": 10000.0, "partial_rotary_factor": 0.25})"))
                .find("rope_parameters.partial_rotary_factor 0.25 (rotating part of each head) is "
                      "not supported for qwen2"),
            std::string::npos);
  EXPECT_EQ(
      ParseHfConfig(Llama("LlamaForCausalLM", R"("partial_rotary_factor": 1.0)"), "one").rot_dim(),
      8);
}

// GPT-2's scale_attn_weights and scale_attn_by_inverse_layer_idx (GPT2Attention._attn), ignored
// before: the engine (prefill and cached decode) against the naive reference that scales the
// scores as transformers does, different from the plain GPT-2 (the keys matter), kept through
// config.json, and refused for GGUF (llama.cpp has no key for them).
TEST(FamilyConfig, Gpt2AttentionScalingKeys) {
  const std::string base = R"({"architectures": ["GPT2LMHeadModel"], "n_embd": 32, "n_head": 4,
      "n_layer": 3, "n_positions": 64, "vocab_size": 61, "layer_norm_epsilon": 1e-5)";
  const ModelConfig plain = ParseHfConfig(base + "}", "plain");
  const test::HfTensors weights = test::RandomHfWeights(plain, 5);
  const std::vector<float> plain_logits = test::NaiveHfForward(plain, weights, kTokens);
  for (const std::string extra :
       {R"(, "scale_attn_by_inverse_layer_idx": true)", R"(, "scale_attn_weights": false)",
        R"(, "scale_attn_weights": false, "scale_attn_by_inverse_layer_idx": true,
                                     "reorder_and_upcast_attn": true)"}) {
    SCOPED_TRACE(extra);
    const ModelConfig config = ParseHfConfig(base + extra + "}", "gpt2");
    EXPECT_EQ(config.attn_scale_inverse_layer,
              extra.find("inverse_layer_idx") != std::string::npos);
    EXPECT_EQ(config.attn_scale_sqrt_dim, extra.find("scale_attn_weights") == std::string::npos);
    const std::string dir = test::TempDir("gpt2_scaling") + "/hf";
    fs::create_directories(dir);
    WriteHfConfig(dir + "/config.json", config);
    std::vector<std::pair<std::string, Tensor>> list(weights.begin(), weights.end());
    WriteSafetensors(dir + "/model.safetensors", list);
    const Model model = LoadModel(dir);
    EXPECT_EQ(model.config, config);
    const std::vector<float> reference = test::NaiveHfForward(config, weights, kTokens);
    EXPECT_LT(test::MaxRelDiff(RunAll(model, kTokens), reference, "gpt2" + extra + " vs naive"),
              1e-5);
    EXPECT_LT(
        test::MaxRelDiff(RunIncremental(model, kTokens), reference, "gpt2 cached decode vs naive"),
        1e-5);
    EXPECT_GT(test::MaxRelDiff(reference, plain_logits, "scaled vs plain GPT-2"), 1e-3);
    GgufWriter writer;
    try {
      AddGgufModel(model, writer, kGgmlTypeF32);
      ADD_FAILURE() << "wrote a GGUF llama.cpp would read with other scores";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cannot be written to GGUF"), std::string::npos)
          << e.what();
    }
  }
}

// Damaged GGUF models (every truncation point of the header region, and random byte changes) either
// load or fail with ss::Error: never a crash or an out-of-range read (run under ASan in the fuzz
// build; here it catches crashes and other exception types).
TEST(ModelFiles, DamagedGgufModelsFailCleanly) {
  const ModelConfig config = ParseHfConfig(kCases[11].config_json, "moe");  // mixtral: MoE + window
  test::HfTensors weights = test::RandomHfWeights(config, 3);
  const std::string dir = test::TempDir("arch_damaged") + "/hf";
  fs::create_directories(dir);
  WriteHfConfig(dir + "/config.json", config);
  std::vector<std::pair<std::string, Tensor>> list(weights.begin(), weights.end());
  WriteSafetensors(dir + "/model.safetensors", list);
  GgufWriter writer;
  AddGgufModel(LoadModel(dir), writer, kGgmlTypeQ8_0);
  const std::string good = writer.Build();
  auto try_load = [](const std::string& bytes) {
    GgufFile f = GgufFile::Parse("damaged.gguf", reinterpret_cast<const uint8_t*>(bytes.data()),
                                 bytes.size(), nullptr);
    LoadGgufModel(f);
  };
  try_load(good);
  int errors = 0, loaded = 0;
  std::mt19937 rng(11);
  for (int i = 0; i < 400; ++i) {
    std::string bad = good;
    if (i < 200) {
      bad.resize(rng() % good.size());
    } else {
      const size_t header = std::min<size_t>(good.size(), 4096);  // metadata and tensor infos
      for (int k = 0; k < 4; ++k) bad[rng() % header] = static_cast<char>(rng());
    }
    try {
      try_load(bad);
      ++loaded;
    } catch (const Error&) {
      ++errors;
    }
  }
  std::printf("damaged GGUF models: %d rejected with ss::Error, %d still loaded\n", errors, loaded);
  EXPECT_GT(errors, 200);
}

TEST(Architectures, EveryRegisteredFamilyHasATestCase) {
  for (const ArchEntry& a : Architectures()) {
    bool found = false;
    for (const FamilyCase& fc : kCases)
      found = found || ParseHfConfig(fc.config_json, fc.label).arch == a.name;
    EXPECT_TRUE(found) << a.name;
  }
}

}  // namespace
}  // namespace ss
