// One entry point for every model format: chooses the reader from what the path is.
//   a directory with config.json      -> Hugging Face (safetensors)
//   a file starting with "GGUF"        -> GGUF
//   otherwise a llama2.c-looking file  -> llama2.c
#pragma once

#include <string>

#include "model/weights.h"

namespace ss {

// At Precision::kBf16 the dense projections and the LM head are held only as bf16 packs, never as
// f32 (Model::packed_only): a BF16 checkpoint needs about its file size in memory.
Model LoadModel(const std::string& path, Precision precision = Precision::kF32);

}  // namespace ss
