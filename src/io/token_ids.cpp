#include "io/token_ids.h"

#include <algorithm>

#include "common/error.h"
#include "common/file_util.h"

namespace ss {

std::vector<int> ParseTokenIds(std::string_view text, const std::string& path, int vocab_size) {
  std::vector<int> ids;
  size_t i = 0, line = 1;
  auto space = [](char ch) { return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n'; };
  while (i < text.size()) {
    if (space(text[i])) {
      line += text[i++] == '\n';
      continue;
    }
    size_t j = i;
    while (j < text.size() && !space(text[j])) ++j;
    const std::string item(text.substr(i, j - i));
    // At most 9 digits, so std::stoi cannot overflow.
    const bool digits = item.size() <= 9 && std::all_of(item.begin(), item.end(), [](char ch) {
                          return ch >= '0' && ch <= '9';
                        });
    if (!digits)
      Fail(
          "--tokens {}: line {}: '{}' is not a token id (expected non-negative integers separated "
          "by whitespace)",
          path, line, item.substr(0, 24));
    const int id = std::stoi(item);
    if (id >= vocab_size)
      Fail("--tokens {}: line {}: token id {} is outside the model's vocabulary [0, {})", path,
           line, id, vocab_size);
    ids.push_back(id);
    i = j;
  }
  return ids;
}

std::vector<int> ReadTokenIds(const std::string& path, int vocab_size) {
  return ParseTokenIds(ReadInputFile(path, "--tokens"), path, vocab_size);
}

}  // namespace ss
