// Pre-tokenizers for byte-level BPE: the regexes that split text into words before merging,
// written out by hand as scanners over code points (no regex engine with \p{L} is available).
// Each scanner mirrors the regex alternation order: at every position the first alternative that
// matches wins, with the regex engine's greedy backtracking written out explicitly.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ss {

enum class PreTokenizer {
  kNone,  // the whole text is one word (SentencePiece-style models)
  // GPT-2 (OpenAI encoder.py; also GPT-NeoX/Pythia, OLMo, MPT, HF ByteLevel's default):
  //   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // Llama 3 (tiktoken cl100k-style):
  //   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
  //   \s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // Qwen2: as Llama 3 but single digits: \p{N} instead of \p{N}{1,3}.
  kQwen2,
  // o200k (tiktoken's o200k_base / o200k_harmony: GPT-4o, gpt-oss; llama.cpp "gpt-4o"): words split
  // at lower-to-upper case changes, contractions kept on their word, '/' after punctuation:
  //   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
  //   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
  //   \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kO200k,
};

const char* PreTokenizerName(PreTokenizer pre);
// Maps the regex string of a tokenizer.json Split pre-tokenizer to a scanner, if it is one of the
// known ones (compared after removing whitespace differences is not attempted: exact match).
std::optional<PreTokenizer> PreTokenizerFromRegex(std::string_view regex);

// The tokenizer.json Split regex of `pre` (empty for kNone), as PreTokenizerFromRegex accepts it.
std::string_view PreTokenizerRegex(PreTokenizer pre);

// Splits valid UTF-8 `text` into words (views into `text`); concatenated they give `text` back.
std::vector<std::string_view> PreTokenize(PreTokenizer pre, std::string_view text);

}  // namespace ss
