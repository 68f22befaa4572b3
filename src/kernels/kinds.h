// Enumerations shared by kernels and model configs.
#pragma once

namespace ss {

enum class NormKind { kRms, kLayer };
// How RoPE pairs dimensions inside a head:
//  kInterleaved: pairs (2i, 2i+1), as llama2.c, Meta's original Llama and GGUF (llama.cpp "norm").
//  kHalf: pairs (i, i + rot/2) ("rotate_half"), as Hugging Face transformers and GPT-NeoX.
enum class RopeKind { kNone, kInterleaved, kHalf };
enum class ActKind { kSilu, kGelu, kGeluTanh, kRelu };

}  // namespace ss
