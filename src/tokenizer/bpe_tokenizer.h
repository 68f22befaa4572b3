// The one merge engine behind every supported tokenizer, configured by BpeModel:
//   - SentencePiece style (llama2.c, GGUF "llama", tokenizer.json with byte_fallback): the text
//     with spaces escaped to U+2581 is split into UTF-8 characters, adjacent symbols are merged
//     best-first, and characters missing from the vocabulary become <0xXX> byte tokens.
//   - Byte-level (GGUF "gpt2", tokenizer.json with a ByteLevel pre-tokenizer): the text is split
//     by a pre-tokenizer regex, each word's bytes are mapped to printable characters (GPT-2's
//     bytes_to_unicode), then merged.
// "Best" is the highest score of the merged token (SentencePiece .model scores) or the lowest
// merge rank (merges lists); ties go to the leftmost pair. A heap of candidate pairs makes this
// O(n log n), which matters because SentencePiece text is not pre-split into words.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace ss {

// GGUF tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct BpeModel {
  enum class Kind { kSentencePiece, kByteLevel };
  Kind kind = Kind::kSentencePiece;
  std::string name;  // what kind() reports
  std::vector<std::string> pieces;
  std::vector<TokenType> types;  // same length as pieces
  // Merge priority: either scores (one per token; higher merges first) or merges (pairs of ids in
  // rank order; the result is the concatenation of the two pieces).
  std::vector<float> scores;
  std::vector<std::pair<int, int>> merges;
  PreTokenizer pre = PreTokenizer::kNone;
  std::string space_marker = "\xE2\x96\x81";  // U+2581; llama2.c's export uses a plain " "
  bool add_space_prefix = true;               // SentencePiece's dummy prefix
  // llama2.c turns characters missing from the vocabulary into bytes before merging; llama.cpp
  // and Hugging Face keep them as symbols and fall back to bytes only at the end.
  bool byte_fallback_before_merge = false;
  bool ignore_merges = false;  // Llama 3: a word that is itself a token is not merged
  // Hugging Face Metaspace with split: words start at each space marker and merge separately.
  bool split_on_space_marker = false;
  // Text that is matched verbatim before anything else (added / user-defined tokens).
  std::vector<int> atomic_tokens;
  int bos = -1, eos = -1, unk = -1;
  std::string source;  // file, for error messages
};

class BpeTokenizer : public Tokenizer {
 public:
  // Validates the model (throws ss::Error naming model.source on inconsistencies).
  explicit BpeTokenizer(BpeModel model);
  std::vector<int> Encode(std::string_view text, bool add_bos) const override;
  std::string DecodeToken(int prev_token, int token) const override;
  int vocab_size() const override { return static_cast<int>(model_.pieces.size()); }
  int bos_id() const override { return model_.bos; }
  int eos_id() const override { return model_.eos; }
  std::string kind() const override { return model_.name; }
  int SpecialTokenId(std::string_view text) const override;
  const BpeModel& model() const { return model_; }

 private:
  struct MergeResult {
    int rank;
    int id;
  };
  static uint64_t PairKey(int a, int b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  int Lookup(std::string_view piece) const;
  // Appends the tokens of one word (escaped / byte-mapped text) to `out`.
  void EncodeWord(const std::string& word, std::vector<int>& out) const;
  void EncodeSegment(std::string_view text, bool first_segment, std::vector<int>& out) const;

  BpeModel model_;
  std::unordered_map<std::string, int> piece_to_id_;
  std::unordered_map<uint64_t, MergeResult> merge_ranks_;
  std::array<int, 256> byte_tokens_{};         // <0xXX> pieces, -1 if absent
  std::array<std::string, 256> byte_to_char_;  // byte-level: GPT-2 bytes_to_unicode
  std::unordered_map<uint32_t, uint8_t> char_to_byte_;
  std::vector<std::string> decoded_;  // bytes each token prints
  // True if no piece has the space marker right after another character (only at its start or
  // after more markers, as SentencePiece's split_by_whitespace guarantees). Then no merge can
  // cross a "X▁" boundary, and the text is merged word by word: the same result, but with small
  // heaps instead of one heap over a whole book.
  bool split_before_marker_ = false;
};

}  // namespace ss
