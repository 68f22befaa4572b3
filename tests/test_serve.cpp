// The viewer's pattern tiles (serve/serve.h) against the materialised attention pattern the forward
// pass hands to blocks.{l}.attn.hook_pattern, on the real stories260K model: exact values when the
// window fits the bins, max-pooled cells otherwise, single rows, and bad windows.
#include <gtest/gtest.h>

#include <algorithm>

#include "common/error.h"
#include "io/load.h"
#include "model/model.h"
#include "naive_hf.h"
#include "serve/http.h"
#include "serve/serve.h"
#include "test_util.h"

namespace ss {
namespace {

struct Captured {
  Tensor q, k, pattern;  // one layer: (T, H, Dh), (T, Hkv, Dh), (H, T, T)
  Tensor slot;           // kv-bias models: the layer's slot logits (H, T)
};

Captured Capture(const Model& model, const std::vector<int>& ids, int layer) {
  Captured c;
  Hooks hooks;
  hooks.Add(HookPoint::kQ, layer, [&](const HookContext&, Tensor& a) { c.q = a.Copy(); });
  RunState state;
  hooks.Add(HookPoint::kK, layer, [&](const HookContext&, Tensor& a) {
    c.k = a.Copy();
    if (model.config.attn_kv_bias) {
      c.slot = Tensor::Zeros({static_cast<int64_t>(model.config.n_heads) * a.dim(0)});
      std::copy_n(state.slot_logits.data(), c.slot.numel(), c.slot.data());
    }
  });
  hooks.Add(HookPoint::kPattern, layer,
            [&](const HookContext&, Tensor& a) { c.pattern = a.Copy(); });
  KVCache cache = KVCache::Create(model.config, static_cast<int>(ids.size()));
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
  const int T = 300;  // more than one query block of the tile computation
  double worst = 0;
  for (int layer : {0, 3}) {
    const Captured cap = Capture(model, Tokens(T), layer);
    for (int head : {0, 5}) {
      auto ref = [&](int i, int j) {
        return cap.pattern[(static_cast<int64_t>(head) * T + i) * T + j];
      };
      const serve::PatternTile exact = serve::ComputePatternTile(
          model, layer, cap.q.data(), cap.k.data(), T, head, 0, T, 0, T, T);
      ASSERT_EQ(exact.rows, T);
      ASSERT_EQ(exact.cols, T);
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < T; ++j)
          worst =
              std::max(worst, static_cast<double>(std::fabs(exact.values[i * T + j] - ref(i, j))));
      // A zoomed window pooled into 7 x 9 cells: each cell is the max over its block.
      const serve::PatternTile t = serve::ComputePatternTile(
          model, layer, cap.q.data(), cap.k.data(), T, head, 40, 290, 3, 200, 9);
      EXPECT_EQ(t.row_step, (250 + 8) / 9);
      for (int r = 0; r < t.rows; ++r)
        for (int col = 0; col < t.cols; ++col) {
          float m = 0;
          for (int i = 40 + r * t.row_step; i < std::min(290, 40 + (r + 1) * t.row_step); ++i)
            for (int j = 3 + col * t.col_step; j < std::min(200, 3 + (col + 1) * t.col_step); ++j)
              m = std::max(m, ref(i, j));
          worst = std::max(worst, static_cast<double>(std::fabs(t.values[r * t.cols + col] - m)));
        }
      const std::vector<float> row =
          serve::ComputePatternRow(model, layer, cap.q.data(), cap.k.data(), T, head, 123);
      for (int j = 0; j < T; ++j)
        worst = std::max(worst, static_cast<double>(std::fabs(row[j] - ref(123, j))));
    }
  }
  std::printf("largest difference to the hook pattern: %.3g\n", worst);
  EXPECT_LT(worst, 1e-5);
}

// A kv-bias slot (its logits from the queries before RoPE, passed as the forward computed them;
// the keys' probabilities then sum to 1 - p_slot) and sigmoid weights: tiles and rows equal the
// hook's pattern; a kv-bias model without the slot logits is an error.
TEST(ServePattern, KvBiasAndSigmoidTilesEqualHookPattern) {
  const int T = 150;
  for (const char* ext : {"sinkscope_attn_kv_bias", "sinkscope_attn_sigmoid"}) {
    const Model model = test::LoadRandomHf(fmt::format(R"({{"architectures": ["LlamaForCausalLM"],
        "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 61, "max_position_embeddings": 256, "{}": true}})",
                                                       ext),
                                           31, std::string("serve_") + ext);
    std::vector<int> ids(T);
    for (int i = 0; i < T; ++i) ids[i] = (i * 17 + 5) % 61;
    const Captured cap = Capture(model, ids, 1);
    const float* slot = cap.slot.empty() ? nullptr : cap.slot.data();
    double worst = 0, row_sum_min = 1e9;
    for (int head = 0; head < 4; ++head) {
      const serve::PatternTile t = serve::ComputePatternTile(model, 1, cap.q.data(), cap.k.data(),
                                                             T, head, 0, T, 0, T, T, slot);
      for (int i = 0; i < T; ++i) {
        double sum = 0;
        for (int j = 0; j < T; ++j) {
          const float ref = cap.pattern[(static_cast<int64_t>(head) * T + i) * T + j];
          worst = std::max(worst, static_cast<double>(std::fabs(t.values[i * T + j] - ref)));
          sum += ref;
        }
        row_sum_min = std::min(row_sum_min, sum);
      }
      const std::vector<float> row =
          serve::ComputePatternRow(model, 1, cap.q.data(), cap.k.data(), T, head, 77, slot);
      for (int j = 0; j < T; ++j)
        worst = std::max(worst,
                         static_cast<double>(std::fabs(
                             row[j] - cap.pattern[(static_cast<int64_t>(head) * T + 77) * T + j])));
    }
    std::printf("%s: largest difference to the hook pattern %.3g; smallest row sum %.3f\n", ext,
                worst, row_sum_min);
    EXPECT_LT(worst, 1e-5) << ext;
    if (model.config.attn_kv_bias) {
      EXPECT_LT(row_sum_min, 0.9);  // the slot holds mass the keys do not
      EXPECT_THROW(serve::ComputePatternRow(model, 1, cap.q.data(), cap.k.data(), T, 0, 77), Error);
    }
  }
}

TEST(ServePattern, BadWindowsAreErrors) {
  const Model model = LoadModel(test::RepoPath("models/stories260K/stories260K.bin"));
  const Captured cap = Capture(model, Tokens(20), 1);
  EXPECT_THROW(
      serve::ComputePatternTile(model, 1, cap.q.data(), cap.k.data(), 20, 8, 0, 20, 0, 20, 4),
      Error);
  EXPECT_THROW(
      serve::ComputePatternTile(model, 1, cap.q.data(), cap.k.data(), 20, 0, 5, 5, 0, 20, 4),
      Error);
  EXPECT_THROW(
      serve::ComputePatternTile(model, 1, cap.q.data(), cap.k.data(), 20, 0, 0, 21, 0, 20, 4),
      Error);
  EXPECT_THROW(
      serve::ComputePatternTile(model, 1, cap.q.data(), cap.k.data(), 20, 0, 0, 20, 0, 20, 0),
      Error);
  EXPECT_THROW(serve::ComputePatternRow(model, 1, cap.q.data(), cap.k.data(), 20, 0, 20), Error);
}

// ---- The HTTP request head (serve/http.h), parsed as RFC 9112 says and refused otherwise.

TEST(HttpHead, ParsesTheRequestLineHeadersAndQuery) {
  http::Request req;
  const auto error = http::ParseHead(
      "GET /api/pattern?run=ab&layer=%30&name=a+b&flag HTTP/1.1\r\nHost:  127.0.0.1:8080 \r\n"
      "X-Sinkscope-Token: t\r\nCookie: a=b",
      http::Limits{}, req);
  ASSERT_FALSE(error) << error->message;
  EXPECT_EQ(req.method, "GET");
  EXPECT_EQ(req.path, "/api/pattern");
  EXPECT_EQ(req.version, "HTTP/1.1");
  ASSERT_TRUE(req.Header("host"));
  EXPECT_EQ(*req.Header("host"), "127.0.0.1:8080");  // names lower-cased, values trimmed
  EXPECT_EQ(*req.Header("x-sinkscope-token"), "t");
  EXPECT_EQ(*req.Param("layer"), "0");
  EXPECT_EQ(*req.Param("name"), "a b");
  EXPECT_EQ(*req.Param("flag"), "");
  EXPECT_EQ(req.Param("missing"), nullptr);
}

TEST(HttpHead, RefusesMalformedHeads) {
  http::Limits limits;
  limits.max_target_bytes = 64;
  const std::vector<std::pair<std::string, int>> cases = {
      {"GET /x HTTP/1.1\r\n Folded: line", 400},
      {"GET /x HTTP/1.1\r\nNo colon here", 400},
      {"GET /x HTTP/1.1\r\nBad Name: v", 400},
      {"GET /x HTTP/1.1\r\nX: a\x01b", 400},
      {"GET  /x HTTP/1.1", 400},
      {"GET x HTTP/1.1", 400},
      {"GET http://evil/x HTTP/1.1", 400},
      {"GET /x HTTP/2.0", 505},
      {"GET /x HTTX/1.1", 400},
      {"GET /x?a=%zz HTTP/1.1", 400},
      {"GET /x?a=%4 HTTP/1.1", 400},
      {"GET /" + std::string(100, 'a') + " HTTP/1.1", 414},
  };
  for (const auto& [head, status] : cases) {
    http::Request req;
    const auto error = http::ParseHead(head, limits, req);
    ASSERT_TRUE(error) << head;
    EXPECT_EQ(error->status, status) << head;
    EXPECT_FALSE(error->message.empty());
  }
}

TEST(HttpHead, PercentDecodingIsStrict) {
  std::string out;
  EXPECT_TRUE(http::PercentDecode("4%00junk", out));
  EXPECT_EQ(out, std::string("4\0junk", 6));  // decoded as sent: the integer check refuses it
  EXPECT_TRUE(http::PercentDecode("%20%2B5", out));
  EXPECT_EQ(out, " +5");
  EXPECT_FALSE(http::PercentDecode("%", out));
  EXPECT_FALSE(http::PercentDecode("%a", out));
  EXPECT_FALSE(http::PercentDecode("%g0", out));
}

}  // namespace
}  // namespace ss
