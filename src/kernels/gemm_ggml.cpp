#include "kernels/gemm_ggml.h"

#include <cblas.h>
#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "common/error.h"
#include "kernels/dequant.h"
#include "kernels/simd.h"
#include "kernels/vecmath.h"
#include "kernels/workspace.h"
#include "tensor/half.h"

namespace ss {

namespace {

#define SS_AVX2 __attribute__((target("avx2,fma,f16c")))
#define SS_AVX2_NOFMA __attribute__((target("avx2,f16c")))  // helpers both kinds of kernel inline

constexpr int kWidenBlock = 128;      // rows of W dequantised at a time for sgemm
constexpr int kPrefetchBytes = 1024;  // how far ahead of the block in use the fused kernels ask for W
// Multiply-adds from which the products use every thread (as the f32, bf16 and Q8_0 kernels).
constexpr int64_t kParallelMatVec = int64_t{1} << 16;
constexpr int64_t kParallelMacs = int64_t{1} << 22;

uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// ---- AVX2 + FMA (+ F16C) row dots: sum_i dequant(w)[i] * x[i] over one row of `in` values.

SS_AVX2 inline float HalfToFloat(const uint8_t* p) { return _cvtsh_ss(LoadU16(p)); }

SS_AVX2 inline void PrefetchAhead(const uint8_t* p, int bytes) {
  for (int o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes + o, _MM_HINT_T0);
}

// 16 signed (unsigned) bytes, widened to f32, times x[0 .. 16): two 8-lane products summed. The
// bytes come from memory (one VPMOVSXBD with a memory operand per 8 values: Q8_0's stored bytes,
// Q6_K's values assembled in L1) or from a register (Q4's nibbles, split there). Each type uses the
// form that measured faster for it (a 11008 x 4096 product, one thread, alternating builds:
// memory 9.3-9.8 / 6.7-6.8 Gvalues/s against register 8.6 / 5.5-5.8 for Q8_0 / Q6_K, register
// 8.4-9.1 / 6.6-7.0 against memory 7.0-7.7 / 5.7-6.1 for Q4_0 / Q4_K).
SS_AVX2 inline __m256 DotI8x16(const void* p, const float* x) {
  const char* q = static_cast<const char*>(p);
  const __m256 a = _mm256_mul_ps(
      _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)))),
      _mm256_loadu_ps(x));
  return _mm256_fmadd_ps(
      _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8)))),
      _mm256_loadu_ps(x + 8), a);
}
SS_AVX2 inline __m256 DotI8x16(__m128i v, const float* x) {
  const __m256 a = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), _mm256_loadu_ps(x));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8))),
                         _mm256_loadu_ps(x + 8), a);
}
SS_AVX2 inline __m256 DotU8x16(__m128i v, const float* x) {
  const __m256 a = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)), _mm256_loadu_ps(x));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8))),
                         _mm256_loadu_ps(x + 8), a);
}

SS_AVX2 float DotF16Avx2(const uint8_t* w, const uint8_t*, const float* x, const float*, int in) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= in; i += 16) {
    PrefetchAhead(w + 2 * i, 32);
    const __m128i* p = reinterpret_cast<const __m128i*>(w + 2 * i);
    s0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(p)), _mm256_loadu_ps(x + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(p + 1)), _mm256_loadu_ps(x + i + 8), s1);
  }
  float total = HorizontalSum(_mm256_add_ps(s0, s1));
  for (; i < in; ++i) total += HalfToFloat(w + 2 * i) * x[i];
  return total;
}

SS_AVX2 inline __m256 Bf16x8(const uint8_t* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

SS_AVX2 float DotBf16Avx2(const uint8_t* w, const uint8_t*, const float* x, const float*, int in) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= in; i += 16) {
    PrefetchAhead(w + 2 * i, 32);
    s0 = _mm256_fmadd_ps(Bf16x8(w + 2 * i), _mm256_loadu_ps(x + i), s0);
    s1 = _mm256_fmadd_ps(Bf16x8(w + 2 * i + 16), _mm256_loadu_ps(x + i + 8), s1);
  }
  float total = HorizontalSum(_mm256_add_ps(s0, s1));
  for (; i < in; ++i) total += BF16ToF32(LoadU16(w + 2 * i)) * x[i];
  return total;
}

// Q8_0: 34-byte blocks, f16 d | int8 q[32].
SS_AVX2 float DotQ8_0Avx2(const uint8_t* w, const uint8_t*, const float* x, const float*, int in) {
  __m256 total = _mm256_setzero_ps();
  for (int b = 0; b < in / 32; ++b, w += 34, x += 32) {
    PrefetchAhead(w, 64);
    const __m256 s = _mm256_add_ps(DotI8x16(w + 2, x), DotI8x16(w + 18, x + 16));
    total = _mm256_fmadd_ps(s, _mm256_set1_ps(HalfToFloat(w)), total);
  }
  return HorizontalSum(total);
}

// Q4_0: 18-byte blocks, f16 d | 16 bytes: values 0-15 in the low nibbles, 16-31 in the high ones,
// each nibble - 8.
SS_AVX2 float DotQ4_0Avx2(const uint8_t* w, const uint8_t*, const float* x, const float*, int in) {
  const __m128i mask = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  __m256 total = _mm256_setzero_ps();
  for (int b = 0; b < in / 32; ++b, w += 18, x += 32) {
    PrefetchAhead(w, 64);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, mask), eight);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), mask), eight);
    const __m256 s = _mm256_add_ps(DotI8x16(lo, x), DotI8x16(hi, x + 16));
    total = _mm256_fmadd_ps(s, _mm256_set1_ps(HalfToFloat(w)), total);
  }
  return HorizontalSum(total);
}

// MXFP4 (kernels/dequant.h). The E2M1 codes are looked up as ggml's doubled int8 values (2 x:
// 0, 1, 2, 3, 4, 6, 8, 12 and negated; exact integers), so that a block's products with x form
// the same FMA chains as Q4_0's, and the block's sum is multiplied by half its E8M0 scale,
// 2^(e - 128) (kE8M0Half). Both halvings are exact, so this is x times the decoded values up to
// the order of the sums (a -0 code adds as +0: the same sum).
struct E8M0HalfTable {
  float v[256];
  E8M0HalfTable() {
    for (int e = 0; e < 256; ++e) v[e] = E8M0ToFloat(static_cast<uint8_t>(e)) * 0.5f;  // 0xFF: NaN
  }
};
const E8M0HalfTable kE8M0Half;

SS_AVX2 inline __m128i Mxfp4DoubledTable() {
  return _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
}

// The 16 bytes at q as the doubled int8 values of their low and high nibbles.
SS_AVX2 inline void Mxfp4Codes(__m128i q, __m128i* lo, __m128i* hi) {
  const __m128i table = Mxfp4DoubledTable(), mask = _mm_set1_epi8(0x0F);
  *lo = _mm_shuffle_epi8(table, _mm_and_si128(q, mask));
  *hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(q, 4), mask));
}

// ggml's block_mxfp4: 17-byte blocks, e | 16 bytes: values 0-15 in the low nibbles, 16-31 in the
// high ones.
SS_AVX2 float DotMxfp4Avx2(const uint8_t* w, const uint8_t*, const float* x, const float*, int in) {
  __m256 total = _mm256_setzero_ps();
  for (int b = 0; b < in / 32; ++b, w += 17, x += 32) {
    PrefetchAhead(w, 64);
    __m128i lo, hi;
    Mxfp4Codes(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 1)), &lo, &hi);
    const __m256 s = _mm256_add_ps(DotI8x16(lo, x), DotI8x16(hi, x + 16));
    total = _mm256_fmadd_ps(s, _mm256_set1_ps(kE8M0Half.v[w[0]]), total);
  }
  return HorizontalSum(total);
}

// The split form: 16 bytes of nibbles per block, value 2j in byte j's low nibble and 2j + 1 in
// its high one (interleaved back into order by one unpack each half), the scales apart.
SS_AVX2 float DotMxfp4SplitAvx2(const uint8_t* w, const uint8_t* scales, const float* x, const float*, int in) {
  __m256 total = _mm256_setzero_ps();
  for (int b = 0; b < in / 32; ++b, w += 16, x += 32) {
    PrefetchAhead(w, 64);
    __m128i lo, hi;
    Mxfp4Codes(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)), &lo, &hi);
    const __m256 s = _mm256_add_ps(DotI8x16(_mm_unpacklo_epi8(lo, hi), x),
                                   DotI8x16(_mm_unpackhi_epi8(lo, hi), x + 16));
    total = _mm256_fmadd_ps(s, _mm256_set1_ps(kE8M0Half.v[scales[b]]), total);
  }
  return HorizontalSum(total);
}

// Group g (values 64g .. 64g + 63) of the Q4_K super-block at w (scales d, dmin): its two
// 32-value sub-blocks' nibbles (0..15, one byte each) and scales d * sc; their offsets, dmin * m
// times the sub-blocks' sums of x (xsum[2g], xsum[2g + 1]), are added to *offset.
struct Q4KGroup {
  __m256i lo, hi;
  float scale_lo, scale_hi;
};
SS_AVX2 inline Q4KGroup Q4KGroupAt(const uint8_t* w, int g, float d, float dmin, const float* xsum,
                                   float* offset) {
  const __m256i mask = _mm256_set1_epi8(0x0F);
  int sc_lo, m_lo, sc_hi, m_hi;
  Q4KScaleMin(2 * g, w + 4, &sc_lo, &m_lo);
  Q4KScaleMin(2 * g + 1, w + 4, &sc_hi, &m_hi);
  *offset += dmin * static_cast<float>(m_lo) * xsum[2 * g] + dmin * static_cast<float>(m_hi) * xsum[2 * g + 1];
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 + 32 * g));
  return {_mm256_and_si256(q, mask), _mm256_and_si256(_mm256_srli_epi16(q, 4), mask),
          d * static_cast<float>(sc_lo), d * static_cast<float>(sc_hi)};
}

// Q4_K: 144-byte super-blocks of 256 values (kernels/dequant.h). Value = d * sc_j * q - dmin * m_j:
// the q part is an FMA chain per sub-block; the offsets are dmin * m_j times xsum[j], the sum of
// the sub-block's 32 values of x.
SS_AVX2 float DotQ4_KAvx2(const uint8_t* w, const uint8_t*, const float* x, const float* xsum, int in) {
  __m256 total = _mm256_setzero_ps();
  float offset = 0.0f;
  for (int b = 0; b < in / 256; ++b, w += 144, x += 256, xsum += 8) {
    PrefetchAhead(w, 192);
    const float d = HalfToFloat(w), dmin = HalfToFloat(w + 2);
    for (int g = 0; g < 4; ++g) {
      const Q4KGroup q = Q4KGroupAt(w, g, d, dmin, xsum, &offset);
      const float* xg = x + 64 * g;
      const __m256 s_lo = _mm256_add_ps(DotU8x16(_mm256_castsi256_si128(q.lo), xg),
                                        DotU8x16(_mm256_extracti128_si256(q.lo, 1), xg + 16));
      const __m256 s_hi = _mm256_add_ps(DotU8x16(_mm256_castsi256_si128(q.hi), xg + 32),
                                        DotU8x16(_mm256_extracti128_si256(q.hi, 1), xg + 48));
      total = _mm256_fmadd_ps(s_lo, _mm256_set1_ps(q.scale_lo), total);
      total = _mm256_fmadd_ps(s_hi, _mm256_set1_ps(q.scale_hi), total);
    }
  }
  return HorizontalSum(total) - offset;
}

// Bits kShift, kShift + 1 of each byte of qh, moved to bits 4 and 5 (Q6_K's high bits).
template <int kShift>
SS_AVX2_NOFMA inline __m256i HighBitsQ6(__m256i qh, __m256i m2) {
  return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, kShift), m2), 4);
}

// Half h (values 128h .. 128h + 127) of a Q6_K super-block as four vectors of 32 int8 values, each
// its six bits (low 4 from ql, high 2 from qh) - 32, in order.
SS_AVX2_NOFMA inline void Q6KHalf(const uint8_t* w, int h, __m256i q[4]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3), k32 = _mm256_set1_epi8(32);
  const uint8_t* ql = w + 64 * h;
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
  const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
  const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 128 + 32 * h));
  q[0] = _mm256_or_si256(_mm256_and_si256(a, m4), HighBitsQ6<0>(hb, m2));
  q[1] = _mm256_or_si256(_mm256_and_si256(c, m4), HighBitsQ6<2>(hb, m2));
  q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), HighBitsQ6<4>(hb, m2));
  q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), m4), HighBitsQ6<6>(hb, m2));
  for (int k = 0; k < 4; ++k) q[k] = _mm256_sub_epi8(q[k], k32);
}

// Q6_K: 210-byte super-blocks of 256 values (kernels/dequant.h): per half h, four vectors of 32
// six-bit values (Q6KHalf) in 16-value sub-blocks with an int8 scale.
SS_AVX2 float DotQ6_KAvx2(const uint8_t* w, const uint8_t*, const float* x, const float*, int in) {
  __m256 total = _mm256_setzero_ps();
  for (int b = 0; b < in / 256; ++b, w += 210, x += 256) {
    PrefetchAhead(w, 256);
    const float d = HalfToFloat(w + 208);
    const int8_t* sc = reinterpret_cast<const int8_t*>(w + 192);
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      Q6KHalf(w, h, q);
      const int8_t* sh = sc + 8 * h;
      const float* xh = x + 128 * h;
      alignas(32) int8_t v[128];
      for (int k = 0; k < 4; ++k) _mm256_store_si256(reinterpret_cast<__m256i*>(v + 32 * k), q[k]);
      for (int k = 0; k < 4; ++k) {
        const __m256 first = DotI8x16(v + 32 * k, xh + 32 * k);
        const __m256 second = DotI8x16(v + 32 * k + 16, xh + 32 * k + 16);
        total = _mm256_fmadd_ps(first, _mm256_set1_ps(d * static_cast<float>(sh[2 * k])), total);
        total = _mm256_fmadd_ps(second, _mm256_set1_ps(d * static_cast<float>(sh[2 * k + 1])), total);
      }
    }
  }
  return HorizontalSum(total);
}

// Sums of each 32 values of x (Q4_K's offsets), n a multiple of 32.
SS_AVX2 void BlockSums32Avx2(const float* x, int n, float* sums) {
  for (int b = 0; b < n / 32; ++b, x += 32) {
    const __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8)),
                                   _mm256_add_ps(_mm256_loadu_ps(x + 16), _mm256_loadu_ps(x + 24)));
    sums[b] = HorizontalSum(s);
  }
}

// sum_i dequant(w)[i] x[i] over a row of `in` values: w the row's bytes, `scales` its scales where
// they lie apart (the split MXFP4), xsum Q4_K's sums of x.
using RowDot = float (*)(const uint8_t* w, const uint8_t* scales, const float* x, const float* xsum, int in);

RowDot Avx2RowDot(uint32_t type) {
  switch (type) {
    case kGgmlTypeF16: return DotF16Avx2;
    case kGgmlTypeBF16: return DotBf16Avx2;
    case kGgmlTypeQ8_0: return DotQ8_0Avx2;
    case kGgmlTypeQ4_0: return DotQ4_0Avx2;
    case kGgmlTypeQ4_K: return DotQ4_KAvx2;
    case kGgmlTypeQ6_K: return DotQ6_KAvx2;
    case kGgmlTypeMXFP4: return DotMxfp4Avx2;
    case kTypeMxfp4Split: return DotMxfp4SplitAvx2;
    default: return nullptr;
  }
}

bool Avx2Active() {
  // F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c".
  static const bool f16c = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
  }();
  return f16c && Avx2FmaActive();
}

// ---- AVX-512 row dots: the same blocks, 16 lanes at a time (one zmm per 16 values, where AVX2
// takes two ymm and a sum), the block sums scaled and accumulated in one zmm. Chosen where the
// active SIMD level is AVX-512 (kernels/vecmath.h); the nibble and six-bit unpacking is the AVX2
// code's (128- and 256-bit integer operations).
#define SS_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

SS_AVX512 inline __m512 I8x16(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)); }
SS_AVX512 inline __m512 U8x16(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v)); }
SS_AVX512 inline __m128i Load128(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// 16 halves at p widened to f32: F16 by VCVTPH2PS, BF16 (the upper half of an f32) by a shift.
SS_AVX512 inline __m512 F16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
SS_AVX512 inline __m512 Bf16x16(const uint8_t* p) {
  const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

// F16 or BF16 rows: two FMA chains of 16 lanes, the tail one value at a time.
template <bool kBf16>
SS_AVX512 float DotHalvesAvx512(const uint8_t* w, const uint8_t*, const float* x, const float*, int in) {
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int i = 0;
  for (; i + 32 <= in; i += 32) {
    PrefetchAhead(w + 2 * i, 64);
    s0 = _mm512_fmadd_ps(kBf16 ? Bf16x16(w + 2 * i) : F16x16(w + 2 * i), _mm512_loadu_ps(x + i), s0);
    s1 = _mm512_fmadd_ps(kBf16 ? Bf16x16(w + 2 * i + 32) : F16x16(w + 2 * i + 32),
                         _mm512_loadu_ps(x + i + 16), s1);
  }
  float total = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
  for (; i < in; ++i) total += (kBf16 ? BF16ToF32(LoadU16(w + 2 * i)) : HalfToFloat(w + 2 * i)) * x[i];
  return total;
}

// A 32-value block's sum of q * x: lo holds values 0-15, hi values 16-31.
SS_AVX512 inline __m512 DotI8x32(__m128i lo, __m128i hi, const float* x) {
  return _mm512_fmadd_ps(I8x16(hi), _mm512_loadu_ps(x + 16),
                         _mm512_mul_ps(I8x16(lo), _mm512_loadu_ps(x)));
}

SS_AVX512 float DotQ8_0Avx512(const uint8_t* w, const uint8_t*, const float* x, const float*, int in) {
  __m512 total = _mm512_setzero_ps();
  for (int b = 0; b < in / 32; ++b, w += 34, x += 32) {
    PrefetchAhead(w, 64);
    total = _mm512_fmadd_ps(DotI8x32(Load128(w + 2), Load128(w + 18), x),
                            _mm512_set1_ps(HalfToFloat(w)), total);
  }
  return _mm512_reduce_add_ps(total);
}

SS_AVX512 float DotQ4_0Avx512(const uint8_t* w, const uint8_t*, const float* x, const float*, int in) {
  const __m128i mask = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  __m512 total = _mm512_setzero_ps();
  for (int b = 0; b < in / 32; ++b, w += 18, x += 32) {
    PrefetchAhead(w, 64);
    const __m128i q = Load128(w + 2);
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, mask), eight);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), mask), eight);
    total = _mm512_fmadd_ps(DotI8x32(lo, hi, x), _mm512_set1_ps(HalfToFloat(w)), total);
  }
  return _mm512_reduce_add_ps(total);
}

SS_AVX512 float DotMxfp4Avx512(const uint8_t* w, const uint8_t*, const float* x, const float*, int in) {
  __m512 total = _mm512_setzero_ps();
  for (int b = 0; b < in / 32; ++b, w += 17, x += 32) {
    PrefetchAhead(w, 64);
    __m128i lo, hi;
    Mxfp4Codes(Load128(w + 1), &lo, &hi);
    total = _mm512_fmadd_ps(DotI8x32(lo, hi, x), _mm512_set1_ps(kE8M0Half.v[w[0]]), total);
  }
  return _mm512_reduce_add_ps(total);
}

SS_AVX512 float DotMxfp4SplitAvx512(const uint8_t* w, const uint8_t* scales, const float* x, const float*,
                                    int in) {
  __m512 total = _mm512_setzero_ps();
  for (int b = 0; b < in / 32; ++b, w += 16, x += 32) {
    PrefetchAhead(w, 64);
    __m128i lo, hi;
    Mxfp4Codes(Load128(w), &lo, &hi);
    total = _mm512_fmadd_ps(DotI8x32(_mm_unpacklo_epi8(lo, hi), _mm_unpackhi_epi8(lo, hi), x),
                            _mm512_set1_ps(kE8M0Half.v[scales[b]]), total);
  }
  return _mm512_reduce_add_ps(total);
}

// Q4_K as DotQ4_KAvx2: an FMA chain on the unsigned nibbles, the offsets from xsum.
SS_AVX512 float DotQ4_KAvx512(const uint8_t* w, const uint8_t*, const float* x, const float* xsum, int in) {
  __m512 total = _mm512_setzero_ps();
  float offset = 0.0f;
  for (int b = 0; b < in / 256; ++b, w += 144, x += 256, xsum += 8) {
    PrefetchAhead(w, 192);
    const float d = HalfToFloat(w), dmin = HalfToFloat(w + 2);
    for (int g = 0; g < 4; ++g) {
      const Q4KGroup q = Q4KGroupAt(w, g, d, dmin, xsum, &offset);
      const float* xg = x + 64 * g;
      const __m512 s_lo = _mm512_fmadd_ps(
          U8x16(_mm256_extracti128_si256(q.lo, 1)), _mm512_loadu_ps(xg + 16),
          _mm512_mul_ps(U8x16(_mm256_castsi256_si128(q.lo)), _mm512_loadu_ps(xg)));
      const __m512 s_hi = _mm512_fmadd_ps(
          U8x16(_mm256_extracti128_si256(q.hi, 1)), _mm512_loadu_ps(xg + 48),
          _mm512_mul_ps(U8x16(_mm256_castsi256_si128(q.hi)), _mm512_loadu_ps(xg + 32)));
      total = _mm512_fmadd_ps(s_lo, _mm512_set1_ps(q.scale_lo), total);
      total = _mm512_fmadd_ps(s_hi, _mm512_set1_ps(q.scale_hi), total);
    }
  }
  return _mm512_reduce_add_ps(total) - offset;
}

// Q6_K: each 16-value sub-block is one zmm of products, scaled by d times its int8 scale.
SS_AVX512 float DotQ6_KAvx512(const uint8_t* w, const uint8_t*, const float* x, const float*, int in) {
  __m512 total = _mm512_setzero_ps();
  for (int b = 0; b < in / 256; ++b, w += 210, x += 256) {
    PrefetchAhead(w, 256);
    const float d = HalfToFloat(w + 208);
    const int8_t* sc = reinterpret_cast<const int8_t*>(w + 192);
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      Q6KHalf(w, h, q);
      const int8_t* sh = sc + 8 * h;
      const float* xh = x + 128 * h;
      for (int k = 0; k < 4; ++k) {
        const __m512 first = _mm512_mul_ps(I8x16(_mm256_castsi256_si128(q[k])), _mm512_loadu_ps(xh + 32 * k));
        const __m512 second =
            _mm512_mul_ps(I8x16(_mm256_extracti128_si256(q[k], 1)), _mm512_loadu_ps(xh + 32 * k + 16));
        total = _mm512_fmadd_ps(first, _mm512_set1_ps(d * static_cast<float>(sh[2 * k])), total);
        total = _mm512_fmadd_ps(second, _mm512_set1_ps(d * static_cast<float>(sh[2 * k + 1])), total);
      }
    }
  }
  return _mm512_reduce_add_ps(total);
}

RowDot Avx512RowDot(uint32_t type) {
  switch (type) {
    case kGgmlTypeF16: return DotHalvesAvx512<false>;
    case kGgmlTypeBF16: return DotHalvesAvx512<true>;
    case kGgmlTypeQ8_0: return DotQ8_0Avx512;
    case kGgmlTypeQ4_0: return DotQ4_0Avx512;
    case kGgmlTypeQ4_K: return DotQ4_KAvx512;
    case kGgmlTypeQ6_K: return DotQ6_KAvx512;
    case kGgmlTypeMXFP4: return DotMxfp4Avx512;
    case kTypeMxfp4Split: return DotMxfp4SplitAvx512;
    default: return nullptr;
  }
}

// The fused product's row dot for `type` at the active SIMD level, or nullptr (portable).
RowDot VectorRowDot(uint32_t type) {
  if (!Avx2Active()) return nullptr;
  return ActiveSimdLevel() == SimdLevel::kAvx512 ? Avx512RowDot(type) : Avx2RowDot(type);
}

// ---- AVX2 (+ F16C) dequantisers: a row of W into f32 for the widened (sgemm) path, the
// embedding lookup and ProjectionF32. No FMA in their target (SS_AVX2_NOFMA), so that no multiply
// and subtract is fused: each value is rounded exactly as kernels/dequant.cpp's scalar loops round
// it, bit for bit (tests/test_gemm_ggml.cpp compares them).

SS_AVX2_NOFMA inline __m256 WidenI8(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }

// 16 int8 values times d into dst[0 .. 16).
SS_AVX2_NOFMA inline void StoreScaledI8x16(__m128i q, __m256 d, float* dst) {
  _mm256_storeu_ps(dst, _mm256_mul_ps(d, WidenI8(q)));
  _mm256_storeu_ps(dst + 8, _mm256_mul_ps(d, WidenI8(_mm_srli_si128(q, 8))));
}

SS_AVX2_NOFMA void DequantF16Avx2(const uint8_t* w, const uint8_t*, float* dst, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * i))));
  for (; i < n; ++i) dst[i] = F16ToF32(LoadU16(w + 2 * i));
}

SS_AVX2_NOFMA void DequantBf16Avx2(const uint8_t* w, const uint8_t*, float* dst, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * i)));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
  }
  for (; i < n; ++i) dst[i] = BF16ToF32(LoadU16(w + 2 * i));
}

SS_AVX2_NOFMA void DequantQ8_0Avx2(const uint8_t* w, const uint8_t*, float* dst, int n) {
  for (int b = 0; b < n / 32; ++b, w += 34, dst += 32) {
    const __m256 d = _mm256_set1_ps(F16ToF32(LoadU16(w)));
    StoreScaledI8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2)), d, dst);
    StoreScaledI8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 18)), d, dst + 16);
  }
}

SS_AVX2_NOFMA void DequantQ4_0Avx2(const uint8_t* w, const uint8_t*, float* dst, int n) {
  const __m128i mask = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  for (int b = 0; b < n / 32; ++b, w += 18, dst += 32) {
    const __m256 d = _mm256_set1_ps(F16ToF32(LoadU16(w)));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2));
    StoreScaledI8x16(_mm_sub_epi8(_mm_and_si128(q, mask), eight), d, dst);
    StoreScaledI8x16(_mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), mask), eight), d, dst + 16);
  }
}

// 32 values q (0..15) of a Q4_K sub-block: scale * q - min into dst[0 .. 32).
SS_AVX2_NOFMA inline void StoreQ4KSub(__m256i q, float scale, float min, float* dst) {
  const __m256 s = _mm256_set1_ps(scale), m = _mm256_set1_ps(min);
  const __m128i halves[2] = {_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)};
  for (int k = 0; k < 4; ++k) {  // bytes 8k .. 8k + 7
    const __m128i part = k % 2 ? _mm_srli_si128(halves[k / 2], 8) : halves[k / 2];
    const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(part));
    _mm256_storeu_ps(dst + 8 * k, _mm256_sub_ps(_mm256_mul_ps(s, v), m));
  }
}

SS_AVX2_NOFMA void DequantQ4_KAvx2(const uint8_t* w, const uint8_t*, float* dst, int n) {
  const __m256i mask = _mm256_set1_epi8(0x0F);
  for (int b = 0; b < n / 256; ++b, w += 144, dst += 256) {
    const float d = F16ToF32(LoadU16(w)), dmin = F16ToF32(LoadU16(w + 2));
    for (int g = 0; g < 4; ++g) {
      int sc_lo, m_lo, sc_hi, m_hi;
      Q4KScaleMin(2 * g, w + 4, &sc_lo, &m_lo);
      Q4KScaleMin(2 * g + 1, w + 4, &sc_hi, &m_hi);
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 + 32 * g));
      StoreQ4KSub(_mm256_and_si256(q, mask), d * static_cast<float>(sc_lo), dmin * static_cast<float>(m_lo), dst + 64 * g);
      StoreQ4KSub(_mm256_and_si256(_mm256_srli_epi16(q, 4), mask), d * static_cast<float>(sc_hi),
                  dmin * static_cast<float>(m_hi), dst + 64 * g + 32);
    }
  }
}

// Q6_K: the 32 six-bit values of q (already - 32, int8) times their 16-value sub-blocks' int8
// scales sc0, sc1 (the integer products, as the scalar loop forms them), then times d.
SS_AVX2_NOFMA inline void StoreQ6KPart(__m256i q, int sc0, int sc1, __m256 d, float* dst) {
  const __m256i lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q));       // values 0..15
  const __m256i hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1));  // values 16..31
  const __m256i p0 = _mm256_mullo_epi16(lo, _mm256_set1_epi16(static_cast<int16_t>(sc0)));
  const __m256i p1 = _mm256_mullo_epi16(hi, _mm256_set1_epi16(static_cast<int16_t>(sc1)));
  for (int k = 0; k < 4; ++k) {
    const __m256i p = k < 2 ? p0 : p1;
    const __m128i half = k % 2 ? _mm256_extracti128_si256(p, 1) : _mm256_castsi256_si128(p);
    _mm256_storeu_ps(dst + 8 * k, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(half))));
  }
}

SS_AVX2_NOFMA void DequantQ6_KAvx2(const uint8_t* w, const uint8_t*, float* dst, int n) {
  for (int b = 0; b < n / 256; ++b, w += 210, dst += 256) {
    const __m256 d = _mm256_set1_ps(F16ToF32(LoadU16(w + 208)));
    const int8_t* sc = reinterpret_cast<const int8_t*>(w + 192);
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      Q6KHalf(w, h, q);
      const int8_t* sh = sc + 8 * h;
      for (int k = 0; k < 4; ++k)  // values 32k .. 32k + 31 of the half: sub-blocks 2k, 2k + 1
        StoreQ6KPart(q[k], sh[2 * k], sh[2 * k + 1], d, dst + 128 * h + 32 * k);
    }
  }
}

// 16 MXFP4 codes (a byte each, 0..15) into dst[0 .. 16): the doubled magnitude (an exact
// integer) times half the scale, then the code's sign bit set, which is the scalar decoder's
// magnitude times the scale with its sign applied (code 8 gives -0), bit for bit.
SS_AVX2_NOFMA inline void StoreMxfp4x16(__m128i codes, __m256 half_scale, float* dst) {
  const __m128i magnitude =
      _mm_shuffle_epi8(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12), codes);
  for (int k = 0; k < 2; ++k) {
    const __m128i m = k ? _mm_srli_si128(magnitude, 8) : magnitude;
    const __m128i c = k ? _mm_srli_si128(codes, 8) : codes;
    const __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m)), half_scale);
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(_mm256_cvtepu8_epi32(c), _mm256_set1_epi32(8)), 28);
    _mm256_storeu_ps(dst + 8 * k, _mm256_or_ps(v, _mm256_castsi256_ps(sign)));
  }
}

SS_AVX2_NOFMA void DequantMxfp4Avx2(const uint8_t* w, const uint8_t*, float* dst, int n) {
  const __m128i mask = _mm_set1_epi8(0x0F);
  for (int b = 0; b < n / 32; ++b, w += 17, dst += 32) {
    const __m256 half_scale = _mm256_set1_ps(kE8M0Half.v[w[0]]);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 1));
    StoreMxfp4x16(_mm_and_si128(q, mask), half_scale, dst);
    StoreMxfp4x16(_mm_and_si128(_mm_srli_epi16(q, 4), mask), half_scale, dst + 16);
  }
}

SS_AVX2_NOFMA void DequantMxfp4SplitAvx2(const uint8_t* w, const uint8_t* scales, float* dst, int n) {
  const __m128i mask = _mm_set1_epi8(0x0F);
  for (int b = 0; b < n / 32; ++b, w += 16, dst += 32) {
    const __m256 half_scale = _mm256_set1_ps(kE8M0Half.v[scales[b]]);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
    const __m128i lo = _mm_and_si128(q, mask), hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
    StoreMxfp4x16(_mm_unpacklo_epi8(lo, hi), half_scale, dst);
    StoreMxfp4x16(_mm_unpackhi_epi8(lo, hi), half_scale, dst + 16);
  }
}

using RowDequant = void (*)(const uint8_t* w, const uint8_t* scales, float* dst, int n);

RowDequant Avx2RowDequant(uint32_t type) {
  switch (type) {
    case kGgmlTypeF16: return DequantF16Avx2;
    case kGgmlTypeBF16: return DequantBf16Avx2;
    case kGgmlTypeQ8_0: return DequantQ8_0Avx2;
    case kGgmlTypeQ4_0: return DequantQ4_0Avx2;
    case kGgmlTypeQ4_K: return DequantQ4_KAvx2;
    case kGgmlTypeQ6_K: return DequantQ6_KAvx2;
    case kGgmlTypeMXFP4: return DequantMxfp4Avx2;
    case kTypeMxfp4Split: return DequantMxfp4SplitAvx2;
    default: return nullptr;
  }
}

// Row r of W by the scalar decoders (kernels/dequant.h).
void DequantizeRowScalar(const GgmlMatrix& w, int r, float* dst) {
  if (w.type == kTypeMxfp4Split)
    DequantizeMxfp4Split(w.row(r), w.row_scales(r), dst, w.in);
  else
    Dequantize(w.type, w.row(r), dst, w.in);
}

// The portable path: the row dequantised into scratch, then a dot product with 8 partial sums.
float DotPortable(const GgmlMatrix& w, int r, const float* x) {
  float* row = Workspace<float, 6>(static_cast<size_t>(w.in));
  DequantizeRowScalar(w, r, row);
  return DotPartial8(row, x, w.in);
}

// The fused path (T < kGgmlWidenRows): rows of W in contiguous ranges per thread (so each thread
// reads one sequential stream), each row serving every row of x while it is in cache.
void MatMulFused(const float* x, const GgmlMatrix& w, const float* bias, float* y, int T) {
  const int in = w.in, out = w.out;
  const RowDot avx2 = VectorRowDot(w.type);
  const float* xsum = nullptr;
  if (avx2 && w.type == kGgmlTypeQ4_K) {
    float* sums = Workspace<float, 7>(static_cast<size_t>(T) * (in / 32));
    for (int t = 0; t < T; ++t) BlockSums32Avx2(x + static_cast<int64_t>(t) * in, in, sums + t * (in / 32));
    xsum = sums;
  }
#pragma omp parallel for schedule(static) if (static_cast<int64_t>(T) * in * out >= kParallelMatVec)
  for (int r = 0; r < out; ++r) {
    const uint8_t* row = w.row(r);
    for (int t = 0; t < T; ++t) {
      const float* xt = x + static_cast<int64_t>(t) * in;
      const float dot = avx2 ? avx2(row, w.scales ? w.row_scales(r) : nullptr, xt,
                                    xsum ? xsum + t * (in / 32) : nullptr, in)
                             : DotPortable(w, r, xt);
      y[static_cast<int64_t>(t) * out + r] = bias ? dot + bias[r] : dot;
    }
  }
}

}  // namespace

bool GgmlMatMulSupports(uint32_t type) {
  // Every type kernels/dequant.h decodes but F32, which stays an f32 tensor; and the split MXFP4.
  return (type != kGgmlTypeF32 && IsDequantizable(type)) || type == kTypeMxfp4Split;
}

GgmlMatrix GgmlMatrix::Rows(int first, int count) const {
  SS_ASSERT(first >= 0 && count >= 1 && first + count <= out);
  GgmlMatrix m = *this;
  m.owner = nullptr;
  m.out = count;
  m.data = row(first);
  if (scales) m.scales = row_scales(first);
  return m;
}

GgmlMatrix GgmlView(uint32_t type, int out, int in, const uint8_t* data, std::shared_ptr<const void> owner,
                    int row_step, const uint8_t* scales) {
  if (!GgmlMatMulSupports(type))
    Fail("ggml type {} ({}): no matrix product kernel for it (supported: F16, BF16, Q8_0, Q4_0, "
         "Q4_K, Q6_K, MXFP4)", type, GgmlTypeName(type));
  if (out < 1 || in < 1 || in % GgmlBlockValues(type) != 0)
    Fail("ggml type {}: a ({}, {}) matrix needs rows of whole {}-value blocks", GgmlTypeName(type),
         out, in, GgmlBlockValues(type));
  SS_ASSERT(data != nullptr && row_step >= 1 && (type == kTypeMxfp4Split) == (scales != nullptr));
  GgmlMatrix m;
  m.type = type;
  m.out = out;
  m.in = in;
  m.row_bytes = GgmlBytes(type, in);
  m.row_stride = m.row_bytes * row_step;
  m.data = data;
  m.scales = scales;
  m.scale_stride = scales ? static_cast<size_t>(in / kMxfp4Block) * row_step : 0;
  m.owner = std::move(owner);
  return m;
}

const char* GgmlKernelName(uint32_t type) {
  if (!VectorRowDot(type)) return "portable";
  return ActiveSimdLevel() == SimdLevel::kAvx512 ? "avx512" : "avx2";
}

namespace {

// Whether any of n 2-byte fields, `stride` bytes apart from p, has all `exponent` bits set. Counted
// over chunks without an early exit, so that the loop vectorises (a 7B BF16 model's 6.7 G values are
// scanned at load); the caller finds the exact place in a chunk that has one.
__attribute__((always_inline)) inline bool AnyAllOnesBody(const uint8_t* p, int64_t n, size_t stride,
                                                          uint16_t exponent) {
  int hits = 0;
  for (int64_t i = 0; i < n; ++i) hits += (LoadU16(p + i * stride) & exponent) == exponent;
  return hits > 0;
}
__attribute__((target("avx2"))) bool AnyAllOnesAvx2(const uint8_t* p, int64_t n, size_t stride,
                                                    uint16_t exponent) {
  return AnyAllOnesBody(p, n, stride, exponent);
}
bool AnyAllOnes(const uint8_t* p, int64_t n, size_t stride, uint16_t exponent) {
  return Avx2FmaActive() ? AnyAllOnesAvx2(p, n, stride, exponent) : AnyAllOnesBody(p, n, stride, exponent);
}

}  // namespace

namespace {

// MXFP4 rows: the first block Mxfp4BlockFault refuses, as the index of its first value.
int64_t Mxfp4FirstNonFinite(const GgmlMatrix& w) {
  const int groups = w.in / kMxfp4Block;
  for (int r = 0; r < w.out; ++r) {
    const int64_t g = w.type == kTypeMxfp4Split
                          ? Mxfp4FirstFault(w.row_scales(r), 1, w.row(r), kMxfp4NibbleBytes, groups)
                          : Mxfp4FirstFault(w.row(r), 17, w.row(r) + 1, 17, groups);
    if (g >= 0) return static_cast<int64_t>(r) * w.in + g * kMxfp4Block;
  }
  return -1;
}

// Rows [row0, row0 + rows) of a matrix of the other types, whose f16 / bf16 fields sit at
// `fields` in each block.
int64_t HalvesFirstNonFinite(const GgmlMatrix& w, int row0, int rows, const std::vector<int>& fields,
                             uint16_t exponent) {
  const int64_t per_block = GgmlBlockValues(w.type);
  const size_t block_bytes = GgmlBlockBytes(w.type);
  const uint8_t* data = w.row(row0);
  const int64_t first = static_cast<int64_t>(row0) * w.in / per_block;
  constexpr int64_t kChunk = 4096;  // blocks
  const int64_t blocks = static_cast<int64_t>(rows) * w.in / per_block;
  for (int64_t c = 0; c < blocks; c += kChunk) {
    const int64_t n = std::min(kChunk, blocks - c);
    bool any = false;
    for (int f : fields) any = any || AnyAllOnes(data + c * block_bytes + f, n, block_bytes, exponent);
    if (!any) continue;
    for (int64_t b = c; b < c + n; ++b)
      for (int f : fields)
        if ((LoadU16(data + b * block_bytes + f) & exponent) == exponent) return (first + b) * per_block;
  }
  return -1;
}

}  // namespace

int64_t GgmlFirstNonFinite(const GgmlMatrix& w) {
  if (w.type == kGgmlTypeMXFP4 || w.type == kTypeMxfp4Split) return Mxfp4FirstNonFinite(w);
  // Where each block's f16 / bf16 fields sit, and the exponent mask that marks Inf and NaN.
  std::vector<int> fields;
  uint16_t exponent = 0x7C00;  // binary16
  switch (w.type) {
    case kGgmlTypeBF16: exponent = 0x7F80; [[fallthrough]];
    case kGgmlTypeF16:
    case kGgmlTypeQ8_0:
    case kGgmlTypeQ4_0: fields = {0}; break;
    case kGgmlTypeQ4_K: fields = {0, 2}; break;
    case kGgmlTypeQ6_K: fields = {208}; break;
    default: SS_ASSERT(false);
  }
  // Contiguous rows are scanned as one run of blocks; rows a stride apart one at a time.
  if (w.row_stride == w.row_bytes) return HalvesFirstNonFinite(w, 0, w.out, fields, exponent);
  for (int r = 0; r < w.out; ++r)
    if (const int64_t bad = HalvesFirstNonFinite(w, r, 1, fields, exponent); bad >= 0) return bad;
  return -1;
}

std::string GgmlFaultReason(const GgmlMatrix& w, int64_t element) {
  SS_ASSERT(element >= 0 && element < static_cast<int64_t>(w.out) * w.in);
  const int r = static_cast<int>(element / w.in), g = static_cast<int>(element % w.in / kMxfp4Block);
  if (w.type == kTypeMxfp4Split) {
    const uint8_t e = w.row_scales(r)[g];
    const char* why = Mxfp4BlockFault(e, w.row(r) + kMxfp4NibbleBytes * g);
    return fmt::format("holds a bad MXFP4 block, block {} of row {} (scale byte 0x{:02X}): {}", g, r, e, why ? why : "?");
  }
  if (w.type == kGgmlTypeMXFP4) {
    const uint8_t* block = w.row(r) + 17 * g;
    const char* why = Mxfp4BlockFault(block[0], block + 1);
    return fmt::format("holds a bad MXFP4 block, block {} of row {} (scale byte 0x{:02X}): {}", g, r, block[0],
                       why ? why : "?");
  }
  return fmt::format("holds a non-finite value or scale at element {}", element);
}

void DequantizeGgmlRows(const GgmlMatrix& w, int row0, int rows, float* dst) {
  SS_ASSERT(row0 >= 0 && rows >= 0 && row0 + rows <= w.out);
  if (const RowDequant avx2 = Avx2Active() ? Avx2RowDequant(w.type) : nullptr) {
    for (int r = 0; r < rows; ++r)
      avx2(w.row(row0 + r), w.scales ? w.row_scales(row0 + r) : nullptr, dst + static_cast<int64_t>(r) * w.in, w.in);
    return;
  }
  for (int r = 0; r < rows; ++r) DequantizeRowScalar(w, row0 + r, dst + static_cast<int64_t>(r) * w.in);
}

void MatMulWidened(const float* x, int in, int out, const float* bias, float* y, int T,
                   const std::function<void(int, int, float*)>& dequantise) {
  const int blocks = (out + kWidenBlock - 1) / kWidenBlock;
#pragma omp parallel if (static_cast<int64_t>(T) * in * out >= kParallelMacs)
  {
    float* wf = Workspace<float, 5>(static_cast<size_t>(kWidenBlock) * in);
#pragma omp for schedule(dynamic, 1)
    for (int b = 0; b < blocks; ++b) {
      const int row0 = b * kWidenBlock, rows = std::min(kWidenBlock, out - row0);
      dequantise(row0, rows, wf);
      float beta = 0.0f;
      if (bias) {
        for (int t = 0; t < T; ++t)
          std::copy(bias + row0, bias + row0 + rows, y + static_cast<int64_t>(t) * out + row0);
        beta = 1.0f;
      }
      // One thread per block: OpenBLAS runs single-threaded inside an OpenMP parallel region.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, rows, in, 1.0f, x, in, wf, in, beta,
                  y + row0, out);
    }
  }
}

void MatMulGgml(const float* x, const GgmlMatrix& w, const float* bias, float* y, int T) {
  SS_ASSERT(T >= 0 && !w.empty());
  if (T == 0) return;
  if (T >= kGgmlWidenRows)
    MatMulWidened(x, w.in, w.out, bias, y, T,
                  [&w](int row0, int rows, float* dst) { DequantizeGgmlRows(w, row0, rows, dst); });
  else
    MatMulFused(x, w, bias, y, T);
}

}  // namespace ss
