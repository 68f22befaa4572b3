#include "io/hf_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "common/error.h"
#include "common/file_util.h"
#include "io/json_util.h"
#include "model/arch.h"
#include "model/attention.h"

namespace ss {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::string SupportedList() {
  std::vector<std::string> names;
  for (const ArchEntry& a : Architectures())
    names.push_back(fmt::format("{} ({})", a.hf_class, a.name));
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

// ---- RoPE settings, in the two forms transformers writes.
//
// Before version 5: the base at the top level ("rope_theta"; GPT-NeoX's older "rotary_emb_base")
// and "rope_scaling": null or {"rope_type" (older: "type"): "linear" | "llama3" | "yarn" | ...,
// that type's parameters}. Gemma 3 adds "rope_local_base_freq", the base of its sliding layers,
// which rope_scaling does not touch (it scales the full-attention layers).
// Version 5 (modeling_rope_utils.py, RotaryEmbeddingConfigMixin.convert_rope_params_to_dict and
// standardize_rope_params) writes "rope_parameters" instead: the same object with the base inside
// ({"rope_type": "linear", "factor": 8.0, "rope_theta": 10000.0}), or, for a model whose layer
// types have RoPE of their own (Gemma3TextConfig), one object per layer type:
// {"sliding_attention": {...}, "full_attention": {...}}. It still reads the older keys: a
// rope_scaling object becomes rope_parameters (Gemma 3: is merged into its full_attention entry),
// and the top-level base (Gemma 3: rope_local_base_freq for sliding_attention) fills in where an
// object gives none. The two forms read here to the same ModelConfig; a config that gives both
// and means different things by them is refused (transformers versions would disagree on it).

constexpr const char* kRopeTypes = "default, linear, llama3, yarn";

const json* NonNull(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

bool IsLayerType(std::string_view key) {
  return key == "sliding_attention" || key == "full_attention";
}

const char* RopeScalingName(RopeScalingKind kind) {
  switch (kind) {
    case RopeScalingKind::kNone:
      return "default";
    case RopeScalingKind::kLinear:
      return "linear";
    case RopeScalingKind::kLlama3:
      return "llama3";
    case RopeScalingKind::kYarn:
      return "yarn";
  }
  return "?";
}

// The parameters a RoPE object of `type` takes besides rope_type and rope_theta: transformers'
// required and optional keys for the type
// (RotaryEmbeddingConfigMixin._validate_<type>_rope_parameters), less YaRN's attention_factor /
// mscale / mscale_all_dim, which are refused with their own message.
std::vector<std::string_view> RopeParameterKeys(const std::string& type) {
  if (type == "linear") return {"factor"};
  if (type == "llama3")
    return {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
  if (type == "yarn")
    return {"factor", "beta_fast", "beta_slow", "truncate", "original_max_position_embeddings"};
  return {};
}

struct RopeObjectRules {
  // The object's partial_rotary_factor is read (or refused) with the family's settings: true for
  // the flat rope_parameters (model/family.h ReadPartialRotary, RefusePartialRotary below).
  // Elsewhere only 1 (every dimension rotated) is accepted.
  bool partial_rotary_read_elsewhere = false;
  bool yarn = true;  // YaRN may apply to these layers
};

// One RoPE object at `path` ("rope_scaling", "rope_parameters", "rope_parameters.full_attention")
// into c's rope_scaling fields, telling the reader where each came from for ValidateConfig's
// messages. Returns the object's rope_theta, if it gives one. A type, a key or a value sinkscope
// does not implement is refused naming the file and the key.
std::optional<float> ReadRopeObject(const JsonConfigReader& r, const json& object,
                                    const std::string& path, RopeObjectRules rules,
                                    ModelConfig* c) {
  const std::string& source = r.source();
  if (!object.is_object())
    Fail("{}: '{}' must be an object or null, found {}", source, path, object.dump());
  // The reader takes dotted paths from the top of config.json; each string outlives its Key.
  auto at = [&](std::string_view key) { return path + "." + std::string(key); };
  const std::string type_key = at("rope_type"), legacy_type_key = at("type");
  const std::string type =
      r.String(K(type_key.c_str()), r.String(K(legacy_type_key.c_str()), "default"));
  if (r.Has(K(type_key.c_str())) && r.Has(K(legacy_type_key.c_str())) &&
      r.String(K(legacy_type_key.c_str()), "") != type)
    Fail("{}: '{}' '{}' and '{}' '{}' disagree; give one", source, type_key, type, legacy_type_key,
         r.String(K(legacy_type_key.c_str()), ""));
  const std::string& named_type = r.Has(K(type_key.c_str())) ? type_key : legacy_type_key;
  if (type != "default" && type != "linear" && type != "llama3" && type != "yarn")
    Fail("{}: '{}' is '{}', which sinkscope does not implement; supported: {}", source, named_type,
         type, kRopeTypes);
  if (type == "yarn" && !rules.yarn)
    Fail(
        "{}: '{}' is 'yarn', which sinkscope does not implement for {}: its sliding layers have "
        "RoPE of their own, and YaRN's attention factor would scale them too; supported: default, "
        "linear, llama3",
        source, named_type, c->arch);
  if (type == "yarn") {
    // transformers' _compute_yarn_parameters. The attention factor is derived from the factor;
    // the keys that override it (DeepSeek's mscale, an explicit attention_factor) are not
    // implemented and are refused rather than ignored.
    for (const char* k : {"attention_factor", "mscale", "mscale_all_dim"}) {
      const std::string key = at(k);
      if (r.Has(K(key.c_str())))
        Fail("{}: '{}' is not supported (YaRN with the default attention factor only)", source,
             key);
    }
  }
  // Keys the type does not take: transformers warns and ignores them. They are refused, so that a
  // value meant to change the numbers is not silently dropped.
  const std::vector<std::string_view> takes = RopeParameterKeys(type);
  for (const auto& [key, value] : object.items()) {
    // Qwen3.5's multimodal RoPE (docs/specs/qwen3_next.md section 5.4): frequency slots split
    // among three position streams (time, height, width) by mrope_section. For text the three are
    // the token's position, which makes it the plain RoPE over the slots the sections cover: all
    // of them, or the numbers would differ.
    if (c->arch.rfind("qwen3_5", 0) == 0 &&
        (key == "mrope_section" || key == "mrope_interleaved")) {
      const std::string path_key = at(key);
      if (key == "mrope_interleaved") {
        r.Bool(K(path_key.c_str()), true);  // either layout; type-checked
        continue;
      }
      int64_t slots = 0;
      for (int64_t n : r.Ints(K(path_key.c_str()))) {
        if (n < 0) Fail("{}: '{}' holds {}; sections are 0 or more", source, path_key, n);
        slots += n;
      }
      if (slots != c->rot_dim() / 2)
        Fail("{}: '{}' covers {} frequency slots; the rotated part of each head has {}", source,
             path_key, slots, c->rot_dim() / 2);
      continue;
    }
    if (value.is_null() || key == "rope_type" || key == "type" || key == "rope_theta" ||
        key == "partial_rotary_factor" || std::find(takes.begin(), takes.end(), key) != takes.end())
      continue;
    Fail("{}: '{}' is not a parameter of rope_type '{}' (it takes {}rope_theta); remove the key",
         source, at(key), type, takes.empty() ? "" : fmt::format("{}, ", fmt::join(takes, ", ")));
  }
  const std::string partial = at("partial_rotary_factor");
  if (!rules.partial_rotary_read_elsewhere && r.Has(K(partial.c_str())) &&
      r.Real(K(partial.c_str())) != 1.0f)
    Fail("{}: '{}' {} (rotating part of each head) is not supported there; {}", source, partial,
         r.Real(K(partial.c_str())),
         c->arch == "gemma3_text"
             ? "gemma3_text rotates whole heads"
             : "give it as partial_rotary_factor or rope_parameters.partial_rotary_factor");

  const std::string factor = at("factor"), low = at("low_freq_factor"),
                    high = at("high_freq_factor"),
                    original = at("original_max_position_embeddings"), beta_fast = at("beta_fast"),
                    beta_slow = at("beta_slow"), truncate = at("truncate"),
                    theta = at("rope_theta");
  r.Spelled("rope_scaling_factor", K(factor.c_str()));
  r.Spelled("rope_low_freq_factor", K(low.c_str()));
  r.Spelled("rope_high_freq_factor", K(high.c_str()));
  r.Spelled("rope_original_max_seq_len", K(original.c_str()));
  r.Spelled("rope_yarn_beta_fast", K(beta_fast.c_str()));
  r.Spelled("rope_yarn_beta_slow", K(beta_slow.c_str()));
  if (type == "linear") {
    c->rope_scaling = RopeScalingKind::kLinear;
    c->rope_scaling_factor = r.Real(K(factor.c_str()));
  } else if (type == "llama3") {
    c->rope_scaling = RopeScalingKind::kLlama3;
    c->rope_scaling_factor = r.Real(K(factor.c_str()));
    c->rope_low_freq_factor = r.Real(K(low.c_str()));
    c->rope_high_freq_factor = r.Real(K(high.c_str()));
    c->rope_original_max_seq_len = r.PositiveInt(K(original.c_str()));
  } else if (type == "yarn") {
    c->rope_scaling = RopeScalingKind::kYarn;
    c->rope_scaling_factor = r.Real(K(factor.c_str()));
    c->rope_yarn_beta_fast = r.Real(K(beta_fast.c_str()), 32.0f);
    c->rope_yarn_beta_slow = r.Real(K(beta_slow.c_str()), 1.0f);
    c->rope_yarn_truncate = r.Bool(K(truncate.c_str()), true);
    c->rope_original_max_seq_len = r.PositiveInt(K(original.c_str()), c->max_seq_len);
    // Newer transformers take the factor as max_position_embeddings / original when the original
    // length is given, older ones the "factor" key: a config where they differ means different
    // numbers in different versions.
    if (r.Has(K(original.c_str())) &&
        std::abs(static_cast<double>(c->max_seq_len) / c->rope_original_max_seq_len -
                 c->rope_scaling_factor) > 1e-6 * c->rope_scaling_factor)
      Fail(
          "{}: '{}' {} differs from max_position_embeddings / '{}' = {} / {}; transformers "
          "versions disagree on which applies",
          source, factor, c->rope_scaling_factor, original, c->max_seq_len,
          c->rope_original_max_seq_len);
  }
  if (type != "default" && !(c->rope_scaling_factor > 0))
    Fail("{}: '{}' must be positive, found {}", source, factor, c->rope_scaling_factor);
  if (!r.Has(K(theta.c_str()))) return std::nullopt;
  return r.Real(K(theta.c_str()));
}

// The RoPE fields two readings disagree on ("rope_theta 10000 / 500000, rope_scaling linear /
// default"), empty when they agree.
std::string RopeDifference(const ModelConfig& a, const ModelConfig& b) {
  std::vector<std::string> out;
  auto differ = [&](const char* name, auto x, auto y) {
    if (!(x == y)) out.push_back(fmt::format("{} {} / {}", name, x, y));
  };
  differ("rope_theta", a.rope_theta, b.rope_theta);
  differ("rope_local_base_freq", a.rope_local_theta, b.rope_local_theta);
  differ("rope_type", RopeScalingName(a.rope_scaling), RopeScalingName(b.rope_scaling));
  if (a.rope_scaling == b.rope_scaling && a.rope_scaling != RopeScalingKind::kNone) {
    differ("factor", a.rope_scaling_factor, b.rope_scaling_factor);
    differ("low_freq_factor", a.rope_low_freq_factor, b.rope_low_freq_factor);
    differ("high_freq_factor", a.rope_high_freq_factor, b.rope_high_freq_factor);
    differ("original_max_position_embeddings", a.rope_original_max_seq_len,
           b.rope_original_max_seq_len);
    differ("beta_fast", a.rope_yarn_beta_fast, b.rope_yarn_beta_fast);
    differ("beta_slow", a.rope_yarn_beta_slow, b.rope_yarn_beta_slow);
    differ("truncate", a.rope_yarn_truncate, b.rope_yarn_truncate);
  }
  return fmt::format("{}", fmt::join(out, ", "));
}

// A top-level original_max_position_embeddings (Phi-3's configs have one) replaces the scaling
// object's in transformers 5 (standardize_rope_params) and not before: for llama3 and YaRN, which
// read it, the two must agree.
void CheckTopLevelOriginalLength(const JsonConfigReader& r, const ModelConfig& c) {
  const Key top = K("original_max_position_embeddings");
  if (!r.Has(top) ||
      (c.rope_scaling != RopeScalingKind::kLlama3 && c.rope_scaling != RopeScalingKind::kYarn))
    return;
  const int64_t original = r.Int(top, std::nullopt);
  if (original != c.rope_original_max_seq_len)
    Fail(
        "{}: '{}' {} and '{}' {} disagree: transformers 5 reads the second, earlier versions the "
        "first; give one",
        r.source(), r.keys().at("rope_original_max_seq_len"), c.rope_original_max_seq_len,
        r.Name(top), original);
}

// Reads the RoPE settings of either form (see above) into `c`, whose family reader has set the
// base from the top-level keys (or the family default). Families without RoPE (GPT-2) refuse both
// keys: transformers ignores them there.
void ParseRope(const json& j, const JsonConfigReader& r, ModelConfig* c) {
  const std::string& source = r.source();
  const json* scaling = NonNull(j, "rope_scaling");
  const json* params = NonNull(j, "rope_parameters");
  if (c->rope == RopeKind::kNone) {
    for (const char* key : {"rope_scaling", "rope_parameters"})
      if (NonNull(j, key))
        Fail(
            "{}: '{}' is given, but {} has no rotary embedding (its positions are learned); "
            "remove the key",
            source, key, c->arch);
    return;
  }
  // Gemma 3 gives its sliding and full-attention layers RoPE of their own; every other family
  // has one set for all layers.
  const bool per_layer_type = c->arch == "gemma3_text";
  const RopeObjectRules legacy_rules{.partial_rotary_read_elsewhere = false,
                                     .yarn = !per_layer_type};
  // The base the family read: a top-level key, or none (the family default applied).
  const char* top_theta = r.Has(K("rope_theta"))                                 ? "rope_theta"
                          : c->arch == "gpt_neox" && r.Has(K("rotary_emb_base")) ? "rotary_emb_base"
                                                                                 : nullptr;

  ModelConfig legacy = *c;
  if (scaling) {
    // Versions before 5 ignore a base inside rope_scaling; 5 takes it over the top-level one.
    if (const std::optional<float> theta =
            ReadRopeObject(r, *scaling, "rope_scaling", legacy_rules, &legacy);
        theta && *theta != c->rope_theta)
      Fail(
          "{}: 'rope_scaling.rope_theta' {} and the RoPE base {} ({}) disagree: transformers 5 "
          "reads the first, earlier versions the second; give one",
          source, *theta, c->rope_theta,
          top_theta ? fmt::format("'{}'", top_theta) : std::string("the default"));
  }
  if (!params) {
    *c = legacy;
    CheckTopLevelOriginalLength(r, *c);
    return;
  }
  if (!params->is_object())
    Fail("{}: 'rope_parameters' must be an object or null, found {}", source, params->dump());
  for (const auto& [key, value] : params->items()) {
    if (per_layer_type && !IsLayerType(key))
      Fail(
          "{}: 'rope_parameters' of {} holds one object per layer type ({{\"sliding_attention\": "
          "{{...}}, \"full_attention\": {{...}}}}, as transformers 5 writes it); found the key "
          "'{}'",
          source, c->arch, key);
    if (!per_layer_type && IsLayerType(key))
      Fail(
          "{}: 'rope_parameters.{}': {} has one set of RoPE parameters for every layer, not one "
          "per layer type; give them directly in rope_parameters",
          source, key, c->arch);
  }
  // The v5 form. A base inside an object wins over the top-level key, which transformers < 5
  // reads instead: both given and different is refused.
  ModelConfig v5 = *c;
  auto take_theta = [&](std::optional<float> theta, const char* top_key, const std::string& key,
                        float* field, const char* field_name) {
    if (!theta) return;
    if (top_key && r.Real(K(top_key)) != *theta)
      Fail(
          "{}: '{}' {} and '{}' {} disagree: transformers 5 reads the first, earlier versions the "
          "second; give one",
          source, key, *theta, top_key, r.Real(K(top_key)));
    *field = *theta;
    r.Spelled(field_name, K(key.c_str()));
  };
  if (!per_layer_type) {
    take_theta(
        ReadRopeObject(r, *params, "rope_parameters", {.partial_rotary_read_elsewhere = true}, &v5),
        top_theta, "rope_parameters.rope_theta", &v5.rope_theta, "rope_theta");
  } else {
    // Gemma3TextConfig.convert_rope_params_to_dict: a missing or null entry is the default RoPE
    // with the top-level base (rope_theta for full_attention, rope_local_base_freq for sliding).
    if (const json* full = NonNull(*params, "full_attention"))
      take_theta(ReadRopeObject(r, *full, "rope_parameters.full_attention", legacy_rules, &v5),
                 r.Has(K("rope_theta")) ? "rope_theta" : nullptr,
                 "rope_parameters.full_attention.rope_theta", &v5.rope_theta, "rope_theta");
    if (const json* sliding = NonNull(*params, "sliding_attention")) {
      ModelConfig local = v5;
      local.rope_scaling = RopeScalingKind::kNone;
      const std::optional<float> theta =
          ReadRopeObject(r, *sliding, "rope_parameters.sliding_attention", legacy_rules, &local);
      if (local.rope_scaling != RopeScalingKind::kNone)
        Fail(
            "{}: 'rope_parameters.sliding_attention' has rope_type '{}', which sinkscope does not "
            "implement: it scales the RoPE of {}'s full-attention layers only; supported there: "
            "default",
            source, RopeScalingName(local.rope_scaling), c->arch);
      take_theta(theta, r.Has(K("rope_local_base_freq")) ? "rope_local_base_freq" : nullptr,
                 "rope_parameters.sliding_attention.rope_theta", &v5.rope_local_theta,
                 "rope_local_theta");
    }
  }
  if (scaling) {
    const std::string difference = RopeDifference(legacy, v5);
    if (!difference.empty())
      Fail(
          "{}: 'rope_scaling' and 'rope_parameters' give different RoPE settings ({}: "
          "rope_scaling's / rope_parameters'); transformers versions read them differently: give "
          "one",
          source, difference);
  }
  *c = v5;
  CheckTopLevelOriginalLength(r, *c);
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

// The config.json key of each ModelConfig field most families set, for ValidateConfig's messages;
// the family readers and ParseRope name the others (r.Spelled).
ConfigKeys HfKeys() {
  return {{"dim", "hidden_size"},
          {"hidden_dim", "intermediate_size"},
          {"n_layers", "num_hidden_layers"},
          {"n_heads", "num_attention_heads"},
          {"n_kv_heads", "num_key_value_heads"},
          {"vocab_size", "vocab_size"},
          {"max_seq_len", "max_position_embeddings"},
          {"norm_eps", "rms_norm_eps"},
          {"rope_theta", "rope_theta"},
          {"sliding_window", "sliding_window"},
          {"attn_logit_softcap", "attn_logit_softcapping"},
          {"final_logit_softcap", "final_logit_softcapping"},
          {"bos_id", "bos_token_id"},
          {"eos_id", "eos_token_id"}};
}

// A family that does not read layer_types (Llama, Mistral, Phi-3, ...; Qwen without
// use_sliding_window) gets its per-layer attention from its own rule. A layer_types list there
// must say the same, layer by layer, or it is refused: it would mean windows sinkscope does not
// apply.
void CheckUnreadLayerTypes(const JsonConfigReader& r, const ModelConfig& c) {
  const Key key = K("layer_types");
  if (!r.Has(key) || r.keys().count("layer_attention") || r.keys().count("linear_layers")) return;
  const std::vector<std::string> types = r.Strings(key);
  if (static_cast<int>(types.size()) != c.n_layers)
    r.Fail(key, "must list one attention kind for each of the {} layers, found {}", c.n_layers,
           r.Dump(key));
  for (int l = 0; l < c.n_layers; ++l) {
    const char* rule = c.Window(l) > 0 ? "sliding_attention" : "full_attention";
    if (types[l] != "sliding_attention" && types[l] != "full_attention")
      Fail("{}: layer_types[{}] is \"{}\"; supported: \"sliding_attention\", \"full_attention\"",
           r.source(), l, types[l]);
    if (types[l] != rule)
      Fail(
          "{}: layer_types[{}] is \"{}\", but {} gives layer {} {} ({}); remove the key or make it "
          "agree",
          r.source(), l, types[l], c.arch, l, rule,
          c.sliding_window > 0 ? fmt::format("sliding_window {} on every layer", c.sliding_window)
                               : std::string("no sliding window"));
  }
}

// An image-text checkpoint's language model settings (Qwen3.5): "text_config", with the top-level
// keys it does not repeat (architectures, tie_word_embeddings, the token ids, the dtype). A key
// given in both with different values is refused: which one transformers applies is not settled.
json TextConfig(const json& j, const ArchEntry& family, const std::string& source) {
  auto it = j.find("text_config");
  if (it == j.end() || !it->is_object())
    Fail("{}: {} keeps the language model's settings in 'text_config', which is {}", source,
         family.hf_class, it == j.end() ? "missing" : "not an object");
  json text = *it;
  for (const auto& [key, value] : j.items()) {
    if (key == "text_config" || key == "vision_config" || key == "model_type") continue;
    auto inner = text.find(key);
    if (inner == text.end()) {
      text[key] = value;
    } else if (*inner != value) {
      Fail("{}: '{}' is {} at the top level and {} in text_config; give one", source, key,
           value.dump(), inner->dump());
    }
  }
  return text;
}

}  // namespace

std::vector<std::string> SupportedHfArchitectures() {
  std::vector<std::string> out;
  for (const ArchEntry& a : Architectures()) out.push_back(a.hf_class);
  return out;
}

ModelConfig ParseHfConfig(std::string_view json_text, const std::string& source) {
  json j = ParseJsonStrict(json_text, source, "config.json");
  if (!j.is_object()) Fail("{}: expected a JSON object, found {}", source, j.type_name());
  const ArchEntry& family = FamilyOf(j, source);
  if (family.nested_text_config) j = TextConfig(j, family, source);
  JsonConfigReader r(j, source);
  ModelConfig c;
  c.arch = family.name;
  c.rotary_dim = 0;
  family.read(r, family.defaults, &c);

  ParseRope(j, r, &c);
  if (!family.reads_partial_rotary) RefusePartialRotary(r, c.arch);
  CheckUnreadLayerTypes(r, c);
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
  ConfigKeys keys = HfKeys();
  for (const auto& [field, key] : r.keys()) keys[field] = key;
  ValidateConfig(c, source, keys);
  return c;
}

ModelConfig ReadHfConfig(const std::string& path) {
  std::string file =
      IsDirectory(path) ? (std::filesystem::path(path) / "config.json").string() : path;
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
  // A table of one-line cases, laid out by hand.
  // clang-format off
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
  SS_DIFF(layer_attention) SS_DIFF(swiglu_limit) SS_DIFF(moe_bias)
  SS_DIFF(rope_yarn_beta_fast) SS_DIFF(rope_yarn_beta_slow) SS_DIFF(rope_yarn_truncate)
  SS_DIFF(norm_weight_offset) SS_DIFF(embed_scale) SS_DIFF(query_pre_attn_scalar) SS_DIFF(rope_local_theta)
  SS_DIFF(linear_layers) SS_DIFF(linear_k_heads) SS_DIFF(linear_v_heads) SS_DIFF(linear_k_dim)
  SS_DIFF(linear_v_dim) SS_DIFF(linear_conv) SS_DIFF(shared_expert_gate)
#undef SS_DIFF
      // clang-format on
      for (const AttnVariant* v : AttnVariants())  // the attention variants' flags
                                                   // (model/attention.h)
      if (v->flag && a.*(v->flag) != b.*(v->flag) &&
          std::find(out.begin(), out.end(), v->flag_name) == out.end()) out.push_back(v->flag_name);
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
  void Ints(Key k, const std::vector<int64_t>& v) override {
    Set(k, v.empty() ? ordered_json::array() : ordered_json(v));
  }

 private:
  void Set(Key k, ordered_json v) {
    if (k.hf) j_[k.hf] = std::move(v);
  }
  ordered_json& j_;
};

ordered_json BuildFlatHfJson(const ModelConfig& c, const ArchEntry& family);

// The image-text form (ArchEntry::nested_text_config): the language model's settings under
// text_config, the class and its model_type at the top.
ordered_json BuildHfJson(const ModelConfig& c, const ArchEntry& family) {
  ordered_json flat = BuildFlatHfJson(c, family);
  if (!family.nested_text_config) return flat;
  ordered_json top;
  top["architectures"] = flat["architectures"];
  top["model_type"] = family.name;
  flat.erase("architectures");
  flat["model_type"] = std::string(family.name) + "_text";
  top["text_config"] = std::move(flat);
  return top;
}

ordered_json BuildFlatHfJson(const ModelConfig& c, const ArchEntry& family) {
  ordered_json j;
  j["architectures"] = {family.hf_class};
  j["model_type"] = family.name;
  JsonConfigWriter w(j);
  family.write(c, w);
  switch (c.rope_scaling) {
    case RopeScalingKind::kNone:
      break;
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
