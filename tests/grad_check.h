// Finite-difference gradient checking for the trainer's float64 path, shared by the gradient
// tests (tests/test_train_grad.cpp, the attention variants' tests/test_attn_<file>.cpp): central
// differences of a loss against an analytic gradient, the attention op's case, the whole model.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "train/grad_ops.h"
#include "train/rng.h"
#include "train/train_model.h"

namespace ss::train::gradcheck {

using Vec = std::vector<double>;

inline Vec Random(size_t n, Rng& rng, double scale = 1.0) {
  Vec v(n);
  for (auto& x : v) x = rng.Normal() * scale;
  return v;
}

inline double Dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Relative errors of gradients much smaller than the tensor's largest are dominated by the
// finite-difference round-off (about 1e-11 absolute), so the denominator is floored at this share
// of the tensor's largest gradient.
constexpr double kFloor = 1e-3;

// Compares `analytic` with central differences of `loss` w.r.t. `x`; returns the max relative
// error.
inline double CheckGrad(const std::string& label, Vec& x, const Vec& analytic,
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
  std::printf("%s: max rel err %.3g (max abs %.3g) over %zu values\n", label.c_str(), worst,
              worst_abs, x.size());
  return worst;
}

constexpr double kOpTol = 1e-6;

// One attention check: q, k, v and the loss weights r (loss = z . r) at B = 2, T = 5, H = 4,
// Hkv = 2, Dh = 4; `Check` runs forward and backward with the given rows (rule and slot) and holds
// dq, dk, dv to central differences, returning the slot gradients for the caller to check.
struct AttnGradCase {
  static constexpr int B = 2, T = 5, H = 4, Hkv = 2, Dh = 4, N = B * T;
  Rng rng;
  Vec q, k, v, r;
  AttnGradCase(uint64_t seed, double qk_scale) : rng(seed) {
    q = Random(N * H * Dh, rng, qk_scale), k = Random(N * Hkv * Dh, rng, qk_scale);
    v = Random(N * Hkv * Dh, rng), r = Random(N * H * Dh, rng);
  }
  double Loss(const AttnRows<double>& var) {
    Vec p(B * H * T * T), z(N * H * Dh);
    AttentionForward(q.data(), k.data(), v.data(), p.data(), z.data(), B, T, H, Hkv, Dh, var);
    return Dot(z, r);
  }
  // Gradients of the slot logits (B, H, T) and slot values (Hkv, Dh) as asked.
  struct SlotGrads {
    Vec slot_logits, slot_values;
  };
  SlotGrads Check(const std::string& label, const std::function<AttnRows<double>()>& variant,
                  bool slot = false, bool values = false) {
    auto loss = [&] { return Loss(variant()); };
    Vec p(B * H * T * T), z(N * H * Dh), dq(q.size()), dk(k.size()), dv(v.size());
    SlotGrads g{Vec(slot ? B * H * T : 0, 0.0), Vec(values ? Hkv * Dh : 0, 0.0)};
    AttentionForward(q.data(), k.data(), v.data(), p.data(), z.data(), B, T, H, Hkv, Dh, variant());
    AttentionBackward(r.data(), q.data(), k.data(), v.data(), p.data(), dq.data(), dk.data(),
                      dv.data(), B, T, H, Hkv, Dh, variant(), slot ? g.slot_logits.data() : nullptr,
                      values ? g.slot_values.data() : nullptr);
    EXPECT_LT(CheckGrad(label + " dq", q, dq, loss), kOpTol);
    EXPECT_LT(CheckGrad(label + " dk", k, dk, loss), kOpTol);
    EXPECT_LT(CheckGrad(label + " dv", v, dv, loss), kOpTol);
    return g;
  }
};

// The whole model: every parameter against central differences of the training loss.
inline double CheckModel(const std::string& label, const TrainConfig& c, int B, int T) {
  TrainModel<double> m(c, B, T);
  m.InitParams(7);
  // A larger init than training uses, so every path carries a gradient well above round-off.
  for (auto& p : m.params) p *= 10.0;
  for (const auto& t : m.layout().tensors)
    if (t.shape.size() == 1)
      for (int64_t i = 0; i < t.numel; ++i)
        m.params[t.offset + i] = 1.0 + 0.1 * std::sin(double(i));
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

inline TrainConfig Tiny() {
  TrainConfig c;
  c.dim = 8;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.hidden_dim = 12;
  c.vocab_size = 11;
  return c;
}

}  // namespace ss::train::gradcheck
