// Fuzzes the tokenizer.json loader: the input is the JSON text; when it loads, the first bytes
// of the input (as text, if valid UTF-8) are also encoded and decoded.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/error.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    auto tok = ss::ParseTokenizerJson("fuzz.json", text);
    for (std::string_view prompt :
         {std::string_view("the cat  sat\n on 12345 mats"), text.substr(0, 64)}) {
      try {
        std::vector<int> ids = tok->Encode(prompt, true);
        tok->Decode(ids);
      } catch (const ss::Error&) {
      }
    }
  } catch (const ss::Error&) {
  }
  return 0;
}
