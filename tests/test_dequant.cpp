// Dequantisation kernels against blocks built by hand from the layouts in kernels/dequant.h, and
// the encoders' round trips against the error bounds dequant.h states. MXFP4's two decoders
// (ggml's block_mxfp4 and gpt-oss's split blocks + scales) are held to a decoder written from the
// OCP MX v1.0 spec (mxfp4_spec.h) element by element: every code in every position, every scale
// byte, the sign of zero, the subnormal and overflowing ends, and NaN; its quantiser to MX v1.0's
// conversion.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/error.h"
#include "kernels/dequant.h"
#include "mxfp4_spec.h"
#include "tensor/half.h"
#include "test_util.h"

namespace ss {
namespace {

void PutF16(uint8_t* p, float v) {
  uint16_t h = F32ToF16(v);
  std::memcpy(p, &h, 2);
}

std::vector<float> DequantizeBlock(uint32_t type, const std::vector<uint8_t>& block, int64_t n) {
  std::vector<float> out(n);
  Dequantize(type, block.data(), out.data(), n);
  return out;
}

TEST(Dequant, BlockSizes) {
  EXPECT_EQ(GgmlBlockBytes(kGgmlTypeQ8_0), 34u);
  EXPECT_EQ(GgmlBlockBytes(kGgmlTypeQ4_0), 18u);
  EXPECT_EQ(GgmlBlockBytes(kGgmlTypeQ4_K), 144u);
  EXPECT_EQ(GgmlBlockBytes(kGgmlTypeQ6_K), 210u);
  EXPECT_EQ(GgmlBytes(kGgmlTypeQ4_K, 512), 288u);
  EXPECT_EQ(GgmlBytes(kGgmlTypeF16, 3), 6u);
  EXPECT_EQ(GgmlBlockBytes(kGgmlTypeMXFP4), 17u);
  EXPECT_EQ(GgmlBlockValues(kGgmlTypeMXFP4), 32);
  EXPECT_EQ(GgmlBytes(kTypeMxfp4Split, 64), 32u);  // the nibbles; the scales lie apart
  EXPECT_STREQ(GgmlTypeName(kGgmlTypeMXFP4), "MXFP4");
  EXPECT_TRUE(IsDequantizable(kGgmlTypeMXFP4));
  EXPECT_FALSE(IsDequantizable(kTypeMxfp4Split));  // two arrays: DequantizeMxfp4Split
  EXPECT_THROW(DequantizeMxfp4Split(nullptr, nullptr, nullptr, 48), Error);
  EXPECT_THROW(GgmlBytes(kGgmlTypeMXFP4, 48), Error);
}

TEST(Dequant, F16AndBF16) {
  // 0x3C00 = 1.0 and 0xC000 = -2.0 in binary16; 0x3F80 = 1.0 and 0x4040 = 3.0 in bfloat16.
  std::vector<uint8_t> f16 = {0x00, 0x3C, 0x00, 0xC0};
  EXPECT_EQ(DequantizeBlock(kGgmlTypeF16, f16, 2), (std::vector<float>{1.0f, -2.0f}));
  std::vector<uint8_t> bf16 = {0x80, 0x3F, 0x40, 0x40};
  EXPECT_EQ(DequantizeBlock(kGgmlTypeBF16, bf16, 2), (std::vector<float>{1.0f, 3.0f}));
}

TEST(Dequant, Q8_0HandBlock) {
  // d = 0.5, qs[i] = i - 16: x[i] = 0.5 * (i - 16).
  std::vector<uint8_t> block(34);
  PutF16(block.data(), 0.5f);
  for (int i = 0; i < 32; ++i) block[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(i - 16));
  std::vector<float> x = DequantizeBlock(kGgmlTypeQ8_0, block, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(x[i], 0.5f * (i - 16)) << i;
}

TEST(Dequant, Q4_0HandBlock) {
  // d = 2, qs[j] = j | (15 - j) << 4: low nibbles give x[j] = 2 * (j - 8) for j < 16,
  // high nibbles give x[16 + j] = 2 * ((15 - j) - 8) = 2 * (7 - j).
  std::vector<uint8_t> block(18);
  PutF16(block.data(), 2.0f);
  for (int j = 0; j < 16; ++j) block[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  std::vector<float> x = DequantizeBlock(kGgmlTypeQ4_0, block, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(x[j], 2.0f * (j - 8)) << j;
    EXPECT_EQ(x[16 + j], 2.0f * (7 - j)) << j;
  }
  EXPECT_EQ(x[0], -16.0f);
  EXPECT_EQ(x[31], -16.0f);  // j = 15: high nibble 0
}

TEST(Dequant, Q4_KHandBlock) {
  // d = 1, dmin = 0.5. Sub-block scales sc = {1, 2, 3, 4, 17, 33, 50, 63} and
  // mins m = {0, 1, 2, 3, 20, 40, 5, 63}, packed as dequant.h describes:
  //   scales[j]     = sc_j | (sc_{j+4} >> 4) << 6               (j < 4)
  //   scales[j + 4] = m_j  | (m_{j+4} >> 4) << 6
  //   scales[j + 8] = (sc_{j+4} & 15) | (m_{j+4} & 15) << 4
  // sc4 = 17 = 01|0001, sc5 = 33 = 10|0001, sc6 = 50 = 11|0010, sc7 = 63 = 11|1111
  // m4 = 20 = 01|0100,  m5 = 40 = 10|1000,  m6 = 5 = 00|0101,   m7 = 63 = 11|1111
  //   scales[0..3]  = 1|1<<6, 2|2<<6, 3|3<<6, 4|3<<6 = 0x41, 0x82, 0xC3, 0xC4
  //   scales[4..7]  = 0|1<<6, 1|2<<6, 2|0<<6, 3|3<<6 = 0x40, 0x81, 0x02, 0xC3
  //   scales[8..11] = 1|4<<4, 1|8<<4, 2|5<<4, 15|15<<4 = 0x41, 0x81, 0x52, 0xFF
  // Quants: qs[i] = (i % 16) | (15 - i % 16) << 4.
  std::vector<uint8_t> block(144);
  PutF16(block.data(), 1.0f);
  PutF16(block.data() + 2, 0.5f);
  const uint8_t scales[12] = {0x41, 0x82, 0xC3, 0xC4, 0x40, 0x81,
                              0x02, 0xC3, 0x41, 0x81, 0x52, 0xFF};
  std::memcpy(block.data() + 4, scales, 12);
  for (int i = 0; i < 128; ++i)
    block[16 + i] = static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4));
  std::vector<float> x = DequantizeBlock(kGgmlTypeQ4_K, block, 256);
  // x[64g + l] = d sc_{2g} (qs[32g + l] & 15) - dmin m_{2g};
  // x[64g + 32 + l] = d sc_{2g+1} (qs[32g + l] >> 4) - dmin m_{2g+1}.
  EXPECT_EQ(x[0], 0.0f);      // g0 sub 0: 1 * 0 - 0.5 * 0
  EXPECT_EQ(x[5], 5.0f);      // g0 sub 0: qs[5] low = 5: 1 * 5 - 0
  EXPECT_EQ(x[37], 19.5f);    // g0 sub 1: qs[5] high = 10: 2 * 10 - 0.5 * 1
  EXPECT_EQ(x[67], 8.0f);     // g1 sub 2: qs[35] low = 3: 3 * 3 - 0.5 * 2
  EXPECT_EQ(x[135], 109.0f);  // g2 sub 4: qs[71] low = 7: 17 * 7 - 0.5 * 20
  EXPECT_EQ(x[162], 409.0f);  // g2 sub 5: qs[66] high = 13: 33 * 13 - 0.5 * 40
  EXPECT_EQ(x[223], 747.5f);  // g3 sub 6: qs[127] low = 15: 50 * 15 - 0.5 * 5
  EXPECT_EQ(x[255], -31.5f);  // g3 sub 7: qs[127] high = 0: 63 * 0 - 0.5 * 63
}

TEST(Dequant, Q6_KHandBlock) {
  // d = 0.25; scales sc[k] = k + 1 for even k, -(k + 1) for odd k: {1, -2, 3, -4, ..., 15, -16}.
  // ql[i] = i (i < 128): low nibble i % 16, high nibble i / 16.
  // qh[i] = i | 0xC0 (i < 64): bits 0..5 are i's, bits 6..7 are both set.
  std::vector<uint8_t> block(210);
  for (int i = 0; i < 128; ++i) block[i] = static_cast<uint8_t>(i);
  for (int i = 0; i < 64; ++i) block[128 + i] = static_cast<uint8_t>(i | 0xC0);
  for (int k = 0; k < 16; ++k)
    block[192 + k] = static_cast<uint8_t>(static_cast<int8_t>(k % 2 == 0 ? k + 1 : -(k + 1)));
  PutF16(block.data() + 208, 0.25f);
  std::vector<float> x = DequantizeBlock(kGgmlTypeQ6_K, block, 256);
  // x[0]: h0 l0 s0: q = (ql[0] & 15 | (qh[0] & 3) << 4) - 32 = 0 - 32; sc[0] = 1 -> -8
  EXPECT_EQ(x[0], -8.0f);
  // x[17]: h0 l17 s1: ql[17] & 15 = 1, qh[17] & 3 = 1 -> 17 - 32 = -15; sc[1] = -2 -> 7.5
  EXPECT_EQ(x[17], 7.5f);
  // x[37] = x[32 + 5]: ql[37] & 15 = 5, (qh[5] >> 2) & 3 = 1 -> 21 - 32 = -11; sc[2] = 3 -> -8.25
  EXPECT_EQ(x[37], -8.25f);
  // x[84] = x[64 + 20], s1: ql[20] >> 4 = 1, (qh[20] >> 4) & 3 = 1 -> 17 - 32 = -15; sc[5] = -6
  EXPECT_EQ(x[84], 22.5f);
  // x[127] = x[96 + 31], s1: ql[63] >> 4 = 3, (qh[31] >> 6) & 3 = 3 -> 51 - 32 = 19; sc[7] = -8
  EXPECT_EQ(x[127], -38.0f);
  // x[128]: h1 l0 s0: ql[64] & 15 = 0, qh[32] & 3 = 0 -> -32; sc[8] = 9 -> -72
  EXPECT_EQ(x[128], -72.0f);
  // x[240] = x[128 + 96 + 16], s1: ql[112] >> 4 = 7, (qh[48] >> 6) & 3 = 3 -> 55 - 32 = 23;
  // sc[8 + 7] = -16 -> 0.25 * -16 * 23 = -92
  EXPECT_EQ(x[240], -92.0f);
}

TEST(Dequant, Q8_0RoundTripWithinHalfStep) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t n = 32 * 64;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = normal(rng) * (1.0f + static_cast<float>(i / 32));
  for (int i = 0; i < 32; ++i) x[i] = 0.0f;  // an all-zero block: d = 0
  std::vector<uint8_t> q(GgmlBytes(kGgmlTypeQ8_0, n));
  QuantizeQ8_0(x.data(), q.data(), n);
  std::vector<float> y(n);
  Dequantize(kGgmlTypeQ8_0, q.data(), y.data(), n);
  double worst_ratio = 0;
  for (int64_t b = 0; b < n / 32; ++b) {
    uint16_t d_bits;
    std::memcpy(&d_bits, q.data() + 34 * b, 2);
    float d = F16ToF32(d_bits);
    for (int i = 0; i < 32; ++i) {
      float err = std::fabs(x[32 * b + i] - y[32 * b + i]);
      ASSERT_LE(err, d / 2 * (1 + 1e-6f) + 1e-30f) << "block " << b << " value " << i;
      if (d > 0) worst_ratio = std::max(worst_ratio, static_cast<double>(err / d));
    }
  }
  test::MaxDiff(y, x, "Q8_0 round trip");
  std::printf("Q8_0 worst error / d = %.4f (bound 0.5)\n", worst_ratio);
}

TEST(Dequant, Q4_0RoundTripWithinOneStep) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  const int64_t n = 32 * 32;
  std::vector<float> x(n);
  for (float& v : x) v = uniform(rng);
  std::vector<uint8_t> q(GgmlBytes(kGgmlTypeQ4_0, n));
  QuantizeQ4_0(x.data(), q.data(), n);
  std::vector<float> y(n);
  Dequantize(kGgmlTypeQ4_0, q.data(), y.data(), n);
  for (int64_t b = 0; b < n / 32; ++b) {
    uint16_t d_bits;
    std::memcpy(&d_bits, q.data() + 18 * b, 2);
    float d = std::fabs(F16ToF32(d_bits));
    for (int i = 0; i < 32; ++i)
      ASSERT_LE(std::fabs(x[32 * b + i] - y[32 * b + i]), d * (1 + 1e-6f)) << b << " " << i;
  }
  test::MaxDiff(y, x, "Q4_0 round trip");
}

// ---- K-quant encoders --------------------------------------------------------------------------

// Super-blocks of 256 values that exercise the encoders' edge cases, then ordinary ones.
std::vector<float> KQuantTestData(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  const int kBlocks = 12;
  std::vector<float> x(256 * kBlocks);
  auto block = [&](int b) { return x.data() + 256 * b; };
  // 0: all zeros (d = dmin = 0, every scale 0).
  for (int i = 0; i < 256; ++i) block(1)[i] = 0.1f + 2.0f * uniform(rng);  // all positive
  for (int i = 0; i < 256; ++i) block(2)[i] = normal(rng);                 // one outlier:
  block(2)[37] = 40.0f;
  for (int i = 0; i < 256; ++i) block(3)[i] = normal(rng);  // a negative one
  block(3)[200] = -25.0f;
  for (int i = 0; i < 256; ++i) block(4)[i] = -0.5f - 3.0f * uniform(rng);  // all negative
  for (int i = 0; i < 256; ++i) block(5)[i] = -0.7f;                        // constant
  // Sub-blocks of very different ranges (1e-3 .. 1): small 6-bit / int8 sub-block scales.
  for (int i = 0; i < 256; ++i) block(6)[i] = normal(rng) * std::pow(10.0f, -3.0f * (i % 64) / 63);
  // Tiny weights: d falls among the f16 subnormals.
  for (int i = 0; i < 256; ++i) block(7)[i] = 1e-4f * normal(rng);
  for (int b = 8; b < kBlocks; ++b)  // ordinary: weight-sized and unit-sized
    for (int i = 0; i < 256; ++i) block(b)[i] = (b % 2 ? 0.02f : 1.0f) * normal(rng);
  return x;
}

// A Q4_K super-block's fields, unpacked as dequant.h lays them out (independently of the decoder).
struct Q4KFields {
  float d, dmin;
  int sc[8], m[8];
};
Q4KFields ReadQ4K(const uint8_t* block) {
  Q4KFields f;
  uint16_t bits;
  std::memcpy(&bits, block, 2);
  f.d = F16ToF32(bits);
  std::memcpy(&bits, block + 2, 2);
  f.dmin = F16ToF32(bits);
  const uint8_t* s = block + 4;
  for (int j = 0; j < 4; ++j) {
    f.sc[j] = s[j] & 63;
    f.m[j] = s[j + 4] & 63;
    f.sc[j + 4] = (s[j + 8] & 0xF) | (s[j] >> 6) << 4;
    f.m[j + 4] = (s[j + 8] >> 4) | (s[j + 4] >> 6) << 4;
  }
  return f;
}

// Float rounding in the encoder's division and the decoder's multiply-subtract: a few ulps of the
// largest magnitude in play.
float RoundingSlack(const float* x, int n) {
  float amax = 0;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return 1e-6f * amax + 1e-30f;
}

// Checks y = Dequantize(QuantizeQ4_K(x)) against the bounds in dequant.h: per 32-value
// sub-block j, |x - y| <= d sc_j / 2, and d sc_j <= (hi - lo) / 15 + d + dmin / 15 with
// lo = min(0, min x), hi = max x. Returns the largest |x - y| / (d sc_j).
double CheckQ4KBounds(const std::vector<float>& x, const std::vector<uint8_t>& q,
                      const std::vector<float>& y, const std::string& label) {
  double worst = 0;
  for (size_t b = 0; b < x.size() / 256; ++b) {
    const Q4KFields f = ReadQ4K(q.data() + 144 * b);
    for (int j = 0; j < 8; ++j) {
      const float* xs = x.data() + 256 * b + 32 * j;
      const float* ys = y.data() + 256 * b + 32 * j;
      const float slack = RoundingSlack(xs, 32);
      float lo = 0, hi = xs[0];
      for (int i = 0; i < 32; ++i) lo = std::min(lo, xs[i]), hi = std::max(hi, xs[i]);
      const float step = f.d * static_cast<float>(f.sc[j]);
      EXPECT_LE(step, (hi - lo) / 15 + f.d + f.dmin / 15 + slack)
          << label << " block " << b << " sub-block " << j;
      for (int i = 0; i < 32; ++i) {
        const float err = std::fabs(xs[i] - ys[i]);
        EXPECT_LE(err, step / 2 + slack) << label << " block " << b << " value " << 32 * j + i;
        if (step > 0) worst = std::max(worst, static_cast<double>(err / step));
      }
    }
  }
  return worst;
}

// The same for Q6_K: per 16-value sub-block j, |x - y| <= d |sc_j| / 2 and
// d |sc_j| <= max |x_j| / 31.5 + d.
double CheckQ6KBounds(const std::vector<float>& x, const std::vector<uint8_t>& q,
                      const std::vector<float>& y, const std::string& label) {
  double worst = 0;
  for (size_t b = 0; b < x.size() / 256; ++b) {
    const uint8_t* block = q.data() + 210 * b;
    uint16_t d_bits;
    std::memcpy(&d_bits, block + 208, 2);
    const float d = F16ToF32(d_bits);
    for (int j = 0; j < 16; ++j) {
      const float* xs = x.data() + 256 * b + 16 * j;
      const float* ys = y.data() + 256 * b + 16 * j;
      const float slack = RoundingSlack(xs, 16);
      float amax = 0;
      for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(xs[i]));
      const float step = d * std::fabs(static_cast<float>(static_cast<int8_t>(block[192 + j])));
      EXPECT_LE(step, amax / 31.5f + d + slack) << label << " block " << b << " sub-block " << j;
      for (int i = 0; i < 16; ++i) {
        const float err = std::fabs(xs[i] - ys[i]);
        EXPECT_LE(err, step / 2 + slack) << label << " block " << b << " value " << 16 * j + i;
        if (step > 0) worst = std::max(worst, static_cast<double>(err / step));
      }
    }
  }
  return worst;
}

struct KQuantCase {
  const char* name;
  uint32_t type;
  void (*quantize)(const float*, uint8_t*, int64_t);
  double (*check)(const std::vector<float>&, const std::vector<uint8_t>&, const std::vector<float>&,
                  const std::string&);
};

// Round trips on several seeds, then the round trip of the dequantised values: they lie on the
// first encoding's grid, so a second encoding must keep them within its own bound (and, when it
// finds the same scales, reproduce them exactly).
TEST(Dequant, KQuantRoundTripsWithinHalfStep) {
  const KQuantCase cases[] = {{"Q4_K", kGgmlTypeQ4_K, QuantizeQ4_K, CheckQ4KBounds},
                              {"Q6_K", kGgmlTypeQ6_K, QuantizeQ6_K, CheckQ6KBounds}};
  for (const KQuantCase& c : cases) {
    double worst = 0, worst_again = 0, max_err = 0, max_rel_err = 0;
    size_t same = 0, total = 0;
    for (uint32_t seed : {1u, 2u, 3u, 4u}) {
      const std::vector<float> x = KQuantTestData(seed);
      const int64_t n = static_cast<int64_t>(x.size());
      const std::string label = std::string(c.name) + " seed " + std::to_string(seed);
      std::vector<uint8_t> q(GgmlBytes(c.type, n));
      c.quantize(x.data(), q.data(), n);
      std::vector<float> y(n);
      Dequantize(c.type, q.data(), y.data(), n);
      worst = std::max(worst, c.check(x, q, y, label));
      for (int64_t i = 0; i < 256; ++i) ASSERT_EQ(y[i], 0.0f) << label << ": zero block, " << i;
      for (int64_t b = 0; b < n / 256; ++b) {
        const std::vector<float> xb(x.begin() + 256 * b, x.begin() + 256 * (b + 1));
        const std::vector<float> yb(y.begin() + 256 * b, y.begin() + 256 * (b + 1));
        double amax = 0, err = 0;
        for (int i = 0; i < 256; ++i) {
          amax = std::max(amax, static_cast<double>(std::fabs(xb[i])));
          err = std::max(err, static_cast<double>(std::fabs(xb[i] - yb[i])));
        }
        max_err = std::max(max_err, err);
        if (amax > 0) max_rel_err = std::max(max_rel_err, err / amax);
      }
      std::vector<uint8_t> q2(q.size());
      c.quantize(y.data(), q2.data(), n);
      std::vector<float> z(n);
      Dequantize(c.type, q2.data(), z.data(), n);
      worst_again = std::max(worst_again, c.check(y, q2, z, label + " re-quantised"));
      for (int64_t i = 0; i < n; ++i) same += z[i] == y[i];
      total += n;
    }
    std::printf(
        "%s: worst |x - y| / step = %.4f (bound 0.5), re-quantised %.4f; largest |x - y| "
        "%.3g, %.3g of its block's largest |x|; re-quantising reproduces %zu of %zu values\n",
        c.name, worst, worst_again, max_err, max_rel_err, same, total);
    EXPECT_GT(worst, 0.3) << c.name << ": the bound is not tight, or the data does not reach it";
  }
}

// An all-zero super-block encodes to zero scales and the zero quant (no NaN from 0 / 0).
TEST(Dequant, KQuantZeroBlockIsAllZeroBytes) {
  std::vector<float> zeros(256, 0.0f);
  std::vector<uint8_t> q4(144, 0xAB), q6(210, 0xAB);
  QuantizeQ4_K(zeros.data(), q4.data(), 256);
  QuantizeQ6_K(zeros.data(), q6.data(), 256);
  // Q4_K: every field 0. Q6_K: scales and d 0, the 6-bit values q + 32 = 32 (qh bit 1 of each
  // pair).
  EXPECT_EQ(q4, std::vector<uint8_t>(144, 0));
  for (int i = 0; i < 128; ++i) EXPECT_EQ(q6[i], 0) << i;
  for (int i = 128; i < 192; ++i) EXPECT_EQ(q6[i], 0xAA) << i;
  for (int i = 192; i < 210; ++i) EXPECT_EQ(q6[i], 0) << i;
}

TEST(Dequant, Errors) {
  std::vector<uint8_t> buf(1024);
  std::vector<float> out(256);
  try {
    Dequantize(3, buf.data(), out.data(), 32);
    FAIL() << "Q4_1 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Q4_1"), std::string::npos) << e.what();
  }
  try {
    Dequantize(kGgmlTypeQ4_K, buf.data(), out.data(), 100);
    FAIL() << "partial block accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Q4_K"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("100"), std::string::npos) << e.what();
  }
  EXPECT_THROW(QuantizeQ8_0(out.data(), buf.data(), 33), Error);
  try {
    QuantizeQ4_K(out.data(), buf.data(), 32);
    FAIL() << "Q4_K: a 32-value block accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("256-value"), std::string::npos) << e.what();
  }
  EXPECT_THROW(QuantizeQ6_K(out.data(), buf.data(), 128), Error);
  EXPECT_THROW(GgmlBlockBytes(99), Error);
}

using test::SameAsSpec;
using test::SpecE2M1;
using test::SpecE8M0;
using test::SpecGgmlElement;
using test::SpecSplitElement;

TEST(Mxfp4, ScalarsAreTheSpecs) {
  for (int code = 0; code < 16; ++code) {
    EXPECT_TRUE(SameAsSpec(E2M1ToFloat(code), SpecE2M1(code))) << code;
  }
  EXPECT_FALSE(std::signbit(E2M1ToFloat(0)));
  EXPECT_TRUE(std::signbit(E2M1ToFloat(8)));  // -0
  EXPECT_EQ(E2M1ToFloat(7), 6.0f);
  EXPECT_EQ(E2M1ToFloat(9), -0.5f);
  for (int e = 0; e < 256; ++e)
    EXPECT_TRUE(SameAsSpec(E8M0ToFloat(static_cast<uint8_t>(e)), SpecE8M0(e))) << e;
  EXPECT_EQ(std::fpclassify(E8M0ToFloat(0)), FP_SUBNORMAL);  // 2^-127
  EXPECT_EQ(E8M0ToFloat(1), FLT_MIN);                        // 2^-126
  EXPECT_EQ(E8M0ToFloat(127), 1.0f);
  EXPECT_EQ(E8M0ToFloat(254), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isnan(E8M0ToFloat(255)));
}

// A block by hand: scale 2^1 (e = 128); ggml's low nibbles are elements 0-15.
TEST(Mxfp4, HandBlockInBothLayouts) {
  uint8_t block[17] = {128};
  block[1] = 0x71;  // element 0: code 1 (0.5), element 16: code 7 (6)
  block[2] = 0x8F;  // element 1: code 15 (-6), element 17: code 8 (-0)
  float out[32];
  Dequantize(kGgmlTypeMXFP4, block, out, 32);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[16], 12.0f);
  EXPECT_EQ(out[1], -12.0f);
  EXPECT_TRUE(out[17] == 0.0f && std::signbit(out[17]));
  EXPECT_TRUE(out[2] == 0.0f && !std::signbit(out[2]));
  // The same two bytes in the split form: byte 0 holds elements 0 (low) and 1 (high).
  const uint8_t scale = 128;
  DequantizeMxfp4Split(block + 1, &scale, out, 32);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 12.0f);
  EXPECT_EQ(out[2], -12.0f);
  EXPECT_TRUE(out[3] == 0.0f && std::signbit(out[3]));
}

// Every scale byte with every code in every position, both layouts, against the spec. Values
// beyond f32 (e = 253, 254 with large codes) decode to Inf and are the ones Mxfp4BlockFault
// refuses; NaN scales decode to NaN and are refused too; nothing else is.
TEST(Mxfp4, DecodersMatchTheSpecElementByElement) {
  int64_t checked = 0, overflow = 0;
  for (int e = 0; e < 256; ++e) {
    for (int shift = 0; shift < 16; ++shift) {
      uint8_t block[17];
      block[0] = static_cast<uint8_t>(e);
      for (int j = 0; j < 16; ++j)
        block[1 + j] = static_cast<uint8_t>((j + shift) % 16 | ((15 - j + 5 * shift) % 16) << 4);
      float ggml[32], split[32];
      Dequantize(kGgmlTypeMXFP4, block, ggml, 32);
      DequantizeMxfp4Split(block + 1, block, split, 32);
      bool beyond = false;
      for (int i = 0; i < 32; ++i) {
        const double want_ggml = SpecGgmlElement(block, i),
                     want_split = SpecSplitElement(block + 1, block, i);
        ASSERT_TRUE(SameAsSpec(ggml[i], want_ggml))
            << "ggml e " << e << " element " << i << ": " << ggml[i] << " vs " << want_ggml;
        ASSERT_TRUE(SameAsSpec(split[i], want_split))
            << "split e " << e << " element " << i << ": " << split[i] << " vs " << want_split;
        beyond = beyond || std::isnan(want_ggml) || std::fabs(want_ggml) > FLT_MAX;
        checked += 2;
      }
      overflow += beyond && e != 255;
      EXPECT_EQ(Mxfp4BlockFault(block[0], block + 1) != nullptr, beyond)
          << "e " << e << " shift " << shift;
    }
  }
  std::printf(
      "MXFP4: %lld decoded values equal the OCP MX v1.0 decoding (sign of zero included); "
      "%lld blocks overflow f32 and are refused, as every 0xFF block is\n",
      static_cast<long long>(checked), static_cast<long long>(overflow));
  // The ends: 1.5 * 2^127 and 3 * 2^126 are finite; 2 * 2^127 and 4 * 2^126 are not.
  uint8_t small[16] = {0x33};
  EXPECT_EQ(Mxfp4BlockFault(254, small), nullptr);
  small[3] = 0x04;
  EXPECT_NE(Mxfp4BlockFault(254, small), nullptr);
  uint8_t mid[16] = {0x55};
  EXPECT_EQ(Mxfp4BlockFault(253, mid), nullptr);
  mid[15] = 0xD6;  // codes 6 (4) and 13 (-3)
  EXPECT_NE(Mxfp4BlockFault(253, mid), nullptr);
  EXPECT_EQ(Mxfp4BlockFault(0, mid), nullptr);
  EXPECT_NE(std::string(Mxfp4BlockFault(255, small)).find("NaN"), std::string::npos);
}

// MXFP4 values come back exactly (bytes may differ: a block whose largest code is below 4 gets a
// smaller scale), -0 included.
TEST(Mxfp4, QuantiserReturnsMxfp4ValuesExactly) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> code(0, 15), e(0, 254);
  std::vector<uint8_t> blocks;
  for (int b = 0; b < 4000; ++b) {
    const int scale = b < 16 ? b : b < 32 ? 238 + b - 16 : e(rng);
    const int top = b % 5 == 0 ? 3 : 7;  // some blocks without a 4 or a 6
    std::uniform_int_distribution<int> small(0, top);
    uint8_t block[17] = {static_cast<uint8_t>(scale)};
    for (int j = 0; j < 16; ++j) {
      const int lo = small(rng) | (code(rng) & 8), hi = small(rng) | (code(rng) & 8);
      block[1 + j] = static_cast<uint8_t>(lo | hi << 4);
    }
    if (Mxfp4BlockFault(block[0], block + 1)) continue;  // beyond f32: not a value to start from
    blocks.insert(blocks.end(), block, block + 17);
  }
  const int64_t n = static_cast<int64_t>(blocks.size() / 17 * 32);
  std::vector<float> values(n), again(n);
  Dequantize(kGgmlTypeMXFP4, blocks.data(), values.data(), n);
  std::vector<uint8_t> requantised(blocks.size());
  QuantizeMXFP4(values.data(), requantised.data(), n);
  Dequantize(kGgmlTypeMXFP4, requantised.data(), again.data(), n);
  int64_t differ = 0, bytes_differ = 0;
  for (int64_t i = 0; i < n; ++i) differ += std::memcmp(&values[i], &again[i], 4) != 0;
  for (size_t i = 0; i < blocks.size(); ++i) bytes_differ += blocks[i] != requantised[i];
  std::printf("MXFP4 requantised: %lld of %lld values differ (%lld bytes of %zu do)\n",
              static_cast<long long>(differ), static_cast<long long>(n),
              static_cast<long long>(bytes_differ), blocks.size());
  EXPECT_EQ(differ, 0);
}

// MX v1.0's conversion: scale 2^(floor(log2 max |x|) - 2), each value to the nearest E2M1 value
// times the scale, ties to the even mantissa, beyond 6 saturated.
TEST(Mxfp4, QuantiserRoundsToNearestEvenAndSaturates) {
  // Largest magnitude 4: scale 2^0. Ties at the midpoints, then values beyond 6.
  float x[32] = {4.0f,   0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f,  5.0f, 7.9f, -5.0f,
                 -0.25f, -0.0f, 0.2f,  0.3f,  2.4f,  2.6f, -1.2f, 3.0f, 6.0f, 4.5f};
  const float want[32] = {4.0f,  0.0f,  1.0f, 1.0f, 2.0f, 2.0f, 4.0f,  4.0f, 6.0f, -4.0f,
                          -0.0f, -0.0f, 0.0f, 0.5f, 2.0f, 3.0f, -1.0f, 3.0f, 6.0f, 4.0f};
  uint8_t block[17];
  QuantizeMXFP4(x, block, 32);
  EXPECT_EQ(block[0], 127);
  float got[32];
  Dequantize(kGgmlTypeMXFP4, block, got, 32);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(got[i], want[i]) << i << ": " << x[i];
    EXPECT_EQ(std::signbit(got[i]), std::signbit(want[i])) << i;
  }
  // Random values: each is the nearest of the 16 values the block's scale offers.
  const std::vector<float> r = test::NormalVector(32 * 500, 8);
  std::vector<uint8_t> q(17 * 500);
  std::vector<float> d(r.size());
  QuantizeMXFP4(r.data(), q.data(), static_cast<int64_t>(r.size()));
  Dequantize(kGgmlTypeMXFP4, q.data(), d.data(), static_cast<int64_t>(r.size()));
  double worst = 0;
  for (int b = 0; b < 500; ++b) {
    double amax = 0;
    for (int i = 0; i < 32; ++i)
      amax = std::max(amax, std::fabs(static_cast<double>(r[32 * b + i])));
    const double scale = std::ldexp(1.0, static_cast<int>(std::floor(std::log2(amax))) - 2);
    EXPECT_EQ(SpecE8M0(q[17 * b]), scale) << b;
    for (int i = 0; i < 32; ++i) {
      double best = 1e300;
      for (int c = 0; c < 16; ++c)
        best = std::min(best, std::fabs(r[32 * b + i] - SpecE2M1(c) * scale));
      const double err = std::fabs(r[32 * b + i] - d[32 * b + i]);
      EXPECT_LE(err, best * (1 + 1e-12)) << b << " " << i;
      worst = std::max(worst, err / scale);
    }
  }
  // At most half the widest step (4 to 6) times the scale, except for magnitudes between 6 and 8
  // times it, which MX's choice of scale leaves to saturate to 6: up to 2.
  std::printf(
      "MXFP4 quantiser on N(0, 1): largest error %.3g of the block's scale (bound: 2, for "
      "the values the conversion saturates from below 8 to 6)\n",
      worst);
  EXPECT_LE(worst, 2.0);
}

}  // namespace
}  // namespace ss
