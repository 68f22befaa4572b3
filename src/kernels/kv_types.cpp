#include "kernels/kv_types.h"

#include <cpuid.h>
#include <immintrin.h>

#include <cstring>

#include "common/error.h"
#include "kernels/dequant.h"
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
float Q8Value(const uint8_t* block, int i) { return Scale(block) * static_cast<int8_t>(block[2 + i]); }
float Q4Value(const uint8_t* block, int i) {
  const uint8_t byte = block[2 + (i & 15)];
  const int q = i < 16 ? (byte & 0xF) : (byte >> 4);
  return Scale(block) * static_cast<float>(q - 8);
}

// Whole blocks: 32 values at a time, the same products d * q as the scalar path (exact in f32).
__attribute__((target("avx2,fma"))) void DecodeQ8BlocksAvx2(const uint8_t* row, int blocks, float* out) {
  for (int b = 0; b < blocks; ++b, row += kQ8Bytes, out += kBlock) {
    const __m256 d = _mm256_set1_ps(Scale(row));
    for (int i = 0; i < kBlock; i += 8) {
      const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + 2 + i));
      _mm256_storeu_ps(out + i, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8))));
    }
  }
}
__attribute__((target("avx2,fma"))) void DecodeQ4BlocksAvx2(const uint8_t* row, int blocks, float* out) {
  const __m128i low = _mm_set1_epi8(0xF), eight = _mm_set1_epi8(8);
  for (int b = 0; b < blocks; ++b, row += kQ4Bytes, out += kBlock) {
    const __m256 d = _mm256_set1_ps(Scale(row));
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(bytes, low), eight);                      // values 0..15
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(bytes, 4), low), eight);  // 16..31
    for (int half = 0; half < 2; ++half) {
      const __m128i q = half == 0 ? lo : hi;
      float* o = out + 16 * half;
      _mm256_storeu_ps(o, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
      _mm256_storeu_ps(o + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8)))));
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
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i))));
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    out[i] = F16ToF32(h);
  }
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
    case KvType::kF32: return "f32";
    case KvType::kBf16: return "bf16";
    case KvType::kF16: return "f16";
    case KvType::kQ8_0: return "q8_0";
    case KvType::kQ4_0: return "q4_0";
  }
  return "?";
}

size_t KvRowBytes(KvType type, int n) {
  switch (type) {
    case KvType::kF32: return 4 * static_cast<size_t>(n);
    case KvType::kBf16:
    case KvType::kF16: return 2 * static_cast<size_t>(n);
    case KvType::kQ8_0:
    case KvType::kQ4_0:
      if (n % kBlock != 0)
        Fail("a {} KV cache stores rows in blocks of 32 values, but this model's rows hold {} (n_kv_heads "
             "x head_dim); use f32, bf16 or f16", KvTypeName(type), n);
      return static_cast<size_t>(n / kBlock) * (type == KvType::kQ8_0 ? kQ8Bytes : kQ4Bytes);
  }
  return 0;
}

void KvEncodeRow(KvType type, const float* x, int n, uint8_t* row) {
  switch (type) {
    case KvType::kF32: std::memcpy(row, x, 4 * static_cast<size_t>(n)); return;
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
    case KvType::kQ8_0: QuantizeQ8_0(x, row, n); return;
    case KvType::kQ4_0: QuantizeQ4_0(x, row, n); return;
  }
}

void KvDecodeSlice(KvType type, const uint8_t* row, int first, int count, float* out) {
  switch (type) {
    case KvType::kF32: std::memcpy(out, row + 4 * static_cast<size_t>(first), 4 * static_cast<size_t>(count)); return;
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

}  // namespace ss
