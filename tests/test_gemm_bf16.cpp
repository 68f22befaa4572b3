// MatMulBf16 (kernels/gemm_bf16.h) on every path against a double-precision product of the
// bf16-rounded operands: the only difference left is the order of the f32 additions, so the
// tolerance is tight. The difference to the f32 product (the bf16 rounding itself) is printed.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/gemm_bf16.h"
#include "kernels/ops.h"
#include "kernels/parallel.h"
#include "kernels/vecmath.h"
#include "tensor/half.h"
#include "test_util.h"

namespace ss {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) { return test::NormalVector(n, seed); }

std::vector<float> RoundedToBf16(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = BF16ToF32(F32ToBF16(v[i]));
  return r;
}

// The paths this CPU can run, with the SIMD level (and AMX permission) that selects each.
struct Path {
  const char* name;
  SimdLevel level;
  bool amx = false;
  Bf16Dot dot = Bf16Dot::kAuto;
};
std::vector<Path> Paths() {
  std::vector<Path> paths = {{"portable", SimdLevel::kPortable}};
  if (CpuSimdLevel() != SimdLevel::kPortable) paths.push_back({"avx2", SimdLevel::kAvx2});
  if (CpuSimdLevel() == SimdLevel::kAvx512)
    paths.push_back({"avx512_fma", SimdLevel::kAvx512, false, Bf16Dot::kFma});
  if (CpuHasAvx512Bf16())
    paths.push_back({"avx512_bf16", SimdLevel::kAvx512, false, Bf16Dot::kVdpbf16ps});
  if (CpuHasAmxBf16()) paths.push_back({"amx_bf16", SimdLevel::kAvx512, true});
  return paths;
}
void Select(const Path& path) {
  ForceSimdLevel(path.level);
  AllowAmx(path.amx);
  ChooseBf16Dot(path.dot);
}
// Back to the default: the best level, AMX allowed, the CPU's choice of kernel.
void SelectBest(SimdLevel best) {
  ForceSimdLevel(best);
  AllowAmx(true);
  ChooseBf16Dot(Bf16Dot::kAuto);
}

TEST(GemmBf16, PackFromBitsEqualsPackFromFloat) {
  for (auto [out, in] : {std::pair{1, 1}, std::pair{33, 31}, std::pair{70, 64}}) {
    auto w = Random(static_cast<size_t>(out) * in, 7);
    std::vector<uint16_t> bits(w.size());
    for (size_t i = 0; i < w.size(); ++i) bits[i] = F32ToBF16(w[i]);
    const PackedBf16 a = PackBf16(w.data(), out, in), b = PackBf16Bits(bits.data(), out, in);
    EXPECT_EQ(a.pairs, (in + 1) / 2);
    EXPECT_EQ(a.panels, (out + kBf16PanelWidth - 1) / kBf16PanelWidth);
    EXPECT_TRUE(a.data == b.data) << out << "x" << in;
  }
}

TEST(GemmBf16, EveryPathMatchesDoubleOnRoundedOperands) {
  const SimdLevel best = ActiveSimdLevel();
  const std::vector<Path> paths = Paths();
  std::vector<double> worst(paths.size(), 0.0);  // largest |y - ref| / (sum |products| + |bias|)
  double worst_vs_f32 = 0.0;                     // largest |y - y_f32| / max |y_f32| per shape
  // 8 and 17 leave tiles of 2 and 5 rows on AVX-512; from 16 rows on, AVX2 widens W for sgemm.
  // AMX: 17 is one 16-row tile and a row, 48 one 32-row and one 16-row tile, 129 four 32-row tiles
  // and a row; in = 3071 (1,536 pairs) and 768 cross its 512-pair blocks, 31 is all tail.
  for (int T : {1, 3, 8, 15, 17, 48, 64, 129})
    for (int in : {1, 31, 64, 768, 3071})
      for (int out : {1, 15, 16, 33, 768}) {
        const auto x = Random(static_cast<size_t>(T) * in, 1 + T);
        const auto w = Random(static_cast<size_t>(out) * in, 2 + in);
        const auto bias = Random(out, 3 + out);
        const auto xr = RoundedToBf16(x), wr = RoundedToBf16(w);
        // Reference without bias, and each entry's sum of |products| for the tolerance.
        std::vector<double> ref(static_cast<size_t>(T) * out), scale(ref.size());
        for (int t = 0; t < T; ++t)
          for (int o = 0; o < out; ++o) {
            double acc = 0, mag = 0;
            for (int i = 0; i < in; ++i) {
              const double p =
                  static_cast<double>(xr[t * in + i]) * wr[static_cast<size_t>(o) * in + i];
              acc += p;
              mag += std::abs(p);
            }
            ref[t * out + o] = acc;
            scale[t * out + o] = mag;
          }
        const PackedBf16 packed = PackBf16(w.data(), out, in);
        std::vector<float> y(ref.size());
        for (size_t p = 0; p < paths.size(); ++p) {
          Select(paths[p]);
          ASSERT_EQ(std::string(Bf16KernelName()), paths[p].name);
          ASSERT_EQ(Bf16KernelActive(), paths[p].level != SimdLevel::kPortable);
          for (bool with_bias : {false, true}) {
            std::fill(y.begin(), y.end(), NAN);
            MatMulBf16(x.data(), packed, with_bias ? bias.data() : nullptr, y.data(), T);
            double shape_worst = 0;
            for (int t = 0; t < T; ++t)
              for (int o = 0; o < out; ++o) {
                const size_t i = static_cast<size_t>(t) * out + o;
                const double r = ref[i] + (with_bias ? bias[o] : 0.0);
                const double s = scale[i] + (with_bias ? std::abs(bias[o]) : 0.0) + 1e-30;
                const double d = std::isfinite(y[i]) ? std::abs(y[i] - r) / s : INFINITY;
                shape_worst = std::max(shape_worst, d);
              }
            EXPECT_LT(shape_worst, 1e-5) << paths[p].name << " T=" << T << " in=" << in
                                         << " out=" << out << " bias=" << with_bias;
            worst[p] = std::max(worst[p], shape_worst);
          }
        }
        // The bf16 rounding error: the last result (best path, with bias) against the f32 product.
        std::vector<float> y32(y.size());
        MatMul(x.data(), w.data(), bias.data(), y32.data(), T, in, out);
        double max_ref = 1e-30, max_diff = 0;
        for (size_t i = 0; i < y.size(); ++i) {
          max_ref = std::max(max_ref, static_cast<double>(std::abs(y32[i])));
          max_diff = std::max(max_diff, static_cast<double>(std::abs(y[i] - y32[i])));
        }
        worst_vs_f32 = std::max(worst_vs_f32, max_diff / max_ref);
      }
  for (size_t p = 0; p < paths.size(); ++p)
    std::printf("gemm_bf16 %s vs double on bf16 operands: max diff %.3g of the sum of |products|\n",
                paths[p].name, worst[p]);
  std::printf("gemm_bf16 vs f32 MatMul (bf16 rounding): max diff %.3g of max |y|\n", worst_vs_f32);
  EXPECT_LT(worst_vs_f32, 5e-2);
  SelectBest(best);
}

// Denormal operands count as zero on every path (as VDPBF16PS treats them), whether they come from
// x, from a float W or from stored bf16 bits.
TEST(GemmBf16, DenormalOperandsCountAsZero) {
  const SimdLevel best = ActiveSimdLevel();
  const float x[2][2] = {{1e-39f, 1.0f}, {1e38f, 1.0f}};  // (T = 2, in = 2)
  const float w[2] = {1e38f, 0.5f};                       // row 0 meets a denormal x
  const float w_small[2] = {1e-39f, 0.5f};                // row 1 meets a denormal W
  const uint16_t w_bits[2] = {0x0001, F32ToBF16(0.5f)};   // the smallest bf16 denormal
  for (const Path& path : Paths()) {
    Select(path);
    float y[2];
    MatMulBf16(&x[0][0], PackBf16(w, 1, 2), nullptr, y, 1);
    EXPECT_EQ(y[0], 0.5f) << path.name;
    MatMulBf16(&x[1][0], PackBf16(w_small, 1, 2), nullptr, y, 1);
    EXPECT_EQ(y[0], 0.5f) << path.name;
    MatMulBf16(&x[1][0], PackBf16Bits(w_bits, 1, 2), nullptr, y, 1);
    EXPECT_EQ(y[0], 0.5f) << path.name;
  }
  SelectBest(best);
}

// Every vector path agrees with the portable one on a prefill-sized product run over all threads
// and on a decode-sized one (T = 1, 2: the AVX2 micro-kernel rather than sgemm).
TEST(GemmBf16, PathsAgreeOnLargeProduct) {
  const std::vector<Path> paths = Paths();
  if (paths.size() < 2) GTEST_SKIP() << "no vector bf16 path on this CPU";
  const SimdLevel best = ActiveSimdLevel();
  for (int T : {1, 2, 300, 1000}) {
    const int in = T == 1000 ? 1030 : 1024, out = 520;
    const auto x = Random(static_cast<size_t>(T) * in, 11),
               w = Random(static_cast<size_t>(out) * in, 12);
    const auto bias = Random(out, 13);
    const PackedBf16 packed = PackBf16(w.data(), out, in);
    std::vector<float> fast(static_cast<size_t>(T) * out), slow(fast.size());
    ForceSimdLevel(SimdLevel::kPortable);
    MatMulBf16(x.data(), packed, bias.data(), slow.data(), T);
    for (size_t p = 1; p < paths.size(); ++p) {
      Select(paths[p]);
      MatMulBf16(x.data(), packed, bias.data(), fast.data(), T);
      EXPECT_LT(test::MaxRelDiff(fast, slow,
                                 std::string("gemm_bf16 ") + paths[p].name +
                                     " vs portable T=" + std::to_string(T)),
                1e-5);
    }
  }
  SelectBest(best);
}

// Other code on a thread (oneDNN under PyTorch, say) may leave the AMX tiles configured its own
// way between our products: MatMulBf16 configures them for each span of its own work, so the
// result is unchanged (a stale configuration would give wrong sums or fault).
__attribute__((target("amx-tile"))) void LoadForeignTileConfig() {
  alignas(64) static uint8_t config[64] = {};
  config[0] = 1;  // palette 1
  for (int t = 0; t < 8; ++t) {
    config[16 + 2 * t] = 32;  // 32 bytes a row
    config[48 + t] = 8;       // 8 rows
  }
  _tile_loadconfig(config);
}
__attribute__((target("amx-tile"))) void ReleaseTiles() { _tile_release(); }

TEST(GemmBf16, AmxIgnoresAForeignTileConfiguration) {
  if (!CpuHasAmxBf16()) GTEST_SKIP() << "no AMX-BF16 on this CPU (or Linux refused the tile state)";
  const SimdLevel best = ActiveSimdLevel();
  SelectBest(best);
  ASSERT_EQ(std::string(Bf16KernelName()), "amx_bf16");
  const int T = 96, in = 512, out = 200;
  const auto x = Random(static_cast<size_t>(T) * in, 31),
             w = Random(static_cast<size_t>(out) * in, 32);
  const PackedBf16 packed = PackBf16(w.data(), out, in);
  std::vector<float> first(static_cast<size_t>(T) * out), second(first.size());
  const int threads = ThreadCount();
  SetThreadCount(1);  // this thread runs every tile
  MatMulBf16(x.data(), packed, nullptr, first.data(), T);
  LoadForeignTileConfig();
  MatMulBf16(x.data(), packed, nullptr, second.data(), T);
  ReleaseTiles();
  SetThreadCount(threads);
  EXPECT_TRUE(first == second);
}

// A row of x gives the same bits alone (decode, explain's recomputation of position 0) as inside a
// product of any T, with and without a bias: on the AVX-512 BF16 path every column's sum runs over
// the pairs in order from zero, then adds the bias, in every tile and in the matrix-vector product;
// on the AVX2 path likewise over the values (the 1- and 2-row tiles, and from 16 rows W widened
// once); the portable path the same way for any T. in = 3071: six 256-pair blocks and an odd
// value; out = 70: a partial panel; T up to 113: past the AVX-512 path's 96-row blocks. The AMX
// tiles (16 rows and more) sum inside the tile unit in an order of its own: reported, not held to.
TEST(GemmBf16, RowGivesTheSameBitsAloneAsInsideAnyT) {
  const SimdLevel best = ActiveSimdLevel();
  const int in = 3071, out = 70;
  const auto w = Random(static_cast<size_t>(out) * in, 41);
  const auto bias = Random(out, 42);
  const PackedBf16 packed = PackBf16(w.data(), out, in);
  for (const Path& path : Paths()) {
    Select(path);
    size_t differ = 0, rows = 0;
    for (int T : {2, 3, 7, 15, 16, 17, 40, 113}) {
      const auto x = Random(static_cast<size_t>(T) * in, 43 + T);
      for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
        std::vector<float> all(static_cast<size_t>(T) * out), alone(out);
        MatMulBf16(x.data(), packed, b, all.data(), T);
        for (int t = 0; t < T; ++t) {
          MatMulBf16(x.data() + static_cast<size_t>(t) * in, packed, b, alone.data(), 1);
          differ +=
              std::memcmp(alone.data(), all.data() + static_cast<size_t>(t) * out, out * 4) != 0;
          ++rows;
        }
      }
    }
    std::printf("MatMulBf16 %s: %zu rows alone against inside T = 2..113, %zu differ\n", path.name,
                rows, differ);
    if (!path.amx) {
      EXPECT_EQ(differ, 0u) << path.name;
    }
  }
  SelectBest(best);
}

// The avx512_fma path is the AVX2 path's arithmetic in zmm registers: the same bits, for every T.
TEST(GemmBf16, Avx512FmaGivesTheAvx2Bits) {
  if (CpuSimdLevel() != SimdLevel::kAvx512) GTEST_SKIP() << "the CPU has no AVX-512";
  const SimdLevel best = ActiveSimdLevel();
  const int in = 1023, out = 77;
  const auto w = Random(static_cast<size_t>(out) * in, 51);
  const auto bias = Random(out, 52);
  const PackedBf16 packed = PackBf16(w.data(), out, in);
  for (int T : {1, 2, 9, 16, 33}) {
    const auto x = Random(static_cast<size_t>(T) * in, 53 + T);
    std::vector<float> a(static_cast<size_t>(T) * out), b(a.size());
    Select({"avx512_fma", SimdLevel::kAvx512, false, Bf16Dot::kFma});
    MatMulBf16(x.data(), packed, bias.data(), a.data(), T);
    Select({"avx2", SimdLevel::kAvx2});
    MatMulBf16(x.data(), packed, bias.data(), b.data(), T);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "T=" << T;
  }
  SelectBest(best);
}

// Each output sums its products in the same order whatever the thread count (threads split
// tiles, never the `in` dimension), so results are bitwise reproducible.
TEST(GemmBf16, SameBitsAtAnyThreadCount) {
  const int threads = ThreadCount();
  // T = 1: the decode product, whose panels are read several at a time.
  for (int T : {200, 1}) {
    const int in = 900, out = T == 1 ? 1000 : 300;
    const auto x = Random(static_cast<size_t>(T) * in, 21),
               w = Random(static_cast<size_t>(out) * in, 22);
    const PackedBf16 packed = PackBf16(w.data(), out, in);
    std::vector<float> one(static_cast<size_t>(T) * out), many(one.size());
    SetThreadCount(1);
    MatMulBf16(x.data(), packed, nullptr, one.data(), T);
    SetThreadCount(std::max(threads, 3));
    MatMulBf16(x.data(), packed, nullptr, many.data(), T);
    SetThreadCount(threads);
    EXPECT_TRUE(one == many) << "T=" << T;
  }
}

}  // namespace
}  // namespace ss
