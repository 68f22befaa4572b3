#include "kernels/kv_types.h"

#include <cpuid.h>
#include <immintrin.h>

#include <cstring>
#include <numeric>

#include "common/error.h"
#include "kernels/dequant.h"
#include "kernels/simd.h"
#include "kernels/vecmath.h"
#include "tensor/half.h"

namespace ss {

namespace {

constexpr int kBlock = 32;
constexpr size_t kQ8Bytes = 34, kQ4Bytes = 18;

float Scale(const uint8_t* block) {
  uint16_t bits;
  std::memcpy(&bits, block, 2);
  return F16ToF32(bits);
}

// Value i (0..31) of a block.
float Q8Value(const uint8_t* block, int i) {
  return Scale(block) * static_cast<int8_t>(block[2 + i]);
}
float Q4Value(const uint8_t* block, int i) {
  const uint8_t byte = block[2 + (i & 15)];
  const int q = i < 16 ? (byte & 0xF) : (byte >> 4);
  return Scale(block) * static_cast<float>(q - 8);
}

// Whole blocks: 32 values at a time, the same products d * q as the scalar path (exact in f32).
__attribute__((target("avx2,fma"))) void DecodeQ8BlocksAvx2(const uint8_t* row, int blocks,
                                                            float* out) {
  for (int b = 0; b < blocks; ++b, row += kQ8Bytes, out += kBlock) {
    const __m256 d = _mm256_set1_ps(Scale(row));
    for (int i = 0; i < kBlock; i += 8) {
      const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + 2 + i));
      _mm256_storeu_ps(out + i, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8))));
    }
  }
}
__attribute__((target("avx2,fma"))) void DecodeQ4BlocksAvx2(const uint8_t* row, int blocks,
                                                            float* out) {
  const __m128i low = _mm_set1_epi8(0xF), eight = _mm_set1_epi8(8);
  for (int b = 0; b < blocks; ++b, row += kQ4Bytes, out += kBlock) {
    const __m256 d = _mm256_set1_ps(Scale(row));
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(bytes, low), eight);  // values 0..15
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(bytes, 4), low), eight);  // 16..31
    for (int half = 0; half < 2; ++half) {
      const __m128i q = half == 0 ? lo : hi;
      float* o = out + 16 * half;
      _mm256_storeu_ps(o, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
      _mm256_storeu_ps(
          o + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8)))));
    }
  }
}

// F16C from CPUID leaf 1 (ECX bit 29), as kernels/gemm_ggml.cpp checks it.
bool F16cActive() {
  static const bool f16c = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
  }();
  return f16c && Avx2FmaActive();
}

// bf16 and f16 values, 8 at a time: exact conversions, the same floats as the scalar path.
__attribute__((target("avx2,fma"))) void DecodeBf16Avx2(const uint8_t* src, int n, float* out) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
  }
  for (; i < n; ++i) {
    uint16_t b;
    std::memcpy(&b, src + 2 * i, 2);
    out[i] = BF16ToF32(b);
  }
}
__attribute__((target("avx2,fma,f16c"))) void DecodeF16Avx2(const uint8_t* src, int n, float* out) {
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(
        out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i))));
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    out[i] = F16ToF32(h);
  }
}

// ---- Fused decode in the attention's products (KvRowDots, KvAddWeightedRows)
// ---------------------
//
// Each type decodes a unit of values into vectors: 32 for q8_0 and q4_0 (one block: one scale
// conversion for 32 values), 16 for the others; f32, bf16 and f16 also decode 8 (a head whose
// width is an odd multiple of 8). The decoded floats are exact (d q with |q| <= 127 has at most
// 19 significant bits), the same as KvDecodeSlice's; the products then run the f32 kernels'
// fused multiply-adds in their order.

#define SS_KV_AVX2 __attribute__((target("avx2,fma,f16c")))
#define SS_KV_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

constexpr bool IsBlockType(KvType t) { return t == KvType::kQ8_0 || t == KvType::kQ4_0; }
template <KvType kType>
constexpr int kUnit = IsBlockType(kType) ? kBlock : 16;

SS_KV_AVX2 inline float ScaleF16c(const uint8_t* block) {
  uint16_t bits;
  std::memcpy(&bits, block, 2);
  return _cvtsh_ss(bits);
}

// Values [e, e + 8) of an f32, bf16 or f16 row.
template <KvType kType>
SS_KV_AVX2 inline __m256 Decode8(const uint8_t* row, int e) {
  if constexpr (kType == KvType::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + e);
  } else if constexpr (kType == KvType::kBf16) {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * static_cast<size_t>(e)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    static_assert(kType == KvType::kF16);
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * static_cast<size_t>(e))));
  }
}

// Values [e, e + kUnit) of a row (e a multiple of 32 for q8_0 / q4_0) as kUnit / 8 vectors.
template <KvType kType>
SS_KV_AVX2 inline void DecodeUnit8(const uint8_t* row, int e, __m256* v) {
  if constexpr (kType == KvType::kQ8_0) {
    const uint8_t* b = row + static_cast<size_t>(e / kBlock) * kQ8Bytes;
    const __m256 d = _mm256_set1_ps(ScaleF16c(b));
    for (int i = 0; i < 4; ++i) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * i));
      v[i] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
    }
  } else if constexpr (kType == KvType::kQ4_0) {
    const uint8_t* b = row + static_cast<size_t>(e / kBlock) * kQ4Bytes;
    const __m256 d = _mm256_set1_ps(ScaleF16c(b));
    const __m128i low = _mm_set1_epi8(0xF), eight = _mm_set1_epi8(8);
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(bytes, low), eight);  // values 0..15
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(bytes, 4), low), eight);  // 16..31
    v[0] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)));
    v[1] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))));
    v[2] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)));
    v[3] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))));
  } else {
    v[0] = Decode8<kType>(row, e);
    v[1] = Decode8<kType>(row, e + 8);
  }
}

// The same as kUnit / 16 vectors of 16.
template <KvType kType>
SS_KV_AVX512 inline void DecodeUnit16(const uint8_t* row, int e, __m512* v) {
  if constexpr (kType == KvType::kQ8_0) {
    const uint8_t* b = row + static_cast<size_t>(e / kBlock) * kQ8Bytes;
    const __m512 d = _mm512_set1_ps(ScaleF16c(b));
    for (int i = 0; i < 2; ++i) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + 16 * i));
      v[i] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
    }
  } else if constexpr (kType == KvType::kQ4_0) {
    // A block's 16 possible values d (q - 8) in one register, looked up by nibble (vpermps reads
    // the low 4 bits of each lane's index): a shuffle a 16 values instead of a sign extension and
    // a conversion, the same products.
    const uint8_t* b = row + static_cast<size_t>(e / kBlock) * kQ4Bytes;
    const __m512 levels =
        _mm512_mul_ps(_mm512_set1_ps(ScaleF16c(b)),
                      _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7));
    const __m512i bytes =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)));
    v[0] = _mm512_permutexvar_ps(bytes, levels);                        // low nibbles: values 0..15
    v[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), levels);  // high: 16..31
  } else if constexpr (kType == KvType::kF32) {
    v[0] = _mm512_loadu_ps(reinterpret_cast<const float*>(row) + e);
  } else if constexpr (kType == KvType::kBf16) {
    const __m256i h =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * static_cast<size_t>(e)));
    v[0] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    static_assert(kType == KvType::kF16);
    v[0] = _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * static_cast<size_t>(e))));
  }
}

// y[r] = x · row r: chains a (values i..i+7 of every 16) and b (i+8..i+15), then the odd 8 into a,
// HorizontalSum(a + b): ops.cpp's RowsDotAvx2 on the decoded floats. R rows at once: a row's
// chains are a sequence of dependent fused multiply-adds (16 for a head of 128), so R independent
// rows keep the FMA units busy while each waits on its last result (one row at a time ran at
// about a third of the rate in cache).
template <KvType kType, int R>
SS_KV_AVX2 inline void RowsDotAvx2(const KvSlices& s, const uint8_t* row0, const float* x,
                                   float* y) {
  constexpr int U = kUnit<kType>;
  const int units = s.n / U, tail = units * U;
  __m256 a[R], b[R];
  for (int r = 0; r < R; ++r) a[r] = b[r] = _mm256_setzero_ps();
  for (int u = 0; u < units; ++u)
    for (int r = 0; r < R; ++r) {
      __m256 v[U / 8];
      DecodeUnit8<kType>(row0 + static_cast<size_t>(r) * s.stride, s.first + u * U, v);
      for (int c = 0; c < U / 16; ++c) {
        a[r] = _mm256_fmadd_ps(v[2 * c], _mm256_loadu_ps(x + u * U + 16 * c), a[r]);
        b[r] = _mm256_fmadd_ps(v[2 * c + 1], _mm256_loadu_ps(x + u * U + 16 * c + 8), b[r]);
      }
    }
  for (int r = 0; r < R; ++r) {
    if constexpr (!IsBlockType(kType))
      if (tail < s.n)
        a[r] = _mm256_fmadd_ps(
            Decode8<kType>(row0 + static_cast<size_t>(r) * s.stride, s.first + tail),
            _mm256_loadu_ps(x + tail), a[r]);
    y[r] = HorizontalSum(_mm256_add_ps(a[r], b[r]));
  }
}

// The same with one 16-lane chain a row: its lanes are [a | b] above, so the sums are the same.
template <KvType kType, int R>
SS_KV_AVX512 inline void RowsDot512(const KvSlices& s, const uint8_t* row0, const float* x,
                                    float* y) {
  constexpr int U = kUnit<kType>;
  const int units = s.n / U, tail = units * U;
  __m512 z[R];
  for (int r = 0; r < R; ++r) z[r] = _mm512_setzero_ps();
  for (int u = 0; u < units; ++u)
    for (int r = 0; r < R; ++r) {
      __m512 v[U / 16];
      DecodeUnit16<kType>(row0 + static_cast<size_t>(r) * s.stride, s.first + u * U, v);
      for (int c = 0; c < U / 16; ++c)
        z[r] = _mm512_fmadd_ps(v[c], _mm512_loadu_ps(x + u * U + 16 * c), z[r]);
    }
  for (int r = 0; r < R; ++r) {
    __m256 a = _mm512_castps512_ps256(z[r]);
    const __m256 b = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(z[r]), 1));
    if constexpr (!IsBlockType(kType))
      if (tail < s.n)
        a = _mm256_fmadd_ps(
            Decode8<kType>(row0 + static_cast<size_t>(r) * s.stride, s.first + tail),
            _mm256_loadu_ps(x + tail), a);
    y[r] = HorizontalSum(_mm256_add_ps(a, b));
  }
}

constexpr int kDotRows = 4;

// Each row's slice is fetched ahead of its decoding: the slice of the row Ahead() rows on, about
// kAheadBytes of slices ahead. A head-major cache's rows are contiguous and this runs kAheadBytes
// ahead in one stream; it kept more of the memory's requests in flight than the hardware
// prefetcher alone (on the 2-core development machine, 32K q8_0 entries of 32 heads of 128 took
// about a quarter less CPU time for their scores and sums; 512 to 4096 bytes ahead were alike
// within its noise). On rows far apart (the row-major layout) it fetches the right bytes ahead.
constexpr size_t kAheadBytes = 2048;
struct SliceBytes {
  size_t first, size, ahead;  // the slice's offset in a row and its bytes; bytes to the row ahead
  explicit SliceBytes(const KvSlices& s)
      : first(KvRowBytes(s.type, s.first)),
        size(KvRowBytes(s.type, s.n)),
        ahead((kAheadBytes + size - 1) / size * s.stride) {}
};
SS_KV_AVX2 inline void PrefetchSlice(const uint8_t* row, const SliceBytes& b) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(row + b.ahead + b.first);
  for (uintptr_t line = start & ~uintptr_t{63}; line < start + b.size; line += 64)
    _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
}

template <KvType kType>
SS_KV_AVX2 void RowDotsAvx2(const KvSlices& s, const float* x, float* y) {
  const SliceBytes bytes(s);
  int r = 0;
  for (; r + kDotRows <= s.count; r += kDotRows) {
    for (int i = 0; i < kDotRows; ++i)
      PrefetchSlice(s.rows + static_cast<size_t>(r + i) * s.stride, bytes);
    RowsDotAvx2<kType, kDotRows>(s, s.rows + static_cast<size_t>(r) * s.stride, x, y + r);
  }
  for (; r < s.count; ++r)
    RowsDotAvx2<kType, 1>(s, s.rows + static_cast<size_t>(r) * s.stride, x, y + r);
}

template <KvType kType>
SS_KV_AVX512 void RowDots512(const KvSlices& s, const float* x, float* y) {
  const SliceBytes bytes(s);
  int r = 0;
  for (; r + kDotRows <= s.count; r += kDotRows) {
    for (int i = 0; i < kDotRows; ++i)
      PrefetchSlice(s.rows + static_cast<size_t>(r + i) * s.stride, bytes);
    RowsDot512<kType, kDotRows>(s, s.rows + static_cast<size_t>(r) * s.stride, x, y + r);
  }
  for (; r < s.count; ++r)
    RowsDot512<kType, 1>(s, s.rows + static_cast<size_t>(r) * s.stride, x, y + r);
}

// acc[e0, e0 + 8 kVecs) += p[r] row r over the rows: kVecs vectors of acc held in registers.
template <KvType kType, int kVecs>
SS_KV_AVX2 void AddRowsAvx2(const KvSlices& s, int e0, const float* p, float* acc) {
  static_assert(!IsBlockType(kType) || kVecs % 4 == 0);
  const SliceBytes bytes(s);
  __m256 a[kVecs];
  for (int i = 0; i < kVecs; ++i) a[i] = _mm256_loadu_ps(acc + e0 + 8 * i);
  for (int r = 0; r < s.count; ++r) {
    if (e0 == 0) PrefetchSlice(s.rows + static_cast<size_t>(r) * s.stride, bytes);
    if (p[r] == 0.0f) continue;
    const __m256 pr = _mm256_set1_ps(p[r]);
    const uint8_t* row = s.rows + static_cast<size_t>(r) * s.stride;
    if constexpr (IsBlockType(kType)) {
      for (int blk = 0; blk < kVecs / 4; ++blk) {
        __m256 v[4];
        DecodeUnit8<kType>(row, s.first + e0 + kBlock * blk, v);
        for (int i = 0; i < 4; ++i) a[4 * blk + i] = _mm256_fmadd_ps(pr, v[i], a[4 * blk + i]);
      }
    } else {
      for (int i = 0; i < kVecs; ++i)
        a[i] = _mm256_fmadd_ps(pr, Decode8<kType>(row, s.first + e0 + 8 * i), a[i]);
    }
  }
  for (int i = 0; i < kVecs; ++i) _mm256_storeu_ps(acc + e0 + 8 * i, a[i]);
}

template <KvType kType, int kVecs>
SS_KV_AVX512 void AddRows512(const KvSlices& s, int e0, const float* p, float* acc) {
  static_assert(!IsBlockType(kType) || kVecs % 2 == 0);
  const SliceBytes bytes(s);
  __m512 a[kVecs];
  for (int i = 0; i < kVecs; ++i) a[i] = _mm512_loadu_ps(acc + e0 + 16 * i);
  for (int r = 0; r < s.count; ++r) {
    if (e0 == 0) PrefetchSlice(s.rows + static_cast<size_t>(r) * s.stride, bytes);
    if (p[r] == 0.0f) continue;
    const __m512 pr = _mm512_set1_ps(p[r]);
    const uint8_t* row = s.rows + static_cast<size_t>(r) * s.stride;
    constexpr int kPer = kUnit<kType> / 16;  // vectors a unit decodes to
    for (int u = 0; u < kVecs / kPer; ++u) {
      __m512 v[kPer];
      DecodeUnit16<kType>(row, s.first + e0 + kUnit<kType> * u, v);
      for (int i = 0; i < kPer; ++i) a[kPer * u + i] = _mm512_fmadd_ps(pr, v[i], a[kPer * u + i]);
    }
  }
  for (int i = 0; i < kVecs; ++i) _mm512_storeu_ps(acc + e0 + 16 * i, a[i]);
}

// AddRows with `vectors` (one of kVecs, kVecs - kStep, ..., kStep) chosen at run time.
template <KvType kType, int kVecs, int kStep, bool k512>
void AddRowsN(int vectors, const KvSlices& s, int e0, const float* p, float* acc) {
  if constexpr (kVecs >= kStep) {
    if (vectors != kVecs)
      return AddRowsN<kType, kVecs - kStep, kStep, k512>(vectors, s, e0, p, acc);
    if constexpr (k512)
      AddRows512<kType, kVecs>(s, e0, p, acc);
    else
      AddRowsAvx2<kType, kVecs>(s, e0, p, acc);
  }
}

// Passes over the rows of up to 64 (AVX2) or 256 (AVX-512) values of acc each: one pass for a head
// of 128 on AVX-512, two on AVX2 (its 16 registers hold 64 floats of acc beside the decoding),
// which take kSumRows rows at a time so that the second pass finds them in the cache. Each value
// of acc still takes its rows' products in row order.
constexpr int kSumRows = 128;
template <KvType kType, bool k512>
void AddWeightedRowsFused(const KvSlices& s, const float* p, float* acc) {
  constexpr int W = k512 ? 16 : 8;                            // lanes
  constexpr int kStep = IsBlockType(kType) ? kBlock / W : 1;  // vectors a unit fills
  constexpr int kMax = k512 ? 16 : 8;
  for (int r0 = 0; r0 < s.count; r0 += kSumRows) {
    const KvSlices chunk{s.type,   s.rows + static_cast<size_t>(r0) * s.stride,
                         s.stride, s.first,
                         s.n,      std::min(kSumRows, s.count - r0)};
    int e0 = 0;
    while (s.n - e0 >= W * kStep) {
      const int vectors = std::min(kMax, (s.n - e0) / (W * kStep) * kStep);
      AddRowsN<kType, kMax, kStep, k512>(vectors, chunk, e0, p + r0, acc);
      e0 += W * vectors;
    }
    if constexpr (!IsBlockType(kType))
      if (e0 < s.n)
        AddRowsAvx2<kType, 1>(chunk, e0, p + r0, acc);  // the odd 8 values of an AVX-512 pass
  }
}

// Calls f.template operator()<type>() for the run-time type.
template <typename F>
void ForType(KvType type, F&& f) {
  switch (type) {
    case KvType::kF32:
      return f.template operator()<KvType::kF32>();
    case KvType::kBf16:
      return f.template operator()<KvType::kBf16>();
    case KvType::kF16:
      return f.template operator()<KvType::kF16>();
    case KvType::kQ8_0:
      return f.template operator()<KvType::kQ8_0>();
    case KvType::kQ4_0:
      return f.template operator()<KvType::kQ4_0>();
  }
}

// Whether the fused kernels take this slice (see kv_types.h).
bool Fusable(const KvSlices& s) {
  if (!F16cActive() || s.n % 8 != 0) return false;
  return !IsBlockType(s.type) || (s.first % kBlock == 0 && s.n % kBlock == 0);
}

}  // namespace

KvType ParseKvType(const std::string& name, const std::string& flag) {
  if (name == "f32") return KvType::kF32;
  if (name == "bf16") return KvType::kBf16;
  if (name == "f16") return KvType::kF16;
  if (name == "q8_0") return KvType::kQ8_0;
  if (name == "q4_0") return KvType::kQ4_0;
  Fail("{}: expected one of f32, bf16, f16, q8_0, q4_0; got '{}'", flag, name);
}

const char* KvTypeName(KvType type) {
  switch (type) {
    case KvType::kF32:
      return "f32";
    case KvType::kBf16:
      return "bf16";
    case KvType::kF16:
      return "f16";
    case KvType::kQ8_0:
      return "q8_0";
    case KvType::kQ4_0:
      return "q4_0";
  }
  return "?";
}

size_t KvRowBytes(KvType type, int n) {
  switch (type) {
    case KvType::kF32:
      return 4 * static_cast<size_t>(n);
    case KvType::kBf16:
    case KvType::kF16:
      return 2 * static_cast<size_t>(n);
    case KvType::kQ8_0:
    case KvType::kQ4_0:
      if (n % kBlock != 0)
        Fail(
            "a {} KV cache stores rows in blocks of 32 values, but this model's rows hold {} "
            "(n_kv_heads "
            "x head_dim); use f32, bf16 or f16",
            KvTypeName(type), n);
      return static_cast<size_t>(n / kBlock) * (type == KvType::kQ8_0 ? kQ8Bytes : kQ4Bytes);
  }
  return 0;
}

void KvEncodeRow(KvType type, const float* x, int n, uint8_t* row) {
  switch (type) {
    case KvType::kF32:
      std::memcpy(row, x, 4 * static_cast<size_t>(n));
      return;
    case KvType::kBf16:
      for (int i = 0; i < n; ++i) {
        const uint16_t b = F32ToBF16(x[i]);
        std::memcpy(row + 2 * i, &b, 2);
      }
      return;
    case KvType::kF16:
      for (int i = 0; i < n; ++i) {
        const uint16_t h = F32ToF16(x[i]);
        std::memcpy(row + 2 * i, &h, 2);
      }
      return;
    case KvType::kQ8_0:
      QuantizeQ8_0(x, row, n);
      return;
    case KvType::kQ4_0:
      QuantizeQ4_0(x, row, n);
      return;
  }
}

void KvDecodeSlice(KvType type, const uint8_t* row, int first, int count, float* out) {
  switch (type) {
    case KvType::kF32:
      std::memcpy(out, row + 4 * static_cast<size_t>(first), 4 * static_cast<size_t>(count));
      return;
    case KvType::kBf16:
      if (Avx2FmaActive()) return DecodeBf16Avx2(row + 2 * static_cast<size_t>(first), count, out);
      for (int i = 0; i < count; ++i) {
        uint16_t b;
        std::memcpy(&b, row + 2 * static_cast<size_t>(first + i), 2);
        out[i] = BF16ToF32(b);
      }
      return;
    case KvType::kF16:
      if (F16cActive()) return DecodeF16Avx2(row + 2 * static_cast<size_t>(first), count, out);
      for (int i = 0; i < count; ++i) {
        uint16_t h;
        std::memcpy(&h, row + 2 * static_cast<size_t>(first + i), 2);
        out[i] = F16ToF32(h);
      }
      return;
    case KvType::kQ8_0:
    case KvType::kQ4_0: {
      const size_t block_bytes = type == KvType::kQ8_0 ? kQ8Bytes : kQ4Bytes;
      if (first % kBlock == 0 && count % kBlock == 0 && Avx2FmaActive()) {
        const uint8_t* blocks = row + static_cast<size_t>(first / kBlock) * block_bytes;
        if (type == KvType::kQ8_0)
          DecodeQ8BlocksAvx2(blocks, count / kBlock, out);
        else
          DecodeQ4BlocksAvx2(blocks, count / kBlock, out);
        return;
      }
      for (int i = 0; i < count; ++i) {
        const int e = first + i;
        const uint8_t* block = row + static_cast<size_t>(e / kBlock) * block_bytes;
        out[i] = type == KvType::kQ8_0 ? Q8Value(block, e % kBlock) : Q4Value(block, e % kBlock);
      }
      return;
    }
  }
}

int KvPanelValues(KvType type, int head_dim) {
  if (type != KvType::kQ8_0 && type != KvType::kQ4_0) return head_dim;
  return std::lcm(head_dim, kBlock);
}

bool KvRowDots(const KvSlices& s, const float* x, float* y) {
  if (!Fusable(s)) return false;
  const bool wide = ActiveSimdLevel() == SimdLevel::kAvx512;
  ForType(s.type,
          [&]<KvType kType>() { wide ? RowDots512<kType>(s, x, y) : RowDotsAvx2<kType>(s, x, y); });
  return true;
}

bool KvAddWeightedRows(const KvSlices& s, const float* p, float* acc) {
  if (!Fusable(s)) return false;
  const bool wide = ActiveSimdLevel() == SimdLevel::kAvx512;
  ForType(s.type, [&]<KvType kType>() {
    wide ? AddWeightedRowsFused<kType, true>(s, p, acc)
         : AddWeightedRowsFused<kType, false>(s, p, acc);
  });
  return true;
}

}  // namespace ss
