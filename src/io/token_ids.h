// Pre-tokenized input (`--tokens FILE`): token ids as non-negative decimal integers separated by
// whitespace (spaces, tabs, newlines), each in [0, vocab_size).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ss {

// Parses the text of a --tokens file; `path` names it in errors. Throws ss::Error naming the file,
// the line and the offending item.
std::vector<int> ParseTokenIds(std::string_view text, const std::string& path, int vocab_size);
// Reads and parses `path`.
std::vector<int> ReadTokenIds(const std::string& path, int vocab_size);

}  // namespace ss
