// Read bandwidth of this machine, the ceiling of memory-bound decode: each thread sums its share of
// a 1 GiB f32 array (vector loads, the access pattern of a matrix-vector product over weights), and
// a memcpy of 512 MiB (the copy bandwidth: bytes read plus bytes written) for comparison. Prints
// GB/s (1e9 bytes) for 1 and 2 threads, best of 5, and beside each read figure the same bytes per
// second of the process's CPU time times the threads (what the threads read while they run,
// whatever share of a shared machine they get). Then the same 1 GiB as a file in the page cache,
// memory-mapped as the models are, read once and again on one thread: the first read of a
// mapping's pages in a process pays for mapping them (on the 2-core Zen 5 VM about a tenth of the
// read bandwidth, 2026-12-07), which a model's first tokens pay for the weights they touch first.
// Used by bench/run_decode_bench.sh, beside the decode rates, in the same run.
#include <fcntl.h>
#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
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

// The sum of n floats (n a multiple of 4096) with `threads` threads.
double Sum(const float* a, size_t n, int threads) {
  double total = 0;
#pragma omp parallel for num_threads(threads) reduction(+ : total) schedule(static)
  for (size_t block = 0; block < n / 4096; ++block) {
    float acc[16] = {};
    const float* p = a + block * 4096;
    for (int i = 0; i < 4096; i += 16)
      for (int j = 0; j < 16; ++j) acc[j] += p[i + j];
    for (float v : acc) total += v;
  }
  return total;
}

// Sums the array with `threads` threads; returns the best GB/s of 5 passes, and in *per_cpu the
// best bytes per CPU-second times the threads.
double ReadGbps(const std::vector<float>& a, int threads, double* per_cpu) {
  double best = 0, sink = 0;
  *per_cpu = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = Seconds(), c0 = CpuSeconds();
    sink += Sum(a.data(), a.size(), threads);
    best = std::max(best, a.size() * sizeof(float) / (Seconds() - t0) / 1e9);
    *per_cpu = std::max(*per_cpu, threads * a.size() * sizeof(float) / (CpuSeconds() - c0) / 1e9);
  }
  if (sink == 1.2345) std::printf(" ");  // keeps the sums live
  return best;
}

// `a` written to a file (in TMPDIR, removed at once), mapped, and read on one thread twice: GB/s of
// the first read (the pages mapped as they are touched) and of the second. False where the file
// cannot be written.
bool MappedFileGbps(const std::vector<float>& a, double* first, double* again) {
  const char* dir = std::getenv("TMPDIR");
  std::string path = std::string(dir && *dir ? dir : "/tmp") + "/bench_membw.XXXXXX";
  const int fd = mkstemp(path.data());
  if (fd < 0) return false;
  unlink(path.c_str());
  const size_t bytes = a.size() * sizeof(float);
  bool ok = true;
  for (size_t done = 0; ok && done < bytes;) {
    const ssize_t n = write(fd, reinterpret_cast<const char*>(a.data()) + done, bytes - done);
    ok = n > 0;
    done += ok ? static_cast<size_t>(n) : 0;
  }
  void* map = ok ? mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  close(fd);
  if (map == MAP_FAILED) return false;
  double sink = 0;
  for (double* gbps : {first, again}) {
    const double t0 = Seconds();
    sink += Sum(static_cast<const float*>(map), a.size(), 1);
    *gbps = bytes / (Seconds() - t0) / 1e9;
  }
  munmap(map, bytes);
  if (sink == 1.2345) std::printf(" ");
  return true;
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
  double first = 0, again = 0;
  if (MappedFileGbps(a, &first, &again))
    std::printf("mapped file in the page cache, 1 thread: first read %.1f GB/s, then %.1f GB/s\n",
                first, again);
  return dst[12345] == 7;
}
