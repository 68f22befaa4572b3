// MatMulQ8 (kernels/gemm_q8.h) on every path against a double-precision product of x and the
// dequantised weights: what is left is the order of the f32 additions (and, on the fused path, the
// rounding of each block's sum before it is scaled), so the tolerance is tight. The packing is
// checked against ggml's byte layout (kernels/dequant.h) both ways.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/dequant.h"
#include "kernels/gemm_ggml.h"
#include "kernels/gemm_int8.h"
#include "kernels/gemm_q8.h"
#include "kernels/parallel.h"
#include "kernels/vecmath.h"
#include "test_util.h"

namespace ss {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) { return test::NormalVector(n, seed); }

std::vector<SimdLevel> Levels() {
  std::vector<SimdLevel> levels = {SimdLevel::kPortable};
  if (CpuSimdLevel() != SimdLevel::kPortable) levels.push_back(SimdLevel::kAvx2);
  if (CpuSimdLevel() == SimdLevel::kAvx512) levels.push_back(SimdLevel::kAvx512);
  return levels;
}

TEST(GemmQ8, PackedBlocksAreGgmlQ8_0) {
  const int out = 5, in = 96;
  const std::vector<float> w = Random(out * in, 1);
  const PackedQ8 p = PackQ8_0(w.data(), out, in);
  ASSERT_EQ(p.blocks, 3);
  // 5 rows stored as 2 groups of 4 (the last 3 rows zero).
  EXPECT_EQ(p.bytes(), static_cast<size_t>(8) * in + 8 * 3 * sizeof(float));
  std::vector<uint8_t> ggml(GgmlBytes(kGgmlTypeQ8_0, in));
  std::vector<float> back(in), mine(static_cast<size_t>(out) * in);
  DequantizeQ8Rows(p, 0, out, mine.data());
  for (int o = 0; o < out; ++o) {
    QuantizeQ8_0(w.data() + o * in, ggml.data(), in);
    EXPECT_EQ(Q8RowBlocks(p, o), ggml) << "row " << o;
    Dequantize(kGgmlTypeQ8_0, ggml.data(), back.data(), in);
    for (int i = 0; i < in; ++i) ASSERT_EQ(mine[o * in + i], back[i]) << o << "," << i;
  }
  // Every path unpacks the same values, a last partial block (100 = 3 x 32 + 4) included.
  const std::vector<float> w2 = Random(7 * 100, 2);
  const PackedQ8 p2 = PackQ8_0(w2.data(), 7, 100);
  std::vector<float> want(7 * 100), got(want.size());
  const SimdLevel best = ActiveSimdLevel();
  ForceSimdLevel(SimdLevel::kPortable);
  DequantizeQ8Rows(p2, 0, 7, want.data());
  for (SimdLevel level : Levels()) {
    ForceSimdLevel(level);
    DequantizeQ8Rows(p2, 1, 6, got.data());
    EXPECT_EQ(std::memcmp(got.data(), want.data() + 100, 6 * 100 * sizeof(float)), 0)
        << SimdLevelName(level);
  }
  ForceSimdLevel(best);
}

// The encoder's AVX2 build rounds as the portable one (nearbyint: to nearest, ties to even), here
// with ties made exact: a block whose largest value is 127 * 2^-4 has scale 2^-4, and values at
// (k + 0.5) * 2^-4 sit halfway between two steps.
TEST(GemmQ8, EncoderGivesTheSameBytesOnEveryPath) {
  std::vector<float> x = Random(4096, 3);
  for (int b = 0; b < 16; ++b) {
    float* block = x.data() + b * kQ8Block;
    block[0] = 127.0f / 16;
    for (int i = 1; i < kQ8Block; ++i) block[i] = (static_cast<float>(i - 16) + 0.5f) / 16;
  }
  std::vector<uint8_t> want(GgmlBytes(kGgmlTypeQ8_0, 4096)), got(want.size());
  const SimdLevel best = ActiveSimdLevel();
  ForceSimdLevel(SimdLevel::kPortable);
  QuantizeQ8_0(x.data(), want.data(), 4096);
  // Ties went to the even step: 0.5 -> 0, 1.5 -> 2, -0.5 -> 0, -1.5 -> -2.
  EXPECT_EQ(static_cast<int8_t>(want[2 + 16]), 0);
  EXPECT_EQ(static_cast<int8_t>(want[2 + 17]), 2);
  EXPECT_EQ(static_cast<int8_t>(want[2 + 14]), -2);
  for (SimdLevel level : Levels()) {
    ForceSimdLevel(level);
    QuantizeQ8_0(x.data(), got.data(), 4096);
    EXPECT_EQ(got, want) << SimdLevelName(level);
  }
  ForceSimdLevel(best);
}

// A Q8_0 file's tensor reaches the packer dequantised: quantising it again must give the same
// blocks, or loading a Q8_0 GGUF would quantise twice.
TEST(GemmQ8, RequantisingDequantisedBlocksIsExact) {
  for (int in : {32, 100, 4096}) {
    const int out = 7;
    std::vector<float> w = Random(static_cast<size_t>(out) * in, in);
    for (int i = 0; i < in; i += 9) w[i] *= 50.0f;        // blocks with one outlier
    std::fill(w.begin() + in, w.begin() + 2 * in, 0.0f);  // an all-zero row
    const PackedQ8 p = PackQ8_0(w.data(), out, in);
    std::vector<float> deq(static_cast<size_t>(out) * in);
    DequantizeQ8Rows(p, 0, out, deq.data());
    const PackedQ8 again = PackQ8_0(deq.data(), out, in);
    EXPECT_TRUE(again.qs == p.qs) << "in " << in;
    EXPECT_TRUE(again.scales == p.scales) << "in " << in;
  }
}

TEST(GemmQ8, MatchesDoubleProductOfDequantisedWeights) {
  struct Shape {
    int out, in;
  };
  const SimdLevel best = ActiveSimdLevel();
  for (SimdLevel level : Levels()) {
    ForceSimdLevel(level);
    double worst = 0;
    for (Shape s : {Shape{1, 32}, Shape{3, 64}, Shape{7, 100}, Shape{130, 256}, Shape{257, 300},
                    Shape{64, 1000}}) {
      const std::vector<float> w = Random(static_cast<size_t>(s.out) * s.in, s.out * 31 + s.in);
      const std::vector<float> bias = Random(s.out, 99);
      const PackedQ8 p = PackQ8_0(w.data(), s.out, s.in);
      std::vector<float> wd(static_cast<size_t>(s.out) * s.in);
      DequantizeQ8Rows(p, 0, s.out, wd.data());
      for (int T : {1, 2, 3, 5, 15, 16, 17, 40}) {
        const std::vector<float> x = Random(static_cast<size_t>(T) * s.in, T + 7);
        for (bool with_bias : {false, true}) {
          std::vector<float> y(static_cast<size_t>(T) * s.out, NAN);
          MatMulQ8(x.data(), p, with_bias ? bias.data() : nullptr, y.data(), T);
          for (int t = 0; t < T; ++t)
            for (int o = 0; o < s.out; ++o) {
              double ref = with_bias ? bias[o] : 0.0, mag = std::fabs(ref);
              for (int i = 0; i < s.in; ++i) {
                const double prod = static_cast<double>(x[t * s.in + i]) * wd[o * s.in + i];
                ref += prod;
                mag += std::fabs(prod);
              }
              const double err = std::fabs(y[t * s.out + o] - ref) / std::max(mag, 1e-30);
              worst = std::max(worst, err);
              ASSERT_LT(err, 1e-5)
                  << SimdLevelName(level) << " out " << s.out << " in " << s.in << " T " << T
                  << " (" << t << "," << o << ") " << y[t * s.out + o] << " vs " << ref;
            }
        }
      }
    }
    std::printf(
        "MatMulQ8 %s: largest |difference| / sum |products| vs double on dequantised W: %.2e\n",
        SimdLevelName(level).c_str(), worst);
  }
  ForceSimdLevel(best);
}

TEST(GemmQ8, SameBitsAtAnyThreadCount) {
  const int threads = ThreadCount();
  const int out = 1024, in = 512;
  const std::vector<float> w = Random(static_cast<size_t>(out) * in, 5);
  const PackedQ8 p = PackQ8_0(w.data(), out, in);
  for (int T : {1, 4, 64}) {
    const std::vector<float> x = Random(static_cast<size_t>(T) * in, 6);
    std::vector<float> one(static_cast<size_t>(T) * out), many(one.size());
    SetThreadCount(1);
    MatMulQ8(x.data(), p, nullptr, one.data(), T);
    SetThreadCount(std::max(threads, 3));
    MatMulQ8(x.data(), p, nullptr, many.data(), T);
    SetThreadCount(threads);
    EXPECT_TRUE(one == many) << "T " << T;
  }
}

// A row of x gives the same bits alone (decode) as inside a product of any T, on every path.
TEST(GemmQ8, RowGivesTheSameBitsAloneAsInsideAnyT) {
  const SimdLevel best = ActiveSimdLevel();
  const int out = 53, in = 700;  // three row blocks, three value blocks, a padded last block
  const std::vector<float> w = Random(static_cast<size_t>(out) * in, 31);
  const std::vector<float> bias = Random(out, 32);
  const PackedQ8 p = PackQ8_0(w.data(), out, in);
  for (SimdLevel level : Levels()) {
    ForceSimdLevel(level);
    size_t differ = 0;
    for (int T : {2, 5, 16, 17, 40}) {
      const std::vector<float> x = Random(static_cast<size_t>(T) * in, 33 + T);
      for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
        std::vector<float> all(static_cast<size_t>(T) * out), alone(out);
        MatMulQ8(x.data(), p, b, all.data(), T);
        for (int t = 0; t < T; ++t) {
          MatMulQ8(x.data() + static_cast<size_t>(t) * in, p, b, alone.data(), 1);
          differ +=
              std::memcmp(alone.data(), all.data() + static_cast<size_t>(t) * out, out * 4) != 0;
        }
      }
    }
    std::printf("MatMulQ8 %s: rows alone against inside T = 2..40: %zu differ\n",
                SimdLevelName(level).c_str(), differ);
    EXPECT_EQ(differ, 0u) << SimdLevelName(level);
  }
  ForceSimdLevel(best);
}

// The Q8_0 error against the f32 product, printed for the record (docs/BENCHMARKS.md's accuracy
// table has what it does to a model's NLL).
TEST(GemmQ8, QuantisationErrorIsWithinHalfAScaleStep) {
  const int out = 64, in = 256;
  const std::vector<float> w = Random(static_cast<size_t>(out) * in, 8);
  const PackedQ8 p = PackQ8_0(w.data(), out, in);
  std::vector<float> wd(w.size());
  DequantizeQ8Rows(p, 0, out, wd.data());
  double worst = 0;
  for (int o = 0; o < out; ++o)
    for (int i = 0; i < in; ++i) {
      const float d = p.scales[p.scale_at(o, i / kQ8Block)];
      const double err = std::fabs(wd[o * in + i] - w[o * in + i]);
      ASSERT_LE(err, 0.5 * d * (1 + 1e-5)) << o << "," << i;
      worst = std::max(worst, err / d);
    }
  std::printf("Q8_0: largest |w - dequant(w)| / scale = %.3f (bound 0.5)\n", worst);
}

// The int8 layout (Q8Layout::kInt8, what --precision q8_0 builds for x in int8) holds the blocks of
// the f32 layout, in the int8 products' packed rows only: the same ggml bytes and values back,
// 1.0625 bytes a weight. Rows that are not whole blocks keep the f32 layout.
TEST(GemmQ8, Int8LayoutHoldsTheSameBlocks) {
  if (!Int8Supported(kGgmlTypeQ8_0)) GTEST_SKIP() << "no int8 products (no AVX2, or portable)";
  const int out = 37, in = 96;  // three groups of 16 rows, the last with 5
  const std::vector<float> w = Random(static_cast<size_t>(out) * in, 41);
  const PackedQ8 f32 = PackQ8_0(w.data(), out, in);
  const PackedQ8 int8 = PackQ8_0(w.data(), out, in, Q8Layout::kInt8);
  ASSERT_TRUE(int8.int8_layout());
  EXPECT_TRUE(int8.qs.empty() && int8.scales.empty() && int8.int8_rows.data == nullptr);
  EXPECT_FALSE(int8.empty());
  EXPECT_EQ(int8.bytes(), static_cast<size_t>(3) * 3 * kPackedQ80Bytes);
  std::vector<float> want(static_cast<size_t>(out) * in), got(want.size());
  DequantizeQ8Rows(f32, 0, out, want.data());
  DequantizeQ8Rows(int8, 0, out, got.data());
  EXPECT_EQ(got, want);
  for (int o = 0; o < out; ++o) EXPECT_EQ(Q8RowBlocks(int8, o), Q8RowBlocks(f32, o)) << "row " << o;
  const std::vector<float> w100 = Random(7 * 100, 42);
  EXPECT_FALSE(PackQ8_0(w100.data(), 7, 100, Q8Layout::kInt8).int8_layout());
}

// With x in int8 the int8 layout's product is a Q8_0 file's at native precision (the same packed
// rows, MatMulGgml), bit for bit, on every int8 level and for every T; it differs from the f32
// product by the rounding of x (printed). With f32 x it gives the f32 layout's bits.
TEST(GemmQ8, Int8LayoutTakesXInInt8AsANativeQ8_0File) {
  if (!Int8Supported(kGgmlTypeQ8_0)) GTEST_SKIP() << "no int8 products (no AVX2, or portable)";
  const int out = 70, in = 320;
  const std::vector<float> w = Random(static_cast<size_t>(out) * in, 43);
  const std::vector<float> bias = Random(out, 44);
  const PackedQ8 f32 = PackQ8_0(w.data(), out, in);
  const PackedQ8 int8 = PackQ8_0(w.data(), out, in, Q8Layout::kInt8);
  std::vector<uint8_t> rows(static_cast<size_t>(out) * GgmlBytes(kGgmlTypeQ8_0, in));
  for (int o = 0; o < out; ++o) {
    const std::vector<uint8_t> row = Q8RowBlocks(f32, o);
    std::copy(row.begin(), row.end(), rows.begin() + static_cast<ptrdiff_t>(o) * row.size());
  }
  GgmlMatrix file = GgmlView(kGgmlTypeQ8_0, out, in, rows.data(), nullptr);
  PackForInt8(&file);
  const SimdLevel best = ActiveSimdLevel();
  std::vector<SimdLevel> levels = {SimdLevel::kAvx2};
  if (best == SimdLevel::kAvx512) levels.push_back(SimdLevel::kAvx512);
  double worst = 0;
  for (SimdLevel level : levels) {
    ForceSimdLevel(level);
    for (int T : {1, 3, 17}) {
      const std::vector<float> x = Random(static_cast<size_t>(T) * in, 45 + T);
      std::vector<float> mine(static_cast<size_t>(T) * out), native(mine.size()),
          with_f32(mine.size()), reference(mine.size());
      SetGgmlActivations(kGgmlTypeQ8_0, GgmlActivations::kInt8);
      MatMulQ8(x.data(), int8, bias.data(), mine.data(), T);
      MatMulGgml(x.data(), file, bias.data(), native.data(), T);
      SetGgmlActivations(kGgmlTypeQ8_0, GgmlActivations::kF32);
      MatMulQ8(x.data(), int8, bias.data(), with_f32.data(), T);
      MatMulQ8(x.data(), f32, bias.data(), reference.data(), T);
      EXPECT_EQ(mine, native) << SimdLevelName(level) << " T " << T;
      // Each row of x alone gives its bits inside the T rows.
      SetGgmlActivations(kGgmlTypeQ8_0, GgmlActivations::kInt8);
      for (int t = 0; t < T; ++t) {
        std::vector<float> alone(out);
        MatMulQ8(x.data() + static_cast<size_t>(t) * in, int8, bias.data(), alone.data(), 1);
        EXPECT_TRUE(std::equal(alone.begin(), alone.end(), mine.begin() + t * out))
            << SimdLevelName(level) << " T " << T << " row " << t;
      }
      SetGgmlActivations(kGgmlTypeQ8_0, GgmlActivations::kF32);
      EXPECT_EQ(with_f32, reference) << SimdLevelName(level) << " T " << T;
      EXPECT_NE(mine, reference) << SimdLevelName(level) << " T " << T;  // x was rounded
      for (int t = 0; t < T; ++t)
        for (int o = 0; o < out; ++o) {
          double mag = std::fabs(bias[o]);
          for (int i = 0; i < in; ++i)
            mag += std::fabs(static_cast<double>(x[t * in + i]) * w[o * in + i]);
          worst = std::max(worst, std::fabs(mine[t * out + o] - reference[t * out + o]) / mag);
        }
    }
  }
  // The portable level has no int8 products: x stays f32 there whatever the choice.
  ForceSimdLevel(SimdLevel::kPortable);
  SetGgmlActivations(kGgmlTypeQ8_0, GgmlActivations::kInt8);
  for (int T : {1, 3}) {
    const std::vector<float> x = Random(static_cast<size_t>(T) * in, 50 + T);
    std::vector<float> mine(static_cast<size_t>(T) * out), reference(mine.size());
    MatMulQ8(x.data(), int8, nullptr, mine.data(), T);
    MatMulQ8(x.data(), f32, nullptr, reference.data(), T);
    EXPECT_EQ(mine, reference) << "portable T " << T;
  }
  SetGgmlActivations(kGgmlTypeQ8_0, GgmlActivations::kF32);
  ForceSimdLevel(best);
  std::printf(
      "MatMulQ8 int8 layout: int8 x against f32 x, largest |difference| / sum |products| "
      "%.2e\n",
      worst);
  EXPECT_LT(worst, 2e-2);
}

}  // namespace
}  // namespace ss
