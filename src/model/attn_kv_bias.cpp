// attention=kv-bias: a learnable key/value bias (Sun et al. 2024, arXiv 2402.17762, section 4.3;
// the slot Gu et al. 2024 call K/V biases): one more softmax column per row whose logit is
// q_i . k*_g / sqrt(Dh) and whose value v*_g joins the output with its probability, one k*, v* per
// kv head g:  z_i = sum_j P_ij v_j + p_slot,i v*_g. The slot is scored with the query before RoPE
// (after q-norm), so it has no position, like a prepended token that RoPE never rotates. Both start
// at 0 (the slot then acts as softmax1), not decayed. The rows are SoftmaxRule's with a slot
// (kernels/attn_rule.cpp); its value and the slot's gradients are the attention ops' (AttnOptions::
// slot_values in the engine, train/grad_ops.h's AttentionBackward in the trainer).
// Backward of the logits: dq_pre += ds_i k* / sqrt(Dh), dk* += ds_i q_pre / sqrt(Dh).
//
// Stored as model.layers.N.self_attn.bias_key and .bias_value (Hkv*Dh each; the key's dims follow
// q_proj's RoPE row order) with "sinkscope_attn_kv_bias": true (sinkscope's extension; GGUF: the
// blk.N.attn_bias_key.weight / attn_bias_value.weight tensors). analyze, explain and the telemetry
// report the slot's mass as alpha_sink.
#include <cmath>

#include "model/attention.h"

namespace ss {

namespace {

// out (B, H, T) [(b * H + h) * T + t] = q_(b,t),h . k*_(h / group) / sqrt(Dh).
template <typename Real>
void SlotLogits(const Real* const* params, const Real* q, Real* out, const AttnShape& s) {
  const int group = s.H / s.Hkv;
  const int64_t qd = int64_t{s.H} * s.Dh;
  const Real scale = Real(1) / std::sqrt(static_cast<Real>(s.Dh));
  for (int64_t n = 0; n < int64_t{s.B} * s.T; ++n)
    for (int h = 0; h < s.H; ++h) {
      const Real* qn = q + n * qd + h * s.Dh;
      const Real* key = params[0] + int64_t{h / group} * s.Dh;
      Real dot = 0;
      for (int d = 0; d < s.Dh; ++d) dot += qn[d] * key[d];
      out[(n / s.T * s.H + h) * s.T + n % s.T] = dot * scale;
    }
}

// Serial over rows and heads: dk* sums over every query in a fixed order.
template <typename Real>
void SlotLogitsBackward(const Real* const* params, const Real* q, const Real* d_slot, Real* dq,
                        Real* const* dparams, const AttnShape& s) {
  const int group = s.H / s.Hkv;
  const int64_t qd = int64_t{s.H} * s.Dh;
  const Real scale = Real(1) / std::sqrt(static_cast<Real>(s.Dh));
  for (int64_t n = 0; n < int64_t{s.B} * s.T; ++n)
    for (int h = 0; h < s.H; ++h) {
      const Real g = d_slot[(n / s.T * s.H + h) * s.T + n % s.T] * scale;
      const int64_t kv = int64_t{h / group} * s.Dh;
      const Real* qn = q + n * qd + h * s.Dh;
      Real* dqn = dq + n * qd + h * s.Dh;
      for (int d = 0; d < s.Dh; ++d) {
        dqn[d] += g * params[0][kv + d];
        dparams[0][kv + d] += g * qn[d];
      }
    }
}

}  // namespace

std::span<const AttnVariant* const> AttnVariants_kv_bias() {
  static const std::vector<AttnParam> params = {
      {"self_attn.bias_key", "attn_bias_key.weight", AttnParam::Shape::kKvRows,
       &LayerWeights::attn_bias_key, /*rope_rows=*/true},
      {"self_attn.bias_value", "attn_bias_value.weight", AttnParam::Shape::kKvRows,
       &LayerWeights::attn_bias_value}};
  static const AttnVariant kv_bias{
      .name = "kv-bias",
      .feature = "learnable key/value bias slot per kv head",
      .flag = &ModelConfig::attn_kv_bias,
      .flag_name = "attn_kv_bias",
      .key = {"sinkscope_attn_kv_bias", nullptr},
      .gguf_tensor = "blk.0.attn_bias_key.weight",
      .rule = SoftmaxRule,
      .slot = AttnSlot::kPerQuery,
      .slot_value = 1,
      .params = params,
      .f32 = {.slot_logits = SlotLogits<float>, .slot_logits_backward = SlotLogitsBackward<float>},
      .f64 = {.slot_logits = SlotLogits<double>,
              .slot_logits_backward = SlotLogitsBackward<double>}};
  static const AttnVariant* const all[] = {&kv_bias};
  return all;
}

}  // namespace ss
