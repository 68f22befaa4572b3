// Hugging Face transformers config.json <-> ModelConfig, for the families sinkscope runs.
//
// config.json is one JSON object. The family comes from "architectures"[0] (a class name such as
// "LlamaForCausalLM") or, when that list is absent, from "model_type". Field names and defaults
// follow each family's configuration_<family>.py in transformers; a field the file omits takes
// that class's default (notably tie_word_embeddings: True only for GPT-2, False for the others).
//
//   family      architectures[0]      notes
//   llama       LlamaForCausalLM      attention_bias, mlp_bias, head_dim, rope_scaling
//   mistral     MistralForCausalLM    Llama layout plus sliding_window (null: full attention)
//   qwen2       Qwen2ForCausalLM      q/k/v biases always on
//   qwen3       Qwen3ForCausalLM      per-head q/k RMSNorm; head_dim defaults to 128
//   gpt2        GPT2LMHeadModel       n_embd/n_layer/n_head/n_positions/n_inner, LayerNorm,
//                                     learned positions, biases everywhere, gelu_new
//   gpt_neox    GPTNeoXForCausalLM    rotary_pct (partial RoPE), rotary_emb_base or rope_theta,
//                                     use_parallel_residual, LayerNorm, ungated MLP
//   olmo2       Olmo2ForCausalLM      q/k RMSNorm over the whole projection, norms after the
//                                     attention and MLP outputs instead of before
//   qwen3_moe   Qwen3MoeForCausalLM   num_experts, num_experts_per_tok, moe_intermediate_size,
//                                     norm_topk_prob; per-head q/k norm
//   olmoe       OlmoeForCausalLM      num_experts, num_experts_per_tok, intermediate_size (per
//                                     expert), norm_topk_prob; full q/k norm
//   mixtral     MixtralForCausalLM    num_local_experts, num_experts_per_tok; always renormalises
//                                     the top-k router weights
//
// ModelConfig::arch is the family name in the first column. All these families rotate with
// "rotate_half" pairs (RopeKind::kHalf) except GPT-2, which has no RoPE.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"

namespace ss {

// Parses config.json text; `source` names the file in errors. Throws ss::Error naming the file and
// the field for malformed JSON, an unknown architecture / model_type (listing the supported ones),
// a missing required field, a field of the wrong type, or a setting sinkscope cannot run
// (e.g. rope_scaling type "yarn").
ModelConfig ParseHfConfig(std::string_view json_text, const std::string& source);
// Reads `path`: a config.json file, or a directory containing one.
ModelConfig ReadHfConfig(const std::string& path);

// The config.json text for `config` (a family from the table above). Throws ss::Error if the
// config cannot be expressed in that family's config.json, naming the fields that would not read
// back the same (say, a "gpt2" config with RMSNorm), so ParseHfConfig(HfConfigJson(c)) == c
// always holds for what it returns.
std::string HfConfigJson(const ModelConfig& config);
// Writes HfConfigJson(config) to `path` atomically.
void WriteHfConfig(const std::string& path, const ModelConfig& config);

// The architectures[0] class names and model_type names this file understands.
std::vector<std::string> SupportedHfArchitectures();
std::vector<std::string> SupportedHfModelTypes();

}  // namespace ss
