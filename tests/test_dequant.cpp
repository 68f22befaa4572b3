// Dequantisation kernels against blocks built by hand from the layouts in kernels/dequant.h, and
// the encoders' round trips against the error bounds dequant.h states.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/error.h"
#include "kernels/dequant.h"
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
  const uint8_t scales[12] = {0x41, 0x82, 0xC3, 0xC4, 0x40, 0x81, 0x02, 0xC3,
                              0x41, 0x81, 0x52, 0xFF};
  std::memcpy(block.data() + 4, scales, 12);
  for (int i = 0; i < 128; ++i) block[16 + i] = static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4));
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

}  // namespace
}  // namespace ss
