// Fuzzes llama2.c's tokenizer.bin reader. The file does not store its vocabulary size (the model
// does), so the first input byte chooses it (1..256) and the rest is the file. A tokenizer that
// loads encodes and decodes a fixed prompt and the start of the input.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/error.h"
#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int vocab_size = 1 + data[0];
  const std::string path = ss::fuzz::WriteScratchFile("tokenizer.bin", data + 1, size - 1);
  try {
    auto tok = ss::LoadLlama2cTokenizer(path, vocab_size);
    const std::string_view tail(reinterpret_cast<const char*>(data + 1), size - 1);
    for (std::string_view prompt :
         {std::string_view("Once upon a time, ünïcode 123 \n\t 🦙!"), tail.substr(0, 48)}) {
      try {
        tok->Decode(tok->Encode(prompt, true));
      } catch (const ss::Error&) {  // invalid UTF-8
      }
    }
  } catch (const ss::Error&) {
  }
  return 0;
}
