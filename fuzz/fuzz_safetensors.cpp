// libFuzzer target for the safetensors header parser and loader: any byte string must either
// parse into a header whose every tensor loads, or throw ss::Error. Crashes, sanitizer reports
// and other exception types are findings.
//
//   cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DSINKSCOPE_FUZZ=ON \
//         -DSINKSCOPE_TESTS=OFF -DSINKSCOPE_BENCH=OFF
//   ninja -C build-fuzz fuzz_safetensors
//   build-fuzz/fuzz/fuzz_safetensors -max_total_time=300 -max_len=4096 fuzz/corpus_safetensors
#include <cstdint>
#include <memory>
#include <string>

#include "common/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    ss::ParseSafetensorsHeader(data, size, "fuzz");
    // Loading goes through the same validation and then reads every tensor's bytes, which
    // AddressSanitizer checks against the buffer's bounds.
    auto bytes = std::make_shared<const std::string>(reinterpret_cast<const char*>(data), size);
    ss::SafetensorsFile file = ss::SafetensorsFile::FromBytes(bytes, "fuzz");
    for (const std::string& name : file.names()) {
      try {
        ss::Tensor t = file.Load(name);
        volatile float sink = 0;
        for (int64_t i = 0; i < t.numel(); ++i) sink = sink + t[i];
      } catch (const ss::Error&) {
        // unsupported dtype: expected
      }
    }
  } catch (const ss::Error&) {
    // rejected input: expected
  }
  return 0;
}
