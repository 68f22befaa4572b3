#include "common/error.h"

#include <cstdio>
#include <cstdlib>

namespace ss {

void AssertFailed(const char* expr, const char* file, int line) {
  std::fprintf(stderr, "sinkscope: internal error: %s:%d: assertion failed: %s\n", file, line, expr);
  std::abort();
}

}  // namespace ss
