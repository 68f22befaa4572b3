// attention=sigmoid: sigmoid attention without normalisation (Gu et al. 2024, arXiv 2410.10781,
// section 7.4): P_ij = sigmoid(S_ij) for the keys j a query sees, no softmax, so a row's weights
// do not sum to 1 and there is no slot. Backward: dS = dP * P * (1 - P).
// The pattern hook shows the weights themselves, while the fused statistics (alpha, the top key's
// share, the cone's sum of squares) describe each row's weights divided by their sum (Gu et al.'s
// "proxy attention scores"); row_sum is the weights' total (how much the query attends at all).
//
// Marked by "sinkscope_attn_sigmoid": true in config.json and the GGUF key
// sinkscope.attention.sigmoid (no tensor shows it); it adds no tensor.
#include <cmath>
#include <type_traits>

#include "kernels/vecmath.h"
#include "model/attention.h"

namespace ss {

namespace {

struct SigmoidWeights {
  static constexpr const char* kName = "sigmoid";
  static constexpr bool kTakesSlot = false;
  static constexpr bool kSavesRow = false;

  template <typename Real>
  static AttnRowInfo<Real> Row(Real* x, int n, Real, Real*) {
    if constexpr (std::is_same_v<Real, float>) {
      Sigmoid(x, x, n);  // the vectorised kernel
    } else {
      for (int j = 0; j < n; ++j) x[j] = Real(1) / (Real(1) + std::exp(-x[j]));
    }
    Real sum = 0;
    for (int j = 0; j < n; ++j) sum += x[j];
    return {Real(0), sum, sum > 0 ? Real(1) / sum : Real(0)};
  }
  template <typename Real>
  static Real RowBackward(const Real* p, const Real*, Real* d, int n, const AttnSlotGrad<Real>*) {
    for (int j = 0; j < n; ++j) d[j] *= p[j] * (Real(1) - p[j]);
    return 0;
  }

  // Independent weights: no running maximum, l is only for the statistics.
  static void Start(AttnRowState& s) { s = {}; }
  static float Tile(float* vis, int count, float, AttnRowState& s) {
    Sigmoid(vis, vis, count);
    for (int j = 0; j < count; ++j) {
      s.l += vis[j];
      s.sq += vis[j] * vis[j];
    }
    return 1.0f;
  }
  static AttnRowEnd End(AttnRowState& s, float) {
    AttnRowEnd e;  // the output is the weighted sum itself
    e.stat_scale = s.l > 0 ? 1.0f / s.l : 0.0f;
    e.row_sum = s.l;
    return e;
  }
  static float Weight(float score, const AttnRowState&) { return 1.0f / (1.0f + std::exp(-score)); }
};

const AttnRule& SigmoidRule() {
  static const AttnRuleOf<SigmoidWeights> rule;
  return rule;
}

}  // namespace

std::span<const AttnVariant* const> AttnVariants_sigmoid() {
  static const AttnVariant sigmoid{.name = "sigmoid",
                                   .feature = "sigmoid attention (no normalisation)",
                                   .flag = &ModelConfig::attn_sigmoid,
                                   .flag_name = "attn_sigmoid",
                                   .key = {"sinkscope_attn_sigmoid", "sinkscope.attention.sigmoid"},
                                   .gguf_tensor = nullptr,
                                   .rule = SigmoidRule};
  static const AttnVariant* const all[] = {&sigmoid};
  return all;
}

}  // namespace ss
