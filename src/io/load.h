// One entry point for every model format: chooses the reader from what the path is.
//   a directory with config.json      -> Hugging Face (safetensors)
//   a file starting with "GGUF"        -> GGUF
//   otherwise a llama2.c-looking file  -> llama2.c
#pragma once

#include <string>

#include "model/weights.h"

namespace ss {

Model LoadModel(const std::string& path);

}  // namespace ss
