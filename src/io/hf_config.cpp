#include "io/hf_config.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/file_util.h"
#include "io/json_util.h"

namespace ss {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

enum class Family { kLlama, kMistral, kQwen2, kQwen3, kGpt2, kGptNeox, kOlmo2, kQwen3Moe, kOlmoe,
                    kMixtral, kGptOss, kGemma2, kGemma3 };

// Per-family facts from transformers' configuration_<family>.py defaults.
struct FamilyInfo {
  Family family;
  const char* model_type;    // also ModelConfig::arch
  const char* architecture;  // architectures[0]
  bool tie_default;          // tie_word_embeddings default
  float norm_eps_default;
  float rope_theta_default;
  int max_pos_default;
  int bos_default;  // -1: None
  int eos_default;
};

constexpr FamilyInfo kFamilies[] = {
    {Family::kLlama, "llama", "LlamaForCausalLM", false, 1e-6f, 10000.0f, 2048, 1, 2},
    {Family::kMistral, "mistral", "MistralForCausalLM", false, 1e-6f, 10000.0f, 4096 * 32, 1, 2},
    {Family::kQwen2, "qwen2", "Qwen2ForCausalLM", false, 1e-6f, 10000.0f, 32768, -1, -1},
    {Family::kQwen3, "qwen3", "Qwen3ForCausalLM", false, 1e-6f, 10000.0f, 32768, -1, -1},
    {Family::kGpt2, "gpt2", "GPT2LMHeadModel", true, 1e-5f, 0.0f, 1024, 50256, 50256},
    {Family::kGptNeox, "gpt_neox", "GPTNeoXForCausalLM", false, 1e-5f, 10000.0f, 2048, 0, 2},
    {Family::kOlmo2, "olmo2", "Olmo2ForCausalLM", false, 1e-5f, 10000.0f, 2048, -1, 50279},
    {Family::kQwen3Moe, "qwen3_moe", "Qwen3MoeForCausalLM", false, 1e-6f, 10000.0f, 32768, -1, -1},
    {Family::kOlmoe, "olmoe", "OlmoeForCausalLM", false, 1e-5f, 10000.0f, 4096, -1, 50279},
    {Family::kMixtral, "mixtral", "MixtralForCausalLM", false, 1e-5f, 1e6f, 4096 * 32, 1, 2},
    {Family::kGptOss, "gpt_oss", "GptOssForCausalLM", false, 1e-5f, 150000.0f, 131072, -1, -1},
    {Family::kGemma2, "gemma2", "Gemma2ForCausalLM", true, 1e-6f, 10000.0f, 8192, 2, 1},
    {Family::kGemma3, "gemma3_text", "Gemma3ForCausalLM", true, 1e-6f, 1e6f, 131072, 2, 1},
};

std::string SupportedList() {
  std::vector<std::string> names;
  for (const auto& f : kFamilies) names.push_back(fmt::format("{} ({})", f.architecture, f.model_type));
  return fmt::format("{}", fmt::join(names, ", "));
}

const FamilyInfo& FamilyOf(const json& j, const std::string& source) {
  if (auto it = j.find("architectures"); it != j.end() && !it->is_null()) {
    if (!it->is_array() || it->empty() || !(*it)[0].is_string())
      Fail("{}: 'architectures' must be a non-empty list of class names, found {}", source,
           it->dump());
    const std::string& name = (*it)[0].get_ref<const std::string&>();
    for (const auto& f : kFamilies)
      if (name == f.architecture) return f;
    Fail("{}: unsupported architecture '{}'; supported: {}", source, name, SupportedList());
  }
  if (auto it = j.find("model_type"); it != j.end() && it->is_string()) {
    const std::string& name = it->get_ref<const std::string&>();
    for (const auto& f : kFamilies)
      if (name == f.model_type) return f;
    Fail("{}: unsupported model_type '{}'; supported: {}", source, name, SupportedList());
  }
  Fail("{}: neither 'architectures' nor 'model_type' is given; supported: {}", source,
       SupportedList());
}

// Typed access to config.json fields with error messages naming the file and the field.
// A JSON null counts as absent, as transformers' None does.
class Fields {
 public:
  Fields(const json& j, const std::string& source) : j_(j), source_(source) {}

  const json* Find(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  bool Has(const char* key) const { return Find(key) != nullptr; }

  int Int(const char* key, std::optional<int> fallback = std::nullopt) const {
    const json* v = Find(key);
    if (!v) {
      if (fallback) return *fallback;
      Fail("{}: missing required field '{}'", source_, key);
    }
    // Unsigned values above INT64_MAX would wrap in get<int64_t>(); reject them first.
    if (!v->is_number_integer() || (v->is_number_unsigned() && v->get<uint64_t>() > INT32_MAX) ||
        v->get<int64_t>() < INT32_MIN || v->get<int64_t>() > INT32_MAX)
      Fail("{}: field '{}' must be an integer, found {}", source_, key, v->dump());
    return v->get<int>();
  }
  int PositiveInt(const char* key, std::optional<int> fallback = std::nullopt) const {
    int v = Int(key, fallback);
    if (v <= 0) Fail("{}: field '{}' must be positive, found {}", source_, key, v);
    return v;
  }
  float Float(const char* key, std::optional<float> fallback = std::nullopt) const {
    const json* v = Find(key);
    if (!v) {
      if (fallback) return *fallback;
      Fail("{}: missing required field '{}'", source_, key);
    }
    if (!v->is_number()) Fail("{}: field '{}' must be a number, found {}", source_, key, v->dump());
    return static_cast<float>(v->get<double>());
  }
  bool Bool(const char* key, bool fallback) const {
    const json* v = Find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) Fail("{}: field '{}' must be true or false, found {}", source_, key, v->dump());
    return v->get<bool>();
  }
  std::string String(const char* key, const std::string& fallback) const {
    const json* v = Find(key);
    if (!v) return fallback;
    if (!v->is_string()) Fail("{}: field '{}' must be a string, found {}", source_, key, v->dump());
    return v->get<std::string>();
  }
  // A token id: an integer, null (-1), or absent (the family default).
  int TokenId(const char* key, int fallback) const {
    auto it = j_.find(key);
    if (it == j_.end()) return fallback;
    if (it->is_null()) return -1;
    return Int(key);
  }
  const std::string& source() const { return source_; }

 private:
  const json& j_;
  const std::string& source_;
};

ActKind ParseAct(const Fields& f, const char* key, const std::string& fallback) {
  std::string name = f.String(key, fallback);
  if (name == "silu" || name == "swish") return ActKind::kSilu;
  if (name == "gelu") return ActKind::kGelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast")
    return ActKind::kGeluTanh;
  if (name == "relu") return ActKind::kRelu;
  Fail("{}: field '{}' is '{}'; supported: silu, gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, relu",
       f.source(), key, name);
}

const char* ActName(ActKind act, Family family) {
  switch (act) {
    case ActKind::kSilu: return "silu";
    case ActKind::kGelu: return "gelu";
    case ActKind::kGeluTanh: return family == Family::kGpt2 ? "gelu_new" : "gelu_pytorch_tanh";
    case ActKind::kRelu: return "relu";
  }
  SS_ASSERT(false);
  return "";
}

// rope_scaling: null, or {"rope_type" (or older "type"): "linear" | "llama3" | "default", ...}.
// transformers >= 4.5x may instead put rope_theta and these keys in "rope_parameters".
void ParseRopeScaling(const json& j, const std::string& source, ModelConfig* c) {
  const json* scaling = nullptr;
  std::string key = "rope_scaling";
  if (auto it = j.find("rope_scaling"); it != j.end() && !it->is_null()) scaling = &*it;
  if (auto it = j.find("rope_parameters"); !scaling && it != j.end() && !it->is_null()) {
    scaling = &*it;
    key = "rope_parameters";
  }
  if (!scaling) return;
  if (!scaling->is_object())
    Fail("{}: '{}' must be an object or null, found {}", source, key, scaling->dump());
  std::string where = fmt::format("{} ({})", source, key);
  Fields s(*scaling, where);
  if (key == "rope_parameters") c->rope_theta = s.Float("rope_theta", c->rope_theta);
  std::string type = s.String("rope_type", s.String("type", "default"));
  if (type == "default") return;
  if (type == "linear") {
    c->rope_scaling = RopeScalingKind::kLinear;
    c->rope_scaling_factor = s.Float("factor");
  } else if (type == "llama3") {
    c->rope_scaling = RopeScalingKind::kLlama3;
    c->rope_scaling_factor = s.Float("factor");
    c->rope_low_freq_factor = s.Float("low_freq_factor");
    c->rope_high_freq_factor = s.Float("high_freq_factor");
    c->rope_original_max_seq_len = s.PositiveInt("original_max_position_embeddings");
  } else if (type == "yarn") {
    // transformers' _compute_yarn_parameters. The attention factor is derived from the factor;
    // the keys that override it (DeepSeek's mscale, an explicit attention_factor) are not
    // implemented and are refused rather than ignored.
    for (const char* k : {"attention_factor", "mscale", "mscale_all_dim"})
      if (s.Has(k)) Fail("{}: {}.{} is not supported (YaRN with the default attention factor only)", source, key, k);
    c->rope_scaling = RopeScalingKind::kYarn;
    c->rope_scaling_factor = s.Float("factor");
    c->rope_yarn_beta_fast = s.Float("beta_fast", 32.0f);
    c->rope_yarn_beta_slow = s.Float("beta_slow", 1.0f);
    c->rope_yarn_truncate = s.Bool("truncate", true);
    c->rope_original_max_seq_len = s.PositiveInt("original_max_position_embeddings", c->max_seq_len);
    // Newer transformers take the factor as max_position_embeddings / original when the original
    // length is given, older ones the "factor" key: a config where they differ means different
    // numbers in different versions.
    if (s.Has("original_max_position_embeddings") &&
        std::abs(static_cast<double>(c->max_seq_len) / c->rope_original_max_seq_len -
                 c->rope_scaling_factor) > 1e-6 * c->rope_scaling_factor)
      Fail("{}: {}.factor {} differs from max_position_embeddings / original_max_position_embeddings "
           "= {} / {}; transformers versions disagree on which applies", source, key,
           c->rope_scaling_factor, c->max_seq_len, c->rope_original_max_seq_len);
  } else {
    Fail("{}: {} type '{}' is not supported; supported: default, linear, llama3, yarn", source, key,
         type);
  }
  if (!(c->rope_scaling_factor > 0))
    Fail("{}: {} factor must be positive, found {}", source, key, c->rope_scaling_factor);
}

// A partial rotary fraction, where a config gives one: top-level "partial_rotary_factor" (Phi,
// StableLM style) or inside "rope_parameters" (transformers >= 5 writes GPT-NeoX's rotary_pct
// there). Returns the key that held it ("" if none) and its value (0 if none).
std::pair<std::string, float> PartialRotaryFactor(const json& j, const Fields& f,
                                                  const std::string& source) {
  if (auto it = j.find("rope_parameters"); it != j.end() && it->is_object() &&
                                           it->contains("partial_rotary_factor"))
    return {"rope_parameters.partial_rotary_factor",
            Fields(*it, source + " (rope_parameters)").Float("partial_rotary_factor")};
  if (f.Has("partial_rotary_factor"))
    return {"partial_rotary_factor", f.Float("partial_rotary_factor")};
  return {"", 0.0f};
}

// GPT-NeoX's rotary fraction: "rotary_pct" (transformers < 5), or "partial_rotary_factor" inside
// "rope_parameters" (transformers >= 5), default 0.25 (GPTNeoXConfig). Both present and different
// is refused: one of them would be ignored.
std::pair<std::string, float> NeoxRotaryFraction(const json& j, const Fields& f,
                                                 const std::string& source) {
  const auto [key, factor] = PartialRotaryFactor(j, f, source);
  if (f.Has("rotary_pct")) {
    const float pct = f.Float("rotary_pct");
    if (!key.empty() && factor != pct)
      Fail("{}: rotary_pct {} and {} {} disagree; give one", source, pct, key, factor);
    return {"rotary_pct", pct};
  }
  if (!key.empty()) return {key, factor};
  return {"rotary_pct", 0.25f};
}

// The families that rotate whole heads refuse a partial rotary fraction other than 1 by name,
// rather than rotating every dimension without a word.
void RefusePartialRotary(const json& j, const std::string& source, const std::string& arch) {
  const auto [key, factor] = PartialRotaryFactor(j, Fields(j, source), source);
  if (!key.empty() && factor != 1.0f)
    Fail("{}: {} {} (rotating part of each head) is not supported for {}", source, key, factor,
         arch);
}

void ParseEos(const json& j, const Fields& f, int fallback, ModelConfig* c) {
  auto it = j.find("eos_token_id");
  if (it != j.end() && it->is_array()) {
    if (it->empty()) Fail("{}: field 'eos_token_id' is an empty list", f.source());
    for (const json& id : *it) {
      if (!id.is_number_integer())
        Fail("{}: field 'eos_token_id' must hold integers, found {}", f.source(), id.dump());
      c->eos_ids.push_back(id.get<int>());
    }
    c->eos_id = c->eos_ids[0];
    return;
  }
  c->eos_id = f.TokenId("eos_token_id", fallback);
}

// Qwen2/Qwen3 carry sliding_window but apply it only when use_sliding_window is true, and then
// only to layers from max_window_layers on; sinkscope has no per-layer windows.
void RejectQwenSlidingWindow(const Fields& f) {
  if (f.Bool("use_sliding_window", false))
    Fail("{}: use_sliding_window=true (per-layer sliding windows) is not supported", f.source());
}

// Per-layer attention kinds from "layer_types" ("sliding_attention" / "full_attention", one per
// layer); absent: `fallback(layer)` gives each layer's kind.
template <typename Fallback>
std::vector<LayerAttention> ParseLayerTypes(const json& j, const Fields& f, int n_layers,
                                            Fallback fallback) {
  std::vector<LayerAttention> kinds(n_layers);
  const json* types = f.Find("layer_types");
  if (!types) {
    for (int l = 0; l < n_layers; ++l) kinds[l] = fallback(l);
    return kinds;
  }
  if (!types->is_array() || static_cast<int>(types->size()) != n_layers)
    Fail("{}: 'layer_types' must list one attention kind for each of the {} layers, found {}",
         f.source(), n_layers, types->dump());
  for (int l = 0; l < n_layers; ++l) {
    const json& t = (*types)[l];
    if (t == "sliding_attention") {
      kinds[l] = LayerAttention::kSliding;
    } else if (t == "full_attention") {
      kinds[l] = LayerAttention::kFull;
    } else {
      Fail("{}: layer_types[{}] is {}; supported: \"sliding_attention\", \"full_attention\"",
           f.source(), l, t.dump());
    }
  }
  (void)j;
  return kinds;
}

// The Llama-style core shared by every family except GPT-2 and GPT-NeoX.
void ParseLlamaCore(const Fields& f, const FamilyInfo& info, ModelConfig* c) {
  c->dim = f.PositiveInt("hidden_size");
  c->n_layers = f.PositiveInt("num_hidden_layers");
  c->n_heads = f.PositiveInt("num_attention_heads");
  c->n_kv_heads = f.PositiveInt("num_key_value_heads", c->n_heads);
  int head_dim_default = c->dim / c->n_heads;
  if (info.family == Family::kQwen3 || info.family == Family::kQwen3Moe) head_dim_default = 128;
  if (info.family == Family::kGptOss) head_dim_default = 64;
  if (info.family == Family::kGemma2 || info.family == Family::kGemma3) head_dim_default = 256;
  c->head_dim = f.PositiveInt("head_dim", head_dim_default);
  c->vocab_size = f.PositiveInt("vocab_size");
  c->max_seq_len = f.PositiveInt("max_position_embeddings", info.max_pos_default);
  c->norm_eps = f.Float("rms_norm_eps", info.norm_eps_default);
  c->norm = NormKind::kRms;
  c->act = ParseAct(f, "hidden_act", "silu");
  c->gated_mlp = true;
  c->rope = RopeKind::kHalf;
  c->rope_theta = f.Float("rope_theta", info.rope_theta_default);
  // sinkscope's extension for models its trainer made with --set attention=sink-logit: a learned
  // sink logit per head (self_attn.sinks, as gpt-oss stores it) on a Llama / Qwen layout.
  c->attn_sinks = f.Bool("sinkscope_attn_sinks", false);
  if (c->n_heads % c->n_kv_heads != 0)
    Fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", f.source(),
         c->n_heads, c->n_kv_heads);
}

// Sets qkv_bias and attn_out_bias from "attention_bias", which covers all four projections.
void ParseAttentionBias(const Fields& f, bool fallback, ModelConfig* c) {
  c->qkv_bias = c->attn_out_bias = f.Bool("attention_bias", fallback);
}

// The config.json key of each ModelConfig field this family sets, for ValidateConfig's messages.
ConfigKeys HfKeys(const FamilyInfo& info, const json& j) {
  std::string scaling = j.contains("rope_scaling") && !j["rope_scaling"].is_null()
                            ? "rope_scaling"
                            : "rope_parameters";
  ConfigKeys k = {{"dim", "hidden_size"},
                  {"hidden_dim", "intermediate_size"},
                  {"n_layers", "num_hidden_layers"},
                  {"n_heads", "num_attention_heads"},
                  {"n_kv_heads", "num_key_value_heads"},
                  {"vocab_size", "vocab_size"},
                  {"max_seq_len", "max_position_embeddings"},
                  {"norm_eps", "rms_norm_eps"},
                  {"rope_theta", "rope_theta"},
                  {"rope_scaling_factor", scaling + ".factor"},
                  {"rope_low_freq_factor", scaling + ".low_freq_factor"},
                  {"rope_high_freq_factor", scaling + ".high_freq_factor"},
                  {"rope_original_max_seq_len", scaling + ".original_max_position_embeddings"},
                  {"attn_logit_softcap", "attn_logit_softcapping"},
                  {"final_logit_softcap", "final_logit_softcapping"},
                  {"n_experts", "num_experts"},
                  {"n_experts_per_tok", "num_experts_per_tok"},
                  {"dense_hidden_dim", "intermediate_size"},
                  {"shared_expert_hidden_dim", "shared_expert_intermediate_size"},
                  {"bos_id", "bos_token_id"},
                  {"eos_id", "eos_token_id"}};
  if (j.contains("rope_parameters") && !j.contains("rope_theta"))
    k["rope_theta"] = "rope_parameters.rope_theta";
  switch (info.family) {
    case Family::kMixtral:
      k["n_experts"] = "num_local_experts";
      break;
    case Family::kQwen3Moe:
      k["hidden_dim"] = "moe_intermediate_size";
      break;
    case Family::kGemma2:
    case Family::kGemma3:
      k["layer_attention"] = "layer_types";
      k["rope_local_theta"] = "rope_local_base_freq";
      break;
    case Family::kGptOss:
      k["n_experts"] = "num_local_experts";
      k["layer_attention"] = "layer_types";
      k["swiglu_limit"] = "swiglu_limit";
      k["rope_yarn_beta_fast"] = scaling + ".beta_fast";
      k["rope_yarn_beta_slow"] = scaling + ".beta_slow";
      break;
    case Family::kGpt2:
      k["dim"] = "n_embd";
      k["hidden_dim"] = "n_inner";
      k["n_layers"] = "n_layer";
      k["n_heads"] = k["n_kv_heads"] = "n_head";
      k["max_seq_len"] = "n_positions";
      k["norm_eps"] = "layer_norm_epsilon";
      break;
    case Family::kGptNeox:
      k["n_kv_heads"] = "num_attention_heads";
      k["norm_eps"] = "layer_norm_eps";
      k["rotary_dim"] = !j.contains("rotary_pct") && j.contains("rope_parameters") &&
                                j["rope_parameters"].is_object() &&
                                j["rope_parameters"].contains("partial_rotary_factor")
                            ? "rope_parameters.partial_rotary_factor"
                            : "rotary_pct";
      if (!j.contains("rope_theta") && j.contains("rotary_emb_base"))
        k["rope_theta"] = "rotary_emb_base";
      break;
    default:
      break;
  }
  return k;
}

}  // namespace

std::vector<std::string> SupportedHfArchitectures() {
  std::vector<std::string> out;
  for (const auto& f : kFamilies) out.push_back(f.architecture);
  return out;
}

std::vector<std::string> SupportedHfModelTypes() {
  std::vector<std::string> out;
  for (const auto& f : kFamilies) out.push_back(f.model_type);
  return out;
}

ModelConfig ParseHfConfig(std::string_view json_text, const std::string& source) {
  json j = ParseJsonStrict(json_text, source, "config.json");
  if (!j.is_object()) Fail("{}: expected a JSON object, found {}", source, j.type_name());
  const FamilyInfo& info = FamilyOf(j, source);
  Fields f(j, source);
  ModelConfig c;
  c.arch = info.model_type;
  c.rotary_dim = 0;

  switch (info.family) {
    case Family::kLlama:
      ParseLlamaCore(f, info, &c);
      c.hidden_dim = f.PositiveInt("intermediate_size");
      ParseAttentionBias(f, false, &c);
      c.mlp_bias = f.Bool("mlp_bias", false);
      break;
    case Family::kMistral:
    case Family::kMixtral:
      ParseLlamaCore(f, info, &c);
      c.hidden_dim = f.PositiveInt("intermediate_size");
      c.sliding_window = f.Has("sliding_window") ? f.PositiveInt("sliding_window") : 0;
      if (info.family == Family::kMixtral) {
        c.n_experts = f.PositiveInt("num_local_experts", 8);
        c.n_experts_per_tok = f.PositiveInt("num_experts_per_tok", 2);
        c.norm_topk_prob = true;  // Mixtral's router: softmax over the top-k logits only
      }
      break;
    case Family::kQwen2:
      ParseLlamaCore(f, info, &c);
      c.hidden_dim = f.PositiveInt("intermediate_size");
      c.qkv_bias = true;  // Qwen2Attention: q/k/v_proj bias=True, o_proj bias=False, no field
      RejectQwenSlidingWindow(f);
      break;
    case Family::kQwen3:
      ParseLlamaCore(f, info, &c);
      c.hidden_dim = f.PositiveInt("intermediate_size");
      ParseAttentionBias(f, false, &c);
      c.qk_norm = QkNormKind::kPerHead;
      RejectQwenSlidingWindow(f);
      break;
    case Family::kQwen3Moe: {
      ParseLlamaCore(f, info, &c);
      ParseAttentionBias(f, false, &c);
      c.qk_norm = QkNormKind::kPerHead;
      RejectQwenSlidingWindow(f);
      c.n_experts = f.PositiveInt("num_experts");
      c.n_experts_per_tok = f.PositiveInt("num_experts_per_tok");
      c.hidden_dim = f.PositiveInt("moe_intermediate_size");
      c.norm_topk_prob = f.Bool("norm_topk_prob", false);
      c.dense_hidden_dim = f.Has("intermediate_size") ? f.PositiveInt("intermediate_size") : 0;
      if (f.Int("decoder_sparse_step", 1) != 1)
        Fail("{}: decoder_sparse_step {} is not supported (only every layer MoE, 1)", source,
             f.Int("decoder_sparse_step"));
      if (const json* dense = f.Find("mlp_only_layers"); dense && !dense->empty())
        Fail("{}: mlp_only_layers {} is not supported (every layer must be MoE)", source,
             dense->dump());
      if (f.Has("shared_expert_intermediate_size")) {
        c.shared_expert_hidden_dim = f.PositiveInt("shared_expert_intermediate_size");
        c.n_shared_experts = 1;
      }
      break;
    }
    case Family::kOlmo2:
      ParseLlamaCore(f, info, &c);
      c.hidden_dim = f.PositiveInt("intermediate_size");
      ParseAttentionBias(f, false, &c);
      c.qk_norm = QkNormKind::kFull;
      c.post_norms = true;
      break;
    case Family::kOlmoe:
      ParseLlamaCore(f, info, &c);
      c.hidden_dim = f.PositiveInt("intermediate_size");
      ParseAttentionBias(f, false, &c);
      c.qk_norm = QkNormKind::kFull;
      c.n_experts = f.PositiveInt("num_experts", 64);
      c.n_experts_per_tok = f.PositiveInt("num_experts_per_tok", 8);
      c.norm_topk_prob = f.Bool("norm_topk_prob", false);
      if (f.Has("clip_qkv"))
        Fail("{}: clip_qkv={} is not supported", source, f.Find("clip_qkv")->dump());
      break;
    case Family::kGptOss: {
      ParseLlamaCore(f, info, &c);
      c.hidden_dim = f.PositiveInt("intermediate_size");
      ParseAttentionBias(f, true, &c);
      c.n_experts = f.PositiveInt("num_local_experts", 128);
      c.n_experts_per_tok = f.PositiveInt("num_experts_per_tok", f.PositiveInt("experts_per_token", 4));
      c.norm_topk_prob = true;  // GptOssTopKRouter: softmax over the k chosen logits
      c.moe_bias = true;
      c.attn_sinks = true;
      c.swiglu_limit = f.Float("swiglu_limit", 7.0f);
      if (!(c.swiglu_limit > 0)) Fail("{}: swiglu_limit must be positive, found {}", source, c.swiglu_limit);
      c.sliding_window = f.PositiveInt("sliding_window", 128);
      if (c.sliding_window > c.max_seq_len)
        Fail("{}: sliding_window {} is beyond the context (max_position_embeddings {})", source,
             c.sliding_window, c.max_seq_len);
      // The published checkpoints keep the experts as MXFP4 blocks (*_blocks, *_scales).
      if (const json* q = f.Find("quantization_config"))
        Fail("{}: quantization_config {} is not supported: sinkscope reads gpt-oss with BF16, F16 "
             "or F32 experts (dequantise the MXFP4 checkpoint first, e.g. transformers' "
             "Mxfp4Config(dequantize=True) then save_pretrained)", source, q->dump());
      // GptOssConfig's default: layer i slides when (i + 1) % 2 is 1, i.e. even layers.
      c.layer_attention = ParseLayerTypes(j, f, c.n_layers, [](int l) {
        return l % 2 == 0 ? LayerAttention::kSliding : LayerAttention::kFull;
      });
      break;
    }
    case Family::kGemma2:
    case Family::kGemma3: {
      const bool gemma3 = info.family == Family::kGemma3;
      ParseLlamaCore(f, info, &c);
      c.hidden_dim = f.PositiveInt("intermediate_size");
      ParseAttentionBias(f, false, &c);
      if (c.qkv_bias) Fail("{}: attention_bias = true is not supported for {}", source, info.model_type);
      // Gemma's MLP reads hidden_activation (hidden_act is the older name).
      c.act = ParseAct(f, f.Has("hidden_activation") ? "hidden_activation" : "hidden_act",
                       "gelu_pytorch_tanh");
      c.norm_weight_offset = 1.0f;
      c.embed_scale = std::sqrt(static_cast<float>(c.dim));
      c.query_pre_attn_scalar = f.Float("query_pre_attn_scalar", 256.0f);
      if (!(c.query_pre_attn_scalar > 0))
        Fail("{}: query_pre_attn_scalar must be positive, found {}", source, c.query_pre_attn_scalar);
      c.sliding_window = f.PositiveInt("sliding_window", 4096);
      if (c.sliding_window > c.max_seq_len)
        Fail("{}: sliding_window {} is beyond the context (max_position_embeddings {})", source,
             c.sliding_window, c.max_seq_len);
      if (gemma3) {
        c.qk_norm = QkNormKind::kPerHead;
        c.rope_local_theta = f.Float("rope_local_base_freq", 10000.0f);
        // Gemma3TextConfig: layer i slides unless (i + 1) is a multiple of sliding_window_pattern.
        const int pattern = f.PositiveInt("sliding_window_pattern", 6);
        c.layer_attention = ParseLayerTypes(j, f, c.n_layers, [pattern](int l) {
          return (l + 1) % pattern != 0 ? LayerAttention::kSliding : LayerAttention::kFull;
        });
      } else {
        // Gemma2: layer i slides when i is even (Gemma2DecoderLayer's is_sliding).
        c.layer_attention = ParseLayerTypes(j, f, c.n_layers, [](int l) {
          return l % 2 == 0 ? LayerAttention::kSliding : LayerAttention::kFull;
        });
      }
      // Soft-caps: Gemma 2's defaults are 50 and 30; Gemma 3 has none. null turns them off.
      const float attn_cap = gemma3 ? 0.0f : 50.0f, final_cap = gemma3 ? 0.0f : 30.0f;
      c.attn_logit_softcap = j.contains("attn_logit_softcapping") ? f.Float("attn_logit_softcapping", 0.0f) : attn_cap;
      c.final_logit_softcap = j.contains("final_logit_softcapping") ? f.Float("final_logit_softcapping", 0.0f) : final_cap;
      for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"})
        if (f.Has(key) && !(f.Float(key) > 0))
          Fail("{}: {} must be positive (or null for none), found {}", source, key, f.Float(key));
      break;
    }
    case Family::kGpt2: {
      c.dim = f.PositiveInt("n_embd");
      c.n_layers = f.PositiveInt("n_layer");
      c.n_heads = f.PositiveInt("n_head");
      c.n_kv_heads = c.n_heads;
      if (c.dim % c.n_heads != 0)
        Fail("{}: n_embd {} is not a multiple of n_head {}", source, c.dim, c.n_heads);
      c.head_dim = c.dim / c.n_heads;
      c.hidden_dim = f.PositiveInt("n_inner", 4 * c.dim);  // None means 4 * n_embd
      c.vocab_size = f.PositiveInt("vocab_size");
      c.max_seq_len = f.PositiveInt("n_positions", info.max_pos_default);
      c.norm_eps = f.Float("layer_norm_epsilon", info.norm_eps_default);
      c.norm = NormKind::kLayer;
      c.act = ParseAct(f, "activation_function", "gelu_new");
      c.gated_mlp = false;
      c.rope = RopeKind::kNone;
      c.rope_theta = 0.0f;
      c.learned_pos = true;
      c.qkv_bias = c.attn_out_bias = c.mlp_bias = true;  // Conv1D layers all carry biases
      // GPT2Attention: scores / sqrt(head_dim) unless scale_attn_weights is false, and / (l + 1)
      // in block l with scale_attn_by_inverse_layer_idx (reorder_and_upcast_attn changes only
      // the order and precision of the same product).
      c.attn_scale_sqrt_dim = f.Bool("scale_attn_weights", true);
      c.attn_scale_inverse_layer = f.Bool("scale_attn_by_inverse_layer_idx", false);
      break;
    }
    case Family::kGptNeox: {
      c.dim = f.PositiveInt("hidden_size");
      c.n_layers = f.PositiveInt("num_hidden_layers");
      c.n_heads = f.PositiveInt("num_attention_heads");
      c.n_kv_heads = c.n_heads;
      if (c.dim % c.n_heads != 0)
        Fail("{}: hidden_size {} is not a multiple of num_attention_heads {}", source, c.dim,
             c.n_heads);
      c.head_dim = c.dim / c.n_heads;
      c.hidden_dim = f.PositiveInt("intermediate_size");
      c.vocab_size = f.PositiveInt("vocab_size");
      c.max_seq_len = f.PositiveInt("max_position_embeddings", info.max_pos_default);
      c.norm_eps = f.Float("layer_norm_eps", info.norm_eps_default);
      c.norm = NormKind::kLayer;
      c.act = ParseAct(f, "hidden_act", "gelu");
      c.gated_mlp = false;
      c.rope = RopeKind::kHalf;
      // Older configs name the base rotary_emb_base, newer ones rope_theta.
      c.rope_theta = f.Float("rope_theta", f.Float("rotary_emb_base", info.rope_theta_default));
      const auto [pct_key, rotary_pct] = NeoxRotaryFraction(j, f, source);
      if (!(rotary_pct > 0 && rotary_pct <= 1))
        Fail("{}: {} must be in (0, 1], found {}", source, pct_key, rotary_pct);
      // GPTNeoXAttention: rotary_ndims = int(head_size * rotary_pct); the epsilon keeps a pct
      // written as rotary_dim / head_dim from rounding down.
      c.rotary_dim = static_cast<int>(std::floor(c.head_dim * static_cast<double>(rotary_pct) + 1e-4));
      if (c.rotary_dim % 2 != 0)
        Fail("{}: {} {} gives an odd rotary dimension {} of head size {}", source, pct_key,
             rotary_pct, c.rotary_dim, c.head_dim);
      if (c.rotary_dim == c.head_dim) c.rotary_dim = 0;
      c.parallel_residual = f.Bool("use_parallel_residual", true);
      ParseAttentionBias(f, true, &c);
      c.mlp_bias = true;
      break;
    }
  }

  if (c.rope != RopeKind::kNone) ParseRopeScaling(j, source, &c);
  if (info.family != Family::kGptNeox) RefusePartialRotary(j, source, c.arch);
  c.tied_embeddings = f.Bool("tie_word_embeddings", info.tie_default);
  c.bos_id = f.TokenId("bos_token_id", info.bos_default);
  ParseEos(j, f, info.eos_default, &c);
  c.torch_dtype = f.String("torch_dtype", f.String("dtype", ""));
  // Attention soft-capping is Gemma 2's: transformers' other families ignore the key, and applying
  // it would compute another model.
  const bool gemma = info.family == Family::kGemma2 || info.family == Family::kGemma3;
  if (!gemma && f.Has("attn_logit_softcapping"))
    Fail("{}: attn_logit_softcapping is not part of {} ({} ignores it); remove the key", source,
         info.model_type, info.architecture);
  if (!gemma) c.final_logit_softcap = f.Float("final_logit_softcapping", 0.0f);
  if (c.n_experts > 0 && c.n_experts_per_tok > c.n_experts)
    Fail("{}: num_experts_per_tok {} exceeds the number of experts {}", source,
         c.n_experts_per_tok, c.n_experts);
  ValidateConfig(c, source, HfKeys(info, j));
  return c;
}

ModelConfig ReadHfConfig(const std::string& path) {
  std::string file = IsDirectory(path) ? (std::filesystem::path(path) / "config.json").string()
                                       : path;
  return ParseHfConfig(ReadFile(file), file);
}

// ---------------------------------------------------------------------------------------------
// Writer

namespace {

const FamilyInfo& FamilyOfArch(const std::string& arch) {
  for (const auto& f : kFamilies)
    if (arch == f.model_type) return f;
  std::vector<std::string> names = SupportedHfModelTypes();
  Fail("ModelConfig arch '{}' has no config.json family; supported: {}", arch,
       fmt::join(names, ", "));
}

// A float as the shortest decimal that reads back as the same float ("1e-05", not the double
// 9.999999747378752e-06 that converting the float would print).
ordered_json FloatJson(float v) { return std::strtod(fmt::format("{}", v).c_str(), nullptr); }

ordered_json TokenJson(int id) { return id < 0 ? ordered_json(nullptr) : ordered_json(id); }

// The fields that differ between two configs, for the writer's error message.
std::vector<std::string> DiffFields(const ModelConfig& a, const ModelConfig& b) {
  std::vector<std::string> out;
#define SS_DIFF(field) \
  if (!(a.field == b.field)) out.push_back(#field);
  SS_DIFF(arch) SS_DIFF(dim) SS_DIFF(hidden_dim) SS_DIFF(n_layers) SS_DIFF(n_heads)
  SS_DIFF(n_kv_heads) SS_DIFF(head_dim) SS_DIFF(vocab_size) SS_DIFF(max_seq_len) SS_DIFF(norm_eps)
  SS_DIFF(norm) SS_DIFF(act) SS_DIFF(gated_mlp) SS_DIFF(rope) SS_DIFF(rope_theta)
  SS_DIFF(rotary_dim) SS_DIFF(tied_embeddings) SS_DIFF(bos_id) SS_DIFF(eos_id) SS_DIFF(qkv_bias)
  SS_DIFF(attn_out_bias) SS_DIFF(mlp_bias) SS_DIFF(learned_pos) SS_DIFF(qk_norm)
  SS_DIFF(parallel_residual) SS_DIFF(post_norms) SS_DIFF(sliding_window) SS_DIFF(n_experts)
  SS_DIFF(n_experts_per_tok) SS_DIFF(norm_topk_prob) SS_DIFF(n_shared_experts)
  SS_DIFF(shared_expert_hidden_dim) SS_DIFF(dense_hidden_dim) SS_DIFF(rope_scaling)
  SS_DIFF(rope_scaling_factor) SS_DIFF(rope_low_freq_factor) SS_DIFF(rope_high_freq_factor)
  SS_DIFF(rope_original_max_seq_len) SS_DIFF(attn_logit_softcap) SS_DIFF(final_logit_softcap)
  SS_DIFF(eos_ids) SS_DIFF(torch_dtype) SS_DIFF(attn_scale_sqrt_dim) SS_DIFF(attn_scale_inverse_layer)
  SS_DIFF(layer_attention) SS_DIFF(attn_sinks) SS_DIFF(swiglu_limit) SS_DIFF(moe_bias)
  SS_DIFF(rope_yarn_beta_fast) SS_DIFF(rope_yarn_beta_slow) SS_DIFF(rope_yarn_truncate)
  SS_DIFF(norm_weight_offset) SS_DIFF(embed_scale) SS_DIFF(query_pre_attn_scalar) SS_DIFF(rope_local_theta)
#undef SS_DIFF
  if (out.empty() && !(a == b)) out.push_back("(a field DiffFields does not list)");
  return out;
}

ordered_json BuildHfJson(const ModelConfig& c, const FamilyInfo& info) {
  ordered_json j;
  j["architectures"] = {info.architecture};
  j["model_type"] = info.model_type;
  auto llama_core = [&] {
    j["hidden_size"] = c.dim;
    j["intermediate_size"] = c.hidden_dim;
    j["num_hidden_layers"] = c.n_layers;
    j["num_attention_heads"] = c.n_heads;
    j["num_key_value_heads"] = c.n_kv_heads;
    j["head_dim"] = c.head_dim;
    j["vocab_size"] = c.vocab_size;
    j["max_position_embeddings"] = c.max_seq_len;
    j["rms_norm_eps"] = FloatJson(c.norm_eps);
    j["hidden_act"] = ActName(c.act, info.family);
    j["rope_theta"] = FloatJson(c.rope_theta);
    if (c.attn_sinks && info.family != Family::kGptOss) j["sinkscope_attn_sinks"] = true;
  };
  switch (info.family) {
    case Family::kLlama:
      llama_core();
      j["attention_bias"] = c.qkv_bias;
      j["mlp_bias"] = c.mlp_bias;
      break;
    case Family::kMistral:
    case Family::kMixtral:
      llama_core();
      j["sliding_window"] = c.sliding_window > 0 ? ordered_json(c.sliding_window) : nullptr;
      if (info.family == Family::kMixtral) {
        j["num_local_experts"] = c.n_experts;
        j["num_experts_per_tok"] = c.n_experts_per_tok;
      }
      break;
    case Family::kQwen2:
      llama_core();
      j["use_sliding_window"] = false;
      break;
    case Family::kQwen3:
      llama_core();
      j["attention_bias"] = c.qkv_bias;
      j["use_sliding_window"] = false;
      break;
    case Family::kQwen3Moe:
      llama_core();
      j.erase("intermediate_size");
      if (c.dense_hidden_dim > 0) j["intermediate_size"] = c.dense_hidden_dim;
      j["moe_intermediate_size"] = c.hidden_dim;
      j["num_experts"] = c.n_experts;
      j["num_experts_per_tok"] = c.n_experts_per_tok;
      j["norm_topk_prob"] = c.norm_topk_prob;
      j["decoder_sparse_step"] = 1;
      j["mlp_only_layers"] = ordered_json::array();
      if (c.n_shared_experts > 0) j["shared_expert_intermediate_size"] = c.shared_expert_hidden_dim;
      j["attention_bias"] = c.qkv_bias;
      j["use_sliding_window"] = false;
      break;
    case Family::kOlmo2:
      llama_core();
      j["attention_bias"] = c.qkv_bias;
      break;
    case Family::kOlmoe:
      llama_core();
      j["num_experts"] = c.n_experts;
      j["num_experts_per_tok"] = c.n_experts_per_tok;
      j["norm_topk_prob"] = c.norm_topk_prob;
      j["attention_bias"] = c.qkv_bias;
      j["clip_qkv"] = nullptr;
      break;
    case Family::kGptOss: {
      llama_core();
      j["attention_bias"] = c.qkv_bias;
      j["num_local_experts"] = c.n_experts;
      j["num_experts_per_tok"] = c.n_experts_per_tok;
      j["swiglu_limit"] = FloatJson(c.swiglu_limit);
      j["sliding_window"] = c.sliding_window;
      ordered_json types = ordered_json::array();
      for (int l = 0; l < c.n_layers; ++l)
        types.push_back(c.Window(l) > 0 ? "sliding_attention" : "full_attention");
      j["layer_types"] = types;
      break;
    }
    case Family::kGemma2:
    case Family::kGemma3: {
      llama_core();
      j.erase("hidden_act");
      j["hidden_activation"] = ActName(c.act, info.family);
      j["attention_bias"] = false;
      j["query_pre_attn_scalar"] = FloatJson(c.query_pre_attn_scalar);
      j["sliding_window"] = c.sliding_window;
      ordered_json types = ordered_json::array();
      for (int l = 0; l < c.n_layers; ++l)
        types.push_back(c.Window(l) > 0 ? "sliding_attention" : "full_attention");
      j["layer_types"] = types;
      if (info.family == Family::kGemma3) j["rope_local_base_freq"] = FloatJson(c.rope_local_theta);
      j["attn_logit_softcapping"] = c.attn_logit_softcap > 0 ? FloatJson(c.attn_logit_softcap) : ordered_json(nullptr);
      j["final_logit_softcapping"] = c.final_logit_softcap > 0 ? FloatJson(c.final_logit_softcap) : ordered_json(nullptr);
      break;
    }
    case Family::kGpt2:
      j["n_embd"] = c.dim;
      j["n_inner"] = c.hidden_dim;
      j["n_layer"] = c.n_layers;
      j["n_head"] = c.n_heads;
      j["vocab_size"] = c.vocab_size;
      j["n_positions"] = c.max_seq_len;
      j["layer_norm_epsilon"] = FloatJson(c.norm_eps);
      j["activation_function"] = ActName(c.act, info.family);
      if (!c.attn_scale_sqrt_dim) j["scale_attn_weights"] = false;
      if (c.attn_scale_inverse_layer) j["scale_attn_by_inverse_layer_idx"] = true;
      break;
    case Family::kGptNeox:
      j["hidden_size"] = c.dim;
      j["intermediate_size"] = c.hidden_dim;
      j["num_hidden_layers"] = c.n_layers;
      j["num_attention_heads"] = c.n_heads;
      j["vocab_size"] = c.vocab_size;
      j["max_position_embeddings"] = c.max_seq_len;
      j["layer_norm_eps"] = FloatJson(c.norm_eps);
      j["hidden_act"] = ActName(c.act, info.family);
      j["rotary_pct"] = c.head_dim > 0 ? static_cast<double>(c.rot_dim()) / c.head_dim : 1.0;
      j["rotary_emb_base"] = FloatJson(c.rope_theta);
      j["use_parallel_residual"] = c.parallel_residual;
      j["attention_bias"] = c.qkv_bias;
      break;
  }
  switch (c.rope_scaling) {
    case RopeScalingKind::kNone: break;
    case RopeScalingKind::kLinear:
      j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", FloatJson(c.rope_scaling_factor)}};
      break;
    case RopeScalingKind::kLlama3:
      j["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", FloatJson(c.rope_scaling_factor)},
                           {"low_freq_factor", FloatJson(c.rope_low_freq_factor)},
                           {"high_freq_factor", FloatJson(c.rope_high_freq_factor)},
                           {"original_max_position_embeddings", c.rope_original_max_seq_len}};
      break;
    case RopeScalingKind::kYarn:
      j["rope_scaling"] = {{"rope_type", "yarn"},
                           {"factor", FloatJson(c.rope_scaling_factor)},
                           {"beta_fast", FloatJson(c.rope_yarn_beta_fast)},
                           {"beta_slow", FloatJson(c.rope_yarn_beta_slow)},
                           {"truncate", c.rope_yarn_truncate},
                           {"original_max_position_embeddings", c.rope_original_max_seq_len}};
      break;
  }
  if (c.final_logit_softcap != 0 && !j.contains("final_logit_softcapping"))
    j["final_logit_softcapping"] = FloatJson(c.final_logit_softcap);
  j["tie_word_embeddings"] = c.tied_embeddings;
  j["bos_token_id"] = TokenJson(c.bos_id);
  if (c.eos_ids.empty()) {
    j["eos_token_id"] = TokenJson(c.eos_id);
  } else {
    j["eos_token_id"] = c.eos_ids;
  }
  if (!c.torch_dtype.empty()) j["torch_dtype"] = c.torch_dtype;
  return j;
}

}  // namespace

std::string HfConfigJson(const ModelConfig& config) {
  const FamilyInfo& info = FamilyOfArch(config.arch);
  std::string text = BuildHfJson(config, info).dump(2) + "\n";
  // Verify by reading it back: a config this family cannot express fails here, by name, instead
  // of producing a config.json that silently describes a different model.
  std::string source = fmt::format("config.json for {} ModelConfig", config.arch);
  ModelConfig read_back = ParseHfConfig(text, source);
  ModelConfig expected = config;
  // rotary_dim 0 and rotary_dim == head_dim mean the same; compare the effective value.
  expected.rotary_dim = expected.rot_dim();
  read_back.rotary_dim = read_back.rot_dim();
  if (!(read_back == expected)) {
    std::vector<std::string> fields = DiffFields(read_back, expected);
    Fail("ModelConfig (arch {}) cannot be written as config.json: {} would not read back the same",
         config.arch, fmt::join(fields, ", "));
  }
  return text;
}

void WriteHfConfig(const std::string& path, const ModelConfig& config) {
  WriteFileAtomic(path, HfConfigJson(config));
}

}  // namespace ss
