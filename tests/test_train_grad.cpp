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

#include "train/grad_ops.h"
#include "train/rng.h"
#include "train/train_model.h"

namespace ss::train {
namespace {

using Vec = std::vector<double>;

Vec Random(size_t n, Rng& rng, double scale = 1.0) {
  Vec v(n);
  for (auto& x : v) x = rng.Normal() * scale;
  return v;
}

double Dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Relative errors of gradients much smaller than the tensor's largest are dominated by the
// finite-difference round-off (about 1e-11 absolute), so the denominator is floored at this share
// of the tensor's largest gradient.
constexpr double kFloor = 1e-3;

// Compares `analytic` with central differences of `loss` w.r.t. `x`; returns the max relative error.
double CheckGrad(const std::string& label, Vec& x, const Vec& analytic,
                 const std::function<double()>& loss, double h = 1e-5) {
  double worst = 0, worst_abs = 0, scale = 0;
  for (double g : analytic) scale = std::max(scale, std::abs(g));
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = loss();
    x[i] = keep - h;
    const double down = loss();
    x[i] = keep;
    const double numeric = (up - down) / (2 * h);
    const double diff = std::abs(numeric - analytic[i]);
    const double rel = diff / std::max({std::abs(numeric), std::abs(analytic[i]), kFloor * scale});
    worst = std::max(worst, rel);
    worst_abs = std::max(worst_abs, diff);
  }
  std::printf("%s: max rel err %.3g (max abs %.3g) over %zu values\n", label.c_str(), worst, worst_abs,
              x.size());
  return worst;
}

constexpr double kOpTol = 1e-6;

TEST(TrainGradOps, Linear) {
  Rng rng(1);
  const int N = 5, in = 4, out = 3;
  Vec x = Random(N * in, rng), w = Random(out * in, rng), r = Random(N * out, rng);
  auto loss = [&] { Vec y(N * out); LinearForward(x.data(), w.data(), y.data(), N, in, out); return Dot(y, r); };
  Vec dx(N * in), dw(out * in, 0.0);
  LinearBackward(r.data(), x.data(), w.data(), dx.data(), dw.data(), N, in, out);
  EXPECT_LT(CheckGrad("linear dx", x, dx, loss), kOpTol);
  EXPECT_LT(CheckGrad("linear dW", w, dw, loss), kOpTol);
}

TEST(TrainGradOps, RmsNorm) {
  Rng rng(2);
  const int N = 4, D = 6;
  Vec x = Random(N * D, rng), w = Random(D, rng), r = Random(N * D, rng);
  auto loss = [&] { Vec y(N * D), s(N); RmsNormForward(x.data(), w.data(), y.data(), s.data(), N, D, 1e-5f); return Dot(y, r); };
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
    auto loss = [&] { Vec y = x; RopeApply(y.data(), table, N, heads, Dh, kind, false); return Dot(y, r); };
    Vec dx = r;
    RopeApply(dx.data(), table, N, heads, Dh, kind, true);
    EXPECT_LT(CheckGrad(kind == RopeKind::kHalf ? "rope(half) dx" : "rope(interleaved) dx", x, dx, loss), kOpTol);
  }
}

// One attention check: q, k, v and the loss weights r (loss = z . r) at B = 2, T = 5, H = 4,
// Hkv = 2, Dh = 4; `Check` runs forward and backward under a variant and holds dq, dk, dv to central
// differences, returning the slot gradients for the caller to check.
struct AttnGradCase {
  static constexpr int B = 2, T = 5, H = 4, Hkv = 2, Dh = 4, N = B * T;
  Rng rng;
  Vec q, k, v, r;
  AttnGradCase(uint64_t seed, double qk_scale) : rng(seed) {
    q = Random(N * H * Dh, rng, qk_scale), k = Random(N * Hkv * Dh, rng, qk_scale);
    v = Random(N * Hkv * Dh, rng), r = Random(N * H * Dh, rng);
  }
  double Loss(const AttnVariant<double>& var) {
    Vec p(B * H * T * T), z(N * H * Dh);
    AttentionForward(q.data(), k.data(), v.data(), p.data(), z.data(), B, T, H, Hkv, Dh, var);
    return Dot(z, r);
  }
  // Gradients of the sink logits (H), slot logits (B, H, T) and slot values (Hkv, Dh) as asked.
  struct SlotGrads {
    Vec sinks, slot_logits, slot_values;
  };
  SlotGrads Check(const std::string& label, const std::function<AttnVariant<double>()>& variant,
                  bool sinks = false, bool slot = false) {
    auto loss = [&] { return Loss(variant()); };
    Vec p(B * H * T * T), z(N * H * Dh), dq(q.size()), dk(k.size()), dv(v.size());
    SlotGrads g{Vec(sinks ? H : 0, 0.0), Vec(slot ? B * H * T : 0, 0.0), Vec(slot ? Hkv * Dh : 0, 0.0)};
    AttentionForward(q.data(), k.data(), v.data(), p.data(), z.data(), B, T, H, Hkv, Dh, variant());
    AttentionBackward(r.data(), q.data(), k.data(), v.data(), p.data(), dq.data(), dk.data(),
                      dv.data(), B, T, H, Hkv, Dh, variant(), sinks ? g.sinks.data() : nullptr,
                      slot ? g.slot_logits.data() : nullptr, slot ? g.slot_values.data() : nullptr);
    EXPECT_LT(CheckGrad(label + " dq", q, dq, loss), kOpTol);
    EXPECT_LT(CheckGrad(label + " dk", k, dk, loss), kOpTol);
    EXPECT_LT(CheckGrad(label + " dv", v, dv, loss), kOpTol);
    return g;
  }
};

TEST(TrainGradOps, Attention) {
  AttnGradCase c(4, 1.0);
  c.Check("attention", [] { return AttnVariant<double>{}; });
}

// attention=sink-logit: the same op with a learned logit per head (large and small, so some rows put
// most of their mass on the slot); gradients of q, k, v and the sink logits.
TEST(TrainGradOps, AttentionWithSinkLogits) {
  AttnGradCase c(14, 1.0);
  Vec sinks = {-2.0, 0.0, 1.5, 4.0};
  Vec slot_p(c.B * c.H * c.T);
  auto variant = [&] {
    AttnVariant<double> var;
    var.sinks = sinks.data();
    var.slot_probs = slot_p.data();
    return var;
  };
  const auto g = c.Check("sink-logit attention", variant, /*sinks=*/true);
  EXPECT_LT(CheckGrad("sink-logit attention dsinks", sinks, g.sinks, [&] { return c.Loss(variant()); }), kOpTol);
}

// attention=kv-bias: a slot whose logit is given per query and whose value joins the output;
// gradients of q, k, v, the slot logits (B, H, T) and the slot values (Hkv, Dh).
TEST(TrainGradOps, AttentionWithKvBiasSlot) {
  AttnGradCase c(15, 1.0);
  Vec logits = Random(c.B * c.H * c.T, c.rng, 3.0), values = Random(c.Hkv * c.Dh, c.rng, 2.0);
  Vec slot_p(c.B * c.H * c.T);
  auto variant = [&] {
    AttnVariant<double> var;
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
  const auto g = c.Check("kv-bias attention", variant, false, /*slot=*/true);
  auto loss = [&] { return c.Loss(variant()); };
  EXPECT_LT(CheckGrad("kv-bias attention dslot_logits", logits, g.slot_logits, loss), kOpTol);
  EXPECT_LT(CheckGrad("kv-bias attention dslot_values", values, g.slot_values, loss), kOpTol);
}

// attention=sigmoid: weights sigmoid(q k / sqrt(Dh)) without normalisation.
TEST(TrainGradOps, SigmoidAttention) {
  AttnGradCase c(16, 2.0);
  AttnVariant<double> var;
  var.sigmoid = true;
  Vec p(c.B * c.H * c.T * c.T), z(c.N * c.H * c.Dh);
  AttentionForward(c.q.data(), c.k.data(), c.v.data(), p.data(), z.data(), c.B, c.T, c.H, c.Hkv, c.Dh, var);
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
  auto loss = [&] { Vec g(n); SwigluForward(a.data(), u.data(), g.data(), n); return Dot(g, r); };
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
  auto loss = [&] { Vec l = logits; return CrossEntropyForward(l.data(), targets.data(), N, V); };
  Vec p = logits;
  CrossEntropyForward(p.data(), targets.data(), N, V);
  CrossEntropyBackward(p.data(), targets.data(), N, V, 1.0 / N);
  EXPECT_LT(CheckGrad("cross-entropy dlogits", logits, p, loss), kOpTol);
}

// The whole model: every parameter against central differences of the training loss.
double CheckModel(const std::string& label, const TrainConfig& c, int B, int T) {
  TrainModel<double> m(c, B, T);
  m.InitParams(7);
  // A larger init than training uses, so every path carries a gradient well above round-off.
  for (auto& p : m.params) p *= 10.0;
  for (const auto& t : m.layout().tensors)
    if (t.shape.size() == 1)
      for (int64_t i = 0; i < t.numel; ++i) m.params[t.offset + i] = 1.0 + 0.1 * std::sin(double(i));
  Rng rng(8);
  std::vector<int> tokens(B * T), targets(B * T);
  for (auto& t : tokens) t = rng.Below(c.vocab_size);
  for (auto& t : targets) t = rng.Below(c.vocab_size);
  m.Forward(tokens.data(), targets.data());
  m.Backward();
  Vec analytic = m.grads;
  double worst = 0;
  for (const auto& t : m.layout().tensors) {
    if (t.frozen) {  // never trained: its analytic gradient must be exactly 0
      for (int64_t i = 0; i < t.numel; ++i) EXPECT_EQ(analytic[t.offset + i], 0.0) << t.name;
      continue;
    }
    Vec slice(m.params.begin() + t.offset, m.params.begin() + t.offset + t.numel);
    Vec grad(analytic.begin() + t.offset, analytic.begin() + t.offset + t.numel);
    double tw = 0, scale = 0;
    for (double g : grad) scale = std::max(scale, std::abs(g));
    // Up to 16 entries per tensor, spread over it, keep the check fast.
    const int64_t stride = std::max<int64_t>(1, t.numel / 16);
    for (int64_t i = 0; i < t.numel; i += stride) {
      const double keep = m.params[t.offset + i];
      const double h = std::getenv("SS_GRAD_H") ? std::atof(std::getenv("SS_GRAD_H")) : 1e-5;
      m.params[t.offset + i] = keep + h;
      const double up = m.Forward(tokens.data(), targets.data());
      m.params[t.offset + i] = keep - h;
      const double down = m.Forward(tokens.data(), targets.data());
      m.params[t.offset + i] = keep;
      const double numeric = (up - down) / (2 * h);
      const double rel = std::abs(numeric - grad[i]) /
                         std::max({std::abs(numeric), std::abs(grad[i]), kFloor * scale});
      tw = std::max(tw, rel);
    }
    if (tw > 1e-6) std::printf("  %s: %.3g\n", t.name.c_str(), tw);
    worst = std::max(worst, tw);
  }
  std::printf("%s: whole model, %lld parameters: max rel err %.3g\n", label.c_str(),
              static_cast<long long>(m.layout().total), worst);
  return worst;
}

TrainConfig Tiny() {
  TrainConfig c;
  c.dim = 8; c.n_layers = 2; c.n_heads = 2; c.n_kv_heads = 1; c.hidden_dim = 12; c.vocab_size = 11;
  return c;
}

TEST(TrainGradModel, DenseTiedGqaHalfRope) { EXPECT_LT(CheckModel("dense tied gqa half-rope", Tiny(), 2, 5), 1e-5); }

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
  c.tied_embeddings = false; c.rope = "interleaved"; c.qk_norm = true; c.n_kv_heads = 2;
  EXPECT_LT(CheckModel("dense untied interleaved qk-norm", c, 2, 5), 1e-5);
}

TEST(TrainGradModel, MoeTop2Renormalised) {
  TrainConfig c = Tiny();
  c.n_experts = 4; c.n_experts_per_tok = 2; c.norm_topk_prob = true; c.qk_norm = true; c.aux_loss_coef = 0.1f;
  EXPECT_LT(CheckModel("moe E4 k2 renormalised + aux", c, 2, 5), 1e-5);
}

TEST(TrainGradModel, MoeTop1Raw) {
  TrainConfig c = Tiny();
  c.n_experts = 3; c.n_experts_per_tok = 1; c.norm_topk_prob = false; c.aux_loss_coef = 0.1f;
  EXPECT_LT(CheckModel("moe E3 k1 raw weights + aux", c, 2, 5), 1e-5);
}

}  // namespace
}  // namespace ss::train
