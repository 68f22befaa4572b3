// The architecture registry: one entry per family, each with its own top-level forward loop in
// model/arch_<family>.cpp (STYLE.md #2). tests/test_model.cpp walks the table.
#pragma once

#include <span>
#include <string>

#include "model/blocks.h"

namespace ss {

using FamilyForwardFn = void (*)(ForwardContext& ctx);

struct ArchEntry {
  const char* name;          // ModelConfig::arch
  const char* description;
  FamilyForwardFn forward;
};

std::span<const ArchEntry> Architectures();
// Throws ss::Error naming the architecture and listing the supported ones.
const ArchEntry& FindArchitecture(const std::string& name);

void ForwardLlama(ForwardContext& ctx);
void ForwardQwen3Moe(ForwardContext& ctx);

}  // namespace ss
