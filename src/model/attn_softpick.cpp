// attention=softpick: the rectified softmax of Zuhri et al. 2025 ("Softpick: No Attention Sink, No
// Massive Activations with Rectified Softmax", arXiv 2504.20966), in place of the softmax:
//   softpick(x)_i = ReLU(e^{x_i} - 1) / (sum_j |e^{x_j} - 1| + eps)
// over the keys j a query sees (x the scaled scores). A score <= 0 weighs exactly 0 and a row's
// weights sum to less than 1 (to 0 when every score is <= 0: the query attends to nothing), so no
// key has to take the mass a query does not want to give; the paper reports a 0 % sink rate.
// eps = 1e-6 (the paper's "small constant for safety": it only matters for a row whose scores are
// all 0). Computed with m = max(0, max_j x_j) taken out of numerator and denominator, which is the
// same function without overflow:
//   softpick(x)_i = ReLU(e^{x_i - m} - e^{-m}) / (sum_j |e^{x_j - m} - e^{-m}| + eps e^{-m});
// the tiled kernel keeps both sums at the running m and rescales them by e^{m_old - m} as m grows,
// as the online softmax does. Backward, with a_j = e^{x_j} - 1, D the denominator, p = ReLU(a) / D:
//   dL/dx_k = (e^{x_k} / D) (1[a_k > 0] dL/dp_k - sign(a_k) sum_i p_i dL/dp_i),
// from the weights and s_k = sign(a_k) e^{x_k} / D, which the forward saves per key.
// The statistics describe the weights themselves (alpha_0 is the weight on key 0, as the paper
// measures its sink rate); row_sum is their total. No slot. Marked by "sinkscope_attn_softpick":
// true in config.json and the GGUF key sinkscope.attention.softpick; it adds no tensor.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/vecmath.h"
#include "model/attention.h"

namespace ss {

namespace {

struct SoftpickWeights {
  static constexpr const char* kName = "softpick";
  static constexpr bool kTakesSlot = false;
  static constexpr bool kSavesRow = true;
  static constexpr double kEps = 1e-6;

  // e[j] = exp(x[j] - m) in place (the vectorised kernel for float).
  template <typename Real>
  static void ExpShift(Real* x, int n, Real m) {
    if constexpr (std::is_same_v<Real, float>) {
      ExpShiftSum(x, n, m);
    } else {
      for (int j = 0; j < n; ++j) x[j] = std::exp(x[j] - m);
    }
  }

  template <typename Real>
  static AttnRowInfo<Real> Row(Real* x, int n, Real, Real* saved) {
    Real m = 0;
    for (int j = 0; j < n; ++j) m = std::max(m, x[j]);
    const Real c = std::exp(-m);
    ExpShift(x, n, m);
    Real denom = 0;
    for (int j = 0; j < n; ++j) denom += std::abs(x[j] - c);
    const Real inv = Real(1) / (denom + static_cast<Real>(kEps) * c);
    Real sum = 0;
    for (int j = 0; j < n; ++j) {
      const Real a = x[j] - c;
      if (saved) saved[j] = (a > 0 ? x[j] : a < 0 ? -x[j] : Real(0)) * inv;
      x[j] = std::max(a, Real(0)) * inv;
      sum += x[j];
    }
    return {Real(0), sum, Real(1)};
  }
  template <typename Real>
  static Real RowBackward(const Real* p, const Real* saved, Real* d, int n,
                          const AttnSlotGrad<Real>*) {
    Real dot = 0;
    for (int j = 0; j < n; ++j) dot += p[j] * d[j];
    for (int j = 0; j < n; ++j) d[j] = (saved[j] > 0 ? saved[j] * d[j] : Real(0)) - saved[j] * dot;
    return 0;
  }

  // l: sum_j |e^{x_j - m} - e^{-m}|, aux: the same over the positive terms, sq: their squares.
  static void Start(AttnRowState& s) { s = {}; }
  static float Tile(float* vis, int count, float tile_max, AttnRowState& s) {
    const float m = std::max(s.m, tile_max);
    const float corr = std::exp(s.m - m), c = std::exp(-m);
    ExpShiftSum(vis, count, m);
    float l = 0.0f, pos = 0.0f, sq = 0.0f;
    for (int j = 0; j < count; ++j) {
      const float a = vis[j] - c;
      l += std::abs(a);
      vis[j] = std::max(a, 0.0f);
      pos += vis[j];
      sq += vis[j] * vis[j];
    }
    s.l = s.l * corr + l;
    s.aux = s.aux * corr + pos;
    s.sq = s.sq * corr * corr + sq;
    s.m = m;
    return corr;
  }
  static AttnRowEnd End(AttnRowState& s, float) {
    AttnRowEnd e;
    const float inv = 1.0f / (s.l + static_cast<float>(kEps) * std::exp(-s.m));
    e.out_scale = e.stat_scale = inv;
    e.slot_p = 0.0f;
    e.row_sum = s.aux * inv;
    return e;
  }
  static float Weight(float score, const AttnRowState& s) {
    return std::max(std::exp(score - s.m) - std::exp(-s.m), 0.0f);
  }
};

const AttnRule& SoftpickRule() {
  static const AttnRuleOf<SoftpickWeights> rule;
  return rule;
}

}  // namespace

std::span<const AttnVariant* const> AttnVariants_softpick() {
  static const AttnVariant softpick{
      .name = "softpick",
      .feature = "softpick attention (rectified softmax, rows sum to at most 1)",
      .flag = &ModelConfig::attn_softpick,
      .flag_name = "attn_softpick",
      .key = {"sinkscope_attn_softpick", "sinkscope.attention.softpick"},
      .gguf_tensor = nullptr,
      .rule = SoftpickRule};
  static const AttnVariant* const all[] = {&softpick};
  return all;
}

}  // namespace ss
