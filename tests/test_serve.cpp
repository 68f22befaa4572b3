// The viewer's pattern tiles (serve/serve.h) against the materialised attention pattern the forward
// pass hands to blocks.{l}.attn.hook_pattern, on the real stories260K model: exact values when the
// window fits the bins, max-pooled cells otherwise, single rows, and bad windows.
#include <gtest/gtest.h>

#include <algorithm>

#include "common/error.h"
#include "io/load.h"
#include "model/model.h"
#include "serve/serve.h"
#include "test_util.h"

namespace ss {
namespace {

struct Captured {
  Tensor q, k, pattern;  // one layer: (T, H, Dh), (T, Hkv, Dh), (H, T, T)
};

Captured Capture(const Model& model, const std::vector<int>& ids, int layer) {
  Captured c;
  Hooks hooks;
  hooks.Add(HookPoint::kQ, layer, [&](const HookContext&, Tensor& a) { c.q = a.Copy(); });
  hooks.Add(HookPoint::kK, layer, [&](const HookContext&, Tensor& a) { c.k = a.Copy(); });
  hooks.Add(HookPoint::kPattern, layer, [&](const HookContext&, Tensor& a) { c.pattern = a.Copy(); });
  KVCache cache = KVCache::Create(model.config, static_cast<int>(ids.size()));
  RunState state;
  ForwardRequest r;
  r.tokens = ids;
  r.logits = LogitsMode::kNone;
  r.hooks = &hooks;
  Forward(model, cache, state, r);
  return c;
}

std::vector<int> Tokens(int T) {
  std::vector<int> ids(T);
  for (int i = 0; i < T; ++i) ids[i] = i == 0 ? 1 : 3 + (i * 37) % 500;
  return ids;
}

TEST(ServePattern, TileEqualsHookPatternExactlyAndPooled) {
  const Model model = LoadModel(test::RepoPath("models/stories260K/stories260K.bin"));
  const ModelConfig& c = model.config;
  const int T = 300;  // more than one query block of the tile computation
  double worst = 0;
  for (int layer : {0, 3}) {
    const Captured cap = Capture(model, Tokens(T), layer);
    for (int head : {0, 5}) {
      auto ref = [&](int i, int j) { return cap.pattern[(static_cast<int64_t>(head) * T + i) * T + j]; };
      const serve::PatternTile exact =
          serve::ComputePatternTile(model, layer, cap.q.data(), cap.k.data(), T, head, 0, T, 0, T, T);
      ASSERT_EQ(exact.rows, T);
      ASSERT_EQ(exact.cols, T);
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < T; ++j)
          worst = std::max(worst, static_cast<double>(std::fabs(exact.values[i * T + j] - ref(i, j))));
      // A zoomed window pooled into 7 x 9 cells: each cell is the max over its block.
      const serve::PatternTile t =
          serve::ComputePatternTile(model, layer, cap.q.data(), cap.k.data(), T, head, 40, 290, 3, 200, 9);
      EXPECT_EQ(t.row_step, (250 + 8) / 9);
      for (int r = 0; r < t.rows; ++r)
        for (int col = 0; col < t.cols; ++col) {
          float m = 0;
          for (int i = 40 + r * t.row_step; i < std::min(290, 40 + (r + 1) * t.row_step); ++i)
            for (int j = 3 + col * t.col_step; j < std::min(200, 3 + (col + 1) * t.col_step); ++j)
              m = std::max(m, ref(i, j));
          worst = std::max(worst, static_cast<double>(std::fabs(t.values[r * t.cols + col] - m)));
        }
      const std::vector<float> row = serve::ComputePatternRow(model, layer, cap.q.data(), cap.k.data(), T, head, 123);
      for (int j = 0; j < T; ++j) worst = std::max(worst, static_cast<double>(std::fabs(row[j] - ref(123, j))));
    }
  }
  std::printf("largest difference to the hook pattern: %.3g\n", worst);
  EXPECT_LT(worst, 1e-5);
}

TEST(ServePattern, BadWindowsAreErrors) {
  const Model model = LoadModel(test::RepoPath("models/stories260K/stories260K.bin"));
  const Captured cap = Capture(model, Tokens(20), 1);
  const ModelConfig& c = model.config;
  EXPECT_THROW(serve::ComputePatternTile(model, 1, cap.q.data(), cap.k.data(), 20, 8, 0, 20, 0, 20, 4), Error);
  EXPECT_THROW(serve::ComputePatternTile(model, 1, cap.q.data(), cap.k.data(), 20, 0, 5, 5, 0, 20, 4), Error);
  EXPECT_THROW(serve::ComputePatternTile(model, 1, cap.q.data(), cap.k.data(), 20, 0, 0, 21, 0, 20, 4), Error);
  EXPECT_THROW(serve::ComputePatternTile(model, 1, cap.q.data(), cap.k.data(), 20, 0, 0, 20, 0, 20, 0), Error);
  EXPECT_THROW(serve::ComputePatternRow(model, 1, cap.q.data(), cap.k.data(), 20, 0, 20), Error);
}

}  // namespace
}  // namespace ss
