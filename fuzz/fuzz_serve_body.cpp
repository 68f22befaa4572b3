// Fuzzes the JSON bodies of the viewer's POST requests (serve/request_body.h): every input goes to
// the analyze, explain and stream readers, with and without --texts. Whatever the bytes, a reader
// returns a body within its documented ranges or throws ss::Error (the server's 400).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/error.h"
#include "serve/request_body.h"

namespace {
void CheckInput(const ss::serve::BodyInput& in, int texts) {
  if (in.file < -1 || in.file >= texts) std::abort();
  if (in.file >= 0 && !in.text.empty()) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  using namespace ss::serve;
  for (int texts : {0, 3}) {
    try {
      const AnalyzeBody b = ReadAnalyzeBody(body, texts);
      CheckInput(b.input, texts);
      if (b.samples < 1 || b.samples > kMaxSamples || b.length < kMinLength) std::abort();
    } catch (const ss::Error&) {
    }
    try {
      const ExplainBody b = ReadExplainBody(body, texts);
      CheckInput(b.input, texts);
      if (b.intervention_samples < 0 || b.intervention_samples > kMaxSamples) std::abort();
    } catch (const ss::Error&) {
    }
    try {
      const StreamBody b = ReadStreamBody(body, texts);
      CheckInput(b.input, texts);
      if (b.sinks < 0 || b.window < 1 || b.max_tokens < 2 || b.max_tokens > kMaxStreamTokens)
        std::abort();
    } catch (const ss::Error&) {
    }
  }
  return 0;
}
