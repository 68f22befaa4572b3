// The architecture registry: one entry per family, each in its own model/arch_<family>.cpp with
// its tensor-name map (Hugging Face and GGUF names, model/tensor_map.h) and its top-level forward
// loop (STYLE.md #2). tests/test_model.cpp and tests/test_arch.cpp walk the table.
#pragma once

#include <span>
#include <string>

#include "model/blocks.h"
#include "model/tensor_map.h"

namespace ss {

using FamilyForwardFn = void (*)(ForwardContext& ctx);
// The family's tensors under `naming`, with targets pointing into `weights` (whose layers are
// already sized to config.n_layers).
using FamilyTensorMapFn = TensorMap (*)(const ModelConfig& config, TensorNaming naming,
                                        ModelWeights& weights);

struct ArchEntry {
  const char* name;          // ModelConfig::arch (Hugging Face model_type)
  const char* description;
  FamilyForwardFn forward;
  FamilyTensorMapFn tensors;  // null: the family has no file layout besides llama2.c
  const char* gguf_arch;      // llama.cpp's general.architecture; null: no GGUF naming
};

std::span<const ArchEntry> Architectures();
// Throws ss::Error naming the architecture and listing the supported ones.
const ArchEntry& FindArchitecture(const std::string& name);
// The entry whose gguf_arch is `gguf_arch`, or null.
const ArchEntry* FindGgufArchitecture(const std::string& gguf_arch);

// Builds the family's tensor map for `config` (sizing weights.layers first). Throws ss::Error if
// the family has no map.
TensorMap FamilyTensorMap(const ModelConfig& config, TensorNaming naming, ModelWeights& weights);

// Family entry points (one file each).
TensorMap LlamaTensors(const ModelConfig& config, TensorNaming naming, ModelWeights& weights);
TensorMap Qwen2Tensors(const ModelConfig& config, TensorNaming naming, ModelWeights& weights);
TensorMap Qwen3Tensors(const ModelConfig& config, TensorNaming naming, ModelWeights& weights);
TensorMap Olmo2Tensors(const ModelConfig& config, TensorNaming naming, ModelWeights& weights);
void ForwardGpt2(ForwardContext& ctx);
TensorMap Gpt2Tensors(const ModelConfig& config, TensorNaming naming, ModelWeights& weights);
void ForwardGptNeox(ForwardContext& ctx);
TensorMap GptNeoxTensors(const ModelConfig& config, TensorNaming naming, ModelWeights& weights);

// Shared by the families that keep Llama's tensor layout (Llama, Mistral, Qwen2/3, OLMo 2):
// embedding, per-layer attention and MLP projections (with the biases the config asks for), and
// the final norm and head. `input_norms`: the pre-attention / pre-MLP norms exist (all but OLMo 2).
TensorMap LlamaLayoutTensors(const ModelConfig& config, TensorNaming naming, ModelWeights& weights,
                             bool input_norms);
// "model.layers.{l}.{hf}" or "blk.{l}.{gguf}".
std::string LayerTensorName(TensorNaming naming, int layer, const char* hf, const char* gguf);
TensorMap MoeTensors(const ModelConfig& config, TensorNaming naming, ModelWeights& weights);
TensorMap GptOssTensors(const ModelConfig& config, TensorNaming naming, ModelWeights& weights);
TensorMap GemmaTensors(const ModelConfig& config, TensorNaming naming, ModelWeights& weights);

}  // namespace ss
