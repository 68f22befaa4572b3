// One entry point for every model format: chooses the reader from what the path is.
//   a directory with config.json      -> Hugging Face (safetensors)
//   a file starting with "GGUF"        -> GGUF
//   otherwise a llama2.c-looking file  -> llama2.c
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "model/weights.h"

namespace ss {

// At Precision::kBf16 the dense projections and the LM head are held only as bf16 packs, never as
// f32 (Model::packed_only): a BF16 checkpoint needs about its file size in memory.
Model LoadModel(const std::string& path, Precision precision = Precision::kF32);

// How many tensors of each stored type the model's files hold, most first: GGUF's ggml types, a
// safetensors checkpoint's dtypes with each MXFP4 pair (`<x>_blocks` + `<x>_scales`, U8) counted
// once as "MXFP4 (blocks + scales)". Empty for a llama2.c file (all F32). For inspect.
std::vector<std::pair<std::string, int>> StoredTensorTypes(const std::string& path);

// The precision a model runs at when --precision is not given: the file's own. kF32 when every
// tensor is stored as F32 (a llama2.c file, an F32 safetensors or GGUF file: the f32 forward is the
// file's arithmetic already), else kNative: each weight stays in its stored type where a kernel
// multiplies it (F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, MXFP4; anything else is decoded to f32 at
// load), which computes the f32 forward on the stored values in the memory of the file. `why`, if
// given, receives what was found ("weights stored as BF16, F32"). A path this cannot read gives
// kF32: LoadModel then says what is wrong with it.
Precision FilePrecision(const std::string& path, std::string* why = nullptr);

}  // namespace ss
