// Fuzzes the GGUF parser and, when the bytes parse, the GGUF tokenizer loader and a round of
// encoding/decoding, and the GGUF model loader (hyperparameters -> config, tensor map, shape
// checks, dequantisation). Any outcome other than success or ss::Error (a crash, a sanitizer
// report, another exception, an allocation beyond -rss_limit_mb) is a bug.
#include <cstddef>
#include <cstdint>

#include "common/error.h"
#include "io/gguf.h"
#include "io/model_files.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    ss::GgufFile f = ss::GgufFile::Parse("fuzz.gguf", data, size, nullptr);
    for (const ss::GgufTensorInfo& t : f.tensors()) {
      // Touch the first and last byte of each tensor: ASan catches out-of-range views.
      if (t.n_bytes > 0) {
        volatile uint8_t first = t.data[0], last = t.data[t.n_bytes - 1];
        (void)first;
        (void)last;
      }
    }
    if (f.Find("tokenizer.ggml.model")) {
      try {
        auto tok = ss::LoadGgufTokenizer(f);
        std::vector<int> ids = tok->Encode("Hello world, ünïcode 123 \n\t 🦙!", true);
        tok->Decode(ids);
      } catch (const ss::Error&) {
      }
    }
    if (!f.tensors().empty()) {
      try {
        ss::Model model = ss::LoadGgufModel(f);
        (void)model;
      } catch (const ss::Error&) {
      }
    }
  } catch (const ss::Error&) {
  }
  return 0;
}
