// attention=sink-logit: a learned logit s_h per head and layer joins every row's softmax as a
// column without a value (gpt-oss's sinks, modeling_gpt_oss.py: softmax over [q . k / sqrt(Dh),
// s_h], the last column dropped), so a row's weights over the keys sum to 1 - p_sink:
//   P_ij = exp(S_ij) / (exp(s_h) + sum_j' exp(S_ij')).
// attention=softmax1 is the same slot with its logit held at 0 (softmax-off-by-one, Miller 2023):
// the parameter exists, is frozen (zero gradient, no decay) and is saved like sink-logit's.
// The rows are SoftmaxRule's with a slot (kernels/attn_rule.cpp); the per-head logit reaches them
// as AttnOptions::sink_logits in the engine and broadcast per query in the trainer
// (BroadcastHeadSlot / HeadSlotBackward, model/attention.h). Starts at 0, not decayed.
//
// Stored as model.layers.N.self_attn.sinks (H), as gpt-oss stores it, beside the Llama / Qwen3 /
// Qwen3-MoE tensors, with "sinkscope_attn_sinks": true in config.json (sinkscope's extension of
// those layouts; GGUF: the blk.N.attn_sinks.weight tensors mark it).
#include "model/attention.h"

namespace ss {

std::span<const AttnVariant* const> AttnVariants_sink_logit() {
  static const std::vector<AttnParam> params = {{"self_attn.sinks", "attn_sinks.weight",
                                                 AttnParam::Shape::kHeads,
                                                 &LayerWeights::attn_sinks}};
  static const AttnVariant sink_logit{.name = "sink-logit",
                                      .feature = "learned sink logit per head",
                                      .flag = &ModelConfig::attn_sinks,
                                      .flag_name = "attn_sinks",
                                      .key = {"sinkscope_attn_sinks", nullptr},
                                      .gguf_tensor = "blk.0.attn_sinks.weight",
                                      .rule = SoftmaxRule,
                                      .slot = AttnSlot::kPerHead,
                                      .params = params};
  static const AttnVariant softmax1 = [] {
    AttnVariant v = sink_logit;
    v.name = "softmax1";
    v.frozen = true;
    return v;
  }();
  static const AttnVariant* const all[] = {&sink_logit, &softmax1};
  return all;
}

}  // namespace ss
