// Two kinds of errors (STYLE.md #7):
//  - ss::Error: bad input from outside (files, flags). Carries one clear line that names the file or
//    argument, what was expected and what was found. The CLI prints it and exits non-zero.
//  - SS_ASSERT: a broken internal invariant. Prints file and line and aborts.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace ss {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void Fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

[[noreturn]] void AssertFailed(const char* expr, const char* file, int line);

}  // namespace ss

#define SS_ASSERT(cond)                                        \
  do {                                                         \
    if (!(cond)) ::ss::AssertFailed(#cond, __FILE__, __LINE__); \
  } while (0)
