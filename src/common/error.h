// Two kinds of errors, because their readers differ (a user who gave bad input, a developer who
// broke an invariant):
//  - ss::Error: bad input from outside (files, flags). Carries one clear line that names the file
//  or
//    argument, what was expected and what was found. The CLI prints it and exits non-zero.
//  - SS_ASSERT: a broken internal invariant. Prints file and line and aborts; in a process that
//    must outlive one bad request (serve, the Python module: SetAssertionsThrow) it throws
//    InternalError instead, which the request's handler reports.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ss {

// `bytes` as they may stand in a message: printable ASCII and valid UTF-8 as they are, every other
// byte (NUL, control characters, DEL, bytes that are not UTF-8) as \xNN; newlines and tabs are
// kept when `keep_layout`. A message travels as one C string (what(), stderr, a Python
// exception's text): a NUL would end it early, and a byte that is not UTF-8 would make Python's
// decoding of it fail.
std::string Printable(std::string_view bytes, bool keep_layout = false);
// Printable() of the first `max_bytes` of `bytes`, with "..." after it when it was cut: for
// quoting an item of a user's file.
std::string PrintableExcerpt(std::string_view bytes, size_t max_bytes);

class Error : public std::runtime_error {
 public:
  // The message passes through Printable(keep_layout): whatever a message quotes from a file,
  // it reaches the user whole.
  explicit Error(const std::string& message)
      : std::runtime_error(Printable(message, /*keep_layout=*/true)) {}
};

template <typename... Args>
[[noreturn]] void Fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

// A broken invariant met in a process where SS_ASSERT throws: what() names the file, line and
// expression. Not an Error: it is never the user's input's fault as far as the code knows.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// Whether SS_ASSERT throws InternalError (true) or aborts (false, the default). Set once at
// start-up by serve and the Python module.
void SetAssertionsThrow(bool enabled);

[[noreturn]] void AssertFailed(const char* expr, const char* file, int line);

}  // namespace ss

#define SS_ASSERT(cond)                                         \
  do {                                                          \
    if (!(cond)) ::ss::AssertFailed(#cond, __FILE__, __LINE__); \
  } while (0)
