#include "tokenizer/tokenizer.h"

#include <cstring>

#include "common/error.h"
#include "common/file_util.h"
#include "io/gguf.h"

namespace ss {

Tokenizer::~Tokenizer() = default;

std::string Tokenizer::Decode(const std::vector<int>& tokens) const {
  std::string text;
  int prev = -1;
  for (int token : tokens) {
    text += DecodeToken(prev, token);
    prev = token;
  }
  return text;
}

std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& path, int vocab_size) {
  std::shared_ptr<MappedFile> file = MapFile(path);
  if (file->size >= 4 && std::memcmp(file->data, "GGUF", 4) == 0) {
    GgufFile gguf = GgufFile::Open(path);
    return LoadGgufTokenizer(gguf);
  }
  // JSON: the first non-space byte is '{'.
  for (size_t i = 0; i < file->size; ++i) {
    char c = static_cast<char>(file->data[i]);
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '{') return LoadTokenizerJson(path);
    break;
  }
  if (vocab_size <= 0)
    Fail(
        "{}: neither GGUF nor JSON; reading it as a llama2.c tokenizer.bin needs the model's "
        "vocabulary size",
        path);
  return LoadLlama2cTokenizer(path, vocab_size);
}

}  // namespace ss
