// Finite-difference gradient checks of the trainer in float64 (a hand-written backward has no
// other independent check): every op on
// its own, then the whole model (dense and MoE) against central differences of its loss. Each
// check prints the largest relative error |analytic - numeric| / max(|analytic|, |numeric|, 1e-6).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "grad_check.h"
#include "train/grad_ops.h"
#include "train/rng.h"
#include "train/train_model.h"

namespace ss::train {
namespace {

using namespace gradcheck;

TEST(TrainGradOps, Linear) {
  Rng rng(1);
  const int N = 5, in = 4, out = 3;
  Vec x = Random(N * in, rng), w = Random(out * in, rng), r = Random(N * out, rng);
  auto loss = [&] {
    Vec y(N * out);
    LinearForward(x.data(), w.data(), y.data(), N, in, out);
    return Dot(y, r);
  };
  Vec dx(N * in), dw(out * in, 0.0);
  LinearBackward(r.data(), x.data(), w.data(), dx.data(), dw.data(), N, in, out);
  EXPECT_LT(CheckGrad("linear dx", x, dx, loss), kOpTol);
  EXPECT_LT(CheckGrad("linear dW", w, dw, loss), kOpTol);
}

TEST(TrainGradOps, RmsNorm) {
  Rng rng(2);
  const int N = 4, D = 6;
  Vec x = Random(N * D, rng), w = Random(D, rng), r = Random(N * D, rng);
  auto loss = [&] {
    Vec y(N * D), s(N);
    RmsNormForward(x.data(), w.data(), y.data(), s.data(), N, D, 1e-5f);
    return Dot(y, r);
  };
  Vec y(N * D), s(N), dx(N * D, 0.0), dw(D, 0.0);
  RmsNormForward(x.data(), w.data(), y.data(), s.data(), N, D, 1e-5f);
  RmsNormBackward(r.data(), x.data(), w.data(), s.data(), dx.data(), dw.data(), N, D);
  EXPECT_LT(CheckGrad("rmsnorm dx", x, dx, loss), kOpTol);
  EXPECT_LT(CheckGrad("rmsnorm dw", w, dw, loss), kOpTol);
}

TEST(TrainGradOps, Rope) {
  for (RopeKind kind : {RopeKind::kInterleaved, RopeKind::kHalf}) {
    Rng rng(3);
    const int B = 2, T = 5, heads = 2, Dh = 8, N = B * T;
    RopeTable table(T, Dh, 10000.0f);
    Vec x = Random(N * heads * Dh, rng), r = Random(N * heads * Dh, rng);
    auto loss = [&] {
      Vec y = x;
      RopeApply(y.data(), table, N, heads, Dh, kind, false);
      return Dot(y, r);
    };
    Vec dx = r;
    RopeApply(dx.data(), table, N, heads, Dh, kind, true);
    EXPECT_LT(
        CheckGrad(kind == RopeKind::kHalf ? "rope(half) dx" : "rope(interleaved) dx", x, dx, loss),
        kOpTol);
  }
}

TEST(TrainGradOps, Attention) {
  AttnGradCase c(4, 1.0);
  c.Check("attention", [] { return AttnRows<double>{}; });
}

// attention=sink-logit: the same op with a learned logit per head (large and small, so some rows
// put most of their mass on the slot), broadcast to every query as the trainer does; gradients of
// q, k, v and the sink logits (the per-query gradients summed per head, HeadSlotBackward).
TEST(TrainGradOps, AttentionWithSinkLogits) {
  AttnGradCase c(14, 1.0);
  Vec sinks = {-2.0, 0.0, 1.5, 4.0};
  const AttnShape shape{c.B, c.T, c.H, c.Hkv, c.Dh, 0};
  Vec slot_p(c.B * c.H * c.T), slot_logits(c.B * c.H * c.T);
  auto variant = [&] {
    AttnRows<double> var;
    BroadcastHeadSlot(sinks.data(), slot_logits.data(), shape);
    var.slot_logits = slot_logits.data();
    var.slot_probs = slot_p.data();
    return var;
  };
  const auto g = c.Check("sink-logit attention", variant, /*slot=*/true);
  Vec dsinks(c.H, 0.0);
  HeadSlotBackward(g.slot_logits.data(), dsinks.data(), shape);
  EXPECT_LT(
      CheckGrad("sink-logit attention dsinks", sinks, dsinks, [&] { return c.Loss(variant()); }),
      kOpTol);
}

// attention=kv-bias: a slot whose logit is given per query and whose value joins the output;
// gradients of q, k, v, the slot logits (B, H, T) and the slot values (Hkv, Dh).
TEST(TrainGradOps, AttentionWithKvBiasSlot) {
  AttnGradCase c(15, 1.0);
  Vec logits = Random(c.B * c.H * c.T, c.rng, 3.0), values = Random(c.Hkv * c.Dh, c.rng, 2.0);
  Vec slot_p(c.B * c.H * c.T);
  auto variant = [&] {
    AttnRows<double> var;
    var.slot_logits = logits.data();
    var.slot_values = values.data();
    var.slot_probs = slot_p.data();
    return var;
  };
  c.Loss(variant());
  double lo = 1, hi = 0;  // the slot holds much of some rows and little of others
  for (double x : slot_p) lo = std::min(lo, x), hi = std::max(hi, x);
  EXPECT_LT(lo, 0.1);
  EXPECT_GT(hi, 0.5);
  const auto g = c.Check("kv-bias attention", variant, /*slot=*/true, /*values=*/true);
  auto loss = [&] { return c.Loss(variant()); };
  EXPECT_LT(CheckGrad("kv-bias attention dslot_logits", logits, g.slot_logits, loss), kOpTol);
  EXPECT_LT(CheckGrad("kv-bias attention dslot_values", values, g.slot_values, loss), kOpTol);
}

// attention=sigmoid: weights sigmoid(q k / sqrt(Dh)) without normalisation.
TEST(TrainGradOps, SigmoidAttention) {
  AttnGradCase c(16, 2.0);
  AttnRows<double> var;
  var.rule = &FindAttnVariant("sigmoid", "test").rule();  // model/attn_sigmoid.cpp
  Vec p(c.B * c.H * c.T * c.T), z(c.N * c.H * c.Dh);
  AttentionForward(c.q.data(), c.k.data(), c.v.data(), p.data(), z.data(), c.B, c.T, c.H, c.Hkv,
                   c.Dh, var);
  // Rows are not normalised: the last row of the first head sums to neither 0 nor 1.
  double sum = 0;
  for (int j = 0; j < c.T; ++j) sum += p[(c.T - 1) * c.T + j];
  EXPECT_GT(std::abs(sum - 1.0), 0.05);
  c.Check("sigmoid attention", [&] { return var; });
}

TEST(TrainGradOps, Swiglu) {
  Rng rng(5);
  const int n = 20;
  Vec a = Random(n, rng, 2.0), u = Random(n, rng), r = Random(n, rng);
  auto loss = [&] {
    Vec g(n);
    SwigluForward(a.data(), u.data(), g.data(), n);
    return Dot(g, r);
  };
  Vec da(n), du(n);
  SwigluBackward(r.data(), a.data(), u.data(), da.data(), du.data(), n);
  EXPECT_LT(CheckGrad("swiglu da", a, da, loss), kOpTol);
  EXPECT_LT(CheckGrad("swiglu du", u, du, loss), kOpTol);
}

TEST(TrainGradOps, CrossEntropy) {
  Rng rng(6);
  const int N = 4, V = 7;
  Vec logits = Random(N * V, rng, 2.0);
  std::vector<int> targets = {0, 3, 6, 2};
  auto loss = [&] {
    Vec l = logits;
    return CrossEntropyForward(l.data(), targets.data(), N, V);
  };
  Vec p = logits;
  CrossEntropyForward(p.data(), targets.data(), N, V);
  CrossEntropyBackward(p.data(), targets.data(), N, V, 1.0 / N);
  EXPECT_LT(CheckGrad("cross-entropy dlogits", logits, p, loss), kOpTol);
}

TEST(TrainGradModel, DenseTiedGqaHalfRope) {
  EXPECT_LT(CheckModel("dense tied gqa half-rope", Tiny(), 2, 5), 1e-5);
}

TEST(TrainGradModel, DenseSinkLogit) {
  TrainConfig c = Tiny();
  c.attention = "sink-logit";
  EXPECT_LT(CheckModel("dense sink-logit", c, 2, 5), 1e-5);
}

TEST(TrainGradModel, DenseGated) {
  TrainConfig c = Tiny();
  c.attention = "gated";
  EXPECT_LT(CheckModel("dense gated", c, 2, 5), 1e-5);
}

TEST(TrainGradModel, DenseKvBias) {
  TrainConfig c = Tiny();
  c.attention = "kv-bias";
  EXPECT_LT(CheckModel("dense kv-bias", c, 2, 5), 1e-5);
  c.qk_norm = true;  // the slot reads the query after its norm, before RoPE
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.dim = 16;
  EXPECT_LT(CheckModel("dense kv-bias qk-norm gqa", c, 2, 5), 1e-5);
}

TEST(TrainGradModel, DenseSigmoid) {
  TrainConfig c = Tiny();
  c.attention = "sigmoid";
  EXPECT_LT(CheckModel("dense sigmoid", c, 2, 5), 1e-5);
}

TEST(TrainGradModel, DenseSoftmax1) {
  TrainConfig c = Tiny();
  c.attention = "softmax1";
  EXPECT_LT(CheckModel("dense softmax1", c, 2, 5), 1e-5);
}

TEST(TrainGradModel, DenseUntiedInterleavedQkNorm) {
  TrainConfig c = Tiny();
  c.tied_embeddings = false;
  c.rope = "interleaved";
  c.qk_norm = true;
  c.n_kv_heads = 2;
  EXPECT_LT(CheckModel("dense untied interleaved qk-norm", c, 2, 5), 1e-5);
}

TEST(TrainGradModel, MoeTop2Renormalised) {
  TrainConfig c = Tiny();
  c.n_experts = 4;
  c.n_experts_per_tok = 2;
  c.norm_topk_prob = true;
  c.qk_norm = true;
  c.aux_loss_coef = 0.1f;
  EXPECT_LT(CheckModel("moe E4 k2 renormalised + aux", c, 2, 5), 1e-5);
}

TEST(TrainGradModel, MoeTop1Raw) {
  TrainConfig c = Tiny();
  c.n_experts = 3;
  c.n_experts_per_tok = 1;
  c.norm_topk_prob = false;
  c.aux_loss_coef = 0.1f;
  EXPECT_LT(CheckModel("moe E3 k1 raw weights + aux", c, 2, 5), 1e-5);
}

}  // namespace
}  // namespace ss::train
