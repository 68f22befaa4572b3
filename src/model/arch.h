// The architecture registry. A family is one file, model/arch_<file>.cpp, holding everything
// about it: its names (Hugging Face model_type and class, llama.cpp architecture), how it reads and
// writes its configuration in config.json and GGUF (model/family.h: one reader over both), its
// tensor map (Hugging Face and GGUF names, model/tensor_map.h) and its forward loop, so that a
// family is read, changed and reviewed in one place.
// Each file defines `std::span<const ArchEntry> Families_<file>()`; the build lists the files
// (src/model/CMakeLists.txt generates families.inc), so adding a family edits no table or switch.
// tests/test_model.cpp and tests/test_arch.cpp walk the registry.
#pragma once

#include <span>
#include <string>

#include "model/blocks.h"
#include "model/family.h"
#include "model/tensor_map.h"

namespace ss {

using FamilyForwardFn = void (*)(ForwardContext& ctx);
// The family's tensors under `naming`, with targets pointing into `weights` (whose layers are
// already sized to config.n_layers).
using FamilyTensorMapFn = TensorMap (*)(const ModelConfig& config, TensorNaming naming,
                                        ModelWeights& weights);
// Reads the family's settings into `config` (whose arch is already the family's name). The
// format-independent rest (config.json's rope_scaling, token ids, tied head; GGUF's RoPE keys,
// vocabulary, token ids) is read by io/ around it.
using FamilyReadFn = void (*)(const ConfigReader& r, const FamilyDefaults& defaults,
                              ModelConfig* config);
// Writes what FamilyReadFn reads; throws ss::Error for a config the format cannot express.
using FamilyWriteFn = void (*)(const ModelConfig& config, ConfigWriter& w);

struct ArchEntry {
  const char* name;       // ModelConfig::arch (Hugging Face model_type)
  const char* hf_class;   // config.json architectures[0]
  const char* gguf_arch;  // llama.cpp's general.architecture; null: no GGUF naming
  const char* description;
  FamilyDefaults defaults;  // transformers' defaults for what config.json omits
  FamilyReadFn read;
  FamilyWriteFn write;
  FamilyTensorMapFn tensors;
  FamilyForwardFn forward;
  // The family reads partial_rotary_factor itself (GPT-NeoX); the others refuse a value below 1.
  bool reads_partial_rotary = false;
  // The family reads the soft-caps itself (Gemma 2/3); the others refuse attn_logit_softcapping
  // (transformers ignores it there) and read final_logit_softcapping.
  bool reads_softcaps = false;
  // config.json keeps the language model's settings under "text_config" (an image-text
  // checkpoint, Qwen3.5): io/hf_config.cpp reads and writes them there.
  bool nested_text_config = false;
};

std::span<const ArchEntry> Architectures();
// Throws ss::Error naming the architecture and listing the supported ones.
const ArchEntry& FindArchitecture(const std::string& name);
// The entry whose gguf_arch is `gguf_arch`, or null.
const ArchEntry* FindGgufArchitecture(const std::string& gguf_arch);

// Builds the family's tensor map for `config` (sizing weights.layers first). Throws ss::Error if
// the family has no map.
TensorMap FamilyTensorMap(const ModelConfig& config, TensorNaming naming, ModelWeights& weights);

// Shared by the families that keep Llama's tensor layout (Llama, Mistral, Qwen2/3, OLMo 2):
// embedding, per-layer attention and MLP projections (with the biases the config asks for), and
// the final norm and head. `input_norms`: the pre-attention / pre-MLP norms exist (all but OLMo 2).
TensorMap LlamaLayoutTensors(const ModelConfig& config, TensorNaming naming, ModelWeights& weights,
                             bool input_norms);
// "model.layers.{l}.{hf}" or "blk.{l}.{gguf}".
std::string LayerTensorName(TensorNaming naming, int layer, const char* hf, const char* gguf);
// The Llama layout's mixture-of-experts FFN in place of the dense MLP (model/arch_moe.cpp; also
// gpt-oss): router and experts, stacked (E, rows, cols) however the file stores them.
TensorMap MoeTensors(const ModelConfig& config, TensorNaming naming, ModelWeights& weights);

}  // namespace ss
