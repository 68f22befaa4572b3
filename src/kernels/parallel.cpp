#include "kernels/parallel.h"

#include <cblas.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <omp.h>

#include <cstdlib>

#include "common/error.h"

namespace ss {

void CheckThreadCount(const char* what, int64_t n) {
  if (n < 1 || n > kMaxThreads)
    Fail("{}: expected a thread count in [1, {}], got {}", what, kMaxThreads, n);
}

void SetThreadCount(int n) {
  SS_ASSERT(n >= 1 && n <= kMaxThreads);
  omp_set_num_threads(n);
  // The OpenMP build of OpenBLAS runs its work in OpenMP regions but keeps its own limit.
  openblas_set_num_threads(n);
}

void SetThreadCountChecked(const char* what, int64_t n) {
  CheckThreadCount(what, n);
  const int before = ThreadCount();
  SetThreadCount(static_cast<int>(n));
  if (const int now = ThreadCount(); now != n) {
    SetThreadCount(before);
    Fail("{}: {} threads asked, but the OpenBLAS in use runs at most {} ({}); give {} or fewer",
         what, n, now, openblas_get_config(), now);
  }
}

int ThreadCount() { return omp_get_max_threads(); }

BlasInfo GetBlasInfo() {
  BlasInfo info;
  if (const char* c = openblas_get_config()) info.config = c;
  if (const char* c = openblas_get_corename()) info.core = c;
  info.parallel = openblas_get_parallel();
  Dl_info dl{};
  if (dladdr(reinterpret_cast<void*>(&cblas_sgemm), &dl) && dl.dli_fname)
    info.library = dl.dli_fname;
  return info;
}

const char* BlasCoreOverride() {
  if (std::getenv("OPENBLAS_CORETYPE")) return nullptr;
  const char* core = openblas_get_corename();
  if (!core || std::string_view(core) != "Prescott") return nullptr;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;
}

std::string BlasWarning() {
  const BlasInfo info = GetBlasInfo();
  if (info.openmp()) return "";
  return fmt::format(
      "warning: the loaded OpenBLAS ({}) is not the OpenMP build (openblas_get_parallel() = {}); "
      "its threads will compete with sinkscope's. Unset LD_LIBRARY_PATH/LD_PRELOAD overrides or "
      "install libopenblas0-openmp and rebuild.",
      info.library.empty() ? info.config : info.library, info.parallel);
}

}  // namespace ss
