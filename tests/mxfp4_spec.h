// MXFP4 as the OCP Microscaling Formats (MX) Specification v1.0 defines it, written for the tests
// without sinkscope's code: the decoders (kernels/dequant.h) and the gpt-oss loaders are held to
// these element by element (tests/test_dequant.cpp, tests/test_mxfp4.cpp).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>

namespace ss::test {

// FP4 E2M1 (MX v1.0, its FP4 element type): bit 3 the sign, bits 2-1 the exponent with bias 1,
// bit 0 the mantissa. Exponent 0 is subnormal: 0.m x 2^(1 - bias) = m / 2; else 1.m x 2^(E - 1).
// No infinities or NaN. Code 8 is -0.
inline double SpecE2M1(int code) {
  const int sign = code >> 3 & 1, exponent = code >> 1 & 3, mantissa = code & 1;
  const double magnitude =
      exponent == 0 ? mantissa * 0.5 : std::ldexp(1.0 + 0.5 * mantissa, exponent - 1);
  return sign ? -magnitude : magnitude;
}

// E8M0 (MX v1.0's scale type): an unsigned exponent with bias 127, no mantissa, no zero;
// 0xFF is NaN.
inline double SpecE8M0(int e) { return e == 0xFF ? std::nan("") : std::ldexp(1.0, e - 127); }

// Element i of a ggml block_mxfp4 (e, qs[16]): low nibbles are elements 0-15, high nibbles 16-31.
inline double SpecGgmlElement(const uint8_t* block, int i) {
  const int code = i < 16 ? block[1 + i] & 0xF : block[1 + i - 16] >> 4;
  return SpecE2M1(code) * SpecE8M0(block[0]);
}

// Element i of a row of the split form: block g = i / 32's byte j holds elements 2j (low nibble)
// and 2j + 1 (high nibble), its scale is scales[g].
inline double SpecSplitElement(const uint8_t* nibbles, const uint8_t* scales, int i) {
  const int g = i / 32, j = i % 32 / 2;
  const uint8_t byte = nibbles[16 * g + j];
  return SpecE2M1(i % 2 ? byte >> 4 : byte & 0xF) * SpecE8M0(scales[g]);
}

// A decoded f32 value against the spec's double: the same number with the same sign (so -0 is
// -0), or Inf of the right sign where the number is beyond f32, or NaN for NaN.
inline bool SameAsSpec(float got, double want) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::fabs(want) > FLT_MAX) return std::isinf(got) && std::signbit(got) == std::signbit(want);
  return static_cast<double>(got) == want && std::signbit(got) == std::signbit(want);
}

}  // namespace ss::test
