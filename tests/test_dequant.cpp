// Dequantisation kernels against blocks built by hand from the layouts in kernels/dequant.h.
#include <gtest/gtest.h>

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
  EXPECT_THROW(GgmlBlockBytes(99), Error);
}

}  // namespace
}  // namespace ss
