#include "model/arch.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ss {

// Hugging Face model_type, what it covers, forward loop, tensor map, llama.cpp architecture.
static const ArchEntry kArchitectures[] = {
    {"llama", "Llama 2/3, TinyLlama, llama2.c: RMSNorm, RoPE, GQA, SwiGLU", &ForwardSequential,
     &LlamaTensors, "llama"},
    {"mistral", "Mistral: the Llama layout with sliding-window attention", &ForwardSequential,
     &LlamaTensors, "llama"},
    {"qwen2", "Qwen2 / Qwen2.5: the Llama layout with q/k/v biases", &ForwardSequential, &Qwen2Tensors,
     "qwen2"},
    {"qwen3", "Qwen3: the Llama layout with per-head q/k RMSNorm", &ForwardSequential, &Qwen3Tensors,
     "qwen3"},
    {"olmo2", "OLMo 2: norms after attention and MLP, whole-projection q/k RMSNorm", &ForwardSequential,
     &Olmo2Tensors, "olmo2"},
    {"gpt2", "GPT-2: learned positions, LayerNorm, GELU MLP, Conv1D layout, tied head",
     &ForwardGpt2, &Gpt2Tensors, "gpt2"},
    {"gpt_neox", "GPT-NeoX / Pythia: parallel residual, partial rotate-half RoPE, fused QKV",
     &ForwardGptNeox, &GptNeoxTensors, "gptneox"},
    {"qwen3_moe", "Qwen3-MoE: Llama layout with per-head q/k RMSNorm and a top-k mixture-of-experts FFN",
     &ForwardSequential, &MoeTensors, "qwen3moe"},
    {"olmoe", "OLMoE: Llama layout with whole-projection q/k RMSNorm and a top-k MoE FFN",
     &ForwardSequential, &MoeTensors, "olmoe"},
    {"mixtral", "Mixtral: Llama layout (sliding window optional) with a renormalised top-2 MoE FFN",
     &ForwardSequential, &MoeTensors, "llama"},
    {"gpt_oss", "gpt-oss: learned per-head sink logits, alternating sliding / full attention, "
     "YaRN RoPE, biased top-k MoE with a clamped GLU", &ForwardSequential, &GptOssTensors, "gpt-oss"},
    {"gemma2", "Gemma 2: scaled embeddings, (1 + w) RMSNorm before and after attention and MLP, GeGLU, "
     "soft-capped attention and output logits, alternating sliding / global layers", &ForwardSequential,
     &GemmaTensors, "gemma2"},
    {"gemma3_text", "Gemma 3 (text): Gemma 2's block with per-head q/k norms, 5 sliding layers per "
     "global one, a local RoPE base for sliding layers, no soft-capping", &ForwardSequential,
     &GemmaTensors, "gemma3"},
};

std::span<const ArchEntry> Architectures() { return kArchitectures; }

std::vector<std::string> SupportedArchitectures() {
  std::vector<std::string> names;
  for (const auto& a : kArchitectures) names.push_back(a.name);
  return names;
}

const ArchEntry& FindArchitecture(const std::string& name) {
  for (const auto& a : kArchitectures)
    if (name == a.name) return a;
  Fail("unsupported architecture '{}' (supported: {})", name,
       fmt::join(SupportedArchitectures(), ", "));
}

const ArchEntry* FindGgufArchitecture(const std::string& gguf_arch) {
  for (const auto& a : kArchitectures)
    if (a.gguf_arch && gguf_arch == a.gguf_arch) return &a;
  return nullptr;
}

TensorMap FamilyTensorMap(const ModelConfig& config, TensorNaming naming, ModelWeights& weights) {
  const ArchEntry& entry = FindArchitecture(config.arch);
  if (!entry.tensors) Fail("architecture '{}' has no Hugging Face / GGUF tensor layout", config.arch);
  if (naming == TensorNaming::kGguf && !entry.gguf_arch)
    Fail("architecture '{}' has no GGUF tensor naming", config.arch);
  weights.layers.resize(config.n_layers);
  return entry.tensors(config, naming, weights);
}

std::string LayerTensorName(TensorNaming naming, int layer, const char* hf, const char* gguf) {
  return naming == TensorNaming::kHf ? fmt::format("model.layers.{}.{}", layer, hf)
                                     : fmt::format("blk.{}.{}", layer, gguf);
}

}  // namespace ss
