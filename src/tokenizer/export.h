// Writers for tokenizers: Hugging Face tokenizer.json and GGUF tokenizer.ggml.* metadata, each
// read back by this project's loaders (LoadTokenizerJson, LoadGgufTokenizer) with the same ids.
//
// SentencePiece vocabularies merged by score (llama2.c, GGUF "llama") become a tokenizer.json BPE
// with byte_fallback whose merges list every pair (left, right) of pieces whose concatenation is a
// piece, ranked by the merged piece's score, highest first: rank-ordered merging then picks the
// same pair as score-ordered merging, except when two different pairs forming the same piece are
// both present in one word (equal score: leftmost wins by score, lower rank wins by rank); no
// such case occurs in the shipped tok512 tests. llama2.c's decorated control pieces "\n<s>\n" and
// "\n</s>\n" are written as "<s>" and "</s>" (they print nothing either way). Going the other way
// (merges -> GGUF scores), a piece's score is minus the rank of the first merge that forms it.
#pragma once

#include <string>

#include "io/gguf_writer.h"
#include "tokenizer/tokenizer.h"

namespace ss {

// Throws ss::Error if `tokenizer` is not one of the BPE tokenizers of this project.
std::string TokenizerJsonText(const Tokenizer& tokenizer);
void AddGgufTokenizer(const Tokenizer& tokenizer, GgufWriter& writer);

}  // namespace ss
