// Fuzzes the viewer server's request-head parser (serve/http.h ParseHead): the request line, the
// header lines and the percent-decoded query. Whatever the bytes, it returns a status or a parsed
// request, and what it parsed holds to the rules it promises (one Host, one of each parameter).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "serve/http.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view head(reinterpret_cast<const char*>(data), size);
  ss::http::Limits limits;
  limits.max_target_bytes = 256;
  ss::http::Request req;
  if (const auto error = ss::http::ParseHead(head, limits, req)) {
    if (error->status < 400 || error->status > 505 || error->message.empty()) std::abort();
    return 0;
  }
  if (req.target.empty() || req.target[0] != '/' || req.target.size() > limits.max_target_bytes)
    std::abort();
  for (const auto& [name, value] : req.headers) {
    if (name.empty()) std::abort();
    for (char c : name)
      if (c >= 'A' && c <= 'Z') std::abort();  // names are lower-cased
    for (char c : value)
      if (c == '\r' || c == '\n' || c == '\0') std::abort();
  }
  // A header the server decides on, or a query parameter, is there once at most.
  for (const char* single : {"host", "origin", "content-type", "x-sinkscope-token"}) {
    int n = 0;
    for (const auto& [name, value] : req.headers) n += name == single;
    if (n > 1) std::abort();
  }
  for (size_t i = 0; i < req.params.size(); ++i)
    for (size_t j = i + 1; j < req.params.size(); ++j)
      if (req.params[i].first == req.params[j].first) std::abort();
  std::string decoded;
  (void)ss::http::PercentDecode(req.query, decoded);
  return 0;
}
