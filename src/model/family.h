// A model family's configuration, read and written through one interface over both file formats
// (Hugging Face config.json and GGUF metadata), so that a family's file (model/arch_<family>.cpp)
// says once how each of its settings is spelled and checked. The readers and writers themselves
// live in io/ (io/hf_config.cpp, io/model_files.cpp); this header has no JSON or GGUF types.
//
// A Key names one setting in both formats: {config.json key, GGUF key}. A config.json key may be
// a dotted path into nested objects ("rope_parameters.partial_rotary_factor"). A GGUF key is taken
// under the family's architecture prefix ("embedding_length" -> "llama.embedding_length") unless it
// starts with "sinkscope." (keys sinkscope writes for what llama.cpp has no key for). A null side
// means the setting does not exist in that format: it reads as absent and is not written.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "model/config.h"

namespace ss {

struct Key {
  const char* hf = nullptr;
  const char* gguf = nullptr;
};

class ConfigReader {
 public:
  virtual ~ConfigReader() = default;
  virtual bool gguf() const = 0;
  // The file, for messages ("model/config.json", "model.gguf").
  virtual const std::string& source() const = 0;
  // The key as the file spells it ("rope_scaling.factor", "llama.embedding_length").
  virtual std::string Name(Key k) const = 0;
  // Present and not null.
  virtual bool Has(Key k) const = 0;
  // Present, null included (config.json's null turns some settings off).
  virtual bool Given(Key k) const = 0;
  // Typed reads. Absent (or null) with no fallback, or of the wrong type, throws ss::Error naming
  // the file and the key.
  virtual int64_t Int(Key k, std::optional<int64_t> fallback = std::nullopt) const = 0;
  virtual double Float(Key k, std::optional<double> fallback = std::nullopt) const = 0;
  virtual bool Bool(Key k, bool fallback) const = 0;
  virtual std::string String(Key k, const std::string& fallback) const = 0;
  virtual std::vector<std::string> Strings(Key k) const = 0;  // a list of strings
  virtual std::vector<int64_t> Ints(Key k) const = 0;         // a list of integers
  // The value as the file holds it, for messages about refused values.
  virtual std::string Dump(Key k) const = 0;
  // GGUF: the file holds a tensor of this name. config.json: always false.
  virtual bool HasTensor(const std::string& name) const = 0;

  // Int() in (0, kMaxSize]; zero or below is "must be a positive size", above the limit "is too
  // large".
  static constexpr int64_t kMaxSize = int64_t{1} << 30;
  int PositiveInt(Key k, std::optional<int64_t> fallback = std::nullopt) const;
  float Real(Key k, std::optional<double> fallback = std::nullopt) const {
    return static_cast<float>(Float(k, fallback));
  }
  // `v` when reading config.json, none when reading GGUF: transformers' defaults apply to
  // config.json only; llama.cpp writes every key it reads.
  template <typename T>
  std::optional<T> HfDefault(T v) const {
    return gguf() ? std::nullopt : std::optional<T>(v);
  }
  // Throws ss::Error "<source>: '<key>' <message>".
  template <typename... Args>
  [[noreturn]] void Fail(Key k, fmt::format_string<Args...> f, Args&&... args) const {
    ss::Fail("{}: '{}' {}", source(), Name(k), fmt::format(f, std::forward<Args>(args)...));
  }
  // For ValidateConfig's messages: the ModelConfig field `field` was read from `k`.
  void Spelled(const std::string& field, Key k) const { keys_[field] = Name(k); }
  ConfigKeys& keys() const { return keys_; }

 private:
  mutable ConfigKeys keys_;
};

class ConfigWriter {
 public:
  virtual ~ConfigWriter() = default;
  virtual bool gguf() const = 0;
  virtual void Int(Key k, int64_t v) = 0;
  virtual void Float(Key k, float v) = 0;
  virtual void Bool(Key k, bool v) = 0;
  virtual void String(Key k, const std::string& v) = 0;
  virtual void Null(Key k) = 0;  // config.json: null; GGUF: nothing
  virtual void Strings(Key k, const std::vector<std::string>& v) = 0;
  virtual void Ints(Key k, const std::vector<int64_t>& v) = 0;
  // A list of flags: GGUF a bool array; config.json (no family writes one yet) 0 / 1.
  virtual void Bools(Key k, const std::vector<bool>& v) {
    Ints(k, std::vector<int64_t>(v.begin(), v.end()));
  }
};

// What a family's config.json omits takes transformers' configuration_<family>.py default.
struct FamilyDefaults {
  bool tie_embeddings = false;
  float norm_eps = 1e-6f;
  float rope_theta = 10000.0f;
  int max_positions = 2048;
  int bos = -1;  // -1: None
  int eos = -1;
};

// ---- Shared by the families (model/family.cpp).

// hidden_act-style names: silu / swish, gelu, gelu_new / gelu_pytorch_tanh / gelu_fast, relu.
ActKind ReadAct(const ConfigReader& r, Key k, const std::string& fallback);
// `gelu_tanh_name`: how the family spells the tanh GELU ("gelu_new" for GPT-2).
const char* ActName(ActKind act, const char* gelu_tanh_name = "gelu_pytorch_tanh");

// The Llama-style core every family but GPT-2 and GPT-NeoX shares: sizes, heads, head_dim
// (`head_dim_default`; 0: hidden / heads), vocabulary (config.json; GGUF's comes from the
// embedding), context, RMSNorm epsilon, activation, rotate-half RoPE and its base, biases (GGUF:
// from the tensors present), the attention variant (model/attention.h: sinkscope's extension keys
// such as "sinkscope_attn_sinks"; GGUF: the variant's tensors or keys), and intermediate_size into
// hidden_dim unless `read_ffn_width` is false.
void ReadLlamaCore(const ConfigReader& r, const FamilyDefaults& d, int head_dim_default,
                   ModelConfig* c, bool read_ffn_width = true);
// Writes what ReadLlamaCore reads. `act_key`: config.json's name for the activation.
struct CoreWrite {
  bool ffn_width = true;  // intermediate_size / feed_forward_length is hidden_dim
  // "sinkscope_attn_sinks" when the model has learned sinks (false: the family's own, gpt-oss)
  bool sink_extension = true;
  const char* act_key = "hidden_act";
  // The family's own attention variant (Qwen3-Next's output gate): its flag is not written.
  bool ModelConfig::*native = nullptr;
};
void WriteLlamaCore(const ModelConfig& c, ConfigWriter& w, CoreWrite options = {});
// config.json "attention_bias" (q, k, v and o projections); GGUF: the tensors present.
void ReadAttentionBias(const ConfigReader& r, bool fallback, ModelConfig* c);

// Per-layer attention kinds: config.json "layer_types" ("sliding_attention" / "full_attention"),
// GGUF "sinkscope.sliding_layers" (0 / 1); absent: `fallback(layer)` (the family's pattern, as
// transformers' config class and llama.cpp both derive it).
std::vector<LayerAttention> ReadLayerTypes(const ConfigReader& r, int n_layers,
                                           LayerAttention (*fallback)(int layer, int pattern),
                                           int pattern);
void WriteLayerTypes(const ModelConfig& c, ConfigWriter& w);
// Mistral's optional window over every layer: sliding_window (null or absent: none) /
// attention.sliding_window.
int ReadOptionalWindow(const ConfigReader& r);
void WriteOptionalWindow(const ModelConfig& c, ConfigWriter& w);
// sliding_window / attention.sliding_window: positive and within the context.
int ReadSlidingWindow(const ConfigReader& r, std::optional<int64_t> fallback, const ModelConfig& c);

// Mixture-of-experts counts: `experts` (config.json key; GGUF expert_count), experts per token
// (num_experts_per_tok / expert_used_count), the expert width `width` (config.json key; GGUF
// expert_feed_forward_length, else feed_forward_length), and whether the top-k weights are
// renormalised (config.json `norm_key` if given; GGUF expert_weights_norm, else `norm_default`).
void ReadMoe(const ConfigReader& r, const char* experts, std::optional<int> experts_default,
             std::optional<int> per_tok_default, const char* width, const char* norm_key,
             bool norm_default, ModelConfig* c, std::optional<int> width_default = std::nullopt);
void WriteMoe(const ModelConfig& c, ConfigWriter& w, const char* experts, const char* width,
              const char* norm_key);

// A partial rotary fraction (config.json only; GGUF gives rope.dimension_count): `primary`
// ("rotary_pct" for GPT-NeoX, "partial_rotary_factor" for Phi-3), else "partial_rotary_factor"
// inside "rope_parameters" (transformers >= 5) or at the top level, else `fallback`. Two of them
// present and different is refused (one would be ignored). Sets rotary_dim =
// floor(head_dim * fraction) (0 when that is the whole head); an odd result is refused.
void ReadPartialRotary(const ConfigReader& r, Key primary, float fallback, ModelConfig* c);

// Qwen2 / Qwen3 / Qwen3-MoE windows: sliding_window applies only with use_sliding_window, and
// then to layers from max_window_layers on (transformers' Qwen2Config.layer_types), unless
// layer_types lists them. llama.cpp has no key for them: GGUF neither reads nor writes them.
void ReadQwenSlidingWindow(const ConfigReader& r, ModelConfig* c);
void WriteQwenSlidingWindow(const ModelConfig& c, ConfigWriter& w);

// Which layers of a mixture-of-experts model have experts (Qwen-MoE's mlp_only_layers and
// decoder_sparse_step); the others have a dense MLP of width dense_hidden_dim.
void ReadMoeLayers(const ConfigReader& r, ModelConfig* c);
void WriteMoeLayers(const ModelConfig& c, ConfigWriter& w);

}  // namespace ss
