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
    const std::string_view item = text.substr(i, j - i);
    if (!std::all_of(item.begin(), item.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
      Fail(
          "--tokens {}: line {}: '{}' is not a token id (expected non-negative integers separated "
          "by whitespace)",
          path, line, PrintableExcerpt(item, 24));
    // Leading zeros aside, more than 9 digits is beyond any vocabulary (and std::stoi's range):
    // the number is quoted as written.
    const std::string_view value =
        item.substr(std::min(item.find_first_not_of('0'), item.size() - 1));
    if (value.size() > 9)
      Fail("--tokens {}: line {}: token id {} is outside the model's vocabulary [0, {})", path,
           line, PrintableExcerpt(item, 40), vocab_size);
    const int id = std::stoi(std::string(value));
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
