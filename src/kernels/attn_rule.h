// How an attention row turns its scores into weights: the one place each rule's arithmetic is
// written, used by every attention kernel (tiled, materialised, the streaming cache) and by the
// trainer (train/grad_ops.h), forward and backward, in float and (for the finite-difference
// checks) double. Softmax, with an optional slot column (learned sink logits, a kv-bias), is the
// kernels' default and lives in kernels/attn_rule.cpp; every other rule lives with its attention
// variant in model/attn_<variant>.cpp (model/attention.h).
#pragma once

#include <cstdint>

namespace ss {

// A query row's running totals while the tiled kernel walks its key tiles: the weights so far are
// held at scale m (softmax: the largest score so far), l is their normaliser at that scale, sq the
// sum of their squares, aux a rule's own total (softpick: the sum of the positive weights).
struct AttnRowState {
  float m = 0, l = 0, sq = 0, aux = 0;
};

// Closing a tiled row: multiply the accumulated P V by acc_scale (a slot column that raised the
// scale), then by out_scale (the normalisation); a statistic reads a score's weight (Weight) times
// stat_scale. slot_p is the slot column's probability (0 without one), row_sum the weights' sum
// over the keys (1 - slot_p for softmax).
struct AttnRowEnd {
  float acc_scale = 1, out_scale = 1, stat_scale = 1, slot_p = 0, row_sum = 1;
};

// What a whole row's weights came to: the slot's probability, the weights' sum over the keys and
// what statistics multiply a weight by (1, or 1 / row_sum for rules whose statistics describe
// each row's weights divided by their sum).
template <typename Real>
struct AttnRowInfo {
  Real slot_p = 0, row_sum = 1, stat_scale = 1;
};

// A slot column in the backward pass: its probability and dL/d(its probability) (v* . dz for a
// kv-bias slot, whose value joins the output; 0 for sink logits).
template <typename Real>
struct AttnSlotGrad {
  Real p = 0, d_p = 0;
};

class AttnRule {
 public:
  virtual ~AttnRule() = default;
  virtual const char* Name() const = 0;
  // Whether a slot column (a logit per head or per query, without a key) can join the rows.
  virtual bool TakesSlot() const { return false; }
  // Whether Row writes a row of its own (`saved`) that RowBackward needs beside the weights.
  virtual bool SavesRow() const { return false; }

  // ---- whole rows: the materialised kernel, the streaming cache, the trainer.
  // x[0, n): the visible scores in, their weights out; slot: the slot column's logit (-inf: none,
  // the only value a rule without TakesSlot gets); saved: null, or (n) for SavesRow.
  virtual AttnRowInfo<float> Row(float* x, int n, float slot, float* saved) const = 0;
  virtual AttnRowInfo<double> Row(double* x, int n, double slot, double* saved) const = 0;
  // Backward of Row: d[0, n) holds dL/d(weights) on entry and dL/d(scores) on exit; p the
  // weights and saved as Row left them; slot null without one. Returns dL/d(slot logit).
  virtual float RowBackward(const float* p, const float* saved, float* d, int n,
                            const AttnSlotGrad<float>* slot) const = 0;
  virtual double RowBackward(const double* p, const double* saved, double* d, int n,
                             const AttnSlotGrad<double>* slot) const = 0;

  // ---- online over key tiles: the tiled kernel.
  virtual void Start(AttnRowState& s) const = 0;
  // vis[0, count): one tile's visible scores in, their weights at the row's (new) scale out;
  // tile_max is the largest of the scores. Returns the factor the row's accumulated P V must be
  // multiplied by because the scale changed (1: unchanged).
  virtual float Tile(float* vis, int count, float tile_max, AttnRowState& s) const = 0;
  // After the last tile, with the slot's logit (-inf: none).
  virtual AttnRowEnd End(AttnRowState& s, float slot) const = 0;
  // A score's weight at the row's final scale (statistics multiply it by stat_scale); a score of
  // -inf (a key the row does not see) weighs 0.
  virtual float Weight(float score, const AttnRowState& s) const = 0;
};

// Softmax, with an optional slot column: a logit that joins the maximum and the normaliser and
// whose column is then dropped, so the weights sum to 1 - p_slot.
const AttnRule& SoftmaxRule();

// Implements AttnRule's float and double entry points from one class of templates over the scalar
// (Impl::Row<Real>, Impl::RowBackward<Real>) plus the tiled entry points, so that a rule is
// written once for both precisions.
template <typename Impl>
class AttnRuleOf final : public AttnRule {
 public:
  const char* Name() const override { return Impl::kName; }
  bool TakesSlot() const override { return Impl::kTakesSlot; }
  bool SavesRow() const override { return Impl::kSavesRow; }
  AttnRowInfo<float> Row(float* x, int n, float slot, float* saved) const override {
    return Impl::Row(x, n, slot, saved);
  }
  AttnRowInfo<double> Row(double* x, int n, double slot, double* saved) const override {
    return Impl::Row(x, n, slot, saved);
  }
  float RowBackward(const float* p, const float* saved, float* d, int n,
                    const AttnSlotGrad<float>* slot) const override {
    return Impl::RowBackward(p, saved, d, n, slot);
  }
  double RowBackward(const double* p, const double* saved, double* d, int n,
                     const AttnSlotGrad<double>* slot) const override {
    return Impl::RowBackward(p, saved, d, n, slot);
  }
  void Start(AttnRowState& s) const override { Impl::Start(s); }
  float Tile(float* vis, int count, float tile_max, AttnRowState& s) const override {
    return Impl::Tile(vis, count, tile_max, s);
  }
  AttnRowEnd End(AttnRowState& s, float slot) const override { return Impl::End(s, slot); }
  float Weight(float score, const AttnRowState& s) const override { return Impl::Weight(score, s); }
};

}  // namespace ss
