// The process's threads: one OpenMP pool shared by our kernels and by OpenBLAS (the build links
// OpenBLAS's OpenMP variant; see CMakeLists.txt), so there are never two sets of threads competing
// for the cores.
#pragma once

#include <string>
#include <string_view>

namespace ss {

// GOMP_SPINCOUNT the CLI and the Python module set when the user chose no OpenMP wait policy:
// threads spin about this many iterations (tens of microseconds) before sleeping (src/cli/main.cpp).
inline constexpr const char* kSpinCount = "10000";
// The spin of the verbs that decode a token at a time (generate, chat, stream, serve): about a
// hundred times longer, a few milliseconds (src/cli/main.cpp says why).
inline constexpr const char* kDecodeSpinCount = "1000000";
// The GOMP_SPINCOUNT for a CLI verb: kDecodeSpinCount for generate, chat, stream and serve,
// kSpinCount for every other verb.
const char* SpinCountFor(std::string_view verb);

// Sets the thread count for OpenMP and OpenBLAS alike. n >= 1.
void SetThreadCount(int n);
// The thread count parallel regions will use now.
int ThreadCount();

// What the loaded OpenBLAS says of itself.
struct BlasInfo {
  std::string config;  // openblas_get_config(), e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY ..."
  std::string core;    // openblas_get_corename(), the kernel set chosen for this CPU
  int parallel = 0;    // openblas_get_parallel(): 0 sequential, 1 pthreads, 2 OpenMP
  std::string library; // path of the shared object that provides cblas_sgemm
  bool openmp() const { return parallel == 2; }
};
BlasInfo GetBlasInfo();

// If the loaded OpenBLAS is not the OpenMP build (a LD_LIBRARY_PATH or LD_PRELOAD override, or a
// build against another BLAS), returns a one-line warning; otherwise an empty string.
std::string BlasWarning();

}  // namespace ss
