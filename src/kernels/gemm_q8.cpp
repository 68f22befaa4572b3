#include "kernels/gemm_q8.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "kernels/dequant.h"
#include "kernels/gemm_dot.h"
#include "kernels/simd.h"
#include "kernels/vecmath.h"
#include "kernels/workspace.h"
#include "tensor/half.h"

namespace ss {

namespace {

#define SS_AVX2 __attribute__((target("avx2,fma")))

#define SS_AVX512 __attribute__((target("avx512f,avx2,fma")))

constexpr int kQ8BlockBytes = 2 + kQ8Block;  // ggml's block_q8_0

SS_AVX2 inline __m256 Widen8(const int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
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

// 32 int8 values times d into two 16-value chunks (first, second): the same products as
// DequantizeBlock.
SS_AVX512 inline void ScaleBlock512(const int8_t* q, float d, float* first, float* second) {
  const __m512 s = _mm512_set1_ps(d);
  for (int h = 0; h < 2; ++h)
    _mm512_storeu_ps(h ? second : first,
                     _mm512_mul_ps(s, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                          reinterpret_cast<const __m128i*>(q + 16 * h))))));
}
SS_AVX2 inline void ScaleBlock256(const int8_t* q, float d, float* first, float* second) {
  const __m256 s = _mm256_set1_ps(d);
  for (int i = 0; i < kQ8Block; i += 8)
    _mm256_storeu_ps((i < 16 ? first : second) + i % 16, _mm256_mul_ps(s, Widen8(q + i)));
}
inline void ScaleBlockPortable(const int8_t* q, float d, float* first, float* second) {
  for (int i = 0; i < kQ8Block; ++i)
    (i < 16 ? first : second)[i % 16] = d * static_cast<float>(q[i]);
}

// Rows [row0, row0 + rows), values [v0, v0 + n) of W for MatMulDot (v0 a multiple of 32): row r at
// dst + r * rs, each 16-value chunk cs floats after the previous one. The last block of a row may
// be cut short at `in` (the pack's padding is zeros; MatMulDot zeroes what lies past `in` anyway).
template <void (*kScale)(const int8_t*, float, float*, float*)>
void DecodeForDot(const void* ctx, int row0, int rows, int v0, int n, float* dst, int64_t rs,
                  int cs) {
  const PackedQ8& w = *static_cast<const PackedQ8*>(ctx);
  // The next value block of these rows' groups (each group's blocks lie together, its rows side
  // by side), asked for into L1 a line at a time: the stream one value block ahead.
  const int b_next = (v0 + n) / kQ8Block,
            b_end = std::min(w.blocks, b_next + kDotKBlockOnePass / kQ8Block);
  for (int g = row0 / kQ8GroupRows; b_next < b_end && g <= (row0 + rows - 1) / kQ8GroupRows; ++g) {
    const char* begin =
        reinterpret_cast<const char*>(w.qs.data() + w.q_at(g * kQ8GroupRows, b_next));
    for (int64_t o = 0; o < static_cast<int64_t>(b_end - b_next) * kQ8GroupRows * kQ8Block; o += 64)
      _mm_prefetch(begin + o, _MM_HINT_T0);
  }
  alignas(64) float last[kQ8Block];
  for (int r = 0; r < rows; ++r) {
    float* out = dst + r * rs;
    for (int i = 0; i < n; i += kQ8Block) {
      const int b = (v0 + i) / kQ8Block;
      const int8_t* q = w.qs.data() + w.q_at(row0 + r, b);
      const float d = w.scales[w.scale_at(row0 + r, b)];
      float* first = out + (i / 16) * cs;
      if (n - i >= kQ8Block) {
        kScale(q, d, first, first + cs);
      } else {
        kScale(q, d, last, last + 16);
        for (int v = 0; v < n - i; ++v) first[(v / 16) * cs + v % 16] = last[v];
      }
    }
  }
}

// Slice `part` of `parts` of the bytes of the row groups holding rows [row0, row0 + rows), in
// memory order, into L2.
void PrefetchForDot(const void* ctx, int row0, int rows, int part, int parts) {
  const PackedQ8& w = *static_cast<const PackedQ8*>(ctx);
  const int g0 = row0 / kQ8GroupRows, g1 = (row0 + rows - 1) / kQ8GroupRows + 1;
  const char* begin = reinterpret_cast<const char*>(w.qs.data() + w.q_at(g0 * kQ8GroupRows, 0));
  const int64_t total = static_cast<int64_t>(g1 - g0) * w.blocks * kQ8GroupRows * kQ8Block;
  for (int64_t o = total * part / parts / 64 * 64; o < total * (part + 1) / parts; o += 64)
    _mm_prefetch(begin + o, _MM_HINT_T1);
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
#pragma omp parallel if (static_cast <int64_t>(out) * in >= (1 << 16))
  {
    std::vector<float> row(ldq, 0.0f);
    std::vector<uint8_t> bytes(static_cast<size_t>(p.blocks) * kQ8BlockBytes);
#pragma omp for schedule(static)
    for (int o = 0; o < out; ++o) {
      std::copy(w + static_cast<int64_t>(o) * in, w + static_cast<int64_t>(o + 1) * in,
                row.begin());
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

namespace {

// ---- One row of x (decode): a group's four rows (their blocks side by side: one stream) decoded a
// block at a time in registers and multiplied at once, with MatMulDot's arithmetic (a 16-lane FMA
// chain per row over the chunks in order, the chunks past `in` left out, Reduce16, then the bias),
// so a row gives the same bits as inside any T. x padded with zeros to whole blocks.
template <int R>
SS_AVX512 void GroupTimesX512(const PackedQ8& w, int g, const float* x, float* y,
                              const float* bias) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const int8_t* q = w.qs.data() + w.q_at(g * kQ8GroupRows, 0);
  const float* d = w.scales.data() + w.scale_at(g * kQ8GroupRows, 0);
  for (int b = 0; b < w.blocks; ++b, q += kQ8GroupRows * kQ8Block, d += kQ8GroupRows) {
    _mm_prefetch(reinterpret_cast<const char*>(q) + 1024, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(q) + 1024 + 64, _MM_HINT_T0);
    const int chunks = std::min(2, (w.in - b * kQ8Block + 15) / 16);
    for (int c = 0; c < chunks; ++c) {
      const __m512 xv = _mm512_loadu_ps(x + b * kQ8Block + 16 * c);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512 v = _mm512_mul_ps(
            _mm512_set1_ps(d[r]),
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + r * kQ8Block + 16 * c)))));
        acc[r] = _mm512_fmadd_ps(v, xv, acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const int row = g * kQ8GroupRows + r;
    const float s = Reduce16(acc[r]);
    y[row] = bias ? s + bias[row] : s;
  }
}

template <int R>
SS_AVX2 void GroupTimesX256(const PackedQ8& w, int g, const float* x, float* y, const float* bias) {
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  const int8_t* q = w.qs.data() + w.q_at(g * kQ8GroupRows, 0);
  const float* d = w.scales.data() + w.scale_at(g * kQ8GroupRows, 0);
  for (int b = 0; b < w.blocks; ++b, q += kQ8GroupRows * kQ8Block, d += kQ8GroupRows) {
    _mm_prefetch(reinterpret_cast<const char*>(q) + 1024, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(q) + 1024 + 64, _MM_HINT_T0);
    const int chunks = std::min(2, (w.in - b * kQ8Block + 15) / 16);
    for (int c = 0; c < chunks; ++c) {
      const float* xc = x + b * kQ8Block + 16 * c;
      const __m256 x0 = _mm256_loadu_ps(xc), x1 = _mm256_loadu_ps(xc + 8);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m256 s = _mm256_set1_ps(d[r]);
        const int8_t* qc = q + r * kQ8Block + 16 * c;
        acc[r][0] = _mm256_fmadd_ps(_mm256_mul_ps(s, Widen8(qc)), x0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(_mm256_mul_ps(s, Widen8(qc + 8)), x1, acc[r][1]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    const int row = g * kQ8GroupRows + r;
    const float s = Reduce16(acc[r][0], acc[r][1]);
    y[row] = bias ? s + bias[row] : s;
  }
}

void MatVecQ8(const float* x, const PackedQ8& w, const float* bias, float* y) {
  const int64_t ldx = static_cast<int64_t>(w.blocks) * kQ8Block;
  float* xp = Workspace<float, 4>(static_cast<size_t>(ldx));
  std::copy(x, x + w.in, xp);
  std::fill(xp + w.in, xp + ldx, 0.0f);
  using Fn = void (*)(const PackedQ8&, int, const float*, float*, const float*);
  const bool avx512 = ActiveSimdLevel() == SimdLevel::kAvx512;
  static constexpr Fn k512[] = {nullptr, GroupTimesX512<1>, GroupTimesX512<2>, GroupTimesX512<3>,
                                GroupTimesX512<4>};
  static constexpr Fn k256[] = {nullptr, GroupTimesX256<1>, GroupTimesX256<2>, GroupTimesX256<3>,
                                GroupTimesX256<4>};
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(w.in) * w.out >= \
                                              (int64_t{1} << 16))
  for (int g = 0; g < w.groups; ++g) {
    const int rows = std::min(kQ8GroupRows, w.out - g * kQ8GroupRows);
    (avx512 ? k512 : k256)[rows](w, g, xp, y, bias);
  }
}

}  // namespace

const char* Q8KernelName() { return DotKernelName(); }

void MatMulQ8(const float* x, const PackedQ8& w, const float* bias, float* y, int T) {
  SS_ASSERT(T >= 0 && w.out >= 1 && w.in >= 1);
  if (T == 1 && ActiveSimdLevel() != SimdLevel::kPortable) {
    MatVecQ8(x, w, bias, y);
    return;
  }
  DotWeights dot;
  dot.out = w.out;
  dot.in = w.in;
  switch (ActiveSimdLevel()) {
    case SimdLevel::kAvx512:
      dot.decode = DecodeForDot<ScaleBlock512>;
      break;
    case SimdLevel::kAvx2:
      dot.decode = DecodeForDot<ScaleBlock256>;
      break;
    case SimdLevel::kPortable:
      dot.decode = DecodeForDot<ScaleBlockPortable>;
      break;
  }
  dot.ctx = &w;
  dot.prefetch = PrefetchForDot;
  MatMulDot(x, dot, bias, y, T);
}

}  // namespace ss
