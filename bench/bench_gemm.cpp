// bf16 and Q8_0 matrix products (kernels/gemm_bf16.h, kernels/gemm_q8.h), and products on weights
// in a GGUF file's own Q4_0 / Q4_K / MXFP4 rows and in gpt-oss's split MXFP4 blocks + scales
// (--precision native, kernels/gemm_ggml.h), against the f32 product
// through OpenBLAS sgemm (MatMul's large-product path), y (T, out) = x (T, in) W^T, on the shapes
// they are meant for: (in, out) = (768, 3072) MLP up, (3072, 768) MLP down, (768, 2304) fused QKV;
// T = 512, 1024, 2048, 32 (a short prompt) and 1 (decode), with two decode shapes too large for the caches (a 32000 x
// 768 LM head, a 7B model's 11008 x 4096 MLP) where the product is bound by reading W: there the
// table also gives the bytes of W read per second. Runs at the process's thread count
// (OMP_NUM_THREADS or all cores). Each shape's runs are adjacent, and a table of throughput ratios
// to sgemm (median repetition of each) is printed at the end. Pack time (once per weight) is timed
// separately. On a busy machine, interleave the repetitions so the kernels see the same load:
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

#include "kernels/dequant.h"
#include "kernels/gemm_bf16.h"
#include "kernels/gemm_ggml.h"
#include "kernels/gemm_q8.h"
#include "kernels/ops.h"
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
                         // A short prompt (a chat turn): the native types' dequantise-then-sgemm
                         // path is at its least efficient here (each row of W serves 32 rows of x).
                         {32, 768, 3072},
                         {32, 3072, 768},
                         // Decode (one token): memory-bound, MatMul's matrix-vector kernel on the
                         // f32 side (the "sgemm" column).
                         {1, 768, 3072},
                         {1, 3072, 768},
                         {1, 768, 32000},
                         {1, 4096, 11008}};

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

// GFLOP/s, and for decode the bytes of W read per second (`bytes` per weight).
void SetFlops(benchmark::State& state, const Shape& s, double bytes) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * s.T * s.in * s.out * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  if (s.T == 1)
    state.counters["GB/s"] = benchmark::Counter(bytes * s.in * s.out * state.iterations() / 1e9,
                                                benchmark::Counter::kIsRate);
}

void Sgemm(benchmark::State& state, Shape s) {
  const auto x = Random(static_cast<size_t>(s.T) * s.in, 1);
  const auto w = Random(static_cast<size_t>(s.out) * s.in, 2);
  std::vector<float> y(static_cast<size_t>(s.T) * s.out);
  for (auto _ : state) {
    // MatMul itself: OpenBLAS sgemm for these T > 1, its own matrix-vector kernel for T = 1.
    ss::MatMul(x.data(), w.data(), nullptr, y.data(), s.T, s.in, s.out);
    benchmark::DoNotOptimize(y.data());
  }
  SetFlops(state, s, 4.0);
}

// OpenBLAS's sgemv on the decode shapes, beside MatMul's own matrix-vector kernel.
void Sgemv(benchmark::State& state, Shape s) {
  const auto x = Random(static_cast<size_t>(s.in), 1);
  const auto w = Random(static_cast<size_t>(s.out) * s.in, 2);
  std::vector<float> y(static_cast<size_t>(s.out));
  for (auto _ : state) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, s.out, s.in, 1.0f, w.data(), s.in, x.data(), 1, 0.0f,
                y.data(), 1);
    benchmark::DoNotOptimize(y.data());
  }
  SetFlops(state, s, 4.0);
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
  SetFlops(state, s, 2.0);
  state.SetLabel(ss::Bf16KernelName());
}

void Q8(benchmark::State& state, Shape s) {
  const auto x = Random(static_cast<size_t>(s.T) * s.in, 1);
  const auto w = Random(static_cast<size_t>(s.out) * s.in, 2);
  const ss::PackedQ8 packed = ss::PackQ8_0(w.data(), s.out, s.in);
  std::vector<float> y(static_cast<size_t>(s.T) * s.out);
  for (auto _ : state) {
    ss::MatMulQ8(x.data(), packed, nullptr, y.data(), s.T);
    benchmark::DoNotOptimize(y.data());
  }
  SetFlops(state, s, static_cast<double>(packed.bytes()) / (static_cast<double>(s.in) * s.out));
  state.SetLabel(ss::Q8KernelName());
}

// W quantised to `type` (Q4_0, Q4_K or MXFP4) in ggml's row layout, or MXFP4's split form (those
// MXFP4 blocks' scales moved apart; the nibble order does not change the time), multiplied as
// --precision native does.
void Native(benchmark::State& state, Shape s, uint32_t type) {
  const auto x = Random(static_cast<size_t>(s.T) * s.in, 1);
  const auto w = Random(static_cast<size_t>(s.out) * s.in, 2);
  const int64_t n = static_cast<int64_t>(s.out) * s.in;
  const uint32_t stored = type == ss::kTypeMxfp4Split ? ss::kGgmlTypeMXFP4 : type;
  std::vector<uint8_t> bytes(ss::GgmlBytes(stored, n)), scales;
  if (stored == ss::kGgmlTypeQ4_K)
    ss::QuantizeQ4_K(w.data(), bytes.data(), n);
  else if (stored == ss::kGgmlTypeMXFP4)
    ss::QuantizeMXFP4(w.data(), bytes.data(), n);
  else
    ss::QuantizeQ4_0(w.data(), bytes.data(), n);
  if (type == ss::kTypeMxfp4Split) {
    std::vector<uint8_t> nibbles;
    for (int64_t b = 0; b < n / 32; ++b) {
      scales.push_back(bytes[17 * b]);
      nibbles.insert(nibbles.end(), bytes.begin() + 17 * b + 1, bytes.begin() + 17 * b + 17);
    }
    bytes = nibbles;
  }
  const ss::GgmlMatrix m = ss::GgmlView(type, s.out, s.in, bytes.data(), nullptr, 1,
                                        scales.empty() ? nullptr : scales.data());
  std::vector<float> y(static_cast<size_t>(s.T) * s.out);
  for (auto _ : state) {
    ss::MatMulGgml(x.data(), m, nullptr, y.data(), s.T);
    benchmark::DoNotOptimize(y.data());
  }
  SetFlops(state, s, static_cast<double>(m.bytes() + scales.size()) / static_cast<double>(n));
  state.SetLabel(ss::GgmlKernelName(type));
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

void PackQ8(benchmark::State& state, Shape s) {
  const auto w = Random(static_cast<size_t>(s.out) * s.in, 2);
  for (auto _ : state) {
    ss::PackedQ8 packed = ss::PackQ8_0(w.data(), s.out, s.in);
    benchmark::DoNotOptimize(packed.qs.data());
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
      for (const char* counter : {"GFLOP/s", "GB/s"}) {
        auto it = run.counters.find(counter);
        if (it != run.counters.end())
          values[std::string(counter) + " " + run.run_name.function_name].push_back(it->second);
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
  // "GFLOP/s sgemm/<shape>" -> the counter of each run
  std::map<std::string, std::vector<double>> values;
  double Median(const std::string& name) {
    std::vector<double> v = values[name];
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  }
};

}  // namespace

int main(int argc, char** argv) {
  for (const Shape& s : kShapes) {
    benchmark::RegisterBenchmark(("sgemm/" + ShapeName(s)).c_str(), Sgemm, s)->UseRealTime();
    if (s.T == 1)
      benchmark::RegisterBenchmark(("openblas_sgemv/" + ShapeName(s)).c_str(), Sgemv, s)->UseRealTime();
    benchmark::RegisterBenchmark(("bf16/" + ShapeName(s)).c_str(), Bf16, s)->UseRealTime();
    benchmark::RegisterBenchmark(("q8_0/" + ShapeName(s)).c_str(), Q8, s)->UseRealTime();
    benchmark::RegisterBenchmark(("q4_0/" + ShapeName(s)).c_str(), Native, s, ss::kGgmlTypeQ4_0)->UseRealTime();
    benchmark::RegisterBenchmark(("q4_k/" + ShapeName(s)).c_str(), Native, s, ss::kGgmlTypeQ4_K)->UseRealTime();
    benchmark::RegisterBenchmark(("mxfp4/" + ShapeName(s)).c_str(), Native, s, ss::kGgmlTypeMXFP4)->UseRealTime();
    benchmark::RegisterBenchmark(("mxfp4_split/" + ShapeName(s)).c_str(), Native, s, ss::kTypeMxfp4Split)
        ->UseRealTime();
  }
  for (const Shape& s : {kShapes[0], kShapes[1]})
    benchmark::RegisterBenchmark(
        ("pack/in" + std::to_string(s.in) + "/out" + std::to_string(s.out)).c_str(), Pack, s)
        ->UseRealTime();
  for (const Shape& s : {kShapes[0], kShapes[1]})
    benchmark::RegisterBenchmark(
        ("pack_q8_0/in" + std::to_string(s.in) + "/out" + std::to_string(s.out)).c_str(), PackQ8, s)
        ->UseRealTime();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::printf("threads: %d; bf16 kernel: %s; q8_0 kernel: %s\n", ss::ThreadCount(),
              ss::Bf16KernelName(), ss::Q8KernelName());
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::printf("\n%-26s %11s %11s %11s %11s %11s %11s %11s %11s %11s %11s  (medians; decode: GB/s of W read)\n",
              "shape", "sgemm", "bf16", "q8_0", "q4_0", "q4_k", "mxfp4", "mxfp4_split", "bf16/sgemm",
              "q8_0/sgemm", "q4_k/sgemm");
  for (const Shape& s : kShapes) {
    const std::string unit = s.T == 1 ? "GB/s " : "GFLOP/s ";
    const double a = reporter.Median(unit + "sgemm/" + ShapeName(s));
    const double b = reporter.Median(unit + "bf16/" + ShapeName(s));
    const double q = reporter.Median(unit + "q8_0/" + ShapeName(s));
    const double q40 = reporter.Median(unit + "q4_0/" + ShapeName(s));
    const double q4k = reporter.Median(unit + "q4_k/" + ShapeName(s));
    const double mx = reporter.Median(unit + "mxfp4/" + ShapeName(s));
    const double mxs = reporter.Median(unit + "mxfp4_split/" + ShapeName(s));
    const double ta = reporter.Median("GFLOP/s sgemm/" + ShapeName(s));
    if (a > 0 && b > 0 && q > 0)
      std::printf("%-26s %11.1f %11.1f %11.1f %11.1f %11.1f %11.1f %11.1f %10.2fx %10.2fx %10.2fx\n",
                  ShapeName(s).c_str(), a, b, q, q40, q4k, mx, mxs,
                  reporter.Median("GFLOP/s bf16/" + ShapeName(s)) / ta,
                  reporter.Median("GFLOP/s q8_0/" + ShapeName(s)) / ta,
                  reporter.Median("GFLOP/s q4_k/" + ShapeName(s)) / ta);
  }
  benchmark::Shutdown();
  return 0;
}
