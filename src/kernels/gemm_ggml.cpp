#include "kernels/gemm_ggml.h"

#include <cpuid.h>
#include <fmt/format.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common/error.h"
#include "kernels/dequant.h"
#include "kernels/gemm_dot.h"
#include "kernels/gemm_int8.h"
#include "kernels/simd.h"
#include "kernels/vecmath.h"
#include "kernels/workspace.h"
#include "tensor/half.h"

namespace ss {

namespace {

#define SS_AVX2 __attribute__((target("avx2,fma,f16c")))
#define SS_AVX2_NOFMA __attribute__((target("avx2,f16c")))  // helpers both kinds of kernel inline

uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// The scale tables (kE8M0Half, kF16AsF32) are kernels/dequant.h's. Reading the fused Q8_0 and
// Q4_0 decode kernels' f16 scale from kF16AsF32 rather than converting it in registers (VMOVD,
// VCVTPH2PS, VBROADCASTSS: the shuffle port the codes' VPMOVSXBD / VPMOVZXBD and VPERMPS also need)
// measured (bench_gemm, one thread, 4096 x 11008 in the L3 cache, four alternating rounds,
// 2026-12-03): Q4_0 7.1 -> 9.8 GB/s of W, Q8_0 11.2 -> 13.7 on AVX-512; no change on AVX2. Q4_K
// and Q6_K, whose scales are per sub-block, did not change when their broadcasts went through
// memory as well, so they are left as they were.

bool Avx2Active() {
  // F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c".
  static const bool f16c = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
  }();
  return f16c && Avx2FmaActive();
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

// ---- The vector decoders. Each writes n values of a row (whole blocks; F16 / BF16 any n), value
// v at dst + (v / 16) * cs + v % 16: cs = 16 is a plain row, MatMulDot's tiles ask for each
// 16-value chunk cs floats after the previous one (their packed layout). Every value is the scalar
// decoder's (kernels/dequant.h) bit for bit: tests/test_gemm_ggml.cpp compares every path.
using RowDequant = void (*)(const uint8_t* w, const uint8_t* scales, float* dst, int n, int cs);

inline float* At(float* dst, int v, int cs) { return dst + (v >> 4) * cs + (v & 15); }

// -- AVX2 (+ F16C). No FMA in their target (SS_AVX2_NOFMA), so that no multiply and subtract is
// fused: each value is rounded exactly as kernels/dequant.cpp's scalar loops round it.

// An f16 field as f32 (F16C: exact, as the scalar decoders' F16ToF32).
SS_AVX2_NOFMA inline float Half(const uint8_t* p) { return _cvtsh_ss(LoadU16(p)); }

SS_AVX2_NOFMA inline __m256 WidenI8(__m128i v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
}

// 16 int8 values times d into one chunk.
SS_AVX2_NOFMA inline void StoreScaledI8x16(__m128i q, __m256 d, float* dst) {
  _mm256_storeu_ps(dst, _mm256_mul_ps(d, WidenI8(q)));
  _mm256_storeu_ps(dst + 8, _mm256_mul_ps(d, WidenI8(_mm_srli_si128(q, 8))));
}

SS_AVX2_NOFMA void DequantF16Avx2(const uint8_t* w, const uint8_t*, float* dst, int n, int cs) {
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(At(dst, i, cs),
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * i))));
  for (; i < n; ++i) *At(dst, i, cs) = Half(w + 2 * i);
}

SS_AVX2_NOFMA void DequantBf16Avx2(const uint8_t* w, const uint8_t*, float* dst, int n, int cs) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i wide =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 * i)));
    _mm256_storeu_ps(At(dst, i, cs), _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
  }
  for (; i < n; ++i) *At(dst, i, cs) = BF16ToF32(LoadU16(w + 2 * i));
}

SS_AVX2_NOFMA void DequantQ8_0Avx2(const uint8_t* w, const uint8_t*, float* dst, int n, int cs) {
  for (int b = 0; b < n / 32; ++b, w += 34) {
    const __m256 d = _mm256_set1_ps(Half(w));
    StoreScaledI8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2)), d,
                     At(dst, 32 * b, cs));
    StoreScaledI8x16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 18)), d,
                     At(dst, 32 * b + 16, cs));
  }
}

SS_AVX2_NOFMA void DequantQ4_0Avx2(const uint8_t* w, const uint8_t*, float* dst, int n, int cs) {
  const __m128i mask = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  for (int b = 0; b < n / 32; ++b, w += 18) {
    const __m256 d = _mm256_set1_ps(Half(w));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2));
    StoreScaledI8x16(_mm_sub_epi8(_mm_and_si128(q, mask), eight), d, At(dst, 32 * b, cs));
    StoreScaledI8x16(_mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), mask), eight), d,
                     At(dst, 32 * b + 16, cs));
  }
}

// 32 values q (0..15) of a Q4_K sub-block: scale * q - min into two chunks.
SS_AVX2_NOFMA inline void StoreQ4KSub(__m256i q, float scale, float min, float* first,
                                      float* second) {
  const __m256 s = _mm256_set1_ps(scale), m = _mm256_set1_ps(min);
  const __m128i halves[2] = {_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)};
  for (int k = 0; k < 4; ++k) {  // bytes 8k .. 8k + 7
    const __m128i part = k % 2 ? _mm_srli_si128(halves[k / 2], 8) : halves[k / 2];
    const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(part));
    _mm256_storeu_ps((k < 2 ? first : second) + 8 * (k % 2), _mm256_sub_ps(_mm256_mul_ps(s, v), m));
  }
}

SS_AVX2_NOFMA void DequantQ4_KAvx2(const uint8_t* w, const uint8_t*, float* dst, int n, int cs) {
  const __m256i mask = _mm256_set1_epi8(0x0F);
  for (int b = 0; b < n / 256; ++b, w += 144) {
    const float d = Half(w), dmin = Half(w + 2);
    for (int g = 0; g < 4; ++g) {
      int sc_lo, m_lo, sc_hi, m_hi;
      Q4KScaleMin(2 * g, w + 4, &sc_lo, &m_lo);
      Q4KScaleMin(2 * g + 1, w + 4, &sc_hi, &m_hi);
      const int v = 256 * b + 64 * g;
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 + 32 * g));
      StoreQ4KSub(_mm256_and_si256(q, mask), d * static_cast<float>(sc_lo),
                  dmin * static_cast<float>(m_lo), At(dst, v, cs), At(dst, v + 16, cs));
      StoreQ4KSub(_mm256_and_si256(_mm256_srli_epi16(q, 4), mask), d * static_cast<float>(sc_hi),
                  dmin * static_cast<float>(m_hi), At(dst, v + 32, cs), At(dst, v + 48, cs));
    }
  }
}

// Q6_K: the 32 six-bit values of q (already - 32, int8) times their 16-value sub-blocks' int8
// scales sc0, sc1 (the integer products, as the scalar loop forms them), then times d: two chunks.
SS_AVX2_NOFMA inline void StoreQ6KPart(__m256i q, int sc0, int sc1, __m256 d, float* first,
                                       float* second) {
  const __m256i lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q));       // values 0..15
  const __m256i hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1));  // values 16..31
  const __m256i p0 = _mm256_mullo_epi16(lo, _mm256_set1_epi16(static_cast<int16_t>(sc0)));
  const __m256i p1 = _mm256_mullo_epi16(hi, _mm256_set1_epi16(static_cast<int16_t>(sc1)));
  for (int k = 0; k < 4; ++k) {
    const __m256i p = k < 2 ? p0 : p1;
    const __m128i half = k % 2 ? _mm256_extracti128_si256(p, 1) : _mm256_castsi256_si128(p);
    _mm256_storeu_ps((k < 2 ? first : second) + 8 * (k % 2),
                     _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(half))));
  }
}

SS_AVX2_NOFMA void DequantQ6_KAvx2(const uint8_t* w, const uint8_t*, float* dst, int n, int cs) {
  for (int b = 0; b < n / 256; ++b, w += 210) {
    const __m256 d = _mm256_set1_ps(Half(w + 208));
    const int8_t* sc = reinterpret_cast<const int8_t*>(w + 192);
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      Q6KHalf(w, h, q);
      const int8_t* sh = sc + 8 * h;
      for (int k = 0; k < 4; ++k) {  // values 32k .. 32k + 31 of the half: sub-blocks 2k, 2k + 1
        const int v = 256 * b + 128 * h + 32 * k;
        StoreQ6KPart(q[k], sh[2 * k], sh[2 * k + 1], d, At(dst, v, cs), At(dst, v + 16, cs));
      }
    }
  }
}

// 16 MXFP4 codes (a byte each, 0..15) into one chunk: the doubled magnitude (an exact integer)
// times half the scale, then the code's sign bit set, which is the scalar decoder's magnitude
// times the scale with its sign applied (code 8 gives -0), bit for bit.
SS_AVX2_NOFMA inline void StoreMxfp4x16(__m128i codes, __m256 half_scale, float* dst) {
  const __m128i magnitude =
      _mm_shuffle_epi8(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12), codes);
  for (int k = 0; k < 2; ++k) {
    const __m128i m = k ? _mm_srli_si128(magnitude, 8) : magnitude;
    const __m128i c = k ? _mm_srli_si128(codes, 8) : codes;
    const __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m)), half_scale);
    const __m256i sign =
        _mm256_slli_epi32(_mm256_and_si256(_mm256_cvtepu8_epi32(c), _mm256_set1_epi32(8)), 28);
    _mm256_storeu_ps(dst + 8 * k, _mm256_or_ps(v, _mm256_castsi256_ps(sign)));
  }
}

SS_AVX2_NOFMA void DequantMxfp4Avx2(const uint8_t* w, const uint8_t*, float* dst, int n, int cs) {
  const __m128i mask = _mm_set1_epi8(0x0F);
  for (int b = 0; b < n / 32; ++b, w += 17) {
    const __m256 half_scale = _mm256_set1_ps(kE8M0Half.v[w[0]]);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 1));
    StoreMxfp4x16(_mm_and_si128(q, mask), half_scale, At(dst, 32 * b, cs));
    StoreMxfp4x16(_mm_and_si128(_mm_srli_epi16(q, 4), mask), half_scale, At(dst, 32 * b + 16, cs));
  }
}

SS_AVX2_NOFMA void DequantMxfp4SplitAvx2(const uint8_t* w, const uint8_t* scales, float* dst, int n,
                                         int cs) {
  const __m128i mask = _mm_set1_epi8(0x0F);
  for (int b = 0; b < n / 32; ++b, w += 16) {
    const __m256 half_scale = _mm256_set1_ps(kE8M0Half.v[scales[b]]);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
    const __m128i lo = _mm_and_si128(q, mask), hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
    StoreMxfp4x16(_mm_unpacklo_epi8(lo, hi), half_scale, At(dst, 32 * b, cs));
    StoreMxfp4x16(_mm_unpackhi_epi8(lo, hi), half_scale, At(dst, 32 * b + 16, cs));
  }
}

RowDequant Avx2RowDequant(uint32_t type) {
  switch (type) {
    case kGgmlTypeF16:
      return DequantF16Avx2;
    case kGgmlTypeBF16:
      return DequantBf16Avx2;
    case kGgmlTypeQ8_0:
      return DequantQ8_0Avx2;
    case kGgmlTypeQ4_0:
      return DequantQ4_0Avx2;
    case kGgmlTypeQ4_K:
      return DequantQ4_KAvx2;
    case kGgmlTypeQ6_K:
      return DequantQ6_KAvx2;
    case kGgmlTypeMXFP4:
      return DequantMxfp4Avx2;
    case kTypeMxfp4Split:
      return DequantMxfp4SplitAvx2;
    default:
      return nullptr;
  }
}

// Row r of W by the scalar decoders (kernels/dequant.h).
void DequantizeRowScalar(const GgmlMatrix& w, int r, float* dst) {
  if (w.type == kTypeMxfp4Split)
    DequantizeMxfp4Split(w.row(r), w.row_scales(r), dst, w.in);
  else
    Dequantize(w.type, w.row(r), dst, w.in);
}

// -- AVX-512: 16 values an instruction. The 4-bit types look their codes up in a 16-entry table of
// the block's values (VPERMPS reads a lane's low 4 bits as the index: a byte's low nibble as it
// stands, its high one after a shift), built once per block or sub-block: d (n - 8) for Q4_0, the
// doubled E2M1 values times half the scale for MXFP4, d sc q - dmin m for Q4_K's sub-blocks; every
// entry is the scalar decoder's product (exact) or its one rounded subtraction.
#define SS_AVX512 __attribute__((target("avx512f,avx2,f16c")))

SS_AVX512 inline __m128i Load128(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

SS_AVX512 void DecodeF16Avx512(const uint8_t* w, const uint8_t*, float* dst, int n, int cs) {
  int i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(
        At(dst, i, cs),
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2 * i))));
  for (; i < n; ++i) *At(dst, i, cs) = Half(w + 2 * i);
}

SS_AVX512 void DecodeBf16Avx512(const uint8_t* w, const uint8_t*, float* dst, int n, int cs) {
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i wide =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 2 * i)));
    _mm512_storeu_ps(At(dst, i, cs), _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)));
  }
  for (; i < n; ++i) *At(dst, i, cs) = BF16ToF32(LoadU16(w + 2 * i));
}

SS_AVX512 void DecodeQ8_0Avx512(const uint8_t* w, const uint8_t*, float* dst, int n, int cs) {
  for (int b = 0; b < n / 32; ++b, w += 34, dst += 2 * cs) {
    const __m512 d = _mm512_set1_ps(Half(w));
    _mm512_storeu_ps(dst,
                     _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(Load128(w + 2)))));
    _mm512_storeu_ps(dst + cs,
                     _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(Load128(w + 18)))));
  }
}

// 16 bytes of codes: the values of their low nibbles (into `first`) and high nibbles (`second`)
// from `table`.
SS_AVX512 inline void LookUpNibbles(__m128i bytes, __m512 table, float* first, float* second) {
  const __m512i wide = _mm512_cvtepu8_epi32(bytes);
  _mm512_storeu_ps(first, _mm512_permutexvar_ps(wide, table));
  _mm512_storeu_ps(second, _mm512_permutexvar_ps(_mm512_srli_epi32(wide, 4), table));
}

SS_AVX512 void DecodeQ4_0Avx512(const uint8_t* w, const uint8_t*, float* dst, int n, int cs) {
  const __m512 codes = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
  for (int b = 0; b < n / 32; ++b, w += 18, dst += 2 * cs)
    LookUpNibbles(Load128(w + 2), _mm512_mul_ps(_mm512_set1_ps(Half(w)), codes), dst, dst + cs);
}

// The doubled E2M1 magnitudes of codes 0-15 times half the scale, codes 8-15 with the sign bit set
// (code 8: -0), as the scalar decoder gives them.
SS_AVX512 inline __m512 Mxfp4Table(uint8_t e) {
  const __m512 magnitudes = _mm512_setr_ps(0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12);
  const __m512i sign = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, INT32_MIN, INT32_MIN, INT32_MIN,
                                         INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN);
  const __m512 v = _mm512_mul_ps(magnitudes, _mm512_set1_ps(kE8M0Half.v[e]));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign));
}

SS_AVX512 void DecodeMxfp4Avx512(const uint8_t* w, const uint8_t*, float* dst, int n, int cs) {
  for (int b = 0; b < n / 32; ++b, w += 17, dst += 2 * cs)
    LookUpNibbles(Load128(w + 1), Mxfp4Table(w[0]), dst, dst + cs);
}

// The split form: byte j holds values 2j (low nibble) and 2j + 1 (high), put back in order by
// interleaving the two looked-up vectors.
SS_AVX512 void DecodeMxfp4SplitAvx512(const uint8_t* w, const uint8_t* scales, float* dst, int n,
                                      int cs) {
  const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i second =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (int b = 0; b < n / 32; ++b, w += 16, dst += 2 * cs) {
    const __m512 table = Mxfp4Table(scales[b]);
    const __m512i wide = _mm512_cvtepu8_epi32(Load128(w));
    const __m512 even = _mm512_permutexvar_ps(wide, table);
    const __m512 odd = _mm512_permutexvar_ps(_mm512_srli_epi32(wide, 4), table);
    _mm512_storeu_ps(dst, _mm512_permutex2var_ps(even, first, odd));
    _mm512_storeu_ps(dst + cs, _mm512_permutex2var_ps(even, second, odd));
  }
}

// The split form with AVX-512 VBMI (Ice Lake, Zen 4 and later): VPMULTISHIFTQB puts in each 32-bit
// lane the nibble of its own value straight from the 8 bytes broadcast to every 64-bit lane (lane
// 2k the low nibble of byte k, lane 2k + 1 its high nibble; VPERMPS reads a lane's low 4 bits), so
// the values come out in order without the two VPERMT2PS above: the same values in the same lanes,
// two shuffles a block fewer. bench_gemm's gpt_oss shapes (gate and up as 5760 rows of 2880
// values, down as 2880; medians of 10 interleaved repetitions, Zen 5 EPYC, GB/s of W): 16.3 / 30.7
// on 1 / 2 threads against 14.0 / 26.7 without VBMI (1.15x), 16.2 / 30.0 against 14.0 / 26.3 for
// down; a prompt's product (T = 64) unchanged, 150.8 against 151.2 GFLOP/s. A VPSHUFB form (the
// bytes spread to their lanes, then VPSRLVD) was no faster than the interleave.
#define SS_VBMI512 __attribute__((target("avx512f,avx512vbmi,avx2,fma,f16c")))

std::atomic<bool>& VbmiAllowed() {
  static std::atomic<bool> allowed{true};
  return allowed;
}
bool CpuHasAvx512Vbmi() {
  // CPUID leaf 7 sub-leaf 0: ECX bit 1 (AVX512_VBMI); AVX-512 itself is ActiveSimdLevel's check.
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (c & (1u << 1)) != 0;
  }();
  return has;
}
bool UseVbmi() {
  return ActiveSimdLevel() == SimdLevel::kAvx512 && CpuHasAvx512Vbmi() &&
         VbmiAllowed().load(std::memory_order_relaxed);
}

// The 16 values of 8 bytes of the split form, in order, from `table` (Mxfp4Table).
SS_VBMI512 inline __m512 Mxfp4SplitValues(const uint8_t* w, __m512 table) {
  // Destination byte 0 of lane 2k from bit 8k of the 64-bit word, of lane 2k + 1 from bit 8k + 4.
  const __m512i at =
      _mm512_set_epi64((60LL << 32) | 56, (52LL << 32) | 48, (44LL << 32) | 40, (36LL << 32) | 32,
                       (28LL << 32) | 24, (20LL << 32) | 16, (12LL << 32) | 8, (4LL << 32) | 0);
  uint64_t bytes;
  std::memcpy(&bytes, w, 8);
  return _mm512_permutexvar_ps(
      _mm512_multishift_epi64_epi8(at, _mm512_set1_epi64(static_cast<long long>(bytes))), table);
}

SS_VBMI512 void DecodeMxfp4SplitVbmi(const uint8_t* w, const uint8_t* scales, float* dst, int n,
                                     int cs) {
  for (int b = 0; b < n / 32; ++b, w += 16, dst += 2 * cs) {
    const __m512 table = Mxfp4Table(scales[b]);
    _mm512_storeu_ps(dst, Mxfp4SplitValues(w, table));
    _mm512_storeu_ps(dst + cs, Mxfp4SplitValues(w + 8, table));
  }
}

// Q4_K's eight 6-bit scales and mins of a super-block (the 12 packed bytes at `packed`), times d
// and dmin: exact products, as the scalar decoder's d * sc and dmin * m.
SS_AVX512 inline void Q4KScales(const uint8_t* packed, float d, float dmin, float* ds, float* dm) {
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    Q4KScaleMin(j, packed, &sc, &m);
    ds[j] = d * static_cast<float>(sc);
    dm[j] = dmin * static_cast<float>(m);
  }
}

SS_AVX512 void DecodeQ4_KAvx512(const uint8_t* w, const uint8_t*, float* dst, int n, int cs) {
  const __m512 codes = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  alignas(32) float ds[8], dm[8];
  for (int b = 0; b < n / 256; ++b, w += 144, dst += 16 * static_cast<int64_t>(cs)) {
    Q4KScales(w + 4, Half(w), Half(w + 2), ds, dm);
    for (int g = 0; g < 4; ++g) {
      // d sc q is exact, dmin m too: one rounding, at the subtraction, as the scalar decoder.
      const __m512 lo =
          _mm512_sub_ps(_mm512_mul_ps(codes, _mm512_set1_ps(ds[2 * g])), _mm512_set1_ps(dm[2 * g]));
      const __m512 hi = _mm512_sub_ps(_mm512_mul_ps(codes, _mm512_set1_ps(ds[2 * g + 1])),
                                      _mm512_set1_ps(dm[2 * g + 1]));
      const uint8_t* q = w + 16 + 32 * g;
      float* out = dst + 4 * g * static_cast<int64_t>(cs);  // chunk 4 g of the super-block
      for (int half = 0; half < 2; ++half) {                // bytes 16 half .. 16 half + 15
        const __m512i wide = _mm512_cvtepu8_epi32(Load128(q + 16 * half));
        _mm512_storeu_ps(out + half * cs, _mm512_permutexvar_ps(wide, lo));
        _mm512_storeu_ps(out + (2 + half) * cs,
                         _mm512_permutexvar_ps(_mm512_srli_epi32(wide, 4), hi));
      }
    }
  }
}

// Q6_K: each 16-value sub-block's six-bit values (Q6KHalf) times d sc: the exact product the scalar
// decoder's d (sc q) is, the + 0 turning a -0 (q = 0, sc < 0) into its +0.
SS_AVX512 void DecodeQ6_KAvx512(const uint8_t* w, const uint8_t*, float* dst, int n, int cs) {
  const __m512 zero = _mm512_setzero_ps();
  for (int b = 0; b < n / 256; ++b, w += 210) {
    const float d = Half(w + 208);
    const int8_t* sc = reinterpret_cast<const int8_t*>(w + 192);
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      Q6KHalf(w, h, q);
      for (int k = 0; k < 4; ++k)  // values 32k .. 32k + 31 of the half: sub-blocks 2k, 2k + 1
        for (int s = 0; s < 2; ++s) {
          const __m128i part = s ? _mm256_extracti128_si256(q[k], 1) : _mm256_castsi256_si128(q[k]);
          const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(part));
          const __m512 scale = _mm512_set1_ps(d * static_cast<float>(sc[8 * h + 2 * k + s]));
          _mm512_storeu_ps(dst + (16 * b + 8 * h + 2 * k + s) * static_cast<int64_t>(cs),
                           _mm512_add_ps(_mm512_mul_ps(v, scale), zero));
        }
    }
  }
}

RowDequant Avx512RowDecode(uint32_t type) {
  switch (type) {
    case kGgmlTypeF16:
      return DecodeF16Avx512;
    case kGgmlTypeBF16:
      return DecodeBf16Avx512;
    case kGgmlTypeQ8_0:
      return DecodeQ8_0Avx512;
    case kGgmlTypeQ4_0:
      return DecodeQ4_0Avx512;
    case kGgmlTypeQ4_K:
      return DecodeQ4_KAvx512;
    case kGgmlTypeQ6_K:
      return DecodeQ6_KAvx512;
    case kGgmlTypeMXFP4:
      return DecodeMxfp4Avx512;
    case kTypeMxfp4Split:
      return UseVbmi() ? DecodeMxfp4SplitVbmi : DecodeMxfp4SplitAvx512;
    default:
      return nullptr;
  }
}

// The vector decoder of `type` at the active SIMD level, or nullptr (the scalar decoders).
RowDequant VectorRowDecode(uint32_t type) {
  if (!Avx2Active()) return nullptr;
  return ActiveSimdLevel() == SimdLevel::kAvx512 ? Avx512RowDecode(type) : Avx2RowDequant(type);
}

// ---- One row of x (decode): each row of W decoded a block at a time in registers and multiplied
// at once, G rows side by side (one sequential stream of bytes each, asked for ahead: RowAhead),
// with the arithmetic of MatMulDot's tiles: per row one 16-lane accumulator, each 16-value chunk of
// the row in order FMA'd with x's chunk, the vector decoders' values, Reduce16, then the bias. So a
// row gives the same bits here as in MatMulDot for any T (tests/test_gemm_ggml.cpp).

// Each kind: kValues values (whole chunks) in kBytes bytes a block; Block512 / Block256 decode
// block b of a row (w at the block; s: the split MXFP4's scale bytes from the row's first) and
// add its chunks' products with x (at the block's first value) to the accumulator. Q4_K's and
// Q6_K's AVX-512 forms are in kParts parts instead: Start512 puts a block's scales in memory,
// Part512 adds part p's chunks (PartsOf, RowsTimesX512).
#define SS_FUSED512 __attribute__((target("avx512f,avx2,fma,f16c"), always_inline)) static inline
#define SS_FUSED256 __attribute__((target("avx2,fma,f16c"), always_inline)) static inline

SS_FUSED512 void Step512(__m512 v, const float* x, __m512& acc) {
  acc = _mm512_fmadd_ps(v, _mm512_loadu_ps(x), acc);
}
SS_FUSED256 void Step256(__m256 lo, __m256 hi, const float* x, __m256* acc) {
  acc[0] = _mm256_fmadd_ps(lo, _mm256_loadu_ps(x), acc[0]);
  acc[1] = _mm256_fmadd_ps(hi, _mm256_loadu_ps(x + 8), acc[1]);
}

struct KindF16 {
  static constexpr int kValues = 16, kBytes = 32;
  SS_FUSED512 void Block512(const uint8_t* w, const uint8_t*, int, const float* x, __m512& acc) {
    Step512(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w))), x, acc);
  }
  SS_FUSED256 void Block256(const uint8_t* w, const uint8_t*, int, const float* x, __m256* acc) {
    Step256(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w))),
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 16))), x, acc);
  }
};
struct KindBf16 {
  static constexpr int kValues = 16, kBytes = 32;
  SS_FUSED512 void Block512(const uint8_t* w, const uint8_t*, int, const float* x, __m512& acc) {
    const __m512i wide =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w)));
    Step512(_mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)), x, acc);
  }
  SS_FUSED256 void Block256(const uint8_t* w, const uint8_t*, int, const float* x, __m256* acc) {
    __m256 v[2];
    for (int h = 0; h < 2; ++h)
      v[h] = _mm256_castsi256_ps(_mm256_slli_epi32(
          _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 16 * h))),
          16));
    Step256(v[0], v[1], x, acc);
  }
};
struct KindQ8_0 {
  static constexpr int kValues = 32, kBytes = 34;
  SS_FUSED512 void Block512(const uint8_t* w, const uint8_t*, int, const float* x, __m512& acc) {
    const __m512 d = _mm512_set1_ps(kF16AsF32.v[LoadU16(w)]);
    Step512(_mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(Load128(w + 2)))), x, acc);
    Step512(_mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(Load128(w + 18)))), x + 16,
            acc);
  }
  SS_FUSED256 void Block256(const uint8_t* w, const uint8_t*, int, const float* x, __m256* acc) {
    const __m256 d = _mm256_set1_ps(kF16AsF32.v[LoadU16(w)]);
    for (int c = 0; c < 2; ++c) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 + 16 * c));
      Step256(_mm256_mul_ps(d, WidenI8(q)), _mm256_mul_ps(d, WidenI8(_mm_srli_si128(q, 8))),
              x + 16 * c, acc);
    }
  }
};
struct KindQ4_0 {
  static constexpr int kValues = 32, kBytes = 18;
  SS_FUSED512 void Block512(const uint8_t* w, const uint8_t*, int, const float* x, __m512& acc) {
    const __m512 codes = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    const __m512 table = _mm512_mul_ps(_mm512_set1_ps(kF16AsF32.v[LoadU16(w)]), codes);
    const __m512i wide = _mm512_cvtepu8_epi32(Load128(w + 2));
    Step512(_mm512_permutexvar_ps(wide, table), x, acc);
    Step512(_mm512_permutexvar_ps(_mm512_srli_epi32(wide, 4), table), x + 16, acc);
  }
  SS_FUSED256 void Block256(const uint8_t* w, const uint8_t*, int, const float* x, __m256* acc) {
    const __m128i mask = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    const __m256 d = _mm256_set1_ps(kF16AsF32.v[LoadU16(w)]);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, mask), eight);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), mask), eight);
    Step256(_mm256_mul_ps(d, WidenI8(lo)), _mm256_mul_ps(d, WidenI8(_mm_srli_si128(lo, 8))), x,
            acc);
    Step256(_mm256_mul_ps(d, WidenI8(hi)), _mm256_mul_ps(d, WidenI8(_mm_srli_si128(hi, 8))), x + 16,
            acc);
  }
};
// The AVX2 decoders' MXFP4 values of 16 codes (StoreMxfp4x16's arithmetic) as two halves.
SS_FUSED256 void Mxfp4Values256(__m128i codes, __m256 table, __m256* v) {
  // table: the doubled E2M1 magnitudes 0, 1, 2, 3, 4, 6, 8, 12 times half the scale
  // (Mxfp4Table256). VPERMPS reads a lane's low 3 bits, the code's magnitude; bit 3, its sign, goes
  // to bit 31.
  const __m128i high = _mm_srli_si128(codes, 8);
  const __m256i idx[2] = {_mm256_cvtepu8_epi32(codes), _mm256_cvtepu8_epi32(high)};
#pragma GCC unroll 2
  for (int k = 0; k < 2; ++k) {
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(idx[k], _mm256_set1_epi32(8)), 28);
    v[k] = _mm256_or_ps(_mm256_permutevar8x32_ps(table, idx[k]), _mm256_castsi256_ps(sign));
  }
}
// The eight magnitudes of Mxfp4Values256: the same products as the decoders' magnitude times half
// the scale.
SS_FUSED256 __m256 Mxfp4Table256(float half_scale) {
  return _mm256_mul_ps(_mm256_setr_ps(0, 1, 2, 3, 4, 6, 8, 12), _mm256_set1_ps(half_scale));
}
struct KindMxfp4 {
  static constexpr int kValues = 32, kBytes = 17;
  SS_FUSED512 void Block512(const uint8_t* w, const uint8_t*, int, const float* x, __m512& acc) {
    const __m512 table = Mxfp4Table(w[0]);
    const __m512i wide = _mm512_cvtepu8_epi32(Load128(w + 1));
    Step512(_mm512_permutexvar_ps(wide, table), x, acc);
    Step512(_mm512_permutexvar_ps(_mm512_srli_epi32(wide, 4), table), x + 16, acc);
  }
  SS_FUSED256 void Block256(const uint8_t* w, const uint8_t*, int, const float* x, __m256* acc) {
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m256 table = Mxfp4Table256(kE8M0Half.v[w[0]]);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 1));
    __m256 v[2];
    Mxfp4Values256(_mm_and_si128(q, mask), table, v);
    Step256(v[0], v[1], x, acc);
    Mxfp4Values256(_mm_and_si128(_mm_srli_epi16(q, 4), mask), table, v);
    Step256(v[0], v[1], x + 16, acc);
  }
};
struct KindMxfp4Split {
  static constexpr int kValues = 32, kBytes = 16;
  SS_FUSED512 void Block512(const uint8_t* w, const uint8_t* s, int b, const float* x,
                            __m512& acc) {
    const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i second =
        _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    const __m512 table = Mxfp4Table(s[b]);
    const __m512i wide = _mm512_cvtepu8_epi32(Load128(w));
    const __m512 even = _mm512_permutexvar_ps(wide, table);
    const __m512 odd = _mm512_permutexvar_ps(_mm512_srli_epi32(wide, 4), table);
    Step512(_mm512_permutex2var_ps(even, first, odd), x, acc);
    Step512(_mm512_permutex2var_ps(even, second, odd), x + 16, acc);
  }
  SS_FUSED256 void Block256(const uint8_t* w, const uint8_t* s, int b, const float* x,
                            __m256* acc) {
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m256 table = Mxfp4Table256(kE8M0Half.v[s[b]]);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
    const __m128i lo = _mm_and_si128(q, mask), hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
    __m256 v[2];
    Mxfp4Values256(_mm_unpacklo_epi8(lo, hi), table, v);
    Step256(v[0], v[1], x, acc);
    Mxfp4Values256(_mm_unpackhi_epi8(lo, hi), table, v);
    Step256(v[0], v[1], x + 16, acc);
  }
};
// 32 values q (0..15, a byte each) of a Q4_K sub-block, scale * q - min (StoreQ4KSub's
// arithmetic), multiplied with x[0, 32) as two chunks. Each value goes straight into its FMA: the
// form that kept them in an array of four vectors was spilled to the stack (perf: stores and
// reloads, the loops not unrolled) and ran at a third of this.
SS_FUSED256 __m256 Q4KValues8(__m128i part, __m256 s, __m256 m) {
  return _mm256_sub_ps(_mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(part))), m);
}
SS_FUSED256 void Q4KSub256(__m256i q, float scale, float min, const float* x, __m256* acc) {
  const __m256 s = _mm256_set1_ps(scale), m = _mm256_set1_ps(min);
  const __m128i first = _mm256_castsi256_si128(q), second = _mm256_extracti128_si256(q, 1);
  Step256(Q4KValues8(first, s, m), Q4KValues8(_mm_srli_si128(first, 8), s, m), x, acc);
  Step256(Q4KValues8(second, s, m), Q4KValues8(_mm_srli_si128(second, 8), s, m), x + 16, acc);
}
struct KindQ4_K {
  static constexpr int kValues = 256, kBytes = 144, kParts = 4;
  // d sc_j (j = 0-7) then dmin m_j into st[0, 16): exact products, as the scalar decoder's.
  SS_FUSED512 void Start512(const uint8_t* w, float* st) {
    const __m512 d = _mm512_castpd_ps(
        _mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm256_set1_ps(Half(w)))),
                           _mm256_castps_pd(_mm256_set1_ps(Half(w + 2))), 1));
    _mm512_store_ps(st,
                    _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(Q4KScaleBytes(w)))));
  }
  // Part g: sub-blocks 2 g (the low nibbles of bytes 32 g .. 32 g + 31) and 2 g + 1 (their high
  // nibbles), values 64 g .. 64 g + 63. (Each nibble converted and one FMA d sc q - dmin m, in
  // place of the table's permute, was slower: 8.9-9.9 / 15.6-19.5 GB/s against 10.0-13.0
  // / 18.4-21.0.)
  SS_FUSED512 void Part512(const uint8_t* w, const float* st, int g, const float* x, __m512& acc) {
    const __m512 codes = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 lo = _mm512_sub_ps(_mm512_mul_ps(codes, _mm512_set1_ps(st[2 * g])),
                                    _mm512_set1_ps(st[8 + 2 * g]));
    const __m512 hi = _mm512_sub_ps(_mm512_mul_ps(codes, _mm512_set1_ps(st[2 * g + 1])),
                                    _mm512_set1_ps(st[9 + 2 * g]));
    const __m512i w0 = _mm512_cvtepu8_epi32(Load128(w + 16 + 32 * g));
    const __m512i w1 = _mm512_cvtepu8_epi32(Load128(w + 32 + 32 * g));
    const float* xg = x + 64 * g;
    Step512(_mm512_permutexvar_ps(w0, lo), xg, acc);
    Step512(_mm512_permutexvar_ps(w1, lo), xg + 16, acc);
    Step512(_mm512_permutexvar_ps(_mm512_srli_epi32(w0, 4), hi), xg + 32, acc);
    Step512(_mm512_permutexvar_ps(_mm512_srli_epi32(w1, 4), hi), xg + 48, acc);
  }
  SS_FUSED256 void Block256(const uint8_t* w, const uint8_t*, int, const float* x, __m256* acc) {
    const __m256i mask = _mm256_set1_epi8(0x0F);
    const float d = Half(w), dmin = Half(w + 2);
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      int sc_lo, m_lo, sc_hi, m_hi;
      Q4KScaleMin(2 * g, w + 4, &sc_lo, &m_lo);
      Q4KScaleMin(2 * g + 1, w + 4, &sc_hi, &m_hi);
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 + 32 * g));
      // The sub-block of the low nibbles, then the high ones.
      Q4KSub256(_mm256_and_si256(q, mask), d * static_cast<float>(sc_lo),
                dmin * static_cast<float>(m_lo), x + 64 * g, acc);
      Q4KSub256(_mm256_and_si256(_mm256_srli_epi16(q, 4), mask), d * static_cast<float>(sc_hi),
                dmin * static_cast<float>(m_hi), x + 64 * g + 32, acc);
    }
  }
};
struct KindQ6_K {
  static constexpr int kValues = 256, kBytes = 210, kParts = 2;
  // d sc for the sixteen 16-value sub-blocks into st[0, 16) (exact products).
  SS_FUSED512 void Start512(const uint8_t* w, float* st) {
    _mm512_store_ps(st, _mm512_mul_ps(_mm512_set1_ps(Half(w + 208)),
                                      _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(Load128(w + 192)))));
  }
  // Part h: values 128 h .. 128 h + 127, Q6KHalf's six-bit values built in the 32-bit lanes: the
  // low four bits from ql's bytes, the top two from qh's, each byte widened once as it is loaded
  // (Q6KHalf's 256-bit form took a widening and an extract a 16-value chunk). Then times d sc, the
  // + 0 turning a -0 (q = 0, sc < 0) into +0: the scalar decoder's exact product.
  SS_FUSED512 void Part512(const uint8_t* w, const float* ds, int h, const float* x, __m512& acc) {
    const __m512i low4 = _mm512_set1_epi32(0x0F), top2 = _mm512_set1_epi32(0x30),
                  k32 = _mm512_set1_epi32(32);
    const __m512 zero = _mm512_setzero_ps();
    const uint8_t* ql = w + 64 * h;
    const uint8_t* qh = w + 128 + 32 * h;
    __m512i a[2], c[2], hb[2];  // bytes l and l + 32 of ql, l of qh, l = 16 s + lane
#pragma GCC unroll 2
    for (int s = 0; s < 2; ++s) {
      a[s] = _mm512_cvtepu8_epi32(Load128(ql + 16 * s));
      c[s] = _mm512_cvtepu8_epi32(Load128(ql + 32 + 16 * s));
      hb[s] = _mm512_cvtepu8_epi32(Load128(qh + 16 * s));
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k)
#pragma GCC unroll 2
      for (int s = 0; s < 2; ++s) {
        // Values 32 k + l: ql byte l (k even) or l + 32 (k odd), its low nibble (k < 2) or high
        // one; qh byte l's bits 2 k, 2 k + 1 as bits 4, 5 (ternary logic 0xF8: low | high & 0x30).
        const __m512i src = k % 2 ? c[s] : a[s];
        const __m512i low = k < 2 ? _mm512_and_si512(src, low4) : _mm512_srli_epi32(src, 4);
        const __m512i high =
            k < 2 ? _mm512_slli_epi32(hb[s], 4 - 2 * k) : _mm512_srli_epi32(hb[s], 2 * k - 4);
        const __m512i q = _mm512_sub_epi32(_mm512_ternarylogic_epi32(low, high, top2, 0xF8), k32);
        const __m512 scale = _mm512_set1_ps(ds[8 * h + 2 * k + s]);
        Step512(_mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(q), scale), zero),
                x + 128 * h + 32 * k + 16 * s, acc);
      }
  }
  SS_FUSED256 void Block256(const uint8_t* w, const uint8_t*, int, const float* x, __m256* acc) {
    const __m256 d = _mm256_set1_ps(Half(w + 208));
    const int8_t* sc = reinterpret_cast<const int8_t*>(w + 192);
    for (int h = 0; h < 2; ++h) {
      __m256i q[4];
      Q6KHalf(w, h, q);
      for (int k = 0; k < 4; ++k) {  // StoreQ6KPart's arithmetic: integer products, then times d
        const __m256i lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q[k]));
        const __m256i hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q[k], 1));
        const __m256i p[2] = {_mm256_mullo_epi16(lo, _mm256_set1_epi16(sc[8 * h + 2 * k])),
                              _mm256_mullo_epi16(hi, _mm256_set1_epi16(sc[8 * h + 2 * k + 1]))};
        for (int s = 0; s < 2; ++s)
          Step256(_mm256_mul_ps(
                      d, _mm256_cvtepi32_ps(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(p[s])))),
                  _mm256_mul_ps(d, _mm256_cvtepi32_ps(
                                       _mm256_cvtepi16_epi32(_mm256_extracti128_si256(p[s], 1)))),
                  x + 128 * h + 32 * k + 16 * s, acc);
      }
    }
  }
};

// How many parts a kind's block is taken in (Start512, then Part512 for each part), 1 where the
// kind has Block512 only.
template <class Kind>
constexpr int PartsOf() {
  if constexpr (requires { Kind::kParts; })
    return Kind::kParts;
  else
    return 1;
}

// G rows of W from r0 times x into y[r0 ..] (+ bias). F16 / BF16 rows whose length is not whole
// chunks end with a masked chunk: its missing values are zero, as MatMulDot's padding.
template <class Kind, int G>
__attribute__((target("avx512f,avx2,fma,f16c"))) void RowsTimesX512(const GgmlMatrix& w, int r0,
                                                                    int step, const float* x,
                                                                    float* y, const float* bias) {
  __m512 acc[G];
  const auto& [row, sc] = RowStreamStarts<G>(w, r0, step);
  for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
  const int blocks = w.in / Kind::kValues;
  for (int b = 0; b < blocks; ++b) {
    const float* xb = x + b * Kind::kValues;
    if constexpr (PartsOf<Kind>() > 1) {
      // The rows' parts interleaved: part p of every row, then part p + 1, so that the rows'
      // accumulator chains run side by side (a whole Q4_K block a row before the next row's kept
      // the FMAs waiting on one chain, 16 deep). Each row's FMAs keep their order: the same bits.
      alignas(64) float st[G][16];
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        _mm_prefetch(
            RowAhead(row[g], static_cast<size_t>(b) * Kind::kBytes, w.row_bytes, w.row_stride),
            _MM_HINT_T0);
        Kind::Start512(row[g] + static_cast<size_t>(b) * Kind::kBytes, st[g]);
      }
#pragma GCC unroll 4
      for (int part = 0; part < PartsOf<Kind>(); ++part)
#pragma GCC unroll 4
        for (int g = 0; g < G; ++g)
          Kind::Part512(row[g] + static_cast<size_t>(b) * Kind::kBytes, st[g], part, xb, acc[g]);
    } else {
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        const uint8_t* p = row[g] + static_cast<size_t>(b) * Kind::kBytes;
        _mm_prefetch(
            RowAhead(row[g], static_cast<size_t>(b) * Kind::kBytes, w.row_bytes, w.row_stride),
            _MM_HINT_T0);
        Kind::Block512(p, sc[g], b, xb, acc[g]);
      }
    }
  }
  if (const int tail = w.in - blocks * Kind::kValues; tail > 0) {  // F16 / BF16 only
    alignas(64) float v[16] = {}, xt[16] = {};
    std::copy(x + blocks * Kind::kValues, x + w.in, xt);
    for (int g = 0; g < G; ++g) {
      const uint8_t* p = row[g] + static_cast<size_t>(blocks) * Kind::kBytes;
      for (int i = 0; i < tail; ++i)
        v[i] = std::is_same_v<Kind, KindF16> ? Half(p + 2 * i) : BF16ToF32(LoadU16(p + 2 * i));
      Step512(_mm512_load_ps(v), xt, acc[g]);
    }
  }
  for (int g = 0; g < G; ++g) {
    const float s = Reduce16(acc[g]);
    y[r0 + g * step] = bias ? s + bias[r0 + g * step] : s;
  }
}

// RowsTimesX512<KindMxfp4Split, G> with the VBMI values (Mxfp4SplitValues): its own function, as
// the VBMI instructions need a target the other kinds' kernels must not be compiled for. The same
// arithmetic, so the same bits (tests/test_gemm_ggml.cpp).
template <int G>
SS_VBMI512 void RowsTimesXMxfp4SplitVbmi(const GgmlMatrix& w, int r0, int step, const float* x,
                                         float* y, const float* bias) {
  __m512 acc[G];
  const auto& [row, sc] = RowStreamStarts<G>(w, r0, step);
  for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
  for (int b = 0; b < w.in / 32; ++b) {
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const size_t at = static_cast<size_t>(b) * 16;
      _mm_prefetch(RowAhead(row[g], at, w.row_bytes, w.row_stride), _MM_HINT_T0);
      const __m512 table = Mxfp4Table(sc[g][b]);
      Step512(Mxfp4SplitValues(row[g] + at, table), x + 32 * b, acc[g]);
      Step512(Mxfp4SplitValues(row[g] + at + 8, table), x + 32 * b + 16, acc[g]);
    }
  }
  for (int g = 0; g < G; ++g) {
    const float s = Reduce16(acc[g]);
    y[r0 + g * step] = bias ? s + bias[r0 + g * step] : s;
  }
}

template <class Kind, int G>
__attribute__((target("avx2,fma,f16c"))) void RowsTimesX256(const GgmlMatrix& w, int r0, int step,
                                                            const float* x, float* y,
                                                            const float* bias) {
  __m256 acc[G][2];
  const auto& [row, sc] = RowStreamStarts<G>(w, r0, step);
  for (int g = 0; g < G; ++g) acc[g][0] = acc[g][1] = _mm256_setzero_ps();
  const int blocks = w.in / Kind::kValues;
  for (int b = 0; b < blocks; ++b) {
    const float* xb = x + b * Kind::kValues;
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const uint8_t* p = row[g] + static_cast<size_t>(b) * Kind::kBytes;
      _mm_prefetch(
          RowAhead(row[g], static_cast<size_t>(b) * Kind::kBytes, w.row_bytes, w.row_stride),
          _MM_HINT_T0);
      Kind::Block256(p, sc[g], b, xb, acc[g]);
    }
  }
  if (const int tail = w.in - blocks * Kind::kValues; tail > 0) {  // F16 / BF16 only
    alignas(32) float v[16] = {}, xt[16] = {};
    std::copy(x + blocks * Kind::kValues, x + w.in, xt);
    for (int g = 0; g < G; ++g) {
      const uint8_t* p = row[g] + static_cast<size_t>(blocks) * Kind::kBytes;
      for (int i = 0; i < tail; ++i)
        v[i] = std::is_same_v<Kind, KindF16> ? Half(p + 2 * i) : BF16ToF32(LoadU16(p + 2 * i));
      Step256(_mm256_load_ps(v), _mm256_load_ps(v + 8), xt, acc[g]);
    }
  }
  for (int g = 0; g < G; ++g) {
    const float s = Reduce16(acc[g][0], acc[g][1]);
    y[r0 + g * step] = bias ? s + bias[r0 + g * step] : s;
  }
}

using RowsTimesXFn = void (*)(const GgmlMatrix&, int, int, const float*, float*, const float*);

// A type's one-row kernels at a level: `streams` rows side by side (spaced through a thread's
// rows, ForRowStreams), and one row alone for the rows left over.
struct RowKernelSet {
  int streams = 0;
  RowsTimesXFn many = nullptr, one = nullptr;
  bool empty() const { return one == nullptr; }
};

// Q4_0 and MXFP4 on AVX-512 take four rows at a time: with f32 x each of their 32-value blocks is
// two FMAs on a row's one accumulator chain, so two rows leave the FMA latency, not the memory,
// setting the pace. Measured on the 0.9B Llama shape's decode (Zen 5 EPYC, GB/s of weights, two
// alternating runs, 1 / 2 threads): Q4_0 13.9-14.0 / 21.9-24.5 with two rows against 16.5-17.8 /
// 32.0-32.6 with four, MXFP4 13.2-13.3 / 23.8-25.4 against 16.5-16.6 / 21.5-30.2. Q4_K too, its
// blocks taken in parts across the rows (RowsTimesX512): 7.5-9.7 / 13.6-17.1 with two rows a block
// at a time, 8.2-9.8 / 14.6-17.8 with two in parts, 9.9-12.5 / 18.4-22.4 with four in parts. And
// Q6_K, its values built in 32-bit lanes (Part512): 6.3-8.5 / 10.0-11.3 for the 256-bit decoder two
// rows a block at a time, 8.5-9.8 / 13.0-13.8 for the lanes' decoder so, 8.0-9.8 / 14.3-15.7 with
// four rows in parts (the 256-bit decoder was unchanged with four or in parts). The other types
// stay at two (BF16 and Q8_0 slower on two threads: 42.3-42.4 against 44.0-45.1, 29.0-30.6 against
// 34.1-34.6), and so does AVX2 (two chains a row already; Q4_0 and MXFP4 unchanged with four, Q4_K
// slower in parts: 6.5-6.7 / 9.6-10.0 against 5.1-6.3 / 8.0-8.7).
template <class Kind>
constexpr int kStreams512 = 2;
template <>
constexpr int kStreams512<KindQ4_0> = 4;
template <>
constexpr int kStreams512<KindMxfp4> = 4;
template <>
constexpr int kStreams512<KindMxfp4Split> = 4;
template <>
constexpr int kStreams512<KindQ4_K> = 4;
template <>
constexpr int kStreams512<KindQ6_K> = 4;

template <class Kind>
constexpr RowKernelSet RowsTimesX(bool avx512) {
  if (avx512)
    return {kStreams512<Kind>, RowsTimesX512<Kind, kStreams512<Kind>>, RowsTimesX512<Kind, 1>};
  return {kRowStreams, RowsTimesX256<Kind, kRowStreams>, RowsTimesX256<Kind, 1>};
}

// The kernels for `type` at the active level (avx512 or avx2), or an empty set.
RowKernelSet RowKernels(uint32_t type) {
  if (!Avx2Active()) return {};
  const bool avx512 = ActiveSimdLevel() == SimdLevel::kAvx512;
  switch (type) {
    case kGgmlTypeF16:
      return RowsTimesX<KindF16>(avx512);
    case kGgmlTypeBF16:
      return RowsTimesX<KindBf16>(avx512);
    case kGgmlTypeQ8_0:
      return RowsTimesX<KindQ8_0>(avx512);
    case kGgmlTypeQ4_0:
      return RowsTimesX<KindQ4_0>(avx512);
    case kGgmlTypeQ4_K:
      return RowsTimesX<KindQ4_K>(avx512);
    case kGgmlTypeQ6_K:
      return RowsTimesX<KindQ6_K>(avx512);
    case kGgmlTypeMXFP4:
      return RowsTimesX<KindMxfp4>(avx512);
    case kTypeMxfp4Split:
      if (avx512 && UseVbmi())
        return {kStreams512<KindMxfp4Split>, RowsTimesXMxfp4SplitVbmi<kStreams512<KindMxfp4Split>>,
                RowsTimesXMxfp4SplitVbmi<1>};
      return RowsTimesX<KindMxfp4Split>(avx512);
    default:
      return {};
  }
}

// y (out) = W x (+ bias): each thread a contiguous range of rows, read as ForRowStreams says.
void RowsTimesXAll(const RowKernelSet& kernels, const GgmlMatrix& w, const float* x, float* y,
                   const float* bias) {
#pragma omp parallel if (static_cast <int64_t>(w.in) * w.out >= (int64_t{1} << 16))
  {
    const int threads = omp_get_num_threads(), id = omp_get_thread_num();
    ForRowStreams(
        static_cast<int>(static_cast<int64_t>(w.out) * id / threads),
        static_cast<int>(static_cast<int64_t>(w.out) * (id + 1) / threads),
        [&](int streams, int first, int step) {
          (streams == 1 ? kernels.one : kernels.many)(w, first, step, x, y, bias);
        },
        kernels.streams);
  }
}

// ---- W as MatMulDot reads it: rows [row0, row0 + rows), values [v0, v0 + n) (v0 whole blocks).

// Bytes from a row's start to value v0's block (the split form: to its nibbles).
size_t ValueOffset(const GgmlMatrix& w, int v0) {
  // A row of `in` values is row_bytes bytes of whole blocks, and v0 a whole number of blocks.
  return static_cast<size_t>(v0) * w.row_bytes / static_cast<size_t>(w.in);
}

// Asks for the bytes of values [v0, v0 + n) of row r (or, past the row's end, the first n of row
// r + rows: the row decoded after this block's) to be brought into L1, a line at a time: the
// decoder's stream one value block ahead (n at most kDotKBlockOnePass).
inline void PrefetchNext(const GgmlMatrix& w, int r, int rows, int v0, int n) {
  n = std::min(n, kDotKBlockOnePass);
  const char* p = nullptr;
  size_t begin = 0, end = 0;
  if (v0 < w.in) {
    p = reinterpret_cast<const char*>(w.row(r));
    begin = ValueOffset(w, v0);
    end = std::min(w.row_bytes, ValueOffset(w, std::min(w.in, v0 + n)));
  } else if (r + rows < w.out) {
    p = reinterpret_cast<const char*>(w.row(r + rows));
    end = std::min(w.row_bytes, ValueOffset(w, std::min(w.in, n)));
  }
  for (size_t o = begin; o < end; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
}

template <RowDequant kDecode>
void DecodeRowsWith(const void* ctx, int row0, int rows, int v0, int n, float* dst, int64_t rs,
                    int cs) {
  const GgmlMatrix& w = *static_cast<const GgmlMatrix*>(ctx);
  const size_t offset = ValueOffset(w, v0);
  for (int r = 0; r < rows; ++r) {
    PrefetchNext(w, row0 + r, rows, v0 + n, n);
    kDecode(w.row(row0 + r) + offset,
            w.scales ? w.row_scales(row0 + r) + v0 / kMxfp4Block : nullptr, dst + r * rs, n, cs);
  }
}

// The scalar decoders write plain rows: into scratch, then chunk by chunk where MatMulDot wants
// them.
void DecodeRowsScalar(const void* ctx, int row0, int rows, int v0, int n, float* dst, int64_t rs,
                      int cs) {
  const GgmlMatrix& w = *static_cast<const GgmlMatrix*>(ctx);
  const size_t offset = ValueOffset(w, v0);
  float* row = Workspace<float, 6>(static_cast<size_t>(n));
  for (int r = 0; r < rows; ++r) {
    if (w.type == kTypeMxfp4Split)
      DequantizeMxfp4Split(w.row(row0 + r) + offset, w.row_scales(row0 + r) + v0 / kMxfp4Block, row,
                           n);
    else
      Dequantize(w.type, w.row(row0 + r) + offset, row, n);
    for (int v = 0; v < n; v += 16)
      std::copy(row + v, row + std::min(n, v + 16), At(dst + r * rs, v, cs));
  }
}

// Slice `part` of `parts` of rows [row0, row0 + rows)'s bytes, in memory order, into L2.
void PrefetchRows(const void* ctx, int row0, int rows, int part, int parts) {
  const GgmlMatrix& w = *static_cast<const GgmlMatrix*>(ctx);
  const size_t total = static_cast<size_t>(rows) * w.row_bytes;
  const size_t begin = total * part / parts, end = total * (part + 1) / parts;
  size_t r = begin / w.row_bytes, offset = begin - r * w.row_bytes;
  for (size_t done = begin; done < end && r < static_cast<size_t>(rows); ++r, offset = 0) {
    const char* row = reinterpret_cast<const char*>(w.row(row0 + static_cast<int>(r)));
    const size_t stop = std::min(w.row_bytes, offset + (end - done));
    for (size_t o = offset; o < stop; o += 64) _mm_prefetch(row + o, _MM_HINT_T1);
    done += stop - offset;
  }
}

using RowsDecode = void (*)(const void*, int, int, int, int, float*, int64_t, int);

// DecodeRowsWith<f> for a vector decoder f (DecodeRowsScalar for none).
RowsDecode RowsDecoder(RowDequant f) {
  // A table of one-line cases, laid out by hand.
  // clang-format off
#define SS_CASE(fn) if (f == fn) return DecodeRowsWith<fn>;
  SS_CASE(DecodeF16Avx512) SS_CASE(DecodeBf16Avx512) SS_CASE(DecodeQ8_0Avx512) SS_CASE(DecodeQ4_0Avx512)
  SS_CASE(DecodeQ4_KAvx512) SS_CASE(DecodeQ6_KAvx512) SS_CASE(DecodeMxfp4Avx512) SS_CASE(DecodeMxfp4SplitAvx512)
  SS_CASE(DecodeMxfp4SplitVbmi)
  SS_CASE(DequantF16Avx2) SS_CASE(DequantBf16Avx2) SS_CASE(DequantQ8_0Avx2) SS_CASE(DequantQ4_0Avx2)
  SS_CASE(DequantQ4_KAvx2) SS_CASE(DequantQ6_KAvx2) SS_CASE(DequantMxfp4Avx2) SS_CASE(DequantMxfp4SplitAvx2)
#undef SS_CASE
      // clang-format on
      // A vector decoder missing from the table would fall to the scalar loop unnoticed.
      SS_ASSERT(f == nullptr);
  return DecodeRowsScalar;
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
  m.int8_owner = nullptr;
  m.int8 =
      int8 && first % 16 == 0 ? int8 + static_cast<size_t>(first / 16) * int8_group_bytes : nullptr;
  if (scales) m.scales = row_scales(first);
  return m;
}

GgmlMatrix GgmlView(uint32_t type, int out, int in, const uint8_t* data,
                    std::shared_ptr<const void> owner, int row_step, const uint8_t* scales) {
  if (!GgmlMatMulSupports(type))
    Fail(
        "ggml type {} ({}): no matrix product kernel for it (supported: F16, BF16, Q8_0, Q4_0, "
        "Q4_K, Q6_K, MXFP4)",
        type, GgmlTypeName(type));
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
  if (!VectorRowDecode(type)) return "portable";
  if (type == kTypeMxfp4Split && UseVbmi()) return "avx512_vbmi";
  return ActiveSimdLevel() == SimdLevel::kAvx512 ? "avx512" : "avx2";
}

void AllowVbmiForMxfp4(bool allow) { VbmiAllowed().store(allow, std::memory_order_relaxed); }

namespace {

// Whether any of n 2-byte fields, `stride` bytes apart from p, has all `exponent` bits set. Counted
// over chunks without an early exit, so that the loop vectorises (a 7B BF16 model's 6.7 G values
// are scanned at load); the caller finds the exact place in a chunk that has one.
__attribute__((always_inline)) inline bool AnyAllOnesBody(const uint8_t* p, int64_t n,
                                                          size_t stride, uint16_t exponent) {
  int hits = 0;
  for (int64_t i = 0; i < n; ++i) hits += (LoadU16(p + i * stride) & exponent) == exponent;
  return hits > 0;
}
__attribute__((target("avx2"))) bool AnyAllOnesAvx2(const uint8_t* p, int64_t n, size_t stride,
                                                    uint16_t exponent) {
  return AnyAllOnesBody(p, n, stride, exponent);
}
bool AnyAllOnes(const uint8_t* p, int64_t n, size_t stride, uint16_t exponent) {
  return Avx2FmaActive() ? AnyAllOnesAvx2(p, n, stride, exponent)
                         : AnyAllOnesBody(p, n, stride, exponent);
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
int64_t HalvesFirstNonFinite(const GgmlMatrix& w, int row0, int rows,
                             const std::vector<int>& fields, uint16_t exponent) {
  const int64_t per_block = GgmlBlockValues(w.type);
  const size_t block_bytes = GgmlBlockBytes(w.type);
  const uint8_t* data = w.row(row0);
  const int64_t first = static_cast<int64_t>(row0) * w.in / per_block;
  constexpr int64_t kChunk = 4096;  // blocks
  const int64_t blocks = static_cast<int64_t>(rows) * w.in / per_block;
  for (int64_t c = 0; c < blocks; c += kChunk) {
    const int64_t n = std::min(kChunk, blocks - c);
    bool any = false;
    for (int f : fields)
      any = any || AnyAllOnes(data + c * block_bytes + f, n, block_bytes, exponent);
    if (!any) continue;
    for (int64_t b = c; b < c + n; ++b)
      for (int f : fields)
        if ((LoadU16(data + b * block_bytes + f) & exponent) == exponent)
          return (first + b) * per_block;
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
    case kGgmlTypeBF16:
      exponent = 0x7F80;
      [[fallthrough]];
    case kGgmlTypeF16:
    case kGgmlTypeQ8_0:
    case kGgmlTypeQ4_0:
      fields = {0};
      break;
    case kGgmlTypeQ4_K:
      fields = {0, 2};
      break;
    case kGgmlTypeQ6_K:
      fields = {208};
      break;
    default:
      SS_ASSERT(false);
  }
  // Contiguous rows are scanned as one run of blocks; rows a stride apart one at a time.
  if (w.row_stride == w.row_bytes) return HalvesFirstNonFinite(w, 0, w.out, fields, exponent);
  for (int r = 0; r < w.out; ++r)
    if (const int64_t bad = HalvesFirstNonFinite(w, r, 1, fields, exponent); bad >= 0) return bad;
  return -1;
}

std::string GgmlFaultReason(const GgmlMatrix& w, int64_t element) {
  SS_ASSERT(element >= 0 && element < static_cast<int64_t>(w.out) * w.in);
  const int r = static_cast<int>(element / w.in),
            g = static_cast<int>(element % w.in / kMxfp4Block);
  if (w.type == kTypeMxfp4Split) {
    const uint8_t e = w.row_scales(r)[g];
    const char* why = Mxfp4BlockFault(e, w.row(r) + kMxfp4NibbleBytes * g);
    return fmt::format("holds a bad MXFP4 block, block {} of row {} (scale byte 0x{:02X}): {}", g,
                       r, e, why ? why : "?");
  }
  if (w.type == kGgmlTypeMXFP4) {
    const uint8_t* block = w.row(r) + 17 * g;
    const char* why = Mxfp4BlockFault(block[0], block + 1);
    return fmt::format("holds a bad MXFP4 block, block {} of row {} (scale byte 0x{:02X}): {}", g,
                       r, block[0], why ? why : "?");
  }
  return fmt::format("holds a non-finite value or scale at element {}", element);
}

void DequantizeGgmlRows(const GgmlMatrix& w, int row0, int rows, float* dst) {
  SS_ASSERT(row0 >= 0 && rows >= 0 && row0 + rows <= w.out);
  if (const RowDequant vector = VectorRowDecode(w.type)) {
    for (int r = 0; r < rows; ++r)
      vector(w.row(row0 + r), w.scales ? w.row_scales(row0 + r) : nullptr,
             dst + static_cast<int64_t>(r) * w.in, w.in, kDotChunk);
    return;
  }
  for (int r = 0; r < rows; ++r)
    DequantizeRowScalar(w, row0 + r, dst + static_cast<int64_t>(r) * w.in);
}

namespace {

// The types with int8 products, and the choice for each (SetGgmlActivations).
constexpr uint32_t kInt8Types[] = {kGgmlTypeQ4_0, kGgmlTypeQ4_K,  kGgmlTypeQ6_K,
                                   kGgmlTypeQ8_0, kGgmlTypeMXFP4, kTypeMxfp4Split};
constexpr const char* kInt8TypeNames[] = {"q4_0", "q4_k", "q6_k", "q8_0", "mxfp4", "mxfp4"};
constexpr int kInt8Slots = 6;

int Int8Slot(uint32_t type) {
  for (int i = 0; i < kInt8Slots; ++i)
    if (kInt8Types[i] == type) return i;
  return -1;
}

std::atomic<bool>* Int8Chosen() {
  static std::atomic<bool> chosen[kInt8Slots] = {};
  static const bool initialised = [] {
    const char* env = std::getenv("SINKSCOPE_INT8_ACTIVATIONS");
    const std::string list = env ? std::string(",") + env + "," : "";
    for (int i = 0; i < kInt8Slots; ++i)
      chosen[i] = list == ",all," ||
                  list.find(std::string(",") + kInt8TypeNames[i] + ",") != std::string::npos;
    return true;
  }();
  (void)initialised;
  return chosen;
}

}  // namespace

void SetGgmlActivations(uint32_t type, GgmlActivations activations) {
  const int slot = Int8Slot(type);
  if (slot < 0) return;  // f32 is all such a type has
  Int8Chosen()[slot].store(activations == GgmlActivations::kInt8, std::memory_order_relaxed);
}

GgmlActivations GgmlActivationsFor(uint32_t type) {
  const int slot = Int8Slot(type);
  return slot >= 0 && Int8Chosen()[slot].load(std::memory_order_relaxed) && Int8Supported(type)
             ? GgmlActivations::kInt8
             : GgmlActivations::kF32;
}

void SetGgmlActivationsForAll(GgmlActivations activations) {
  for (uint32_t type : kInt8Types) SetGgmlActivations(type, activations);
}

std::string Int8ActivationTypes() {
  std::string names;
  // The split MXFP4 form shares the GGUF form's choice and name.
  for (uint32_t type : {kGgmlTypeQ4_0, kGgmlTypeQ4_K, kGgmlTypeQ6_K, kGgmlTypeQ8_0, kGgmlTypeMXFP4})
    if (GgmlActivationsFor(type) == GgmlActivations::kInt8)
      names += (names.empty() ? "" : ", ") + std::string(GgmlTypeName(type));
  return names;
}

const char* Int8ActivationsKernel() { return Int8KernelName(); }

std::string GgmlActivationsName(uint32_t type) {
  return GgmlActivationsFor(type) == GgmlActivations::kInt8
             ? std::string("int8 (") + Int8KernelName() + ")"
             : std::string("f32");
}

void MatMulGgml(const float* x, const GgmlMatrix& w, const float* bias, float* y, int T) {
  SS_ASSERT(T >= 0 && !w.empty());
  // Q8_0's int8 products run on packed rows (the loader packs them); rows as stored keep x in f32.
  if (GgmlActivationsFor(w.type) == GgmlActivations::kInt8 && Int8RunsOn(w)) {
    MatMulGgmlInt8(x, w, bias, y, T);
    return;
  }
  if (T == 1) {
    if (const RowKernelSet kernels = RowKernels(w.type); !kernels.empty()) {
      RowsTimesXAll(kernels, w, x, y, bias);
      return;
    }
  }
  DotWeights dot;
  dot.out = w.out;
  dot.in = w.in;
  dot.decode = RowsDecoder(VectorRowDecode(w.type));
  dot.ctx = &w;
  dot.prefetch = PrefetchRows;
  MatMulDot(x, dot, bias, y, T);
}

void MatMulGgmlPair(const float* x, const GgmlMatrix& a, const float* bias_a, float* ya,
                    const GgmlMatrix& b, const float* bias_b, float* yb) {
  const bool alternate = a.type == b.type && a.out == b.out && a.in == b.in &&
                         a.row_stride == 2 * a.row_bytes && b.row_stride == a.row_stride &&
                         b.data == a.data + a.row_bytes && a.int8 == nullptr && b.int8 == nullptr &&
                         (a.scales == nullptr ? b.scales == nullptr
                                              : b.scales == a.scales + a.scale_stride / 2 &&
                                                    b.scale_stride == a.scale_stride);
  if (!alternate) {
    MatMulGgml(x, a, bias_a, ya, 1);
    MatMulGgml(x, b, bias_b, yb, 1);
    return;
  }
  GgmlMatrix both = a;
  both.out = 2 * a.out;
  both.row_stride = a.row_bytes;
  both.scale_stride = a.scale_stride / 2;
  float* y = Workspace<float, 24>(static_cast<size_t>(both.out));
  MatMulGgml(x, both, nullptr, y, 1);
  // The bias added after the split: the same single rounded addition as the row kernels' s + bias.
  for (int i = 0; i < a.out; ++i) {
    ya[i] = bias_a ? y[2 * i] + bias_a[i] : y[2 * i];
    yb[i] = bias_b ? y[2 * i + 1] + bias_b[i] : y[2 * i + 1];
  }
}

}  // namespace ss
