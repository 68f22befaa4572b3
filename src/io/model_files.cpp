#include "io/model_files.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>

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
  bool Mapped(const std::string& name) const override { return dir_.Mapped(name); }
  bool Stored(const std::string& name, StoredTensor* out) const override {
    const SafetensorsDtype dtype = dir_.Info(name).dtype;
    if (dtype != SafetensorsDtype::kF16 && dtype != SafetensorsDtype::kBF16) return false;
    out->ggml_type = dtype == SafetensorsDtype::kF16 ? kGgmlTypeF16 : kGgmlTypeBF16;
    out->data = dir_.RawData(name, &out->owner);
    return true;
  }
  const uint8_t* BytesU8(const std::string& name,
                         std::shared_ptr<const void>* owner) const override {
    const SafetensorsDtype dtype = dir_.Info(name).dtype;
    if (dtype != SafetensorsDtype::kU8)
      Fail("{}: tensor '{}' is stored as {}, expected U8 (MXFP4 blocks and scales are bytes)",
           dir_.FileOf(name), name, SafetensorsDtypeName(dtype));
    return dir_.RawData(name, owner);
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
      Fail(
          "{}: tensor '{}' has ggml type {}, which sinkscope cannot dequantise (supported: F32, "
          "F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, MXFP4)",
          gguf_.path(), name, GgmlTypeName(t->type));
    if (t->type == kGgmlTypeMXFP4) {
      // Named here, by block, rather than as the NaN or Inf the decoded tensor would hold.
      const int64_t blocks = static_cast<int64_t>(t->n_bytes / 17);
      if (const int64_t b = Mxfp4FirstFault(t->data, 17, t->data + 1, 17, blocks); b >= 0)
        Fail("{}: tensor '{}' (MXFP4): block {} (scale byte 0x{:02X}): {}", gguf_.path(), name, b,
             t->data[17 * b], Mxfp4BlockFault(t->data[17 * b], t->data + 17 * b + 1));
    }
    Tensor out = Tensor::Zeros(Shape(name));
    Dequantize(t->type, t->data, out.data(), out.numel());
    if (gguf_.mapped()) ReleaseMappedPages(t->data, t->n_bytes);
    return out;
  }
  bool Mapped(const std::string&) const override { return gguf_.mapped(); }
  bool Stored(const std::string& name, StoredTensor* out) const override {
    const GgufTensorInfo* t = gguf_.FindTensor(name);
    if (t->type == kGgmlTypeF32) return false;
    *out = {t->type, t->data, gguf_.keep_alive()};
    return true;
  }
  const std::string& source() const override { return gguf_.path(); }

 private:
  const GgufFile& gguf_;
};

// Binds the family's tensors and finishes the weights (tied head, RoPE order of the file).
// `layers_key` names the config's layer count in errors; `file_layers`, if more than the model's
// layers, is how many the file declares (a GGUF's block_count counts the multi-token-prediction
// layers a family does not run): their tensors are left unread rather than refused.
void BindModel(Model& model, TensorNaming naming, const TensorSource& source,
               const std::string& layers_key, Precision precision, int64_t file_layers = 0) {
  // Every layer has tensors of its own: a layer count beyond the tensor count is a corrupt or
  // hostile header, refused before anything is sized from it.
  if (model.config.n_layers <= 0 || static_cast<size_t>(model.config.n_layers) > source.count())
    Fail("{}: {} layers, but the file holds only {} tensors", source.source(),
         model.config.n_layers, source.count());
  TensorMap map = FamilyTensorMap(model.config, naming, model.weights);
  if (model.config.rope != RopeKind::kNone) model.config.rope = map.file_rope;
  CheckNoExtraLayers(
      map, source,
      static_cast<int>(std::clamp<int64_t>(file_layers, model.config.n_layers, INT32_MAX)),
      layers_key);
  std::unique_ptr<WeightPacker> packer;
  if (precision != Precision::kF32)
    packer = std::make_unique<WeightPacker>(model.weights, precision);
  // Refused before anything is allocated when the weights cannot fit. A projection kept in its
  // stored bytes (native) is a view of the file: no allocation.
  const uint64_t bytes = BindBytes(
      map, source, [&](const TensorSpec& spec, const std::string& name) -> std::optional<double> {
        if (!packer || !packer->Packs(spec.targets[0])) return std::nullopt;
        if (precision != Precision::kNative) return BytesPerWeight(precision);
        StoredTensor stored;
        if (!spec.mxfp4_scales.empty() || (CanKeepStored(spec) && source.Stored(name, &stored) &&
                                           GgmlMatMulSupports(stored.ggml_type)))
          return 0.0;
        return std::nullopt;
      });
  CheckMemory(bytes, packer ? fmt::format("{}: loading the weights (projections in {})",
                                          source.source(), PrecisionName(precision))
                            : fmt::format("{}: loading the weights in f32 (--precision bf16, q8_0 "
                                          "or native holds the projections in less memory)",
                                          source.source()));
  KeepStoredFn keep;
  if (packer && precision == Precision::kNative)
    keep = [&](Tensor* t, const std::string& name, const std::vector<int64_t>& shape,
               const StoredTensor& stored) {
      return packer->KeepStored(t, fmt::format("{}: tensor '{}'", source.source(), name), shape,
                                stored);
    };
  BindTensors(map, source, model.config.arch,
              packer ? [&packer](Tensor* t, uint32_t stored) { packer->Bound(t, stored); }
                     : std::function<void(Tensor*, uint32_t)>(),
              keep);
  if (model.config.tied_embeddings) model.weights.lm_head = model.weights.token_embedding;
  if (packer) packer->Finish(model);
}

// The GGUF metadata key of each ModelConfig field the core reads, for ValidateConfig's messages
// (the family reader adds the ones it spells otherwise).
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
          {"norm_eps", p + "attention.layer_norm_rms_epsilon"},
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
          {"bos_id", "tokenizer.ggml.bos_token_id"},
          {"eos_id", "tokenizer.ggml.eos_token_id"}};
}

// GGUF metadata through the family reader interface (model/family.h): keys under "<arch>."
// unless they start with "sinkscope.".
class GgufConfigReader : public ConfigReader {
 public:
  GgufConfigReader(const GgufFile& gguf, std::string arch) : gguf_(gguf), arch_(std::move(arch)) {}
  bool gguf() const override { return true; }
  const std::string& source() const override { return gguf_.path(); }
  std::string Name(Key k) const override {
    if (!k.gguf) return "(no GGUF key)";
    const std::string_view key = k.gguf;
    return key.starts_with("sinkscope.") ? std::string(key) : arch_ + "." + std::string(key);
  }
  bool Has(Key k) const override { return k.gguf && gguf_.Find(Name(k)); }
  bool Given(Key k) const override { return Has(k); }
  int64_t Int(Key k, std::optional<int64_t> fallback) const override {
    if (!Has(k) && fallback) return *fallback;
    Present(k);
    return gguf_.GetInt(Name(k));
  }
  double Float(Key k, std::optional<double> fallback) const override {
    if (!Has(k) && fallback) return *fallback;
    Present(k);
    return gguf_.GetFloat(Name(k));
  }
  bool Bool(Key k, bool fallback) const override {
    return Has(k) ? gguf_.GetBool(Name(k)) : fallback;
  }
  std::string String(Key k, const std::string& fallback) const override {
    return Has(k) ? gguf_.GetString(Name(k)) : fallback;
  }
  std::vector<std::string> Strings(Key k) const override {
    Present(k);
    return gguf_.GetStringArray(Name(k));
  }
  std::vector<int64_t> Ints(Key k) const override {
    Present(k);
    return gguf_.GetIntArray(Name(k));
  }
  std::string Dump(Key k) const override { return Has(k) ? "(set)" : "(absent)"; }
  bool HasTensor(const std::string& name) const override {
    return gguf_.FindTensor(name) != nullptr;
  }

 private:
  void Present(Key k) const {
    if (!Has(k)) ss::Fail("{}: missing metadata key '{}'", gguf_.path(), Name(k));
  }
  const GgufFile& gguf_;
  std::string arch_;
};

// GGUF metadata through the family writer interface.
class GgufConfigWriter : public ConfigWriter {
 public:
  GgufConfigWriter(GgufWriter& w, std::string arch) : w_(w), arch_(std::move(arch)) {}
  bool gguf() const override { return true; }
  void Int(Key k, int64_t v) override {
    if (!k.gguf) return;
    if (v < 0 || v > UINT32_MAX) Fail("GGUF key {}: {} does not fit a u32", Name(k), v);
    w_.SetU32(Name(k), static_cast<uint32_t>(v));
  }
  void Float(Key k, float v) override {
    if (k.gguf) w_.SetF32(Name(k), v);
  }
  void Bool(Key k, bool v) override {
    if (k.gguf) w_.SetBool(Name(k), v);
  }
  void String(Key k, const std::string& v) override {
    if (k.gguf) w_.SetString(Name(k), v);
  }
  void Null(Key) override {}
  void Strings(Key k, const std::vector<std::string>& v) override {
    if (k.gguf) w_.SetStringArray(Name(k), v);
  }
  void Ints(Key k, const std::vector<int64_t>& v) override {
    if (k.gguf) w_.SetI32Array(Name(k), std::vector<int32_t>(v.begin(), v.end()));
  }
  void Bools(Key k, const std::vector<bool>& v) override {
    if (k.gguf) w_.SetBoolArray(Name(k), v);
  }

 private:
  std::string Name(Key k) const {
    const std::string_view key = k.gguf;
    return key.starts_with("sinkscope.") ? std::string(key) : arch_ + "." + std::string(key);
  }
  GgufWriter& w_;
  std::string arch_;
};

}  // namespace

Model LoadHfModel(const std::string& dir, Precision precision) {
  Model model;
  model.config = ReadHfConfig(dir);
  model.source = dir;
  model.format = "hf";
  // Qwen2-MoE-style shared experts without their gate (Qwen3-Next's and Qwen3.5's are read).
  if (model.config.n_shared_experts > 0 && !model.config.shared_expert_gate)
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
  auto real = [&](const std::string& key, double fallback) {
    return gguf.Find(p + key) ? gguf.GetFloat(p + key) : fallback;
  };
  Model model;
  model.source = path;
  model.format = "gguf";
  ModelConfig& c = model.config;
  c.arch = entry->name;
  const GgufTensorInfo* embd = gguf.FindTensor("token_embd.weight");
  if (!embd) Fail("{}: missing tensor 'token_embd.weight'", path);
  if (embd->shape.size() != 2)
    Fail("{}: token_embd.weight has {} dimensions, expected 2", path, embd->shape.size());
  if (embd->shape[1] <= 0 || embd->shape[1] > (int64_t{1} << 30))
    Fail("{}: token_embd.weight has {} rows, expected a positive vocabulary size", path,
         embd->shape[1]);
  c.vocab_size = static_cast<int>(embd->shape[1]);
  GgufConfigReader r(gguf, arch);
  entry->read(r, entry->defaults, &c);
  const ArchEntry& family = FindArchitecture(c.arch);  // the reader may refine it (llama: Mixtral)
  c.bos_id = static_cast<int>(gguf.GetInt("tokenizer.ggml.bos_token_id", -1));
  c.eos_id = static_cast<int>(gguf.GetInt("tokenizer.ggml.eos_token_id", -1));
  c.tied_embeddings = gguf.FindTensor("output.weight") == nullptr;
  if (c.rope != RopeKind::kNone) {
    int rot = r.PositiveInt({nullptr, "rope.dimension_count"}, c.head_dim);
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
      c.rope_original_max_seq_len =
          r.PositiveInt({nullptr, "rope.scaling.original_context_length"});
      c.rope_yarn_beta_fast = static_cast<float>(real("rope.scaling.yarn_beta_fast", 32.0));
      c.rope_yarn_beta_slow = static_cast<float>(real("rope.scaling.yarn_beta_slow", 1.0));
      // llama.cpp rounds the ramp's ends (ggml_rope_yarn_corr_dims); a checkpoint whose
      // config.json said truncate = false (gpt-oss) carries sinkscope's key.
      c.rope_yarn_truncate = gguf.GetBool("sinkscope.rope_yarn_truncate", true);
    } else if (scaling != "none") {
      Fail(
          "{}: {}rope.scaling.type '{}' is not supported (supported: none, linear, yarn; Llama 3 "
          "scaling comes as rope_freqs.weight)",
          path, p, scaling);
    }
  }
  if (!family.reads_softcaps) {
    c.final_logit_softcap = static_cast<float>(real("final_logit_softcapping", 0.0));
    if (gguf.Find(p + "attn_logit_softcapping"))
      Fail("{}: {}attn_logit_softcapping is not part of {}", path, p, arch);
  }
  if (gguf.Find(p + "attention.sliding_window") && c.sliding_window == 0)
    Fail("{}: {}attention.sliding_window is not supported for {}", path, p, arch);
  ConfigKeys keys = GgufKeys(arch);
  if (c.norm == NormKind::kLayer) keys["norm_eps"] = p + "attention.layer_norm_epsilon";
  for (const auto& [field, key] : r.keys()) keys[field] = key;
  ValidateConfig(c, path, keys);
  GgufSource source(gguf);
  BindModel(model, TensorNaming::kGguf, source, p + "block_count", precision,
            gguf.GetInt(p + "block_count", 0));
  if (gguf.Find("sinkscope.rope_scaling.llama3") && !model.weights.rope_freq_factors.empty()) {
    // Written by AddGgufModel: restore the Llama 3 rule if it reproduces rope_freqs.weight.
    std::vector<double> p3 = gguf.GetFloatArray("sinkscope.rope_scaling.llama3");
    if (p3.size() != 4)
      Fail("{}: sinkscope.rope_scaling.llama3 has {} values, expected 4", path, p3.size());
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
      ValidateConfig(rule, path, keys);
      c = rule;
      model.weights.rope_freq_factors = Tensor();
    }
  }
  return model;
}

ModelConfig HfConfigFor(const Model& model, SafetensorsDtype dtype) {
  ModelConfig c = model.config;
  if (!model.weights.rope_freq_factors.empty())
    Fail(
        "{}: the model carries per-frequency RoPE factors (GGUF rope_freqs.weight), which "
        "config.json cannot express",
        model.source);
  if (c.rope != RopeKind::kNone) c.rope = RopeKind::kHalf;
  c.torch_dtype = dtype == SafetensorsDtype::kF32   ? "float32"
                  : dtype == SafetensorsDtype::kF16 ? "float16"
                                                    : "bfloat16";
  c.mxfp4_experts = false;  // the experts are written decoded, in `dtype`
  HfConfigJson(c);          // throws, naming the fields, if config.json cannot hold this config
  return c;
}

void WriteHfModel(const Model& model, const std::string& dir, SafetensorsDtype dtype) {
  ModelConfig config = HfConfigFor(model, dtype);
  ModelWeights weights = model.weights;  // tensor handles: no data copied
  ModelConfig layout = model.config;
  layout.mxfp4_experts = false;  // written as plain (in, out) tensors, from the f32 members
  TensorMap map = FamilyTensorMap(layout, TensorNaming::kHf, weights);
  auto tensors =
      ExportTensors(map, model.config.rope, model.config.head_dim, model.config.rot_dim());
  namespace fs = std::filesystem;
  WriteSafetensors((fs::path(dir) / "model.safetensors").string(), tensors, dtype,
                   {{"format", "pt"}});
  WriteHfConfig((fs::path(dir) / "config.json").string(), config);
}

namespace {

// The type a 2-D weight whose rows hold `row` values is written in when `requested` was asked for.
// ggml quantises row by row, so a block type needs whole blocks per row; a weight that does not fit
// falls back, on its own, to the nearest type that does, as llama.cpp's quantiser does
// (llama-quant.cpp: Q6_K -> Q8_0, and F16 when the fallback's blocks do not fit either). Its Q4_K
// fallback, Q5_0, is not a type sinkscope writes: Q4_K (and Q4_0) go to Q8_0, a larger tensor but
// never a less precise one than the type asked for.
uint32_t GgufWeightType(uint32_t requested, int64_t row) {
  if (row % GgmlBlockValues(requested) == 0) return requested;  // F32, F16, BF16: blocks of 1
  return row % GgmlBlockValues(kGgmlTypeQ8_0) == 0 ? kGgmlTypeQ8_0 : kGgmlTypeF16;
}

}  // namespace

void AddGgufModel(const Model& model, GgufWriter& w, uint32_t ggml_type, uint32_t expert_type) {
  const ModelConfig& c = model.config;
  const ArchEntry& family = FindArchitecture(c.arch);
  if (!family.gguf_arch) Fail("architecture '{}' has no GGUF naming", c.arch);
  const std::string arch = family.gguf_arch;
  const std::string p = arch + ".";
  w.SetString("general.architecture", arch);
  w.SetString("general.name", std::filesystem::path(model.source).filename().string());
  GgufConfigWriter config_writer(w, arch);
  family.write(c, config_writer);
  w.SetU32(p + "vocab_size", c.vocab_size);
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
    } else if (c.rope_scaling == RopeScalingKind::kYarn) {
      w.SetString(p + "rope.scaling.type", "yarn");
      w.SetF32(p + "rope.scaling.factor", c.rope_scaling_factor);
      w.SetU32(p + "rope.scaling.original_context_length", c.rope_original_max_seq_len);
      w.SetF32(p + "rope.scaling.yarn_beta_fast", c.rope_yarn_beta_fast);
      w.SetF32(p + "rope.scaling.yarn_beta_slow", c.rope_yarn_beta_slow);
      w.SetBool("sinkscope.rope_yarn_truncate", c.rope_yarn_truncate);
    }
  }
  // llama.cpp's key (Gemma 2); readers of other architectures ignore it, sinkscope applies it.
  if (!family.reads_softcaps && c.final_logit_softcap != 0)
    w.SetF32(p + "final_logit_softcapping", c.final_logit_softcap);
  if (!family.reads_softcaps && c.attn_logit_softcap != 0)
    Fail("attention soft-capping in GGUF is only defined for gemma2 / gemma3, not {}", c.arch);
  TensorMap map = FamilyTensorMap(c, TensorNaming::kGguf, weights);
  for (const auto& [name, tensor] : ExportTensors(map, c.rope, c.head_dim, c.rot_dim())) {
    // MXFP4_MOE: Q8_0 weights, MXFP4 experts. The router (ffn_gate_inp) stays F32 at every type,
    // as llama.cpp's quantiser keeps it ("do not quantize expert gating tensors"): routing flips
    // under small changes.
    const bool moe_mxfp4 = ggml_type == kGgmlTypeMXFP4;
    const uint32_t weights_type = moe_mxfp4 ? kGgmlTypeQ8_0 : ggml_type;
    const uint32_t experts_type = moe_mxfp4 ? kGgmlTypeMXFP4 : expert_type;
    uint32_t type = kGgmlTypeF32;
    if (tensor.rank() == 3 && experts_type == kGgmlTypeMXFP4)
      type = tensor.dim(-1) % kMxfp4Block == 0 ? kGgmlTypeMXFP4 : kGgmlTypeF16;
    else if (tensor.rank() == 3)
      type = GgufWeightType(experts_type, tensor.dim(-1));
    // Weights only: gpt-oss's expert biases (ffn_*_exps.bias, (E, F)) are 2-D too and stay F32,
    // as llama.cpp quantises only tensors named *.weight.
    // The Gated DeltaNet's convolution stays F32 too: llama.cpp's quantiser skips ssm_conv1d and
    // its ssm_conv operator reads F32 weights only (it asserts on any other type).
    else if (tensor.rank() == 2 && name.ends_with(".weight") &&
             name.find("ffn_gate_inp.weight") == std::string::npos &&
             name.find("ssm_conv1d.weight") == std::string::npos)
      type = GgufWeightType(weights_type, tensor.dim(-1));
    w.AddTensor(name, tensor, type);
  }
}

}  // namespace ss
