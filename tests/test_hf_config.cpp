// config.json -> ModelConfig for every supported family, the writer's round trip, and errors.
// The sample configs follow the released checkpoints' config.json files (trimmed of fields the
// parser ignores).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "common/error.h"
#include "common/file_util.h"
#include "io/hf_config.h"

namespace ss {
namespace {

struct Sample {
  const char* name;
  const char* json;
};

// Llama 3.2 1B: llama3 rope scaling, tied embeddings, several eos ids.
constexpr const char* kLlama = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "attention_bias": false,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "head_dim": 64,
  "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 8192,
  "max_position_embeddings": 131072, "mlp_bias": false, "num_attention_heads": 32,
  "num_hidden_layers": 16, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "vocab_size": 128256})";
// Mistral 7B v0.1: sliding window 4096.
constexpr const char* kMistral = R"({
  "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
  "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0, "sliding_window": 4096, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "vocab_size": 32000})";
// Qwen2.5 0.5B.
constexpr const char* kQwen2 = R"({
  "architectures": ["Qwen2ForCausalLM"], "bos_token_id": 151643, "eos_token_id": 151643,
  "hidden_act": "silu", "hidden_size": 896, "intermediate_size": 4864,
  "max_position_embeddings": 32768, "max_window_layers": 24, "model_type": "qwen2",
  "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_sliding_window": false,
  "vocab_size": 151936})";
// Qwen3 0.6B: head_dim 128 although hidden_size / heads = 64.
constexpr const char* kQwen3 = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "bos_token_id": 151643,
  "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
  "intermediate_size": 3072, "max_position_embeddings": 40960, "max_window_layers": 28,
  "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28,
  "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
  "sliding_window": null, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "use_sliding_window": false, "vocab_size": 151936})";
// GPT-2 small: n_inner null, no tie_word_embeddings field (defaults to tied).
constexpr const char* kGpt2 = R"({
  "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
  "bos_token_id": 50256, "eos_token_id": 50256, "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_inner": null,
  "n_layer": 12, "n_positions": 1024, "vocab_size": 50257})";
// Pythia 160M: partial rotary (0.25 of 64 = 16 dims), parallel residual, rotary_emb_base.
constexpr const char* kNeox = R"({
  "architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0, "eos_token_id": 0,
  "hidden_act": "gelu", "hidden_size": 768, "intermediate_size": 3072,
  "layer_norm_eps": 1e-05, "max_position_embeddings": 2048, "model_type": "gpt_neox",
  "num_attention_heads": 12, "num_hidden_layers": 12, "rotary_emb_base": 10000,
  "rotary_pct": 0.25, "tie_word_embeddings": false, "torch_dtype": "float16",
  "use_parallel_residual": true, "vocab_size": 50304})";
// OLMo 2 1B.
constexpr const char* kOlmo2 = R"({
  "architectures": ["Olmo2ForCausalLM"], "attention_bias": false, "bos_token_id": null,
  "eos_token_id": 100257, "hidden_act": "silu", "hidden_size": 2048,
  "intermediate_size": 8192, "max_position_embeddings": 4096, "model_type": "olmo2",
  "num_attention_heads": 16, "num_hidden_layers": 16, "num_key_value_heads": 16,
  "pad_token_id": 100277, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 500000,
  "tie_word_embeddings": false, "torch_dtype": "float32", "vocab_size": 100352})";
// Qwen3 30B-A3B.
constexpr const char* kQwen3Moe = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "bos_token_id": 151643,
  "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 2048, "intermediate_size": 6144, "max_position_embeddings": 40960,
  "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
  "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128,
  "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "use_sliding_window": false, "vocab_size": 151936})";
// OLMoE 1B-7B.
constexpr const char* kOlmoe = R"({
  "architectures": ["OlmoeForCausalLM"], "attention_bias": false, "clip_qkv": null,
  "eos_token_id": 50279, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 1024,
  "max_position_embeddings": 4096, "model_type": "olmoe", "norm_topk_prob": false,
  "num_attention_heads": 16, "num_experts": 64, "num_experts_per_tok": 8,
  "num_hidden_layers": 16, "num_key_value_heads": 16, "pad_token_id": 1, "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "float32",
  "vocab_size": 50304})";
// Mixtral 8x7B.
constexpr const char* kMixtral = R"({
  "architectures": ["MixtralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
  "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32,
  "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "num_local_experts": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
  "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "vocab_size": 32000})";
// gpt-oss-20b's shape (its published config.json, less quantization_config: the BF16 form).
constexpr const char* kGptOss = R"({
  "architectures": ["GptOssForCausalLM"], "attention_bias": true, "attention_dropout": 0.0,
  "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu",
  "hidden_size": 2880, "initial_context_length": 4096, "initializer_range": 0.02,
  "intermediate_size": 2880, "layer_types": ["sliding_attention", "full_attention",
  "sliding_attention", "full_attention"], "max_position_embeddings": 131072,
  "model_type": "gpt_oss", "num_attention_heads": 64, "num_experts_per_tok": 4,
  "num_hidden_layers": 4, "num_key_value_heads": 8, "num_local_experts": 32,
  "output_router_logits": false, "pad_token_id": 199999, "rms_norm_eps": 1e-05,
  "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
  "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": false},
  "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128,
  "swiglu_limit": 7.0, "tie_word_embeddings": false, "transformers_version": "4.55.0.dev0",
  "use_cache": true, "vocab_size": 201088})";
// Gemma 2 2B (google/gemma-2-2b config.json, 4 layers instead of 26).
constexpr const char* kGemma2 = R"({
  "architectures": ["Gemma2ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid",
  "eos_token_id": 1, "final_logit_softcapping": 30.0, "head_dim": 256,
  "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2304,
  "initializer_range": 0.02, "intermediate_size": 9216, "max_position_embeddings": 8192,
  "model_type": "gemma2", "num_attention_heads": 8, "num_hidden_layers": 4,
  "num_key_value_heads": 4, "pad_token_id": 0, "query_pre_attn_scalar": 256,
  "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096,
  "torch_dtype": "float32", "use_cache": true, "vocab_size": 256000})";
// Gemma 3 1B (google/gemma-3-1b-pt config.json, 7 layers instead of 26).
constexpr const char* kGemma3 = R"({
  "architectures": ["Gemma3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "attn_logit_softcapping": null, "bos_token_id": 2, "cache_implementation": "hybrid",
  "eos_token_id": 1, "final_logit_softcapping": null, "head_dim": 256,
  "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "initializer_range": 0.02,
  "intermediate_size": 6912, "max_position_embeddings": 32768, "model_type": "gemma3_text",
  "num_attention_heads": 4, "num_hidden_layers": 7, "num_key_value_heads": 1, "pad_token_id": 0,
  "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000,
  "rope_scaling": null, "rope_theta": 1000000, "sliding_window": 512,
  "sliding_window_pattern": 6, "torch_dtype": "bfloat16", "use_cache": true,
  "vocab_size": 262144})";

// microsoft/Phi-3-mini-4k-instruct's config.json (transformers 4.40; auto_map omitted).
constexpr const char* kPhi3 = R"({
  "architectures": ["Phi3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu",
  "hidden_size": 3072, "initializer_range": 0.02, "intermediate_size": 8192,
  "max_position_embeddings": 4096, "model_type": "phi3", "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 32, "original_max_position_embeddings": 4096,
  "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_scaling": null,
  "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.40.2", "use_cache": true,
  "vocab_size": 32064})";

// Qwen3-Next-80B-A3B as its config.json gives it (flat; docs/specs/qwen3_next.md section 1.1).
constexpr const char* kQwen3Next = R"({"architectures": ["Qwen3NextForCausalLM"],
  "model_type": "qwen3_next", "hidden_size": 2048, "intermediate_size": 5120,
  "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
  "vocab_size": 151936, "max_position_embeddings": 262144, "rms_norm_eps": 1e-06,
  "rope_theta": 10000000, "partial_rotary_factor": 0.25, "rope_scaling": null,
  "full_attention_interval": 4, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
  "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
  "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
  "shared_expert_intermediate_size": 512, "norm_topk_prob": true, "decoder_sparse_step": 1,
  "mlp_only_layers": [], "tie_word_embeddings": false, "bos_token_id": 151643,
  "eos_token_id": 151645, "torch_dtype": "bfloat16"})";
// Qwen3.5-0.8B's shape as an image-text config (text_config nested; sizes beyond the published
// 24 layers, width 1024, 8 / 2 heads are the family defaults' proportions).
constexpr const char* kQwen35 = R"({"architectures": ["Qwen3_5ForConditionalGeneration"],
  "model_type": "qwen3_5", "image_token_id": 248056, "tie_word_embeddings": true,
  "text_config": {"model_type": "qwen3_5_text", "hidden_size": 1024, "intermediate_size": 3584,
  "num_hidden_layers": 24, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256,
  "vocab_size": 248320, "max_position_embeddings": 262144, "rms_norm_eps": 1e-06,
  "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
  "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10], "mrope_interleaved": true},
  "partial_rotary_factor": 0.25, "full_attention_interval": 4, "linear_conv_kernel_dim": 4,
  "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_num_key_heads": 16,
  "linear_num_value_heads": 16, "attn_output_gate": true, "mamba_ssm_dtype": "float32",
  "mtp_num_hidden_layers": 1, "eos_token_id": 248044, "dtype": "bfloat16"},
  "vision_config": {"depth": 12, "hidden_size": 768}})";
constexpr const char* kQwen35Text = R"({"architectures": ["Qwen3_5ForCausalLM"],
  "hidden_size": 1024, "intermediate_size": 3584, "num_hidden_layers": 24,
  "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 248320,
  "rope_theta": 10000000, "linear_num_value_heads": 16})";
// Qwen3.6-35B-A3B (qwen3_5_moe): 40 layers, 256 experts top-8, fused experts.
constexpr const char* kQwen35Moe = R"({"architectures": ["Qwen3_5MoeForConditionalGeneration"],
  "model_type": "qwen3_5_moe", "tie_word_embeddings": false,
  "text_config": {"hidden_size": 2048, "num_hidden_layers": 40, "num_attention_heads": 16,
  "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 248320,
  "max_position_embeddings": 262144, "rope_parameters": {"rope_type": "default",
  "rope_theta": 10000000, "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10],
  "mrope_interleaved": true}, "num_experts": 256, "num_experts_per_tok": 8,
  "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512}})";
constexpr const char* kQwen35MoeText = R"({"architectures": ["Qwen3_5MoeForCausalLM"],
  "hidden_size": 2048, "num_hidden_layers": 40, "num_attention_heads": 16,
  "num_key_value_heads": 2, "vocab_size": 248320, "rope_theta": 10000000})";

const Sample kSamples[] = {{"llama", kLlama},
                           {"mistral", kMistral},
                           {"qwen2", kQwen2},
                           {"qwen3", kQwen3},
                           {"gpt2", kGpt2},
                           {"gpt_neox", kNeox},
                           {"olmo2", kOlmo2},
                           {"qwen3_moe", kQwen3Moe},
                           {"olmoe", kOlmoe},
                           {"mixtral", kMixtral},
                           {"gpt_oss", kGptOss},
                           {"gemma2", kGemma2},
                           {"gemma3_text", kGemma3},
                           {"phi3", kPhi3},
                           {"qwen3_next", kQwen3Next},
                           {"qwen3_5", kQwen35},
                           {"qwen3_5_text", kQwen35Text},
                           {"qwen3_5_moe", kQwen35Moe},
                           {"qwen3_5_moe_text", kQwen35MoeText}};

std::string ErrorOf(const std::string& json) {
  try {
    ParseHfConfig(json, "cfg/config.json");
  } catch (const Error& e) {
    std::printf("error: %s\n", e.what());
    return e.what();
  }
  return "";
}

TEST(HfConfig, Llama32) {
  ModelConfig c = ParseHfConfig(kLlama, "llama");
  EXPECT_EQ(c.arch, "llama");
  EXPECT_EQ(c.dim, 2048);
  EXPECT_EQ(c.hidden_dim, 8192);
  EXPECT_EQ(c.n_layers, 16);
  EXPECT_EQ(c.n_heads, 32);
  EXPECT_EQ(c.n_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.max_seq_len, 131072);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
  EXPECT_EQ(c.norm, NormKind::kRms);
  EXPECT_EQ(c.act, ActKind::kSilu);
  EXPECT_TRUE(c.gated_mlp);
  EXPECT_EQ(c.rope, RopeKind::kHalf);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.rope_scaling, RopeScalingKind::kLlama3);
  EXPECT_EQ(c.rope_scaling_factor, 32.0f);
  EXPECT_EQ(c.rope_low_freq_factor, 1.0f);
  EXPECT_EQ(c.rope_high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_original_max_seq_len, 8192);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_EQ(c.bos_id, 128000);
  EXPECT_EQ(c.eos_id, 128001);
  EXPECT_EQ(c.eos_ids, (std::vector<int>{128001, 128008, 128009}));
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.qk_norm, QkNormKind::kNone);
  EXPECT_EQ(c.n_experts, 0);
}

TEST(HfConfig, MistralSlidingWindow) {
  ModelConfig c = ParseHfConfig(kMistral, "mistral");
  EXPECT_EQ(c.arch, "mistral");
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.head_dim, 128);  // hidden_size / heads when head_dim is absent
  EXPECT_FALSE(c.tied_embeddings);
  EXPECT_EQ(ParseHfConfig(kMixtral, "mixtral").sliding_window, 0);  // null: full attention
}

TEST(HfConfig, Qwen2AndQwen3) {
  ModelConfig q2 = ParseHfConfig(kQwen2, "qwen2");
  EXPECT_TRUE(q2.qkv_bias);
  EXPECT_FALSE(q2.attn_out_bias);
  EXPECT_EQ(q2.qk_norm, QkNormKind::kNone);
  EXPECT_EQ(q2.n_kv_heads, 2);
  EXPECT_EQ(q2.head_dim, 64);
  EXPECT_EQ(q2.sliding_window, 0);  // use_sliding_window is false
  EXPECT_EQ(q2.bos_id, 151643);
  EXPECT_TRUE(q2.eos_ids.empty());

  ModelConfig q3 = ParseHfConfig(kQwen3, "qwen3");
  EXPECT_EQ(q3.head_dim, 128);
  EXPECT_EQ(q3.q_dim(), 2048);  // wider than hidden_size
  EXPECT_EQ(q3.qk_norm, QkNormKind::kPerHead);
  EXPECT_FALSE(q3.qkv_bias);
  EXPECT_EQ(q3.rope_theta, 1e6f);
  EXPECT_EQ(q3.rope_scaling, RopeScalingKind::kNone);
  EXPECT_EQ(q3.max_seq_len, 40960);
}

TEST(HfConfig, Gpt2) {
  ModelConfig c = ParseHfConfig(kGpt2, "gpt2");
  EXPECT_EQ(c.arch, "gpt2");
  EXPECT_EQ(c.dim, 768);
  EXPECT_EQ(c.hidden_dim, 3072);  // n_inner null -> 4 * n_embd
  EXPECT_EQ(c.n_layers, 12);
  EXPECT_EQ(c.n_heads, 12);
  EXPECT_EQ(c.n_kv_heads, 12);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.max_seq_len, 1024);
  EXPECT_EQ(c.norm, NormKind::kLayer);
  EXPECT_EQ(c.act, ActKind::kGeluTanh);
  EXPECT_FALSE(c.gated_mlp);
  EXPECT_EQ(c.rope, RopeKind::kNone);
  EXPECT_TRUE(c.learned_pos);
  EXPECT_TRUE(c.qkv_bias && c.attn_out_bias && c.mlp_bias);
  EXPECT_TRUE(c.tied_embeddings);  // GPT-2's default: the file has no tie_word_embeddings
  EXPECT_EQ(c.bos_id, 50256);
  EXPECT_EQ(c.eos_id, 50256);
}

TEST(HfConfig, GptNeox) {
  ModelConfig c = ParseHfConfig(kNeox, "neox");
  EXPECT_EQ(c.arch, "gpt_neox");
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rotary_dim, 16);  // int(64 * 0.25)
  EXPECT_EQ(c.rot_dim(), 16);
  EXPECT_TRUE(c.parallel_residual);
  EXPECT_EQ(c.norm, NormKind::kLayer);
  EXPECT_EQ(c.act, ActKind::kGelu);
  EXPECT_FALSE(c.gated_mlp);
  EXPECT_TRUE(c.qkv_bias && c.attn_out_bias && c.mlp_bias);
  EXPECT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.bos_id, 0);
  EXPECT_EQ(c.eos_id, 0);
  EXPECT_EQ(c.torch_dtype, "float16");
}

TEST(HfConfig, Olmo2) {
  ModelConfig c = ParseHfConfig(kOlmo2, "olmo2");
  EXPECT_EQ(c.qk_norm, QkNormKind::kFull);
  EXPECT_TRUE(c.post_norms);
  EXPECT_EQ(c.bos_id, -1);  // null
  EXPECT_EQ(c.eos_id, 100257);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-6f);
}

TEST(HfConfig, MixtureOfExperts) {
  ModelConfig q = ParseHfConfig(kQwen3Moe, "qwen3_moe");
  EXPECT_EQ(q.n_experts, 128);
  EXPECT_EQ(q.n_experts_per_tok, 8);
  EXPECT_EQ(q.hidden_dim, 768);  // per expert
  EXPECT_EQ(q.dense_hidden_dim, 6144);
  EXPECT_TRUE(q.norm_topk_prob);
  EXPECT_EQ(q.n_shared_experts, 0);
  EXPECT_EQ(q.qk_norm, QkNormKind::kPerHead);

  ModelConfig o = ParseHfConfig(kOlmoe, "olmoe");
  EXPECT_EQ(o.n_experts, 64);
  EXPECT_EQ(o.n_experts_per_tok, 8);
  EXPECT_EQ(o.hidden_dim, 1024);
  EXPECT_FALSE(o.norm_topk_prob);
  EXPECT_EQ(o.qk_norm, QkNormKind::kFull);
  EXPECT_FALSE(o.post_norms);
  EXPECT_EQ(o.bos_id, -1);  // absent: OlmoeConfig's default None

  ModelConfig m = ParseHfConfig(kMixtral, "mixtral");
  EXPECT_EQ(m.n_experts, 8);
  EXPECT_EQ(m.n_experts_per_tok, 2);
  EXPECT_EQ(m.hidden_dim, 14336);
  EXPECT_TRUE(m.norm_topk_prob);
  EXPECT_EQ(m.qk_norm, QkNormKind::kNone);
}

// Phi-3-mini as transformers reads it; Phi-4-mini's partial rotary and window beyond the context.
TEST(HfConfig, Phi3MiniAndPhi4Mini) {
  const ModelConfig p = ParseHfConfig(kPhi3, "phi3");
  EXPECT_EQ(p.arch, "phi3");
  EXPECT_EQ(p.head_dim, 96);
  EXPECT_EQ(p.rot_dim(), 96);
  EXPECT_EQ(p.sliding_window, 2047);
  EXPECT_TRUE(p.layer_attention.empty());  // every layer slides
  EXPECT_FALSE(p.tied_embeddings);
  EXPECT_EQ(p.eos_id, 32000);
  EXPECT_FALSE(p.qkv_bias || p.attn_out_bias || p.mlp_bias);
  // microsoft/Phi-4-mini-instruct's shape: 0.75 of each 128-dim head rotates; its window (262144)
  // is beyond the context, so no key is ever out of it.
  const std::string phi4 = R"({"architectures": ["Phi3ForCausalLM"], "hidden_size": 3072,
      "intermediate_size": 8192, "num_attention_heads": 24, "num_key_value_heads": 8,
      "num_hidden_layers": 32, "vocab_size": 200064, "max_position_embeddings": 131072,
      "partial_rotary_factor": 0.75, "sliding_window": 262144, "tie_word_embeddings": true)";
  const ModelConfig p4 = ParseHfConfig(phi4 + "}", "phi4");
  EXPECT_EQ(p4.rot_dim(), 96);
  EXPECT_EQ(p4.head_dim, 128);
  EXPECT_EQ(p4.sliding_window, 0);
  EXPECT_EQ(ParseHfConfig(HfConfigJson(p4), "again"), p4);
  // Its LongRoPE scaling is not implemented: refused by name.
  const std::string e =
      ErrorOf(phi4 + R"(, "rope_scaling": {"type": "longrope", "long_factor": [1.0],
      "short_factor": [1.0]}})");
  EXPECT_NE(e.find("longrope"), std::string::npos) << e;
  const std::string both =
      ErrorOf(phi4 + R"(, "rope_parameters": {"partial_rotary_factor": 0.5}})");
  EXPECT_NE(
      both.find(
          "partial_rotary_factor 0.75 and rope_parameters.partial_rotary_factor 0.5 disagree"),
      std::string::npos)
      << both;
  const std::string odd = ErrorOf(R"({"architectures": ["Phi3ForCausalLM"], "hidden_size": 32,
      "intermediate_size": 8, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10,
      "partial_rotary_factor": 0.4})");
  EXPECT_NE(odd.find("'partial_rotary_factor' 0.4 gives an odd rotary dimension"),
            std::string::npos)
      << odd;
}

TEST(HfConfig, TieDefaultsDifferPerFamily) {
  // Without the field: GPT-2 ties (PretrainedConfig's default True), Llama does not.
  EXPECT_TRUE(ParseHfConfig(R"({"model_type": "gpt2", "n_embd": 8, "n_layer": 1, "n_head": 2,
                               "vocab_size": 10})",
                            "t")
                  .tied_embeddings);
  EXPECT_FALSE(ParseHfConfig(R"({"model_type": "llama", "hidden_size": 8,
      "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16,
      "vocab_size": 10})",
                             "t")
                   .tied_embeddings);
}

TEST(HfConfig, LinearRopeScalingAndSoftcaps) {
  ModelConfig c = ParseHfConfig(R"({"model_type": "llama", "hidden_size": 8,
      "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16,
      "vocab_size": 10, "rope_scaling": {"type": "linear", "factor": 2.0},
      "final_logit_softcapping": 30.0})",
                                "t");
  EXPECT_EQ(c.rope_scaling, RopeScalingKind::kLinear);
  EXPECT_EQ(c.rope_scaling_factor, 2.0f);
  EXPECT_EQ(c.final_logit_softcap, 30.0f);
  // Attention soft-capping is Gemma 2's: transformers' Llama ignores the key, so it is refused
  // rather than applied to a model that does not use it.
  EXPECT_THROW(ParseHfConfig(R"({"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1,
      "num_attention_heads": 2, "intermediate_size": 16, "vocab_size": 10,
      "attn_logit_softcapping": 50.0})",
                             "t"),
               Error);
  EXPECT_EQ(c.bos_id, 1);  // Llama defaults
  EXPECT_EQ(c.eos_id, 2);
}

TEST(HfConfig, RoundTripEveryFamily) {
  auto dir = std::filesystem::temp_directory_path() / fmt::format("sinkscope_hf_{}", getpid());
  std::filesystem::create_directories(dir);
  int families = 0;
  for (const Sample& s : kSamples) {
    SCOPED_TRACE(s.name);
    ModelConfig parsed = ParseHfConfig(s.json, s.name);
    EXPECT_EQ(parsed.arch, s.name);
    std::string written = HfConfigJson(parsed);
    EXPECT_TRUE(ParseHfConfig(written, s.name) == parsed) << written;
    if (std::string(s.name) == "llama") {
      // Floats print as the short decimal a person wrote, not the float's exact double value.
      EXPECT_NE(written.find("\"rms_norm_eps\": 1e-05"), std::string::npos) << written;
      EXPECT_NE(written.find("\"rope_theta\": 500000.0"), std::string::npos) << written;
    }
    std::string path = (dir / "config.json").string();
    WriteHfConfig(path, parsed);
    EXPECT_TRUE(ReadHfConfig(dir.string()) == parsed);  // directory form
    ++families;
  }
  std::filesystem::remove_all(dir);
  EXPECT_EQ(families, 19);
  EXPECT_EQ(SupportedHfArchitectures().size(), 19u);
  // Qwen3.5 / Qwen3-Next: every fourth layer full attention, a quarter of each head rotated, the
  // 1 + w norms and the output gate; the shapes of the published checkpoints.
  const ModelConfig q35 = ParseHfConfig(kQwen35, "qwen3_5"), next = ParseHfConfig(kQwen3Next, "n");
  EXPECT_EQ(q35.n_layers, 24);
  EXPECT_EQ(std::count(q35.linear_layers.begin(), q35.linear_layers.end(), false), 6);
  EXPECT_TRUE(q35.LinearLayer(0) && !q35.LinearLayer(3) && q35.LinearLayer(22) &&
              !q35.LinearLayer(23));
  EXPECT_EQ(q35.rot_dim(), 64);
  EXPECT_EQ(q35.rope_theta, 1e7f);
  EXPECT_EQ(q35.norm_weight_offset, 1.0f);
  EXPECT_TRUE(q35.attn_output_gate && q35.tied_embeddings && q35.n_experts == 0);
  EXPECT_EQ(q35.linear_conv_dim(), 2 * 16 * 128 + 16 * 128);
  EXPECT_EQ(q35.eos_id, 248044);
  EXPECT_EQ(next.n_experts, 512);
  EXPECT_EQ(next.n_experts_per_tok, 10);
  EXPECT_TRUE(next.norm_topk_prob && next.shared_expert_gate);
  EXPECT_EQ(next.linear_v_heads / next.linear_k_heads, 2);
  const ModelConfig moe = ParseHfConfig(kQwen35Moe, "qwen3_5_moe");
  EXPECT_TRUE(moe.norm_topk_prob);    // always, without a key
  EXPECT_EQ(moe.linear_v_heads, 32);  // the family default
  EXPECT_EQ(moe.shared_expert_hidden_dim, 512);
  // The published Gemma configs' defaults read as transformers reads them.
  const ModelConfig g2 = ParseHfConfig(kGemma2, "gemma2"), g3 = ParseHfConfig(kGemma3, "gemma3");
  EXPECT_EQ(g2.attn_logit_softcap, 50.0f);
  EXPECT_EQ(g2.final_logit_softcap, 30.0f);
  EXPECT_EQ(g2.Window(0), 4096);
  EXPECT_EQ(g2.Window(1), 0);
  EXPECT_EQ(g3.attn_logit_softcap, 0.0f);
  EXPECT_EQ(g3.final_logit_softcap, 0.0f);
  EXPECT_EQ(g3.Window(4), 512);
  EXPECT_EQ(g3.Window(5), 0);  // every sixth layer is global
  EXPECT_EQ(g3.Window(6), 512);
  EXPECT_EQ(g3.rope_local_theta, 10000.0f);
  EXPECT_EQ(g3.QueryScale(0), 1.0f);  // query_pre_attn_scalar == head_dim
  EXPECT_EQ(g3.embed_scale, std::sqrt(1152.0f));
}

TEST(HfConfig, WriterRejectsWhatTheFamilyCannotExpress) {
  ModelConfig c = ParseHfConfig(kGpt2, "gpt2");
  c.norm = NormKind::kRms;
  try {
    HfConfigJson(c);
    FAIL();
  } catch (const Error& e) {
    std::printf("error: %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("norm"), std::string::npos);
  }
  // A default ModelConfig (llama2.c-style: interleaved RoPE) cannot be a Llama config.json:
  // transformers' Llama uses rotate_half. The writer says so instead of writing a wrong file.
  ModelConfig llama2c;
  llama2c.dim = 64;
  llama2c.hidden_dim = 128;
  llama2c.n_layers = 1;
  llama2c.n_heads = llama2c.n_kv_heads = 4;
  llama2c.head_dim = 16;
  llama2c.vocab_size = 32;
  llama2c.max_seq_len = 64;
  EXPECT_THROW(HfConfigJson(llama2c), Error);
  llama2c.rope = RopeKind::kHalf;
  llama2c.tied_embeddings = false;
  EXPECT_TRUE(ParseHfConfig(HfConfigJson(llama2c), "x") == llama2c);
  ModelConfig unknown;
  unknown.arch = "bert";
  EXPECT_THROW(HfConfigJson(unknown), Error);
}

TEST(HfConfig, Errors) {
  std::string e = ErrorOf(R"({"architectures": ["BertForMaskedLM"], "model_type": "bert"})");
  EXPECT_NE(e.find("cfg/config.json"), std::string::npos);
  EXPECT_NE(e.find("'BertForMaskedLM'"), std::string::npos);
  EXPECT_NE(e.find("LlamaForCausalLM"), std::string::npos);  // lists the supported ones
  EXPECT_NE(e.find("MixtralForCausalLM"), std::string::npos);

  e = ErrorOf(R"({"model_type": "falcon"})");
  EXPECT_NE(e.find("'falcon'"), std::string::npos);
  EXPECT_NE(e.find("qwen3_moe"), std::string::npos);

  e = ErrorOf(R"({"hidden_size": 8})");
  EXPECT_NE(e.find("model_type"), std::string::npos);

  e = ErrorOf(R"({"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2,
                  "intermediate_size": 16, "vocab_size": 10})");
  EXPECT_NE(e.find("missing required field 'num_hidden_layers'"), std::string::npos);

  e = ErrorOf(R"({"model_type": "llama", "hidden_size": "8", "num_hidden_layers": 1,
                  "num_attention_heads": 2, "intermediate_size": 16, "vocab_size": 10})");
  EXPECT_NE(e.find("'hidden_size' must be an integer"), std::string::npos);

  e = ErrorOf(R"({"model_type": "gpt2", "n_embd": 8, "n_layer": 1, "n_head": 2,
                  "vocab_size": 10, "eos_token_id": 18446744073709551615})");
  EXPECT_NE(e.find("'eos_token_id' is too large"), std::string::npos) << e;

  e = ErrorOf(R"({"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1,
                  "num_attention_heads": 2, "intermediate_size": 16, "vocab_size": 10,
                  "rope_scaling": {"rope_type": "longrope", "factor": 4.0}})");
  EXPECT_NE(e.find("'longrope'"), std::string::npos);

  e = ErrorOf(R"({"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1,
                  "num_attention_heads": 2, "intermediate_size": 16, "vocab_size": 10,
                  "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})");
  EXPECT_NE(e.find("low_freq_factor"), std::string::npos);

  e = ErrorOf(R"({"model_type": "gpt2", "n_embd": 8, "n_layer": 1, "n_head": 2,
                  "vocab_size": 10, "activation_function": "mish"})");
  EXPECT_NE(e.find("'mish'"), std::string::npos);

  e = ErrorOf(R"({"model_type": "llama", "model_type": "gpt2"})");
  EXPECT_NE(e.find("duplicate key 'model_type'"), std::string::npos);

  e = ErrorOf(R"({"model_type": "llama", )");
  EXPECT_NE(e.find("malformed"), std::string::npos);

  e = ErrorOf(R"({"model_type": "qwen2", "hidden_size": 8, "num_hidden_layers": 1,
                  "num_attention_heads": 2, "intermediate_size": 16, "vocab_size": 10,
                  "use_sliding_window": true, "max_window_layers": -1})");
  EXPECT_NE(e.find("'max_window_layers' must be 0 or more"), std::string::npos) << e;

  EXPECT_THROW(ReadHfConfig("/nonexistent/sinkscope/config.json"), Error);
}

std::string RopeSummary(const ModelConfig& c) {
  return fmt::format("rope_theta {}, local {}, scaling {} x{}", c.rope_theta, c.rope_local_theta,
                     static_cast<int>(c.rope_scaling), c.rope_scaling_factor);
}

// A tiny config of each RoPE family, with `extra` keys; max_position_embeddings 64, so that
// YaRN's factor 4 over an original 16 agrees with 64 / 16.
std::string TinyConfig(const std::string& arch, const std::string& extra) {
  std::string core;
  if (arch == "GPTNeoXForCausalLM") {
    core = R"("hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
        "num_attention_heads": 4, "vocab_size": 61, "max_position_embeddings": 64)";
  } else {
    core = R"("hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 61,
        "max_position_embeddings": 64)";
    if (arch == "Qwen3MoeForCausalLM" || arch == "OlmoeForCausalLM")
      core += R"(, "moe_intermediate_size": 24, "num_experts": 4, "num_experts_per_tok": 2)";
    if (arch == "MixtralForCausalLM" || arch == "GptOssForCausalLM")
      core += R"(, "num_local_experts": 4, "num_experts_per_tok": 2)";
    if (arch.rfind("Gemma", 0) == 0 || arch == "GptOssForCausalLM")
      core += R"(, "sliding_window": 4)";
  }
  return "{\"architectures\": [\"" + arch + "\"], " + core + (extra.empty() ? "" : ", " + extra) +
         "}";
}

// transformers 5 writes the RoPE settings as rope_parameters (the base inside; Gemma 3: one object
// per layer type); earlier versions as rope_theta + rope_scaling (Gemma 3: + rope_local_base_freq).
// For every family with RoPE and every scaling type sinkscope implements, both forms read to the
// same ModelConfig. Before, Gemma 3's per-layer-type form read as no scaling and the default
// bases (mean NLL 0.52 nats off on random gemma3_text models, issue 32).
TEST(HfConfig, RopeParametersV5FormReadsAsTheLegacyForm) {
  struct Type {
    const char* name;
    const char* parameters;  // the type's keys, as both forms spell them
    RopeScalingKind kind;
  };
  const Type types[] = {
      {"default", R"("rope_type": "default")", RopeScalingKind::kNone},
      {"linear", R"("rope_type": "linear", "factor": 4.0)", RopeScalingKind::kLinear},
      {"linear (older 'type')", R"("type": "linear", "factor": 4.0)", RopeScalingKind::kLinear},
      {"llama3", R"("rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 16)",
       RopeScalingKind::kLlama3},
      {"yarn", R"("rope_type": "yarn", "factor": 4.0, "beta_fast": 16.0, "beta_slow": 2.0,
          "truncate": false, "original_max_position_embeddings": 16)",
       RopeScalingKind::kYarn},
  };
  const char* families[] = {"LlamaForCausalLM",  "MistralForCausalLM", "MixtralForCausalLM",
                            "Qwen2ForCausalLM",  "Qwen3ForCausalLM",   "Qwen3MoeForCausalLM",
                            "Olmo2ForCausalLM",  "OlmoeForCausalLM",   "GptOssForCausalLM",
                            "Gemma2ForCausalLM", "Phi3ForCausalLM",    "GPTNeoXForCausalLM"};
  int checked = 0;
  for (const char* family : families) {
    const std::string base_key =
        std::string(family) == "GPTNeoXForCausalLM" ? "rotary_emb_base" : "rope_theta";
    for (const Type& t : types) {
      SCOPED_TRACE(fmt::format("{} {}", family, t.name));
      const bool scaled = t.kind != RopeScalingKind::kNone;
      const std::string legacy = TinyConfig(
          family,
          fmt::format(R"("{}": 5000.0{})", base_key,
                      scaled ? fmt::format(R"(, "rope_scaling": {{{}}})", t.parameters) : ""));
      const ModelConfig want = ParseHfConfig(legacy, "legacy/config.json");
      EXPECT_EQ(want.rope_theta, 5000.0f);
      EXPECT_EQ(want.rope_scaling, t.kind);
      // As transformers 5 saves it; and with the base left at the top level, which it reads too.
      const std::string v5 = TinyConfig(
          family, fmt::format(R"("rope_parameters": {{{}, "rope_theta": 5000.0}})", t.parameters));
      EXPECT_EQ(ParseHfConfig(v5, "v5/config.json"), want) << v5;
      const std::string v5_top_base = TinyConfig(
          family,
          fmt::format(R"("{}": 5000.0, "rope_parameters": {{{}}})", base_key, t.parameters));
      EXPECT_EQ(ParseHfConfig(v5_top_base, "v5/config.json"), want) << v5_top_base;
      // Both forms, saying the same thing.
      const std::string both = TinyConfig(
          family,
          fmt::format(
              R"("{}": 5000.0, "rope_scaling": {{{}}}, "rope_parameters": {{{}, "rope_theta": 5000.0}})",
              base_key, t.parameters, t.parameters));
      EXPECT_EQ(ParseHfConfig(both, "both/config.json"), want) << both;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 12 * 5);

  // Gemma 3: the issue's form (sliding layers the local base, full layers the global base and the
  // scaling) against rope_theta + rope_local_base_freq + rope_scaling.
  struct Gemma3Case {
    const char* legacy;
    const char* v5;
  };
  const Gemma3Case gemma3[] = {
      {R"("rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
          "rope_scaling": {"rope_type": "linear", "factor": 8.0})",
       R"("rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
          "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}})"},
      {R"("rope_theta": 500000.0, "rope_local_base_freq": 100.0,
          "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 16})",
       R"("rope_parameters": {"full_attention": {"rope_type": "llama3", "factor": 8.0,
          "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16,
          "rope_theta": 500000.0}, "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}})"},
      // Entries missing or null: the default RoPE with the top-level bases, or the defaults.
      {R"("rope_theta": 20000.0, "rope_local_base_freq": 100.0)",
       R"("rope_theta": 20000.0, "rope_local_base_freq": 100.0,
          "rope_parameters": {"sliding_attention": null})"},
      {R"("rope_local_base_freq": 10000.0, "rope_theta": 1000000.0)",
       R"("rope_parameters": {"full_attention": {"rope_type": "default"}})"},
      // Both forms, agreeing.
      {R"("rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
          "rope_scaling": {"rope_type": "linear", "factor": 8.0})",
       R"("rope_theta": 1000000.0, "rope_scaling": {"rope_type": "linear", "factor": 8.0},
          "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0}})"},
  };
  for (const Gemma3Case& g : gemma3) {
    SCOPED_TRACE(g.v5);
    const ModelConfig want = ParseHfConfig(TinyConfig("Gemma3ForCausalLM", g.legacy), "legacy");
    const ModelConfig got = ParseHfConfig(TinyConfig("Gemma3ForCausalLM", g.v5), "v5");
    EXPECT_EQ(got, want) << RopeSummary(got) << " vs " << RopeSummary(want);
  }
  const ModelConfig issue = ParseHfConfig(TinyConfig("Gemma3ForCausalLM", gemma3[0].v5), "v5");
  EXPECT_EQ(issue.rope_theta, 1e6f);
  EXPECT_EQ(issue.rope_local_theta, 1e4f);
  EXPECT_EQ(issue.rope_scaling, RopeScalingKind::kLinear);
  EXPECT_EQ(issue.rope_scaling_factor, 8.0f);
  // What the writer makes of it (the legacy form) reads back the same.
  EXPECT_EQ(ParseHfConfig(HfConfigJson(issue), "again"), issue);
}

// Each RoPE form or value that a family does not implement is refused naming config.json and the
// key, instead of being read as something else (before: every one of these loaded).
TEST(HfConfig, RopeFormsAFamilyDoesNotImplementAreRefusedByName) {
  auto expect = [](const std::string& arch, const std::string& extra, const std::string& message) {
    SCOPED_TRACE(extra);
    const std::string e = ErrorOf(TinyConfig(arch, extra));
    EXPECT_NE(e.find("cfg/config.json: "), std::string::npos) << e;
    EXPECT_NE(e.find(message), std::string::npos) << e;
  };
  const std::string llama = "LlamaForCausalLM", gemma3 = "Gemma3ForCausalLM";
  // Scaling types sinkscope does not implement, in either form and either spelling of the type.
  expect(llama, R"("rope_scaling": {"rope_type": "dynamic", "factor": 2.0})",
         "'rope_scaling.rope_type' is 'dynamic', which sinkscope does not implement; supported: "
         "default, linear, llama3, yarn");
  expect(llama, R"("rope_scaling": {"type": "dynamic", "factor": 2.0})",
         "'rope_scaling.type' is 'dynamic'");
  expect(llama,
         R"("rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0})",
         "'rope_parameters.rope_type' is 'dynamic'");
  expect("Phi3ForCausalLM",
         R"("rope_parameters": {"rope_type": "longrope", "short_factor": [1.0, 1.0],
         "long_factor": [1.0, 1.0], "original_max_position_embeddings": 16, "rope_theta": 10000.0})",
         "'rope_parameters.rope_type' is 'longrope'");
  expect(
      gemma3,
      R"("rope_parameters": {"full_attention": {"rope_type": "proportional", "rope_theta": 1000000.0}})",
      "'rope_parameters.full_attention.rope_type' is 'proportional'");
  expect(llama, R"("rope_scaling": {"rope_type": "linear", "type": "yarn", "factor": 2.0})",
         "'rope_scaling.rope_type' 'linear' and 'rope_scaling.type' 'yarn' disagree");
  // Keys the type does not take (transformers warns and ignores them).
  expect(
      llama,
      R"("rope_scaling": {"rope_type": "linear", "factor": 2.0, "original_max_position_embeddings": 16})",
      "'rope_scaling.original_max_position_embeddings' is not a parameter of rope_type 'linear' "
      "(it takes factor, rope_theta)");
  expect(llama,
         R"("rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "factor": 2.0})",
         "'rope_parameters.factor' is not a parameter of rope_type 'default'");
  expect(llama,
         R"("rope_parameters": {"rope_type": "yarn", "factor": 4.0, "attention_factor": 1.2})",
         "'rope_parameters.attention_factor' is not supported");
  // Values.
  expect(llama, R"("rope_parameters": {"rope_type": "linear", "factor": 0.0})",
         "'rope_parameters.factor' must be positive");
  expect(llama, R"("rope_parameters": {"rope_type": "linear", "factor": "2"})",
         "'rope_parameters.factor' must be a number");
  expect(llama,
         R"("rope_parameters": {"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0,
         "original_max_position_embeddings": 16})",
         "missing required field 'rope_parameters.low_freq_factor'");
  expect(llama, R"("rope_parameters": 5)", "'rope_parameters' must be an object or null, found 5");
  expect(llama,
         R"("rope_scaling": {"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5})",
         "'rope_scaling.partial_rotary_factor' 0.5 (rotating part of each head) is not supported");
  // The per-layer-type form where the family has one set of RoPE parameters, and the reverse.
  expect(
      llama,
      R"("rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 10000.0}})",
      "'rope_parameters.full_attention': llama has one set of RoPE parameters for every layer");
  expect("Gemma2ForCausalLM", R"("rope_parameters": {"sliding_attention": {"rope_type": "default"},
         "full_attention": {"rope_type": "default"}})",
         "gemma2 has one set of RoPE parameters");
  expect(gemma3,
         R"("rope_parameters": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0})",
         "'rope_parameters' of gemma3_text holds one object per layer type");
  expect(gemma3, R"("rope_parameters": {"full_attention": 3})",
         "'rope_parameters.full_attention' must be an object or null, found 3");
  expect(gemma3,
         R"("rope_parameters": {"sliding_attention": {"rope_type": "linear", "factor": 2.0}})",
         "'rope_parameters.sliding_attention' has rope_type 'linear', which sinkscope does not "
         "implement");
  expect(
      gemma3,
      R"("rope_parameters": {"full_attention": {"rope_type": "default", "partial_rotary_factor": 0.5}})",
      "'rope_parameters.full_attention.partial_rotary_factor' 0.5 (rotating part of each head) is "
      "not supported there; gemma3_text rotates whole heads");
  // YaRN on Gemma 3: its attention factor would scale the sliding layers too.
  expect(gemma3, R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0})",
         "'rope_scaling.rope_type' is 'yarn'");
  expect(gemma3, R"("rope_parameters": {"full_attention": {"rope_type": "yarn", "factor": 4.0}})",
         "'rope_parameters.full_attention.rope_type' is 'yarn'");
  // The two forms, or a base at the top level and one inside, saying different things.
  expect(
      llama,
      R"("rope_theta": 10000.0, "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0})",
      "'rope_parameters.rope_theta' 500000 and 'rope_theta' 10000 disagree");
  expect(
      "GPTNeoXForCausalLM",
      R"("rotary_emb_base": 10000, "rope_parameters": {"rope_type": "default", "rope_theta": 5000.0})",
      "'rope_parameters.rope_theta' 5000 and 'rotary_emb_base' 10000 disagree");
  expect(
      gemma3,
      R"("rope_local_base_freq": 10000.0, "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 100.0}})",
      "'rope_parameters.sliding_attention.rope_theta' 100 and 'rope_local_base_freq' 10000 "
      "disagree");
  expect(
      llama,
      R"("rope_scaling": {"rope_type": "linear", "factor": 2.0}, "rope_parameters": {"rope_type": "linear", "factor": 4.0})",
      "'rope_scaling' and 'rope_parameters' give different RoPE settings (factor 2 / 4");
  expect(
      gemma3,
      R"("rope_scaling": {"rope_type": "linear", "factor": 8.0}, "rope_parameters": {"full_attention": {"rope_type": "default"}})",
      "'rope_scaling' and 'rope_parameters' give different RoPE settings (rope_type linear / "
      "default");
  expect(llama, R"("rope_scaling": {"rope_type": "linear", "factor": 2.0, "rope_theta": 500000.0})",
         "'rope_scaling.rope_theta' 500000 and the RoPE base 10000 (the default) disagree");
  // Phi-3's top-level original_max_position_embeddings, which transformers 5 puts into the
  // scaling parameters over theirs.
  expect("Phi3ForCausalLM",
         R"("original_max_position_embeddings": 32, "rope_scaling": {"rope_type": "yarn",
         "factor": 4.0, "original_max_position_embeddings": 16})",
         "'rope_scaling.original_max_position_embeddings' 16 and "
         "'original_max_position_embeddings' 32 disagree");
  EXPECT_EQ(ErrorOf(TinyConfig("Phi3ForCausalLM",
                               R"("original_max_position_embeddings": 16, "rope_scaling":
      {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16})")),
            "");
  // A family without RoPE.
  EXPECT_NE(
      ErrorOf(R"({"model_type": "gpt2", "n_embd": 8, "n_layer": 1, "n_head": 2, "vocab_size": 10,
      "rope_scaling": {"rope_type": "linear", "factor": 2.0}})")
          .find("cfg/config.json: 'rope_scaling' is given, but gpt2 has no rotary embedding"),
      std::string::npos);
  // layer_types where the family reads none: it must agree with the family's own rule.
  expect(llama, R"("layer_types": ["full_attention", "sliding_attention"])",
         "layer_types[1] is \"sliding_attention\", but llama gives layer 1 full_attention (no "
         "sliding window)");
  expect("MistralForCausalLM",
         R"("sliding_window": 4, "layer_types": ["sliding_attention", "full_attention"])",
         "layer_types[1] is \"full_attention\", but mistral gives layer 1 sliding_attention "
         "(sliding_window 4 on every layer)");
  expect(llama, R"("layer_types": ["full_attention"])",
         "'layer_types' must list one attention kind for each of the 2 layers");
  EXPECT_EQ(ErrorOf(TinyConfig(llama, R"("layer_types": ["full_attention", "full_attention"])")),
            "");
  EXPECT_EQ(ErrorOf(TinyConfig("MistralForCausalLM", R"("sliding_window": 4,
      "layer_types": ["sliding_attention", "sliding_attention"])")),
            "");
}

// Numbers beyond what a field can hold say so, with the limit, instead of "must be a positive
// size, found 2147483647" or "must be an integer, found 1099511627776".
TEST(HfConfig, TooLargeNumbersSayTooLarge) {
  auto llama = [](const std::string& hidden) {
    return R"({"model_type": "llama", "hidden_size": )" + hidden + R"(, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 16, "vocab_size": 10})";
  };
  auto expect = [](const std::string& json, const std::string& message) {
    const std::string e = ErrorOf(json);
    EXPECT_NE(e.find(message), std::string::npos) << e;
  };
  expect(
      llama("2147483647"),
      "cfg/config.json: 'hidden_size' is too large: 2147483647 (the limit is 2^30 = 1073741824)");
  expect(llama("1073741825"),
         "'hidden_size' is too large: 1073741825 (the limit is 2^30 = 1073741824)");
  expect(llama("1099511627776"),
         "cfg/config.json: 'hidden_size' is too large: 1099511627776 (the limit is 2147483647)");
  expect(llama("18446744073709551615"),
         "'hidden_size' is too large: 18446744073709551615 (the limit is 2147483647)");
  expect(llama("-1099511627776"),
         "'hidden_size' is too small: -1099511627776 (the limit is -2147483648)");
  expect(llama("0"), "'hidden_size' must be a positive size, found 0");
  expect(llama("-3"), "'hidden_size' must be a positive size, found -3");
  expect(llama("1.5"), "'hidden_size' must be an integer, found 1.5");
  const std::string gpt2 =
      R"({"model_type": "gpt2", "n_embd": 8, "n_layer": 1, "n_head": 2, "vocab_size": 10, )";
  expect(gpt2 + R"("eos_token_id": 18446744073709551615})",
         "'eos_token_id' is too large: 18446744073709551615 (the limit is 2147483647)");
  expect(gpt2 + R"("eos_token_id": [1, 1099511627776]})",
         "'eos_token_id' holds 1099511627776, which is too large (the limit is 2147483647)");
  expect(
      R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 32, "moe_intermediate_size": 24,
      "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 61,
      "num_experts": 4, "num_experts_per_tok": 2, "mlp_only_layers": [1099511627776]})",
      "'mlp_only_layers' holds 1099511627776, which is too large (the limit is 2147483647)");
}

}  // namespace
}  // namespace ss
