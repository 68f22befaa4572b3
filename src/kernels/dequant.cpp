#include "kernels/dequant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "kernels/vecmath.h"
#include "tensor/half.h"

namespace ss {
namespace {

constexpr int64_t kQk = 32;    // values per Q8_0 / Q4_0 block (ggml QK8_0, QK4_0)
constexpr int64_t kQkK = 256;  // values per K-quant super-block (ggml QK_K)
constexpr size_t kQ8_0Bytes = 2 + 32;
constexpr size_t kQ4_0Bytes = 2 + 16;
constexpr size_t kQ4_KBytes = 2 + 2 + 12 + 128;
constexpr size_t kQ6_KBytes = 128 + 64 + 16 + 2;
constexpr size_t kMxfp4Bytes = 1 + kMxfp4NibbleBytes;

// Fields are read with memcpy: GGUF only guarantees the tensor start is aligned, and blocks of 18
// or 210 bytes leave later blocks misaligned for 2-byte loads.
inline uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline float LoadF16(const uint8_t* p) { return F16ToF32(LoadU16(p)); }

void DequantizeQ8_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQk; ++b, src += kQ8_0Bytes, dst += kQk) {
    float d = LoadF16(src);
    const int8_t* qs = reinterpret_cast<const int8_t*>(src + 2);
    for (int i = 0; i < kQk; ++i) dst[i] = d * static_cast<float>(qs[i]);
  }
}

void DequantizeQ4_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQk; ++b, src += kQ4_0Bytes, dst += kQk) {
    float d = LoadF16(src);
    const uint8_t* qs = src + 2;
    for (int i = 0; i < kQk / 2; ++i) {
      dst[i] = d * static_cast<float>((qs[i] & 0xF) - 8);
      dst[i + kQk / 2] = d * static_cast<float>((qs[i] >> 4) - 8);
    }
  }
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K super-block; see the layout in dequant.h.
void DequantizeQ4_K(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQkK; ++b, src += kQ4_KBytes, dst += kQkK) {
    float d = LoadF16(src);
    float dmin = LoadF16(src + 2);
    const uint8_t* scales = src + 4;
    const uint8_t* qs = src + 16;
    for (int g = 0; g < 4; ++g) {
      int sc_lo, m_lo, sc_hi, m_hi;
      Q4KScaleMin(2 * g, scales, &sc_lo, &m_lo);
      Q4KScaleMin(2 * g + 1, scales, &sc_hi, &m_hi);
      float d_lo = d * sc_lo, min_lo = dmin * m_lo;
      float d_hi = d * sc_hi, min_hi = dmin * m_hi;
      const uint8_t* q = qs + 32 * g;
      float* y = dst + 64 * g;
      for (int l = 0; l < 32; ++l) {
        y[l] = d_lo * static_cast<float>(q[l] & 0xF) - min_lo;
        y[l + 32] = d_hi * static_cast<float>(q[l] >> 4) - min_hi;
      }
    }
  }
}

void DequantizeQ6_K(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kQkK; ++b, src += kQ6_KBytes, dst += kQkK) {
    float d = LoadF16(src + 128 + 64 + 16);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = src + 64 * h;
      const uint8_t* qh = src + 128 + 32 * h;
      const int8_t* sc = reinterpret_cast<const int8_t*>(src + 128 + 64) + 8 * h;
      float* y = dst + 128 * h;
      for (int l = 0; l < 32; ++l) {
        int s = l / 16;
        int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[s] * q1);
        y[l + 32] = d * static_cast<float>(sc[s + 2] * q2);
        y[l + 64] = d * static_cast<float>(sc[s + 4] * q3);
        y[l + 96] = d * static_cast<float>(sc[s + 6] * q4);
      }
    }
  }
}

// E2M1 magnitudes of codes 0-7 (bit 3 is the sign).
constexpr float kE2M1Magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

// One block of 32 values: value i's code from `code(i)`, times the scale.
template <typename Code>
inline void DecodeMxfp4Block(uint8_t e, float* dst, Code code) {
  const float scale = E8M0ToFloat(e);
  for (int i = 0; i < kMxfp4Block; ++i) {
    const int c = code(i);
    // The magnitude times a power of two is exact (or overflows to Inf, which the loaders refuse
    // first); the sign is applied after, so that code 8 gives -0 as E2M1 defines it.
    const float v = kE2M1Magnitude[c & 7] * scale;
    dst[i] = c & 8 ? -v : v;
  }
}

void DequantizeMXFP4(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / kMxfp4Block; ++b, src += kMxfp4Bytes, dst += kMxfp4Block) {
    const uint8_t* qs = src + 1;
    DecodeMxfp4Block(src[0], dst, [qs](int i) { return i < 16 ? qs[i] & 0xF : qs[i - 16] >> 4; });
  }
}

void CheckQuantizable(const char* type, int64_t n, int64_t block = kQk) {
  if (n < 0 || n % block != 0)
    Fail("Quantize{}: {} values is not a whole number of {}-value blocks", type, n, block);
}

}  // namespace

const char* GgmlTypeName(uint32_t ggml_type) {
  switch (ggml_type) {
    case kGgmlTypeF32:
      return "F32";
    case kGgmlTypeF16:
      return "F16";
    case kGgmlTypeQ4_0:
      return "Q4_0";
    case 3:
      return "Q4_1";
    case 6:
      return "Q5_0";
    case 7:
      return "Q5_1";
    case kGgmlTypeQ8_0:
      return "Q8_0";
    case 9:
      return "Q8_1";
    case 10:
      return "Q2_K";
    case 11:
      return "Q3_K";
    case kGgmlTypeQ4_K:
      return "Q4_K";
    case 13:
      return "Q5_K";
    case kGgmlTypeQ6_K:
      return "Q6_K";
    case 15:
      return "Q8_K";
    case kGgmlTypeBF16:
      return "BF16";
    case kGgmlTypeMXFP4:
      return "MXFP4";
    case kTypeMxfp4Split:
      return "MXFP4 (blocks + scales)";
    default:
      return "unknown";
  }
}

bool IsDequantizable(uint32_t ggml_type) {
  switch (ggml_type) {
    case kGgmlTypeF32:
    case kGgmlTypeF16:
    case kGgmlTypeBF16:
    case kGgmlTypeQ8_0:
    case kGgmlTypeQ4_0:
    case kGgmlTypeQ4_K:
    case kGgmlTypeQ6_K:
    case kGgmlTypeMXFP4:
      return true;
    default:
      return false;
  }
}

[[noreturn]] static void FailUnsupported(uint32_t ggml_type) {
  Fail(
      "ggml type {} ({}) is not supported; supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, "
      "MXFP4",
      ggml_type, GgmlTypeName(ggml_type));
}

int64_t GgmlBlockValues(uint32_t ggml_type) {
  switch (ggml_type) {
    case kGgmlTypeF32:
    case kGgmlTypeF16:
    case kGgmlTypeBF16:
      return 1;
    case kGgmlTypeQ8_0:
    case kGgmlTypeQ4_0:
    case kGgmlTypeMXFP4:
    case kTypeMxfp4Split:
      return kQk;
    case kGgmlTypeQ4_K:
    case kGgmlTypeQ6_K:
      return kQkK;
    default:
      FailUnsupported(ggml_type);
  }
}

size_t GgmlBlockBytes(uint32_t ggml_type) {
  switch (ggml_type) {
    case kGgmlTypeF32:
      return 4;
    case kGgmlTypeF16:
    case kGgmlTypeBF16:
      return 2;
    case kGgmlTypeQ8_0:
      return kQ8_0Bytes;
    case kGgmlTypeQ4_0:
      return kQ4_0Bytes;
    case kGgmlTypeQ4_K:
      return kQ4_KBytes;
    case kGgmlTypeQ6_K:
      return kQ6_KBytes;
    case kGgmlTypeMXFP4:
      return kMxfp4Bytes;
    case kTypeMxfp4Split:
      return kMxfp4NibbleBytes;  // the nibbles; the scales lie apart
    default:
      FailUnsupported(ggml_type);
  }
}

size_t GgmlBytes(uint32_t ggml_type, int64_t n) {
  int64_t block = GgmlBlockValues(ggml_type);
  if (n < 0 || n % block != 0)
    Fail("ggml type {}: {} values is not a whole number of {}-value blocks",
         GgmlTypeName(ggml_type), n, block);
  return static_cast<size_t>(n / block) * GgmlBlockBytes(ggml_type);
}

float E2M1ToFloat(int code) {
  SS_ASSERT(code >= 0 && code < 16);
  return code & 8 ? -kE2M1Magnitude[code & 7] : kE2M1Magnitude[code & 7];
}

float E8M0ToFloat(uint8_t e) {
  if (e == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(e) - 127);
}

const char* Mxfp4BlockFault(uint8_t e, const uint8_t* nibbles) {
  if (e == 0xFF) return "its E8M0 scale is 0xFF, which the MX format defines as NaN";
  if (e < 253) return nullptr;  // 6 * 2^125 = 1.5 * 2^127 is still finite
  // The smallest magnitude code that overflows: 2.0 (code 4) at 2^127, 4.0 (code 6) at 2^126.
  const int limit = e == 254 ? 4 : 6;
  for (int j = 0; j < kMxfp4NibbleBytes; ++j)
    if ((nibbles[j] & 7) >= limit || ((nibbles[j] >> 4) & 7) >= limit)
      return "its scale times one of its values exceeds the largest f32";
  return nullptr;
}

int64_t Mxfp4FirstFault(const uint8_t* scales, size_t scale_stride, const uint8_t* nibbles,
                        size_t nibble_stride, int64_t blocks) {
  // Only scales of 253 and up can fault: one compare per block on the common path.
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t e = scales[b * scale_stride];
    if (e >= 253 && Mxfp4BlockFault(e, nibbles + b * nibble_stride)) return b;
  }
  return -1;
}

void DequantizeMxfp4Split(const uint8_t* nibbles, const uint8_t* scales, float* dst, int64_t n) {
  if (n < 0 || n % kMxfp4Block != 0)
    Fail("MXFP4: {} values is not a whole number of {}-value blocks", n, kMxfp4Block);
  for (int64_t b = 0; b < n / kMxfp4Block; ++b, nibbles += kMxfp4NibbleBytes, dst += kMxfp4Block)
    DecodeMxfp4Block(scales[b], dst, [nibbles](int i) {
      return i % 2 ? nibbles[i / 2] >> 4 : nibbles[i / 2] & 0xF;
    });
}

void Dequantize(uint32_t ggml_type, const uint8_t* src, float* dst, int64_t n) {
  GgmlBytes(ggml_type, n);  // validates the type and the block multiple
  switch (ggml_type) {
    case kGgmlTypeF32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case kGgmlTypeF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(LoadU16(src + 2 * i));
      return;
    case kGgmlTypeBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = BF16ToF32(LoadU16(src + 2 * i));
      return;
    case kGgmlTypeQ8_0:
      DequantizeQ8_0(src, dst, n);
      return;
    case kGgmlTypeQ4_0:
      DequantizeQ4_0(src, dst, n);
      return;
    case kGgmlTypeQ4_K:
      DequantizeQ4_K(src, dst, n);
      return;
    case kGgmlTypeQ6_K:
      DequantizeQ6_K(src, dst, n);
      return;
    case kGgmlTypeMXFP4:
      DequantizeMXFP4(src, dst, n);
      return;
    default:
      FailUnsupported(ggml_type);
  }
}

namespace {

// The Q8_0 encoder's loop, compiled twice (below): at the baseline flags, where nearbyint is a libm
// call per value, and for AVX2, where it is one ROUNDSS (the same rounding: to nearest even, no
// exception raised) and the loops vectorise; both give the same bytes (tests/test_gemm_q8.cpp).
__attribute__((always_inline)) inline void QuantizeQ8_0Body(const float* src, uint8_t* dst,
                                                            int64_t n) {
  for (int64_t b = 0; b < n / kQk; ++b, src += kQk, dst += kQ8_0Bytes) {
    float amax = 0;
    for (int i = 0; i < kQk; ++i) amax = std::max(amax, std::fabs(src[i]));
    // Scale so the largest magnitude maps to 127, then divide by the f16 scale actually stored,
    // so that rounding the scale does not add to the per-value error.
    uint16_t d_bits = F32ToF16(amax / 127.0f);
    float d = F16ToF32(d_bits);
    float inv_d = d > 0 ? 1.0f / d : 0.0f;
    std::memcpy(dst, &d_bits, 2);
    for (int i = 0; i < kQk; ++i) {
      float q = std::nearbyint(src[i] * inv_d);
      dst[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f)));
    }
  }
}

__attribute__((target("avx2,fma"))) void QuantizeQ8_0Avx2(const float* src, uint8_t* dst,
                                                          int64_t n) {
  QuantizeQ8_0Body(src, dst, n);
}

}  // namespace

void QuantizeQ8_0(const float* src, uint8_t* dst, int64_t n) {
  CheckQuantizable("Q8_0", n);
  if (Avx2FmaActive())
    QuantizeQ8_0Avx2(src, dst, n);
  else
    QuantizeQ8_0Body(src, dst, n);
}

void QuantizeQ4_0(const float* src, uint8_t* dst, int64_t n) {
  CheckQuantizable("Q4_0", n);
  for (int64_t b = 0; b < n / kQk; ++b, src += kQk, dst += kQ4_0Bytes) {
    // The value of largest magnitude, sign kept, maps to nibble 0 (q - 8 = -8): that uses the
    // asymmetric range [-8, 7] fully on the side where it matters.
    float extreme = 0;
    for (int i = 0; i < kQk; ++i)
      if (std::fabs(src[i]) > std::fabs(extreme)) extreme = src[i];
    uint16_t d_bits = F32ToF16(extreme / -8.0f);
    float d = F16ToF32(d_bits);
    float inv_d = d != 0 ? 1.0f / d : 0.0f;
    std::memcpy(dst, &d_bits, 2);
    uint8_t* qs = dst + 2;
    for (int i = 0; i < kQk / 2; ++i) {
      auto nibble = [&](float x) {
        return static_cast<uint8_t>(std::clamp(std::nearbyint(x * inv_d) + 8.0f, 0.0f, 15.0f));
      };
      qs[i] = static_cast<uint8_t>(nibble(src[i]) | (nibble(src[i + kQk / 2]) << 4));
    }
  }
}

namespace {

// The smallest f16 not below v (v >= 0). The K-quant encoders round their scales up, so that the
// stored scale still covers the range it was computed for and no value clips.
uint16_t F16NotBelow(float v) {
  uint16_t bits = F32ToF16(v);
  if (F16ToF32(bits) < v && bits < 0x7C00) ++bits;  // positive f16 bit patterns order like values
  return bits;
}

// v rounded (to nearest even, as the other encoders) or rounded up, clamped to [lo, hi]. fmin /
// fmax also turn a NaN (from a non-finite input) into `lo` rather than into an undefined cast.
int RoundClamp(float v, int lo, int hi) {
  return static_cast<int>(
      std::fmin(std::fmax(std::nearbyint(v), static_cast<float>(lo)), static_cast<float>(hi)));
}
int CeilClamp(float v, int lo, int hi) {
  return static_cast<int>(
      std::fmin(std::fmax(std::ceil(v), static_cast<float>(lo)), static_cast<float>(hi)));
}

}  // namespace

void QuantizeQ4_K(const float* src, uint8_t* dst, int64_t n) {
  CheckQuantizable("Q4_K", n, kQkK);
  constexpr int kSub = 32;  // values per sub-block
  for (int64_t b = 0; b < n / kQkK; ++b, src += kQkK, dst += kQ4_KBytes) {
    // Per sub-block: offset = -min(0, min x) >= 0 and the top of the range, max x.
    float offset[8], top[8], max_offset = 0;
    for (int j = 0; j < 8; ++j) {
      float lo = 0, hi = src[kSub * j];
      for (int i = 0; i < kSub; ++i) {
        lo = std::min(lo, src[kSub * j + i]);
        hi = std::max(hi, src[kSub * j + i]);
      }
      offset[j] = -lo;
      top[j] = hi;
      max_offset = std::max(max_offset, offset[j]);
    }
    // Offsets first, rounded up: the grid's bottom -dmin m_j is at or below every value. The
    // span each scale must then cover is top_j + dmin m_j (>= the sub-block's range).
    const uint16_t dmin_bits = F16NotBelow(max_offset / 63.0f);
    const float dmin = F16ToF32(dmin_bits);
    int m[8], sc[8];
    float span[8], max_span = 0;
    for (int j = 0; j < 8; ++j) {
      m[j] = dmin > 0 ? CeilClamp(offset[j] / dmin, 0, 63) : 0;
      span[j] = std::max(0.0f, top[j] + dmin * static_cast<float>(m[j]));
      max_span = std::max(max_span, span[j]);
    }
    // Scales rounded up too: 15 steps of d sc_j reach the top of the span.
    const uint16_t d_bits = F16NotBelow(max_span / (15.0f * 63.0f));
    const float d = F16ToF32(d_bits);
    for (int j = 0; j < 8; ++j) sc[j] = d > 0 ? CeilClamp(span[j] / (15.0f * d), 0, 63) : 0;
    std::memcpy(dst, &d_bits, 2);
    std::memcpy(dst + 2, &dmin_bits, 2);
    // The 12-byte packing that Q4KScaleMin reads back (layout in dequant.h).
    uint8_t* scales = dst + 4;
    for (int j = 0; j < 4; ++j) {
      scales[j] = static_cast<uint8_t>(sc[j] | (sc[j + 4] >> 4) << 6);
      scales[j + 4] = static_cast<uint8_t>(m[j] | (m[j + 4] >> 4) << 6);
      scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | (m[j + 4] & 0xF) << 4);
    }
    // Sub-block j sits in group g = j / 2: even j in the low nibbles of qs[32g ..], odd j in the
    // high nibbles. The step and offset are the products the decoder forms.
    uint8_t* qs = dst + 16;
    std::memset(qs, 0, 128);
    for (int j = 0; j < 8; ++j) {
      const float step = d * static_cast<float>(sc[j]);
      const float min = dmin * static_cast<float>(m[j]);
      const int shift = 4 * (j % 2);
      uint8_t* q = qs + 32 * (j / 2);
      for (int i = 0; i < kSub; ++i) {
        int nibble = step > 0 ? RoundClamp((src[kSub * j + i] + min) / step, 0, 15) : 0;
        q[i] = static_cast<uint8_t>(q[i] | nibble << shift);
      }
    }
  }
}

void QuantizeQ6_K(const float* src, uint8_t* dst, int64_t n) {
  CheckQuantizable("Q6_K", n, kQkK);
  constexpr int kSub = 16;  // values per sub-block
  for (int64_t b = 0; b < n / kQkK; ++b, src += kQkK, dst += kQ6_KBytes) {
    // Per sub-block: the largest-magnitude value (sign kept) maps to q = -32; values of the other
    // sign reach at most +31.5, so that they round to 31 at most rather than clip from 32.
    float extreme[16], step[16], max_step = 0;
    for (int j = 0; j < 16; ++j) {
      const float* x = src + kSub * j;
      float big = 0, other = 0;
      for (int i = 0; i < kSub; ++i)
        if (std::fabs(x[i]) > std::fabs(big)) big = x[i];
      for (int i = 0; i < kSub; ++i)
        if (x[i] * big < 0) other = std::max(other, std::fabs(x[i]));
      extreme[j] = big;
      step[j] = std::max(std::fabs(big) / 32.0f, other / 31.5f);
      max_step = std::max(max_step, step[j]);
    }
    const uint16_t d_bits = F16NotBelow(max_step / 127.0f);
    const float d = F16ToF32(d_bits);
    int8_t* scales = reinterpret_cast<int8_t*>(dst + 128 + 64);
    for (int j = 0; j < 16; ++j) {
      int magnitude = d > 0 ? CeilClamp(step[j] / d, 0, 127) : 0;
      scales[j] = static_cast<int8_t>(extreme[j] > 0 ? -magnitude : magnitude);
    }
    std::memcpy(dst + 128 + 64 + 16, &d_bits, 2);
    // Value 128h + 32k + l (k = 0..3, l = 0..31) keeps its low 4 bits in ql[64h + l + 32 (k % 2)]
    // (low nibble for k < 2, high for k >= 2) and its high 2 bits in qh[32h + l] at bit 2k: the
    // decoder's reads in dequant.h, inverted. Its sub-block is (128h + 32k + l) / 16.
    uint8_t* ql = dst;
    uint8_t* qh = dst + 128;
    std::memset(dst, 0, 128 + 64);
    for (int i = 0; i < kQkK; ++i) {
      const int h = i / 128, k = (i % 128) / 32, l = i % 32;
      const float scale = d * static_cast<float>(scales[i / kSub]);
      const int q = scale != 0 ? RoundClamp(src[i] / scale, -32, 31) : 0;
      const int u = q + 32;  // 0..63
      ql[64 * h + l + 32 * (k % 2)] |= static_cast<uint8_t>((u & 0xF) << (4 * (k / 2)));
      qh[32 * h + l] |= static_cast<uint8_t>((u >> 4) << (2 * k));
    }
  }
}

namespace {

// The E2M1 code (0-7) nearest to v >= 0, beyond 6 saturated to 6 (code 7). A tie goes to the
// even mantissa, which is the code's lowest bit: 0, 1, 2, 4 (codes 0, 2, 4, 6) win over 0.5, 1.5,
// 3, 6 (codes 1, 3, 5, 7), as round-to-nearest-even does.
int NearestE2M1(float v) {
  // The midpoints between neighbouring magnitudes.
  static constexpr float kMid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  int code = 0;
  while (code < 7 && v > kMid[code]) ++code;
  // v exactly on a midpoint stays on the lower code when that one is even, else moves up.
  if (code < 7 && v == kMid[code] && code % 2 == 1) ++code;
  return code;
}

}  // namespace

void QuantizeMXFP4(const float* src, uint8_t* dst, int64_t n) {
  CheckQuantizable("MXFP4", n);
  for (int64_t b = 0; b < n / kMxfp4Block; ++b, src += kMxfp4Block, dst += kMxfp4Bytes) {
    float amax = 0;
    for (int i = 0; i < kMxfp4Block; ++i) amax = std::fmax(amax, std::fabs(src[i]));
    int shared = -127;
    if (amax > 0) {
      int k = 0;
      std::frexp(amax, &k);  // amax = f * 2^k, f in [0.5, 1): floor(log2(amax)) = k - 1
      shared = std::clamp(k - 1 - 2, -127, 127);
    }
    dst[0] = static_cast<uint8_t>(shared + 127);
    uint8_t* qs = dst + 1;
    std::memset(qs, 0, kMxfp4NibbleBytes);
    for (int i = 0; i < kMxfp4Block; ++i) {
      const float x = src[i];
      const int code = NearestE2M1(std::ldexp(std::fabs(x), -shared)) | (std::signbit(x) ? 8 : 0);
      qs[i % 16] = static_cast<uint8_t>(qs[i % 16] | code << (i < 16 ? 0 : 4));
    }
  }
}

F16AsF32Table::F16AsF32Table() {
  for (uint32_t h = 0; h < 65536; ++h) v[h] = F16ToF32(static_cast<uint16_t>(h));
}
const F16AsF32Table kF16AsF32;

E8M0HalfTable::E8M0HalfTable() {
  for (int e = 0; e < 256; ++e) v[e] = E8M0ToFloat(static_cast<uint8_t>(e)) * 0.5f;
}
const E8M0HalfTable kE8M0Half;

}  // namespace ss
