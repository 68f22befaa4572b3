#include "io/model_files.h"

#include <cmath>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "common/error.h"
#include "common/file_util.h"
#include "io/hf_config.h"
#include "kernels/dequant.h"
#include "model/arch.h"
#include "model/precision.h"

namespace ss {
namespace {

class SafetensorsSource : public TensorSource {
 public:
  SafetensorsSource(SafetensorsDir dir, std::string source)
      : dir_(std::move(dir)), source_(std::move(source)) {}
  bool Has(const std::string& name) const override { return dir_.Has(name); }
  size_t count() const override { return dir_.names().size(); }
  std::vector<int64_t> Shape(const std::string& name) const override {
    return dir_.Info(name).shape;
  }
  std::vector<std::string> Names() const override { return dir_.names(); }
  Tensor Load(const std::string& name) const override { return dir_.Load(name); }
  bool LoadsAsView(const std::string& name) const override {
    return dir_.Info(name).dtype == SafetensorsDtype::kF32;
  }
  const std::string& source() const override { return source_; }

 private:
  SafetensorsDir dir_;
  std::string source_;
};

class GgufSource : public TensorSource {
 public:
  explicit GgufSource(const GgufFile& gguf) : gguf_(gguf) {}
  bool Has(const std::string& name) const override { return gguf_.FindTensor(name) != nullptr; }
  size_t count() const override { return gguf_.tensors().size(); }
  std::vector<std::string> Names() const override {
    std::vector<std::string> names;
    for (const GgufTensorInfo& t : gguf_.tensors()) names.push_back(t.name);
    return names;
  }
  std::vector<int64_t> Shape(const std::string& name) const override {
    const GgufTensorInfo* t = gguf_.FindTensor(name);
    return std::vector<int64_t>(t->shape.rbegin(), t->shape.rend());
  }
  Tensor Load(const std::string& name) const override {
    const GgufTensorInfo* t = gguf_.FindTensor(name);
    if (!IsDequantizable(t->type))
      Fail("{}: tensor '{}' has ggml type {}, which sinkscope cannot dequantise (supported: F32, "
           "F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K)", gguf_.path(), name, GgmlTypeName(t->type));
    Tensor out = Tensor::Zeros(Shape(name));
    Dequantize(t->type, t->data, out.data(), out.numel());
    if (gguf_.mapped()) ReleaseMappedPages(t->data, t->n_bytes);
    return out;
  }
  const std::string& source() const override { return gguf_.path(); }

 private:
  const GgufFile& gguf_;
};

// Binds the family's tensors and finishes the weights (tied head, RoPE order of the file).
// `layers_key` names the config's layer count in errors.
void BindModel(Model& model, TensorNaming naming, const TensorSource& source,
               const std::string& layers_key, Precision precision) {
  // Every layer has tensors of its own: a layer count beyond the tensor count is a corrupt or
  // hostile header, refused before anything is sized from it.
  if (model.config.n_layers <= 0 || static_cast<size_t>(model.config.n_layers) > source.count())
    Fail("{}: {} layers, but the file holds only {} tensors", source.source(),
         model.config.n_layers, source.count());
  TensorMap map = FamilyTensorMap(model.config, naming, model.weights);
  if (model.config.rope != RopeKind::kNone) model.config.rope = map.file_rope;
  CheckNoExtraLayers(map, source, model.config.n_layers, layers_key);
  std::unique_ptr<WeightPacker> packer;
  if (precision != Precision::kF32)
    packer = std::make_unique<WeightPacker>(model.weights, precision);
  // Refused before anything is allocated when the weights cannot fit.
  const uint64_t bytes = BindBytes(map, source, [&](const Tensor* t) {
    return packer && packer->Packs(t) ? BytesPerWeight(precision) : 0.0;
  });
  CheckMemory(bytes, packer ? fmt::format("{}: loading the weights (projections in {})",
                                          source.source(), PrecisionName(precision))
                            : fmt::format("{}: loading the weights in f32 (--precision bf16 or "
                                          "q8_0 holds the projections in a half or a quarter of "
                                          "the memory)",
                                          source.source()));
  BindTensors(map, source, model.config.arch,
              packer ? [&packer](Tensor* t) { packer->Bound(t); } : std::function<void(Tensor*)>());
  if (model.config.tied_embeddings) model.weights.lm_head = model.weights.token_embedding;
  if (packer) packer->Finish(model);
}

bool IsRmsFamily(const std::string& gguf_arch) {
  return gguf_arch != "gpt2" && gguf_arch != "gptneox";
}

// The GGUF metadata key of each ModelConfig field, for ValidateConfig's messages.
ConfigKeys GgufKeys(const std::string& arch) {
  const std::string p = arch + ".";
  return {{"dim", p + "embedding_length"},
          {"hidden_dim", p + "feed_forward_length"},
          {"n_layers", p + "block_count"},
          {"n_heads", p + "attention.head_count"},
          {"n_kv_heads", p + "attention.head_count_kv"},
          {"head_dim", p + "attention.key_length"},
          {"vocab_size", "token_embd.weight (rows)"},
          {"max_seq_len", p + "context_length"},
          {"norm_eps", p + (IsRmsFamily(arch) ? "attention.layer_norm_rms_epsilon"
                                              : "attention.layer_norm_epsilon")},
          {"rope_theta", p + "rope.freq_base"},
          {"rotary_dim", p + "rope.dimension_count"},
          {"rope_scaling_factor", p + "rope.scaling.factor"},
          {"rope_low_freq_factor", "sinkscope.rope_scaling.llama3[1]"},
          {"rope_high_freq_factor", "sinkscope.rope_scaling.llama3[2]"},
          {"rope_original_max_seq_len", "sinkscope.rope_scaling.llama3[3]"},
          {"final_logit_softcap", p + "final_logit_softcapping"},
          {"sliding_window", p + "attention.sliding_window"},
          {"rope_yarn_beta_fast", p + "rope.scaling.yarn_beta_fast"},
          {"rope_yarn_beta_slow", p + "rope.scaling.yarn_beta_slow"},
          {"swiglu_limit", "sinkscope.swiglu_limit"},
          {"attn_logit_softcap", p + "attn_logit_softcapping"},
          {"query_pre_attn_scalar", "sinkscope.query_pre_attn_scalar"},
          {"rope_local_theta", "sinkscope.rope_local_theta"},
          {"layer_attention", "sinkscope.sliding_layers"},
          {"n_experts", p + "expert_count"},
          {"n_experts_per_tok", p + "expert_used_count"},
          {"bos_id", "tokenizer.ggml.bos_token_id"},
          {"eos_id", "tokenizer.ggml.eos_token_id"}};
}

}  // namespace

Model LoadHfModel(const std::string& dir, Precision precision) {
  Model model;
  model.config = ReadHfConfig(dir);
  model.source = dir;
  model.format = "hf";
  if (model.config.n_shared_experts > 0)
    Fail("{}: shared experts (shared_expert_intermediate_size) are not supported", dir);
  SafetensorsSource source(SafetensorsDir::Open(dir), dir);
  BindModel(model, TensorNaming::kHf, source,
            model.config.arch == "gpt2" ? "n_layer" : "num_hidden_layers", precision);
  return model;
}

Model LoadGgufModel(const std::string& path, Precision precision) {
  return LoadGgufModel(GgufFile::Open(path), precision);
}

Model LoadGgufModel(const GgufFile& gguf, Precision precision) {
  const std::string& path = gguf.path();
  if (gguf.tensors().empty())
    Fail("{}: the GGUF file holds no tensors (a vocabulary-only file?): it is not a model", path);
  const std::string arch = gguf.GetString("general.architecture");
  const ArchEntry* entry = FindGgufArchitecture(arch);
  if (!entry) {
    std::string supported;
    for (const auto& a : Architectures())
      if (a.gguf_arch && supported.find(a.gguf_arch) == std::string::npos)
        supported += (supported.empty() ? "" : ", ") + std::string(a.gguf_arch);
    Fail("{}: GGUF architecture '{}' is not supported (supported: {})", path, arch, supported);
  }
  const std::string p = arch + ".";
  auto positive = [&](const std::string& key, int64_t fallback) {
    int64_t v = fallback < 0 ? gguf.GetInt(p + key) : gguf.GetInt(p + key, fallback);
    if (v <= 0 || v > (int64_t{1} << 30)) Fail("{}: {}{} is {}, expected a positive size", path, p, key, v);
    return static_cast<int>(v);
  };
  auto real = [&](const std::string& key, double fallback) {
    return gguf.Find(p + key) ? gguf.GetFloat(p + key) : fallback;
  };
  Model model;
  model.source = path;
  model.format = "gguf";
  ModelConfig& c = model.config;
  c.arch = entry->name;
  c.dim = positive("embedding_length", -1);
  c.n_layers = positive("block_count", -1);
  const int64_t experts = gguf.GetInt(p + "expert_count", 0);
  if (experts < 0 || experts > (int64_t{1} << 20))
    Fail("{}: {}expert_count is {}, expected 0 (dense) to {}", path, p, experts, int64_t{1} << 20);
  c.n_experts = static_cast<int>(experts);
  c.hidden_dim = c.n_experts > 0 && gguf.Find(p + "expert_feed_forward_length")
                     ? positive("expert_feed_forward_length", -1)
                     : positive("feed_forward_length", -1);
  if (c.n_experts > 0) {
    c.n_experts_per_tok = positive("expert_used_count", -1);
    if (c.n_experts_per_tok > c.n_experts)
      Fail("{}: {}expert_used_count {} exceeds expert_count {}", path, p, c.n_experts_per_tok, c.n_experts);
    // Mixtral (stored as llama) always renormalises; the others say so in expert_weights_norm.
    c.norm_topk_prob = gguf.GetBool(p + "expert_weights_norm", arch == "llama");
    // Qwen3-MoE's dense width (config.json intermediate_size) rides in feed_forward_length.
    const int dense = positive("feed_forward_length", c.hidden_dim);
    if (arch == "qwen3moe" && dense != c.hidden_dim) c.dense_hidden_dim = dense;
  }
  c.n_heads = positive("attention.head_count", -1);
  c.n_kv_heads = positive("attention.head_count_kv", c.n_heads);
  c.head_dim = positive("attention.key_length", c.dim / c.n_heads);
  if (c.n_heads % c.n_kv_heads != 0)
    Fail("{}: {}attention.head_count {} is not a multiple of head_count_kv {}", path, p, c.n_heads,
         c.n_kv_heads);
  c.max_seq_len = positive("context_length", -1);
  const GgufTensorInfo* embd = gguf.FindTensor("token_embd.weight");
  if (!embd) Fail("{}: missing tensor 'token_embd.weight'", path);
  if (embd->shape.size() != 2) Fail("{}: token_embd.weight has {} dimensions, expected 2", path, embd->shape.size());
  c.vocab_size = static_cast<int>(embd->shape[1]);
  c.rope_theta = static_cast<float>(real("rope.freq_base", 10000.0));
  c.bos_id = static_cast<int>(gguf.GetInt("tokenizer.ggml.bos_token_id", -1));
  c.eos_id = static_cast<int>(gguf.GetInt("tokenizer.ggml.eos_token_id", -1));
  c.tied_embeddings = gguf.FindTensor("output.weight") == nullptr;
  auto has = [&](const char* name) { return gguf.FindTensor(name) != nullptr; };
  // Family conventions (llama.cpp's llm_build_* for each architecture).
  if (IsRmsFamily(arch)) {
    c.norm = NormKind::kRms;
    c.norm_eps = static_cast<float>(real("attention.layer_norm_rms_epsilon", 1e-5));
    c.act = ActKind::kSilu;
    c.gated_mlp = true;
    c.rope = RopeKind::kHalf;  // replaced by the family map's file order at bind
    c.qkv_bias = has("blk.0.attn_q.bias");
    c.attn_out_bias = has("blk.0.attn_output.bias");
    c.mlp_bias = has("blk.0.ffn_gate.bias");
    c.attn_sinks = has("blk.0.attn_sinks.weight");  // gpt-oss, or sinkscope's sink-logit models
  } else {
    c.norm = NormKind::kLayer;
    c.norm_eps = static_cast<float>(real("attention.layer_norm_epsilon", 1e-5));
    c.gated_mlp = false;
    c.qkv_bias = has("blk.0.attn_qkv.bias");
    c.attn_out_bias = has("blk.0.attn_output.bias");
    c.mlp_bias = true;
  }
  if (arch == "qwen2") c.qkv_bias = true;
  if (arch == "qwen3" || arch == "qwen3moe") c.qk_norm = QkNormKind::kPerHead;
  if (arch == "olmoe") c.qk_norm = QkNormKind::kFull;
  if (arch == "llama" && c.n_experts > 0) c.arch = "mixtral";
  if (arch == "olmo2") {
    c.qk_norm = QkNormKind::kFull;
    c.post_norms = true;
  }
  if (arch == "gpt2") {
    c.act = ActKind::kGeluTanh;
    c.rope = RopeKind::kNone;
    c.rope_theta = 0.0f;
    c.learned_pos = true;
  }
  if (arch == "gptneox") {
    c.act = ActKind::kGelu;
    c.rope = RopeKind::kHalf;
    c.parallel_residual = gguf.GetBool(p + "use_parallel_residual", true);
  }
  if (c.rope != RopeKind::kNone) {
    int rot = positive("rope.dimension_count", c.head_dim);
    if (rot > c.head_dim || rot % 2 != 0)
      Fail("{}: {}rope.dimension_count {} must be even and at most the head size {}", path, p, rot,
           c.head_dim);
    c.rotary_dim = rot == c.head_dim ? 0 : rot;
    std::string scaling = gguf.GetString(p + "rope.scaling.type", "none");
    if (scaling == "linear") {
      c.rope_scaling = RopeScalingKind::kLinear;
      c.rope_scaling_factor = static_cast<float>(real("rope.scaling.factor", 1.0));
    } else if (scaling == "yarn") {
      c.rope_scaling = RopeScalingKind::kYarn;
      c.rope_scaling_factor = static_cast<float>(real("rope.scaling.factor", 1.0));
      c.rope_original_max_seq_len = positive("rope.scaling.original_context_length", -1);
      c.rope_yarn_beta_fast = static_cast<float>(real("rope.scaling.yarn_beta_fast", 32.0));
      c.rope_yarn_beta_slow = static_cast<float>(real("rope.scaling.yarn_beta_slow", 1.0));
      // llama.cpp rounds the ramp's ends (ggml_rope_yarn_corr_dims); a checkpoint whose
      // config.json said truncate = false (gpt-oss) carries sinkscope's key.
      c.rope_yarn_truncate = gguf.GetBool("sinkscope.rope_yarn_truncate", true);
    } else if (scaling != "none") {
      Fail("{}: {}rope.scaling.type '{}' is not supported (supported: none, linear, yarn; Llama 3 "
           "scaling comes as rope_freqs.weight)", path, p, scaling);
    }
  }
  c.final_logit_softcap = static_cast<float>(real("final_logit_softcapping", 0.0));
  if (arch == "gemma2" || arch == "gemma3") {
    const bool gemma3 = arch == "gemma3";
    c.act = ActKind::kGeluTanh;
    c.norm_weight_offset = 1.0f;  // the file's norms hold 1 + w; the map subtracts the 1
    c.embed_scale = std::sqrt(static_cast<float>(c.dim));
    // llama.cpp derives the query scale from the head size; sinkscope writes HF's value.
    c.query_pre_attn_scalar = static_cast<float>(gguf.Find("sinkscope.query_pre_attn_scalar")
                                                     ? gguf.GetFloat("sinkscope.query_pre_attn_scalar")
                                                     : c.head_dim);
    c.attn_logit_softcap = static_cast<float>(real("attn_logit_softcapping", 0.0));
    if (gemma3) {
      c.qk_norm = QkNormKind::kPerHead;
      c.rope_local_theta = static_cast<float>(gguf.Find("sinkscope.rope_local_theta")
                                                  ? gguf.GetFloat("sinkscope.rope_local_theta") : 10000.0);
    }
  }
  if (arch == "gpt-oss" || arch == "gemma2" || arch == "gemma3") {
    // llama.cpp's sliding layers: gpt-oss and Gemma 2 every other one from layer 0, Gemma 3 five
    // in six; a file sinkscope wrote lists them (sinkscope.sliding_layers).
    const int pattern = arch == "gemma3" ? 6 : 2;
    c.layer_attention.assign(c.n_layers, LayerAttention::kFull);
    if (gguf.Find("sinkscope.sliding_layers")) {
      const std::vector<int64_t> sliding = gguf.GetIntArray("sinkscope.sliding_layers");
      if (static_cast<int>(sliding.size()) != c.n_layers)
        Fail("{}: sinkscope.sliding_layers has {} entries, expected one per layer ({})", path,
             sliding.size(), c.n_layers);
      for (int l = 0; l < c.n_layers; ++l)
        if (sliding[l]) c.layer_attention[l] = LayerAttention::kSliding;
    } else {
      for (int l = 0; l < c.n_layers; ++l)
        if ((l + 1) % pattern != 0) c.layer_attention[l] = LayerAttention::kSliding;
    }
  }
  if (arch == "gpt-oss") {
    c.attn_sinks = c.moe_bias = true;
    c.norm_topk_prob = true;  // llama.cpp: softmax over the chosen experts' logits
    c.swiglu_limit = static_cast<float>(gguf.Find("sinkscope.swiglu_limit")
                                            ? gguf.GetFloat("sinkscope.swiglu_limit") : 7.0);
  }
  const int window = static_cast<int>(gguf.GetInt(p + "attention.sliding_window", 0));
  if (window > 0) {
    if (c.arch != "llama" && c.arch != "mixtral" && c.layer_attention.empty())
      Fail("{}: {}attention.sliding_window is not supported for {}", path, p, arch);
    if (c.arch == "llama") c.arch = "mistral";  // Llama with a window: MistralForCausalLM
    c.sliding_window = window;
  }
  ValidateConfig(c, path, GgufKeys(arch));
  GgufSource source(gguf);
  BindModel(model, TensorNaming::kGguf, source, p + "block_count", precision);
  if (gguf.Find("sinkscope.rope_scaling.llama3") && !model.weights.rope_freq_factors.empty()) {
    // Written by AddGgufModel: restore the Llama 3 rule if it reproduces rope_freqs.weight.
    std::vector<double> p3 = gguf.GetFloatArray("sinkscope.rope_scaling.llama3");
    if (p3.size() != 4) Fail("{}: sinkscope.rope_scaling.llama3 has {} values, expected 4", path, p3.size());
    ModelConfig rule = c;
    rule.rope_scaling = RopeScalingKind::kLlama3;
    rule.rope_scaling_factor = static_cast<float>(p3[0]);
    rule.rope_low_freq_factor = static_cast<float>(p3[1]);
    rule.rope_high_freq_factor = static_cast<float>(p3[2]);
    rule.rope_original_max_seq_len = static_cast<int>(p3[3]);
    std::vector<double> from_rule = RopeInvFrequencies(rule, Tensor());
    std::vector<double> from_file = RopeInvFrequencies(c, model.weights.rope_freq_factors);
    bool same = from_rule.size() == from_file.size();
    for (size_t i = 0; same && i < from_rule.size(); ++i)
      same = std::abs(from_rule[i] - from_file[i]) <= 1e-6 * from_rule[i];
    if (same) {
      ValidateConfig(rule, path, GgufKeys(arch));
      c = rule;
      model.weights.rope_freq_factors = Tensor();
    }
  }
  return model;
}

ModelConfig HfConfigFor(const Model& model, SafetensorsDtype dtype) {
  ModelConfig c = model.config;
  if (!model.weights.rope_freq_factors.empty())
    Fail("{}: the model carries per-frequency RoPE factors (GGUF rope_freqs.weight), which "
         "config.json cannot express", model.source);
  if (c.rope != RopeKind::kNone) c.rope = RopeKind::kHalf;
  c.torch_dtype = dtype == SafetensorsDtype::kF32   ? "float32"
                  : dtype == SafetensorsDtype::kF16 ? "float16"
                                                    : "bfloat16";
  HfConfigJson(c);  // throws, naming the fields, if config.json cannot hold this config
  return c;
}

void WriteHfModel(const Model& model, const std::string& dir, SafetensorsDtype dtype) {
  ModelConfig config = HfConfigFor(model, dtype);
  ModelWeights weights = model.weights;  // tensor handles: no data copied
  TensorMap map = FamilyTensorMap(model.config, TensorNaming::kHf, weights);
  auto tensors = ExportTensors(map, model.config.rope, model.config.head_dim, model.config.rot_dim());
  namespace fs = std::filesystem;
  WriteSafetensors((fs::path(dir) / "model.safetensors").string(), tensors, dtype,
                   {{"format", "pt"}});
  WriteHfConfig((fs::path(dir) / "config.json").string(), config);
}

void AddGgufModel(const Model& model, GgufWriter& w, uint32_t ggml_type) {
  const ModelConfig& c = model.config;
  const ArchEntry& entry = FindArchitecture(c.arch);
  if (!entry.gguf_arch) Fail("architecture '{}' has no GGUF naming", c.arch);
  const std::string arch = entry.gguf_arch;
  const std::string p = arch + ".";
  w.SetString("general.architecture", arch);
  w.SetString("general.name", std::filesystem::path(model.source).filename().string());
  w.SetU32(p + "context_length", c.max_seq_len);
  w.SetU32(p + "embedding_length", c.dim);
  w.SetU32(p + "block_count", c.n_layers);
  w.SetU32(p + "feed_forward_length", c.n_experts > 0 && c.dense_hidden_dim > 0 ? c.dense_hidden_dim : c.hidden_dim);
  if (c.n_experts > 0) {
    w.SetU32(p + "expert_count", c.n_experts);
    w.SetU32(p + "expert_used_count", c.n_experts_per_tok);
    w.SetU32(p + "expert_feed_forward_length", c.hidden_dim);
    w.SetBool(p + "expert_weights_norm", c.norm_topk_prob);
  }
  w.SetU32(p + "attention.head_count", c.n_heads);
  w.SetU32(p + "attention.head_count_kv", c.n_kv_heads);
  w.SetU32(p + "attention.key_length", c.head_dim);
  w.SetU32(p + "attention.value_length", c.head_dim);
  w.SetU32(p + "vocab_size", c.vocab_size);
  if (c.norm == NormKind::kRms) {
    w.SetF32(p + "attention.layer_norm_rms_epsilon", c.norm_eps);
  } else {
    w.SetF32(p + "attention.layer_norm_epsilon", c.norm_eps);
  }
  ModelWeights weights = model.weights;
  if (c.rope != RopeKind::kNone) {
    w.SetF32(p + "rope.freq_base", c.rope_theta);
    w.SetU32(p + "rope.dimension_count", c.rot_dim());
    if (c.rope_scaling == RopeScalingKind::kLinear) {
      w.SetString(p + "rope.scaling.type", "linear");
      w.SetF32(p + "rope.scaling.factor", c.rope_scaling_factor);
    } else if (c.rope_scaling == RopeScalingKind::kLlama3) {
      // llama.cpp's form: rope_freqs.weight holds, per frequency, base / scaled.
      if (arch != "llama") Fail("Llama 3 RoPE scaling in GGUF is only defined for llama");
      ModelConfig plain = c;
      plain.rope_scaling = RopeScalingKind::kNone;
      std::vector<double> base = RopeInvFrequencies(plain, Tensor());
      std::vector<double> scaled = RopeInvFrequencies(c, weights.rope_freq_factors);
      Tensor factors = Tensor::Zeros({static_cast<int64_t>(base.size())});
      for (size_t i = 0; i < base.size(); ++i) factors[i] = static_cast<float>(base[i] / scaled[i]);
      weights.rope_freq_factors = factors;
      // The rule's parameters too, so a sinkscope reader can restore config.json's rope_scaling
      // (llama.cpp ignores keys it does not know).
      w.SetF32Array("sinkscope.rope_scaling.llama3",
                    {c.rope_scaling_factor, c.rope_low_freq_factor, c.rope_high_freq_factor,
                     static_cast<float>(c.rope_original_max_seq_len)});
    }
  }
  if (c.sliding_window > 0) w.SetU32(p + "attention.sliding_window", c.sliding_window);
  if (c.rope_scaling == RopeScalingKind::kYarn) {
    w.SetString(p + "rope.scaling.type", "yarn");
    w.SetF32(p + "rope.scaling.factor", c.rope_scaling_factor);
    w.SetU32(p + "rope.scaling.original_context_length", c.rope_original_max_seq_len);
    w.SetF32(p + "rope.scaling.yarn_beta_fast", c.rope_yarn_beta_fast);
    w.SetF32(p + "rope.scaling.yarn_beta_slow", c.rope_yarn_beta_slow);
    w.SetBool("sinkscope.rope_yarn_truncate", c.rope_yarn_truncate);
  }
  if (!c.layer_attention.empty()) {
    if (arch != "gpt-oss" && arch != "gemma2" && arch != "gemma3")
      Fail("per-layer sliding windows in GGUF are only defined for gpt-oss, gemma2 and gemma3");
    std::vector<int32_t> sliding(c.n_layers);
    for (int l = 0; l < c.n_layers; ++l) sliding[l] = c.Window(l) > 0;
    w.SetI32Array("sinkscope.sliding_layers", sliding);
  }
  if (c.swiglu_limit > 0) {
    if (arch != "gpt-oss") Fail("the clamped expert activation in GGUF is only defined for gpt-oss");
    w.SetF32("sinkscope.swiglu_limit", c.swiglu_limit);
  }
  if (arch == "gptneox") w.SetBool(p + "use_parallel_residual", c.parallel_residual);
  // llama.cpp's key (Gemma 2); readers of other architectures ignore it, sinkscope applies it.
  if (c.final_logit_softcap != 0) w.SetF32(p + "final_logit_softcapping", c.final_logit_softcap);
  if (c.attn_logit_softcap != 0) w.SetF32(p + "attn_logit_softcapping", c.attn_logit_softcap);
  if (c.query_pre_attn_scalar > 0) w.SetF32("sinkscope.query_pre_attn_scalar", c.query_pre_attn_scalar);
  if (c.rope_local_theta > 0) w.SetF32("sinkscope.rope_local_theta", c.rope_local_theta);
  // llama.cpp's gpt2 has no key for these: a GGUF file would load there with the wrong scores.
  if (!c.attn_scale_sqrt_dim || c.attn_scale_inverse_layer)
    Fail("GPT-2 with scale_attn_weights = false or scale_attn_by_inverse_layer_idx cannot be "
         "written to GGUF (llama.cpp has no key for either)");
  TensorMap map = FamilyTensorMap(c, TensorNaming::kGguf, weights);
  for (const auto& [name, tensor] : ExportTensors(map, c.rope, c.head_dim, c.rot_dim())) {
    uint32_t type = tensor.rank() == 2 ? ggml_type : kGgmlTypeF32;
    if (type == kGgmlTypeQ8_0 && tensor.dim(-1) % 32 != 0) type = kGgmlTypeF16;
    w.AddTensor(name, tensor, type);
  }
}

}  // namespace ss
