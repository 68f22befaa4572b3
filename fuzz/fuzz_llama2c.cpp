// Fuzzes the llama2.c model reader (legacy and version 1 "ak42" headers): the input is the whole
// .bin file. A file that loads has every tensor's first and last float read (ASan checks the views
// against the mapped file); anything else must be an ss::Error.
#include <cstddef>
#include <cstdint>

#include "common/error.h"
#include "fuzz_util.h"
#include "io/llama2c.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = ss::fuzz::WriteScratchFile("model.bin", data, size);
  (void)ss::LooksLikeLlama2c(path);
  try {
    const ss::Model model = ss::LoadLlama2c(path);
    ss::fuzz::TouchWeights(model);
  } catch (const ss::Error&) {
  }
  return 0;
}
