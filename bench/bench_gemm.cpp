// bf16 matrix product (kernels/gemm_bf16.h) against the f32 product through OpenBLAS sgemm
// (MatMul's large-product path), y (T, out) = x (T, in) W^T, on the shapes it is meant for:
// (in, out) = (768, 3072) MLP up, (3072, 768) MLP down, (768, 2304) fused QKV; T = 512, 1024, 2048,
// and 1 (decode). Runs at the process's thread count (OMP_NUM_THREADS or all cores). Each shape's
// sgemm and bf16 runs are adjacent, and a table of bf16 / sgemm throughput ratios (median
// repetition of each) is printed at the end. Pack time (once per weight) is timed separately. On a
// busy machine, interleave the repetitions so both kernels see the same load:
//   OMP_NUM_THREADS=2 build/bench/bench_gemm --benchmark_repetitions=5 \
//       --benchmark_enable_random_interleaving=true
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/gemm_bf16.h"
#include "kernels/parallel.h"

namespace {

struct Shape {
  int T, in, out;
};
const Shape kShapes[] = {{512, 768, 3072},
                         {512, 3072, 768},
                         {512, 768, 2304},
                         {1024, 768, 3072},
                         {1024, 3072, 768},
                         {1024, 768, 2304},
                         {2048, 768, 3072},
                         {2048, 3072, 768},
                         {2048, 768, 2304},
                         // Decode (one token): memory-bound, sgemv on the f32 side as in MatMul.
                         {1, 768, 3072},
                         {1, 3072, 768}};

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::string ShapeName(const Shape& s) {
  return "T" + std::to_string(s.T) + "/in" + std::to_string(s.in) + "/out" + std::to_string(s.out);
}

void SetFlops(benchmark::State& state, const Shape& s) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * s.T * s.in * s.out * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

void Sgemm(benchmark::State& state, Shape s) {
  const auto x = Random(static_cast<size_t>(s.T) * s.in, 1);
  const auto w = Random(static_cast<size_t>(s.out) * s.in, 2);
  std::vector<float> y(static_cast<size_t>(s.T) * s.out);
  for (auto _ : state) {
    // As MatMul calls it: W (out, in) row-major, used transposed; a matrix-vector product for T
    // = 1.
    if (s.T == 1)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, s.out, s.in, 1.0f, w.data(), s.in, x.data(), 1, 0.0f,
                  y.data(), 1);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.T, s.out, s.in, 1.0f, x.data(), s.in,
                  w.data(), s.in, 0.0f, y.data(), s.out);
    benchmark::DoNotOptimize(y.data());
  }
  SetFlops(state, s);
}

void Bf16(benchmark::State& state, Shape s) {
  const auto x = Random(static_cast<size_t>(s.T) * s.in, 1);
  const auto w = Random(static_cast<size_t>(s.out) * s.in, 2);
  const ss::PackedBf16 packed = ss::PackBf16(w.data(), s.out, s.in);
  std::vector<float> y(static_cast<size_t>(s.T) * s.out);
  for (auto _ : state) {
    ss::MatMulBf16(x.data(), packed, nullptr, y.data(), s.T);
    benchmark::DoNotOptimize(y.data());
  }
  SetFlops(state, s);
  state.SetLabel(ss::Bf16KernelName());
}

void Pack(benchmark::State& state, Shape s) {
  const auto w = Random(static_cast<size_t>(s.out) * s.in, 2);
  for (auto _ : state) {
    ss::PackedBf16 packed = ss::PackBf16(w.data(), s.out, s.in);
    benchmark::DoNotOptimize(packed.data.data());
  }
  state.counters["MB/s"] = benchmark::Counter(4.0 * s.in * s.out * state.iterations() / 1e6,
                                              benchmark::Counter::kIsRate);
}

// Keeps each run's GFLOP/s for the ratio table, which shows the median over repetitions (with
// interleaved repetitions on a busy machine, less swayed by one lucky or unlucky run than the
// best).
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration) continue;
      auto it = run.counters.find("GFLOP/s");
      if (it == run.counters.end()) continue;
      gflops[run.run_name.function_name].push_back(it->second);
    }
    ConsoleReporter::ReportRuns(runs);
  }
  std::map<std::string, std::vector<double>> gflops;  // "sgemm/<shape>" -> GFLOP/s of each run
  double Median(const std::string& name) {
    std::vector<double> v = gflops[name];
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  }
};

}  // namespace

int main(int argc, char** argv) {
  for (const Shape& s : kShapes) {
    benchmark::RegisterBenchmark(("sgemm/" + ShapeName(s)).c_str(), Sgemm, s)->UseRealTime();
    benchmark::RegisterBenchmark(("bf16/" + ShapeName(s)).c_str(), Bf16, s)->UseRealTime();
  }
  for (const Shape& s : {kShapes[0], kShapes[1]})
    benchmark::RegisterBenchmark(
        ("pack/in" + std::to_string(s.in) + "/out" + std::to_string(s.out)).c_str(), Pack, s)
        ->UseRealTime();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::printf("threads: %d; bf16 kernel: %s\n", ss::ThreadCount(),
              ss::Bf16KernelName());
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::printf("\n%-26s %12s %12s %8s\n", "shape", "sgemm GF/s", "bf16 GF/s", "ratio");
  for (const Shape& s : kShapes) {
    const double a = reporter.Median("sgemm/" + ShapeName(s));
    const double b = reporter.Median("bf16/" + ShapeName(s));
    if (a > 0 && b > 0)
      std::printf("%-26s %12.1f %12.1f %8.2f\n", ShapeName(s).c_str(), a, b, b / a);
  }
  benchmark::Shutdown();
  return 0;
}
