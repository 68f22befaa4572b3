#include "kernels/gemm_bf16.h"

#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <thread>

#include "common/error.h"
#include "kernels/vecmath.h"
#include "kernels/workspace.h"
#include "tensor/half.h"

namespace ss {

namespace {

constexpr int kWidth = kBf16PanelWidth;

// VCVTNE2PS2BF16 and VDPBF16PS treat denormal inputs as zero; both paths do the same, so their
// results agree: denormal bf16 (exponent field 0) become zero of the same sign.
inline uint16_t FlushDenormal(uint16_t b) { return (b & 0x7f80) == 0 ? b & 0x8000 : b; }

// Packs into `p` (reusing its storage): bits(row, i) is W[row][i] as bf16 bits.
template <typename Bits>
void PackInto(PackedBf16& p, int out, int in, Bits bits) {
  SS_ASSERT(out >= 1 && in >= 1);
  p.out = out;
  p.in = in;
  p.pairs = (in + 1) / 2;
  p.panels = (out + kWidth - 1) / kWidth;
  p.data.assign(static_cast<size_t>(p.panels) * p.pairs * kWidth * 2, 0);
  // Panel by panel, writing in order while reading kWidth rows of W side by side (each row
  // sequentially). Panels in parallel when large (training packs its weights every step); inside
  // another parallel region (the bf16 attention's packs) this runs on the calling thread.
  const int64_t panel_size = static_cast<int64_t>(p.pairs) * kWidth * 2;
#pragma omp parallel for schedule(static) if (static_cast <int64_t>(out) * in >= (1 << 16))
  for (int panel = 0; panel < p.panels; ++panel) {
    uint16_t* dst = p.data.data() + panel * panel_size;
    const int columns = std::min(kWidth, out - panel * kWidth);
    for (int k = 0; k < p.pairs; ++k, dst += kWidth * 2) {
      for (int j = 0; j < columns; ++j) {
        const int row = panel * kWidth + j;
        dst[2 * j] = FlushDenormal(bits(row, 2 * k));
        if (2 * k + 1 < in) dst[2 * j + 1] = FlushDenormal(bits(row, 2 * k + 1));
      }
    }
  }
}

// out[i] = x[i] rounded to bf16 (denormals flushed), kept as f32: the operand every path
// multiplies.
void RoundRowBf16(const float* x, int in, float* out) {
  for (int i = 0; i < in; ++i) out[i] = BF16ToF32(FlushDenormal(F32ToBF16(x[i])));
}

// x row (in floats) -> `stride` bf16 pairs (zero past `in`), rounded to nearest even with
// denormals flushed, in plain code (the AVX2 and portable paths; ConvertRow512 on AVX-512).
void ConvertRowScalar(const float* x, int in, uint32_t* row, int stride) {
  for (int k = 0; k < stride; ++k) {
    const uint32_t lo = 2 * k < in ? FlushDenormal(F32ToBF16(x[2 * k])) : 0;
    const uint32_t hi = 2 * k + 1 < in ? FlushDenormal(F32ToBF16(x[2 * k + 1])) : 0;
    row[k] = lo | hi << 16;
  }
}

// Cache blocking of the tiled paths (AMX, AVX-512 BF16, AVX2). A work item is a tile of
// Path::kRowBlock rows by kColumnBlock columns of y; it walks `in` in blocks of Path::kPairBlock
// pairs, so the W block it reuses across its rows (on the vector paths kVectorPairBlock *
// kColumnBlock * 4 bytes = 256 KiB) stays in L2 and one x micro-panel (kRows * kVectorPairBlock *
// 4 bytes, 6 KiB at most) stays in L1 while the W panels stream past it.
constexpr int kVectorPairBlock = 256;  // pairs of `in` per cache block (AMX: AmxPath::kPairBlock)
constexpr int kColumnBlock = 256;      // output columns per work item (8 panels), at most
// Multiply-adds below which one thread does the product (about 40 us on one Zen 4 core): a
// decode-sized product (T = 1) is over before a busy machine schedules the second thread, and
// every parallel region waits for all its threads, even idle ones.
constexpr int64_t kParallelMacs = int64_t{1} << 22;
// A matrix-vector product (decode) splits W's panels over the threads from 2^16 multiply-adds
// (128 KiB of bf16), as MatMul's f32 one: memory-bound, with helper threads spinning between
// back-to-back products.
constexpr int64_t kParallelMatVec = int64_t{1} << 16;

#define SS_BF16 __attribute__((target("avx512f,avx512bf16")))
#define SS_AVX512F __attribute__((target("avx512f,avx2,fma")))
#define SS_AVX2 __attribute__((target("avx2,fma")))
#define SS_AMX __attribute__((target("amx-tile,amx-bf16")))

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

// y rows [0, kTileRows) x columns (masks m0, m1) of one panel (+)= x micro-panel · W panel over kc
// pairs. Tails of T use a smaller kTileRows rather than padding, so a matrix-vector product (T = 1)
// does no wasted rows.
//   x: kTileRows rows of ldx pairs (already offset to the block's first pair)
//   w: kc * kWidth pairs (the panel, offset likewise)
// The sums start from zero, or from y if `accumulate` (a later block of pairs); `bias`, passed with
// the last block of pairs only, is added after the last pair. So every column's sum runs over the
// pairs in order from zero, then adds the bias, whatever the tile: as the matrix-vector product
// (PanelsDot512) forms it, so a row gives the same bits alone as inside a larger T.
template <int kTileRows>
SS_BF16 void MicroKernel(const uint32_t* x, int64_t ldx, const uint32_t* w, int kc, float* y,
                         int64_t ldy, __mmask16 m0, __mmask16 m1, const float* bias,
                         bool accumulate) {
  __m512 acc0[kTileRows], acc1[kTileRows];
#pragma GCC unroll 8
  for (int r = 0; r < kTileRows; ++r) {
    acc0[r] = accumulate ? _mm512_maskz_loadu_ps(m0, y + r * ldy) : _mm512_setzero_ps();
    acc1[r] = accumulate ? _mm512_maskz_loadu_ps(m1, y + r * ldy + 16) : _mm512_setzero_ps();
  }
  for (int k = 0; k < kc; ++k) {
    const __m512bh w0 = reinterpret_cast<__m512bh>(_mm512_load_si512(w + k * kWidth));
    const __m512bh w1 = reinterpret_cast<__m512bh>(_mm512_load_si512(w + k * kWidth + 16));
#pragma GCC unroll 8
    for (int r = 0; r < kTileRows; ++r) {
      const __m512bh xb =
          reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(x[r * ldx + k])));
      acc0[r] = _mm512_dpbf16_ps(acc0[r], xb, w0);
      acc1[r] = _mm512_dpbf16_ps(acc1[r], xb, w1);
    }
  }
  if (bias) {
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, bias), b1 = _mm512_maskz_loadu_ps(m1, bias + 16);
#pragma GCC unroll 8
    for (int r = 0; r < kTileRows; ++r) {
      acc0[r] = _mm512_add_ps(acc0[r], b0);
      acc1[r] = _mm512_add_ps(acc1[r], b1);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kTileRows; ++r) {
    _mm512_mask_storeu_ps(y + r * ldy, m0, acc0[r]);
    _mm512_mask_storeu_ps(y + r * ldy + 16, m1, acc1[r]);
  }
}

// The AVX2 + FMA micro-kernel: the same tile, with W widened to f32 in registers (a bf16 is the
// upper half of an f32: the pair's lower element is bits << 16, its upper element bits &
// 0xffff0000) and x's pair broadcast the same way. Each product of two bf16 values is exact in f32,
// so an FMA adds it with one rounding. Every column's sum runs over the values in order (a pair's
// lower element, then its upper one) from zero, in one FMA chain, then adds the bias (passed with
// the last block of pairs only): the order of the AVX2 path's every product (PanelsDotAvx2 for one
// row, WidenedTile from kWidenRows rows on). 2 rows x 4 ymm accumulators (32 columns) plus the
// widened operands fill the 16 ymm registers. Column tails go through a 32-float buffer.
template <int kTileRows>
SS_AVX2 void MicroKernelAvx2(const uint32_t* x, int64_t ldx, const uint32_t* w, int kc, float* y,
                             int64_t ldy, int cols, const float* bias, bool accumulate) {
  __m256 acc[kTileRows][4];
  alignas(32) float edge[kWidth];
  for (int r = 0; r < kTileRows; ++r) {
    const float* init = accumulate ? y + r * ldy : nullptr;
    if (init && cols < kWidth) {
      std::fill(edge, edge + kWidth, 0.0f);
      std::copy(init, init + cols, edge);
      init = edge;
    }
    for (int q = 0; q < 4; ++q)
      acc[r][q] = init ? _mm256_loadu_ps(init + 8 * q) : _mm256_setzero_ps();
  }
  const __m256i upper = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  for (int k = 0; k < kc; ++k) {
    __m256 x_lo[kTileRows], x_hi[kTileRows];
#pragma GCC unroll 4
    for (int r = 0; r < kTileRows; ++r) {
      const uint32_t pair = x[r * ldx + k];
      x_lo[r] = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(pair << 16)));
      x_hi[r] = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(pair & 0xffff0000u)));
    }
    const uint32_t* wk = w + k * kWidth;
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wk + 8 * q));
      const __m256 w_lo = _mm256_castsi256_ps(_mm256_slli_epi32(bits, 16));
      const __m256 w_hi = _mm256_castsi256_ps(_mm256_and_si256(bits, upper));
#pragma GCC unroll 4
      for (int r = 0; r < kTileRows; ++r) {
        acc[r][q] = _mm256_fmadd_ps(x_lo[r], w_lo, acc[r][q]);
        acc[r][q] = _mm256_fmadd_ps(x_hi[r], w_hi, acc[r][q]);
      }
    }
  }
  for (int r = 0; r < kTileRows; ++r) {
    float* dst = cols < kWidth ? edge : y + r * ldy;
    for (int q = 0; q < 4; ++q) {
      __m256 v = acc[r][q];
      if (bias) {
        alignas(32) float b[8] = {};
        for (int j = 0; j < 8 && 8 * q + j < cols; ++j) b[j] = bias[8 * q + j];
        v = _mm256_add_ps(v, _mm256_load_ps(b));
      }
      _mm256_storeu_ps(dst + 8 * q, v);
    }
    if (cols < kWidth) std::copy(edge, edge + cols, y + r * ldy);
  }
}

// Decode (T = 1, memory-bound): y = W x, each panel of W one contiguous stream.
// kBf16Streams panels spaced evenly through a thread's range are read at once, as MatMul's f32
// matrix-vector product does (kernels/ops.cpp): more of the memory's requests in flight than one
// stream. Each column's sum runs over the pairs in order (lower half, then upper half of each), so
// the result does not depend on how panels are grouped or split over threads.
constexpr int kBf16Streams = 2;
constexpr int kPrefetchPairs = 16;  // how far ahead in its panel a stream asks for W (2 KiB)

// acc (S panels x kWidth columns) = x (pairs) · the S panels w[s] (pairs * kWidth pairs each),
// each column's sum one FMA chain over the values in order, as MicroKernelAvx2 forms it (S = 2:
// 8 chains of two FMAs a pair, which keeps both FMA ports busy).
template <int S>
SS_AVX2 void PanelsDotAvx2(const uint32_t* x, const uint32_t* const* w, int pairs, float* acc) {
  __m256 sum[S][4];
  for (int s = 0; s < S; ++s)
    for (int q = 0; q < 4; ++q) sum[s][q] = _mm256_setzero_ps();
  const __m256i upper = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  for (int k = 0; k < pairs; ++k) {
    const uint32_t pair = x[k];
    const __m256 x_lo = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(pair << 16)));
    const __m256 x_hi =
        _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(pair & 0xffff0000u)));
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) {
      const uint32_t* wk = w[s] + static_cast<int64_t>(k) * kWidth;
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) {
        const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wk + 8 * q));
        sum[s][q] =
            _mm256_fmadd_ps(x_lo, _mm256_castsi256_ps(_mm256_slli_epi32(bits, 16)), sum[s][q]);
        sum[s][q] =
            _mm256_fmadd_ps(x_hi, _mm256_castsi256_ps(_mm256_and_si256(bits, upper)), sum[s][q]);
      }
    }
  }
  for (int s = 0; s < S; ++s)
    for (int q = 0; q < 4; ++q) _mm256_storeu_ps(acc + s * kWidth + 8 * q, sum[s][q]);
}

// The same with VDPBF16PS (the AVX-512 BF16 and AMX paths' decode): each column's sum over the
// pairs in order, as MicroKernel<1> forms it.
template <int S>
SS_BF16 void PanelsDot512(const uint32_t* x, const uint32_t* const* w, int pairs, float* acc) {
  __m512 sum[S][2];
  for (int s = 0; s < S; ++s) sum[s][0] = sum[s][1] = _mm512_setzero_ps();
  for (int k = 0; k < pairs; ++k) {
    const __m512bh xb = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(x[k])));
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) {
      const uint32_t* wk = w[s] + static_cast<int64_t>(k) * kWidth;
      _mm_prefetch(reinterpret_cast<const char*>(wk + kPrefetchPairs * kWidth), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(wk + kPrefetchPairs * kWidth + 16), _MM_HINT_T0);
      sum[s][0] =
          _mm512_dpbf16_ps(sum[s][0], xb, reinterpret_cast<__m512bh>(_mm512_load_si512(wk)));
      sum[s][1] =
          _mm512_dpbf16_ps(sum[s][1], xb, reinterpret_cast<__m512bh>(_mm512_load_si512(wk + 16)));
    }
  }
  for (int s = 0; s < S; ++s) {
    _mm512_storeu_ps(acc + s * kWidth, sum[s][0]);
    _mm512_storeu_ps(acc + s * kWidth + 16, sum[s][1]);
  }
}

// The zmm form of PanelsDotAvx2 (the avx512_fma path): each column one FMA chain over the values in
// order, 16 columns a register, W asked for 2 KiB ahead.
template <int S>
SS_AVX512F void PanelsDot512Fma(const uint32_t* x, const uint32_t* const* w, int pairs,
                                float* acc) {
  __m512 sum[S][2];
  for (int s = 0; s < S; ++s) sum[s][0] = sum[s][1] = _mm512_setzero_ps();
  const __m512i upper = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  for (int k = 0; k < pairs; ++k) {
    const uint32_t pair = x[k];
    const __m512 x_lo = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(pair << 16)));
    const __m512 x_hi =
        _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(pair & 0xffff0000u)));
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) {
      const uint32_t* wk = w[s] + static_cast<int64_t>(k) * kWidth;
      _mm_prefetch(reinterpret_cast<const char*>(wk + kPrefetchPairs * kWidth), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(wk + kPrefetchPairs * kWidth + 16), _MM_HINT_T0);
#pragma GCC unroll 2
      for (int q = 0; q < 2; ++q) {
        const __m512i bits = _mm512_load_si512(wk + 16 * q);
        sum[s][q] =
            _mm512_fmadd_ps(x_lo, _mm512_castsi512_ps(_mm512_slli_epi32(bits, 16)), sum[s][q]);
        sum[s][q] =
            _mm512_fmadd_ps(x_hi, _mm512_castsi512_ps(_mm512_and_si512(bits, upper)), sum[s][q]);
      }
    }
  }
  for (int s = 0; s < S; ++s) {
    _mm512_storeu_ps(acc + s * kWidth, sum[s][0]);
    _mm512_storeu_ps(acc + s * kWidth + 16, sum[s][1]);
  }
}

// How a matrix-vector product multiplies: VDPBF16PS, or W widened for FMA in ymm or zmm registers.
enum class DotKind { kDpbf16, kFmaYmm, kFmaZmm };

template <DotKind kKind, int S>
void PanelsDot(const uint32_t* x, const uint32_t* const* w, int pairs, float* acc) {
  if constexpr (kKind == DotKind::kDpbf16)
    PanelsDot512<S>(x, w, pairs, acc);
  else if constexpr (kKind == DotKind::kFmaZmm)
    PanelsDot512Fma<S>(x, w, pairs, acc);
  else
    PanelsDotAvx2<S>(x, w, pairs, acc);
}

// y[p * kWidth + j] (+ bias) for the panels [p0, p1).
template <DotKind kKind>
void MatVecPanels(const uint32_t* x, const PackedBf16& w, const float* bias, float* y, int p0,
                  int p1) {
  const uint32_t* wdata = reinterpret_cast<const uint32_t*>(w.data.data());
  const int64_t panel_size = static_cast<int64_t>(w.pairs) * kWidth;
  alignas(64) float acc[kBf16Streams * kWidth];
  auto store = [&](int p, const float* a) {
    const int c0 = p * kWidth, cols = std::min(kWidth, w.out - c0);
    for (int j = 0; j < cols; ++j) y[c0 + j] = bias ? a[j] + bias[c0 + j] : a[j];
  };
  const int q = (p1 - p0) / kBf16Streams;
  for (int i = 0; i < q; ++i) {
    const uint32_t* panels[kBf16Streams];
    for (int s = 0; s < kBf16Streams; ++s) panels[s] = wdata + (p0 + i + s * q) * panel_size;
    PanelsDot<kKind, kBf16Streams>(x, panels, w.pairs, acc);
    for (int s = 0; s < kBf16Streams; ++s) store(p0 + i + s * q, acc + s * kWidth);
  }
  for (int p = p0 + q * kBf16Streams; p < p1; ++p) {
    const uint32_t* panel = wdata + p * panel_size;
    PanelsDot<kKind, 1>(x, &panel, w.pairs, acc);
    store(p, acc);
  }
}

// y = W x + bias, each thread a contiguous range of panels.
template <DotKind kKind>
void MatVec(const float* x, const PackedBf16& w, const float* bias, float* y) {
  uint32_t* xb = Workspace<uint32_t, 0>(static_cast<size_t>(w.pairs));
  ConvertRowScalar(x, w.in, xb, w.pairs);
#pragma omp parallel if (static_cast <int64_t>(w.in) * w.out >= kParallelMatVec)
  {
    const int threads = omp_get_num_threads(), id = omp_get_thread_num();
    MatVecPanels<kKind>(xb, w, bias, y,
                        static_cast<int>(static_cast<int64_t>(w.panels) * id / threads),
                        static_cast<int>(static_cast<int64_t>(w.panels) * (id + 1) / threads));
  }
}

// The two tiled paths, as the driver below sees them: rows per micro-kernel, x's conversion, and
// one tile y (rows <= kRows, cols <= kWidth) (+)= x · W panel over kc pairs.
struct NoSpan {};
struct Avx512Path {
  using Span = NoSpan;
  static constexpr int kRows = 6;  // 6 x 2 zmm accumulators
  static constexpr int kRowBlock = 16 * kRows, kPairBlock = kVectorPairBlock;
  static void Convert(const float* x, int in, uint32_t* row, int stride) {
    ConvertRow512(x, in, row, stride);
  }
  static void Tile(int rows, const uint32_t* x, int64_t ldx, const uint32_t* w, int kc, float* y,
                   int64_t ldy, int cols, const float* bias, bool accumulate) {
    using Fn = void (*)(const uint32_t*, int64_t, const uint32_t*, int, float*, int64_t, __mmask16,
                        __mmask16, const float*, bool);
    static constexpr Fn kKernels[kRows + 1] = {nullptr,        MicroKernel<1>, MicroKernel<2>,
                                               MicroKernel<3>, MicroKernel<4>, MicroKernel<5>,
                                               MicroKernel<6>};
    const __mmask16 m0 = static_cast<__mmask16>(cols >= 16 ? 0xffff : (1u << cols) - 1);
    const __mmask16 m1 = static_cast<__mmask16>(cols >= 32   ? 0xffff
                                                : cols <= 16 ? 0
                                                             : (1u << (cols - 16)) - 1);
    kKernels[rows](x, ldx, w, kc, y, ldy, m0, m1, bias, accumulate);
  }
};
// The AMX path (Sapphire Rapids and later): TDPBF16PS multiplies a 16 x 32 bf16 tile of x by a
// 32 x 16 tile of W (stored as 16 rows of 16 column pairs: exactly a panel's layout, two tiles side
// by side at a stride of kWidth pairs) into a 16 x 16 f32 tile, 8,192 multiply-adds an instruction
// (Intel SDM vol. 1 ch. 3 / ISA extensions ref. ch. 3: "Intel AMX"; f32 accumulation, products of
// bf16 exact, denormal inputs as zero and outputs flushed, as VDPBF16PS). One AMX tile holds 32
// rows x 32 columns of y as four accumulator tiles (tmm0-3), with x in tmm4-5 and W in tmm6-7.
// Tiles read only whole 16-row, 16-pair blocks; the rows below a multiple of 16 and the pairs past
// one go through the AVX-512 micro-kernel, so no operand is read past its end and nothing is
// padded. Measured on one Xeon core here: 3.3 TFLOP/s for back-to-back TDPBF16PS against 0.22 for
// f32 FMA and 0.11 for VDPBF16PS (which Intel's cores issue once a cycle, where Zen 4 does twice).
struct AmxTileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// Every tile 16 rows of 64 bytes. A constant in memory: built on the stack, GCC 12 drops the
// stores as dead, not knowing that LDTILECFG reads them.
constexpr AmxTileConfig MakeTileConfig() {
  AmxTileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = 16;
    config.bytes_per_row[t] = 64;
  }
  return config;
}
alignas(64) constexpr AmxTileConfig kTileConfig = MakeTileConfig();

// The tile unit is configured for the span of one work item and released after it (LDTILECFG /
// TILERELEASE, tens of cycles beside the thousands a 32 x 32 tile takes): other code on the same
// thread (oneDNN under PyTorch in a Python session, an AMX-built OpenBLAS) may configure the tiles
// its own way between our calls, and a thread left holding tile state makes every context switch
// save 8 KiB more.
struct AmxSpan {
  SS_AMX AmxSpan() { _tile_loadconfig(&kTileConfig); }
  SS_AMX ~AmxSpan() { _tile_release(); }
  AmxSpan(const AmxSpan&) = delete;
  AmxSpan& operator=(const AmxSpan&) = delete;
};

// c (kRowTiles * 16 rows x 32 columns, 32 floats a row) = x (16-row tiles at stride ldx) · the W
// panel, over kc16 pairs (a multiple of 16).
template <int kRowTiles>
SS_AMX void AmxTiles(const uint32_t* x, int64_t ldx, const uint32_t* w, int kc16, float* c) {
  const int64_t x_stride = ldx * 4, w_stride = kWidth * 4;
  _tile_zero(0);
  _tile_zero(1);
  if constexpr (kRowTiles == 2) {
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int k = 0; k < kc16; k += 16) {
    _tile_loadd(6, w + k * kWidth, w_stride);
    _tile_loadd(7, w + k * kWidth + 16, w_stride);
    _tile_loadd(4, x + k, x_stride);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (kRowTiles == 2) {
      _tile_loadd(5, x + 16 * ldx + k, x_stride);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, c, kWidth * 4);
  _tile_stored(1, c + 16, kWidth * 4);
  if constexpr (kRowTiles == 2) {
    _tile_stored(2, c + 16 * kWidth, kWidth * 4);
    _tile_stored(3, c + 16 * kWidth + 16, kWidth * 4);
  }
}

struct AmxPath {
  using Span = AmxSpan;  // held while a thread runs Tile calls
  static constexpr int kRows = 32;
  // 128 rows of x and a 256-column, 512-pair block of W (512 KiB) per work item, in L2 (2 MiB a
  // core on Sapphire Rapids); a multiple of 16 pairs, so only the product's last block has a tail.
  static constexpr int kRowBlock = 128, kPairBlock = 512;
  static void Convert(const float* x, int in, uint32_t* row, int stride) {
    ConvertRow512(x, in, row, stride);
  }
  static void Tile(int rows, const uint32_t* x, int64_t ldx, const uint32_t* w, int kc, float* y,
                   int64_t ldy, int cols, const float* bias, bool accumulate) {
    const int kc16 = kc / 16 * 16;
    const int tiled_rows = kc16 > 0 ? rows / 16 * 16 : 0;
    if (tiled_rows > 0) {
      alignas(64) float c[kRows * kWidth];
      if (tiled_rows == 32)
        AmxTiles<2>(x, ldx, w, kc16, c);
      else
        AmxTiles<1>(x, ldx, w, kc16, c);
      for (int r = 0; r < tiled_rows; ++r) {
        float* yr = y + r * ldy;
        const float* cr = c + r * kWidth;
        if (accumulate)
          for (int j = 0; j < cols; ++j) yr[j] += cr[j];
        else
          std::copy(cr, cr + cols, yr);
      }
      if (kc16 < kc)  // the last pairs of these rows
        for (int r = 0; r < tiled_rows; r += Avx512Path::kRows)
          Avx512Path::Tile(std::min(Avx512Path::kRows, tiled_rows - r), x + r * ldx + kc16, ldx,
                           w + kc16 * kWidth, kc - kc16, y + r * ldy, ldy, cols, nullptr, true);
      if (bias)  // after the last pairs, as on the other paths
        for (int r = 0; r < tiled_rows; ++r)
          for (int j = 0; j < cols; ++j) y[r * ldy + j] += bias[j];
    }
    for (int r = tiled_rows; r < rows; r += Avx512Path::kRows)  // rows below the 16-row tiles
      Avx512Path::Tile(std::min(Avx512Path::kRows, rows - r), x + r * ldx, ldx, w, kc, y + r * ldy,
                       ldy, cols, bias, accumulate);
  }
};
struct Avx2Path {
  using Span = NoSpan;
  static constexpr int kRows = 2;
  static constexpr int kRowBlock = 16 * kRows, kPairBlock = kVectorPairBlock;
  static void Convert(const float* x, int in, uint32_t* row, int stride) {
    ConvertRowScalar(x, in, row, stride);
  }
  static void Tile(int rows, const uint32_t* x, int64_t ldx, const uint32_t* w, int kc, float* y,
                   int64_t ldy, int cols, const float* bias, bool accumulate) {
    if (rows == 2)
      MicroKernelAvx2<2>(x, ldx, w, kc, y, ldy, cols, bias, accumulate);
    else
      MicroKernelAvx2<1>(x, ldx, w, kc, y, ldy, cols, bias, accumulate);
  }
};

template <typename Path>
void MatMulTiled(const float* x, const PackedBf16& w, const float* bias, float* y, int T) {
  constexpr int kRows = Path::kRows, kRowBlock = Path::kRowBlock;
  const int in = w.in, out = w.out, pairs = w.pairs;
  const int ldx = (pairs + 15) / 16 * 16;  // each x row starts on a cache line
  uint32_t* xb = Workspace<uint32_t, 0>(static_cast<size_t>(T) * ldx);
  const uint32_t* wdata = reinterpret_cast<const uint32_t*>(w.data.data());
  const int row_items = (T + kRowBlock - 1) / kRowBlock;
  // Narrower column blocks when there are few rows, so every thread gets several tiles. A
  // matrix-vector product (decode) is memory-bound: threads pay from a smaller W (2 MiB of bf16),
  // as in MatMul's f32 matrix-vector path.
  const bool parallel = T == 1 ? static_cast<int64_t>(in) * out >= kParallelMatVec
                               : static_cast<int64_t>(T) * in * out >= kParallelMacs;
  const int threads = parallel ? omp_get_max_threads() : 1;
  int column_block = kColumnBlock;
  while (column_block > kWidth &&
         row_items * ((out + column_block - 1) / column_block) < 4 * threads)
    column_block /= 2;
  const int column_items = (out + column_block - 1) / column_block;
  const int items = row_items * column_items;
  // x is converted one row block at a time by the first thread whose tile needs it (0: to do,
  // 1: being converted, 2: ready), not in a pass with a barrier after it: on a busy machine a
  // barrier waits for a descheduled thread, while tiles taken dynamically let the others go on.
  std::unique_ptr<std::atomic<int>[]> converted(new std::atomic<int>[row_items]);
  for (int i = 0; i < row_items; ++i) converted[i].store(0, std::memory_order_relaxed);
    // Threads only when there is enough work (above, `parallel`).
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (int item = 0; item < items; ++item) {
    const int row_item = item / column_items;  // consecutive items share a row block
    const int row0 = row_item * kRowBlock;
    const int row1 = std::min(T, row0 + kRowBlock);
    int expected = 0;
    if (converted[row_item].compare_exchange_strong(expected, 1, std::memory_order_acquire)) {
      for (int t = row0; t < row1; ++t)
        Path::Convert(x + static_cast<int64_t>(t) * in, in, xb + static_cast<int64_t>(t) * ldx,
                      ldx);
      converted[row_item].store(2, std::memory_order_release);
    } else {
      // Converting a block takes microseconds: spin, and yield only if the converting thread
      // seems to have been descheduled.
      for (int spins = 0; converted[row_item].load(std::memory_order_acquire) != 2; ++spins) {
        if (spins < 4096)
          _mm_pause();
        else
          std::this_thread::yield();
      }
    }
    const int column0 = item % column_items * column_block;
    const int column1 = std::min(out, column0 + column_block);
    [[maybe_unused]] const typename Path::Span span;
    // One tile of rows (decode): no blocking of `in`, so W streams through once in storage order
    // (panel after panel) and the x row, a few KiB, stays in L1 anyway.
    const int pair_block = T <= kRows ? pairs : Path::kPairBlock;
    for (int k0 = 0; k0 < pairs; k0 += pair_block) {
      const int kc = std::min(pair_block, pairs - k0);
      for (int r = row0; r < row1; r += kRows) {
        const uint32_t* xp = xb + static_cast<int64_t>(r) * ldx + k0;
        for (int c = column0; c < column1; c += kWidth) {
          const uint32_t* wp = wdata + (static_cast<int64_t>(c / kWidth) * pairs + k0) * kWidth;
          Path::Tile(std::min(kRows, row1 - r), xp, ldx, wp, kc,
                     y + static_cast<int64_t>(r) * out + c, out, std::min(kWidth, column1 - c),
                     bias && k0 + kc == pairs ? bias + c : nullptr, k0 > 0);
        }
      }
    }
  }
}

// One thread: y (rows, panels [panel0, panel0 + panels)) (+)= xb (rows, `pairs` pairs) · W^T over
// W's pairs [pair0, pair0 + pairs) (MatMulBf16Block on a tiled path).
template <typename Path>
void BlockProductTiled(const uint32_t* xb, int64_t ldx, const PackedBf16& w, int panel0, int panels,
                       int pair0, int pairs, float* y, int64_t ldy, int rows, bool accumulate) {
  const uint32_t* wdata = reinterpret_cast<const uint32_t*>(w.data.data());
  [[maybe_unused]] const typename Path::Span span;
  for (int k0 = 0; k0 < pairs; k0 += Path::kPairBlock) {
    const int kc = std::min(Path::kPairBlock, pairs - k0);
    for (int r = 0; r < rows; r += Path::kRows) {
      for (int p = panel0; p < panel0 + panels; ++p) {
        const uint32_t* wp = wdata + (static_cast<int64_t>(p) * w.pairs + pair0 + k0) * kWidth;
        Path::Tile(std::min(Path::kRows, rows - r), xb + r * ldx + k0, ldx, wp, kc,
                   y + r * ldy + static_cast<int64_t>(p - panel0) * kWidth, ldy,
                   std::min(kWidth, w.out - p * kWidth), nullptr, accumulate || k0 > 0);
      }
    }
  }
}

// Rows of x from which the AVX2 path widens W to f32 once per call and runs WidenedTile, whose
// register blocking (6 rows x 16 columns, the widened W read once per 6 rows) beats the 2-row
// micro-kernel once widening W is small beside the T * in * out multiply-adds.
constexpr int kWidenRows = 16;
constexpr int kWidenTileRows = 6;

// Widens panel p of W into wf as a (2 pairs, kWidth) f32 matrix (row i holds element i of the
// panel's columns; the padding of an odd `in`, zero).
SS_AVX2 void WidenPanel(const PackedBf16& w, int p, float* wf) {
  const int in = w.in;
  const __m256i upper = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  const uint32_t* wp =
      reinterpret_cast<const uint32_t*>(w.data.data()) + static_cast<int64_t>(p) * w.pairs * kWidth;
  for (int k = 0; k < w.pairs; ++k) {
    float* lo = wf + static_cast<int64_t>(2 * k) * kWidth;
    float* hi = lo + kWidth;
    for (int q = 0; q < 4; ++q) {
      const __m256i bits =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wp + k * kWidth + 8 * q));
      _mm256_storeu_ps(lo + 8 * q, _mm256_castsi256_ps(_mm256_slli_epi32(bits, 16)));
      _mm256_storeu_ps(hi + 8 * q, 2 * k + 1 < in
                                       ? _mm256_castsi256_ps(_mm256_and_si256(bits, upper))
                                       : _mm256_setzero_ps());
    }
  }
}

// y rows [0, R) x 16 columns (cols <= 16 of them stored) = xr rows (rounded x, ldx apart) · the
// widened W columns at wf (ldw apart per value) over n values (the pairs, padding included), each
// column's sum one FMA chain over the values in order from zero, then + bias: MicroKernelAvx2's
// order.
template <int R>
SS_AVX2 void WidenedTile(const float* xr, int64_t ldx, const float* wf, int64_t ldw, int n,
                         float* y, int64_t ldy, int cols, const float* bias) {
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int i = 0; i < n; ++i) {
    const __m256 w0 = _mm256_loadu_ps(wf + i * ldw), w1 = _mm256_loadu_ps(wf + i * ldw + 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 xb = _mm256_broadcast_ss(xr + r * ldx + i);
      acc[r][0] = _mm256_fmadd_ps(xb, w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(xb, w1, acc[r][1]);
    }
  }
  alignas(32) float b[16] = {}, edge[16];
  if (bias) std::copy(bias, bias + cols, b);
  for (int r = 0; r < R; ++r) {
    _mm256_store_ps(edge, _mm256_add_ps(acc[r][0], _mm256_load_ps(b)));
    _mm256_store_ps(edge + 8, _mm256_add_ps(acc[r][1], _mm256_load_ps(b + 8)));
    std::copy(edge, edge + cols, y + r * ldy);
  }
}

// The AVX2 path for T >= kWidenRows: x rounded to bf16 (kept as f32) once, each panel of W widened
// once (dynamic over the threads), then every 6 rows of x multiplied with it by WidenedTile.
void MatMulWidened(const float* x, const PackedBf16& w, const float* bias, float* y, int T) {
  const int in = w.in, out = w.out, n = 2 * w.pairs;
  float* xr = Workspace<float, 1>(static_cast<size_t>(T) * n);
  using TileFn = void (*)(const float*, int64_t, const float*, int64_t, int, float*, int64_t, int,
                          const float*);
  static constexpr TileFn kTiles[kWidenTileRows + 1] = {
      nullptr,        WidenedTile<1>, WidenedTile<2>, WidenedTile<3>,
      WidenedTile<4>, WidenedTile<5>, WidenedTile<6>};
#pragma omp parallel if (static_cast <int64_t>(T) * in * out >= kParallelMacs)
  {
#pragma omp for schedule(static)
    for (int t = 0; t < T; ++t) {
      float* row = xr + static_cast<int64_t>(t) * n;
      RoundRowBf16(x + static_cast<int64_t>(t) * in, in, row);
      if (in < n) row[in] = 0.0f;
    }
    float* wf = Workspace<float, 2>(static_cast<size_t>(n) * kWidth);
#pragma omp for schedule(dynamic, 1)
    for (int p = 0; p < w.panels; ++p) {
      WidenPanel(w, p, wf);
      for (int r = 0; r < T; r += kWidenTileRows)
        for (int half = 0; half < 2; ++half) {
          const int column0 = p * kWidth + 16 * half, cols = std::min(16, out - column0);
          if (cols <= 0) continue;
          kTiles[std::min(kWidenTileRows, T - r)](xr + static_cast<int64_t>(r) * n, n,
                                                  wf + 16 * half, kWidth, n,
                                                  y + static_cast<int64_t>(r) * out + column0, out,
                                                  cols, bias ? bias + column0 : nullptr);
        }
    }
  }
}

// The avx512_fma path from 2 rows of x on: the AVX2 path's arithmetic (each column one FMA chain
// over the values in order from zero, then + bias: the same bits) with 8 rows x 32 columns of zmm
// accumulators. Each panel of W is widened once per call, kWidenKBlock values at a time (32 KiB,
// which stay in L1 while every 8 rows of x pass over them); a tile's sums wait in y between value
// blocks (stored and reloaded exactly).
constexpr int kWiden512Rows = 8;
constexpr int kWidenKBlock = 256;

// Values [2 k0, 2 k1) of panel p of W widened into wf (32 floats a value; the padding of an odd
// `in`, zero).
SS_AVX512F void WidenPanel512(const PackedBf16& w, int p, int k0, int k1, float* wf) {
  const int in = w.in;
  const __m512i upper = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  const uint32_t* wp =
      reinterpret_cast<const uint32_t*>(w.data.data()) + static_cast<int64_t>(p) * w.pairs * kWidth;
  for (int k = k0; k < k1; ++k) {
    float* lo = wf + static_cast<int64_t>(2 * (k - k0)) * kWidth;
    float* hi = lo + kWidth;
    for (int q = 0; q < 2; ++q) {
      const __m512i bits = _mm512_load_si512(wp + k * kWidth + 16 * q);
      _mm512_store_ps(lo + 16 * q, _mm512_castsi512_ps(_mm512_slli_epi32(bits, 16)));
      _mm512_store_ps(hi + 16 * q, 2 * k + 1 < in
                                       ? _mm512_castsi512_ps(_mm512_and_si512(bits, upper))
                                       : _mm512_setzero_ps());
    }
  }
}

// y rows [0, R) x the panel's columns (masks m0, m1) (+)= xr rows (ldx apart) · the panel's values
// [i0, i1), widened in wf (32 floats a value, from i0): from zero when `first`, else from y;
// + bias when `bias`.
template <int R>
SS_AVX512F void WidenedTile512(const float* xr, int64_t ldx, const float* wf, int i0, int i1,
                               float* y, int64_t ldy, __mmask16 m0, __mmask16 m1, const float* bias,
                               bool first) {
  wf -= static_cast<int64_t>(i0) * kWidth;  // wf holds values [i0, i1)
  __m512 acc[R][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    acc[r][0] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, y + r * ldy);
    acc[r][1] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, y + r * ldy + 16);
  }
  for (int i = i0; i < i1; ++i) {
    const __m512 w0 = _mm512_load_ps(wf + i * kWidth), w1 = _mm512_load_ps(wf + i * kWidth + 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 xb = _mm512_set1_ps(xr[r * ldx + i]);
      acc[r][0] = _mm512_fmadd_ps(xb, w0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(xb, w1, acc[r][1]);
    }
  }
  if (bias) {
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, bias), b1 = _mm512_maskz_loadu_ps(m1, bias + 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      acc[r][0] = _mm512_add_ps(acc[r][0], b0);
      acc[r][1] = _mm512_add_ps(acc[r][1], b1);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(y + r * ldy, m0, acc[r][0]);
    _mm512_mask_storeu_ps(y + r * ldy + 16, m1, acc[r][1]);
  }
}

void MatMulWidened512(const float* x, const PackedBf16& w, const float* bias, float* y, int T) {
  const int in = w.in, out = w.out, n = 2 * w.pairs;
  float* xr = Workspace<float, 1>(static_cast<size_t>(T) * n);
  using TileFn = void (*)(const float*, int64_t, const float*, int, int, float*, int64_t, __mmask16,
                          __mmask16, const float*, bool);
  static constexpr TileFn kTiles[kWiden512Rows + 1] = {
      nullptr,           WidenedTile512<1>, WidenedTile512<2>, WidenedTile512<3>, WidenedTile512<4>,
      WidenedTile512<5>, WidenedTile512<6>, WidenedTile512<7>, WidenedTile512<8>};
#pragma omp parallel if (static_cast <int64_t>(T) * in * out >= kParallelMacs)
  {
#pragma omp for schedule(static)
    for (int t = 0; t < T; ++t) {
      float* row = xr + static_cast<int64_t>(t) * n;
      RoundRowBf16(x + static_cast<int64_t>(t) * in, in, row);
      if (in < n) row[in] = 0.0f;
    }
    float* wf = Workspace<float, 2>(static_cast<size_t>(kWidenKBlock) * kWidth);
#pragma omp for schedule(dynamic, 1)
    for (int p = 0; p < w.panels; ++p) {
      const int cols = std::min(kWidth, out - p * kWidth);
      const __mmask16 m0 = static_cast<__mmask16>(cols >= 16 ? 0xffff : (1u << cols) - 1);
      const __mmask16 m1 = static_cast<__mmask16>(cols >= 32   ? 0xffff
                                                  : cols <= 16 ? 0
                                                               : (1u << (cols - 16)) - 1);
      for (int i0 = 0; i0 < n; i0 += kWidenKBlock) {
        const int i1 = std::min(n, i0 + kWidenKBlock);
        WidenPanel512(w, p, i0 / 2, i1 / 2, wf);
        for (int r = 0; r < T; r += kWiden512Rows)
          kTiles[std::min(kWiden512Rows, T - r)](
              xr + static_cast<int64_t>(r) * n, n, wf, i0, i1,
              y + static_cast<int64_t>(r) * out + p * kWidth, out, m0, m1,
              bias && i1 == n ? bias + p * kWidth : nullptr, i0 == 0);
      }
    }
  }
}

// The same product in plain loops. x is rounded once into f32 rows; each panel of W is widened to
// f32 once (pair k: its kWidth lower halves, then its kWidth upper halves) and then serves every
// row, kPortableRows rows at a time, with kWidth f32 sums per row that the compiler vectorises.
void MatMulPortable(const float* x, const PackedBf16& w, const float* bias, float* y, int T) {
  constexpr int kPortableRows = 4;
  const int in = w.in, out = w.out, pairs = w.pairs;
  const int64_t ldx = 2 * static_cast<int64_t>(pairs);
  float* xr = Workspace<float, 3>(static_cast<size_t>(T) * ldx);
  const bool parallel = static_cast<int64_t>(T) * in * out >= kParallelMacs;
#pragma omp parallel if (parallel)
  {
#pragma omp for schedule(static)
    for (int t = 0; t < T; ++t) {
      float* row = xr + t * ldx;
      RoundRowBf16(x + static_cast<int64_t>(t) * in, in, row);
      if (in < ldx) row[in] = 0.0f;
    }
    std::vector<float> panel_f32(static_cast<size_t>(pairs) * kWidth * 2);
#pragma omp for schedule(dynamic, 1)
    for (int p = 0; p < w.panels; ++p) {
      const uint16_t* wp = w.data.data() + static_cast<size_t>(p) * pairs * kWidth * 2;
      for (int k = 0; k < pairs; ++k)
        for (int j = 0; j < kWidth; ++j)
          for (int h = 0; h < 2; ++h)
            panel_f32[(static_cast<size_t>(k) * 2 + h) * kWidth + j] =
                BF16ToF32(wp[(static_cast<size_t>(k) * kWidth + j) * 2 + h]);
      const int cols = std::min(kWidth, out - p * kWidth);
      for (int t0 = 0; t0 < T; t0 += kPortableRows) {
        const int rows = std::min(kPortableRows, T - t0);
        float acc[kPortableRows][kWidth] = {};
        for (int k = 0; k < pairs; ++k) {
          const float* w0 = panel_f32.data() + static_cast<size_t>(k) * 2 * kWidth;
          const float* w1 = w0 + kWidth;
          for (int r = 0; r < rows; ++r) {
            const float x0 = xr[(t0 + r) * ldx + 2 * k], x1 = xr[(t0 + r) * ldx + 2 * k + 1];
            for (int j = 0; j < kWidth; ++j) acc[r][j] += x0 * w0[j] + x1 * w1[j];
          }
        }
        for (int r = 0; r < rows; ++r) {
          float* yr = y + static_cast<int64_t>(t0 + r) * out + p * kWidth;
          for (int j = 0; j < cols; ++j)
            yr[j] = bias ? acc[r][j] + bias[p * kWidth + j] : acc[r][j];
        }
      }
    }
  }
}

}  // namespace

void AdviseHugePages(void* p, size_t bytes) {
  const uintptr_t huge = uintptr_t{1} << 21;
  const uintptr_t start = (reinterpret_cast<uintptr_t>(p) + huge - 1) / huge * huge;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) / huge * huge;
  if (end > start) madvise(reinterpret_cast<void*>(start), end - start, MADV_HUGEPAGE);
}

bool CpuHasAvx512Bf16() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
  }();
  return has;
}

bool CpuHasAmxBf16() {
  static const bool has = [] {
    if (!CpuHasAvx512Bf16()) return false;  // the AMX path's edges run the AVX-512 kernel
    // CPUID leaf 7, sub-leaf 0, EDX: bit 22 AMX-BF16, bit 24 AMX-TILE.
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if ((d & (1u << 22)) == 0 || (d & (1u << 24)) == 0) return false;
    // Linux (5.16+) grants the 8 KiB tile state per process on request (Documentation/arch/x86/
    // xstate.rst): ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18). Refused on older
    // kernels or where the hypervisor hides it: then the AVX-512 path runs.
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  }();
  return has;
}

namespace {

std::atomic<bool> amx_allowed{[] {
  const char* env = std::getenv("SINKSCOPE_AMX");
  return !(env && std::string_view(env) == "0");
}()};

// SINKSCOPE_VDPBF16PS=1 / 0 chooses the VDPBF16PS or the FMA kernel where both can run; unset,
// the CPU's vendor does (CpuPrefersDpbf16).
Bf16Dot InitialBf16Dot() {
  const char* env = std::getenv("SINKSCOPE_VDPBF16PS");
  if (env && std::string_view(env) == "1") return Bf16Dot::kVdpbf16ps;
  if (env && std::string_view(env) == "0") return Bf16Dot::kFma;
  return Bf16Dot::kAuto;
}
std::atomic<Bf16Dot> bf16_dot{InitialBf16Dot()};

// Whether VDPBF16PS outruns FMA on widened operands on this CPU. Zen 4 issues it at twice the
// f32 FMA's multiply-adds; the Intel cores measured here at half (bench_gemm's peak loops, one
// Xeon core: 81-85 against 155-171 GFLOP per second of CPU time), so there the FMA kernel is twice
// as fast. Decided by the vendor, so that one machine always takes the same path (and gives the
// same bits).
bool CpuPrefersDpbf16() {
  static const bool amd = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    return b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163;  // "AuthenticAMD"
  }();
  return amd;
}

enum class Bf16Path { kPortable, kAvx2, kAvx512Fma, kAvx512, kAmx };

Bf16Path ActiveBf16Path() {
  if (ActiveSimdLevel() == SimdLevel::kAvx512) {
    if (CpuHasAvx512Bf16()) {
      if (amx_allowed.load(std::memory_order_relaxed) && CpuHasAmxBf16()) return Bf16Path::kAmx;
      const Bf16Dot dot = bf16_dot.load(std::memory_order_relaxed);
      if (dot == Bf16Dot::kVdpbf16ps || (dot == Bf16Dot::kAuto && CpuPrefersDpbf16()))
        return Bf16Path::kAvx512;
    }
    return Bf16Path::kAvx512Fma;
  }
  if (Avx2FmaActive()) return Bf16Path::kAvx2;
  return Bf16Path::kPortable;
}

}  // namespace

void AllowAmx(bool allow) { amx_allowed.store(allow, std::memory_order_relaxed); }

void ChooseBf16Dot(Bf16Dot dot) { bf16_dot.store(dot, std::memory_order_relaxed); }

bool Bf16KernelActive() { return ActiveBf16Path() != Bf16Path::kPortable; }

const char* Bf16KernelName() {
  switch (ActiveBf16Path()) {
    case Bf16Path::kAmx:
      return "amx_bf16";
    case Bf16Path::kAvx512:
      return "avx512_bf16";
    case Bf16Path::kAvx512Fma:
      return "avx512_fma";
    case Bf16Path::kAvx2:
      return "avx2";
    case Bf16Path::kPortable:
      break;
  }
  return "portable";
}

PackedBf16 PackBf16(const float* w, int out, int in) {
  PackedBf16 p;
  PackBf16Rows(w, out, in, in, &p);
  return p;
}

PackedBf16 PackBf16Bits(const uint16_t* w, int out, int in) {
  PackedBf16 p;
  PackInto(p, out, in, [w, in](int row, int i) { return w[static_cast<int64_t>(row) * in + i]; });
  return p;
}

void PackBf16Rows(const float* w, int out, int in, int64_t ld, PackedBf16* p) {
  PackInto(*p, out, in, [w, ld](int row, int i) { return F32ToBF16(w[row * ld + i]); });
}

void PackBf16Columns(const float* a, int out, int in, int64_t ld, PackedBf16* p) {
  PackInto(*p, out, in, [a, ld](int row, int i) { return F32ToBF16(a[i * ld + row]); });
}

void ConvertBf16Rows(const float* x, int rows, int in, int64_t ld_in, uint32_t* xb, int64_t ldx) {
  SS_ASSERT(2 * ldx >= in);
  const Bf16Path path = ActiveBf16Path();
  const bool avx512 = path == Bf16Path::kAvx512 || path == Bf16Path::kAmx;  // VCVTNE2PS2BF16
  for (int r = 0; r < rows; ++r) {
    if (avx512)
      ConvertRow512(x + r * ld_in, in, xb + r * ldx, static_cast<int>(ldx));
    else
      ConvertRowScalar(x + r * ld_in, in, xb + r * ldx, static_cast<int>(ldx));
  }
}

void MatMulBf16Block(const uint32_t* xb, int64_t ldx, const PackedBf16& w, int panel0, int panels,
                     int pair0, int pairs, float* y, int64_t ldy, int rows, bool accumulate) {
  SS_ASSERT(panel0 >= 0 && panel0 + panels <= w.panels && pair0 >= 0 && pair0 + pairs <= w.pairs);
  if (rows <= 0 || panels <= 0) return;
  switch (ActiveBf16Path()) {
    case Bf16Path::kAmx:
      if (rows >= 16) {  // fewer rows (a decode step's attention) fill no tile
        BlockProductTiled<AmxPath>(xb, ldx, w, panel0, panels, pair0, pairs, y, ldy, rows,
                                   accumulate);
        return;
      }
      [[fallthrough]];
    case Bf16Path::kAvx512:
      BlockProductTiled<Avx512Path>(xb, ldx, w, panel0, panels, pair0, pairs, y, ldy, rows,
                                    accumulate);
      return;
    case Bf16Path::kAvx512Fma:  // the AVX2 tiles' arithmetic, as this path's products
    case Bf16Path::kAvx2:
      BlockProductTiled<Avx2Path>(xb, ldx, w, panel0, panels, pair0, pairs, y, ldy, rows,
                                  accumulate);
      return;
    case Bf16Path::kPortable:
      break;
  }
  // Portable: each product of two bf16 values is exact in f32, as in VDPBF16PS.
  for (int r = 0; r < rows; ++r) {
    const uint32_t* xr = xb + r * ldx;
    for (int p = panel0; p < panel0 + panels; ++p) {
      const int cols = std::min(kWidth, w.out - p * kWidth);
      const uint16_t* wp = w.data.data() + (static_cast<int64_t>(p) * w.pairs + pair0) * kWidth * 2;
      float* yr = y + r * ldy + static_cast<int64_t>(p - panel0) * kWidth;
      for (int j = 0; j < cols; ++j) {
        float acc = accumulate ? yr[j] : 0.0f;
        for (int k = 0; k < pairs; ++k) {
          const float x0 = BF16ToF32(static_cast<uint16_t>(xr[k] & 0xffff));
          const float x1 = BF16ToF32(static_cast<uint16_t>(xr[k] >> 16));
          acc += x0 * BF16ToF32(wp[(static_cast<int64_t>(k) * kWidth + j) * 2]) +
                 x1 * BF16ToF32(wp[(static_cast<int64_t>(k) * kWidth + j) * 2 + 1]);
        }
        yr[j] = acc;
      }
    }
  }
}

void MatMulBf16(const float* x, const PackedBf16& w, const float* bias, float* y, int T) {
  SS_ASSERT(T >= 0 && w.out >= 1 && w.in >= 1);
  if (T == 0) return;
  const Bf16Path path = ActiveBf16Path();
  switch (path) {
    case Bf16Path::kAmx:
    case Bf16Path::kAvx512:
      // An AMX tile has 16 rows: fewer run the AVX-512 kernels.
      if (T == 1)
        MatVec<DotKind::kDpbf16>(x, w, bias, y);
      else if (path == Bf16Path::kAmx && T >= 16)
        MatMulTiled<AmxPath>(x, w, bias, y, T);
      else
        MatMulTiled<Avx512Path>(x, w, bias, y, T);
      return;
    case Bf16Path::kAvx512Fma:
      if (T == 1)
        MatVec<DotKind::kFmaZmm>(x, w, bias, y);
      else
        MatMulWidened512(x, w, bias, y, T);
      return;
    case Bf16Path::kAvx2:
      if (T == 1)
        MatVec<DotKind::kFmaYmm>(x, w, bias, y);
      else if (T >= kWidenRows)
        MatMulWidened(x, w, bias, y, T);
      else
        MatMulTiled<Avx2Path>(x, w, bias, y, T);
      return;
    case Bf16Path::kPortable:
      MatMulPortable(x, w, bias, y, T);
      return;
  }
}

}  // namespace ss
