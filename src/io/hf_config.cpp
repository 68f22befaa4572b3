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
#include "model/arch.h"

namespace ss {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::string SupportedList() {
  std::vector<std::string> names;
  for (const ArchEntry& a : Architectures()) names.push_back(fmt::format("{} ({})", a.hf_class, a.name));
  return fmt::format("{}", fmt::join(names, ", "));
}

const ArchEntry& FamilyOf(const json& j, const std::string& source) {
  if (auto it = j.find("architectures"); it != j.end() && !it->is_null()) {
    if (!it->is_array() || it->empty() || !(*it)[0].is_string())
      Fail("{}: 'architectures' must be a non-empty list of class names, found {}", source,
           it->dump());
    const std::string& name = (*it)[0].get_ref<const std::string&>();
    for (const ArchEntry& a : Architectures())
      if (name == a.hf_class) return a;
    Fail("{}: unsupported architecture '{}'; supported: {}", source, name, SupportedList());
  }
  if (auto it = j.find("model_type"); it != j.end() && it->is_string()) {
    const std::string& name = it->get_ref<const std::string&>();
    for (const ArchEntry& a : Architectures())
      if (name == a.name) return a;
    Fail("{}: unsupported model_type '{}'; supported: {}", source, name, SupportedList());
  }
  Fail("{}: neither 'architectures' nor 'model_type' is given; supported: {}", source,
       SupportedList());
}

// Calls fail("large" or "small", the limit) when the JSON integer `v` is outside int32 (every
// integer a config holds: sizes, counts, token ids). Unsigned values above INT64_MAX would wrap in
// get<int64_t>(), so they are compared as unsigned first.
template <typename FailFn>
void CheckInt32(const json& v, FailFn fail) {
  if ((v.is_number_unsigned() && v.get<uint64_t>() > INT32_MAX) || v.get<int64_t>() > INT32_MAX)
    fail("large", INT32_MAX);
  if (v.get<int64_t>() < INT32_MIN) fail("small", INT32_MIN);
}

// config.json through the family reader interface (model/family.h). Keys may be dotted paths
// into nested objects; a JSON null counts as absent, as transformers' None does.
class JsonConfigReader : public ConfigReader {
 public:
  JsonConfigReader(const json& j, const std::string& source) : j_(j), source_(source) {}
  bool gguf() const override { return false; }
  const std::string& source() const override { return source_; }
  std::string Name(Key k) const override { return k.hf ? k.hf : "(no config.json key)"; }
  bool Given(Key k) const override { return Lookup(k) != nullptr; }
  bool Has(Key k) const override {
    const json* v = Lookup(k);
    return v && !v->is_null();
  }
  int64_t Int(Key k, std::optional<int64_t> fallback) const override {
    const json* v = Required(k, fallback.has_value());
    if (!v) return *fallback;
    if (!v->is_number_integer()) Fail(k, "must be an integer, found {}", v->dump());
    CheckInt32(*v, [&](const char* what, int64_t limit) {
      Fail(k, "is too {}: {} (the limit is {})", what, v->dump(), limit);
    });
    return v->get<int64_t>();
  }
  double Float(Key k, std::optional<double> fallback) const override {
    const json* v = Required(k, fallback.has_value());
    if (!v) return *fallback;
    if (!v->is_number()) Fail(k, "must be a number, found {}", v->dump());
    return v->get<double>();
  }
  bool Bool(Key k, bool fallback) const override {
    const json* v = Required(k, true);
    if (!v) return fallback;
    if (!v->is_boolean()) Fail(k, "must be true or false, found {}", v->dump());
    return v->get<bool>();
  }
  std::string String(Key k, const std::string& fallback) const override {
    const json* v = Required(k, true);
    if (!v) return fallback;
    if (!v->is_string()) Fail(k, "must be a string, found {}", v->dump());
    return v->get<std::string>();
  }
  std::vector<std::string> Strings(Key k) const override {
    const json* v = Required(k, false);
    std::vector<std::string> out;
    if (!v->is_array()) Fail(k, "must be a list of strings, found {}", v->dump());
    for (const json& e : *v) {
      if (!e.is_string()) Fail(k, "must be a list of strings, found {}", v->dump());
      out.push_back(e.get<std::string>());
    }
    return out;
  }
  std::vector<int64_t> Ints(Key k) const override {
    const json* v = Required(k, false);
    std::vector<int64_t> out;
    if (!v->is_array()) Fail(k, "must be a list of integers, found {}", v->dump());
    for (const json& e : *v) {
      if (!e.is_number_integer()) Fail(k, "must be a list of integers, found {}", v->dump());
      CheckInt32(e, [&](const char* what, int64_t limit) {
        Fail(k, "holds {}, which is too {} (the limit is {})", e.dump(), what, limit);
      });
      out.push_back(e.get<int64_t>());
    }
    return out;
  }
  std::string Dump(Key k) const override {
    const json* v = Lookup(k);
    return v ? v->dump() : "(absent)";
  }
  bool HasTensor(const std::string&) const override { return false; }

 private:
  const json* Lookup(Key k) const {
    if (!k.hf) return nullptr;
    const json* node = &j_;
    std::string_view path = k.hf;
    while (true) {
      const size_t dot = path.find('.');
      const std::string part(path.substr(0, dot));
      if (!node->is_object()) return nullptr;
      auto it = node->find(part);
      if (it == node->end()) return nullptr;
      node = &*it;
      if (dot == std::string_view::npos) return node;
      path.remove_prefix(dot + 1);
    }
  }
  // The value, or null when absent / null and `optional`; absent and required throws.
  const json* Required(Key k, bool optional) const {
    const json* v = Lookup(k);
    if (v && !v->is_null()) return v;
    if (!optional) ss::Fail("{}: missing required field '{}'", source_, Name(k));
    return nullptr;
  }

  const json& j_;
  const std::string& source_;
};

// A config.json key for the reader (config.json only).
Key K(const char* key) { return {key, nullptr}; }

// A token id: an integer, null (-1: None), or absent (the family default).
int TokenId(const JsonConfigReader& r, const char* key, int fallback) {
  if (!r.Given(K(key))) return fallback;
  if (!r.Has(K(key))) return -1;
  return static_cast<int>(r.Int(K(key), std::nullopt));
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
  JsonConfigReader s(*scaling, where);
  if (key == "rope_parameters") c->rope_theta = s.Real(K("rope_theta"), c->rope_theta);
  std::string type = s.String(K("rope_type"), s.String(K("type"), "default"));
  if (type == "default") return;
  if (type == "linear") {
    c->rope_scaling = RopeScalingKind::kLinear;
    c->rope_scaling_factor = s.Real(K("factor"));
  } else if (type == "llama3") {
    c->rope_scaling = RopeScalingKind::kLlama3;
    c->rope_scaling_factor = s.Real(K("factor"));
    c->rope_low_freq_factor = s.Real(K("low_freq_factor"));
    c->rope_high_freq_factor = s.Real(K("high_freq_factor"));
    c->rope_original_max_seq_len = s.PositiveInt(K("original_max_position_embeddings"));
  } else if (type == "yarn") {
    // transformers' _compute_yarn_parameters. The attention factor is derived from the factor;
    // the keys that override it (DeepSeek's mscale, an explicit attention_factor) are not
    // implemented and are refused rather than ignored.
    for (const char* k : {"attention_factor", "mscale", "mscale_all_dim"})
      if (s.Has(K(k))) Fail("{}: {}.{} is not supported (YaRN with the default attention factor only)", source, key, k);
    c->rope_scaling = RopeScalingKind::kYarn;
    c->rope_scaling_factor = s.Real(K("factor"));
    c->rope_yarn_beta_fast = s.Real(K("beta_fast"), 32.0f);
    c->rope_yarn_beta_slow = s.Real(K("beta_slow"), 1.0f);
    c->rope_yarn_truncate = s.Bool(K("truncate"), true);
    c->rope_original_max_seq_len = s.PositiveInt(K("original_max_position_embeddings"), c->max_seq_len);
    // Newer transformers take the factor as max_position_embeddings / original when the original
    // length is given, older ones the "factor" key: a config where they differ means different
    // numbers in different versions.
    if (s.Has(K("original_max_position_embeddings")) &&
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

// The families that rotate whole heads refuse a partial rotary fraction other than 1 (top level,
// or inside "rope_parameters" as transformers >= 5 writes it) by name, rather than rotating every
// dimension without a word.
void RefusePartialRotary(const JsonConfigReader& r, const std::string& arch) {
  for (const char* key : {"rope_parameters.partial_rotary_factor", "partial_rotary_factor"})
    if (r.Has(K(key)) && r.Real(K(key)) != 1.0f)
      Fail("{}: {} {} (rotating part of each head) is not supported for {}", r.source(), key,
           r.Real(K(key)), arch);
}

void ParseEos(const json& j, const JsonConfigReader& r, int fallback, ModelConfig* c) {
  auto it = j.find("eos_token_id");
  if (it != j.end() && it->is_array()) {
    if (it->empty()) Fail("{}: field 'eos_token_id' is an empty list", r.source());
    for (const json& id : *it) {
      if (!id.is_number_integer())
        Fail("{}: field 'eos_token_id' must hold integers, found {}", r.source(), id.dump());
      CheckInt32(id, [&](const char* what, int64_t limit) {
        Fail("{}: field 'eos_token_id' holds {}, which is too {} (the limit is {})", r.source(),
             id.dump(), what, limit);
      });
      c->eos_ids.push_back(id.get<int>());
    }
    c->eos_id = c->eos_ids[0];
    return;
  }
  c->eos_id = TokenId(r, "eos_token_id", fallback);
}

// The config.json key of each ModelConfig field this family sets, for ValidateConfig's messages.
ConfigKeys HfKeys(const json& j) {
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
                  {"rope_yarn_beta_fast", scaling + ".beta_fast"},
                  {"rope_yarn_beta_slow", scaling + ".beta_slow"},
                  {"sliding_window", "sliding_window"},
                  {"attn_logit_softcap", "attn_logit_softcapping"},
                  {"final_logit_softcap", "final_logit_softcapping"},
                  {"bos_id", "bos_token_id"},
                  {"eos_id", "eos_token_id"}};
  if (j.contains("rope_parameters") && !j.contains("rope_theta"))
    k["rope_theta"] = "rope_parameters.rope_theta";
  return k;
}


}  // namespace

std::vector<std::string> SupportedHfArchitectures() {
  std::vector<std::string> out;
  for (const ArchEntry& a : Architectures()) out.push_back(a.hf_class);
  return out;
}

std::vector<std::string> SupportedHfModelTypes() {
  std::vector<std::string> out;
  for (const ArchEntry& a : Architectures()) out.push_back(a.name);
  return out;
}

ModelConfig ParseHfConfig(std::string_view json_text, const std::string& source) {
  json j = ParseJsonStrict(json_text, source, "config.json");
  if (!j.is_object()) Fail("{}: expected a JSON object, found {}", source, j.type_name());
  const ArchEntry& family = FamilyOf(j, source);
  JsonConfigReader r(j, source);
  ModelConfig c;
  c.arch = family.name;
  c.rotary_dim = 0;
  family.read(r, family.defaults, &c);

  if (c.rope != RopeKind::kNone) ParseRopeScaling(j, source, &c);
  if (!family.reads_partial_rotary) RefusePartialRotary(r, c.arch);
  c.tied_embeddings = r.Bool(K("tie_word_embeddings"), family.defaults.tie_embeddings);
  c.bos_id = TokenId(r, "bos_token_id", family.defaults.bos);
  ParseEos(j, r, family.defaults.eos, &c);
  c.torch_dtype = r.String(K("torch_dtype"), r.String(K("dtype"), ""));
  // Attention soft-capping is Gemma 2's: transformers' other families ignore the key, and applying
  // it would compute another model.
  if (!family.reads_softcaps) {
    if (r.Has(K("attn_logit_softcapping")))
      Fail("{}: attn_logit_softcapping is not part of {} ({} ignores it); remove the key", source,
           family.name, family.hf_class);
    c.final_logit_softcap = r.Real(K("final_logit_softcapping"), 0.0);
  }
  ConfigKeys keys = HfKeys(j);
  for (const auto& [field, key] : r.keys()) keys[field] = key;
  ValidateConfig(c, source, keys);
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
  SS_DIFF(shared_expert_hidden_dim) SS_DIFF(dense_hidden_dim) SS_DIFF(dense_layers) SS_DIFF(rope_scaling)
  SS_DIFF(rope_scaling_factor) SS_DIFF(rope_low_freq_factor) SS_DIFF(rope_high_freq_factor)
  SS_DIFF(rope_original_max_seq_len) SS_DIFF(attn_logit_softcap) SS_DIFF(final_logit_softcap)
  SS_DIFF(eos_ids) SS_DIFF(torch_dtype) SS_DIFF(attn_scale_sqrt_dim) SS_DIFF(attn_scale_inverse_layer)
  SS_DIFF(layer_attention) SS_DIFF(attn_sinks) SS_DIFF(attn_output_gate) SS_DIFF(attn_kv_bias) SS_DIFF(attn_sigmoid) SS_DIFF(swiglu_limit) SS_DIFF(moe_bias)
  SS_DIFF(rope_yarn_beta_fast) SS_DIFF(rope_yarn_beta_slow) SS_DIFF(rope_yarn_truncate)
  SS_DIFF(norm_weight_offset) SS_DIFF(embed_scale) SS_DIFF(query_pre_attn_scalar) SS_DIFF(rope_local_theta)
#undef SS_DIFF
  if (out.empty() && !(a == b)) out.push_back("(a field DiffFields does not list)");
  return out;
}

// config.json through the family writer interface: keys in the order written.
class JsonConfigWriter : public ConfigWriter {
 public:
  explicit JsonConfigWriter(ordered_json& j) : j_(j) {}
  bool gguf() const override { return false; }
  void Int(Key k, int64_t v) override { Set(k, v); }
  void Float(Key k, float v) override { Set(k, FloatJson(v)); }
  void Bool(Key k, bool v) override { Set(k, v); }
  void String(Key k, const std::string& v) override { Set(k, v); }
  void Null(Key k) override { Set(k, nullptr); }
  void Strings(Key k, const std::vector<std::string>& v) override { Set(k, v); }
  void Ints(Key k, const std::vector<int64_t>& v) override { Set(k, v.empty() ? ordered_json::array() : ordered_json(v)); }

 private:
  void Set(Key k, ordered_json v) {
    if (k.hf) j_[k.hf] = std::move(v);
  }
  ordered_json& j_;
};

ordered_json BuildHfJson(const ModelConfig& c, const ArchEntry& family) {
  ordered_json j;
  j["architectures"] = {family.hf_class};
  j["model_type"] = family.name;
  JsonConfigWriter w(j);
  family.write(c, w);
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
  if (!family.reads_softcaps && c.final_logit_softcap != 0)
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
  const ArchEntry& family = FindArchitecture(config.arch);
  std::string text = BuildHfJson(config, family).dump(2) + "\n";
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
