#include "kernels/ops.h"

#include <cblas.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "common/error.h"
#include "kernels/gemm_bf16.h"
#include "kernels/simd.h"
#include "kernels/vecmath.h"
#include "kernels/workspace.h"

namespace ss {

// y (T, out) = x W^T in plain loops, for products too small to pay for BLAS's threads: with an
// OpenMP OpenBLAS a 64-wide matrix-vector product spends more in waking and joining threads than
// computing, and on a busy machine a descheduled helper thread stalls every call.
// The loop is compiled twice: at the baseline flags and for AVX2 + FMA (8-wide partial sums, fused
// multiply-adds), chosen at run time with the SIMD level (kernels/vecmath.h); a small model's
// decode is mostly these products. W's rows are ldw floats apart (in, or a kv head's row of keys).
__attribute__((always_inline)) static inline void SmallMatMulBody(const float* x, const float* w,
                                                                  float* y, int T, int in, int out,
                                                                  int64_t ldw) {
  for (int t = 0; t < T; ++t) {
    const float* xr = x + static_cast<int64_t>(t) * in;
    float* yr = y + static_cast<int64_t>(t) * out;
    for (int o = 0; o < out; ++o) {
      const float* wr = w + static_cast<int64_t>(o) * ldw;
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // 8 partial sums so the loop vectorises
      int i = 0;
      for (; i + 8 <= in; i += 8)
        for (int k = 0; k < 8; ++k) acc[k] += xr[i + k] * wr[i + k];
      float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
      for (; i < in; ++i) sum += xr[i] * wr[i];
      yr[o] = sum;
    }
  }
}
__attribute__((target("avx2,fma"))) static void SmallMatMulAvx2(const float* x, const float* w,
                                                                float* y, int T, int in, int out,
                                                                int64_t ldw) {
  SmallMatMulBody(x, w, y, T, in, out, ldw);
}
static void SmallMatMul(const float* x, const float* w, float* y, int T, int in, int out,
                        int64_t ldw = -1) {
  if (ldw < 0) ldw = in;
  if (Avx2FmaActive())
    SmallMatMulAvx2(x, w, y, T, in, out, ldw);
  else
    SmallMatMulBody(x, w, y, T, in, out, ldw);
}

// y[o] = W[o] · x for o in [0, out): a token's product in decode, bound by reading W once. The AVX2
// body takes R rows evenly spaced through the range at once (o, o + q, o + 2q, ... with q = out /
// R): R long sequential streams keep more of the memory's requests in flight than one stream, and R
// independent rows (two 8-lane chains each) keep the FMA units fed. On the Xeon, without the
// prefetch below, four spaced rows read 14.7-20.5 GB/s of W against 10.4-12.2 one row at a time;
// four adjacent rows instead of spaced ones read 9-15 GB/s on rows of 288-768 floats, too short
// for the prefetcher to follow four interleaved streams. With the prefetch, on the 2-core Zen 5
// EPYC, two streams a thread beat four: 46-53 GB/s against 31-39 with two threads (each thread's
// streams spaced through its half), 28-30 against 24-31 on one, 288- to 2048-wide rows of a 3.5 GB
// file; the 0.9B Llama shape's decode 9.4-9.8 -> 13.7 tokens/s with two threads (7.3 -> 7.9 on
// one), the stories110M shape's 45-49 -> 60-61 on one thread.
constexpr int kMatVecStreams = 2;
constexpr int kKeyRowsAhead = 4;  // per stream: 8 rows ahead in all
// Rows next to each other (W's own rows): each stream asks for the line 2 KiB further on, in its
// row or the next one, which it reads next. On the Zen 5 EPYC, alternating rounds (four streams
// then): the stories110M shape's decode 25-27 -> 37-41 tokens/s on one thread (2 threads 49-51 ->
// 59-75), the 0.9B Llama shape's 4.3-4.9 -> 6.1 (2 threads 7.2-8.1 -> 9.9-10.8); 1, 4 and 8 KiB
// did no better.
constexpr int kAheadFloats = 512;

// y[r] = W row r · x for the R rows wr[r] (each with two 8-lane chains, the same arithmetic for
// every row whichever group it is in: a row's result does not depend on how rows are split).
template <int R>
__attribute__((target("avx2,fma"))) static inline void RowsDotAvx2(const float* x,
                                                                   const float* const* wr, int in,
                                                                   float* const* y, bool prefetch,
                                                                   int64_t ldw) {
  __m256 a[R], b[R];
  for (int r = 0; r < R; ++r) {
    a[r] = b[r] = _mm256_setzero_ps();
    if (prefetch)
      for (int c = 0; c < in; c += 16)
        _mm_prefetch(reinterpret_cast<const char*>(wr[r] + kKeyRowsAhead * ldw + c), _MM_HINT_T0);
  }
  int i = 0;
  for (; i + 16 <= in; i += 16) {
    const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
    for (int r = 0; r < R; ++r) {
      if (!prefetch)  // may point past W's end (an integer, not a pointer, till then): no fault
        _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(wr[r] + i) +
                                                   sizeof(float) * kAheadFloats),
                     _MM_HINT_T0);
      a[r] = _mm256_fmadd_ps(_mm256_loadu_ps(wr[r] + i), x0, a[r]);
      b[r] = _mm256_fmadd_ps(_mm256_loadu_ps(wr[r] + i + 8), x1, b[r]);
    }
  }
  if (i + 8 <= in) {
    const __m256 x0 = _mm256_loadu_ps(x + i);
    for (int r = 0; r < R; ++r) a[r] = _mm256_fmadd_ps(_mm256_loadu_ps(wr[r] + i), x0, a[r]);
    i += 8;
  }
  for (int r = 0; r < R; ++r) {
    float sum = HorizontalSum(_mm256_add_ps(a[r], b[r]));
    for (int j = i; j < in; ++j) sum += x[j] * wr[r][j];
    *y[r] = sum;
  }
}

__attribute__((target("avx2,fma"))) static void MatVecAvx2(const float* x, const float* w, float* y,
                                                           int in, int out, int64_t ldw) {
  constexpr int R = kMatVecStreams;
  const int q = out / R;
  // Short rows far apart (a head's keys in the cache) are fetched kKeyRowsAhead rows ahead.
  const bool prefetch = ldw > in && in <= 256;
  for (int o = 0; o < q; ++o) {
    const float* wr[R];
    float* yr[R];
    for (int r = 0; r < R; ++r) {
      wr[r] = w + static_cast<int64_t>(o + r * q) * ldw;
      yr[r] = y + o + r * q;
    }
    RowsDotAvx2<R>(x, wr, in, yr, prefetch, ldw);
  }
  // The out % R rows left over, one at a time.
  for (int o = q * R; o < out; ++o) {
    const float* wr = w + static_cast<int64_t>(o) * ldw;
    float* yr = y + o;
    RowsDotAvx2<1>(x, &wr, in, &yr, prefetch, ldw);
  }
}

// Multiply-adds from which a matrix-vector product splits its rows over the threads: 2^16 is
// 256 KiB of W, about 15 us of reading on one core; waking a spinning helper costs a few.
constexpr int64_t kParallelMatVec = int64_t{1} << 16;

// y[o] = W[o] · x on the calling thread, W's rows ldw floats apart.
static void RowDots(const float* x, const float* w, float* y, int in, int out, int64_t ldw) {
  if (Avx2FmaActive())
    MatVecAvx2(x, w, y, in, out, ldw);
  else
    SmallMatMulBody(x, w, y, 1, in, out, ldw);
}

void MatVecBatch(const float* x, int in, std::span<const MatVecJob> jobs) {
  int64_t total = 0;
  for (const MatVecJob& job : jobs) total += job.out;
#pragma omp parallel if (total * in >= kParallelMatVec)
  {
    const int threads = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t first = total * id / threads, last = total * (id + 1) / threads;
    int64_t job_first = 0;  // the job's first row in the joined range
    for (const MatVecJob& job : jobs) {
      const int64_t lo = std::max(first, job_first), hi = std::min(last, job_first + job.out);
      if (lo < hi) {
        const int r0 = static_cast<int>(lo - job_first), rows = static_cast<int>(hi - lo);
        RowDots(x, job.w + static_cast<int64_t>(r0) * in, job.y + r0, in, rows, in);
        if (job.bias)
          for (int r = r0; r < r0 + rows; ++r) job.y[r] += job.bias[r];
      }
      job_first += job.out;
    }
  }
}

void MatVec(const float* x, const float* w, float* y, int in, int out) {
  const MatVecJob job{w, nullptr, y, out};
  MatVecBatch(x, in, std::span<const MatVecJob>(&job, 1));
}

// acc (dim) += sum over j < n of p[j] v[j] (rows of v ldv floats apart), skipping zero weights: a
// decode query's weighted sum of values. The AVX2 body keeps up to 64 floats of acc in registers
// across the rows (a head of 48 in one block of 6 vectors, of 128 in two of 8).
__attribute__((always_inline)) static inline void AddWeightedRowsBody(const float* p,
                                                                      const float* v, int64_t ldv,
                                                                      int n, int dim, float* acc) {
  for (int j = 0; j < n; ++j) {
    if (p[j] == 0.0f) continue;
    const float* vj = v + static_cast<int64_t>(j) * ldv;
    for (int d = 0; d < dim; ++d) acc[d] += p[j] * vj[d];
  }
}
// How many rows ahead the attention's row loops prefetch a strided cache row.
constexpr int kRowsAhead = 8;

// N vectors (8N floats) of acc at once, kept in registers across the rows.
template <int N>
__attribute__((target("avx2,fma"))) static void AddWeightedRowsBlock(const float* p, const float* v,
                                                                     int64_t ldv, int n,
                                                                     float* acc) {
  __m256 a[N];
  for (int i = 0; i < N; ++i) a[i] = _mm256_loadu_ps(acc + 8 * i);
  for (int j = 0; j < n; ++j) {
    if (p[j] == 0.0f) continue;
    const __m256 pj = _mm256_set1_ps(p[j]);
    const float* vj = v + static_cast<int64_t>(j) * ldv;
    // A head's values are short pieces of long cache rows: fetch kRowsAhead rows ahead (a
    // 1024-entry GPT-2-sized cache's value sums: 5.3 ms a token without, 3.1 ms with).
    for (int c = 0; c < 8 * N; c += 16)
      _mm_prefetch(reinterpret_cast<const char*>(vj + kRowsAhead * ldv + c), _MM_HINT_T0);
    for (int i = 0; i < N; ++i) a[i] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vj + 8 * i), a[i]);
  }
  for (int i = 0; i < N; ++i) _mm256_storeu_ps(acc + 8 * i, a[i]);
}
__attribute__((target("avx2,fma"))) static void AddWeightedRowsAvx2(const float* p, const float* v,
                                                                    int64_t ldv, int n, int dim,
                                                                    float* acc) {
  using Fn = void (*)(const float*, const float*, int64_t, int, float*);
  static constexpr Fn kBlocks[] = {nullptr,
                                   AddWeightedRowsBlock<1>,
                                   AddWeightedRowsBlock<2>,
                                   AddWeightedRowsBlock<3>,
                                   AddWeightedRowsBlock<4>,
                                   AddWeightedRowsBlock<5>,
                                   AddWeightedRowsBlock<6>,
                                   AddWeightedRowsBlock<7>,
                                   AddWeightedRowsBlock<8>};
  int d0 = 0;
  while (dim - d0 >= 8) {
    const int vectors = std::min(8, (dim - d0) / 8);
    kBlocks[vectors](p, v + d0, ldv, n, acc + d0);
    d0 += 8 * vectors;
  }
  if (d0 < dim) AddWeightedRowsBody(p, v + d0, ldv, n, dim - d0, acc + d0);
}
static void AddWeightedRows(const float* p, const float* v, int64_t ldv, int n, int dim,
                            float* acc) {
  if (Avx2FmaActive())
    AddWeightedRowsAvx2(p, v, ldv, n, dim, acc);
  else
    AddWeightedRowsBody(p, v, ldv, n, dim, acc);
}

void MatMul(const float* x, const float* w, const float* bias, float* y, int T, int in, int out) {
  constexpr int64_t kSmall = int64_t{1} << 18;  // multiply-adds below which plain loops win
  if (T == 1) {
    // Decode (the bias added by the thread that computed the row): OpenBLAS's sgemv (Zen kernel)
    // read about 11 GB/s of W on one thread here.
    const MatVecJob job{w, bias, y, out};
    MatVecBatch(x, in, std::span<const MatVecJob>(&job, 1));
    return;
  } else if (static_cast<int64_t>(T) * in * out <= kSmall) {
    SmallMatMul(x, w, y, T, in, out);
  } else {
    // The bias goes in as C with beta = 1: the kernel adds it where it writes y, instead of a
    // serial pass over (T, out) afterwards.
    if (bias) {
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(T) * out >= (1 << 16))
      for (int t = 0; t < T; ++t) std::copy(bias, bias + out, y + static_cast<int64_t>(t) * out);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, out, in, 1.0f, x, in, w, in,
                bias ? 1.0f : 0.0f, y, out);
    return;
  }
  if (bias) {
    for (int t = 0; t < T; ++t) {
      float* row = y + static_cast<int64_t>(t) * out;
      for (int o = 0; o < out; ++o) row[o] += bias[o];
    }
  }
}

// Norms run rows in parallel once there are enough values to pay for the threads.
constexpr int64_t kParallelValues = int64_t{1} << 16;

// The sum of squares of n floats in double: finite for every finite input.
static double SumSquares(const float* x, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

void RmsNorm(const float* x, const float* weight, float* out, int T, int D, float eps,
             float weight_offset) {
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(T) * D >= kParallelValues)
  for (int t = 0; t < T; ++t) {
    const float* xr = x + static_cast<int64_t>(t) * D;
    float* orow = out + static_cast<int64_t>(t) * D;
    float ss = 0.0f;
    for (int i = 0; i < D; ++i) ss += xr[i] * xr[i];
    float scale = 1.0f / std::sqrt(ss / D + eps);
    // Squares of finite values above ~1.8e19 overflow a float sum to Inf, and the scale to 0: the
    // row would leave as zeros. Such a row is summed again in double (no finite float's square
    // overflows it); every other row keeps the float sum's bits.
    if (!std::isfinite(ss))
      scale = static_cast<float>(1.0 / std::sqrt(SumSquares(xr, D) / D + eps));
    if (weight_offset == 0.0f) {
      for (int i = 0; i < D; ++i) orow[i] = xr[i] * scale * weight[i];
    } else {
      for (int i = 0; i < D; ++i) orow[i] = xr[i] * scale * (weight_offset + weight[i]);
    }
  }
}

void LayerNorm(const float* x, const float* weight, const float* bias, float* out, int T, int D,
               float eps) {
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(T) * D >= kParallelValues)
  for (int t = 0; t < T; ++t) {
    const float* xr = x + static_cast<int64_t>(t) * D;
    float* orow = out + static_cast<int64_t>(t) * D;
    float mean = 0.0f;
    for (int i = 0; i < D; ++i) mean += xr[i];
    mean /= D;
    float var = 0.0f;
    for (int i = 0; i < D; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= D;
    float scale = 1.0f / std::sqrt(var + eps);
    if (!std::isfinite(mean) || !std::isfinite(var)) {  // overflow on finite input, as RmsNorm
      double m = 0, v = 0;
      for (int i = 0; i < D; ++i) m += xr[i];
      m /= D;
      for (int i = 0; i < D; ++i) v += (xr[i] - m) * (xr[i] - m);
      mean = static_cast<float>(m);
      scale = static_cast<float>(1.0 / std::sqrt(v / D + eps));
    }
    for (int i = 0; i < D; ++i) {
      float v = (xr[i] - mean) * scale * weight[i];
      orow[i] = bias ? v + bias[i] : v;
    }
  }
}

void Rope(float* x, std::span<const int> positions, int n_heads, int head_dim, int rot_dim,
          float theta, RopeKind kind) {
  if (kind == RopeKind::kNone) return;
  const int half = rot_dim / 2;
  // Frequencies theta^(-2i/rot_dim), i < rot_dim/2 (Su et al. 2021, eq. 15), in double so the
  // angle pos * freq stays exact enough at long positions.
  std::vector<double> freq(half);
  for (int i = 0; i < half; ++i) freq[i] = std::pow(static_cast<double>(theta), -2.0 * i / rot_dim);
  RopeWithFrequencies(x, positions, n_heads, head_dim, rot_dim, freq.data(), kind);
}

void RopeWithFrequencies(float* x, std::span<const int> positions, int n_heads, int head_dim,
                         int rot_dim, const double* freq, RopeKind kind) {
  if (kind == RopeKind::kNone) return;
  const int half = rot_dim / 2;
  std::vector<float> cos_v(half), sin_v(half);
  const int64_t row = static_cast<int64_t>(n_heads) * head_dim;
  for (size_t t = 0; t < positions.size(); ++t) {
    for (int i = 0; i < half; ++i) {
      double angle = positions[t] * freq[i];
      cos_v[i] = static_cast<float>(std::cos(angle));
      sin_v[i] = static_cast<float>(std::sin(angle));
    }
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + t * row + static_cast<int64_t>(h) * head_dim;
      for (int i = 0; i < half; ++i) {
        int a = kind == RopeKind::kInterleaved ? 2 * i : i;
        int b = kind == RopeKind::kInterleaved ? 2 * i + 1 : i + half;
        float x0 = v[a], x1 = v[b];
        v[a] = x0 * cos_v[i] - x1 * sin_v[i];
        v[b] = x0 * sin_v[i] + x1 * cos_v[i];
      }
    }
  }
}

void SoftCap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void Softmax(float* x, int n) {
  const float max_v = MaxOf(x, n);
  const float sum = ExpShiftSum(x, n, max_v);
  Scale(x, n, 1.0f / sum);
}

float SoftmaxWithSink(float* x, int n, float sink) {
  if (sink == -INFINITY) {
    Softmax(x, n);
    return 0.0f;
  }
  const float mx = std::max(MaxOf(x, n), sink);
  const float e_sink = std::exp(sink - mx);
  const float inv = 1.0f / (ExpShiftSum(x, n, mx) + e_sink);
  Scale(x, n, inv);
  return e_sink * inv;
}

double TokenNll(const float* logits, int n, int target) {
  double max_v = logits[0];
  for (int i = 1; i < n; ++i) max_v = std::max<double>(max_v, logits[i]);
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - max_v);
  return std::log(sum) + max_v - logits[target];
}

float Silu(float x) { return x / (1.0f + std::exp(-x)); }
float Gelu(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }
float GeluTanh(float x) {
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Hendrycks & Gimpel 2016).
  return 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

// Elementwise work is split into chunks of kChunk values over the OpenMP threads when there is
// enough of it to pay for the fork (an MLP's (T, F) activations: millions of values).
namespace {
constexpr int64_t kChunk = 16384;

template <typename Fn>
void ForChunks(int64_t n, Fn fn) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) fn(c * kChunk, std::min(n, (c + 1) * kChunk));
}

void ActivationRange(float* x, int64_t n, ActKind kind) {
  switch (kind) {
    case ActKind::kSilu:
      return SiluInPlace(x, n);
    case ActKind::kGelu:
      return GeluErfInPlace(x, n);
    case ActKind::kGeluTanh:
      return GeluTanhInPlace(x, n);
    case ActKind::kRelu:
      for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0 ? x[i] : 0.0f;
      return;
  }
}
}  // namespace

void GatedActivation(float* gate, const float* up, int64_t n, ActKind kind) {
  ForChunks(n, [&](int64_t a, int64_t b) {
    if (kind == ActKind::kSilu) return SiluMul(gate + a, up + a, b - a);
    ActivationRange(gate + a, b - a, kind);
    for (int64_t i = a; i < b; ++i) gate[i] *= up[i];
  });
}

void ClampedGlu(float* gate, const float* up, int64_t n, float limit) {
  constexpr float kAlpha = 1.702f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    gate[i] = (u + 1.0f) * g / (1.0f + std::exp(-kAlpha * g));
  }
}

void ActivationInPlace(float* x, int64_t n, ActKind kind) {
  ForChunks(n, [&](int64_t a, int64_t b) { ActivationRange(x + a, b - a, kind); });
}

void AddSlotValue(const AttnOptions& opt, int kvh, int head_dim, float p, float* out) {
  if (!opt.slot_values || p == 0.0f) return;
  const float* sv = opt.slot_values + static_cast<int64_t>(kvh) * head_dim;
  for (int d = 0; d < head_dim; ++d) out[d] += p * sv[d];
}

namespace {

// The slot logit of head h's query t (of T): a per-query kv-bias logit, the head's learned sink
// logit, or -inf (no slot).
float SlotLogit(const AttnOptions& opt, int h, int T, int64_t t) {
  if (opt.slot_logits) return opt.slot_logits[static_cast<int64_t>(h) * T + t];
  return opt.sink_logits ? opt.sink_logits[h] : -INFINITY;
}

// Weights over the visible keys of one query row (opt's rule), then the statistics and the pattern
// row; returns the slot's probability. row: scores for keys [key0, key0 + n) of the block; the
// query sees [first, last] (absolute). slot_logit (-inf: none) is the slot column's; opt.softcap >
// 0 caps the visible scores first. The statistics read the weights times the rule's stat_scale.
float FinishRow(float* row, int key0, int n, int first, int last, int S, int64_t ht,
                float* pattern_row, const AttnStats* stats, float slot_logit,
                const AttnOptions& opt) {
  float* vis = row + (first - key0);
  const int count = last - first + 1;
  if (opt.softcap > 0) SoftCap(vis, count, opt.softcap);
  const AttnRowInfo<float> info = opt.Rule().Row(vis, count, slot_logit, nullptr);
  const float slot_p = info.slot_p, stat_scale = info.stat_scale;
  if (stats && stats->sink_prob) stats->sink_prob[ht] = slot_p;
  if (stats && stats->row_sum) stats->row_sum[ht] = info.row_sum;
  std::fill(row, vis, 0.0f);
  std::fill(vis + count, row + n, 0.0f);
  if (pattern_row) {
    std::fill(pattern_row, pattern_row + S, 0.0f);
    std::copy(vis, vis + count, pattern_row + first);
  }
  if (!stats) return slot_p;
  if (stats->first_k_probs) {
    float* fk = stats->first_k_probs + ht * stats->first_k;
    for (int j = 0; j < stats->first_k; ++j)
      fk[j] = (j >= first && j <= last) ? vis[j - first] * stat_scale : 0.0f;
  }
  if (stats->top_key || stats->top_prob || stats->sum_sq) {
    int best = 0;
    float sum_sq = 0.0f;
    for (int j = 0; j < count; ++j) {
      if (vis[j] > vis[best]) best = j;
      sum_sq += vis[j] * vis[j];
    }
    if (stats->top_key) stats->top_key[ht] = first + best;
    if (stats->top_prob) stats->top_prob[ht] = vis[best] * stat_scale;
    if (stats->sum_sq) stats->sum_sq[ht] = sum_sq * stat_scale * stat_scale;
  }
  return slot_p;
}

}  // namespace

// Scores (rows, n) = scale q_block k_block^T into out (leading dimension ld): one sgemm, or plain
// dot products for a single query row (decode), where a BLAS call costs more than its work.
static void BlockScores(const float* qb, int q_row, const float* kb, int kv_row, int rows, int n,
                        int head_dim, float scale, float* out, int ld) {
  if (rows == 1) {
    RowDots(qb, kb, out, head_dim, n, kv_row);
    for (int j = 0; j < n; ++j) out[j] *= scale;
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n, head_dim, scale, qb, q_row, kb,
              kv_row, 0.0f, out, ld);
}

// The materialised path: each query block's full score rows (kBlock x keys), softmaxed in place and
// copied into the (H, T, S) pattern. Used when a pattern is asked for, and as the slow reference
// that tests hold the tiled path to.
static void MaterialisedAttention(const float* q, const float* k, const float* v, float* out, int T,
                                  int S, int n_heads, int n_kv_heads, int head_dim,
                                  const AttnOptions& opt, float* pattern, const AttnStats* stats) {
  const int window = opt.window;
  SS_ASSERT(T <= S && n_heads % n_kv_heads == 0);
  const int group = n_heads / n_kv_heads;
  const int q_row = n_heads * head_dim;
  const int kv_row = n_kv_heads * head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  // Queries are processed in blocks of kBlock rows per head: the block's scores (kBlock, keys) are
  // one sgemm, its output one more (the materialised T x S matrix never exists; memory per thread
  // is kBlock x S). A single query (decode) uses plain loops: a BLAS call costs more than its work.
  constexpr int kBlock = 64;
  const int n_blocks = (T + kBlock - 1) / kBlock;
  const int64_t work = static_cast<int64_t>(n_heads) * n_blocks;
  const bool parallel = static_cast<int64_t>(n_heads) * T * S * head_dim > (1 << 17);
#pragma omp parallel if (parallel)
  {
    std::vector<float> scores, slot_p(kBlock);
#pragma omp for schedule(dynamic)
    for (int64_t item = 0; item < work; ++item) {
      const int h = static_cast<int>(item / n_blocks);
      const int b = static_cast<int>(item % n_blocks);
      const int kvh = h / group;
      const int t0 = b * kBlock, t1 = std::min(T, t0 + kBlock), rows = t1 - t0;
      // Keys any query of the block may see: [key0, key_end).
      const int key_end = S - T + t1;
      const int key0 = window > 0 ? std::max(0, S - T + t0 - window + 1) : 0;
      const int n = key_end - key0;
      scores.resize(static_cast<size_t>(rows) * n);
      const float* qb = q + static_cast<int64_t>(t0) * q_row + h * head_dim;
      const float* kb = k + static_cast<int64_t>(key0) * kv_row + kvh * head_dim;
      const float* vb = v + static_cast<int64_t>(key0) * kv_row + kvh * head_dim;
      float* ob = out + static_cast<int64_t>(t0) * q_row + h * head_dim;
      BlockScores(qb, q_row, kb, kv_row, rows, n, head_dim, scale, scores.data(), n);
      for (int r = 0; r < rows; ++r) {
        const int t = t0 + r;
        const int last = S - T + t;
        const int first = window > 0 ? std::max(0, last - window + 1) : 0;
        const int64_t ht = static_cast<int64_t>(h) * T + t;
        slot_p[r] =
            FinishRow(scores.data() + static_cast<int64_t>(r) * n, key0, n, first, last, S, ht,
                      pattern ? pattern + ht * S : nullptr, stats, SlotLogit(opt, h, T, t), opt);
      }
      if (rows == 1) {
        std::fill(ob, ob + head_dim, 0.0f);
        for (int j = 0; j < n; ++j) {
          const float p = scores[j];
          const float* vj = vb + static_cast<int64_t>(j) * kv_row;
          for (int d = 0; d < head_dim; ++d) ob[d] += p * vj[d];
        }
      } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, head_dim, n, 1.0f,
                    scores.data(), n, vb, kv_row, 0.0f, ob, q_row);
      }
      for (int r = 0; r < rows; ++r)
        AddSlotValue(opt, kvh, head_dim, slot_p[r], ob + static_cast<int64_t>(r) * q_row);
    }
  }
}

// Tiled causal attention with an online softmax (Milakov & Gimelshein 2018; FlashAttention-2, Dao
// 2023, section 3.1): per head and block of tile_q (64 or 256) queries, key tiles of kTileK are
// scored with one sgemm, each row's weights are taken at a running scale that its rule rescales as
// the tiles come (softmax: the running max m, with the normaliser l and the sum of squared
// exponentials), and the output accumulates P V with one more sgemm; tiles above the diagonal (and
// before the window) are never computed. Memory per thread: tile_q x kTileK scores, not x S.
// The statistics are exact functions of the row's final state: for softmax p_j = exp(s_j - m) / l
// for the first K logits (kept raw), top_prob = exp(s_max - m) / l, sum_j p_j^2 = sum_j
// exp(2 (s_j - m)) / l^2 (AttnRule::Weight and AttnRowEnd::stat_scale for every rule).
//
// bf16 (--precision bf16): each kv head's K and V are packed once per call (PackBf16Rows /
// PackBf16Columns), each query block is scaled and rounded once, the probabilities of a tile are
// rounded before p v; both products run MatMulBf16Block. Key tiles then start on multiples of
// kBf16PanelWidth (the packed panels), which only moves where a windowed tile begins.
namespace {

constexpr int kTileK = 512;
static_assert(kTileK % kBf16PanelWidth == 0);

// What every (head, query block) item of one call shares.
struct TiledPlan {
  const float *q, *k, *v;
  float* out;
  int T, S, n_heads, head_dim, group, q_row, kv_row, K, tile_q;
  float scale;
  const AttnOptions& opt;
  const AttnRule& rule;
  const AttnStats* stats;
  bool bf16;
  int dh_pairs;
  int64_t ldq, ldp;
  const PackedBf16* kp;  // (Hkv) each kv head's keys and values, packed for bf16
  const PackedBf16* vp;
};

// One thread's scratch, kept between calls (a decode step calls the kernel once per layer), sized
// for the rows a block can have: one row in decode.
struct TiledScratch {
  std::span<float> scores, q_scaled, acc, best, first_logits;
  std::span<uint32_t> qb16, pb16;
  std::span<AttnRowState> state;
  std::span<int> best_j;

  TiledScratch(const TiledPlan& p) {
    const size_t tq = static_cast<size_t>(std::min(p.tile_q, p.T));
    const size_t bf = p.bf16 ? tq : 0;
    scores = {Workspace<float, 10>(tq * kTileK), tq * kTileK};
    q_scaled = {Workspace<float, 11>(bf * p.head_dim), bf * p.head_dim};
    qb16 = {Workspace<uint32_t, 10>(bf * p.ldq), bf * static_cast<size_t>(p.ldq)};
    pb16 = {Workspace<uint32_t, 11>(bf * p.ldp), bf * static_cast<size_t>(p.ldp)};
    acc = {Workspace<float, 12>(tq * p.head_dim), tq * p.head_dim};
    best = {Workspace<float, 13>(tq), tq};
    state = {Workspace<AttnRowState, 13>(tq), tq};
    first_logits = {Workspace<float, 14>(tq * p.K), tq * p.K};
    best_j = {Workspace<int, 10>(tq), tq};
  }
};

// One query block: its queries, rows and the keys it sees.
struct QueryBlock {
  int h, kvh, t0, rows, key0, key_end;  // keys [key0, key_end) (key_end - 1 seen by the last row)
};

// The bf16 packs of each kv head's keys (S, Dh) and values as (Dh, S), kept between calls.
void PackKvBf16(const float* k, const float* v, int S, int n_kv_heads, int head_dim, int kv_row,
                bool parallel, PackedBf16** kp, PackedBf16** vp) {
  thread_local std::vector<PackedBf16> k_packs, v_packs;
  if (static_cast<int>(k_packs.size()) < n_kv_heads) {
    k_packs.resize(n_kv_heads);
    v_packs.resize(n_kv_heads);
  }
  // (The parallel region uses these pointers: inside it the thread_local names would be each
  // worker's own.)
  PackedBf16* const kpacks = k_packs.data();
  PackedBf16* const vpacks = v_packs.data();
#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int item = 0; item < 2 * n_kv_heads; ++item) {
    const int h = item / 2;
    if (item % 2 == 0)
      PackBf16Rows(k + h * head_dim, S, head_dim, kv_row, &kpacks[h]);
    else
      PackBf16Columns(v + h * head_dim, head_dim, S, kv_row, &vpacks[h]);
  }
  *kp = kpacks;
  *vp = vpacks;
}

// Scores (rows, nk) of the block's queries against keys [j0, j0 + nk) into s.scores.
void ScoreTile(const TiledPlan& p, const QueryBlock& b, TiledScratch& s, int j0, int nk) {
  if (p.bf16) {
    MatMulBf16Block(s.qb16.data(), p.ldq, p.kp[b.kvh], j0 / kBf16PanelWidth,
                    (nk + kBf16PanelWidth - 1) / kBf16PanelWidth, 0, p.dh_pairs, s.scores.data(),
                    kTileK, b.rows, /*accumulate=*/false);
    return;
  }
  const float* qb = p.q + static_cast<int64_t>(b.t0) * p.q_row + b.h * p.head_dim;
  const float* kt = p.k + static_cast<int64_t>(j0) * p.kv_row + b.kvh * p.head_dim;
  BlockScores(qb, p.q_row, kt, p.kv_row, b.rows, nk, p.head_dim, p.scale, s.scores.data(), kTileK);
}

// Each row's scores of the tile become weights at the row's running scale (the rule's Tile): keys a
// row does not see are zeroed, the first K logits and the largest are kept for the statistics, and
// the row's accumulated output is rescaled when its scale moves.
void WeighTile(const TiledPlan& p, const QueryBlock& b, TiledScratch& s, int j0, int nk) {
  const int K = p.K;
  for (int r = 0; r < b.rows; ++r) {
    float* row = s.scores.data() + static_cast<int64_t>(r) * kTileK;
    const int last = p.S - p.T + b.t0 + r;
    const int first = p.opt.window > 0 ? std::max(0, last - p.opt.window + 1) : 0;
    const int a = std::max(j0, first), e = std::min(j0 + nk - 1, last);  // visible in tile
    if (a > e) {
      std::fill(row, row + nk, 0.0f);
      continue;
    }
    std::fill(row, row + (a - j0), 0.0f);
    std::fill(row + (e - j0 + 1), row + nk, 0.0f);
    float* vis = row + (a - j0);
    const int count = e - a + 1;
    if (p.opt.softcap > 0) SoftCap(vis, count, p.opt.softcap);
    for (int j = a; j <= std::min(e, K - 1); ++j) s.first_logits[r * K + j] = row[j - j0];
    const float tile_max = MaxOf(vis, count);
    if (tile_max > s.best[r]) {  // the first key holding the largest logit so far
      s.best[r] = tile_max;
      s.best_j[r] = a + static_cast<int>(std::find(vis, vis + count, tile_max) - vis);
    }
    const float corr = p.rule.Tile(vis, count, tile_max, s.state[r]);
    if (corr != 1.0f) Scale(s.acc.data() + static_cast<int64_t>(r) * p.head_dim, p.head_dim, corr);
  }
}

// acc (rows, Dh) += the tile's weights (rows, nk) times its values.
void AccumulateTile(const TiledPlan& p, const QueryBlock& b, TiledScratch& s, int j0, int nk) {
  if (p.bf16) {
    ConvertBf16Rows(s.scores.data(), b.rows, nk, kTileK, s.pb16.data(), p.ldp);
    MatMulBf16Block(s.pb16.data(), p.ldp, p.vp[b.kvh], 0, p.vp[b.kvh].panels, j0 / 2, (nk + 1) / 2,
                    s.acc.data(), p.head_dim, b.rows, /*accumulate=*/true);
    return;
  }
  const float* vt = p.v + static_cast<int64_t>(j0) * p.kv_row + b.kvh * p.head_dim;
  if (b.rows == 1) {
    AddWeightedRows(s.scores.data(), vt, p.kv_row, nk, p.head_dim, s.acc.data());
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, b.rows, p.head_dim, nk, 1.0f,
                s.scores.data(), kTileK, vt, p.kv_row, 1.0f, s.acc.data(), p.head_dim);
  }
}

// Closes the block's rows: a slot (learned sink logit, or kv-bias) is one more column of every row,
// joining the normaliser after the last tile (the rule's End); a kv-bias slot adds its value. Then
// the output rows and the statistics.
void FinishBlock(const TiledPlan& p, const QueryBlock& b, TiledScratch& s) {
  const int K = p.K, Dh = p.head_dim;
  const AttnStats* stats = p.stats;
  float* ob = p.out + static_cast<int64_t>(b.t0) * p.q_row + b.h * Dh;
  for (int r = 0; r < b.rows; ++r) {
    float* ar = s.acc.data() + static_cast<int64_t>(r) * Dh;
    float* orow = ob + static_cast<int64_t>(r) * p.q_row;
    const int64_t ht = static_cast<int64_t>(b.h) * p.T + b.t0 + r;
    AttnRowState& st = s.state[r];
    const AttnRowEnd e = p.rule.End(st, SlotLogit(p.opt, b.h, p.T, b.t0 + r));
    if (e.acc_scale != 1.0f) Scale(ar, Dh, e.acc_scale);
    for (int d = 0; d < Dh; ++d) orow[d] = ar[d] * e.out_scale;
    AddSlotValue(p.opt, b.kvh, Dh, e.slot_p, orow);
    if (!stats) continue;
    if (stats->first_k_probs)
      for (int j = 0; j < K; ++j)
        stats->first_k_probs[ht * K + j] =
            p.rule.Weight(s.first_logits[r * K + j], st) * e.stat_scale;
    if (stats->top_key) stats->top_key[ht] = s.best_j[r];
    if (stats->top_prob) stats->top_prob[ht] = p.rule.Weight(s.best[r], st) * e.stat_scale;
    if (stats->sum_sq) stats->sum_sq[ht] = st.sq * e.stat_scale * e.stat_scale;
    if (stats->sink_prob) stats->sink_prob[ht] = e.slot_p;
    if (stats->row_sum) stats->row_sum[ht] = e.row_sum;
  }
}

// One (head, query block) item: its queries (scaled and rounded once at bf16), then the key tiles
// it sees, then its rows' outputs and statistics.
void TiledBlock(const TiledPlan& p, TiledScratch& s, int h, int block) {
  QueryBlock b;
  b.h = h;
  b.kvh = h / p.group;
  b.t0 = block * p.tile_q;
  b.rows = std::min(p.T, b.t0 + p.tile_q) - b.t0;
  b.key_end = p.S - p.T + b.t0 + b.rows;
  b.key0 = p.opt.window > 0 ? std::max(0, p.S - p.T + b.t0 - p.opt.window + 1) : 0;
  if (p.bf16) {
    b.key0 -= b.key0 % kBf16PanelWidth;  // tiles on panel boundaries (masked by WeighTile)
    const float* qb = p.q + static_cast<int64_t>(b.t0) * p.q_row + h * p.head_dim;
    for (int r = 0; r < b.rows; ++r)
      for (int d = 0; d < p.head_dim; ++d)
        s.q_scaled[static_cast<size_t>(r) * p.head_dim + d] =
            qb[static_cast<int64_t>(r) * p.q_row + d] * p.scale;
    ConvertBf16Rows(s.q_scaled.data(), b.rows, p.head_dim, p.head_dim, s.qb16.data(), p.ldq);
  }
  for (int r = 0; r < b.rows; ++r) p.rule.Start(s.state[r]);
  std::fill(s.best.begin(), s.best.end(), -INFINITY);
  std::fill(s.first_logits.begin(), s.first_logits.end(), -INFINITY);
  std::fill(s.best_j.begin(), s.best_j.end(), 0);
  std::fill(s.acc.begin(), s.acc.begin() + static_cast<int64_t>(b.rows) * p.head_dim, 0.0f);
  for (int j0 = b.key0; j0 < b.key_end; j0 += kTileK) {
    const int nk = std::min(kTileK, b.key_end - j0);
    ScoreTile(p, b, s, j0, nk);
    WeighTile(p, b, s, j0, nk);
    AccumulateTile(p, b, s, j0, nk);
  }
  FinishBlock(p, b, s);
}

}  // namespace

static void TiledAttention(const float* q, const float* k, const float* v, float* out, int T, int S,
                           int n_heads, int n_kv_heads, int head_dim, const AttnOptions& opt,
                           const AttnStats* stats, bool bf16) {
  // Long inputs take blocks of 256 queries, so that sgemm packs each key and value tile a quarter
  // as often as with 64 (analyze at T = 32,768: 268 s against 338 s); below 1,024 queries blocks of
  // 64 keep enough (head, block) items for many threads (12 heads x 16 blocks at T = 1,023). The
  // choice depends on T only, so the result does not depend on the thread count.
  const int tile_q = T >= 1024 ? 256 : 64;
  const int kv_row = n_kv_heads * head_dim;
  const int n_blocks = (T + tile_q - 1) / tile_q;
  const int64_t work = static_cast<int64_t>(n_heads) * n_blocks;
  const bool parallel = static_cast<int64_t>(n_heads) * T * S * head_dim > (1 << 17);
  const int dh_pairs = (head_dim + 1) / 2;
  PackedBf16* kp = nullptr;
  PackedBf16* vp = nullptr;
  if (bf16) PackKvBf16(k, v, S, n_kv_heads, head_dim, kv_row, parallel, &kp, &vp);
  const TiledPlan plan{q,
                       k,
                       v,
                       out,
                       T,
                       S,
                       n_heads,
                       head_dim,
                       n_heads / n_kv_heads,
                       n_heads * head_dim,
                       kv_row,
                       stats ? stats->first_k : 0,
                       tile_q,
                       1.0f / std::sqrt(static_cast<float>(head_dim)),
                       opt,
                       opt.Rule(),
                       stats,
                       bf16,
                       dh_pairs,
                       (dh_pairs + 15) / 16 * 16,
                       kTileK / 2,
                       kp,
                       vp};
#pragma omp parallel if (parallel)
  {
    TiledScratch scratch(plan);
    // Later query blocks see more keys: hand them out first so the last items are the short ones.
#pragma omp for schedule(dynamic)
    for (int64_t item = 0; item < work; ++item)
      TiledBlock(plan, scratch, static_cast<int>(item % n_heads),
                 n_blocks - 1 - static_cast<int>(item / n_heads));
  }
}

void Attention(const float* q, const float* k, const float* v, float* out, int T, int S,
               int n_heads, int n_kv_heads, int head_dim, const AttnOptions& opt, float* pattern,
               const AttnStats* stats, bool bf16) {
  SS_ASSERT(T <= S && n_heads % n_kv_heads == 0 && opt.window >= 0 && opt.softcap >= 0);
  SS_ASSERT(opt.Rule().TakesSlot() || !(opt.sink_logits || opt.slot_logits));
  if (pattern) {
    MaterialisedAttention(q, k, v, out, T, S, n_heads, n_kv_heads, head_dim, opt, pattern, stats);
  } else {
    TiledAttention(q, k, v, out, T, S, n_heads, n_kv_heads, head_dim, opt, stats,
                   bf16 && T >= kBf16AttentionRows);
  }
}

void SinkWindowAttention(const float* q_recent, const float* q_sink, const float* k, const float* v,
                         float* out, int T, int n_heads, int n_kv_heads, int head_dim, int sinks,
                         int window, int ring, int64_t first_index, const AttnOptions& opt) {
  KvRows kr, vr;
  kr.f32 = k;
  vr.f32 = v;
  SinkWindowAttention(q_recent, q_sink, kr, vr, out, T, n_heads, n_kv_heads, head_dim, sinks,
                      window, ring, first_index, opt);
}

// Rows of a stored-type cache decoded a chunk at a time where the fused kernels do not apply, so
// the scratch stays in cache (64 x 128 floats: 32 KiB).
constexpr int kDecodeChunk = 64;

// A stored-type cache's view of one kv head: row r's slice starts at value `first` of the encoded
// panel row at base + r * stride.
struct KvHead {
  const KvRows* kv;
  const uint8_t* base;
  size_t stride;
  int first;
  const float* kept;  // the head's slice of kept row 0 (rows kv_row floats apart), or null
  int Kept(int row) const { return kept ? kv->kept_slot[row] : -1; }
};
static KvHead HeadOf(const KvRows& kv, int kvh, int head_dim, int kv_row) {
  const int e = kvh * head_dim;
  const int panel = kv.panel_values > 0 ? kv.panel_values : kv_row;
  const int g = e / panel;
  SS_ASSERT(e - g * panel + head_dim <= panel);  // panels hold whole heads
  const float* kept = kv.kept_slot ? kv.kept + static_cast<int64_t>(kvh) * head_dim : nullptr;
  return {&kv, kv.bytes + static_cast<size_t>(g) * kv.panel_bytes, kv.row_bytes, e - g * panel,
          kept};
}

// Calls f(r, n, kept_slot) over the rows [0, count) from row0, split into runs of stored rows
// (kept_slot -1, n rows) and single kept rows.
template <typename F>
static void ForEachStoredRun(const KvHead& h, int row0, int count, F&& f) {
  if (!h.kept) return f(0, count, -1);
  for (int r = 0; r < count;) {
    const int slot = h.Kept(row0 + r);
    int end = r + 1;
    if (slot < 0)
      while (end < count && h.Kept(row0 + end) < 0) ++end;
    f(r, end - r, slot);
    r = end;
  }
}

// scores[j] = q · the head's key in row row0 + j, for j < count.
static void StoredScores(const float* q, const KvHead& h, int row0, int count, int head_dim,
                         int kv_row, float* scores, float* scratch) {
  ForEachStoredRun(h, row0, count, [&](int r, int n, int slot) {
    if (slot >= 0)
      return RowDots(q, h.kept + static_cast<int64_t>(slot) * kv_row, scores + r, head_dim, 1,
                     kv_row);
    const uint8_t* rows = h.base + static_cast<size_t>(row0 + r) * h.stride;
    if (KvRowDots({h.kv->type, rows, h.stride, h.first, head_dim, n}, q, scores + r)) return;
    for (int c0 = 0; c0 < n; c0 += kDecodeChunk) {
      const int c = std::min(kDecodeChunk, n - c0);
      for (int i = 0; i < c; ++i)
        KvDecodeSlice(h.kv->type, rows + static_cast<size_t>(c0 + i) * h.stride, h.first, head_dim,
                      scratch + static_cast<int64_t>(i) * head_dim);
      RowDots(q, scratch, scores + r + c0, head_dim, c, head_dim);
    }
  });
}

// acc (head_dim) += sum over j < count of p[j] the head's value in row row0 + j.
static void StoredValues(const float* p, const KvHead& h, int row0, int count, int head_dim,
                         int kv_row, float* acc, float* scratch) {
  ForEachStoredRun(h, row0, count, [&](int r, int n, int slot) {
    if (slot >= 0)
      return AddWeightedRows(p + r, h.kept + static_cast<int64_t>(slot) * kv_row, kv_row, 1,
                             head_dim, acc);
    const uint8_t* rows = h.base + static_cast<size_t>(row0 + r) * h.stride;
    if (KvAddWeightedRows({h.kv->type, rows, h.stride, h.first, head_dim, n}, p + r, acc)) return;
    for (int c0 = 0; c0 < n; c0 += kDecodeChunk) {
      const int c = std::min(kDecodeChunk, n - c0);
      for (int i = 0; i < c; ++i)
        KvDecodeSlice(h.kv->type, rows + static_cast<size_t>(c0 + i) * h.stride, h.first, head_dim,
                      scratch + static_cast<int64_t>(i) * head_dim);
      AddWeightedRows(p + r + c0, scratch, head_dim, c, head_dim, acc);
    }
  });
}

void SinkWindowAttention(const float* q_recent, const float* q_sink, const KvRows& k,
                         const KvRows& v, float* out, int T, int n_heads, int n_kv_heads,
                         int head_dim, int sinks, int window, int ring, int64_t first_index,
                         const AttnOptions& opt) {
  SS_ASSERT(n_heads % n_kv_heads == 0 && window >= 1 && ring >= 1 && sinks >= 0);
  // A sliding-window layer (opt.window = W) sees the keys less than W cache positions back.
  const int64_t layer_window = opt.window > 0 ? opt.window : INT64_MAX;
  const int group = n_heads / n_kv_heads;
  const int q_row = n_heads * head_dim;
  const int kv_row = n_kv_heads * head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int64_t work = static_cast<int64_t>(n_heads) * T;
  const bool parallel = work * (sinks + window) * head_dim > (1 << 15);
#pragma omp parallel if (parallel)
  {
    float* scores = Workspace<float, 15>(static_cast<size_t>(sinks) + window);
    // A stored-type cache's rows decoded to f32 where the fused kernels do not apply.
    const bool stored = !k.f32 || !v.f32;
    float* scratch =
        stored ? Workspace<float, 16>(static_cast<size_t>(kDecodeChunk) * head_dim) : nullptr;
#pragma omp for schedule(static)
    for (int64_t item = 0; item < work; ++item) {
      const int h = static_cast<int>(item / T);
      const int t = static_cast<int>(item % T);
      const int kvh = h / group;
      const int64_t m = first_index + t;
      const int n_sink = static_cast<int>(std::min<int64_t>(sinks, m + 1));
      int64_t recent_first = std::max<int64_t>(sinks, m - window + 1);
      if (layer_window != INT64_MAX) recent_first = std::max(recent_first, m - layer_window + 1);
      // Sink row j is visible while (query cache position - j) < W.
      const int64_t query_pos = std::min<int64_t>(m, static_cast<int64_t>(sinks) + window - 1);
      const int first_sink =
          static_cast<int>(std::clamp<int64_t>(query_pos - layer_window + 1, 0, n_sink));
      // The visible cache rows as runs of consecutive rows: the sinks, then the recent tokens,
      // which wrap around the ring at most once. Each run's scores are one set of row dot
      // products, its values one weighted row sum.
      struct Run {
        int row0, count;
        const float* q;
      };
      Run runs[3];
      int n_runs = 0, n = 0;
      const float* qs = q_sink + static_cast<int64_t>(t) * q_row + h * head_dim;
      const float* qr = q_recent + static_cast<int64_t>(t) * q_row + h * head_dim;
      if (n_sink > first_sink) runs[n_runs++] = {first_sink, n_sink - first_sink, qs};
      for (int64_t s = recent_first; s <= m;) {
        const int row = sinks + static_cast<int>((s - sinks) % ring);
        const int count = static_cast<int>(std::min<int64_t>(m - s + 1, sinks + ring - row));
        runs[n_runs++] = {row, count, qr};
        s += count;
      }
      const KvHead kh = k.f32 ? KvHead{} : HeadOf(k, kvh, head_dim, kv_row);
      for (int r = 0; r < n_runs; ++r) {
        if (k.f32)
          RowDots(runs[r].q, k.f32 + static_cast<int64_t>(runs[r].row0) * kv_row + kvh * head_dim,
                  scores + n, head_dim, runs[r].count, kv_row);
        else
          StoredScores(runs[r].q, kh, runs[r].row0, runs[r].count, head_dim, kv_row, scores + n,
                       scratch);
        n += runs[r].count;
      }
      for (int j = 0; j < n; ++j) scores[j] *= scale;
      if (opt.softcap > 0) SoftCap(scores, n, opt.softcap);
      const float slot_p = opt.Rule().Row(scores, n, SlotLogit(opt, h, T, t), nullptr).slot_p;
      float* o = out + static_cast<int64_t>(t) * q_row + h * head_dim;
      std::fill(o, o + head_dim, 0.0f);
      AddSlotValue(opt, kvh, head_dim, slot_p, o);
      const KvHead vh = v.f32 ? KvHead{} : HeadOf(v, kvh, head_dim, kv_row);
      for (int r = 0, at = 0; r < n_runs; at += runs[r].count, ++r) {
        if (v.f32)
          AddWeightedRows(scores + at,
                          v.f32 + static_cast<int64_t>(runs[r].row0) * kv_row + kvh * head_dim,
                          kv_row, runs[r].count, head_dim, o);
        else
          StoredValues(scores + at, vh, runs[r].row0, runs[r].count, head_dim, kv_row, o, scratch);
      }
    }
  }
}

void AttentionFromPattern(const float* pattern, const float* v, float* out, int T, int S,
                          int n_heads, int n_kv_heads, int head_dim) {
  const int group = n_heads / n_kv_heads;
  const int q_row = n_heads * head_dim;
  const int kv_row = n_kv_heads * head_dim;
  // Per head, z_h (T, Dh) = P_h (T, S) V_kvh (S, Dh): one sgemm. A single query row uses plain
  // loops that skip the zero (masked) probabilities.
  for (int h = 0; h < n_heads; ++h) {
    const int kvh = h / group;
    const float* p = pattern + static_cast<int64_t>(h) * T * S;
    const float* vh = v + kvh * head_dim;
    float* o = out + h * head_dim;
    if (T > 1) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, head_dim, S, 1.0f, p, S, vh, kv_row,
                  0.0f, o, q_row);
      continue;
    }
    std::fill(o, o + head_dim, 0.0f);
    for (int j = 0; j < S; ++j) {
      if (p[j] == 0.0f) continue;
      const float* vv = vh + static_cast<int64_t>(j) * kv_row;
      for (int d = 0; d < head_dim; ++d) o[d] += p[j] * vv[d];
    }
  }
}

}  // namespace ss
