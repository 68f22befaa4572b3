#include "model/family.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "model/attention.h"

namespace ss {

int ConfigReader::PositiveInt(Key k, std::optional<int64_t> fallback) const {
  const int64_t v = Int(k, fallback);
  if (v <= 0) Fail(k, "must be a positive size, found {}", v);
  if (v > kMaxSize) Fail(k, "is too large: {} (the limit is 2^30 = {})", v, kMaxSize);
  return static_cast<int>(v);
}

ActKind ReadAct(const ConfigReader& r, Key k, const std::string& fallback) {
  const std::string name = r.String(k, fallback);
  if (name == "silu" || name == "swish") return ActKind::kSilu;
  if (name == "gelu") return ActKind::kGelu;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast")
    return ActKind::kGeluTanh;
  if (name == "relu") return ActKind::kRelu;
  r.Fail(k, "is '{}'; supported: silu, gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, relu", name);
}

const char* ActName(ActKind act, const char* gelu_tanh_name) {
  switch (act) {
    case ActKind::kSilu:
      return "silu";
    case ActKind::kGelu:
      return "gelu";
    case ActKind::kGeluTanh:
      return gelu_tanh_name;
    case ActKind::kRelu:
      return "relu";
  }
  SS_ASSERT(false);
  return "";
}

void ReadLlamaCore(const ConfigReader& r, const FamilyDefaults& d, int head_dim_default,
                   ModelConfig* c, bool read_ffn_width) {
  const Key heads{"num_attention_heads", "attention.head_count"};
  const Key kv_heads{"num_key_value_heads", "attention.head_count_kv"};
  c->dim = r.PositiveInt({"hidden_size", "embedding_length"});
  c->n_layers = r.PositiveInt({"num_hidden_layers", "block_count"});
  c->n_heads = r.PositiveInt(heads);
  c->n_kv_heads = r.PositiveInt(kv_heads, c->n_heads);
  const int64_t head_dim =
      r.gguf() || head_dim_default == 0 ? c->dim / c->n_heads : head_dim_default;
  c->head_dim = r.PositiveInt({"head_dim", "attention.key_length"}, head_dim);
  if (read_ffn_width) c->hidden_dim = r.PositiveInt({"intermediate_size", "feed_forward_length"});
  if (!r.gguf()) c->vocab_size = r.PositiveInt({"vocab_size", nullptr});
  c->max_seq_len = r.PositiveInt({"max_position_embeddings", "context_length"},
                                 r.HfDefault<int64_t>(d.max_positions));
  c->norm_eps =
      r.Real({"rms_norm_eps", "attention.layer_norm_rms_epsilon"}, r.gguf() ? 1e-5 : d.norm_eps);
  c->norm = NormKind::kRms;
  c->act = ReadAct(r, {"hidden_act", nullptr}, "silu");
  c->gated_mlp = true;
  c->rope = RopeKind::kHalf;  // GGUF: replaced by the family map's file order at bind
  c->rope_theta = r.Real({"rope_theta", "rope.freq_base"}, r.gguf() ? 10000.0 : d.rope_theta);
  if (r.gguf()) {
    c->qkv_bias = r.HasTensor("blk.0.attn_q.bias");
    c->attn_out_bias = r.HasTensor("blk.0.attn_output.bias");
    c->mlp_bias = r.HasTensor("blk.0.ffn_gate.bias");
  }
  // The attention variant (model/attention.h): sinkscope's extension keys for the models its
  // trainer makes with --set attention=..., or in GGUF the variant's tensors (gpt-oss's sinks
  // included).
  ReadAttentionVariant(r, c);
  if (c->n_heads % c->n_kv_heads != 0)
    ss::Fail("{}: {} {} is not a multiple of {} {}", r.source(), r.Name(heads), c->n_heads,
             r.Name(kv_heads), c->n_kv_heads);
}

void WriteLlamaCore(const ModelConfig& c, ConfigWriter& w, CoreWrite options) {
  w.Int({"hidden_size", "embedding_length"}, c.dim);
  if (options.ffn_width) w.Int({"intermediate_size", "feed_forward_length"}, c.hidden_dim);
  w.Int({"num_hidden_layers", "block_count"}, c.n_layers);
  w.Int({"num_attention_heads", "attention.head_count"}, c.n_heads);
  w.Int({"num_key_value_heads", "attention.head_count_kv"}, c.n_kv_heads);
  w.Int({"head_dim", "attention.key_length"}, c.head_dim);
  w.Int({nullptr, "attention.value_length"}, c.head_dim);
  w.Int({"vocab_size", nullptr}, c.vocab_size);
  w.Int({"max_position_embeddings", "context_length"}, c.max_seq_len);
  w.Float({"rms_norm_eps", "attention.layer_norm_rms_epsilon"}, c.norm_eps);
  w.String({options.act_key, nullptr}, ActName(c.act));
  w.Float({"rope_theta", nullptr}, c.rope_theta);  // GGUF: rope.freq_base with the other RoPE keys
  WriteAttentionVariant(c, w,
                        options.native           ? options.native
                        : options.sink_extension ? nullptr
                                                 : &ModelConfig::attn_sinks);
}

void ReadAttentionBias(const ConfigReader& r, bool fallback, ModelConfig* c) {
  if (!r.gguf()) c->qkv_bias = c->attn_out_bias = r.Bool({"attention_bias", nullptr}, fallback);
}

std::vector<LayerAttention> ReadLayerTypes(const ConfigReader& r, int n_layers,
                                           LayerAttention (*fallback)(int layer, int pattern),
                                           int pattern) {
  const Key key{"layer_types", "sinkscope.sliding_layers"};
  std::vector<LayerAttention> kinds(n_layers);
  if (!r.Has(key)) {
    for (int l = 0; l < n_layers; ++l) kinds[l] = fallback(l, pattern);
    return kinds;
  }
  r.Spelled("layer_attention", key);
  if (r.gguf()) {
    const std::vector<int64_t> sliding = r.Ints(key);
    if (static_cast<int>(sliding.size()) != n_layers)
      r.Fail(key, "has {} entries, expected one per layer ({})", sliding.size(), n_layers);
    for (int l = 0; l < n_layers; ++l)
      kinds[l] = sliding[l] ? LayerAttention::kSliding : LayerAttention::kFull;
    return kinds;
  }
  const std::vector<std::string> types = r.Strings(key);
  if (static_cast<int>(types.size()) != n_layers)
    r.Fail(key, "must list one attention kind for each of the {} layers, found {}", n_layers,
           r.Dump(key));
  for (int l = 0; l < n_layers; ++l) {
    if (types[l] == "sliding_attention") {
      kinds[l] = LayerAttention::kSliding;
    } else if (types[l] == "full_attention") {
      kinds[l] = LayerAttention::kFull;
    } else {
      ss::Fail("{}: {}[{}] is \"{}\"; supported: \"sliding_attention\", \"full_attention\"",
               r.source(), r.Name(key), l, types[l]);
    }
  }
  return kinds;
}

void WriteLayerTypes(const ModelConfig& c, ConfigWriter& w) {
  std::vector<std::string> types;
  std::vector<int64_t> sliding;
  for (int l = 0; l < c.n_layers; ++l) {
    types.push_back(c.Window(l) > 0 ? "sliding_attention" : "full_attention");
    sliding.push_back(c.Window(l) > 0);
  }
  if (w.gguf()) {
    w.Ints({nullptr, "sinkscope.sliding_layers"}, sliding);
  } else {
    w.Strings({"layer_types", nullptr}, types);
  }
}

int ReadOptionalWindow(const ConfigReader& r) {
  const Key key{"sliding_window", "attention.sliding_window"};
  return r.Has(key) ? r.PositiveInt(key) : 0;
}

void WriteOptionalWindow(const ModelConfig& c, ConfigWriter& w) {
  const Key key{"sliding_window", "attention.sliding_window"};
  if (c.sliding_window > 0) {
    w.Int(key, c.sliding_window);
  } else {
    w.Null(key);
  }
}

int ReadSlidingWindow(const ConfigReader& r, std::optional<int64_t> fallback,
                      const ModelConfig& c) {
  const Key key{"sliding_window", "attention.sliding_window"};
  const int window = r.PositiveInt(key, fallback);
  if (window > c.max_seq_len)
    r.Fail(key, "{} is beyond the context ({} {})", window,
           r.Name({"max_position_embeddings", "context_length"}), c.max_seq_len);
  return window;
}

void ReadMoe(const ConfigReader& r, const char* experts, std::optional<int> experts_default,
             std::optional<int> per_tok_default, const char* width, const char* norm_key,
             bool norm_default, ModelConfig* c, std::optional<int> width_default) {
  const Key count{experts, "expert_count"}, per_tok{"num_experts_per_tok", "expert_used_count"};
  r.Spelled("n_experts", count);
  r.Spelled("n_experts_per_tok", per_tok);
  c->n_experts = r.PositiveInt(count, r.gguf() ? std::nullopt : experts_default);
  c->n_experts_per_tok = r.PositiveInt(per_tok, r.gguf() ? std::nullopt : per_tok_default);
  const Key expert_width{width, r.Has({nullptr, "expert_feed_forward_length"})
                                    ? "expert_feed_forward_length"
                                    : "feed_forward_length"};
  r.Spelled("hidden_dim", expert_width);
  c->hidden_dim = r.PositiveInt(expert_width, r.gguf() ? std::nullopt : width_default);
  c->norm_topk_prob = r.Bool({norm_key, "expert_weights_norm"}, norm_default);
  if (c->n_experts_per_tok > c->n_experts)
    r.Fail(per_tok, "{} exceeds the number of experts {}", c->n_experts_per_tok, c->n_experts);
}

void WriteMoe(const ModelConfig& c, ConfigWriter& w, const char* experts, const char* width,
              const char* norm_key) {
  w.Int({experts, "expert_count"}, c.n_experts);
  w.Int({"num_experts_per_tok", "expert_used_count"}, c.n_experts_per_tok);
  w.Int({width, "expert_feed_forward_length"}, c.hidden_dim);
  w.Bool({norm_key, "expert_weights_norm"}, c.norm_topk_prob);
}

void ReadQwenSlidingWindow(const ConfigReader& r, ModelConfig* c) {
  if (r.gguf() || !r.Bool({"use_sliding_window", nullptr}, false)) return;
  c->sliding_window = ReadSlidingWindow(r, 4096, *c);
  const Key first{"max_window_layers", nullptr};
  const int64_t from = r.Int(first, 28);
  if (from < 0) r.Fail(first, "must be 0 or more, found {}", from);
  c->layer_attention = ReadLayerTypes(
      r, c->n_layers,
      [](int l, int from) { return l >= from ? LayerAttention::kSliding : LayerAttention::kFull; },
      static_cast<int>(std::min<int64_t>(from, c->n_layers)));
  // No layer slides (max_window_layers >= the layer count): the window applies nowhere.
  if (std::none_of(c->layer_attention.begin(), c->layer_attention.end(),
                   [](LayerAttention a) { return a == LayerAttention::kSliding; })) {
    c->sliding_window = 0;
    c->layer_attention.clear();
  }
}

void WriteQwenSlidingWindow(const ModelConfig& c, ConfigWriter& w) {
  if (c.sliding_window == 0) {
    w.Bool({"use_sliding_window", nullptr}, false);
    return;
  }
  if (w.gguf())
    Fail(
        "{} with sliding-window layers cannot be written to GGUF: llama.cpp has no key for them "
        "and would run every layer with full attention",
        c.arch);
  int first = c.n_layers;
  for (int l = c.n_layers - 1; l >= 0; --l)
    if (c.Window(l) > 0) first = l;
  w.Bool({"use_sliding_window", nullptr}, true);
  w.Int({"sliding_window", nullptr}, c.sliding_window);
  w.Int({"max_window_layers", nullptr}, first);
  WriteLayerTypes(c, w);
}

void ReadMoeLayers(const ConfigReader& r, ModelConfig* c) {
  const Key step{"decoder_sparse_step", nullptr}, dense{"mlp_only_layers", nullptr};
  const int64_t every = r.Int(step, 1);
  if (every < 1) r.Fail(step, "must be 1 or more, found {}", every);
  // Qwen2MoeDecoderLayer / Qwen3MoeDecoderLayer: experts when the layer is not in mlp_only_layers
  // and (layer + 1) % decoder_sparse_step == 0; otherwise a dense MLP of intermediate_size.
  std::vector<bool> layers(c->n_layers);
  for (int l = 0; l < c->n_layers; ++l) layers[l] = (l + 1) % every != 0;
  if (r.Has(dense))
    for (int64_t l : r.Ints(dense)) {
      if (l < 0 || l >= c->n_layers)
        r.Fail(dense, "lists layer {}; the model has layers 0 to {}", l, c->n_layers - 1);
      layers[l] = true;
    }
  if (std::find(layers.begin(), layers.end(), true) == layers.end()) return;
  r.Spelled("dense_layers", r.Has(dense) ? dense : step);
  c->dense_layers = std::move(layers);
}

void WriteMoeLayers(const ModelConfig& c, ConfigWriter& w) {
  std::vector<int64_t> dense;
  for (int l = 0; l < static_cast<int>(c.dense_layers.size()); ++l)
    if (c.dense_layers[l]) dense.push_back(l);
  if (w.gguf() && !dense.empty())
    Fail(
        "{} with dense MLP layers among the expert layers cannot be written to GGUF: llama.cpp "
        "has no key for them",
        c.arch);
  w.Int({"decoder_sparse_step", nullptr}, 1);
  w.Ints({"mlp_only_layers", nullptr}, dense);
}

void ReadPartialRotary(const ConfigReader& r, Key primary, float fallback, ModelConfig* c) {
  if (r.gguf()) return;
  const Key nested{"rope_parameters.partial_rotary_factor", nullptr},
      top{"partial_rotary_factor", nullptr};
  Key key = primary;
  std::optional<Key> other;
  for (Key k : {nested, top})
    if (!other && std::string_view(k.hf) != primary.hf && r.Has(k)) other = k;
  float fraction = fallback;
  if (r.Has(primary)) {
    fraction = r.Real(primary);
    if (other && r.Real(*other) != fraction)
      ss::Fail("{}: {} {} and {} {} disagree; give one", r.source(), r.Name(primary), fraction,
               r.Name(*other), r.Real(*other));
  } else if (other) {
    key = *other;
    fraction = r.Real(key);
  }
  r.Spelled("rotary_dim", key);
  if (!(fraction > 0 && fraction <= 1)) r.Fail(key, "must be in (0, 1], found {}", fraction);
  // int(head_dim * fraction) as GPTNeoXAttention and Phi3RotaryEmbedding compute it; the epsilon
  // keeps a fraction written as rotary_dim / head_dim from rounding down.
  c->rotary_dim = static_cast<int>(std::floor(c->head_dim * static_cast<double>(fraction) + 1e-4));
  if (c->rotary_dim % 2 != 0)
    r.Fail(key, "{} gives an odd rotary dimension {} of head size {}", fraction, c->rotary_dim,
           c->head_dim);
  if (c->rotary_dim == c->head_dim) c->rotary_dim = 0;
}

}  // namespace ss
