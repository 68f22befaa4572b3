// Fuzzes the --tokens reader (whitespace-separated token ids). The first input byte chooses the
// vocabulary size (0..255; 0 and small sizes exercise the range check), the rest is the file.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/error.h"
#include "io/token_ids.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    (void)ss::ParseTokenIds(text, "fuzz/tokens.txt", data[0] == 255 ? 1 << 30 : data[0]);
  } catch (const ss::Error&) {
  }
  return 0;
}
