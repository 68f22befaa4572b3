// Conversions between float32 and the 16-bit float formats found in checkpoints.
// IEEE 754 binary16 (F16) and bfloat16 (BF16: the top 16 bits of a float32).
#pragma once

#include <cstdint>

namespace ss {

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);  // round to nearest even
inline float BF16ToF32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
// Round to nearest even; NaN stays NaN. Inline: packing a weight calls it per element.
inline uint16_t F32ToBF16(float f) {
  uint32_t x;
  __builtin_memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);
  uint32_t rounding = 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

}  // namespace ss
