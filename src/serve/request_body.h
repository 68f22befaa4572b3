// The JSON bodies of the viewer's POST requests (docs/SERVE.md), read and checked without the
// model: every key known to its endpoint, every value of its type and range, a text or a file.
// What the server then checks needs the model (the context, the cost). Throws ss::Error with the
// key's name; the server answers it with HTTP 400.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ss::serve {

inline constexpr int kMaxSamples = 1024;
inline constexpr int kMaxStreamTokens = 200000;
inline constexpr int kMinLength = 4;  // the CLI's --length floor (cli::SampleOptions)

// The input of a request: "text" (sent by the page) or "file" (an index into --texts), not both.
struct BodyInput {
  int file = -1;  // -1: the text
  std::string text;
};

struct AnalyzeBody {
  BodyInput input;
  int samples = 16, length = 64;
  uint64_t seed = 0;
  std::string conditions = "bos,no-bos,random-p0,repeat";  // as the CLI's --conditions
  double eps = 0.3;
  bool prompt = false, allow_long_context = false;
};

struct ExplainBody {
  BodyInput input;
  int samples = 8, length = 64;
  uint64_t seed = 0;
  std::string condition = "bos";
  int intervention_samples = 4;
};

struct StreamBody {
  BodyInput input;
  std::string policies = "window,sinks";  // as the CLI's --compare
  int sinks = 4, window = 252;
  int max_tokens = 20000;
};

// `texts`: how many files the server was given with --texts.
AnalyzeBody ReadAnalyzeBody(std::string_view body, int texts);
ExplainBody ReadExplainBody(std::string_view body, int texts);
StreamBody ReadStreamBody(std::string_view body, int texts);

}  // namespace ss::serve
