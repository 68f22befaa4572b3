#include "model/arch.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ss {

static const ArchEntry kArchitectures[] = {
    {"llama", "Llama 2/3, TinyLlama, llama2.c: RMSNorm, RoPE, GQA, SwiGLU", &ForwardLlama},
    {"qwen3_moe", "Qwen3-MoE: Llama layout with per-head q/k RMSNorm and a top-k mixture-of-experts FFN",
     &ForwardQwen3Moe},
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

}  // namespace ss
