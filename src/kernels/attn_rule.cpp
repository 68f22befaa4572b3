#include "kernels/attn_rule.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/ops.h"
#include "kernels/vecmath.h"

namespace ss {

namespace {

// Softmax over the row's scores and, when there is one, a slot column: a logit without a key (a
// learned sink logit per head, gpt-oss; a kv-bias slot's logit per query, Sun et al. 2024) that
// joins the maximum and the normaliser and whose column is then dropped, so the keys' weights sum
// to 1 - p_slot. The tiled form is the online softmax (Milakov & Gimelshein 2018): each tile's
// exponentials are taken at the running maximum m and the totals rescaled by exp(m_old - m) when
// m grows; the slot joins after the last tile.
struct SoftmaxWeights {
  static constexpr const char* kName = "softmax";
  static constexpr bool kTakesSlot = true;
  static constexpr bool kSavesRow = false;

  template <typename Real>
  static AttnRowInfo<Real> Row(Real* x, int n, Real slot, Real*) {
    AttnRowInfo<Real> info;
    if constexpr (std::is_same_v<Real, float>) {
      info.slot_p = SoftmaxWithSink(x, n, slot);  // the vectorised kernel
    } else if (slot == -INFINITY) {
      const Real mx = *std::max_element(x, x + n);
      Real sum = 0;
      for (int i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - mx);
        sum += x[i];
      }
      const Real inv = Real(1) / sum;
      for (int i = 0; i < n; ++i) x[i] *= inv;
    } else {
      Real mx = slot;
      for (int j = 0; j < n; ++j) mx = std::max(mx, x[j]);
      const Real e_slot = std::exp(slot - mx);
      Real sum = e_slot;
      for (int j = 0; j < n; ++j) sum += (x[j] = std::exp(x[j] - mx));
      for (int j = 0; j < n; ++j) x[j] /= sum;
      info.slot_p = e_slot / sum;
    }
    info.row_sum = Real(1) - info.slot_p;
    return info;
  }

  // dS_j = P_j (dP_j - r), r = sum_j P_j dP_j (+ p_s dp_s with a slot, whose logit gets
  // p_s (dp_s - r)).
  template <typename Real>
  static Real RowBackward(const Real* p, const Real*, Real* d, int n,
                          const AttnSlotGrad<Real>* slot) {
    Real sum = 0;
    for (int j = 0; j < n; ++j) sum += p[j] * d[j];
    Real d_slot = 0;
    if (slot) {
      sum += slot->p * slot->d_p;
      d_slot = slot->p * (slot->d_p - sum);
    }
    for (int j = 0; j < n; ++j) d[j] = p[j] * (d[j] - sum);
    return d_slot;
  }

  static void Start(AttnRowState& s) { s = {-INFINITY, 0.0f, 0.0f, 0.0f}; }
  static float Tile(float* vis, int count, float tile_max, AttnRowState& s) {
    const float m_new = std::max(s.m, tile_max);
    const float corr = std::exp(s.m - m_new);  // 0 on the first visible tile
    float tile_sq = 0.0f;
    const float tile_sum = ExpShiftSum(vis, count, m_new, &tile_sq);
    s.l = s.l * corr + tile_sum;
    s.sq = s.sq * corr * corr + tile_sq;
    s.m = m_new;
    return corr;
  }
  static AttnRowEnd End(AttnRowState& s, float slot) {
    AttnRowEnd e;
    float slot_e = 0.0f;
    if (slot != -INFINITY) {  // one more column: rescaled if it is the new maximum
      const float m_new = std::max(s.m, slot);
      const float corr = std::exp(s.m - m_new);
      slot_e = std::exp(slot - m_new);
      s.l = s.l * corr + slot_e;
      s.sq *= corr * corr;
      s.m = m_new;
      e.acc_scale = corr;
    }
    const float inv = 1.0f / s.l;
    e.out_scale = e.stat_scale = inv;
    e.slot_p = slot_e * inv;
    e.row_sum = 1.0f - e.slot_p;
    return e;
  }
  static float Weight(float score, const AttnRowState& s) { return std::exp(score - s.m); }
};

}  // namespace

const AttnRule& SoftmaxRule() {
  static const AttnRuleOf<SoftmaxWeights> rule;
  return rule;
}

}  // namespace ss
