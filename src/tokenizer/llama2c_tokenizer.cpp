// llama2.c's tokenizer.bin (written by llama2.c's tokenizer.py export), little-endian:
//   int32 max_token_length
//   vocab_size x { float32 score, int32 length, char bytes[length] }   (no NUL, no count)
// Spaces are stored as plain " " (the export replaced SentencePiece's U+2581), and ids 3..258 are
// the byte-fallback pieces "<0x00>".."<0xFF>"; BOS is 1, EOS 2, <unk> 0.
//
// Encoding follows llama2.c's encode(): BOS if asked, a dummy-prefix " " if the text is not
// empty, one symbol per UTF-8 code point (bytes + 3 for code points not in the vocabulary), then
// repeatedly merge the adjacent pair whose concatenation is in the vocabulary with the highest
// score (leftmost on ties). BpeTokenizer implements that with byte_fallback_before_merge.
#include <cstring>

#include "common/error.h"
#include "common/file_util.h"
#include "tokenizer/bpe_tokenizer.h"

namespace ss {

std::unique_ptr<Tokenizer> LoadLlama2cTokenizer(const std::string& path, int vocab_size) {
  if (vocab_size <= 0) Fail("{}: vocabulary size must be positive, got {}", path, vocab_size);
  std::shared_ptr<MappedFile> file = MapFile(path);
  const uint8_t* p = file->data;
  size_t size = file->size, pos = 0;
  auto read_i32 = [&](const char* what, int token) {
    if (size - pos < 4)
      Fail(
          "{}: truncated at byte {} reading {} of token {}: the file holds fewer than the "
          "expected {} tokens (wrong tokenizer for this model?)",
          path, pos, what, token, vocab_size);
    int32_t v;
    std::memcpy(&v, p + pos, 4);
    pos += 4;
    return v;
  };
  int32_t max_token_length = read_i32("max_token_length", 0);
  if (max_token_length <= 0 || max_token_length > (1 << 16))
    Fail("{}: max_token_length is {}, expected 1..65536: not a llama2.c tokenizer.bin", path,
         max_token_length);

  BpeModel model;
  model.kind = BpeModel::Kind::kSentencePiece;
  model.name = "llama2c";
  model.source = path;
  model.space_marker = " ";
  model.add_space_prefix = true;
  model.byte_fallback_before_merge = true;
  model.bos = vocab_size > 1 ? 1 : -1;
  model.eos = vocab_size > 2 ? 2 : -1;
  model.unk = 0;
  model.pieces.reserve(std::min<size_t>(vocab_size, size / 8 + 1));
  model.scores.reserve(std::min<size_t>(vocab_size, size / 8 + 1));
  for (int i = 0; i < vocab_size; ++i) {
    int32_t bits = read_i32("score", i);
    float score;
    std::memcpy(&score, &bits, 4);
    int32_t length = read_i32("length", i);
    if (length < 0 || length > max_token_length || static_cast<size_t>(length) > size - pos)
      Fail("{}: token {} has length {} at byte {} (max_token_length {}, {} bytes left)", path, i,
           length, pos - 4, max_token_length, size - pos);
    model.pieces.emplace_back(reinterpret_cast<const char*>(p + pos), length);
    model.scores.push_back(score);
    pos += length;
  }
  if (pos != size)
    Fail(
        "{}: {} bytes remain after {} tokens: the file holds more tokens than the model's "
        "vocabulary size {}",
        path, size - pos, vocab_size, vocab_size);
  model.types.assign(vocab_size, TokenType::kNormal);
  model.types[0] = TokenType::kUnknown;
  if (model.bos >= 0) model.types[model.bos] = TokenType::kControl;
  if (model.eos >= 0) model.types[model.eos] = TokenType::kControl;
  return std::make_unique<BpeTokenizer>(std::move(model));
}

}  // namespace ss
