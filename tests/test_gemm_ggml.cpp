// MatMulGgml (kernels/gemm_ggml.h) for every weight type it multiplies, on every path, against a
// double-precision product of x and the weights as kernels/dequant.h decodes them (that decoder is
// held to hand-built blocks in test_dequant.cpp, and MXFP4's to a decoder written from the OCP MX
// spec in test_mxfp4.cpp). The blocks are random bytes with the scales set to sane f16 (or E8M0)
// values, so every bit of the layout is exercised. What is left is the order of the f32 additions,
// so the tolerance is tight; the largest difference per type and path is printed.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/error.h"
#include "kernels/dequant.h"
#include "kernels/gemm_ggml.h"
#include "kernels/gemm_int8.h"
#include "kernels/parallel.h"
#include "kernels/vecmath.h"
#include "tensor/half.h"
#include "test_util.h"

namespace ss {
namespace {

std::vector<SimdLevel> Levels() {
  std::vector<SimdLevel> levels = {SimdLevel::kPortable};
  if (CpuSimdLevel() != SimdLevel::kPortable) levels.push_back(SimdLevel::kAvx2);
  if (CpuSimdLevel() == SimdLevel::kAvx512) levels.push_back(SimdLevel::kAvx512);
  return levels;
}

void PutHalf(uint8_t* p, float v) {
  const uint16_t h = F32ToF16(v);
  std::memcpy(p, &h, 2);
}

// `out` rows of `in` values of `type` in ggml's layout: random bytes, scales in a sane range.
std::vector<uint8_t> RandomRows(uint32_t type, int out, int in, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f), scale(0.002f, 0.02f);
  const size_t row_bytes = GgmlBytes(type, in);
  std::vector<uint8_t> data(row_bytes * out);
  for (uint8_t& b : data) b = static_cast<uint8_t>(byte(rng));
  const int64_t blocks = static_cast<int64_t>(out) * in / GgmlBlockValues(type);
  const size_t block_bytes = GgmlBlockBytes(type);
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* p = data.data() + b * block_bytes;
    switch (type) {
      case kGgmlTypeF16:
        PutHalf(p, unit(rng));
        break;
      case kGgmlTypeBF16: {
        const uint16_t v = F32ToBF16(unit(rng));
        std::memcpy(p, &v, 2);
        break;
      }
      case kGgmlTypeQ8_0:
      case kGgmlTypeQ4_0:
        PutHalf(p, (b % 2 ? -1 : 1) * scale(rng));
        break;
      case kGgmlTypeQ4_K:
        PutHalf(p, scale(rng) / 8);
        PutHalf(p + 2, scale(rng) / 8);
        break;
      case kGgmlTypeQ6_K:
        PutHalf(p + 208, scale(rng) / 16);
        break;
      case kGgmlTypeMXFP4:
        p[0] = static_cast<uint8_t>(118 + byte(rng) % 14);
        break;  // 2^-9 .. 2^4
    }
  }
  return data;
}

// W (out, in) of `type` over random bytes that `data` (and `scales`) hold: every `row_step`-th row
// of a stored tensor of out * row_step rows, from row `first` (gpt-oss's gate rows are the even
// ones of gate_up_proj, its up rows the odd ones). The split MXFP4 form gets E8M0 scales of
// 2^-9 .. 2^4.
struct Stored {
  std::vector<uint8_t> data, scales;
  GgmlMatrix w;
};
Stored RandomMatrix(uint32_t type, int out, int in, uint32_t seed, int row_step = 1,
                    int first = 0) {
  Stored s;
  const int rows = out * row_step;
  if (type == kTypeMxfp4Split) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> byte(0, 255);
    s.data.resize(static_cast<size_t>(rows) * in / 2);
    s.scales.resize(static_cast<size_t>(rows) * in / 32);
    for (uint8_t& b : s.data) b = static_cast<uint8_t>(byte(rng));
    for (uint8_t& e : s.scales) e = static_cast<uint8_t>(118 + byte(rng) % 14);
    s.w = GgmlView(type, out, in, s.data.data() + static_cast<size_t>(first) * in / 2, nullptr,
                   row_step, s.scales.data() + static_cast<size_t>(first) * in / 32);
  } else {
    s.data = RandomRows(type, rows, in, seed);
    s.w = GgmlView(type, out, in, s.data.data() + first * GgmlBytes(type, in), nullptr, row_step);
  }
  return s;
}

struct Case {
  uint32_t type;
  int in;
  int row_step = 1, first = 0;  // rows a stride apart (RandomMatrix)
};

TEST(GemmGgml, MatchesDoubleProductOfDequantisedWeights) {
  const SimdLevel best = ActiveSimdLevel();
  for (Case c : {Case{kGgmlTypeF16, 37}, Case{kGgmlTypeF16, 256}, Case{kGgmlTypeBF16, 45},
                 Case{kGgmlTypeBF16, 128}, Case{kGgmlTypeQ8_0, 96}, Case{kGgmlTypeQ4_0, 160},
                 Case{kGgmlTypeQ4_K, 256}, Case{kGgmlTypeQ4_K, 768}, Case{kGgmlTypeQ6_K, 512},
                 Case{kGgmlTypeMXFP4, 32}, Case{kGgmlTypeMXFP4, 288}, Case{kTypeMxfp4Split, 64},
                 Case{kTypeMxfp4Split, 320}, Case{kTypeMxfp4Split, 96, 2, 1},
                 Case{kGgmlTypeQ8_0, 64, 3, 2}}) {
    for (SimdLevel level : Levels()) {
      ForceSimdLevel(level);
      double worst[2] = {0, 0};  // one row of x (decode), several
      for (int out : {1, 5, 131}) {
        const Stored stored = RandomMatrix(c.type, out, c.in, out * 7 + c.in, c.row_step, c.first);
        const GgmlMatrix& w = stored.w;
        std::vector<float> wd(static_cast<size_t>(out) * c.in);
        DequantizeGgmlRows(w, 0, out, wd.data());
        const std::vector<float> bias = test::NormalVector(out, 99);
        for (int T : {1, 3, 15, 16, 21}) {
          const std::vector<float> x = test::NormalVector(static_cast<size_t>(T) * c.in, T + 5);
          for (bool with_bias : {false, true}) {
            std::vector<float> y(static_cast<size_t>(T) * out, NAN);
            MatMulGgml(x.data(), w, with_bias ? bias.data() : nullptr, y.data(), T);
            for (int t = 0; t < T; ++t)
              for (int o = 0; o < out; ++o) {
                double ref = with_bias ? bias[o] : 0.0, mag = std::fabs(ref);
                for (int i = 0; i < c.in; ++i) {
                  const double prod = static_cast<double>(x[t * c.in + i]) * wd[o * c.in + i];
                  ref += prod;
                  mag += std::fabs(prod);
                }
                const double err = std::fabs(y[t * out + o] - ref) / std::max(mag, 1e-30);
                double& w_path = worst[T > 1];
                w_path = std::max(w_path, err);
                ASSERT_LT(err, 2e-6) << GgmlTypeName(c.type) << " " << SimdLevelName(level)
                                     << " out " << out << " in " << c.in << " T " << T << " (" << t
                                     << "," << o << ") " << y[t * out + o] << " vs " << ref;
              }
          }
        }
      }
      const std::string rows =
          c.row_step > 1 ? " (rows " + std::to_string(c.row_step) + " stored rows apart)" : "";
      std::printf(
          "MatMulGgml %s in %d%s, %s: largest |difference| / sum |products| vs double: "
          "T = 1 (%s) %.2e, T > 1 %.2e\n",
          GgmlTypeName(c.type), c.in, rows.c_str(), SimdLevelName(level).c_str(),
          GgmlKernelName(c.type), worst[0], worst[1]);
    }
  }
  ForceSimdLevel(best);
}

// A row's sum is formed the same way whichever thread computes it.
// DequantizeGgmlRows (the rows every product multiplies, the native embedding lookup) on each
// vector path (AVX2, AVX-512) gives the scalar decoder's bits exactly: random blocks of every type,
// and for F16 / BF16 every finite 16-bit pattern (subnormals included).
TEST(GemmGgml, VectorDequantiserIsTheScalarDecoderBitForBit) {
  if (CpuSimdLevel() == SimdLevel::kPortable) GTEST_SKIP() << "the CPU has no AVX2";
  struct Rows {
    uint32_t type;
    int out, in;
    std::vector<uint8_t> data;
  };
  std::vector<Rows> cases;
  for (Case c : {Case{kGgmlTypeF16, 37}, Case{kGgmlTypeBF16, 45}, Case{kGgmlTypeQ8_0, 96},
                 Case{kGgmlTypeQ4_0, 160}, Case{kGgmlTypeQ4_K, 768}, Case{kGgmlTypeQ6_K, 512},
                 Case{kGgmlTypeMXFP4, 96}})
    cases.push_back({c.type, 9, c.in, RandomRows(c.type, 9, c.in, 21 + c.type)});
  {
    // MXFP4 with every scale byte but NaN's (e = 0 and 1 give f32 subnormal scales, 253 and 254
    // values that overflow to Inf, the same in both) and every code in every position.
    Rows every{kGgmlTypeMXFP4, 255, 64, {}};
    for (int e = 0; e < 255; ++e)
      for (int b = 0; b < 2; ++b) {
        every.data.push_back(static_cast<uint8_t>(e));
        for (int j = 0; j < 16; ++j)
          every.data.push_back(
              static_cast<uint8_t>((j + e + b) % 16 | ((15 - j + 3 * e) % 16) << 4));
      }
    cases.push_back(std::move(every));
  }
  for (uint32_t type : {kGgmlTypeF16, kGgmlTypeBF16}) {
    Rows all{type, 256, 255, {}};  // 65280 patterns: every one but the last 256
    for (uint32_t bits = 0; bits < 256u * 255u; ++bits) {
      // Skip NaN / Inf (refused at load): exponent all ones.
      const bool non_finite =
          type == kGgmlTypeF16 ? (bits & 0x7C00) == 0x7C00 : (bits & 0x7F80) == 0x7F80;
      const uint16_t v = static_cast<uint16_t>(non_finite ? 0 : bits);
      all.data.push_back(static_cast<uint8_t>(v & 0xFF));
      all.data.push_back(static_cast<uint8_t>(v >> 8));
    }
    cases.push_back(std::move(all));
  }
  const SimdLevel best = ActiveSimdLevel();
  std::vector<SimdLevel> vector_levels = Levels();
  vector_levels.erase(vector_levels.begin());  // the portable level is the scalar decoder itself
  for (const Rows& c : cases) {
    const GgmlMatrix w = GgmlView(c.type, c.out, c.in, c.data.data(), nullptr);
    std::vector<float> scalar(static_cast<size_t>(c.out) * c.in), vec(scalar.size());
    Dequantize(c.type, c.data.data(), scalar.data(), static_cast<int64_t>(scalar.size()));
    for (SimdLevel level : vector_levels) {
      ForceSimdLevel(level);
      DequantizeGgmlRows(w, 0, c.out, vec.data());
      size_t differ = 0;
      for (size_t i = 0; i < vec.size(); ++i) differ += std::memcmp(&vec[i], &scalar[i], 4) != 0;
      std::printf("%s, %s: %zu values, %zu differ from the scalar decoder\n", GgmlTypeName(c.type),
                  SimdLevelName(level).c_str(), vec.size(), differ);
      EXPECT_EQ(differ, 0u) << GgmlTypeName(c.type) << " " << SimdLevelName(level);
      // Rows from the middle land where they belong.
      std::vector<float> two(2 * static_cast<size_t>(c.in));
      DequantizeGgmlRows(w, c.out - 3, 2, two.data());
      EXPECT_EQ(std::memcmp(two.data(), scalar.data() + static_cast<size_t>(c.out - 3) * c.in,
                            two.size() * 4),
                0)
          << GgmlTypeName(c.type) << " " << SimdLevelName(level);
    }
    ForceSimdLevel(best);
  }
  // The split MXFP4 form, rows two stored rows apart (gpt-oss's up rows), every scale but NaN.
  const int out = 255, in = 64;
  std::vector<uint8_t> nibbles(static_cast<size_t>(2 * out) * in / 2),
      scales(static_cast<size_t>(2 * out) * in / 32);
  for (size_t i = 0; i < nibbles.size(); ++i) nibbles[i] = static_cast<uint8_t>(i * 37 + 11);
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<uint8_t>(i / 4 % 255);
  const GgmlMatrix w = GgmlView(kTypeMxfp4Split, out, in, nibbles.data() + in / 2, nullptr, 2,
                                scales.data() + in / 32);
  std::vector<float> scalar(static_cast<size_t>(out) * in), vec(scalar.size());
  for (int r = 0; r < out; ++r)
    DequantizeMxfp4Split(w.row(r), w.row_scales(r), scalar.data() + static_cast<size_t>(r) * in,
                         in);
  for (SimdLevel level : vector_levels) {
    ForceSimdLevel(level);
    DequantizeGgmlRows(w, 0, out, vec.data());
    size_t differ = 0;
    for (size_t i = 0; i < vec.size(); ++i) differ += std::memcmp(&vec[i], &scalar[i], 4) != 0;
    std::printf(
        "MXFP4 (blocks + scales), every other row, %s: %zu values, %zu differ from the scalar "
        "decoder\n",
        SimdLevelName(level).c_str(), vec.size(), differ);
    EXPECT_EQ(differ, 0u) << SimdLevelName(level);
  }
  ForceSimdLevel(best);
}

// A row of x gives the same bits alone (T = 1: decode, explain's recomputation of position 0) as
// inside a product of any T: one pass over W (T <= 16), W decoded whole (T > 16), a register tile's
// edge or its middle, with and without a bias; rows of 300 values (F16, BF16: a padded last chunk)
// or 768 (three value blocks), 53 rows of W (three row blocks, tile edges).
TEST(GemmGgml, RowGivesTheSameBitsAloneAsInsideAnyT) {
  const SimdLevel best = ActiveSimdLevel();
  for (uint32_t type : {kGgmlTypeBF16, kGgmlTypeF16, kGgmlTypeQ8_0, kGgmlTypeQ4_0, kGgmlTypeQ4_K,
                        kGgmlTypeQ6_K, kGgmlTypeMXFP4, kTypeMxfp4Split}) {
    const int out = 53, in = type == kGgmlTypeBF16 || type == kGgmlTypeF16 ? 300 : 768;
    const Stored stored = RandomMatrix(type, out, in, 11);
    const std::vector<float> bias = test::NormalVector(out, 12);
    for (SimdLevel level : Levels()) {
      ForceSimdLevel(level);
      size_t rows = 0, differ = 0;
      for (int T : {2, 5, 16, 17, 40}) {
        const std::vector<float> x = test::NormalVector(static_cast<size_t>(T) * in, 13 + T);
        for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
          std::vector<float> all(static_cast<size_t>(T) * out), alone(out);
          MatMulGgml(x.data(), stored.w, b, all.data(), T);
          for (int t = 0; t < T; ++t) {
            MatMulGgml(x.data() + static_cast<size_t>(t) * in, stored.w, b, alone.data(), 1);
            ++rows;
            differ +=
                std::memcmp(alone.data(), all.data() + static_cast<size_t>(t) * out, out * 4) != 0;
          }
        }
      }
      std::printf("MatMulGgml %s, %s: %zu rows alone against inside T = 2..40, %zu differ\n",
                  GgmlTypeName(type), SimdLevelName(level).c_str(), rows, differ);
      EXPECT_EQ(differ, 0u) << GgmlTypeName(type) << " " << SimdLevelName(level);
    }
  }
  ForceSimdLevel(best);
}

// AVX-512 and AVX2 form every output with the same operations on the same lanes: the same bits.
TEST(GemmGgml, Avx2AndAvx512GiveTheSameBits) {
  if (CpuSimdLevel() != SimdLevel::kAvx512) GTEST_SKIP() << "the CPU has no AVX-512";
  const SimdLevel best = ActiveSimdLevel();
  for (uint32_t type : {kGgmlTypeBF16, kGgmlTypeF16, kGgmlTypeQ8_0, kGgmlTypeQ4_0, kGgmlTypeQ4_K,
                        kGgmlTypeQ6_K, kGgmlTypeMXFP4, kTypeMxfp4Split}) {
    const int out = 53, in = type == kGgmlTypeBF16 || type == kGgmlTypeF16 ? 300 : 768;
    const Stored stored = RandomMatrix(type, out, in, 21);
    for (int T : {1, 7, 33}) {
      const std::vector<float> x = test::NormalVector(static_cast<size_t>(T) * in, 22 + T);
      std::vector<float> a(static_cast<size_t>(T) * out), b(a.size());
      ForceSimdLevel(SimdLevel::kAvx512);
      MatMulGgml(x.data(), stored.w, nullptr, a.data(), T);
      ForceSimdLevel(SimdLevel::kAvx2);
      MatMulGgml(x.data(), stored.w, nullptr, b.data(), T);
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0)
          << GgmlTypeName(type) << " T " << T;
    }
  }
  ForceSimdLevel(best);
}

// The split MXFP4 form's VBMI kernels (the nibbles put in order by VPMULTISHIFTQB) give the bits of
// the AVX-512F ones: decode (T = 1: rows four at a time and the ones left over), the products
// MatMulDot forms (T > 1), with and without a bias, on gpt-oss's 2880-value rows and on its gate
// rows (every other stored row); and the dequantised rows themselves.
TEST(GemmGgml, Mxfp4SplitVbmiGivesTheAvx512Bits) {
  if (CpuSimdLevel() != SimdLevel::kAvx512) GTEST_SKIP() << "the CPU has no AVX-512";
  const SimdLevel best = ActiveSimdLevel();
  ForceSimdLevel(SimdLevel::kAvx512);
  AllowVbmiForMxfp4(true);
  if (std::string(GgmlKernelName(kTypeMxfp4Split)) != "avx512_vbmi") {
    ForceSimdLevel(best);
    GTEST_SKIP() << "the CPU has no AVX-512 VBMI";
  }
  size_t products = 0, differ = 0;
  for (Case c : {Case{kTypeMxfp4Split, 2880}, Case{kTypeMxfp4Split, 96, 2, 1}}) {
    for (int out : {1, 7, 45}) {
      const Stored stored = RandomMatrix(c.type, out, c.in, 31 + out, c.row_step, c.first);
      const std::vector<float> bias = test::NormalVector(out, 32);
      for (int T : {1, 5, 20}) {
        const std::vector<float> x = test::NormalVector(static_cast<size_t>(T) * c.in, 33 + T);
        for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
          std::vector<float> with(static_cast<size_t>(T) * out), without(with.size());
          AllowVbmiForMxfp4(true);
          MatMulGgml(x.data(), stored.w, b, with.data(), T);
          AllowVbmiForMxfp4(false);
          EXPECT_STREQ(GgmlKernelName(c.type), "avx512");
          MatMulGgml(x.data(), stored.w, b, without.data(), T);
          ++products;
          differ += std::memcmp(with.data(), without.data(), with.size() * 4) != 0;
        }
      }
      std::vector<float> with(static_cast<size_t>(out) * c.in), without(with.size());
      AllowVbmiForMxfp4(true);
      DequantizeGgmlRows(stored.w, 0, out, with.data());
      AllowVbmiForMxfp4(false);
      DequantizeGgmlRows(stored.w, 0, out, without.data());
      EXPECT_EQ(std::memcmp(with.data(), without.data(), with.size() * 4), 0)
          << "dequantised rows, in " << c.in << " out " << out;
    }
  }
  AllowVbmiForMxfp4(true);
  ForceSimdLevel(best);
  std::printf("MXFP4 (blocks + scales), AVX-512 VBMI against AVX-512F: %zu products, %zu differ\n",
              products, differ);
  EXPECT_EQ(differ, 0u);
}

// x as the int8 products round it (kernels/gemm_int8.h), from the header's rule: each 32 values
// scaled by 127 / max |x|, rounded to the nearest integer (ties to even), times max |x| / 127.
std::vector<double> XRoundedToInt8(const std::vector<float>& x) {
  std::vector<double> r(x.size());
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0;
    for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float inv = amax > 0 ? 127.0f / amax : 0.0f, dx = amax / 127.0f;
    for (size_t i = b; i < b + 32; ++i) r[i] = std::nearbyint(x[i] * inv) * static_cast<double>(dx);
  }
  return r;
}

// GgmlActivations::kInt8 on every type that has it and every vector level: against a double
// product of the dequantised W and x rounded to int8 (only the order and rounding of the f32
// steps remain: tight), and, printed, against the f32 product (what the rounding of x costs).
TEST(GemmGgml, Int8ActivationsMatchDoubleProductOfRoundedX) {
  if (CpuSimdLevel() == SimdLevel::kPortable) GTEST_SKIP() << "the CPU has no AVX2";
  const SimdLevel best = ActiveSimdLevel();
  for (Case c :
       {Case{kGgmlTypeQ4_0, 160}, Case{kGgmlTypeQ4_0, 96}, Case{kGgmlTypeMXFP4, 288},
        Case{kTypeMxfp4Split, 320}, Case{kTypeMxfp4Split, 96, 2, 1}, Case{kGgmlTypeQ4_K, 768},
        Case{kGgmlTypeQ6_K, 512}, Case{kGgmlTypeQ8_0, 96}, Case{kGgmlTypeQ8_0, 160, 3, 2}}) {
    SetGgmlActivations(c.type, GgmlActivations::kInt8);
    for (SimdLevel level : {SimdLevel::kAvx2, SimdLevel::kAvx512}) {
      if (level > CpuSimdLevel()) continue;
      ForceSimdLevel(level);
      ASSERT_EQ(GgmlActivationsFor(c.type), GgmlActivations::kInt8);
      // The rows as stored (Q8_0: packed only), then packed (PackForInt8).
      for (int packed = c.type == kGgmlTypeQ8_0; packed < (Int8PackSupports(c.type) ? 2 : 1);
           ++packed) {
        double worst = 0, worst_f32 = 0;
        for (int out : {1, 5, 131}) {
          Stored stored = RandomMatrix(c.type, out, c.in, out * 13 + c.in, c.row_step, c.first);
          if (packed) PackForInt8(&stored.w);
          ASSERT_EQ(stored.w.int8 != nullptr, packed == 1);
          std::vector<float> wd(static_cast<size_t>(out) * c.in);
          DequantizeGgmlRows(stored.w, 0, out, wd.data());
          const std::vector<float> bias = test::NormalVector(out, 77);
          for (int T : {1, 3, 20}) {
            const std::vector<float> x = test::NormalVector(static_cast<size_t>(T) * c.in, T + 17);
            const std::vector<double> xr = XRoundedToInt8(x);
            std::vector<float> y(static_cast<size_t>(T) * out, NAN);
            MatMulGgml(x.data(), stored.w, bias.data(), y.data(), T);
            for (int t = 0; t < T; ++t)
              for (int o = 0; o < out; ++o) {
                double ref = bias[o], mag = std::fabs(ref), ref_f32 = bias[o];
                for (int i = 0; i < c.in; ++i) {
                  ref += xr[t * c.in + i] * wd[o * c.in + i];
                  mag += std::fabs(xr[t * c.in + i] * wd[o * c.in + i]);
                  ref_f32 += static_cast<double>(x[t * c.in + i]) * wd[o * c.in + i];
                }
                const double err = std::fabs(y[t * out + o] - ref) / std::max(mag, 1e-30);
                worst = std::max(worst, err);
                worst_f32 =
                    std::max(worst_f32, std::fabs(y[t * out + o] - ref_f32) / std::max(mag, 1e-30));
                ASSERT_LT(err, 2e-6)
                    << GgmlTypeName(c.type) << " " << SimdLevelName(level) << " out " << out
                    << " T " << T << " (" << t << "," << o << ")";
              }
          }
        }
        std::printf(
            "MatMulGgml %s%s in %d, int8 x, %s: largest |difference| / sum |products| vs double on "
            "rounded x "
            "%.2e; vs the f32 product %.2e\n",
            GgmlTypeName(c.type), packed ? " packed" : "", c.in, SimdLevelName(level).c_str(),
            worst, worst_f32);
      }
    }
    SetGgmlActivations(c.type, GgmlActivations::kF32);
  }
  ForceSimdLevel(best);
}

// The packed rows (PackForInt8) of a stack of experts: an expert's rows (GgmlMatrix::Rows from a
// multiple of 16) keep the packing and give the bits of those rows inside the whole product; a
// view from elsewhere falls back to the stored rows. The pack holds each block's codes and scale
// as the layout in kernels/gemm_int8.h says.
TEST(GemmGgml, PackedRowsOfAnExpertAreThoseOfTheStack) {
  if (CpuSimdLevel() == SimdLevel::kPortable) GTEST_SKIP() << "the CPU has no AVX2";
  for (auto [type, in] : {std::pair{kGgmlTypeQ4_0, 96},
                          {kGgmlTypeMXFP4, 96},
                          {kTypeMxfp4Split, 96},
                          {kGgmlTypeQ4_K, 256}}) {
    SetGgmlActivations(type, GgmlActivations::kInt8);
    const int experts = 3, rows = 40;  // 40: an expert's last group is shared
    Stored stored = RandomMatrix(type, experts * rows, in, 23);
    PackForInt8(&stored.w);
    ASSERT_NE(stored.w.int8, nullptr);
    // The layout: row r, code k of block b against the dequantised value / scale.
    std::vector<float> wd(static_cast<size_t>(experts) * rows * in);
    DequantizeGgmlRows(stored.w, 0, experts * rows, wd.data());
    for (int r : {0, 17, 119})
      for (int b = 0; b < (type == kGgmlTypeQ4_K ? 0 : in / 32); ++b) {
        const bool q4 = type == kGgmlTypeQ4_0;
        const uint8_t* d = stored.w.int8 + static_cast<size_t>(r / 16) * stored.w.int8_group_bytes +
                           static_cast<size_t>(b) * (q4 ? kPackedBlockBytes : kPackedMxBlockBytes);
        uint16_t bits;
        std::memcpy(&bits, d + kPackedCodeBytes + 2 * (r % 16), 2);
        const float scale =  // Q4_0: f16 d; MXFP4: s = e - 128 as int8, the scale 2^(s + 1)
            q4 ? F16ToF32(bits)
               : std::ldexp(1.0f, static_cast<int8_t>(d[kPackedCodeBytes + r % 16]) + 1);
        static const float kE2M1[16] = {0,     0.5f,  1,  1.5f,  2,  3,  4,  6,
                                        -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
        for (int k = 0; k < 32; ++k) {
          const uint8_t byte = d[64 * (k / 8) + 4 * (r % 16) + k % 4];
          const int code = k % 8 < 4 ? byte & 15 : byte >> 4;
          const float v =
              type == kGgmlTypeQ4_0 ? static_cast<float>(code - 8) * scale : kE2M1[code] * scale;
          ASSERT_EQ(v, wd[static_cast<size_t>(r) * in + 32 * b + k])
              << GgmlTypeName(type) << " row " << r << " block " << b << " value " << k;
        }
      }
    const int T = 5;
    const std::vector<float> x = test::NormalVector(static_cast<size_t>(T) * in, 24);
    std::vector<float> all(static_cast<size_t>(T) * experts * rows);
    MatMulGgml(x.data(), stored.w, nullptr, all.data(), T);
    for (int first : {0, 48, 80, 7}) {
      const GgmlMatrix e = stored.w.Rows(first, rows);
      EXPECT_EQ(e.int8 != nullptr, first % 16 == 0) << first;
      std::vector<float> y(static_cast<size_t>(T) * rows);
      MatMulGgml(x.data(), e, nullptr, y.data(), T);
      size_t differ = 0;
      for (int t = 0; t < T; ++t)
        differ += std::memcmp(y.data() + static_cast<size_t>(t) * rows,
                              all.data() + static_cast<size_t>(t) * experts * rows + first,
                              rows * sizeof(float)) != 0;
      if (first % 16 == 0) {
        EXPECT_EQ(differ, 0u) << GgmlTypeName(type) << " rows from " << first;
      }
    }
    SetGgmlActivations(type, GgmlActivations::kF32);
  }
}

// The packed layout (kernels/gemm_int8.h) built slowly, value by value: each row's 32-value
// blocks' codes as unsigned bytes and their scale's bits, placed where the layout says.
std::vector<uint8_t> SlowPack(const GgmlMatrix& w) {
  const int blocks = w.in / 32, groups = (w.out + kPackedRows - 1) / kPackedRows;
  const uint32_t type = w.type;
  const size_t group_bytes = type == kGgmlTypeQ4_K   ? blocks / 8 * size_t{kPackedQ4KBytes}
                             : type == kGgmlTypeQ6_K ? blocks / 8 * size_t{kPackedQ6KBytes}
                             : type == kGgmlTypeQ8_0 ? blocks * size_t{kPackedQ80Bytes}
                             : type == kGgmlTypeQ4_0 ? blocks * size_t{kPackedBlockBytes}
                                                     : blocks * size_t{kPackedMxBlockBytes};
  std::vector<uint8_t> out(groups * group_bytes, 0);
  for (int row = 0; row < w.out; ++row) {
    const int r = row % kPackedRows;
    uint8_t* g = out.data() + row / kPackedRows * group_bytes;
    const uint8_t* src = w.row(row);
    for (int b = 0; b < blocks; ++b) {
      uint8_t code[32];  // the block's codes in value order, as the unsigned bytes u
      for (int k = 0; k < 32; ++k) {
        const int v = 32 * b + k;
        if (type == kGgmlTypeQ4_0 || type == kGgmlTypeMXFP4) {
          const uint8_t* n =
              src + b * (type == kGgmlTypeQ4_0 ? 18 : 17) + (type == kGgmlTypeQ4_0 ? 2 : 1);
          code[k] = k < 16 ? n[k] & 15 : n[k - 16] >> 4;
        } else if (type == kTypeMxfp4Split) {
          code[k] = k % 2 ? src[v / 2] >> 4 : src[v / 2] & 15;
        } else if (type == kGgmlTypeQ8_0) {
          code[k] = static_cast<uint8_t>(src[34 * b + 2 + k] ^ 0x80);
        } else if (type == kGgmlTypeQ4_K) {  // 144-byte super-blocks: d, dmin, 12 scale bytes, qs
          const uint8_t* qs = src + 144 * (v / 256) + 16;
          const int j = v % 256 / 32;  // sub-block: byte group j / 2, low nibbles for even j
          code[k] = j % 2 ? qs[32 * (j / 2) + k] >> 4 : qs[32 * (j / 2) + k] & 15;
        } else {  // Q6_K, 210-byte super-blocks: ql (128), qh (64), scales (16), d
          const uint8_t* sb = src + 210 * (v / 256);
          const int i = v % 256, h = i / 128, l = i % 32, quarter = i % 128 / 32;
          const uint8_t ql = sb[64 * h + l + 32 * (quarter % 2)];
          code[k] = static_cast<uint8_t>((quarter < 2 ? ql & 15 : ql >> 4) |
                                         ((sb[128 + 32 * h + l] >> (2 * quarter)) & 3) << 4);
        }
      }
      if (type == kGgmlTypeQ8_0) {
        uint8_t* d = g + b * size_t{kPackedQ80Bytes};
        for (int k = 0; k < 32; ++k) d[64 * (k / 4) + 4 * r + k % 4] = code[k];
        std::memcpy(d + 512 + 2 * r, src + 34 * b, 2);
        continue;
      }
      const bool q4k = type == kGgmlTypeQ4_K, q6k = type == kGgmlTypeQ6_K;
      uint8_t* d = q4k ? g + b / 8 * size_t{kPackedQ4KBytes} + b % 8 * size_t{kPackedCodeBytes}
                   : q6k
                       ? g + b / 8 * size_t{kPackedQ6KBytes} + b % 8 * size_t{kPackedQ6KBlockBytes}
                   : type == kGgmlTypeQ4_0 ? g + b * size_t{kPackedBlockBytes}
                                           : g + b * size_t{kPackedMxBlockBytes};
      for (int k = 0; k < 32; ++k) {  // code k: step k / 8, byte k % 4, high nibble for k % 8 >= 4
        const int step = k / 8, byte = 64 * step + 4 * r + k % 4;
        d[byte] |= static_cast<uint8_t>((code[k] & 15) << (k % 8 >= 4 ? 4 : 0));
        if (q6k) {
          const int lane = 4 * r + k % 4;
          d[kPackedCodeBytes + 32 * step + (k % 8 >= 4 ? 16 : 0) + lane % 16] |=
              static_cast<uint8_t>((code[k] >> 4) << (2 * (lane / 16)));
        }
      }
      if (type == kGgmlTypeQ4_0) std::memcpy(d + kPackedCodeBytes + 2 * r, src + 18 * b, 2);
      if (type == kGgmlTypeMXFP4 || type == kTypeMxfp4Split) {
        const uint8_t e = type == kGgmlTypeMXFP4 ? src[17 * b] : w.row_scales(row)[b];
        const auto s = static_cast<int8_t>(e - 128);  // half the E8M0 scale 2^(e - 127) is 2^s
        std::memcpy(d + kPackedCodeBytes + r, &s, 1);
      }
    }
    for (int sb = 0; sb < blocks / 8; ++sb) {  // the super-blocks' scales
      if (type == kGgmlTypeQ4_K) {
        const uint8_t* w4 = src + 144 * sb;
        uint8_t* s = g + sb * size_t{kPackedQ4KBytes} + kPackedQ4KScales;
        std::memcpy(s + 2 * r, w4, 2);
        std::memcpy(s + 32 + 2 * r, w4 + 2, 2);
        for (int j = 0; j < 8; ++j) {  // ggml's get_scale_min_k4
          const uint8_t* q = w4 + 4;
          const int sc = j < 4 ? q[j] & 63 : (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
          const int m = j < 4 ? q[j + 4] & 63 : (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
          s[64 + 16 * j + r] = static_cast<uint8_t>(sc);
          s[192 + 16 * j + r] = static_cast<uint8_t>(m);
        }
      } else if (type == kGgmlTypeQ6_K) {
        const uint8_t* w6 = src + 210 * sb;
        uint8_t* s = g + sb * size_t{kPackedQ6KBytes} + kPackedQ6KScales;
        std::memcpy(s + 2 * r, w6 + 208, 2);
        for (int k = 0; k < 16; ++k) s[32 + 16 * k + r] = w6[192 + k];
      }
    }
  }
  return out;
}

// PackForInt8 writes, byte for byte, what the slow packer above writes (every type it packs, a
// last group with padding rows, rows a stride apart).
TEST(GemmGgml, PackForInt8IsTheSlowPackerByteForByte) {
  for (Case c :
       {Case{kGgmlTypeQ4_0, 160}, Case{kGgmlTypeMXFP4, 288}, Case{kTypeMxfp4Split, 320},
        Case{kTypeMxfp4Split, 96, 2, 1}, Case{kGgmlTypeQ4_K, 768}, Case{kGgmlTypeQ6_K, 512},
        Case{kGgmlTypeQ8_0, 96}, Case{kGgmlTypeQ8_0, 64, 3, 2}}) {
    for (int out : {16, 37}) {
      Stored stored = RandomMatrix(c.type, out, c.in, out + c.in, c.row_step, c.first);
      const std::vector<uint8_t> slow = SlowPack(stored.w);
      PackForInt8(&stored.w);
      ASSERT_NE(stored.w.int8, nullptr) << GgmlTypeName(c.type);
      ASSERT_EQ(stored.w.int8_group_bytes * ((out + 15) / 16), slow.size());
      size_t first_differing = slow.size();
      for (size_t i = 0; i < slow.size() && first_differing == slow.size(); ++i)
        if (stored.w.int8[i] != slow[i]) first_differing = i;
      EXPECT_EQ(first_differing, slow.size())
          << GgmlTypeName(c.type) << " in " << c.in << " out " << out << ": byte "
          << first_differing << " of group size " << stored.w.int8_group_bytes;
    }
  }
}

// Q8_0's int8 products run on packed rows only: its rows as stored, with int8 x chosen, give the
// f32 product's bits (the loader packs them; a view that is not packed still multiplies).
TEST(GemmGgml, Q8_0RowsAsStoredKeepF32X) {
  if (ActiveSimdLevel() == SimdLevel::kPortable)
    GTEST_SKIP() << "no AVX2 (the CPU, or SINKSCOPE_SIMD=portable)";
  const int out = 37, in = 256, T = 3;
  Stored stored = RandomMatrix(kGgmlTypeQ8_0, out, in, 5);
  const std::vector<float> x = test::NormalVector(static_cast<size_t>(T) * in, 6);
  std::vector<float> f32(static_cast<size_t>(T) * out), int8(f32.size()), packed(f32.size());
  MatMulGgml(x.data(), stored.w, nullptr, f32.data(), T);
  SetGgmlActivations(kGgmlTypeQ8_0, GgmlActivations::kInt8);
  ASSERT_EQ(GgmlActivationsFor(kGgmlTypeQ8_0), GgmlActivations::kInt8);
  MatMulGgml(x.data(), stored.w, nullptr, int8.data(), T);
  PackForInt8(&stored.w);
  ASSERT_NE(stored.w.int8, nullptr);
  MatMulGgml(x.data(), stored.w, nullptr, packed.data(), T);
  SetGgmlActivations(kGgmlTypeQ8_0, GgmlActivations::kF32);
  EXPECT_TRUE(int8 == f32);
  EXPECT_FALSE(packed == f32);  // the packed rows took x in int8
}

// MXFP4's scales of E8M0 0-3 (2^-127 .. 2^-124: half of them subnormal) and 200 in some blocks
// of some rows.
void WithEdgeScales(Stored* s) {
  const uint8_t edge[] = {0, 1, 2, 3, 200};
  const int blocks = s->w.in / 32;
  for (int row = 0; row < s->w.out; row += 3)
    for (int b = row % 4; b < blocks; b += 5) {
      const uint8_t e = edge[(row + b) % 5];
      if (s->w.type == kTypeMxfp4Split)
        const_cast<uint8_t*>(s->w.row_scales(row))[b] = e;
      else
        const_cast<uint8_t*>(s->w.row(row))[17 * b] = e;
    }
}

// With int8 x too, a row gives the same bits alone as inside any T, and AVX2 (with or without
// AVX-VNNI) the bits of AVX-512; MXFP4 also with scales down to E8M0 0 (WithEdgeScales).
TEST(GemmGgml, Int8RowsAreTIndependentAndTheSameOnEveryLevel) {
  if (CpuSimdLevel() == SimdLevel::kPortable) GTEST_SKIP() << "the CPU has no AVX2";
  const SimdLevel best = ActiveSimdLevel();
  for (uint32_t type : {kGgmlTypeQ4_0, kGgmlTypeMXFP4, kTypeMxfp4Split, kGgmlTypeQ4_K,
                        kGgmlTypeQ6_K, kGgmlTypeQ8_0}) {
    SetGgmlActivations(type, GgmlActivations::kInt8);
    const bool mx = type == kGgmlTypeMXFP4 || type == kTypeMxfp4Split;
    for (int variant = type == kGgmlTypeQ8_0; variant < (mx                       ? 4
                                                         : Int8PackSupports(type) ? 2
                                                                                  : 1);
         ++variant) {
      // 0 / 1: rows as stored / packed; 2 / 3: the same with WithEdgeScales.
      const int packed = variant % 2, out = 53, in = 768;
      Stored stored = RandomMatrix(type, out, in, 19);
      if (variant >= 2) WithEdgeScales(&stored);
      if (packed) PackForInt8(&stored.w);
      EXPECT_EQ(stored.w.int8_subnormal_scales, variant == 3);
      const std::vector<float> bias = test::NormalVector(out, 20);
      std::vector<std::vector<float>> by_level;
      // AVX2 with VPMADDUBSW + VPMADDWD, AVX2 with AVX-VNNI where the CPU has it, AVX-512.
      for (int run = 0; run < 3; ++run) {
        const SimdLevel level = run < 2 ? SimdLevel::kAvx2 : SimdLevel::kAvx512;
        if (level > CpuSimdLevel()) continue;
        ForceSimdLevel(level);
        AllowAvxVnniForInt8(run == 1);
        size_t differ = 0;
        const int T = 17;
        const std::vector<float> x = test::NormalVector(static_cast<size_t>(T) * in, 21);
        std::vector<float> all(static_cast<size_t>(T) * out), alone(out);
        MatMulGgml(x.data(), stored.w, bias.data(), all.data(), T);
        for (int t = 0; t < T; ++t) {
          MatMulGgml(x.data() + static_cast<size_t>(t) * in, stored.w, bias.data(), alone.data(),
                     1);
          differ +=
              std::memcmp(alone.data(), all.data() + static_cast<size_t>(t) * out, out * 4) != 0;
        }
        EXPECT_EQ(differ, 0u) << GgmlTypeName(type) << " " << Int8KernelName() << " variant "
                              << variant;
        by_level.push_back(all);
      }
      AllowAvxVnniForInt8(true);
      for (size_t i = 1; i < by_level.size(); ++i)
        EXPECT_TRUE(by_level[i] == by_level[0])
            << GgmlTypeName(type) << ": kernel " << i << " vs the AVX2 one, variant " << variant;
    }
    SetGgmlActivations(type, GgmlActivations::kF32);
  }
  ForceSimdLevel(best);
}

TEST(GemmGgml, SameBitsAtAnyThreadCount) {
  const int threads = ThreadCount();
  for (uint32_t type : {kGgmlTypeQ4_K, kGgmlTypeQ6_K, kGgmlTypeQ4_0, kGgmlTypeF16, kGgmlTypeMXFP4,
                        kTypeMxfp4Split}) {
    const int out = 1000, in = 512;
    const Stored stored = RandomMatrix(type, out, in, 3);
    const GgmlMatrix& w = stored.w;
    for (int T : {1, 4, 64}) {
      const std::vector<float> x = test::NormalVector(static_cast<size_t>(T) * in, 6);
      std::vector<float> one(static_cast<size_t>(T) * out), many(one.size());
      SetThreadCount(1);
      MatMulGgml(x.data(), w, nullptr, one.data(), T);
      SetThreadCount(std::max(threads, 3));
      MatMulGgml(x.data(), w, nullptr, many.data(), T);
      SetThreadCount(threads);
      EXPECT_TRUE(one == many) << GgmlTypeName(type) << " T " << T;
    }
  }
}

// MatMulGgmlPair over gpt-oss's alternating gate and up rows: one product over the stored rows,
// split, gives the bits of the two products over every other row (with and without biases, on
// every SIMD level); views that do not alternate take the two products.
TEST(GemmGgml, PairOfAlternatingRowsIsTheTwoProductsBitForBit) {
  const SimdLevel best = ActiveSimdLevel();
  for (SimdLevel level : Levels()) {
    ForceSimdLevel(level);
    for (auto [type, in] : {std::pair{kTypeMxfp4Split, 2880},
                            {kTypeMxfp4Split, 96},
                            {kGgmlTypeBF16, 288},
                            {kGgmlTypeQ4_0, 96}}) {
      SetGgmlActivations(type, GgmlActivations::kF32);
      const int rows = 45;
      // The stored matrix: 2 rows a pair; gate = rows 0, 2, ...; up = rows 1, 3, ...
      const Stored gate = RandomMatrix(type, rows, in, 41, 2, 0);
      GgmlMatrix up = gate.w;
      up.data = gate.w.data + gate.w.row_bytes;
      if (up.scales) up.scales = gate.w.scales + gate.w.scale_stride / 2;
      const std::vector<float> x = test::NormalVector(static_cast<size_t>(in), 42);
      const std::vector<float> bg = test::NormalVector(rows, 43), bu = test::NormalVector(rows, 44);
      for (bool biases : {false, true}) {
        std::vector<float> g2(rows), u2(rows), g1(rows), u1(rows);
        MatMulGgml(x.data(), gate.w, biases ? bg.data() : nullptr, g2.data(), 1);
        MatMulGgml(x.data(), up, biases ? bu.data() : nullptr, u2.data(), 1);
        MatMulGgmlPair(x.data(), gate.w, biases ? bg.data() : nullptr, g1.data(), up,
                       biases ? bu.data() : nullptr, u1.data());
        EXPECT_TRUE(g1 == g2 && u1 == u2) << GgmlTypeName(type) << " in " << in << " biases "
                                          << biases << " level " << static_cast<int>(level);
        // And against the dequantised rows in double: the pair multiplies the right rows.
        std::vector<float> wd(static_cast<size_t>(rows) * in);
        DequantizeGgmlRows(up, 0, rows, wd.data());
        double worst = 0;
        for (int r = 0; r < rows; ++r) {
          double ref = biases ? bu[r] : 0.0;
          for (int i = 0; i < in; ++i)
            ref += static_cast<double>(wd[static_cast<size_t>(r) * in + i]) * x[i];
          worst = std::max(worst, std::abs(ref - u1[r]) / (1.0 + std::abs(ref)));
        }
        EXPECT_LT(worst, 1e-4) << GgmlTypeName(type);
      }
      // Views that do not alternate (up one stored pair further on): two products, the same bits.
      GgmlMatrix later = up;
      later.out = rows - 1;
      later.data += later.row_stride;
      if (later.scales) later.scales += later.scale_stride;
      GgmlMatrix first = gate.w;
      first.out = rows - 1;
      std::vector<float> a(rows - 1), b(rows - 1), a2(rows - 1), b2(rows - 1);
      MatMulGgmlPair(x.data(), first, nullptr, a.data(), later, nullptr, b.data());
      MatMulGgml(x.data(), first, nullptr, a2.data(), 1);
      MatMulGgml(x.data(), later, nullptr, b2.data(), 1);
      EXPECT_TRUE(a == a2 && b == b2) << GgmlTypeName(type);
    }
  }
  ForceSimdLevel(best);
}

// The one-row kernels' prefetch address: kRowAheadBytes on in the stream, within the row while it
// lasts, then in the rows the stream reads next (contiguous rows: the bytes that follow; rows a
// stride apart, as gpt-oss's gate rows between its up rows: the stride skipped).
TEST(GemmGgml, RowAheadFollowsTheStreamAcrossRows) {
  alignas(64) static const uint8_t rows[1] = {};
  const uintptr_t base = reinterpret_cast<uintptr_t>(rows);
  auto ahead = [&](size_t offset, size_t row_bytes, size_t row_stride) {
    return reinterpret_cast<uintptr_t>(RowAhead(rows, offset, row_bytes, row_stride)) - base;
  };
  const size_t d = kRowAheadBytes;
  EXPECT_EQ(ahead(0, 4 * d, 4 * d), d);                    // inside the row
  EXPECT_EQ(ahead(0, 4 * d, 8 * d), d);                    // inside the row, rows apart
  EXPECT_EQ(ahead(3 * d + 10, 4 * d, 4 * d), 4 * d + 10);  // into the next row, contiguous
  EXPECT_EQ(ahead(3 * d + 10, 4 * d, 8 * d), 8 * d + 10);  // the next row, a stride on
  // Rows shorter than the distance: whole rows skipped, stride by stride (here 3 rows on).
  const size_t row = d / 3 + 1;
  const size_t at = 5 + d;
  EXPECT_EQ(ahead(5, row, row), at);
  ASSERT_TRUE(at >= 3 * row && at < 4 * row);
  EXPECT_EQ(ahead(5, row, 2 * row), 3 * 2 * row + (at - 3 * row));
}

// The load-time check finds the first value (F16, BF16) or block scale that decodes to Inf or NaN,
// past the scan's 4096-block chunks, and nothing in finite data.
TEST(GemmGgml, FindsTheFirstNonFiniteValueOrScale) {
  struct Field {
    uint32_t type;
    int offset;
    uint16_t bits;
  };
  for (Field f : {Field{kGgmlTypeF16, 0, 0x7C00}, Field{kGgmlTypeBF16, 0, 0x7FC0},
                  Field{kGgmlTypeQ8_0, 0, 0xFC00}, Field{kGgmlTypeQ4_0, 0, 0x7E00},
                  Field{kGgmlTypeQ4_K, 2, 0x7C00}, Field{kGgmlTypeQ6_K, 208, 0x7C01}}) {
    const int out = 40, in = 1024;
    std::vector<uint8_t> bytes = RandomRows(f.type, out, in, 11);
    const GgmlMatrix w = GgmlView(f.type, out, in, bytes.data(), nullptr);
    EXPECT_EQ(GgmlFirstNonFinite(w), -1) << GgmlTypeName(f.type);
    const int64_t per_block = GgmlBlockValues(f.type);
    const int64_t blocks = static_cast<int64_t>(out) * in / per_block;
    for (int64_t b : {blocks - 1, blocks / 2 + 1, int64_t{4097} % blocks}) {
      std::vector<uint8_t> bad = bytes;
      std::memcpy(bad.data() + b * GgmlBlockBytes(f.type) + f.offset, &f.bits, 2);
      const GgmlMatrix wb = GgmlView(f.type, out, in, bad.data(), nullptr);
      EXPECT_EQ(GgmlFirstNonFinite(wb), b * per_block) << GgmlTypeName(f.type) << " block " << b;
    }
  }
}

// MXFP4: a NaN scale (0xFF) anywhere, or a scale of 2^127 / 2^126 with a value of magnitude 2 / 4
// or more (beyond the largest f32), is found and named; 1.5 * 2^127 and 3 * 2^126 are not. In the
// ggml blocks and in the split form, rows two stored rows apart.
TEST(GemmGgml, FindsMxfp4BlocksThatAreNotFinite) {
  const int out = 40, in = 1024, groups = in / 32;
  for (uint32_t type : {kGgmlTypeMXFP4, kTypeMxfp4Split}) {
    const Stored good = RandomMatrix(type, out, in, 5, type == kTypeMxfp4Split ? 2 : 1,
                                     type == kTypeMxfp4Split ? 1 : 0);
    EXPECT_EQ(GgmlFirstNonFinite(good.w), -1) << GgmlTypeName(type);
    struct Edit {
      uint8_t e, code;
      bool bad;
      const char* reason;
    };
    for (Edit edit :
         {Edit{0xFF, 0, true, "NaN"}, Edit{254, 4, true, "largest f32"}, Edit{254, 3, false, ""},
          Edit{253, 6, true, "largest f32"}, Edit{253, 13, false, ""}, Edit{252, 15, false, ""}})
      for (int64_t block : {int64_t{0}, int64_t{out} * groups - 1, int64_t{17} * groups + 5}) {
        Stored s = good;
        const int r = static_cast<int>(block / groups), g = static_cast<int>(block % groups);
        // Point the copy's view at its own bytes, then edit one block: every value small but one.
        s.w.data = s.data.data() + (good.w.data - good.data.data());
        if (!s.scales.empty()) s.w.scales = s.scales.data() + (good.w.scales - good.scales.data());
        uint8_t* e = type == kTypeMxfp4Split ? const_cast<uint8_t*>(s.w.row_scales(r)) + g
                                             : const_cast<uint8_t*>(s.w.row(r)) + 17 * g;
        uint8_t* nibbles =
            type == kTypeMxfp4Split ? const_cast<uint8_t*>(s.w.row(r)) + 16 * g : e + 1;
        *e = edit.e;
        for (int j = 0; j < 16; ++j) nibbles[j] = 0x21;  // codes 1 and 2: 0.5 and 1
        nibbles[7] = static_cast<uint8_t>(edit.code << 4 | 1);
        const int64_t found = GgmlFirstNonFinite(s.w);
        EXPECT_EQ(found, edit.bad ? block * 32 : -1)
            << GgmlTypeName(type) << " e " << int(edit.e) << " code " << int(edit.code) << " block "
            << block;
        if (edit.bad && found >= 0) {
          const std::string why = GgmlFaultReason(s.w, found);
          EXPECT_NE(why.find(edit.reason), std::string::npos) << why;
          EXPECT_NE(why.find(fmt::format("block {} of row {}", g, r)), std::string::npos) << why;
        }
      }
  }
}

TEST(GemmGgml, RefusesWhatItCannotMultiply) {
  const std::vector<uint8_t> bytes(1024);
  EXPECT_THROW(GgmlView(kGgmlTypeF32, 2, 32, bytes.data(), nullptr), Error);
  EXPECT_THROW(GgmlView(3 /* Q4_1 */, 2, 32, bytes.data(), nullptr), Error);
  EXPECT_THROW(GgmlView(kGgmlTypeQ4_K, 2, 128, bytes.data(), nullptr), Error);  // half a block
  try {
    GgmlView(kGgmlTypeQ4_K, 2, 128, bytes.data(), nullptr);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Q4_K"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ss
