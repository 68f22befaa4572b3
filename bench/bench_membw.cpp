// Read bandwidth of this machine, the ceiling of memory-bound decode: each thread sums its share of
// a 1 GiB f32 array (vector loads, the access pattern of a matrix-vector product over weights), and
// a memcpy of 512 MiB (the copy bandwidth: bytes read plus bytes written) for comparison. Prints
// GB/s (1e9 bytes) for 1 and 2 threads, best of 5, and beside each read figure the same bytes per
// second of the process's CPU time times the threads (what the threads read while they run,
// whatever share of a shared machine they get). Used by bench/run_decode_bench.sh, beside the
// decode rates, in the same run.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <vector>

namespace {

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double CpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Sums the array with `threads` threads; returns the best GB/s of 5 passes, and in *per_cpu the
// best bytes per CPU-second times the threads.
double ReadGbps(const std::vector<float>& a, int threads, double* per_cpu) {
  double best = 0, sink = 0;
  *per_cpu = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = Seconds(), c0 = CpuSeconds();
    double total = 0;
#pragma omp parallel for num_threads(threads) reduction(+ : total) schedule(static)
    for (size_t block = 0; block < a.size() / 4096; ++block) {
      float acc[16] = {};
      const float* p = a.data() + block * 4096;
      for (int i = 0; i < 4096; i += 16)
        for (int j = 0; j < 16; ++j) acc[j] += p[i + j];
      for (float v : acc) total += v;
    }
    best = std::max(best, a.size() * sizeof(float) / (Seconds() - t0) / 1e9);
    *per_cpu = std::max(*per_cpu, threads * a.size() * sizeof(float) / (CpuSeconds() - c0) / 1e9);
    sink += total;
  }
  if (sink == 1.2345) std::printf(" ");  // keeps the sums live
  return best;
}

}  // namespace

int main() {
  std::vector<float> a(size_t{1} << 28, 1.0f);  // 1 GiB
  double per_cpu = 0;
  const double one = ReadGbps(a, 1, &per_cpu);
  std::printf("read 1 thread: %.1f GB/s (%.1f per CPU-second)\n", one, per_cpu);
  const double two = ReadGbps(a, std::min(2, omp_get_max_threads()), &per_cpu);
  std::printf("read 2 threads: %.1f GB/s (%.1f per CPU-second x 2)\n", two, per_cpu);
  std::vector<char> src(size_t{1} << 29, 1), dst(src.size());
  for (int threads : {1, std::min(2, omp_get_max_threads())}) {
    double best = 0;
    for (int rep = 0; rep < 5; ++rep) {
      const double t0 = Seconds();
      // Each thread copies its contiguous share, as each decode thread reads its rows.
#pragma omp parallel num_threads(threads)
      {
        const size_t n = src.size(), id = static_cast<size_t>(omp_get_thread_num()),
                     team = static_cast<size_t>(omp_get_num_threads());
        const size_t lo = n * id / team, hi = n * (id + 1) / team;
        std::memcpy(dst.data() + lo, src.data() + lo, hi - lo);
      }
      best = std::max(best, 2.0 * src.size() / (Seconds() - t0) / 1e9);
    }
    std::printf("memcpy %d thread%s (read + write): %.1f GB/s\n", threads, threads == 1 ? "" : "s",
                best);
  }
  return dst[12345] == 7;
}
