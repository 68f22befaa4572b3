// Finds and loads the tokenizer that belongs to a model, and checks that the two agree.
#pragma once

#include <memory>
#include <string>

#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace ss {

// `explicit_path` (from --tokenizer) wins. Otherwise: a GGUF model's embedded vocabulary; a
// Hugging Face directory's tokenizer.json; for a llama2.c file, tok<V>.bin, tokenizer.bin or
// tok512.bin beside it. Throws ss::Error naming what was looked for, or when the tokenizer's
// vocabulary is larger than the model's embedding table (ids the model cannot embed).
std::unique_ptr<Tokenizer> FindTokenizer(const Model& model, const std::string& explicit_path);

}  // namespace ss
