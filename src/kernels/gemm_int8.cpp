#include "kernels/gemm_int8.h"

#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "common/error.h"
#include "kernels/dequant.h"
#include "kernels/gemm_bf16.h"
#include "kernels/simd.h"
#include "kernels/vecmath.h"
#include "kernels/workspace.h"
#include "tensor/half.h"

namespace ss {

namespace {

#define SS_I512 __attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma,f16c,avxvnni")))
#define SS_I256 __attribute__((target("avx2,fma,f16c,avxvnni")))
#define SS_I512_INLINE                                                        \
  __attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma,f16c,avxvnni"), \
                 always_inline)) static inline
#define SS_I256_INLINE __attribute__((target("avx2,fma,f16c,avxvnni"), always_inline)) static inline

constexpr int kBlock = 32;  // values of x per int8 block (and per lane group of 8 lanes)

uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// ---- x, a row at a time: for each pair of 32-value blocks, its 64 int8 values in the order the
// weight kind multiplies them (Arrangement), then 16 lanes of dx (each lane's block's scale) and
// 16 lanes of -o times the sum of each 4 values (the lanes VPDPBUSD forms; where o = 0, Q4_K, the
// sums themselves, for its dmin m term), the rows padded to a whole number of block pairs with
// zeros.
struct XRows {
  int pairs = 0;                  // block pairs per row
  const int8_t* q = nullptr;      // rows of pairs * 64 bytes
  const float* dx = nullptr;      // rows of pairs * 16 floats
  const int32_t* sums = nullptr;  // rows of pairs * 16 int32: -o * (sum of 4 q), or the sum (o = 0)
  const int8_t* qrow(int t) const { return q + static_cast<int64_t>(t) * pairs * 64; }
  const float* dxrow(int t) const { return dx + static_cast<int64_t>(t) * pairs * 16; }
  const int32_t* sumrow(int t) const { return sums + static_cast<int64_t>(t) * pairs * 16; }
};

// Where value v of block h (0: the pair's first, 1: its second) goes in the pair's 64 bytes.
enum class Arrangement {
  kPlain,   // block 2p's 32 values, then block 2p + 1's (Q4_K's and Q6_K's 32-byte groups)
  kHalves,  // values 0-15 of each block, then 16-31 of each (Q4_0's and MXFP4's low and high
            // nibbles)
  kSplit,   // the even values of each block, then the odd ones (the split MXFP4 form's nibbles)
};
int Position(Arrangement a, int h, int v) {
  switch (a) {
    case Arrangement::kPlain:
      return 32 * h + v;
    case Arrangement::kHalves:
      return (v / 16) * 32 + 16 * h + v % 16;
    case Arrangement::kSplit:
      return (v % 2) * 32 + 16 * h + v / 2;
  }
  return 0;
}

// One block of x: q (32 int8, in order) and dx. AVX2: |x| by masking the sign, the maximum by
// halving, q = x * (127 / max) converted with the default rounding (nearest, ties to even).
SS_I256 float QuantizeBlock(const float* x, int8_t* q) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 m = _mm256_and_ps(_mm256_loadu_ps(x), abs_mask);
  for (int i = 8; i < kBlock; i += 8)
    m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  const float amax = _mm_cvtss_f32(h);
  const __m256 inv = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
  for (int i = 0; i < kBlock; i += 8) {
    alignas(32) int32_t v[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(v),
                       _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), inv)));
    for (int k = 0; k < 8; ++k) q[i + k] = static_cast<int8_t>(v[k]);
  }
  return amax / 127.0f;
}

XRows QuantizeX(const float* x, int T, int in, int offset, Arrangement arrangement) {
  XRows r;
  const int blocks = in / kBlock;
  r.pairs = (blocks + 1) / 2;
  const size_t values = static_cast<size_t>(T) * r.pairs * 64;
  int8_t* q = Workspace<int8_t, 20>(values);
  float* dx = Workspace<float, 21>(values / 4);
  int32_t* sums = Workspace<int32_t, 22>(values / 4);
  for (int t = 0; t < T; ++t) {
    const float* xt = x + static_cast<int64_t>(t) * in;
    for (int p = 0; p < r.pairs; ++p) {
      const int64_t at = static_cast<int64_t>(t) * r.pairs + p;
      int8_t* qp = q + at * 64;
      float block_dx[2] = {0.0f, 0.0f};
      for (int h = 0; h < 2; ++h) {
        alignas(32) int8_t natural[kBlock] = {};
        if (2 * p + h < blocks) block_dx[h] = QuantizeBlock(xt + (2 * p + h) * kBlock, natural);
        for (int v = 0; v < kBlock; ++v) qp[Position(arrangement, h, v)] = natural[v];
      }
      for (int l = 0; l < 16; ++l) {
        // Lane l's 4 values come from one block: the second for lanes 8-15 (kPlain), or 4-7 and
        // 12-15 (the others).
        dx[at * 16 + l] = block_dx[arrangement == Arrangement::kPlain ? l / 8 : (l / 4) % 2];
        const int32_t sum = qp[4 * l] + qp[4 * l + 1] + qp[4 * l + 2] + qp[4 * l + 3];
        sums[at * 16 + l] = offset > 0 ? -offset * sum : sum;
      }
    }
  }
  r.q = q;
  r.dx = dx;
  r.sums = sums;
  return r;
}

// ---- The lane step: acc (+)= float(u . q - o sum) * (w_scale * dx) (the integer part exact in
// any order: VPDPBUSD starts from -o sum), and Q4_K's offset term.

std::atomic<bool> avx_vnni_allowed{true};

bool CpuHasAvxVnni() {
  static const bool has = [] {
    // AVX-VNNI is CPUID leaf 7, sub-leaf 1, EAX bit 4 (Intel SDM vol. 2A, CPUID); asked directly
    // because clang 14's __builtin_cpu_supports does not know the name. Its VEX forms use the ymm
    // state, which the AVX2 path this serves has already required.
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) != 0 && (a >> 4 & 1) != 0;
  }();
  return has && avx_vnni_allowed.load(std::memory_order_relaxed);
}

// kOffset: start from the (negated offset) sums; Q4_K's codes have no offset.
template <bool kOffset = true>
SS_I512_INLINE void Step512(__m512i u, const int8_t* q, const int32_t* sums, const float* dx,
                            __m512 w_scale, __m512& acc) {
  const __m512i start = kOffset ? _mm512_loadu_si512(sums) : _mm512_setzero_si512();
  const __m512i p = _mm512_dpbusd_epi32(start, u, _mm512_loadu_si512(q));
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(w_scale, _mm512_loadu_ps(dx)), acc);
}
SS_I512_INLINE void Offset512(const int32_t* sums, const float* dx, __m512 w_min, __m512& acc) {
  acc = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(sums)),
                         _mm512_mul_ps(w_min, _mm512_loadu_ps(dx)), acc);
}
// The AVX2 form: VPDPBUSD on ymm where the CPU has AVX-VNNI, else VPMADDUBSW (pairs of products in
// 16 bits: at most 2 x 63 x 127, no saturation) and VPMADDWD: the same exact sums.
template <bool kOffset = true, bool kVnni = false>
SS_I256_INLINE void Step256(__m256i u, const int8_t* q, const int32_t* sums, const float* dx,
                            __m256 w_scale, __m256& acc) {
  const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  const __m256i start =
      kOffset ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums)) : _mm256_setzero_si256();
  __m256i p;
  if constexpr (kVnni) {
    p = _mm256_dpbusd_avx_epi32(start, u, xq);
  } else {
    p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, xq), _mm256_set1_epi16(1));
    if constexpr (kOffset) p = _mm256_add_epi32(p, start);
  }
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_mul_ps(w_scale, _mm256_loadu_ps(dx)), acc);
}
SS_I256_INLINE void Offset256(const int32_t* sums, const float* dx, __m256 w_min, __m256& acc) {
  acc = _mm256_fnmadd_ps(
      _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums))),
      _mm256_mul_ps(w_min, _mm256_loadu_ps(dx)), acc);
}

// Two blocks' 16 bytes of nibbles, q0 and q1, as [q0 low | q1 low] and [q0 high | q1 high] (the
// kHalves / kSplit arrangement of the pair's values).
SS_I256_INLINE void Nibbles(__m128i q0, __m128i q1, __m256i* lo, __m256i* hi) {
  const __m256i both = _mm256_set_m128i(q1, q0), mask = _mm256_set1_epi8(0x0F);
  *lo = _mm256_and_si256(both, mask);
  *hi = _mm256_and_si256(_mm256_srli_epi16(both, 4), mask);
}

// MXFP4 codes as u = doubled value + 12 (0 .. 24; code 8, -0, gives 12).
SS_I256_INLINE __m256i Mxfp4Bytes() {
  return _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0, 12, 13, 14, 15,
                          16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
}

// The AVX-512 form of a whole pair: u as one vector, [q0 low | q1 low | q0 high | q1 high]
// nibbles (Nibbles512), and the two blocks' scales (each kind's Scale: a table load) in their
// lanes (PairScale512). The same lanes as Pair + PairScales512 give, in 4 + 1 vector instructions
// (two of them, VINSERTI128 from memory and VINSERTI64X4, on the shuffle port) where those take
// 12, most of them there (VINSERTI128, VPINSRW, VCVTPH2PS, VINSERTI64X4, VPERMPS).
SS_I512_INLINE __m512i Nibbles512(const uint8_t* q0, const uint8_t* q1) {
  const __m256i both = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q0))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(q1)), 1);
  const __m512i twice = _mm512_inserti64x4(_mm512_castsi256_si512(both), both, 1);
  return _mm512_and_si512(_mm512_mask_srli_epi16(twice, 0xFFFF0000u, twice, 4),
                          _mm512_set1_epi8(0x0F));
}
SS_I512_INLINE __m512 PairScale512(float d0, float d1) {
  return _mm512_mask_mov_ps(_mm512_set1_ps(d0), 0xF0F0, _mm512_set1_ps(d1));
}
// ---- The 32-value kinds: for block pair p of a row (w at the row; s: the split form's scales),
// its u bytes in the kind's arrangement as two halves (lanes 0-7 and 8-15) and the two blocks'
// scales in lanes 0 and 1 (kSecond false: a row's odd last block alone; the second's codes and
// scale 0).
struct KindQ4_0 {
  static constexpr int kOffset = 8, kBytes = 18;
  static constexpr Arrangement kArrangement = Arrangement::kHalves;
  template <bool kSecond>
  SS_I256_INLINE void Pair(const uint8_t* w, const uint8_t*, int p, __m256i* lo, __m256i* hi,
                           __m128* d) {
    const uint8_t* b = w + static_cast<size_t>(2 * p) * kBytes;
    const __m128i q1 = kSecond ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + kBytes + 2))
                               : _mm_setzero_si128();
    Nibbles(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)), q1, lo, hi);
    __m128i h = _mm_cvtsi32_si128(LoadU16(b));
    if constexpr (kSecond) h = _mm_insert_epi16(h, LoadU16(b + kBytes), 1);
    *d = _mm_cvtph_ps(h);
  }
  // Block k's scale, from the table (a load, no conversion in registers).
  static float Scale(const uint8_t* w, const uint8_t*, int k) {
    return kF16AsF32.v[LoadU16(w + static_cast<size_t>(k) * kBytes)];
  }
  SS_I512_INLINE __m512i Codes512(const uint8_t* w, const uint8_t*, int p) {
    const uint8_t* b = w + static_cast<size_t>(2 * p) * kBytes;
    return Nibbles512(b + 2, b + kBytes + 2);
  }
};

template <bool kSplit>
struct KindMxfp4 {
  static constexpr int kOffset = 12, kBytes = kSplit ? 16 : 17;
  static constexpr Arrangement kArrangement = kSplit ? Arrangement::kSplit : Arrangement::kHalves;
  template <bool kSecond>
  SS_I256_INLINE void Pair(const uint8_t* w, const uint8_t* s, int p, __m256i* lo, __m256i* hi,
                           __m128* d) {
    const uint8_t* b = w + static_cast<size_t>(2 * p) * kBytes;
    const uint8_t* n = b + (kSplit ? 0 : 1);
    const __m128i q1 = kSecond ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(n + kBytes))
                               : _mm_setzero_si128();
    __m256i c_lo, c_hi;
    Nibbles(_mm_loadu_si128(reinterpret_cast<const __m128i*>(n)), q1, &c_lo, &c_hi);
    *lo = _mm256_shuffle_epi8(Mxfp4Bytes(), c_lo);
    *hi = _mm256_shuffle_epi8(Mxfp4Bytes(), c_hi);
    const float d0 = kE8M0Half.v[kSplit ? s[2 * p] : b[0]];
    const float d1 = kSecond ? kE8M0Half.v[kSplit ? s[2 * p + 1] : b[kBytes]] : 0.0f;
    *d = _mm_setr_ps(d0, d1, 0.0f, 0.0f);
  }
  static float Scale(const uint8_t* w, const uint8_t* s, int k) {
    return kE8M0Half.v[kSplit ? s[k] : w[static_cast<size_t>(k) * kBytes]];
  }
  SS_I512_INLINE __m512i Codes512(const uint8_t* w, const uint8_t*, int p) {
    const uint8_t* n = w + static_cast<size_t>(2 * p) * kBytes + (kSplit ? 0 : 1);
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm256_castsi256_si128(Mxfp4Bytes())),
                               Nibbles512(n, n + kBytes));
  }
};

// Lanes 0-3 and 8-11 hold a pair's first block's values, 4-7 and 12-15 the second's.
SS_I512_INLINE __m512 PairScales512(__m128 d) {
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1),
                               _mm512_castps128_ps512(d));
}
SS_I256_INLINE __m256 PairScales256(__m128 d) {
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(d),
                                  _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}

template <class Kind, bool kSecond, int G>
SS_I512_INLINE void Pair512(const uint8_t* const* row, const uint8_t* const* sc, int p,
                            const XRows& x, int t, size_t row_bytes, size_t row_stride,
                            __m512* acc) {
  const int8_t* q = x.qrow(t) + 64 * p;
  const float* dx = x.dxrow(t) + 16 * p;
  const int32_t* sums = x.sumrow(t) + 16 * p;
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) {
    _mm_prefetch(RowAhead(row[g], static_cast<size_t>(2 * p) * Kind::kBytes, row_bytes, row_stride),
                 _MM_HINT_T0);
    if constexpr (kSecond) {
      Step512(
          Kind::Codes512(row[g], sc[g], p), q, sums, dx,
          PairScale512(Kind::Scale(row[g], sc[g], 2 * p), Kind::Scale(row[g], sc[g], 2 * p + 1)),
          acc[g]);
    } else {  // a row's odd last block
      __m256i lo, hi;
      __m128 d;
      Kind::template Pair<kSecond>(row[g], sc[g], p, &lo, &hi, &d);
      Step512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), q, sums, dx, PairScales512(d),
              acc[g]);
    }
  }
}

template <class Kind, int G>
SS_I512 void Rows32x512(const GgmlMatrix& w, int r0, int step, const XRows& x, int t, float* y,
                        const float* bias) {
  const int blocks = w.in / kBlock;
  __m512 acc[G];
  const auto& [row, sc] = RowStreamStarts<G>(w, r0, step);
  for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
  for (int p = 0; p < blocks / 2; ++p)
    Pair512<Kind, true, G>(row, sc, p, x, t, w.row_bytes, w.row_stride, acc);
  if (blocks % 2)
    Pair512<Kind, false, G>(row, sc, blocks / 2, x, t, w.row_bytes, w.row_stride, acc);
  for (int g = 0; g < G; ++g) {
    const float s = Reduce16(acc[g]);
    y[r0 + g * step] = bias ? s + bias[r0 + g * step] : s;
  }
}

template <class Kind, bool kSecond, int G, bool kVnni>
SS_I256_INLINE void Pair256(const uint8_t* const* row, const uint8_t* const* sc, int p,
                            const XRows& x, int t, size_t row_bytes, size_t row_stride,
                            __m256 (*acc)[2]) {
  const int8_t* q = x.qrow(t) + 64 * p;
  const float* dx = x.dxrow(t) + 16 * p;
  const int32_t* sums = x.sumrow(t) + 16 * p;
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) {
    _mm_prefetch(RowAhead(row[g], static_cast<size_t>(2 * p) * Kind::kBytes, row_bytes, row_stride),
                 _MM_HINT_T0);
    __m256i lo, hi;
    __m128 d;
    Kind::template Pair<kSecond>(row[g], sc[g], p, &lo, &hi, &d);
    // A whole pair's scales as two broadcast loads and a blend (the lanes PairScales256 gives).
    const __m256 scale =
        kSecond ? _mm256_blend_ps(_mm256_set1_ps(Kind::Scale(row[g], sc[g], 2 * p)),
                                  _mm256_set1_ps(Kind::Scale(row[g], sc[g], 2 * p + 1)), 0xF0)
                : PairScales256(d);
    Step256<true, kVnni>(lo, q, sums, dx, scale, acc[g][0]);
    Step256<true, kVnni>(hi, q + 32, sums + 8, dx + 8, scale, acc[g][1]);
  }
}

template <class Kind, int G, bool kVnni>
SS_I256 void Rows32x256(const GgmlMatrix& w, int r0, int step, const XRows& x, int t, float* y,
                        const float* bias) {
  const int blocks = w.in / kBlock;
  __m256 acc[G][2];
  const auto& [row, sc] = RowStreamStarts<G>(w, r0, step);
  for (int g = 0; g < G; ++g) acc[g][0] = acc[g][1] = _mm256_setzero_ps();
  for (int p = 0; p < blocks / 2; ++p)
    Pair256<Kind, true, G, kVnni>(row, sc, p, x, t, w.row_bytes, w.row_stride, acc);
  if (blocks % 2)
    Pair256<Kind, false, G, kVnni>(row, sc, blocks / 2, x, t, w.row_bytes, w.row_stride, acc);
  for (int g = 0; g < G; ++g) {
    const float s = Reduce16(acc[g][0], acc[g][1]);
    y[r0 + g * step] = bias ? s + bias[r0 + g * step] : s;
  }
}

// ---- Q4_K: super-blocks of 256 values (kernels/dequant.h), four block pairs each: group g's
// 32 bytes hold sub-block 2g in their low nibbles and 2g + 1 in their high ones.

// Q4_K's eight d sc_j (lanes 0-7) and dmin m_j (lanes 8-15) of a super-block: exact products.
SS_I512_INLINE __m512 Q4KScales512(const uint8_t* w) {
  const __m512 ints = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(Q4KScaleBytes(w)));
  const __m512 d = _mm512_castpd_ps(_mm512_insertf64x4(
      _mm512_castps_pd(_mm512_castps256_ps512(_mm256_set1_ps(_cvtsh_ss(LoadU16(w))))),
      _mm256_castps_pd(_mm256_set1_ps(_cvtsh_ss(LoadU16(w + 2)))), 1));
  return _mm512_mul_ps(d, ints);
}
SS_I256_INLINE void Q4KScales256(const uint8_t* w, __m256* ds, __m256* dm) {
  const __m128i bytes = Q4KScaleBytes(w);
  *ds = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(LoadU16(w))),
                      _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)));
  *dm = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(LoadU16(w + 2))),
                      _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8))));
}

template <int G>
SS_I512 void RowsQ4_Kx512(const GgmlMatrix& w, int r0, int step, const XRows& x, int t, float* y,
                          const float* bias) {
  __m512 acc[G];
  const uint8_t* row[G];
  for (int g = 0; g < G; ++g) {
    acc[g] = _mm512_setzero_ps();
    row[g] = w.row(r0 + g * step);
  }
  const int8_t* q = x.qrow(t);
  const float* dx = x.dxrow(t);
  const int32_t* sums = x.sumrow(t);
  for (int b = 0; b < w.in / 256; ++b) {
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const uint8_t* p = row[g] + static_cast<size_t>(b) * 144;
      _mm_prefetch(RowAhead(row[g], static_cast<size_t>(b) * 144, w.row_bytes, w.row_stride),
                   _MM_HINT_T0);
      _mm_prefetch(RowAhead(row[g], static_cast<size_t>(b) * 144 + 64, w.row_bytes, w.row_stride),
                   _MM_HINT_T0);
      const __m512 all = Q4KScales512(p);  // ds, then dm
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {  // block pair 4 b + k: sub-blocks 2k, 2k + 1
        // The group's 32 bytes twice (a broadcast load), the second copy's high nibbles.
        const __m512i twice = _mm512_broadcast_i64x4(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16 + 32 * k)));
        const __m512i u = _mm512_and_si512(_mm512_mask_srli_epi16(twice, 0xFFFF0000u, twice, 4),
                                           _mm512_set1_epi8(0x0F));
        const int pair = 4 * b + k;
        const __m512i scale_at =
            _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(2 * k), _mm512_set1_epi32(2 * k + 1));
        const __m512i min_at = _mm512_add_epi32(scale_at, _mm512_set1_epi32(8));
        Step512<false>(u, q + 64 * pair, sums + 16 * pair, dx + 16 * pair,
                       _mm512_permutexvar_ps(scale_at, all), acc[g]);
        Offset512(sums + 16 * pair, dx + 16 * pair, _mm512_permutexvar_ps(min_at, all), acc[g]);
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    const float s = Reduce16(acc[g]);
    y[r0 + g * step] = bias ? s + bias[r0 + g * step] : s;
  }
}

template <int G, bool kVnni>
SS_I256 void RowsQ4_Kx256(const GgmlMatrix& w, int r0, int step, const XRows& x, int t, float* y,
                          const float* bias) {
  __m256 acc[G][2];
  const uint8_t* row[G];
  for (int g = 0; g < G; ++g) {
    acc[g][0] = acc[g][1] = _mm256_setzero_ps();
    row[g] = w.row(r0 + g * step);
  }
  const int8_t* q = x.qrow(t);
  const float* dx = x.dxrow(t);
  const int32_t* sums = x.sumrow(t);
  const __m256i mask = _mm256_set1_epi8(0x0F);
  for (int b = 0; b < w.in / 256; ++b) {
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const uint8_t* p = row[g] + static_cast<size_t>(b) * 144;
      _mm_prefetch(RowAhead(row[g], static_cast<size_t>(b) * 144, w.row_bytes, w.row_stride),
                   _MM_HINT_T0);
      _mm_prefetch(RowAhead(row[g], static_cast<size_t>(b) * 144 + 64, w.row_bytes, w.row_stride),
                   _MM_HINT_T0);
      __m256 ds, dm;
      Q4KScales256(p, &ds, &dm);
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16 + 32 * k));
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {  // block 8 b + 2k + h: lanes 0-7 (h = 0) or 8-15 of its pair
          const int block = 8 * b + 2 * k + h;
          const __m256i u = h ? _mm256_and_si256(_mm256_srli_epi16(bytes, 4), mask)
                              : _mm256_and_si256(bytes, mask);
          const __m256i at = _mm256_set1_epi32(2 * k + h);
          Step256<false, kVnni>(u, q + 32 * block, sums + 8 * block, dx + 8 * block,
                                _mm256_permutevar8x32_ps(ds, at), acc[g][h]);
          Offset256(sums + 8 * block, dx + 8 * block, _mm256_permutevar8x32_ps(dm, at), acc[g][h]);
        }
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    const float s = Reduce16(acc[g][0], acc[g][1]);
    y[r0 + g * step] = bias ? s + bias[r0 + g * step] : s;
  }
}

// ---- Q6_K: super-blocks of 256 values (kernels/dequant.h) in two halves of four 32-value blocks;
// u = the six-bit q (0 .. 63), offset 32; each 16 values' int8 scale sc gives its four lanes d sc.

// Half h of a Q6_K super-block as four vectors of 32 six-bit values (0 .. 63), in order.
SS_I256_INLINE void Q6KHalfUnsigned(const uint8_t* w, int h, __m256i q[4]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
  const uint8_t* ql = w + 64 * h;
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
  const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
  const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 128 + 32 * h));
  // Bits 2k, 2k + 1 of each byte of hb, moved to bits 4 and 5 (the values' high bits).
  const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4);
  const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m2), 4);
  const __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m2), 4);
  const __m256i h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m2), 4);
  q[0] = _mm256_or_si256(_mm256_and_si256(a, m4), h0);
  q[1] = _mm256_or_si256(_mm256_and_si256(c, m4), h1);
  q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), h2);
  q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), m4), h3);
}

// The same values as Q6KHalfUnsigned, as its two block pairs [q0 | q1] and [q2 | q3], built in
// 512-bit registers: ql's 64 bytes (a | c) as one load, hb's 32 twice (a broadcast load), each
// half's high bits moved by a shift of its own (masked), low nibble and high bits merged by one
// VPTERNLOGD; no VINSERTI64X4 (the shuffle port).
SS_I512_INLINE void Q6KHalfUnsigned512(const uint8_t* w, int h, __m512i v[2]) {
  const __m512i ac = _mm512_loadu_si512(w + 64 * h);
  const __m512i hb = _mm512_broadcast_i64x4(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 128 + 32 * h)));
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  // Bits 0-1 (a's values) and 2-3 (c's) of hb to bits 4-5; then bits 4-5 and 6-7.
  const __m512i h01 =
      _mm512_and_si512(_mm512_mask_slli_epi16(_mm512_slli_epi16(hb, 4), 0xFFFF0000u, hb, 2), m30);
  const __m512i h23 = _mm512_and_si512(_mm512_mask_srli_epi16(hb, 0xFFFF0000u, hb, 2), m30);
  // (x & 0x0F) | high: VPTERNLOGD's function 0xEA of (x, m4, high).
  v[0] = _mm512_ternarylogic_epi32(ac, m4, h01, 0xEA);
  v[1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(ac, 4), m4, h23, 0xEA);
}

template <int G>
SS_I512 void RowsQ6_Kx512(const GgmlMatrix& w, int r0, int step, const XRows& x, int t, float* y,
                          const float* bias) {
  __m512 acc[G];
  const uint8_t* row[G];
  for (int g = 0; g < G; ++g) {
    acc[g] = _mm512_setzero_ps();
    row[g] = w.row(r0 + g * step);
  }
  const int8_t* q = x.qrow(t);
  const float* dx = x.dxrow(t);
  const int32_t* sums = x.sumrow(t);
  for (int b = 0; b < w.in / 256; ++b) {
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const uint8_t* p = row[g] + static_cast<size_t>(b) * 210;
      for (int o = 0; o < 210; o += 64)
        _mm_prefetch(RowAhead(row[g], static_cast<size_t>(b) * 210 + o, w.row_bytes, w.row_stride),
                     _MM_HINT_T0);
      // d sc for the sixteen 16-value sub-blocks: exact products.
      const __m512 all = _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(LoadU16(p + 208))),
                                       _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                                           reinterpret_cast<const __m128i*>(p + 192)))));
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        __m512i v[2];
        Q6KHalfUnsigned512(p, h, v);
#pragma GCC unroll 2
        for (int k = 0; k < 2;
             ++k) {  // block pair 4 b + 2 h + k: values 64 k .. 64 k + 63 of the half
          const __m512i u = v[k];
          const int base = 8 * h + 4 * k;  // its four 16-value sub-blocks
          const __m512i idx = _mm512_setr_epi32(base, base, base, base, base + 1, base + 1,
                                                base + 1, base + 1, base + 2, base + 2, base + 2,
                                                base + 2, base + 3, base + 3, base + 3, base + 3);
          const int pair = 4 * b + 2 * h + k;
          Step512(u, q + 64 * pair, sums + 16 * pair, dx + 16 * pair,
                  _mm512_permutexvar_ps(idx, all), acc[g]);
        }
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    const float s = Reduce16(acc[g]);
    y[r0 + g * step] = bias ? s + bias[r0 + g * step] : s;
  }
}

template <int G, bool kVnni>
SS_I256 void RowsQ6_Kx256(const GgmlMatrix& w, int r0, int step, const XRows& x, int t, float* y,
                          const float* bias) {
  __m256 acc[G][2];
  const uint8_t* row[G];
  for (int g = 0; g < G; ++g) {
    acc[g][0] = acc[g][1] = _mm256_setzero_ps();
    row[g] = w.row(r0 + g * step);
  }
  const int8_t* q = x.qrow(t);
  const float* dx = x.dxrow(t);
  const int32_t* sums = x.sumrow(t);
  for (int b = 0; b < w.in / 256; ++b) {
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const uint8_t* p = row[g] + static_cast<size_t>(b) * 210;
      for (int o = 0; o < 210; o += 64)
        _mm_prefetch(RowAhead(row[g], static_cast<size_t>(b) * 210 + o, w.row_bytes, w.row_stride),
                     _MM_HINT_T0);
      const __m256 d = _mm256_set1_ps(_cvtsh_ss(LoadU16(p + 208)));
      const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192));
      const __m256 ds[2] = {
          _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))),
          _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8))))};
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        __m256i v[4];
        Q6KHalfUnsigned(p, h, v);
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {  // block 8 b + 4 h + k: sub-blocks 8 h + 2 k, + 1
          const int block = 8 * b + 4 * h + k;
          const __m256 scale = _mm256_permutevar8x32_ps(
              ds[h], _mm256_setr_epi32(2 * k, 2 * k, 2 * k, 2 * k, 2 * k + 1, 2 * k + 1, 2 * k + 1,
                                       2 * k + 1));
          Step256<true, kVnni>(v[k], q + 32 * block, sums + 8 * block, dx + 8 * block, scale,
                               acc[g][k % 2]);
        }
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    const float s = Reduce16(acc[g][0], acc[g][1]);
    y[r0 + g * step] = bias ? s + bias[r0 + g * step] : s;
  }
}

// ---- The packed rows (PackForInt8; the layout in kernels/gemm_int8.h): group g's block b at
// p + b * kPackedBlockBytes, each of its 16 rows in a lane of its own.

// x a row at a time in its natural order: per 32-value block its 32 int8 values, dx, and the sum
// of the 32 (for the codes' offset o the integer sum starts from -o times it; Q4_K's dmin term).
struct XBlocks {
  int blocks = 0;
  const int8_t* q = nullptr;      // rows of blocks * 32
  const float* dx = nullptr;      // rows of blocks
  const int32_t* sum = nullptr;   // rows of blocks
  const int32_t* half = nullptr;  // rows of blocks: the sum of each block's first 16 (Q6_K)
  struct RowView {
    const int8_t* q;
    const float* dx;
    const int32_t* sum;
    const int32_t* half;
  };
  // Row t of x: its blocks' values, scales, sums and first-half sums.
  RowView Row(int t) const {
    const size_t at = static_cast<size_t>(t) * blocks;
    return {q + at * kBlock, dx + at, sum + at, half + at};
  }
};

XBlocks QuantizeXBlocks(const float* x, int T, int in) {
  XBlocks r;
  r.blocks = in / kBlock;
  const size_t n = static_cast<size_t>(T) * r.blocks;
  int8_t* q = Workspace<int8_t, 20>(n * kBlock);
  float* dx = Workspace<float, 21>(n);
  int32_t* sums = Workspace<int32_t, 22>(n);
  int32_t* halves = Workspace<int32_t, 23>(n);
  for (size_t i = 0; i < n; ++i) {
    dx[i] = QuantizeBlock(x + i * kBlock, q + i * kBlock);
    int32_t half = 0, sum = 0;
    for (int v = 0; v < kBlock / 2; ++v) half += q[i * kBlock + v];
    for (int v = kBlock / 2; v < kBlock; ++v) sum += q[i * kBlock + v];
    halves[i] = half;
    sums[i] = half + sum;
  }
  r.q = q;
  r.dx = dx;
  r.sum = sums;
  r.half = halves;
  return r;
}

int32_t LoadI32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The software prefetch distance of the packed stream: 4 KiB (14 blocks) ahead. One thread's rows
// are one contiguous stream, so the distance is in the same stream; measured on the 2-core Xeon
// (Q4_0 4096 rows x 2048, from memory) against 1 and 8 KiB: 1 KiB left 10 % of the reads' rate.
constexpr int kPackedAhead = 4096;
// Asks for the `bytes` (a multiple of 64) at kPackedAhead past `at`.
__attribute__((always_inline)) inline void PrefetchPackedAhead(const uint8_t* at, int bytes) {
  for (int o = 0; o < bytes; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(at) + kPackedAhead + o, _MM_HINT_T0);
}

// A packed block's bytes: Q4_0's f16 scales take 2 bytes a row, MXFP4's E8M0 bytes one.
constexpr int PackedBlockBytes(bool mx) { return mx ? kPackedMxBlockBytes : kPackedBlockBytes; }

// w_scale * dx for the 16 rows of a packed block (s: its scales). MXFP4: 2^s dx by VSCALEFPS,
// one rounding of the exact product as the f32 product of dx and 2^s (the bf16 table value the
// unpacked kernels take) rounds it, subnormal results included; Q4_0: the f16 d times dx.
template <bool kMx>
SS_I512_INLINE __m512 PackedScaleDx512(const uint8_t* s, float dx) {
  if constexpr (kMx)
    return _mm512_scalef_ps(_mm512_set1_ps(dx),
                            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
                                _mm_loadu_si128(reinterpret_cast<const __m128i*>(s)))));
  return _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s))),
                       _mm512_set1_ps(dx));
}

// The same for 8 rows on AVX2 (no VSCALEFPS): 2^s as the exponent field s + 127, exact for
// s >= -126. A matrix with a smaller s (E8M0 0 or 1: 2^s subnormal; int8_subnormal_scales) runs
// with kTiny, where a block with one takes its 2^s from the table (`tiny`): the same bits. The
// test a block cost the others a tenth to a fifth of AVX2's MXFP4 decode, so they skip it.
template <bool kMx, bool kTiny>
SS_I256_INLINE __m256 PackedScaleDx256(const uint8_t* s, __m256 dxb, bool tiny) {
  if constexpr (kMx) {
    if (kTiny && tiny) {
      alignas(32) float v[8];
      for (int i = 0; i < 8; ++i) v[i] = kE8M0Half.v[static_cast<uint8_t>(s[i] + 128)];
      return _mm256_mul_ps(_mm256_load_ps(v), dxb);
    }
    const __m256i e = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s)));
    return _mm256_mul_ps(
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23)),
        dxb);
  }
  return _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s))), dxb);
}

// A group's 16 outputs for one row of x. kMx: MXFP4 (codes through the table, E8M0 scales) else
// Q4_0 (codes as they are, f16 scales). Q4_0's high nibbles are multiplied in place (v & 0xF0: 16
// times the code; VPDPBUSD's products stay below 2^31) and the sum shifted back, exact. The
// blocks' loop unrolled four times (here and in PackedGroup256; each block's steps unchanged, so
// the same bits): 0.9B Llama shape's decode from memory, int8 x, Zen 5 EPYC, GB/s of weights,
// three alternating runs, 1 / 2 threads: Q4_0 18.1-25.6 / 30.7-34.1 -> 23.2-26.1 / 37.8-39.0,
// MXFP4 16.9-19.0 / 26.1-32.7 -> 21.0-22.6 / 33.4-35.2; on AVX2 Q4_0 15.9-18.9 / 22.4-23.3 ->
// 20.5-21.6 / 28.9-35.9, MXFP4 15.7-17.6 / 27.7-28.8 -> 18.9-19.9 / 32.9-34.1 (unrolled twice: no
// change; eight times: as four). Q8_0's packed loop so: no change, left as it was.
template <bool kMx>
SS_I512 void PackedGroup512(const uint8_t* p, const XBlocks& x, int t, float* out) {
  const auto [q, dx, sum, half] = x.Row(t);
  constexpr int kOffset = kMx ? 12 : 8, kBytes = PackedBlockBytes(kMx);
  const __m512i m4 = _mm512_set1_epi8(0x0F), m4h = _mm512_set1_epi8(static_cast<char>(0xF0));
  const __m512i lut = _mm512_broadcast_i32x4(_mm256_castsi256_si128(Mxfp4Bytes()));
  __m512 acc = _mm512_setzero_ps();
#pragma GCC unroll 4
  for (int b = 0; b < x.blocks; ++b) {
    const uint8_t* d = p + static_cast<size_t>(b) * kBytes;
    PrefetchPackedAhead(d, kBytes);
    const int8_t* xb = q + b * kBlock;
    __m512i a0 = _mm512_set1_epi32(-kOffset * sum[b]), a1 = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int m = 0; m < 4; ++m) {
      const __m512i v = _mm512_loadu_si512(d + 64 * m);
      const __m512i x_lo = _mm512_set1_epi32(LoadI32(xb + 8 * m)),
                    x_hi = _mm512_set1_epi32(LoadI32(xb + 8 * m + 4));
      if constexpr (kMx) {
        a0 = _mm512_dpbusd_epi32(a0, _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m4)), x_lo);
        a1 = _mm512_dpbusd_epi32(
            a1, _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4)), x_hi);
      } else {
        a0 = _mm512_dpbusd_epi32(a0, _mm512_and_si512(v, m4), x_lo);
        a1 = _mm512_dpbusd_epi32(a1, _mm512_and_si512(v, m4h), x_hi);
      }
    }
    const __m512i s =
        kMx ? _mm512_add_epi32(a0, a1) : _mm512_add_epi32(a0, _mm512_srai_epi32(a1, 4));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), PackedScaleDx512<kMx>(d + kPackedCodeBytes, dx[b]),
                          acc);
  }
  _mm512_storeu_ps(out, acc);
}

// The same in two halves of 8 rows (bytes 32 h .. 32 h + 31 of each 64): the same integer sums
// (VPDPBUSD where the CPU has AVX-VNNI, else VPMADDUBSW + VPMADDWD: each pair of products at most
// 2 x 24 x 127, no saturation) and the same f32 steps in each lane, so the same bits.
template <bool kMx, bool kVnni, bool kTiny = false>
SS_I256 void PackedGroup256(const uint8_t* p, const XBlocks& x, int t, float* out) {
  const auto [q, dx, sum, half] = x.Row(t);
  constexpr int kOffset = kMx ? 12 : 8, kBytes = PackedBlockBytes(kMx), kScaleBytes = kMx ? 1 : 2;
  const __m256i m4 = _mm256_set1_epi8(0x0F), lut = Mxfp4Bytes();
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
#pragma GCC unroll 4
  for (int b = 0; b < x.blocks; ++b) {
    const uint8_t* d = p + static_cast<size_t>(b) * kBytes;
    PrefetchPackedAhead(d, kBytes);
    const int8_t* xb = q + b * kBlock;
    const __m256 dxb = _mm256_set1_ps(dx[b]);
    bool tiny = false;
    if constexpr (kTiny)
      tiny = _mm_movemask_epi8(_mm_cmpgt_epi8(
                 _mm_set1_epi8(-126),
                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(d + kPackedCodeBytes)))) != 0;
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i a0 = _mm256_set1_epi32(-kOffset * sum[b]), a1 = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int m = 0; m < 4; ++m) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d + 64 * m + 32 * h));
        __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if constexpr (kMx) {
          lo = _mm256_shuffle_epi8(lut, lo);
          hi = _mm256_shuffle_epi8(lut, hi);
        }
        const __m256i x_lo = _mm256_set1_epi32(LoadI32(xb + 8 * m)),
                      x_hi = _mm256_set1_epi32(LoadI32(xb + 8 * m + 4));
        if constexpr (kVnni) {
          a0 = _mm256_dpbusd_avx_epi32(a0, lo, x_lo);
          a1 = _mm256_dpbusd_avx_epi32(a1, hi, x_hi);
        } else {
          const __m256i ones = _mm256_set1_epi16(1);
          a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x_lo), ones));
          a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x_hi), ones));
        }
      }
      acc[h] = _mm256_fmadd_ps(
          _mm256_cvtepi32_ps(_mm256_add_epi32(a0, a1)),
          PackedScaleDx256<kMx, kTiny>(d + kPackedCodeBytes + 8 * kScaleBytes * h, dxb, tiny),
          acc[h]);
    }
  }
  _mm256_storeu_ps(out, acc[0]);
  _mm256_storeu_ps(out + 8, acc[1]);
}

// Q4_K's packed super-blocks (kPackedQ4KBytes each, kernels/gemm_int8.h): per 32-value
// sub-block j, acc = fma(float(s), d sc_j dx, acc), then acc = fnmadd(float(sum of q), dmin m_j
// dx, acc): d sc_j and dmin m_j exact products, as the unpacked kernels form them.
SS_I512 void PackedGroupQ4K512(const uint8_t* p, const XBlocks& x, int t, float* out) {
  const auto [q, dx, sum, half] = x.Row(t);
  const __m512i m4 = _mm512_set1_epi8(0x0F), m4h = _mm512_set1_epi8(static_cast<char>(0xF0));
  __m512 acc = _mm512_setzero_ps();
  for (int sb = 0; sb < x.blocks / 8; ++sb) {
    const uint8_t* d = p + static_cast<size_t>(sb) * kPackedQ4KBytes;
    const __m512 dd =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(d + kPackedQ4KScales)));
    const __m512 dm = _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d + kPackedQ4KScales + 32)));
#pragma GCC unroll 2
    for (int j = 0; j < 8; ++j) {
      PrefetchPackedAhead(d + 320 * j, 320);  // 8 x 320 bytes: the whole super-block's
      const int b = 8 * sb + j;
      const uint8_t* c = d + kPackedCodeBytes * j;
      const int8_t* xb = q + b * kBlock;
      __m512i a0 = _mm512_setzero_si512(), a1 = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int m = 0; m < 4; ++m) {
        const __m512i v = _mm512_loadu_si512(c + 64 * m);
        a0 = _mm512_dpbusd_epi32(a0, _mm512_and_si512(v, m4),
                                 _mm512_set1_epi32(LoadI32(xb + 8 * m)));
        a1 = _mm512_dpbusd_epi32(a1, _mm512_and_si512(v, m4h),
                                 _mm512_set1_epi32(LoadI32(xb + 8 * m + 4)));
      }
      const __m512i s = _mm512_add_epi32(a0, _mm512_srai_epi32(a1, 4));
      const __m512 dxb = _mm512_set1_ps(dx[b]);
      const __m512 sc = _mm512_mul_ps(
          dd, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                  reinterpret_cast<const __m128i*>(d + kPackedQ4KScales + 64 + 16 * j)))));
      const __m512 mn = _mm512_mul_ps(
          dm, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                  reinterpret_cast<const __m128i*>(d + kPackedQ4KScales + 192 + 16 * j)))));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(sc, dxb), acc);
      acc =
          _mm512_fnmadd_ps(_mm512_set1_ps(static_cast<float>(sum[b])), _mm512_mul_ps(mn, dxb), acc);
    }
  }
  _mm512_storeu_ps(out, acc);
}

template <bool kVnni>
SS_I256 void PackedGroupQ4K256(const uint8_t* p, const XBlocks& x, int t, float* out) {
  const auto [q, dx, sum, half] = x.Row(t);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int sb = 0; sb < x.blocks / 8; ++sb) {
    const uint8_t* d = p + static_cast<size_t>(sb) * kPackedQ4KBytes;
    for (int j = 0; j < 8; ++j) {
      PrefetchPackedAhead(d + 320 * j, 320);
      const int b = 8 * sb + j;
      const uint8_t* c = d + kPackedCodeBytes * j;
      const int8_t* xb = q + b * kBlock;
      const __m256 dxb = _mm256_set1_ps(dx[b]);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        __m256i a0 = _mm256_setzero_si256(), a1 = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int m = 0; m < 4; ++m) {
          const __m256i v =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 64 * m + 32 * h));
          const __m256i lo = _mm256_and_si256(v, m4),
                        hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
          const __m256i x_lo = _mm256_set1_epi32(LoadI32(xb + 8 * m)),
                        x_hi = _mm256_set1_epi32(LoadI32(xb + 8 * m + 4));
          if constexpr (kVnni) {
            a0 = _mm256_dpbusd_avx_epi32(a0, lo, x_lo);
            a1 = _mm256_dpbusd_avx_epi32(a1, hi, x_hi);
          } else {
            const __m256i ones = _mm256_set1_epi16(1);
            a0 = _mm256_add_epi32(a0, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x_lo), ones));
            a1 = _mm256_add_epi32(a1, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x_hi), ones));
          }
        }
        const uint8_t* sd = d + kPackedQ4KScales;
        const __m256 dd =
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sd + 16 * h)));
        const __m256 dm =
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sd + 32 + 16 * h)));
        const __m256 sc = _mm256_mul_ps(
            dd, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                    _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sd + 64 + 16 * j + 8 * h)))));
        const __m256 mn = _mm256_mul_ps(
            dm, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(
                    _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sd + 192 + 16 * j + 8 * h)))));
        acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(a0, a1)),
                                 _mm256_mul_ps(sc, dxb), acc[h]);
        acc[h] = _mm256_fnmadd_ps(_mm256_set1_ps(static_cast<float>(sum[b])),
                                  _mm256_mul_ps(mn, dxb), acc[h]);
      }
    }
  }
  _mm256_storeu_ps(out, acc[0]);
  _mm256_storeu_ps(out + 8, acc[1]);
}

// Q6_K's packed super-blocks (kPackedQ6KBytes each, kernels/gemm_int8.h). A code byte's 64
// lanes are 4 quarters of 16 (a 128-bit lane each); the 16 bytes of high bits, broadcast to the
// four, rotated right in each 32-bit word by 28, 30, 0, 2 bits (quarter q's bits 2 q, 2 q + 1 to
// bits 4, 5) and masked, join the low nibbles in one VPTERNLOGD.
SS_I512 void PackedGroupQ6K512(const uint8_t* p, const XBlocks& x, int t, float* out) {
  const auto [q, dx, sum, half] = x.Row(t);
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  const __m512i rot = _mm512_set_epi32(2, 2, 2, 2, 0, 0, 0, 0, 30, 30, 30, 30, 28, 28, 28, 28);
  __m512 acc = _mm512_setzero_ps();
  for (int sb = 0; sb < x.blocks / 8; ++sb) {
    const uint8_t* d = p + static_cast<size_t>(sb) * kPackedQ6KBytes;
    const uint8_t* sd = d + kPackedQ6KScales;
    const __m512 dd = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sd)));
#pragma GCC unroll 2
    for (int j = 0; j < 8; ++j) {
      PrefetchPackedAhead(d + kPackedQ6KBlockBytes * j, kPackedQ6KBlockBytes);
      const int b = 8 * sb + j;
      const uint8_t* c = d + kPackedQ6KBlockBytes * j;
      const int8_t* xb = q + b * kBlock;
      // Sub-block A (values 0-15: steps 0, 1) and B (16-31: steps 2, 3), low and high nibbles.
      __m512i a_lo = _mm512_set1_epi32(-32 * half[b]), a_hi = _mm512_setzero_si512();
      __m512i b_lo = _mm512_set1_epi32(-32 * (sum[b] - half[b])), b_hi = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int m = 0; m < 4; ++m) {
        const __m512i v = _mm512_loadu_si512(c + 64 * m);
        const uint8_t* hb = c + kPackedCodeBytes + 32 * m;
        const __m512i h_lo = _mm512_and_si512(
            _mm512_rorv_epi32(
                _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hb))), rot),
            m30);
        const __m512i h_hi = _mm512_and_si512(
            _mm512_rorv_epi32(
                _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hb + 16))),
                rot),
            m30);
        const __m512i lo = _mm512_ternarylogic_epi32(v, m4, h_lo, 0xEA),
                      hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), m4, h_hi, 0xEA);
        const __m512i x_lo = _mm512_set1_epi32(LoadI32(xb + 8 * m)),
                      x_hi = _mm512_set1_epi32(LoadI32(xb + 8 * m + 4));
        if (m < 2) {
          a_lo = _mm512_dpbusd_epi32(a_lo, lo, x_lo);
          a_hi = _mm512_dpbusd_epi32(a_hi, hi, x_hi);
        } else {
          b_lo = _mm512_dpbusd_epi32(b_lo, lo, x_lo);
          b_hi = _mm512_dpbusd_epi32(b_hi, hi, x_hi);
        }
      }
      const __m512i sc_a =
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sd + 32 + 32 * j)));
      const __m512i sc_b =
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sd + 48 + 32 * j)));
      const __m512i s = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_add_epi32(a_lo, a_hi), sc_a),
                                         _mm512_mullo_epi32(_mm512_add_epi32(b_lo, b_hi), sc_b));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dd, _mm512_set1_ps(dx[b])), acc);
    }
  }
  _mm512_storeu_ps(out, acc);
}

// The same in two halves of 8 rows (quarters 2 h and 2 h + 1 of each code byte's 64): the high
// bits shifted down in each 32-bit word by 2 q (AVX2 has no rotate), masked, shifted up by 4.
template <bool kVnni>
SS_I256 void PackedGroupQ6K256(const uint8_t* p, const XBlocks& x, int t, float* out) {
  const auto [q, dx, sum, half] = x.Row(t);
  const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int sb = 0; sb < x.blocks / 8; ++sb) {
    const uint8_t* d = p + static_cast<size_t>(sb) * kPackedQ6KBytes;
    const uint8_t* sd = d + kPackedQ6KScales;
    for (int j = 0; j < 8; ++j) {
      PrefetchPackedAhead(d + kPackedQ6KBlockBytes * j, kPackedQ6KBlockBytes);
      const int b = 8 * sb + j;
      const uint8_t* c = d + kPackedQ6KBlockBytes * j;
      const int8_t* xb = q + b * kBlock;
      const __m256 dxb = _mm256_set1_ps(dx[b]);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i shift = _mm256_setr_epi32(4 * h, 4 * h, 4 * h, 4 * h, 4 * h + 2, 4 * h + 2,
                                                4 * h + 2, 4 * h + 2);
        __m256i a_lo = _mm256_set1_epi32(-32 * half[b]), a_hi = _mm256_setzero_si256();
        __m256i b_lo = _mm256_set1_epi32(-32 * (sum[b] - half[b])), b_hi = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int m = 0; m < 4; ++m) {
          const __m256i v =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 64 * m + 32 * h));
          const uint8_t* hb = c + kPackedCodeBytes + 32 * m;
          const __m256i h_lo = _mm256_slli_epi32(
              _mm256_and_si256(_mm256_srlv_epi32(_mm256_broadcastsi128_si256(_mm_loadu_si128(
                                                     reinterpret_cast<const __m128i*>(hb))),
                                                 shift),
                               m3),
              4);
          const __m256i h_hi = _mm256_slli_epi32(
              _mm256_and_si256(_mm256_srlv_epi32(_mm256_broadcastsi128_si256(_mm_loadu_si128(
                                                     reinterpret_cast<const __m128i*>(hb + 16))),
                                                 shift),
                               m3),
              4);
          const __m256i lo = _mm256_or_si256(_mm256_and_si256(v, m4), h_lo),
                        hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), h_hi);
          const __m256i x_lo = _mm256_set1_epi32(LoadI32(xb + 8 * m)),
                        x_hi = _mm256_set1_epi32(LoadI32(xb + 8 * m + 4));
          __m256i& s_lo = m < 2 ? a_lo : b_lo;
          __m256i& s_hi = m < 2 ? a_hi : b_hi;
          if constexpr (kVnni) {
            s_lo = _mm256_dpbusd_avx_epi32(s_lo, lo, x_lo);
            s_hi = _mm256_dpbusd_avx_epi32(s_hi, hi, x_hi);
          } else {
            const __m256i ones = _mm256_set1_epi16(1);
            s_lo = _mm256_add_epi32(s_lo, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, x_lo), ones));
            s_hi = _mm256_add_epi32(s_hi, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, x_hi), ones));
          }
        }
        const __m256i sc_a = _mm256_cvtepi8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sd + 32 + 32 * j + 8 * h)));
        const __m256i sc_b = _mm256_cvtepi8_epi32(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sd + 48 + 32 * j + 8 * h)));
        const __m256i s = _mm256_add_epi32(_mm256_mullo_epi32(_mm256_add_epi32(a_lo, a_hi), sc_a),
                                           _mm256_mullo_epi32(_mm256_add_epi32(b_lo, b_hi), sc_b));
        const __m256 dd =
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sd + 16 * h)));
        acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dd, dxb), acc[h]);
      }
    }
  }
  _mm256_storeu_ps(out, acc[0]);
  _mm256_storeu_ps(out + 8, acc[1]);
}

// Q8_0's packed blocks (kPackedQ80Bytes each): 8 steps of 4 codes of the 16 rows, the sum
// started from -128 (sum of q). AVX2 without AVX-VNNI multiplies the signed codes c (u - 128) by
// VPSIGNB and VPMADDUBSW on |c| (each pair of products at most 2 x 128 x 127, no saturation),
// starting from 0: the same exact sums.
SS_I512 void PackedGroupQ80_512(const uint8_t* p, const XBlocks& x, int t, float* out) {
  const auto [q, dx, sum, half] = x.Row(t);
  __m512 acc = _mm512_setzero_ps();
  for (int b = 0; b < x.blocks; ++b) {
    const uint8_t* d = p + static_cast<size_t>(b) * kPackedQ80Bytes;
    PrefetchPackedAhead(d, kPackedQ80Bytes);
    const int8_t* xb = q + b * kBlock;
    __m512i a0 = _mm512_set1_epi32(-128 * sum[b]), a1 = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int m = 0; m < 8; m += 2) {
      a0 = _mm512_dpbusd_epi32(a0, _mm512_loadu_si512(d + 64 * m),
                               _mm512_set1_epi32(LoadI32(xb + 4 * m)));
      a1 = _mm512_dpbusd_epi32(a1, _mm512_loadu_si512(d + 64 * m + 64),
                               _mm512_set1_epi32(LoadI32(xb + 4 * m + 4)));
    }
    const __m512 scale =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(d + 512)));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a0, a1)),
                          _mm512_mul_ps(scale, _mm512_set1_ps(dx[b])), acc);
  }
  _mm512_storeu_ps(out, acc);
}

template <bool kVnni>
SS_I256 void PackedGroupQ80_256(const uint8_t* p, const XBlocks& x, int t, float* out) {
  const auto [q, dx, sum, half] = x.Row(t);
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80)), ones = _mm256_set1_epi16(1);
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int b = 0; b < x.blocks; ++b) {
    const uint8_t* d = p + static_cast<size_t>(b) * kPackedQ80Bytes;
    PrefetchPackedAhead(d, kPackedQ80Bytes);
    const int8_t* xb = q + b * kBlock;
    const __m256 dxb = _mm256_set1_ps(dx[b]);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i a0 = kVnni ? _mm256_set1_epi32(-128 * sum[b]) : _mm256_setzero_si256(),
              a1 = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int m = 0; m < 8; ++m) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d + 64 * m + 32 * h));
        const __m256i xm = _mm256_set1_epi32(LoadI32(xb + 4 * m));
        __m256i& a = m % 2 ? a1 : a0;
        if constexpr (kVnni) {
          a = _mm256_dpbusd_avx_epi32(a, v, xm);
        } else {
          const __m256i c = _mm256_xor_si256(v, flip);
          a = _mm256_add_epi32(
              a, _mm256_madd_epi16(
                     _mm256_maddubs_epi16(_mm256_abs_epi8(c), _mm256_sign_epi8(xm, c)), ones));
        }
      }
      const __m256 scale =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(d + 512 + 16 * h)));
      acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(a0, a1)),
                               _mm256_mul_ps(scale, dxb), acc[h]);
    }
  }
  _mm256_storeu_ps(out, acc[0]);
  _mm256_storeu_ps(out + 8, acc[1]);
}

using PackedGroupFn = void (*)(const uint8_t*, const XBlocks&, int, float*);

// ---- Dispatch.

using RowsFn = void (*)(const GgmlMatrix&, int, int, const XRows&, int, float*, const float*);
struct Kernels {
  RowsFn fn[kRowStreams + 1] = {};
  int offset = 0;
  Arrangement arrangement = Arrangement::kPlain;
};

bool CpuHasAvx512Vnni() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vnni");
  }();
  return has;
}

bool Use512() { return ActiveSimdLevel() == SimdLevel::kAvx512 && CpuHasAvx512Vnni(); }

// RowsFn for G = 1 .. kRowStreams from a template taking <G, (AVX2 only) VNNI>.
template <template <int> class F>
void Fill(Kernels& k) {
  static_assert(kRowStreams == 2);
  k.fn[1] = F<1>::fn;
  k.fn[2] = F<2>::fn;
}
template <class Kind>
struct R32x512 {
  template <int G>
  struct F {
    static constexpr RowsFn fn = Rows32x512<Kind, G>;
  };
};
template <class Kind, bool V>
struct R32x256 {
  template <int G>
  struct F {
    static constexpr RowsFn fn = Rows32x256<Kind, G, V>;
  };
};
template <int G>
struct RQ4Kx512 {
  static constexpr RowsFn fn = RowsQ4_Kx512<G>;
};
template <bool V>
struct RQ4Kx256 {
  template <int G>
  struct F {
    static constexpr RowsFn fn = RowsQ4_Kx256<G, V>;
  };
};
template <int G>
struct RQ6Kx512 {
  static constexpr RowsFn fn = RowsQ6_Kx512<G>;
};
template <bool V>
struct RQ6Kx256 {
  template <int G>
  struct F {
    static constexpr RowsFn fn = RowsQ6_Kx256<G, V>;
  };
};

template <class Kind>
void FillKind(Kernels& k, bool avx512, bool vnni) {
  if (avx512)
    Fill<R32x512<Kind>::template F>(k);
  else if (vnni)
    Fill<R32x256<Kind, true>::template F>(k);
  else
    Fill<R32x256<Kind, false>::template F>(k);
  k.offset = Kind::kOffset;
  k.arrangement = Kind::kArrangement;
}

Kernels KernelsFor(uint32_t type) {
  Kernels k;
  if (ActiveSimdLevel() == SimdLevel::kPortable) return k;
  const bool avx512 = Use512(), vnni = CpuHasAvxVnni();
  switch (type) {
    case kGgmlTypeQ4_0:
      FillKind<KindQ4_0>(k, avx512, vnni);
      break;
    case kGgmlTypeMXFP4:
      FillKind<KindMxfp4<false>>(k, avx512, vnni);
      break;
    case kTypeMxfp4Split:
      FillKind<KindMxfp4<true>>(k, avx512, vnni);
      break;
    case kGgmlTypeQ4_K:
      if (avx512)
        Fill<RQ4Kx512>(k);
      else if (vnni)
        Fill<RQ4Kx256<true>::template F>(k);
      else
        Fill<RQ4Kx256<false>::template F>(k);
      k.offset = 0;  // no offset: the sums themselves, for the dmin m term
      break;
    case kGgmlTypeQ6_K:
      if (avx512)
        Fill<RQ6Kx512>(k);
      else if (vnni)
        Fill<RQ6Kx256<true>::template F>(k);
      else
        Fill<RQ6Kx256<false>::template F>(k);
      k.offset = 32;
      break;
    default:
      break;
  }
  return k;
}

}  // namespace

void AllowAvxVnniForInt8(bool allow) { avx_vnni_allowed.store(allow, std::memory_order_relaxed); }

bool Int8Supported(uint32_t type) {
  return ActiveSimdLevel() != SimdLevel::kPortable && Int8PackSupports(type);
}

bool Int8RunsOn(const GgmlMatrix& w) {
  return Int8Supported(w.type) && (w.int8 != nullptr || KernelsFor(w.type).fn[1] != nullptr);
}

const char* Int8KernelName() {
  if (ActiveSimdLevel() == SimdLevel::kPortable) return "none";
  return Use512() ? "avx512_vnni" : CpuHasAvxVnni() ? "avx_vnni" : "avx2";
}

namespace {

bool IsMxfp4(uint32_t type) { return type == kGgmlTypeMXFP4 || type == kTypeMxfp4Split; }

PackedGroupFn PackedKernel(uint32_t type, bool subnormal_scales) {
  if (type == kGgmlTypeQ4_K)
    return Use512()          ? PackedGroupQ4K512
           : CpuHasAvxVnni() ? PackedGroupQ4K256<true>
                             : PackedGroupQ4K256<false>;
  if (type == kGgmlTypeQ8_0)
    return Use512()          ? PackedGroupQ80_512
           : CpuHasAvxVnni() ? PackedGroupQ80_256<true>
                             : PackedGroupQ80_256<false>;
  if (type == kGgmlTypeQ6_K)
    return Use512()          ? PackedGroupQ6K512
           : CpuHasAvxVnni() ? PackedGroupQ6K256<true>
                             : PackedGroupQ6K256<false>;
  const bool mx = IsMxfp4(type);
  if (Use512()) return mx ? PackedGroup512<true> : PackedGroup512<false>;
  if (mx && subnormal_scales)
    return CpuHasAvxVnni() ? PackedGroup256<true, true, true> : PackedGroup256<true, false, true>;
  if (CpuHasAvxVnni()) return mx ? PackedGroup256<true, true> : PackedGroup256<false, true>;
  return mx ? PackedGroup256<true, false> : PackedGroup256<false, false>;
}

void MatMulPacked(const float* x, const GgmlMatrix& w, const float* bias, float* y, int T) {
  const PackedGroupFn kernel = PackedKernel(w.type, w.int8_subnormal_scales);
  const XBlocks xb = QuantizeXBlocks(x, T, w.in);
  const int groups = (w.out + kPackedRows - 1) / kPackedRows;
#pragma omp parallel if (static_cast <int64_t>(T) * w.in * w.out >= (int64_t{1} << 16))
  {
    const int threads = omp_get_num_threads(), id = omp_get_thread_num();
    const int g0 = static_cast<int>(static_cast<int64_t>(groups) * id / threads);
    const int g1 = static_cast<int>(static_cast<int64_t>(groups) * (id + 1) / threads);
    alignas(64) float out[kPackedRows];
    for (int g = g0; g < g1; ++g) {
      const int r0 = g * kPackedRows, n = std::min(kPackedRows, w.out - r0);
      const uint8_t* p = w.int8 + static_cast<size_t>(g) * w.int8_group_bytes;
      for (int t = 0; t < T; ++t) {
        kernel(p, xb, t, out);
        float* yt = y + static_cast<int64_t>(t) * w.out + r0;
        for (int i = 0; i < n; ++i) yt[i] = bias ? out[i] + bias[r0 + i] : out[i];
      }
    }
  }
}

}  // namespace

bool Int8PackSupports(uint32_t type) {
  return type == kGgmlTypeQ4_0 || type == kGgmlTypeQ4_K || type == kGgmlTypeQ6_K ||
         type == kGgmlTypeQ8_0 || IsMxfp4(type);
}

namespace {

uint32_t LoadU32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void StoreU32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }

constexpr uint32_t kLowNibbles = 0x0F0F0F0F;

// One packed code word (4 bytes of a row in one step; kernels/gemm_int8.h: codes 8 k + j in the low
// nibbles, 8 k + 4 + j in the high ones) from the 8 bytes at p whose low (`high` false) or high
// nibbles are the step's 8 codes in order.
inline uint32_t NibbleWord(const uint8_t* p, bool high) {
  const uint32_t a = LoadU32(p), b = LoadU32(p + 4);
  return high ? (a >> 4 & kLowNibbles) | (b & ~kLowNibbles)
              : (a & kLowNibbles) | (b & kLowNibbles) << 4;
}

// Row r's packed codes of one block (steps at d + 64 k + 4 r) from 16 bytes n whose low nibbles
// are codes 0-15 and high nibbles codes 16-31 (Q4_0, GGUF MXFP4).
inline void PackNibbleWords(const uint8_t* n, uint8_t* d, int r) {
  for (int k = 0; k < 4; ++k) StoreU32(d + 64 * k + 4 * r, NibbleWord(n + 8 * (k % 2), k >= 2));
}

// The same for a safetensors MXFP4 block's 16 bytes n, whose low nibbles are the even codes and
// high nibbles the odd ones: word k's bytes are codes 8k + j | 8k + 4 + j << 4 for j = 0-3, that is
// n[4k]'s and n[4k + 2]'s low nibbles, their high nibbles, then n[4k + 1]'s and n[4k + 3]'s.
inline void PackSplitNibbleWords(const uint8_t* n, uint8_t* d, int r) {
  for (int k = 0; k < 4; ++k) {
    const uint32_t a = LoadU16(n + 4 * k), b = LoadU16(n + 4 * k + 2);  // n[4k], n[4k + 1]; ...
    const uint32_t even = (a & 0x0F0F) | (b & 0x0F0F) << 4;             // bytes: j = 0, j = 2
    const uint32_t odd = (a >> 4 & 0x0F0F) | (b & 0xF0F0);              // bytes: j = 1, j = 3
    StoreU32(d + 64 * k + 4 * r,
             (even & 0xFF) | (odd & 0xFF) << 8 | (even >> 8) << 16 | (odd >> 8) << 24);
  }
}

// Row r (0-15 in its group) of one Q4_K super-block w into the packed super-block d.
void PackQ4KRow(const uint8_t* w, int r, uint8_t* d) {
  for (int j = 0; j < 8; ++j)  // sub-block j: byte group j / 2's low (j even) or high nibbles
    for (int m = 0; m < 4; ++m)
      StoreU32(d + kPackedCodeBytes * j + 64 * m + 4 * r,
               NibbleWord(w + 16 + 32 * (j / 2) + 8 * m, j % 2 != 0));
  uint8_t* s = d + kPackedQ4KScales;
  std::memcpy(s + 2 * r, w, 2);           // d
  std::memcpy(s + 32 + 2 * r, w + 2, 2);  // dmin
  alignas(16) uint8_t sm[16];             // sc_0-7, m_0-7
  _mm_store_si128(reinterpret_cast<__m128i*>(sm), Q4KScaleBytes(w));
  for (int j = 0; j < 8; ++j) {
    s[64 + 16 * j + r] = sm[j];
    s[192 + 16 * j + r] = sm[8 + j];
  }
}

// Row r (0-15 in its group) of one Q6_K super-block w (kernels/dequant.h) into the packed
// super-block d, whose bytes of high bits start zeroed.
void PackQ6KRow(const uint8_t* w, int r, uint8_t* d) {
  uint8_t code[256];  // the six-bit q of the 256 values in order (ql's nibbles, qh's bit pairs)
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = w + 64 * h;
    const uint8_t* qh = w + 128 + 32 * h;
    for (int l = 0; l < 32; ++l)
      for (int k = 0; k < 4; ++k)
        code[128 * h + 32 * k + l] =
            static_cast<uint8_t>((k < 2 ? ql[l + 32 * k] & 15 : ql[l + 32 * (k - 2)] >> 4) |
                                 ((qh[l] >> (2 * k)) & 3) << 4);
  }
  for (int j = 0; j < 8; ++j) {
    uint8_t* blk = d + kPackedQ6KBlockBytes * j;
    const uint8_t* c = code + kBlock * j;
    for (int m = 0; m < 4; ++m)
      for (int i = 0; i < 4; ++i) {
        const int lane = 4 * r + i, quarter = lane / 16, k = lane % 16;
        const uint8_t lo = c[8 * m + i], hi = c[8 * m + 4 + i];
        blk[64 * m + lane] = static_cast<uint8_t>((lo & 15) | (hi & 15) << 4);
        blk[kPackedCodeBytes + 32 * m + k] |= static_cast<uint8_t>((lo >> 4) << (2 * quarter));
        blk[kPackedCodeBytes + 32 * m + 16 + k] |= static_cast<uint8_t>((hi >> 4) << (2 * quarter));
      }
  }
  uint8_t* s = d + kPackedQ6KScales;
  std::memcpy(s + 2 * r, w + 208, 2);                            // d
  for (int k = 0; k < 16; ++k) s[32 + 16 * k + r] = w[192 + k];  // the int8 scales
}

// Row `row` of w (its r-th in its group) into its group's packed bytes d; whether an MXFP4 scale
// of the row is E8M0 0 or 1 (GgmlMatrix::int8_subnormal_scales).
bool PackRow(const GgmlMatrix& w, int row, int r, uint8_t* d) {
  const uint8_t* src = w.row(row);
  const int blocks = w.in / kBlock;
  switch (w.type) {
    case kGgmlTypeQ4_K:
      for (int sb = 0; sb < blocks / 8; ++sb)
        PackQ4KRow(src + static_cast<size_t>(sb) * 144, r,
                   d + static_cast<size_t>(sb) * kPackedQ4KBytes);
      return false;
    case kGgmlTypeQ6_K:
      for (int sb = 0; sb < blocks / 8; ++sb)
        PackQ6KRow(src + static_cast<size_t>(sb) * 210, r,
                   d + static_cast<size_t>(sb) * kPackedQ6KBytes);
      return false;
    case kGgmlTypeQ8_0:
      for (int b = 0; b < blocks; ++b, d += kPackedQ80Bytes) {
        const uint8_t* blk = src + static_cast<size_t>(b) * 34;  // f16 d, then 32 int8 codes
        for (int m = 0; m < 8; ++m)
          StoreU32(d + 64 * m + 4 * r, LoadU32(blk + 2 + 4 * m) ^ 0x80808080);
        std::memcpy(d + 512 + 2 * r, blk, 2);
      }
      return false;
    case kTypeMxfp4Split: {  // even values in the low nibbles, odd in the high
      const uint8_t* e = w.row_scales(row);
      bool tiny = false;
      for (int b = 0; b < blocks; ++b, d += kPackedMxBlockBytes) {
        PackSplitNibbleWords(src + 16 * b, d, r);
        d[kPackedCodeBytes + r] = static_cast<uint8_t>(e[b] ^ 0x80);  // e - 128 as int8
        tiny |= e[b] < 2;
      }
      return tiny;
    }
    default: {  // Q4_0 / MXFP4 blocks: values 0-15 in the low nibbles, 16-31 in the high
      const bool mx = w.type == kGgmlTypeMXFP4;
      const int bytes = mx ? 17 : 18;
      bool tiny = false;
      for (int b = 0; b < blocks; ++b, d += PackedBlockBytes(mx)) {
        const uint8_t* blk = src + static_cast<size_t>(b) * bytes;
        PackNibbleWords(blk + (mx ? 1 : 2), d, r);
        if (mx) {
          d[kPackedCodeBytes + r] = static_cast<uint8_t>(blk[0] ^ 0x80);  // e - 128 as int8
          tiny |= blk[0] < 2;
        } else {
          std::memcpy(d + kPackedCodeBytes + 2 * r, blk, 2);
        }
      }
      return tiny;
    }
  }
}

}  // namespace

void PackForInt8(GgmlMatrix* w) {
  if (!Int8PackSupports(w->type) || w->int8 != nullptr) return;
  SS_ASSERT(w->in % kBlock == 0);
  const int blocks = w->in / kBlock, groups = (w->out + kPackedRows - 1) / kPackedRows;
  const bool q6k = w->type == kGgmlTypeQ6_K;
  const size_t group_bytes =
      w->type == kGgmlTypeQ4_K   ? static_cast<size_t>(blocks / 8) * kPackedQ4KBytes
      : q6k                      ? static_cast<size_t>(blocks / 8) * kPackedQ6KBytes
      : w->type == kGgmlTypeQ8_0 ? static_cast<size_t>(blocks) * kPackedQ80Bytes
                                 : static_cast<size_t>(blocks) * PackedBlockBytes(IsMxfp4(w->type));
  // Not zeroed here: each group is written (zeroed first where it has padding rows or, Q6_K, bits
  // that are or-ed in) by the thread that packs it, so the pages are first touched, and zeroed by
  // the kernel, by both threads rather than by one pass ahead of the packing.
  const size_t bytes = static_cast<size_t>(groups) * group_bytes;
  uint8_t* dst = CacheLineAllocator<uint8_t>().allocate(bytes);
  std::shared_ptr<const void> owner(dst, [bytes](const void* p) {
    CacheLineAllocator<uint8_t>().deallocate(static_cast<uint8_t*>(const_cast<void*>(p)), bytes);
  });
  const GgmlMatrix& m = *w;
  bool tiny = false;
#pragma omp parallel for schedule(static) reduction(|| : tiny)
  for (int g = 0; g < groups; ++g) {
    uint8_t* d = dst + static_cast<size_t>(g) * group_bytes;
    const int rows = std::min(kPackedRows, m.out - g * kPackedRows);
    if (q6k || rows < kPackedRows) std::memset(d, 0, group_bytes);
    for (int r = 0; r < rows; ++r) tiny = PackRow(m, g * kPackedRows + r, r, d) || tiny;
  }
  w->int8 = dst;
  w->int8_subnormal_scales = tiny;
  w->int8_group_bytes = group_bytes;
  w->int8_owner = std::move(owner);
}

void MatMulGgmlInt8(const float* x, const GgmlMatrix& w, const float* bias, float* y, int T) {
  SS_ASSERT(T >= 0 && (!w.empty() || w.int8 != nullptr) && w.in % kBlock == 0);
  if (T == 0) return;
  SS_ASSERT(Int8RunsOn(w));
  if (w.int8 != nullptr && Int8PackSupports(w.type)) {
    MatMulPacked(x, w, bias, y, T);
    return;
  }
  const Kernels k = KernelsFor(w.type);
  SS_ASSERT(k.fn[1] != nullptr);
  const XRows xr = QuantizeX(x, T, w.in, k.offset, k.arrangement);
#pragma omp parallel if (static_cast <int64_t>(T) * w.in * w.out >= (int64_t{1} << 16))
  {
    const int threads = omp_get_num_threads(), id = omp_get_thread_num();
    ForRowStreams(static_cast<int>(static_cast<int64_t>(w.out) * id / threads),
                  static_cast<int>(static_cast<int64_t>(w.out) * (id + 1) / threads),
                  [&](int streams, int first, int step) {
                    for (int t = 0; t < T; ++t)
                      k.fn[streams](w, first, step, xr, t, y + static_cast<int64_t>(t) * w.out,
                                    bias);
                  });
  }
}

}  // namespace ss
