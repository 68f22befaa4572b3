#include "tensor/half.h"

#include <cmath>
#include <cstring>

namespace ss {

float F16ToF32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: value = mantissa * 2^-24
      float f = std::ldexp(static_cast<float>(mantissa), -24);
      std::memcpy(&bits, &f, 4);
      bits |= sign;
    }
  } else if (exponent == 31) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

uint16_t F32ToF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  uint32_t abs = x & 0x7fffffff;
  if (abs >= 0x7f800000) return sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0);  // inf / nan
  if (abs >= 0x477ff000) return sign | 0x7c00;  // rounds to >= 65520: overflow to inf
  if (abs < 0x38800000) {                       // below the smallest normal: subnormal or zero
    float a;
    std::memcpy(&a, &abs, 4);
    float scaled = a * 16777216.0f;  // 2^24: units of the smallest subnormal
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  uint32_t mantissa = abs & 0x7fffff;
  uint32_t exponent = (abs >> 23) - 112;
  uint32_t half = (exponent << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;
  return sign | static_cast<uint16_t>(half);
}

}  // namespace ss
