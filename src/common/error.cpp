#include "common/error.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace ss {

namespace {

// The length of the valid UTF-8 sequence of two or more bytes that starts at `s[i]`, or 0 (RFC
// 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  size_t n;
  unsigned char lo = 0x80, hi = 0xbf;  // the range of the second byte
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (i + n > s.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) return 0;
  return n;
}

}  // namespace

std::string Printable(std::string_view bytes, bool keep_layout) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    if ((c >= 0x20 && c < 0x7f) || (keep_layout && (c == '\n' || c == '\t'))) {
      out += static_cast<char>(c);
      ++i;
    } else if (const size_t n = c >= 0x80 ? Utf8SequenceLength(bytes, i) : 0; n > 0) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out += fmt::format("\\x{:02x}", c);
      ++i;
    }
  }
  return out;
}

std::string PrintableExcerpt(std::string_view bytes, size_t max_bytes) {
  if (bytes.size() <= max_bytes) return Printable(bytes);
  return Printable(bytes.substr(0, max_bytes)) + "...";
}

namespace {
std::atomic<bool> assertions_throw{false};
}  // namespace

void SetAssertionsThrow(bool enabled) { assertions_throw = enabled; }

void AssertFailed(const char* expr, const char* file, int line) {
  const std::string message =
      fmt::format("internal error: {}:{}: assertion failed: {}", file, line, expr);
  std::fprintf(stderr, "sinkscope: %s\n", message.c_str());
  if (assertions_throw) throw InternalError(message);
  std::abort();
}

}  // namespace ss
