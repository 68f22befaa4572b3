#include "kernels/gemm_bf16.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>

#include "common/error.h"
#include "kernels/vecmath.h"
#include "tensor/half.h"

namespace ss {

namespace {

constexpr int kWidth = kBf16PanelWidth;

template <typename Bits>
PackedBf16 Pack(int out, int in, Bits bits) {
  SS_ASSERT(out >= 1 && in >= 1);
  PackedBf16 p;
  p.out = out;
  p.in = in;
  p.pairs = (in + 1) / 2;
  p.panels = (out + kWidth - 1) / kWidth;
  p.data.assign(static_cast<size_t>(p.panels) * p.pairs * kWidth * 2, 0);
  for (int o = 0; o < out; ++o) {
    uint16_t* column =
        p.data.data() + static_cast<size_t>(o / kWidth) * p.pairs * kWidth * 2 + (o % kWidth) * 2;
    for (int i = 0; i < in; ++i)
      column[static_cast<size_t>(i / 2) * kWidth * 2 + (i & 1)] =
          bits(static_cast<int64_t>(o) * in + i);
  }
  return p;
}

// Cache blocking of the AVX-512 path. A work item is a tile of kRowBlock rows by kColumnBlock
// columns of y; it walks `in` in blocks of kPairBlock pairs, so the W block it reuses across its
// rows (kPairBlock * kColumnBlock * 4 bytes = 256 KiB) stays in L2 and one x micro-panel
// (kRows * kPairBlock * 4 bytes = 6 KiB) stays in L1 while the W panels stream past it.
constexpr int kRows = 6;               // rows of the micro-kernel: 6 x 2 zmm accumulators
constexpr int kPairBlock = 256;        // pairs of `in` per cache block
constexpr int kColumnBlock = 256;      // output columns per work item (8 panels)
constexpr int kRowBlock = 16 * kRows;  // rows per work item

#define SS_BF16 __attribute__((target("avx512f,avx512bf16")))

// x (T, in) f32 -> rows of `stride` bf16 pairs (zero past `in`), rounded to nearest even.
SS_BF16 void ConvertRow512(const float* x, int in, uint32_t* row, int stride) {
  for (int i = 0; i < 2 * stride; i += 32) {
    const int left = std::clamp(in - i, 0, 32);
    const __mmask16 lo = static_cast<__mmask16>(left >= 16 ? 0xffff : (1u << left) - 1);
    const __mmask16 hi = static_cast<__mmask16>(left >= 32   ? 0xffff
                                                : left <= 16 ? 0
                                                             : (1u << (left - 16)) - 1);
    const __m512 a = _mm512_maskz_loadu_ps(lo, x + i);
    const __m512 b = _mm512_maskz_loadu_ps(hi, x + i + 16);
    // The second operand fills the lower 16 bf16: memory order is kept.
    const __m512bh packed = _mm512_cvtne2ps_pbh(b, a);
    _mm512_store_si512(row + i / 2, reinterpret_cast<const __m512i&>(packed));
  }
}

// y rows [0, rows) x columns (masks m0, m1) of one panel (+)= x micro-panel · W panel over kc
// pairs.
//   x: kRows rows of ldx pairs (already offset to the block's first pair)
//   w: kc * kWidth pairs (the panel, offset likewise)
// init: accumulate onto y if `accumulate`, else start from bias (or zero).
SS_BF16 void MicroKernel(const uint32_t* x, int64_t ldx, const uint32_t* w, int kc, float* y,
                         int64_t ldy, int rows, __mmask16 m0, __mmask16 m1, const float* bias,
                         bool accumulate) {
  __m512 acc0[kRows], acc1[kRows];
  if (accumulate) {
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      acc0[r] = r < rows ? _mm512_maskz_loadu_ps(m0, y + r * ldy) : _mm512_setzero_ps();
      acc1[r] = r < rows ? _mm512_maskz_loadu_ps(m1, y + r * ldy + 16) : _mm512_setzero_ps();
    }
  } else {
    const __m512 b0 = bias ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
    const __m512 b1 = bias ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      acc0[r] = b0;
      acc1[r] = b1;
    }
  }
  for (int k = 0; k < kc; ++k) {
    const __m512bh w0 = reinterpret_cast<__m512bh>(_mm512_load_si512(w + k * kWidth));
    const __m512bh w1 = reinterpret_cast<__m512bh>(_mm512_load_si512(w + k * kWidth + 16));
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const __m512bh xb =
          reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(x[r * ldx + k])));
      acc0[r] = _mm512_dpbf16_ps(acc0[r], xb, w0);
      acc1[r] = _mm512_dpbf16_ps(acc1[r], xb, w1);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    if (r < rows) {
      _mm512_mask_storeu_ps(y + r * ldy, m0, acc0[r]);
      _mm512_mask_storeu_ps(y + r * ldy + 16, m1, acc1[r]);
    }
  }
}

// A per-calling-thread buffer for x in bf16 pairs, kept between calls so that a model's many
// products do not allocate (and page-fault) each time.
uint32_t* Workspace(size_t n) {
  thread_local std::vector<uint32_t, CacheLineAllocator<uint32_t>> buffer;
  if (buffer.size() < n) {
    buffer.clear();
    buffer.shrink_to_fit();
    buffer.resize(n);
  }
  return buffer.data();
}

void MatMul512(const float* x, const PackedBf16& w, const float* bias, float* y, int T) {
  const int in = w.in, out = w.out, pairs = w.pairs;
  const int ldx = (pairs + 15) / 16 * 16;  // each x row starts on a cache line
  const int padded_rows = (T + kRows - 1) / kRows * kRows;
  uint32_t* xb = Workspace(static_cast<size_t>(padded_rows) * ldx);
  const uint32_t* wdata = reinterpret_cast<const uint32_t*>(w.data.data());
  const int row_items = (T + kRowBlock - 1) / kRowBlock;
  const int column_items = (out + kColumnBlock - 1) / kColumnBlock;
  const int items = row_items * column_items;
  // Threads only when there are several tiles' worth of work.
  const bool parallel = static_cast<int64_t>(T) * in * out >= (int64_t{1} << 20);
#pragma omp parallel if (parallel)
  {
#pragma omp for schedule(static)
    for (int t = 0; t < padded_rows; ++t) {
      uint32_t* row = xb + static_cast<int64_t>(t) * ldx;
      if (t < T)
        ConvertRow512(x + static_cast<int64_t>(t) * in, in, row, ldx);
      else
        std::fill(row, row + ldx, 0u);
    }
#pragma omp for schedule(dynamic, 1)
    for (int item = 0; item < items; ++item) {
      const int row0 = item / column_items * kRowBlock;
      const int row1 = std::min(T, row0 + kRowBlock);
      const int column0 = item % column_items * kColumnBlock;
      const int column1 = std::min(out, column0 + kColumnBlock);
      for (int k0 = 0; k0 < pairs; k0 += kPairBlock) {
        const int kc = std::min(kPairBlock, pairs - k0);
        for (int r = row0; r < row1; r += kRows) {
          const uint32_t* xp = xb + static_cast<int64_t>(r) * ldx + k0;
          for (int c = column0; c < column1; c += kWidth) {
            const int cols = std::min(kWidth, column1 - c);
            const __mmask16 m0 = static_cast<__mmask16>(cols >= 16 ? 0xffff : (1u << cols) - 1);
            const __mmask16 m1 = static_cast<__mmask16>(cols >= 32   ? 0xffff
                                                        : cols <= 16 ? 0
                                                                     : (1u << (cols - 16)) - 1);
            const uint32_t* wp = wdata + (static_cast<int64_t>(c / kWidth) * pairs + k0) * kWidth;
            MicroKernel(xp, ldx, wp, kc, y + static_cast<int64_t>(r) * out + c, out,
                        std::min(kRows, row1 - r), m0, m1, bias ? bias + c : nullptr, k0 > 0);
          }
        }
      }
    }
  }
}

// The same product in plain loops: per row of x and panel of W, kWidth f32 sums over the pairs.
void MatMulPortable(const float* x, const PackedBf16& w, const float* bias, float* y, int T) {
  const int in = w.in, out = w.out, pairs = w.pairs;
  const bool parallel = static_cast<int64_t>(T) * in * out >= (int64_t{1} << 20);
#pragma omp parallel if (parallel)
  {
    std::vector<float> row(2 * static_cast<size_t>(pairs), 0.0f);
#pragma omp for schedule(static)
    for (int t = 0; t < T; ++t) {
      for (int i = 0; i < in; ++i)
        row[i] = BF16ToF32(F32ToBF16(x[static_cast<int64_t>(t) * in + i]));
      float* yr = y + static_cast<int64_t>(t) * out;
      for (int p = 0; p < w.panels; ++p) {
        const uint16_t* wp = w.data.data() + static_cast<size_t>(p) * pairs * kWidth * 2;
        float acc[kWidth] = {};
        for (int k = 0; k < pairs; ++k) {
          const float x0 = row[2 * k], x1 = row[2 * k + 1];
          const uint16_t* wk = wp + static_cast<size_t>(k) * kWidth * 2;
          for (int j = 0; j < kWidth; ++j)
            acc[j] += x0 * BF16ToF32(wk[2 * j]) + x1 * BF16ToF32(wk[2 * j + 1]);
        }
        const int cols = std::min(kWidth, out - p * kWidth);
        for (int j = 0; j < cols; ++j) {
          const int o = p * kWidth + j;
          yr[o] = bias ? acc[j] + bias[o] : acc[j];
        }
      }
    }
  }
}

}  // namespace

bool CpuHasAvx512Bf16() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
  }();
  return has;
}

bool Bf16KernelActive() { return CpuHasAvx512Bf16() && ActiveSimdLevel() == SimdLevel::kAvx512; }

PackedBf16 PackBf16(const float* w, int out, int in) {
  return Pack(out, in, [w](int64_t i) { return F32ToBF16(w[i]); });
}

PackedBf16 PackBf16Bits(const uint16_t* w, int out, int in) {
  return Pack(out, in, [w](int64_t i) { return w[i]; });
}

void MatMulBf16(const float* x, const PackedBf16& w, const float* bias, float* y, int T) {
  SS_ASSERT(T >= 0 && w.out >= 1 && w.in >= 1);
  if (T == 0) return;
  if (Bf16KernelActive())
    MatMul512(x, w, bias, y, T);
  else
    MatMulPortable(x, w, bias, y, T);
}

}  // namespace ss
