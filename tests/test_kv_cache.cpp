// The typed streaming KV cache (--kv-type, --kv-keep; kernels/kv_types.h, model.h KVCache):
// encode / decode against the formats' definitions, the attention kernel on a typed cache against a
// float64 reference on the dequantised rows, the f32 kernel on the same rows (bit for bit), and a
// stream whose every entry is kept f32 against the f32 cache (bit for bit) on stories260K.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>

#include "common/error.h"
#include "io/load.h"
#include "kernels/kv_types.h"
#include "kernels/ops.h"
#include "kernels/vecmath.h"
#include "model/model.h"
#include "stream/stream.h"
#include "tensor/half.h"
#include "test_util.h"

namespace ss {
namespace {

const std::string kModelPath = test::RepoPath("models/stories260K/stories260K.bin");

template <typename F>
void ExpectErrorContains(F f, const std::vector<std::string>& words) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const std::string& w : words)
      EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
  }
}
const KvType kTypes[] = {KvType::kF32, KvType::kBf16, KvType::kF16, KvType::kQ8_0, KvType::kQ4_0};

std::vector<float> RandomRow(int n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

// Value i of a row, decoded straight from the format's definition (kernels/dequant.h layouts).
double ReferenceValue(KvType type, const std::vector<uint8_t>& row, int i) {
  auto f16 = [&](size_t at) {
    uint16_t h;
    std::memcpy(&h, row.data() + at, 2);
    return static_cast<double>(F16ToF32(h));
  };
  switch (type) {
    case KvType::kF32: {
      float f;
      std::memcpy(&f, row.data() + 4 * i, 4);
      return f;
    }
    case KvType::kBf16: {
      uint16_t b;
      std::memcpy(&b, row.data() + 2 * i, 2);
      uint32_t bits = static_cast<uint32_t>(b) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case KvType::kF16:
      return f16(2 * i);
    case KvType::kQ8_0: {
      const size_t block = static_cast<size_t>(i / 32) * 34;
      return f16(block) * static_cast<int8_t>(row[block + 2 + i % 32]);
    }
    case KvType::kQ4_0: {
      const size_t block = static_cast<size_t>(i / 32) * 18;
      const int j = i % 32;
      const uint8_t byte = row[block + 2 + j % 16];
      return f16(block) * ((j < 16 ? byte & 0xF : byte >> 4) - 8);
    }
  }
  return NAN;
}

TEST(KvTypes, RowsDecodeAsTheFormatsDefineThemOnEveryPath) {
  std::mt19937 rng(7);
  const SimdLevel before = ActiveSimdLevel();
  for (const SimdLevel level : {SimdLevel::kPortable, SimdLevel::kAvx2}) {
    if (level > CpuSimdLevel()) continue;
    ForceSimdLevel(level);
    for (KvType type : kTypes) {
      for (int n : {32, 96, 256}) {
        const std::vector<float> x = RandomRow(n, rng, 3.0f);
        std::vector<uint8_t> row(KvRowBytes(type, n));
        KvEncodeRow(type, x.data(), n, row.data());
        // Every slice, aligned or not, decodes to the reference values.
        for (auto [first, count] :
             std::vector<std::pair<int, int>>{{0, n}, {32, n - 32}, {5, 19}, {8, 8}, {0, 32}}) {
          if (first + count > n || count <= 0) continue;
          std::vector<float> out(count);
          KvDecodeSlice(type, row.data(), first, count, out.data());
          for (int i = 0; i < count; ++i)
            ASSERT_EQ(static_cast<double>(out[i]), ReferenceValue(type, row, first + i))
                << KvTypeName(type) << " n " << n << " value " << first + i;
        }
        // And the rounding error is what the format allows.
        std::vector<float> out(n);
        KvDecodeSlice(type, row.data(), 0, n, out.data());
        double worst = 0, amax = 0;
        for (int i = 0; i < n; ++i) {
          worst = std::max(worst, std::fabs(static_cast<double>(out[i]) - x[i]) /
                                      std::max(1e-30, std::fabs(static_cast<double>(x[i]))));
          amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
        }
        double abs_worst = 0;
        for (int i = 0; i < n; ++i)
          abs_worst = std::max(abs_worst, std::fabs(static_cast<double>(out[i]) - x[i]));
        switch (type) {
          case KvType::kF32:
            EXPECT_EQ(abs_worst, 0.0);
            break;
          case KvType::kBf16:
            EXPECT_LE(worst, 1.0 / 256);
            break;
          case KvType::kF16:
            EXPECT_LE(worst, 1.0 / 2048);
            break;
          case KvType::kQ8_0:
            EXPECT_LE(abs_worst, amax / 127 * 0.51 + 1e-6);
            break;
          case KvType::kQ4_0:
            EXPECT_LE(abs_worst, amax / 8 * 1.01 + 1e-6);
            break;
        }
      }
    }
  }
  ForceSimdLevel(before);
}

TEST(KvTypes, NamesAndDomains) {
  for (KvType type : kTypes) EXPECT_EQ(ParseKvType(KvTypeName(type), "--kv-type"), type);
  ExpectErrorContains([] { ParseKvType("q4_k", "--kv-type"); }, {"--kv-type", "q4_k", "q8_0"});
  ExpectErrorContains([] { KvRowBytes(KvType::kQ8_0, 40); }, {"q8_0", "blocks of 32", "40"});
  EXPECT_EQ(KvRowBytes(KvType::kQ8_0, 64), 68u);
  EXPECT_EQ(KvRowBytes(KvType::kQ4_0, 64), 36u);
  EXPECT_EQ(KvRowBytes(KvType::kF16, 64), 128u);
}

// A typed sinks + ring cache of random entries, some rows kept f32, stored row-major (one panel:
// the layout before head-major) or head-major as KVCache stores it (panels of KvPanelValues).
struct TypedCache {
  int rows, kv_row, panel;
  KvType type;
  std::vector<uint8_t> bytes;
  std::vector<int> kept_slot;
  std::vector<float> kept;
  std::vector<float> decoded;  // (rows, kv_row) what attention must see
  KvRows View() const {
    KvRows r;
    r.type = type;
    r.bytes = bytes.data();
    r.row_bytes = KvRowBytes(type, panel);
    r.panel_values = panel;
    r.panel_bytes = static_cast<size_t>(rows) * r.row_bytes;
    r.kept_slot = kept_slot.data();
    r.kept = kept.data();
    return r;
  }
};

TypedCache MakeTypedCache(KvType type, int rows, int kv_row, int panel,
                          const std::vector<int>& kept_rows, std::mt19937& rng) {
  TypedCache c{rows, kv_row, panel, type, {}, std::vector<int>(rows, -1), {}, {}};
  const size_t pb = KvRowBytes(type, panel);
  c.bytes.resize(rows * KvRowBytes(type, kv_row));
  c.decoded.resize(static_cast<size_t>(rows) * kv_row);
  for (int r = 0; r < rows; ++r) {
    // Outlier rows (a sink's key has a large norm) beside ordinary ones.
    const std::vector<float> x = RandomRow(kv_row, rng, r == 0 ? 8.0f : 1.0f);
    if (std::find(kept_rows.begin(), kept_rows.end(), r) != kept_rows.end()) {
      c.kept_slot[r] = static_cast<int>(c.kept.size() / kv_row);
      c.kept.insert(c.kept.end(), x.begin(), x.end());
      std::copy(x.begin(), x.end(), c.decoded.begin() + static_cast<size_t>(r) * kv_row);
      continue;
    }
    for (int g = 0; g < kv_row / panel; ++g) {
      uint8_t* at = c.bytes.data() + (static_cast<size_t>(g) * rows + r) * pb;
      KvEncodeRow(type, x.data() + g * panel, panel, at);
      KvDecodeSlice(type, at, 0, panel,
                    c.decoded.data() + static_cast<size_t>(r) * kv_row + g * panel);
    }
  }
  return c;
}

// The SIMD levels this CPU runs (the kernels' portable, AVX2 and AVX-512 paths).
std::vector<SimdLevel> Levels() {
  std::vector<SimdLevel> levels;
  for (const SimdLevel level : {SimdLevel::kPortable, SimdLevel::kAvx2, SimdLevel::kAvx512})
    if (level <= CpuSimdLevel()) levels.push_back(level);
  return levels;
}

TEST(KvAttention, TypedCacheEqualsAttentionOnTheDequantisedCache) {
  std::mt19937 rng(11);
  const int sinks = 3, window = 9, ring = 12;
  const int rows = sinks + ring;
  const SimdLevel before = ActiveSimdLevel();
  struct Shape {
    int H, Hkv, Dh;
  };
  // Heads of 32, 64, 128 and 256 (whole blocks; 256 fills sixteen AVX-512 accumulators), 8 (four
  // heads to a q8_0 / q4_0 panel: decoded to f32 first), 24 and 40 (an odd 8 values after the
  // 16-value steps; q8_0 / q4_0 panels of 96 and 160 values, heads not on block boundaries).
  const Shape shapes[] = {{4, 2, 32},  {8, 4, 8},  {2, 2, 64}, {2, 1, 128},
                          {2, 1, 256}, {4, 4, 24}, {2, 4, 40}};
  std::pair<KvType, KvType> types[] = {
      {KvType::kBf16, KvType::kBf16}, {KvType::kF16, KvType::kF16},  {KvType::kQ8_0, KvType::kQ8_0},
      {KvType::kQ4_0, KvType::kQ4_0}, {KvType::kF32, KvType::kQ4_0}, {KvType::kQ8_0, KvType::kF16}};
  double worst_all = 0;
  for (const SimdLevel level : Levels()) {
    ForceSimdLevel(level);
    for (const Shape& shape : shapes) {
      const int H = shape.H, Hkv = shape.Hkv, Dh = shape.Dh;
      if (H % Hkv != 0) continue;
      const int kv_row = Hkv * Dh, q_row = H * Dh;
      for (auto [kt, vt] : types)
        for (const bool head_major : {false, true}) {
          // Kept rows: the sinks, and one inside the ring's run (it splits the stored rows).
          const std::vector<int> kept_rows = {0, 1, sinks + 5};
          const TypedCache k = MakeTypedCache(
              kt, rows, kv_row, head_major ? KvPanelValues(kt, Dh) : kv_row, kept_rows, rng);
          const TypedCache v = MakeTypedCache(
              vt, rows, kv_row, head_major ? KvPanelValues(vt, Dh) : kv_row, kept_rows, rng);
          const int T = 3;
          const int64_t first_index = 40;  // the ring has wrapped: the recent rows run around it
          const std::vector<float> q = RandomRow(T * q_row, rng), qs = RandomRow(T * q_row, rng);
          std::vector<float> out(T * q_row), f32_out(T * q_row);
          SinkWindowAttention(q.data(), qs.data(), k.View(), v.View(), out.data(), T, H, Hkv, Dh,
                              sinks, window, ring, first_index, AttnOptions{});
          SinkWindowAttention(q.data(), qs.data(), k.decoded.data(), v.decoded.data(),
                              f32_out.data(), T, H, Hkv, Dh, sinks, window, ring, first_index);
          const std::string what = fmt::format(
              "{} keys, {} values, {} H {} Hkv {} Dh {} on {}", KvTypeName(kt), KvTypeName(vt),
              head_major ? "head-major" : "row-major", H, Hkv, Dh, SimdLevelName(level));
          EXPECT_EQ(out, f32_out) << what;
          // float64, from the visibility rule: sink rows [0, S) scored with q_sink, the W - 1
          // recent stream indices before m and m itself with q_recent, at row S + (s - S) % ring.
          double worst = 0;
          for (int t = 0; t < T; ++t)
            for (int h = 0; h < H; ++h) {
              const int kvh = h / (H / Hkv);
              const int64_t m = first_index + t;
              std::vector<std::pair<int, const float*>> seen;
              for (int j = 0; j < sinks; ++j) seen.push_back({j, qs.data() + t * q_row + h * Dh});
              for (int64_t s = m - window + 1; s <= m; ++s)
                seen.push_back(
                    {sinks + static_cast<int>((s - sinks) % ring), q.data() + t * q_row + h * Dh});
              std::vector<double> score;
              double mx = -INFINITY;
              for (auto [row, qq] : seen) {
                double dot = 0;
                for (int d = 0; d < Dh; ++d)
                  dot += static_cast<double>(qq[d]) * k.decoded[row * kv_row + kvh * Dh + d];
                score.push_back(dot / std::sqrt(static_cast<double>(Dh)));
                mx = std::max(mx, score.back());
              }
              double z = 0;
              for (double& s : score) z += (s = std::exp(s - mx));
              for (int d = 0; d < Dh; ++d) {
                double o = 0;
                for (size_t i = 0; i < seen.size(); ++i)
                  o += score[i] / z * v.decoded[seen[i].first * kv_row + kvh * Dh + d];
                worst = std::max(worst, std::fabs(o - out[t * q_row + h * Dh + d]));
              }
            }
          EXPECT_LT(worst, 2e-5) << what;
          worst_all = std::max(worst_all, worst);
        }
    }
  }
  ForceSimdLevel(before);
  std::printf(
      "kv attention, every type pair, layout, shape and SIMD path: equal to the f32 kernel on the "
      "dequantised rows; largest |diff| to float64 %.2e\n",
      worst_all);
}

// Which slices the fused kernels take (the others decode to f32 first, tested above).
TEST(KvAttention, FusedKernelsTakeWholeBlocksAndMultiplesOfEight) {
  const SimdLevel before = ActiveSimdLevel();
  std::mt19937 rng(5);
  const int rows = 5;
  // Room for the widest rows asked for below (bf16: 512 bytes a row of 256).
  std::vector<uint8_t> bytes(rows * KvRowBytes(KvType::kBf16, 256) + 64);
  std::vector<float> x = RandomRow(256, rng), y(rows), acc(256), p(rows, 0.5f);
  for (const SimdLevel level : Levels()) {
    ForceSimdLevel(level);
    const bool fused = level != SimdLevel::kPortable;
    const size_t q8 = KvRowBytes(KvType::kQ8_0, 256), b16 = KvRowBytes(KvType::kBf16, 256);
    EXPECT_EQ(KvRowDots({KvType::kQ8_0, bytes.data(), q8, 0, 128, rows}, x.data(), y.data()),
              fused);
    EXPECT_EQ(
        KvAddWeightedRows({KvType::kQ4_0, bytes.data(), q8, 32, 64, rows}, p.data(), acc.data()),
        fused);
    EXPECT_EQ(KvRowDots({KvType::kBf16, bytes.data(), b16, 8, 24, rows}, x.data(), y.data()),
              fused);
    EXPECT_FALSE(KvRowDots({KvType::kQ8_0, bytes.data(), q8, 8, 8, rows}, x.data(), y.data()));
    EXPECT_FALSE(
        KvAddWeightedRows({KvType::kQ8_0, bytes.data(), q8, 0, 40, rows}, p.data(), acc.data()));
    EXPECT_FALSE(KvRowDots({KvType::kF16, bytes.data(), b16, 0, 12, rows}, x.data(), y.data()));
  }
  ForceSimdLevel(before);
}

// KVCache stores its rows head-major: every head's slice, read where Keys() / Values() say, decodes
// to the values of the whole row encoded row-major, through writes, kept entries and CopyRow into
// a cache of another capacity (a stream's ring growing).
TEST(KvCache, HeadMajorRowsDecodeAsWholeRows) {
  std::mt19937 rng(3);
  struct Shape {
    int Hkv, Dh;
  };
  for (const Shape shape : {Shape{4, 8}, Shape{2, 128}, Shape{4, 24}, Shape{3, 32}}) {
    ModelConfig config;
    config.n_layers = 2;
    config.n_heads = config.n_kv_heads = shape.Hkv;
    config.head_dim = shape.Dh;
    const int kv_dim = config.kv_dim(), capacity = 7;
    for (KvType type : {KvType::kBf16, KvType::kF16, KvType::kQ8_0, KvType::kQ4_0}) {
      KVCache cache = KVCache::CreateTyped(config, capacity, type, KvType::kQ8_0, {2});
      KVCache bigger = KVCache::CreateTyped(config, capacity + 5, type, KvType::kQ8_0, {2});
      std::vector<std::vector<float>> k_rows(capacity), v_rows(capacity);
      for (int r = 0; r < capacity; ++r)
        for (int l = 0; l < 2; ++l) {
          k_rows[r] = RandomRow(kv_dim, rng, 2.0f);
          v_rows[r] = RandomRow(kv_dim, rng);
          cache.WriteRow(l, r, /*index=*/r, k_rows[r].data(), v_rows[r].data());
        }
      for (int r = 0; r < capacity; ++r) bigger.CopyRow(cache, r, capacity + 4 - r);
      auto check = [&](const KVCache& c, int row, int r) {
        for (const bool keys : {true, false}) {
          const KvRows view = keys ? c.Keys(1) : c.Values(1);
          const std::vector<float>& x = keys ? k_rows[r] : v_rows[r];
          std::vector<uint8_t> whole(KvRowBytes(view.type, kv_dim));
          KvEncodeRow(view.type, x.data(), kv_dim, whole.data());
          std::vector<float> expect(kv_dim), got(shape.Dh);
          KvDecodeSlice(view.type, whole.data(), 0, kv_dim, expect.data());
          for (int h = 0; h < shape.Hkv; ++h) {
            const int e = h * shape.Dh, g = e / view.panel_values;
            if (view.kept_slot[row] >= 0) {
              ASSERT_EQ(r, 2);
              std::copy_n(view.kept + static_cast<size_t>(view.kept_slot[row]) * kv_dim + e,
                          shape.Dh, got.begin());
              for (int d = 0; d < shape.Dh; ++d) ASSERT_EQ(got[d], x[e + d]);  // kept exact
              continue;
            }
            KvDecodeSlice(view.type, view.bytes + g * view.panel_bytes + row * view.row_bytes,
                          e - g * view.panel_values, shape.Dh, got.data());
            for (int d = 0; d < shape.Dh; ++d)
              ASSERT_EQ(got[d], expect[e + d])
                  << KvTypeName(view.type) << " Dh " << shape.Dh << " head " << h;
          }
        }
      };
      for (int r = 0; r < capacity; ++r) {
        check(cache, r, r);
        check(bigger, capacity + 4 - r, r);
      }
    }
  }
}

// Teacher-forced logits of `tokens` through a stream cache.
std::vector<float> StreamLogits(const Model& model, const stream::StreamOptions& o,
                                const std::vector<int>& tokens) {
  auto cache = stream::MakeStreamCache(model, o);
  std::vector<float> all;
  for (int t : tokens) {
    const Tensor logits = cache->Step(t);
    all.insert(all.end(), logits.data(), logits.data() + logits.numel());
  }
  return all;
}

TEST(KvStream, EveryEntryKeptEqualsTheF32CacheAndQuantisedDiffers) {
  omp_set_num_threads(1);
  Model model = LoadModel(kModelPath);
  ASSERT_EQ(model.config.kv_dim() % 32, 0);
  std::vector<int> tokens;
  for (int i = 0; i < 32; ++i) tokens.push_back(1 + (i * 37) % 400);
  stream::StreamOptions f32;
  f32.policy = stream::Policy::kSinks;
  f32.sinks = 4;
  f32.window = 28;
  const std::vector<float> reference = StreamLogits(model, f32, tokens);
  for (KvType type : {KvType::kQ8_0, KvType::kQ4_0, KvType::kBf16}) {
    stream::StreamOptions o = f32;
    o.k_type = o.v_type = type;
    bool detected = false;
    o.keep = stream::ParseKvKeep("first:32", "--kv-keep", &detected);
    EXPECT_EQ(StreamLogits(model, o, tokens), reference) << KvTypeName(type);
    o.keep.clear();
    const std::vector<float> typed = StreamLogits(model, o, tokens);
    double worst = 0;
    for (size_t i = 0; i < typed.size(); ++i)
      worst = std::max(worst, static_cast<double>(std::fabs(typed[i] - reference[i])));
    EXPECT_GT(worst, 0.0) << KvTypeName(type);  // the rounding reaches the logits
  }
  // Dense stored as a context-long window: with every entry kept, the logits of an f32 window
  // cache as long as the context (bit for bit) and of the dense f32 cache (whose attention kernel
  // sums in another order).
  stream::StreamOptions dense;
  dense.policy = stream::Policy::kDense;
  const std::vector<float> dense_ref = StreamLogits(model, dense, tokens);
  stream::StreamOptions window = f32;
  window.policy = stream::Policy::kWindow;
  window.sinks = 0;
  window.window = model.config.max_seq_len;
  const std::vector<float> window_ref = StreamLogits(model, window, tokens);
  dense.k_type = dense.v_type = KvType::kQ8_0;
  bool detected = false;
  dense.keep = stream::ParseKvKeep("first:32", "--kv-keep", &detected);
  const std::vector<float> dense_typed = StreamLogits(model, dense, tokens);
  EXPECT_EQ(dense_typed, window_ref);
  EXPECT_LT(test::MaxDiff(dense_typed, dense_ref, "typed dense vs dense"), 1e-4);
}

// A prompt chunk longer than the ring has room for grows it (StreamCache::Prefill), moving the
// visible entries to a new cache: the kept ones must move with their f32 rows. With every entry
// kept, steps and prefills in any order give the f32 cache's logits bit for bit.
TEST(KvStream, KeptEntriesSurviveTheRingGrowing) {
  omp_set_num_threads(1);
  Model model = LoadModel(kModelPath);
  std::vector<int> tokens;
  for (int i = 0; i < 16; ++i) tokens.push_back(1 + (i * 29) % 450);
  stream::StreamOptions f32;
  f32.policy = stream::Policy::kSinks;
  f32.sinks = 4;
  f32.window = 12;
  f32.max_chunk = 64;
  for (KvType type : {KvType::kQ8_0, KvType::kQ4_0}) {
    stream::StreamOptions o = f32;
    o.k_type = o.v_type = type;
    bool detected = false;
    o.keep = stream::ParseKvKeep("first:16", "--kv-keep", &detected);
    auto a = stream::MakeStreamCache(model, f32), b = stream::MakeStreamCache(model, o);
    // A chunk of 2 (the ring grows from W to W + 1 while empty), a step, a chunk of 5 (it grows to
    // W + 4 holding 3 entries), a chunk of 8 (to W + 7, holding 8): 16 tokens, all kept.
    size_t at = 0;
    for (const size_t n : {2, 1, 5, 8}) {
      const std::span<const int> chunk(tokens.data() + at, n);
      const Tensor la = n == 1 ? a->Step(chunk[0]) : a->Prefill(chunk);
      const Tensor lb = n == 1 ? b->Step(chunk[0]) : b->Prefill(chunk);
      ASSERT_EQ(std::vector<float>(la.data(), la.data() + la.numel()),
                std::vector<float>(lb.data(), lb.data() + lb.numel()))
          << KvTypeName(type) << " after token " << at + n;
      at += n;
    }
  }
}

// A cache grows as the stream fills it (StreamOptions::first_ring): a ring that starts at 3
// entries and doubles gives the logits of one allocated whole at the start, bit for bit, for
// every storage and policy, through steps and prefills, before and after the window fills.
TEST(KvStream, ACacheGrownAsTheStreamFillsItEqualsOneAllocatedWhole) {
  omp_set_num_threads(1);
  Model model = LoadModel(kModelPath);
  std::vector<int> tokens;
  for (int i = 0; i < 91; ++i) tokens.push_back(1 + (i * 31) % 470);
  for (stream::Policy policy :
       {stream::Policy::kSinks, stream::Policy::kWindow, stream::Policy::kRecompute}) {
    for (KvType type : {KvType::kF32, KvType::kQ8_0}) {
      if (policy == stream::Policy::kRecompute && type != KvType::kF32) continue;
      stream::StreamOptions whole;
      whole.policy = policy;
      whole.sinks = 4;
      whole.window = 60;
      whole.k_type = whole.v_type = type;
      whole.first_ring = 1 << 20;  // every row from the start
      stream::StreamOptions grown = whole;
      grown.first_ring = 3;
      auto a = stream::MakeStreamCache(model, whole), b = stream::MakeStreamCache(model, grown);
      EXPECT_LT(b->kv_bytes(), a->kv_bytes());
      size_t at = 0;
      for (const size_t n : {1, 1, 5, 1, 17, 1, 40, 1, 1, 23}) {
        const std::span<const int> chunk(tokens.data() + at, n);
        const Tensor la = n == 1 ? a->Step(chunk[0]) : a->Prefill(chunk);
        const Tensor lb = n == 1 ? b->Step(chunk[0]) : b->Prefill(chunk);
        ASSERT_EQ(std::vector<float>(la.data(), la.data() + la.numel()),
                  std::vector<float>(lb.data(), lb.data() + lb.numel()))
            << stream::PolicyName(policy) << " " << KvTypeName(type) << " after token " << at + n;
        at += n;
      }
      EXPECT_EQ(at, tokens.size());
    }
  }
}

TEST(KvStream, NonsenseSettingsGiveClearErrors) {
  Model model = LoadModel(kModelPath);
  stream::StreamOptions o;
  o.policy = stream::Policy::kSinks;
  o.sinks = 4;
  o.window = 28;
  bool detected = false;
  ExpectErrorContains([&] { stream::ParseKvKeep("first:0", "--kv-keep", &detected); },
                      {"--kv-keep", "first:N"});
  ExpectErrorContains([&] { stream::ParseKvKeep("last:4", "--kv-keep", &detected); },
                      {"--kv-keep", "last:4"});
  stream::StreamOptions keep_f32 = o;
  keep_f32.keep = {0, 1};
  ExpectErrorContains([&] { stream::ValidateOptions(keep_f32, model.config); },
                      {"--kv-keep", "--kv-type"});
  stream::StreamOptions too_many = o;
  too_many.k_type = KvType::kQ8_0;
  too_many.keep = stream::ParseKvKeep("first:33", "--kv-keep", &detected);
  ExpectErrorContains([&] { stream::ValidateOptions(too_many, model.config); },
                      {"--kv-keep", "33", "32"});
  stream::StreamOptions recompute = o;
  recompute.policy = stream::Policy::kRecompute;
  recompute.v_type = KvType::kQ4_0;
  ExpectErrorContains([&] { stream::ValidateOptions(recompute, model.config); },
                      {"recompute", "q4_0"});
  // A cache the machine cannot hold is refused before it is allocated (stories260K: 1,280 bytes
  // a token in f32, 640 GB for 500M entries); the caches call the check as they grow.
  stream::StreamOptions huge = o;
  huge.window = 500'000'000 - 4;
  huge.force = true;
  ExpectErrorContains(
      [&] { stream::CheckCacheMemory(model.config, 500'000'000, huge, "--sinks + --window"); },
      {"--sinks + --window", "500000000 entries", "f32 keys", "needs", "available"});
  // The cache itself holds what a stream has filled: 1024 entries to start with, not 500M.
  for (stream::Policy policy : {stream::Policy::kSinks, stream::Policy::kRecompute}) {
    stream::StreamOptions p = huge;
    p.policy = policy;
    const auto cache = stream::MakeStreamCache(model, p);
    EXPECT_LE(cache->kv_bytes(), (1024 + 4) * int64_t{1280}) << stream::PolicyName(policy);
  }
  // A model whose rows are not whole blocks of 32 (kv_dim 48).
  ModelConfig narrow = model.config;
  narrow.n_kv_heads = 6;
  narrow.n_heads = 6;
  stream::StreamOptions q = o;
  q.k_type = KvType::kQ8_0;
  ExpectErrorContains([&] { stream::ValidateOptions(q, narrow); }, {"--kv-type", "q8_0", "48"});
}

TEST(KvStream, DetectedSinksOnAModelWithoutOne) {
  // stories260K has no P0 sink (docs/FINDINGS.md): detection finds no position.
  Model model = LoadModel(kModelPath);
  std::vector<int> tokens;
  for (int i = 0; i < 48; ++i) tokens.push_back(1 + (i * 53) % 500);
  EXPECT_TRUE(stream::DetectSinkPositions(model, tokens).empty());
}

}  // namespace
}  // namespace ss
