// The typed streaming KV cache (--kv-type, --kv-keep; kernels/kv_types.h, model.h KVCache):
// encode / decode against the formats' definitions, the attention kernel on a typed cache against a
// float64 reference on the dequantised rows, the f32 kernel on the same rows (bit for bit), and a
// stream whose every entry is kept f32 against the f32 cache (bit for bit) on stories260K.
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
    for (const std::string& w : words) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
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
    case KvType::kF16: return f16(2 * i);
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
        for (auto [first, count] : std::vector<std::pair<int, int>>{{0, n}, {32, n - 32}, {5, 19}, {8, 8}, {0, 32}}) {
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
          worst = std::max(worst, std::fabs(static_cast<double>(out[i]) - x[i]) / std::max(1e-30, std::fabs(static_cast<double>(x[i]))));
          amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
        }
        double abs_worst = 0;
        for (int i = 0; i < n; ++i) abs_worst = std::max(abs_worst, std::fabs(static_cast<double>(out[i]) - x[i]));
        switch (type) {
          case KvType::kF32: EXPECT_EQ(abs_worst, 0.0); break;
          case KvType::kBf16: EXPECT_LE(worst, 1.0 / 256); break;
          case KvType::kF16: EXPECT_LE(worst, 1.0 / 2048); break;
          case KvType::kQ8_0: EXPECT_LE(abs_worst, amax / 127 * 0.51 + 1e-6); break;
          case KvType::kQ4_0: EXPECT_LE(abs_worst, amax / 8 * 1.01 + 1e-6); break;
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

// A typed sinks + ring cache of random entries, some rows kept f32.
struct TypedCache {
  int rows, kv_row;
  KvType type;
  std::vector<uint8_t> bytes;
  std::vector<int> kept_slot;
  std::vector<float> kept;
  std::vector<float> decoded;  // (rows, kv_row) what attention must see
  KvRows View() const {
    KvRows r;
    r.type = type;
    r.bytes = bytes.data();
    r.row_bytes = KvRowBytes(type, kv_row);
    r.kept_slot = kept_slot.data();
    r.kept = kept.data();
    return r;
  }
};

TypedCache MakeTypedCache(KvType type, int rows, int kv_row, const std::vector<int>& kept_rows, std::mt19937& rng) {
  TypedCache c{rows, kv_row, type, {}, std::vector<int>(rows, -1), {}, {}};
  const size_t rb = KvRowBytes(type, kv_row);
  c.bytes.resize(rows * rb);
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
    KvEncodeRow(type, x.data(), kv_row, c.bytes.data() + r * rb);
    KvDecodeSlice(type, c.bytes.data() + r * rb, 0, kv_row, c.decoded.data() + static_cast<size_t>(r) * kv_row);
  }
  return c;
}

TEST(KvAttention, TypedCacheEqualsAttentionOnTheDequantisedCache) {
  std::mt19937 rng(11);
  const int sinks = 3, window = 9, ring = 12;
  const int rows = sinks + ring;
  for (auto [H, Hkv, Dh] : std::vector<std::tuple<int, int, int>>{{4, 2, 32}, {8, 4, 8}, {2, 2, 64}}) {
    const int kv_row = Hkv * Dh, q_row = H * Dh;
    for (KvType type : {KvType::kBf16, KvType::kF16, KvType::kQ8_0, KvType::kQ4_0}) {
      const TypedCache k = MakeTypedCache(type, rows, kv_row, {0, 1}, rng);
      const TypedCache v = MakeTypedCache(type, rows, kv_row, {0, 1}, rng);
      const int T = 3;
      const int64_t first_index = 40;  // the ring has wrapped: the recent rows run around it
      const std::vector<float> q = RandomRow(T * q_row, rng), qs = RandomRow(T * q_row, rng);
      std::vector<float> out(T * q_row), f32_out(T * q_row);
      SinkWindowAttention(q.data(), qs.data(), k.View(), v.View(), out.data(), T, H, Hkv, Dh, sinks,
                          window, ring, first_index, AttnOptions{});
      SinkWindowAttention(q.data(), qs.data(), k.decoded.data(), v.decoded.data(), f32_out.data(), T,
                          H, Hkv, Dh, sinks, window, ring, first_index);
      EXPECT_EQ(out, f32_out) << KvTypeName(type) << " H " << H << " Dh " << Dh;
      // float64, from the visibility rule: sink rows [0, S) scored with q_sink, the W - 1 recent
      // stream indices before m and m itself with q_recent, at row S + (s - S) % ring.
      double worst = 0;
      for (int t = 0; t < T; ++t)
        for (int h = 0; h < H; ++h) {
          const int kvh = h / (H / Hkv);
          const int64_t m = first_index + t;
          std::vector<std::pair<int, const float*>> seen;
          for (int j = 0; j < sinks; ++j) seen.push_back({j, qs.data() + t * q_row + h * Dh});
          for (int64_t s = m - window + 1; s <= m; ++s)
            seen.push_back({sinks + static_cast<int>((s - sinks) % ring), q.data() + t * q_row + h * Dh});
          std::vector<double> score;
          double mx = -INFINITY;
          for (auto [row, qq] : seen) {
            double dot = 0;
            for (int d = 0; d < Dh; ++d) dot += static_cast<double>(qq[d]) * k.decoded[row * kv_row + kvh * Dh + d];
            score.push_back(dot / std::sqrt(static_cast<double>(Dh)));
            mx = std::max(mx, score.back());
          }
          double z = 0;
          for (double& s : score) z += (s = std::exp(s - mx));
          for (int d = 0; d < Dh; ++d) {
            double o = 0;
            for (size_t i = 0; i < seen.size(); ++i) o += score[i] / z * v.decoded[seen[i].first * kv_row + kvh * Dh + d];
            worst = std::max(worst, std::fabs(o - out[t * q_row + h * Dh + d]));
          }
        }
      std::printf("kv attention %s (H %d, Hkv %d, Dh %d): largest |diff| to float64 on the dequantised cache %.2e\n",
                  KvTypeName(type), H, Hkv, Dh, worst);
      EXPECT_LT(worst, 2e-5);
    }
  }
}

// Teacher-forced logits of `tokens` through a stream cache.
std::vector<float> StreamLogits(const Model& model, const stream::StreamOptions& o, const std::vector<int>& tokens) {
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
    for (size_t i = 0; i < typed.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(typed[i] - reference[i])));
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

TEST(KvStream, NonsenseSettingsGiveClearErrors) {
  Model model = LoadModel(kModelPath);
  stream::StreamOptions o;
  o.policy = stream::Policy::kSinks;
  o.sinks = 4;
  o.window = 28;
  bool detected = false;
  ExpectErrorContains([&] { stream::ParseKvKeep("first:0", "--kv-keep", &detected); }, {"--kv-keep", "first:N"});
  ExpectErrorContains([&] { stream::ParseKvKeep("last:4", "--kv-keep", &detected); }, {"--kv-keep", "last:4"});
  stream::StreamOptions keep_f32 = o;
  keep_f32.keep = {0, 1};
  ExpectErrorContains([&] { stream::ValidateOptions(keep_f32, model.config); }, {"--kv-keep", "--kv-type"});
  stream::StreamOptions too_many = o;
  too_many.k_type = KvType::kQ8_0;
  too_many.keep = stream::ParseKvKeep("first:33", "--kv-keep", &detected);
  ExpectErrorContains([&] { stream::ValidateOptions(too_many, model.config); }, {"--kv-keep", "33", "32"});
  stream::StreamOptions recompute = o;
  recompute.policy = stream::Policy::kRecompute;
  recompute.v_type = KvType::kQ4_0;
  ExpectErrorContains([&] { stream::ValidateOptions(recompute, model.config); }, {"recompute", "q4_0"});
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
