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

// The first NaN or Inf, wherever it sits: in a vector lane, in a block's scalar tail, in a later
// block; the largest finite float and -0 are finite.
TEST(Tensor, FirstNonFiniteFindsEveryPosition) {
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{13}, int64_t{4096}, int64_t{4099},
                    int64_t{10000}}) {
    std::vector<float> v(n, 1.0f);
    v[0] = 3.4028235e38f;
    if (n > 1) v[1] = -0.0f;
    EXPECT_EQ(FirstNonFinite(v.data(), n), -1) << n;
    for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
      for (float bad : {NAN, INFINITY, -INFINITY}) {
        std::vector<float> w = v;
        w[at] = bad;
        if (at + 1 < n) w[n - 1] = NAN;  // a later one does not hide the first
        EXPECT_EQ(FirstNonFinite(w.data(), n), at) << "n " << n << " at " << at;
      }
    }
  }
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
