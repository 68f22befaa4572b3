// The process's threads: one OpenMP pool shared by our kernels and by OpenBLAS (the build links
// OpenBLAS's OpenMP variant; see CMakeLists.txt), so there are never two sets of threads competing
// for the cores.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ss {

// GOMP_SPINCOUNT the CLI and the Python module set when the user chose no OpenMP wait policy:
// threads spin about this many iterations (tens of microseconds) before sleeping
// (src/app/main.cpp).
inline constexpr const char* kSpinCount = "10000";
// The spin of work that decodes a token at a time: about a hundred times longer, a few
// milliseconds (src/app/main.cpp says why; cli/commands.h's SpinCountFor picks it per verb).
inline constexpr const char* kDecodeSpinCount = "1000000";

// The thread counts a user may ask for, the same wherever they are given (the CLI's --threads,
// train's "threads", the Python module's set_threads): 1 to kMaxThreads.
inline constexpr int kMaxThreads = 4096;
// Throws ss::Error naming `what` (e.g. "--threads") unless 1 <= n <= kMaxThreads.
void CheckThreadCount(const char* what, int64_t n);

// Sets the thread count for OpenMP and OpenBLAS alike. 1 <= n <= kMaxThreads.
void SetThreadCount(int n);
// A thread count a user asked for (`what` names where): CheckThreadCount, then SetThreadCount.
// OpenBLAS runs at most the MAX_THREADS it was built with (64 in Debian's build) and lowers
// OpenMP's count to that too; a larger `n` is refused naming that limit, the count left as it
// was, instead of running on fewer threads than asked without a word.
void SetThreadCountChecked(const char* what, int64_t n);
// The thread count parallel regions will use now.
int ThreadCount();

// What the loaded OpenBLAS says of itself.
struct BlasInfo {
  std::string config;  // openblas_get_config(), e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY ..."
  std::string core;    // openblas_get_corename(), the kernel set chosen for this CPU
  int parallel = 0;    // openblas_get_parallel(): 0 sequential, 1 pthreads, 2 OpenMP
  std::string library;  // path of the shared object that provides cblas_sgemm
  bool openmp() const { return parallel == 2; }
};
BlasInfo GetBlasInfo();

// The OPENBLAS_CORETYPE to run with when OpenBLAS does not know this CPU, or null. A DYNAMIC_ARCH
// OpenBLAS picks its kernels from the CPU model and falls back to "Prescott" (SSE3) for one it
// does not know: Debian 12's 0.3.21 on an Intel Xeon of family 6 model 207 (2026) ran sgemm there
// at a quarter of the speed, every f32 product and every native prefill with it. When the user
// set no OPENBLAS_CORETYPE and the loaded OpenBLAS reports Prescott, this names the kernel set
// the CPU can run: "SkylakeX" with AVX-512 (F, BW, DQ, VL), "Haswell" with AVX2 and FMA. OpenBLAS
// reads the variable once, when it loads, so the CLI re-executes itself with it set (cli's
// main.cpp) and the Python package sets it before loading OpenBLAS (sinkscope/__init__.py).
const char* BlasCoreOverride();

// If the loaded OpenBLAS is not the OpenMP build (a LD_LIBRARY_PATH or LD_PRELOAD override, or a
// build against another BLAS), returns a one-line warning; otherwise an empty string.
std::string BlasWarning();

}  // namespace ss
