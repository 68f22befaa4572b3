#include "kernels/gemm_q8.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "kernels/dequant.h"
#include "kernels/gemm_ggml.h"
#include "kernels/simd.h"
#include "kernels/vecmath.h"
#include "kernels/workspace.h"
#include "tensor/half.h"

namespace ss {

namespace {

#define SS_AVX2 __attribute__((target("avx2,fma")))

constexpr int kQ8BlockBytes = 2 + kQ8Block;  // ggml's block_q8_0
constexpr int kPrefetchBytes = 2048;         // how far ahead the fused kernel prefetches W
// Multiply-adds from which the products use every thread (as MatMulBf16: a decode-sized product
// is over before a second thread would start).
constexpr int64_t kParallelMatVec = int64_t{1} << 16;

// One group of W (q, d at its first block): y[r] = sum over blocks of d[b][r] * (q[b][r] · x[b]),
// for the group's first R rows. The portable body: 8 partial sums per block so that compilers
// vectorise it.
template <int R>
void DotGroupPortable(const float* x, const int8_t* q, const float* d, int blocks, float* y) {
  for (int r = 0; r < R; ++r) {
    float total = 0.0f;
    for (int b = 0; b < blocks; ++b) {
      const int8_t* qb = q + (static_cast<int64_t>(b) * kQ8GroupRows + r) * kQ8Block;
      total += d[b * kQ8GroupRows + r] * DotPartial8(qb, x + b * kQ8Block, kQ8Block);
    }
    y[r] = total;
  }
}

SS_AVX2 inline __m256 Widen8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// The AVX2 + FMA body: per block and row, the 32 int8 widened to f32 and multiplied with x in two
// chains of two, their sum scaled by d into the row's 8-lane total. The group's blocks are read in
// storage order.
template <int R>
SS_AVX2 void DotGroupAvx2(const float* x, const int8_t* q, const float* d, int blocks, float* y) {
  __m256 total[R];
  for (int r = 0; r < R; ++r) total[r] = _mm256_setzero_ps();
  for (int b = 0; b < blocks; ++b) {
    const float* xb = x + b * kQ8Block;
    const __m256 x0 = _mm256_loadu_ps(xb), x1 = _mm256_loadu_ps(xb + 8);
    const __m256 x2 = _mm256_loadu_ps(xb + 16), x3 = _mm256_loadu_ps(xb + 24);
    const int8_t* qb = q + static_cast<int64_t>(b) * kQ8GroupRows * kQ8Block;
    const float* db = d + b * kQ8GroupRows;
    // W is read once, in storage order: ask for it kPrefetchBytes ahead (past the group's end it
    // is the next group's, which this thread reads next).
    _mm_prefetch(reinterpret_cast<const char*>(qb) + kPrefetchBytes, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(qb) + kPrefetchBytes + 64, _MM_HINT_T0);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const int8_t* qr = qb + r * kQ8Block;
      __m256 s0 = _mm256_mul_ps(Widen8(qr), x0);
      __m256 s1 = _mm256_mul_ps(Widen8(qr + 8), x1);
      s0 = _mm256_fmadd_ps(Widen8(qr + 16), x2, s0);
      s1 = _mm256_fmadd_ps(Widen8(qr + 24), x3, s1);
      total[r] = _mm256_fmadd_ps(_mm256_add_ps(s0, s1), _mm256_broadcast_ss(db + r), total[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r] = HorizontalSum(total[r]);
}

// y[0 .. rows) = the rows of group g · x, rows <= kQ8GroupRows; x holds blocks * 32 values.
void DotGroup(bool avx2, const float* x, const PackedQ8& w, int g, int rows, float* y) {
  const int8_t* q = w.qs.data() + w.q_at(g * kQ8GroupRows, 0);
  const float* d = w.scales.data() + w.scale_at(g * kQ8GroupRows, 0);
  using Fn = void (*)(const float*, const int8_t*, const float*, int, float*);
  static constexpr Fn kAvx2[] = {nullptr, DotGroupAvx2<1>, DotGroupAvx2<2>, DotGroupAvx2<3>,
                                 DotGroupAvx2<4>};
  static constexpr Fn kPortable[] = {nullptr, DotGroupPortable<1>, DotGroupPortable<2>,
                                     DotGroupPortable<3>, DotGroupPortable<4>};
  (avx2 ? kAvx2 : kPortable)[rows](x, q, d, w.blocks, y);
}

// The fused path (T < kQ8WidenRows): row groups of W in parallel, each serving every row of x while
// it is in cache. x rows are copied into blocks * 32 floats (zero-padded) when `in` is not whole
// blocks, so that the padding of W meets zeros rather than whatever follows x.
void MatMulFused(const float* x, const PackedQ8& w, const float* bias, float* y, int T) {
  const int in = w.in, out = w.out;
  const int64_t ldx = static_cast<int64_t>(w.blocks) * kQ8Block;
  const float* xp = x;
  if (ldx != in) {
    float* padded = Workspace<float, 4>(static_cast<size_t>(T) * ldx);
    for (int t = 0; t < T; ++t) {
      std::copy(x + static_cast<int64_t>(t) * in, x + static_cast<int64_t>(t + 1) * in, padded + t * ldx);
      std::fill(padded + t * ldx + in, padded + (t + 1) * ldx, 0.0f);
    }
    xp = padded;
  }
  const bool avx2 = Avx2FmaActive();
#pragma omp parallel for schedule(static) if (static_cast<int64_t>(T) * in * out >= kParallelMatVec)
  for (int g = 0; g < w.groups; ++g) {
    const int row0 = g * kQ8GroupRows, rows = std::min(kQ8GroupRows, out - row0);
    float part[kQ8GroupRows];
    for (int t = 0; t < T; ++t) {
      DotGroup(avx2, xp + t * ldx, w, g, rows, part);
      float* yt = y + static_cast<int64_t>(t) * out + row0;
      for (int r = 0; r < rows; ++r) yt[r] = bias ? part[r] + bias[row0 + r] : part[r];
    }
  }
}

// Row `row`'s block b into out (that block's n <= 32 values), one value at a time.
__attribute__((always_inline)) inline void DequantizeBlock(const PackedQ8& w, int row, int b,
                                                           float* out) {
  const int8_t* q = w.qs.data() + w.q_at(row, b);
  const float d = w.scales[w.scale_at(row, b)];
  const int n = std::min(kQ8Block, w.in - b * kQ8Block);
  for (int i = 0; i < n; ++i) out[b * kQ8Block + i] = d * static_cast<float>(q[i]);
}
void DequantizeBody(const PackedQ8& w, int row0, int rows, float* dst) {
  for (int r = 0; r < rows; ++r)
    for (int b = 0; b < w.blocks; ++b)
      DequantizeBlock(w, row0 + r, b, dst + static_cast<int64_t>(r) * w.in);
}
// The same values, 8 at a time (the compiler leaves DequantizeBody's short variable-length loop
// scalar): whole blocks by VPMOVSXBD and one multiply, the last partial block by DequantizeBlock.
SS_AVX2 void DequantizeAvx2(const PackedQ8& w, int row0, int rows, float* dst) {
  const int whole = w.in / kQ8Block;
  for (int r = 0; r < rows; ++r) {
    float* out = dst + static_cast<int64_t>(r) * w.in;
    for (int b = 0; b < whole; ++b) {
      const int8_t* q = w.qs.data() + w.q_at(row0 + r, b);
      const __m256 d = _mm256_set1_ps(w.scales[w.scale_at(row0 + r, b)]);
      for (int i = 0; i < kQ8Block; i += 8)
        _mm256_storeu_ps(out + b * kQ8Block + i, _mm256_mul_ps(d, Widen8(q + i)));
    }
    for (int b = whole; b < w.blocks; ++b) DequantizeBlock(w, row0 + r, b, out);
  }
}

}  // namespace

PackedQ8 PackQ8_0(const float* w, int out, int in) {
  SS_ASSERT(out >= 1 && in >= 1);
  PackedQ8 p;
  p.out = out;
  p.in = in;
  p.blocks = (in + kQ8Block - 1) / kQ8Block;
  p.groups = (out + kQ8GroupRows - 1) / kQ8GroupRows;
  const int64_t ldq = static_cast<int64_t>(p.blocks) * kQ8Block;
  p.qs.assign(static_cast<size_t>(p.groups) * kQ8GroupRows * ldq, 0);
  p.scales.assign(static_cast<size_t>(p.groups) * kQ8GroupRows * p.blocks, 0.0f);
#pragma omp parallel if (static_cast<int64_t>(out) * in >= (1 << 16))
  {
    std::vector<float> row(ldq, 0.0f);
    std::vector<uint8_t> bytes(static_cast<size_t>(p.blocks) * kQ8BlockBytes);
#pragma omp for schedule(static)
    for (int o = 0; o < out; ++o) {
      std::copy(w + static_cast<int64_t>(o) * in, w + static_cast<int64_t>(o + 1) * in, row.begin());
      QuantizeQ8_0(row.data(), bytes.data(), ldq);
      for (int b = 0; b < p.blocks; ++b) {
        const uint8_t* block = bytes.data() + static_cast<size_t>(b) * kQ8BlockBytes;
        uint16_t d_bits;
        std::memcpy(&d_bits, block, 2);
        p.scales[p.scale_at(o, b)] = F16ToF32(d_bits);
        std::memcpy(p.qs.data() + p.q_at(o, b), block + 2, kQ8Block);
      }
    }
  }
  return p;
}

void DequantizeQ8Rows(const PackedQ8& w, int row0, int rows, float* dst) {
  SS_ASSERT(row0 >= 0 && rows >= 0 && row0 + rows <= w.out);
  if (Avx2FmaActive())
    DequantizeAvx2(w, row0, rows, dst);
  else
    DequantizeBody(w, row0, rows, dst);
}

std::vector<uint8_t> Q8RowBlocks(const PackedQ8& w, int row) {
  SS_ASSERT(row >= 0 && row < w.out);
  std::vector<uint8_t> bytes(static_cast<size_t>(w.blocks) * kQ8BlockBytes);
  for (int b = 0; b < w.blocks; ++b) {
    uint8_t* block = bytes.data() + static_cast<size_t>(b) * kQ8BlockBytes;
    const uint16_t d_bits = F32ToF16(w.scales[w.scale_at(row, b)]);
    std::memcpy(block, &d_bits, 2);
    std::memcpy(block + 2, w.qs.data() + w.q_at(row, b), kQ8Block);
  }
  return bytes;
}

const char* Q8KernelName() { return Avx2FmaActive() ? "avx2" : "portable"; }

void MatMulQ8(const float* x, const PackedQ8& w, const float* bias, float* y, int T) {
  SS_ASSERT(T >= 0 && w.out >= 1 && w.in >= 1);
  if (T == 0) return;
  if (T >= kQ8WidenRows)
    MatMulWidened(x, w.in, w.out, bias, y, T,
                  [&w](int row0, int rows, float* dst) { DequantizeQ8Rows(w, row0, rows, dst); });
  else
    MatMulFused(x, w, bias, y, T);
}

}  // namespace ss
