#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "tensor/half.h"
#include "tensor/tensor.h"

namespace ss {

TEST(Tensor, ZerosRowsReshape) {
  Tensor t = Tensor::Zeros({3, 4});
  EXPECT_EQ(t.numel(), 12);
  for (int i = 0; i < 12; ++i) t[i] = static_cast<float>(i);
  Tensor r = t.Rows(1, 2);
  EXPECT_EQ(r.shape(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(r[0], 4.0f);
  EXPECT_EQ(t.row(2)[1], 9.0f);
  Tensor c = t.Copy();
  c[0] = 100;
  EXPECT_EQ(t[0], 0.0f);  // deep copy
  r[0] = -1;
  EXPECT_EQ(t[4], -1.0f);  // view shares storage
  EXPECT_EQ(t.Reshaped({12}).dim(0), 12);
  EXPECT_EQ(t.ShapeString(), "[3, 4]");
}

TEST(Half, F16RoundTripsEveryValue) {
  // Every finite binary16 value converts to float and back to the same bits.
  int checked = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;  // inf / nan
    float f = F16ToF32(static_cast<uint16_t>(h));
    ASSERT_EQ(F32ToF16(f), h) << "h=" << h << " f=" << f;
    ++checked;
  }
  EXPECT_EQ(checked, 63488);
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0xc000), -2.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(F32ToF16(1e6f), 0x7c00);  // overflow to inf
  EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(NAN))));
}

TEST(Half, F16RoundsToNearest) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-60000.f, 60000.f);
  for (int i = 0; i < 10000; ++i) {
    float f = dist(rng);
    float back = F16ToF32(F32ToF16(f));
    // binary16 has 11 significant bits: relative error at most 2^-11.
    ASSERT_LE(std::fabs(back - f), std::fabs(f) * std::ldexp(1.0f, -11) + 1e-7f) << f;
  }
}

TEST(Half, BF16) {
  EXPECT_EQ(BF16ToF32(0x3f80), 1.0f);
  EXPECT_EQ(F32ToBF16(1.0f), 0x3f80);
  EXPECT_EQ(F32ToBF16(1.00390625f), 0x3f80);  // halfway: ties to even (down)
  EXPECT_EQ(F32ToBF16(1.01171875f), 0x3f82);  // halfway: ties to even (up)
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(NAN))));
}

}  // namespace ss
