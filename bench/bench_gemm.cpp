// bf16 and Q8_0 matrix products (kernels/gemm_bf16.h, kernels/gemm_q8.h), and products on weights
// in a GGUF file's own Q4_0 / Q4_K / MXFP4 rows and in gpt-oss's split MXFP4 blocks + scales
// (--precision native, kernels/gemm_ggml.h), against the f32 product
// through OpenBLAS sgemm (MatMul's large-product path), y (T, out) = x (T, in) W^T, on the shapes
// they are meant for: (in, out) = (768, 3072) MLP up, (3072, 768) MLP down, (768, 2304) fused QKV;
// T = 512, 1024, 2048, 32 (a short prompt) and 1 (decode), with two decode shapes too large for the
// caches (a 32000 x 768 LM head, a 7B model's 11008 x 4096 MLP) where the product is bound by
// reading W: there the table also gives the bytes of W read per second. Runs at the process's
// thread count (OMP_NUM_THREADS or all cores). Each shape's runs are adjacent, and a table of
// throughput ratios to sgemm (median repetition of each) is printed at the end. Pack time (once per
// weight) is timed separately. On a busy machine, interleave the repetitions so the kernels see the
// same load:
//   OMP_NUM_THREADS=2 build/bench/bench_gemm --benchmark_repetitions=5
//       --benchmark_enable_random_interleaving=true
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
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
#include "tensor/half.h"

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

// Llama-2-7B's products (W (out, in): q/k/v/o 4096 x 4096, gate/up 11008 x 4096, down 4096 x 11008,
// the LM head 32000 x 4096) at T = 16, 64 and 256 rows of x: a chat turn, explain's 64-token
// forwards, a longer prompt. Only sgemm, the bf16 pack and the native BF16 view run these (and
// the Q8_0 / Q4_K / MXFP4 files at T = 64); their names start with "7b/".
const Shape k7bShapes[] = {{16, 4096, 4096},   {16, 4096, 11008},  {16, 11008, 4096},
                           {16, 4096, 32000},  {64, 4096, 4096},   {64, 4096, 11008},
                           {64, 11008, 4096},  {64, 4096, 32000},  {256, 4096, 4096},
                           {256, 4096, 11008}, {256, 11008, 4096}, {256, 4096, 32000}};

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

// ---- The ceilings: register-only loops of one instruction, kChains independent accumulators
// (more than its latency times its issue rate, so that the loop is bound by issue alone), nothing
// read from memory. Run on `threads` threads at once, each its own loop; GFLOP/s counts 2 per
// multiply-add (VDPBF16PS: 32 a zmm instruction, VFMADD231PS: 16 zmm / 8 ymm, VPDPBUSD: 64 byte
// products a zmm instruction, counted as 2 "ops" each).
constexpr int kChains = 24;
constexpr int64_t kPeakIterations = 1 << 22;  // per thread and call: ~100 M instructions

// Keeps v in a register as far as the compiler knows (so the loop is not folded).
#define SS_OPAQUE(v) asm volatile("" : "+v"(v))

__attribute__((target("avx512f,avx512bf16"), noinline)) float PeakDpbf16ps() {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  __m512i a = _mm512_set1_epi32(0x3f803f80), b = _mm512_set1_epi32(0x3c003c00);  // bf16 1.0, 2^-7
  SS_OPAQUE(a);
  SS_OPAQUE(b);
  for (int64_t i = 0; i < kPeakIterations; ++i) {
#pragma GCC unroll 24
    for (int c = 0; c < kChains; ++c)
      acc[c] =
          _mm512_dpbf16_ps(acc[c], reinterpret_cast<__m512bh>(a), reinterpret_cast<__m512bh>(b));
  }
  __m512 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm512_add_ps(total, acc[c]);
  alignas(64) float v[16];
  _mm512_store_ps(v, total);
  return v[0] + v[15];
}

__attribute__((target("avx512f"), noinline)) float PeakFma512() {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
  __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(1e-7f);
  SS_OPAQUE(a);
  SS_OPAQUE(b);
  for (int64_t i = 0; i < kPeakIterations; ++i) {
#pragma GCC unroll 24
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(a, b, acc[c]);
  }
  __m512 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm512_add_ps(total, acc[c]);
  alignas(64) float v[16];
  _mm512_store_ps(v, total);
  return v[0] + v[15];
}

// 12 chains: the 16 ymm registers hold 12 accumulators and the operands.
__attribute__((target("avx2,fma"), noinline)) float PeakFma256() {
  constexpr int kYmmChains = 12;
  __m256 acc[kYmmChains];
  for (int c = 0; c < kYmmChains; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c));
  __m256 a = _mm256_set1_ps(1.0f), b = _mm256_set1_ps(1e-7f);
  SS_OPAQUE(a);
  SS_OPAQUE(b);
  for (int64_t i = 0; i < 2 * kPeakIterations; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kYmmChains; ++c) acc[c] = _mm256_fmadd_ps(a, b, acc[c]);
  }
  __m256 total = acc[0];
  for (int c = 1; c < kYmmChains; ++c) total = _mm256_add_ps(total, acc[c]);
  alignas(32) float v[8];
  _mm256_store_ps(v, total);
  return v[0] + v[7];
}

__attribute__((target("avx512f,avx512vnni"), noinline)) float PeakDpbusd() {
  __m512i acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_epi32(c);
  __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-5);
  SS_OPAQUE(a);
  SS_OPAQUE(b);
  for (int64_t i = 0; i < kPeakIterations; ++i) {
#pragma GCC unroll 24
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbusd_epi32(acc[c], a, b);
  }
  __m512i total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm512_add_epi32(total, acc[c]);
  alignas(64) int32_t v[16];
  _mm512_store_si512(v, total);
  return static_cast<float>(v[0] + v[15]);
}

// (multiply-adds per instruction, instructions per call) of each loop.
struct PeakLoop {
  float (*run)();
  double macs_per_call;
};

void Peak(benchmark::State& state, PeakLoop loop, int threads) {
  float sink = 0.0f;
  for (auto _ : state) {
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    sink += loop.run();
  }
  benchmark::DoNotOptimize(sink);
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * loop.macs_per_call * threads * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

void RegisterPeaks() {
  __builtin_cpu_init();
  struct Named {
    const char* name;
    bool available;
    PeakLoop loop;
  };
  const double zmm_calls = static_cast<double>(kPeakIterations) * kChains;
  const Named loops[] = {
      {"vdpbf16ps_zmm", __builtin_cpu_supports("avx512bf16") != 0, {PeakDpbf16ps, 32 * zmm_calls}},
      {"vfmadd231ps_zmm", __builtin_cpu_supports("avx512f") != 0, {PeakFma512, 16 * zmm_calls}},
      {"vfmadd231ps_ymm",
       __builtin_cpu_supports("fma") != 0,
       {PeakFma256, 8.0 * 2 * kPeakIterations * 12}},
      {"vpdpbusd_zmm", __builtin_cpu_supports("avx512vnni") != 0, {PeakDpbusd, 64 * zmm_calls}},
  };
  for (const Named& n : loops) {
    if (!n.available) continue;
    for (int threads : {1, 2})
      benchmark::RegisterBenchmark(
          ("peak/" + std::string(n.name) + "/threads" + std::to_string(threads)).c_str(), Peak,
          n.loop, threads)
          ->UseRealTime()
          ->MeasureProcessCPUTime();
  }
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

// W stored as `type` (F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K or MXFP4) in ggml's row layout, or MXFP4's
// split form (those MXFP4 blocks' scales moved apart; the nibble order does not change the time),
// multiplied as --precision native does. X: how x is taken (--activations): f32, int8 on the rows
// as stored, or int8 on the rows packed (PackForInt8: Q4_0, Q4_K, Q6_K, Q8_0 and MXFP4).
enum class X { kF32, kInt8, kInt8Packed };
void NativeX(benchmark::State& state, Shape s, uint32_t type, X xmode) {
  const auto x = Random(static_cast<size_t>(s.T) * s.in, 1);
  const auto w = Random(static_cast<size_t>(s.out) * s.in, 2);
  const int64_t n = static_cast<int64_t>(s.out) * s.in;
  const uint32_t stored = type == ss::kTypeMxfp4Split ? ss::kGgmlTypeMXFP4 : type;
  std::vector<uint8_t> bytes(ss::GgmlBytes(stored, n)), scales;
  switch (stored) {
    case ss::kGgmlTypeF16:
    case ss::kGgmlTypeBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = stored == ss::kGgmlTypeF16 ? ss::F32ToF16(w[i]) : ss::F32ToBF16(w[i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
      break;
    case ss::kGgmlTypeQ8_0:
      ss::QuantizeQ8_0(w.data(), bytes.data(), n);
      break;
    case ss::kGgmlTypeQ4_K:
      ss::QuantizeQ4_K(w.data(), bytes.data(), n);
      break;
    case ss::kGgmlTypeQ6_K:
      ss::QuantizeQ6_K(w.data(), bytes.data(), n);
      break;
    case ss::kGgmlTypeMXFP4:
      ss::QuantizeMXFP4(w.data(), bytes.data(), n);
      break;
    default:
      ss::QuantizeQ4_0(w.data(), bytes.data(), n);
      break;
  }
  if (type == ss::kTypeMxfp4Split) {
    std::vector<uint8_t> nibbles;
    for (int64_t b = 0; b < n / 32; ++b) {
      scales.push_back(bytes[17 * b]);
      nibbles.insert(nibbles.end(), bytes.begin() + 17 * b + 1, bytes.begin() + 17 * b + 17);
    }
    bytes = nibbles;
  }
  ss::GgmlMatrix m = ss::GgmlView(type, s.out, s.in, bytes.data(), nullptr, 1,
                                  scales.empty() ? nullptr : scales.data());
  ss::SetGgmlActivations(type,
                         xmode == X::kF32 ? ss::GgmlActivations::kF32 : ss::GgmlActivations::kInt8);
  if (xmode == X::kInt8Packed) ss::PackForInt8(&m);
  std::vector<float> y(static_cast<size_t>(s.T) * s.out);
  for (auto _ : state) {
    ss::MatMulGgml(x.data(), m, nullptr, y.data(), s.T);
    benchmark::DoNotOptimize(y.data());
  }
  SetFlops(state, s, static_cast<double>(m.bytes() + scales.size()) / static_cast<double>(n));
  state.SetLabel(xmode == X::kF32
                     ? std::string(ss::GgmlKernelName(type))
                     : ss::GgmlActivationsName(type) + (m.int8 != nullptr ? ", packed" : ""));
  ss::SetGgmlActivations(type, ss::GgmlActivations::kF32);
}

void Native(benchmark::State& state, Shape s, uint32_t type) { NativeX(state, s, type, X::kF32); }

// The split MXFP4 form with f32 x on AVX-512F alone, beside its VBMI kernels (gemm_ggml.h,
// AllowVbmiForMxfp4).
void SplitWithoutVbmi(benchmark::State& state, Shape s) {
  ss::AllowVbmiForMxfp4(false);
  NativeX(state, s, ss::kTypeMxfp4Split, X::kF32);
  ss::AllowVbmiForMxfp4(true);
}

// gpt-oss-20b's expert products: gate and up as one stream of 5760 rows, down, and a prompt's.
const Shape kGptOssShapes[] = {{1, 2880, 5760}, {1, 2880, 2880}, {64, 2880, 5760}};

const std::pair<const char*, uint32_t> kNativeTypes[] = {{"q4_0", ss::kGgmlTypeQ4_0},
                                                         {"q4_k", ss::kGgmlTypeQ4_K},
                                                         {"mxfp4", ss::kGgmlTypeMXFP4},
                                                         {"mxfp4_split", ss::kTypeMxfp4Split}};
// Decode only (T = 1): the other stored types.
const std::pair<const char*, uint32_t> kDecodeTypes[] = {{"native_bf16", ss::kGgmlTypeBF16},
                                                         {"native_f16", ss::kGgmlTypeF16},
                                                         {"native_q8_0", ss::kGgmlTypeQ8_0},
                                                         {"q6_k", ss::kGgmlTypeQ6_K}};

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
      // The same work per second of the process's CPU time (all its threads): what each core
      // delivers while it runs, whatever share of the shared machine the process got.
      auto it = run.counters.find("GFLOP/s");
      if (it != run.counters.end() && run.cpu_accumulated_time > 0)
        values["GFLOP/cpu_s " + run.run_name.function_name].push_back(
            it->second * run.real_accumulated_time / run.cpu_accumulated_time);
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
  RegisterPeaks();
  for (const Shape& s : kShapes) {
    benchmark::RegisterBenchmark(("sgemm/" + ShapeName(s)).c_str(), Sgemm, s)
        ->UseRealTime()
        ->MeasureProcessCPUTime();
    if (s.T == 1)
      benchmark::RegisterBenchmark(("openblas_sgemv/" + ShapeName(s)).c_str(), Sgemv, s)
          ->UseRealTime()
          ->MeasureProcessCPUTime();
    benchmark::RegisterBenchmark(("bf16/" + ShapeName(s)).c_str(), Bf16, s)
        ->UseRealTime()
        ->MeasureProcessCPUTime();
    benchmark::RegisterBenchmark(("q8_0/" + ShapeName(s)).c_str(), Q8, s)
        ->UseRealTime()
        ->MeasureProcessCPUTime();
    for (auto [name, type] : kNativeTypes)
      benchmark::RegisterBenchmark((std::string(name) + "/" + ShapeName(s)).c_str(), Native, s,
                                   type)
          ->UseRealTime()
          ->MeasureProcessCPUTime();
    if (s.T == 1)
      for (auto [name, type] : kDecodeTypes)
        benchmark::RegisterBenchmark((std::string(name) + "/" + ShapeName(s)).c_str(), Native, s,
                                     type)
            ->UseRealTime()
            ->MeasureProcessCPUTime();
    // Decode with x in int8 (--activations int8): the rows as stored, then packed (Q8_0's int8
    // products run on packed rows only; the f32 product on its rows as stored is q8_0_native).
    if (s.T == 1)
      for (auto [name, type] : {std::pair{"q4_0", ss::kGgmlTypeQ4_0},
                                {"q4_k", ss::kGgmlTypeQ4_K},
                                {"q6_k", ss::kGgmlTypeQ6_K},
                                {"q8_0", ss::kGgmlTypeQ8_0},
                                {"mxfp4", ss::kGgmlTypeMXFP4}})
        for (X mode : {X::kInt8, X::kInt8Packed}) {
          if (mode == X::kInt8Packed && !ss::Int8PackSupports(type)) continue;
          if (mode == X::kInt8 && type == ss::kGgmlTypeQ8_0) continue;
          const std::string label =
              std::string(name) + (mode == X::kInt8 ? "_int8x/" : "_int8x_packed/") + ShapeName(s);
          benchmark::RegisterBenchmark(label.c_str(), NativeX, s, type, mode)
              ->UseRealTime()
              ->MeasureProcessCPUTime();
        }
  }
  for (const Shape& s : k7bShapes) {
    benchmark::RegisterBenchmark(("7b/sgemm/" + ShapeName(s)).c_str(), Sgemm, s)
        ->UseRealTime()
        ->MeasureProcessCPUTime();
    benchmark::RegisterBenchmark(("7b/bf16/" + ShapeName(s)).c_str(), Bf16, s)
        ->UseRealTime()
        ->MeasureProcessCPUTime();
    benchmark::RegisterBenchmark(("7b/native_bf16/" + ShapeName(s)).c_str(), Native, s,
                                 ss::kGgmlTypeBF16)
        ->UseRealTime()
        ->MeasureProcessCPUTime();
    if (s.T == 64)
      for (auto [name, type] :
           {std::pair{"native_q8_0", ss::kGgmlTypeQ8_0}, std::pair{"q4_k", ss::kGgmlTypeQ4_K},
            std::pair{"mxfp4", ss::kGgmlTypeMXFP4}})
        benchmark::RegisterBenchmark(("7b/" + std::string(name) + "/" + ShapeName(s)).c_str(),
                                     Native, s, type)
            ->UseRealTime()
            ->MeasureProcessCPUTime();
  }
  for (const Shape& s : kGptOssShapes) {
    benchmark::RegisterBenchmark(("gpt_oss/mxfp4_split/" + ShapeName(s)).c_str(), Native, s,
                                 ss::kTypeMxfp4Split)
        ->UseRealTime()
        ->MeasureProcessCPUTime();
    benchmark::RegisterBenchmark(("gpt_oss/mxfp4_split_avx512f/" + ShapeName(s)).c_str(),
                                 SplitWithoutVbmi, s)
        ->UseRealTime()
        ->MeasureProcessCPUTime();
  }
  for (const Shape& s : {kShapes[0], kShapes[1]})
    benchmark::RegisterBenchmark(
        ("pack/in" + std::to_string(s.in) + "/out" + std::to_string(s.out)).c_str(), Pack, s)
        ->UseRealTime()
        ->MeasureProcessCPUTime();
  for (const Shape& s : {kShapes[0], kShapes[1]})
    benchmark::RegisterBenchmark(
        ("pack_q8_0/in" + std::to_string(s.in) + "/out" + std::to_string(s.out)).c_str(), PackQ8, s)
        ->UseRealTime()
        ->MeasureProcessCPUTime();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const int threads = ss::ThreadCount();
  std::printf("threads: %d; bf16 kernel: %s; q8_0 kernel: %s; native kernels: %s\n", threads,
              ss::Bf16KernelName(), ss::Q8KernelName(), ss::GgmlKernelName(ss::kGgmlTypeBF16));
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  // The ceilings measured in this run: per core (GFLOP per second of CPU time, so a share of the
  // shared machine taken by others does not lower them), with one thread and with two at once.
  double peak_bf16 = 0, peak_fma = 0;
  bool any_peak = false;
  for (const char* loop : {"vdpbf16ps_zmm", "vfmadd231ps_zmm", "vfmadd231ps_ymm", "vpdpbusd_zmm"})
    for (int t : {1, 2}) {
      const std::string name = "peak/" + std::string(loop) + "/threads" + std::to_string(t);
      const double wall = reporter.Median("GFLOP/s " + name),
                   core = reporter.Median("GFLOP/cpu_s " + name);
      if (wall <= 0) continue;
      if (!any_peak)
        std::printf("\n%-34s %14s %22s\n", "ceiling", "GFLOP/s (wall)", "GFLOP/s per core (CPU)");
      any_peak = true;
      std::printf("%-34s %14.1f %22.1f\n", name.c_str(), wall, core);
      if (t == std::min(threads, 2)) {
        if (std::string(loop) == "vdpbf16ps_zmm") peak_bf16 = core;
        if (std::string(loop) == "vfmadd231ps_zmm") peak_fma = core;
      }
    }
  std::printf(
      "\n%-26s %11s %11s %11s %11s %11s %11s %11s %11s %11s %11s  (medians; decode: GB/s of W "
      "read)\n",
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
      std::printf(
          "%-26s %11.1f %11.1f %11.1f %11.1f %11.1f %11.1f %11.1f %10.2fx %10.2fx %10.2fx\n",
          ShapeName(s).c_str(), a, b, q, q40, q4k, mx, mxs,
          reporter.Median("GFLOP/s bf16/" + ShapeName(s)) / ta,
          reporter.Median("GFLOP/s q8_0/" + ShapeName(s)) / ta,
          reporter.Median("GFLOP/s q4_k/" + ShapeName(s)) / ta);
  }
  // Decode: GB/s of W read by every kind of weight.
  {
    const char* kinds[] = {"sgemm",       "openblas_sgemv", "bf16",        "q8_0",
                           "native_bf16", "native_f16",     "native_q8_0", "q4_0",
                           "q4_k",        "q6_k",           "mxfp4",       "mxfp4_split"};
    bool header = false;
    for (const Shape& s : kShapes) {
      if (s.T != 1) continue;
      std::string line;
      bool any = false;
      for (const char* kind : kinds) {
        const double v = reporter.Median(std::string("GB/s ") + kind + "/" + ShapeName(s));
        any = any || v > 0;
        char cell[32];
        std::snprintf(cell, sizeof(cell), " %9.1f", v);
        line += cell;
      }
      if (!any) continue;
      if (!header) {
        std::printf("\n%-22s", "decode (GB/s of W)");
        for (const char* kind : kinds) std::printf(" %9.9s", kind);
        std::printf("\n");
        header = true;
      }
      std::printf("%-22s%s\n", ShapeName(s).c_str(), line.c_str());
    }
  }
  // The 7B shapes: GFLOP/s (wall), ratios to sgemm, and GFLOP per CPU-second against the per-core
  // ceilings above (at this run's thread count).
  bool header = false;
  for (const Shape& s : k7bShapes) {
    const std::string n = ShapeName(s);
    const double a = reporter.Median("GFLOP/s 7b/sgemm/" + n);
    const double b = reporter.Median("GFLOP/s 7b/bf16/" + n);
    const double nb = reporter.Median("GFLOP/s 7b/native_bf16/" + n);
    if (a <= 0 && b <= 0 && nb <= 0) continue;
    if (!header) {
      std::printf("\n%-26s %9s %9s %12s %11s %13s   %s\n", "7B shape (GFLOP/s)", "sgemm", "bf16",
                  "native_bf16", "bf16/sgemm", "native/sgemm",
                  "per core: bf16/VDPBF16PS  native/FMA  sgemm/FMA");
      header = true;
    }
    auto ratio = [](double p, double q) { return p > 0 && q > 0 ? p / q : 0.0; };
    std::printf("%-26s %9.1f %9.1f %12.1f %10.2fx %12.2fx   %17.0f%% %10.0f%% %9.0f%%\n", n.c_str(),
                a, b, nb, ratio(b, a), ratio(nb, a),
                100 * ratio(reporter.Median("GFLOP/cpu_s 7b/bf16/" + n), peak_bf16),
                100 * ratio(reporter.Median("GFLOP/cpu_s 7b/native_bf16/" + n), peak_fma),
                100 * ratio(reporter.Median("GFLOP/cpu_s 7b/sgemm/" + n), peak_fma));
  }
  // gpt-oss's expert shapes, split MXFP4 with f32 x: the kernel this CPU runs (VBMI where it has
  // it) against AVX-512F alone.
  header = false;
  for (const Shape& s : kGptOssShapes) {
    const std::string n = ShapeName(s), unit = s.T == 1 ? "GB/s " : "GFLOP/s ";
    const double v = reporter.Median(unit + "gpt_oss/mxfp4_split/" + n),
                 f = reporter.Median(unit + "gpt_oss/mxfp4_split_avx512f/" + n);
    if (v <= 0 || f <= 0) continue;
    if (!header) {
      std::printf("\n%-26s %12s %12s %8s  (%s; decode GB/s of W, else GFLOP/s)\n",
                  "gpt-oss split MXFP4", "as run", "avx512f", "ratio",
                  ss::GgmlKernelName(ss::kTypeMxfp4Split));
      header = true;
    }
    std::printf("%-26s %12.1f %12.1f %7.2fx\n", n.c_str(), v, f, v / f);
  }
  benchmark::Shutdown();
  return 0;
}
