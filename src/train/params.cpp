#include "train/params.h"

#include <fmt/format.h>

#include "common/error.h"

namespace ss::train {

ParamLayout ParamLayout::Build(const TrainConfig& c) {
  ParamLayout p;
  const int64_t D = c.dim, V = c.vocab_size, H = c.n_heads, Hkv = c.n_kv_heads, Dh = c.dim / c.n_heads;
  const int64_t F = c.EffectiveHiddenDim(), E = c.n_experts;
  auto add = [&](std::string name, std::vector<int64_t> shape, bool decay) {
    ParamTensor t;
    t.name = std::move(name);
    t.shape = std::move(shape);
    t.numel = 1;
    for (int64_t s : t.shape) t.numel *= s;
    t.offset = p.total;
    t.decay = decay;
    p.total += t.numel;
    p.tensors.push_back(t);
    return t.offset;
  };
  // No decay on embeddings and norm gains (a common choice, e.g. nanoGPT/Chinchilla practice:
  // decaying gains pulls RMSNorm towards zero and embeddings are updated sparsely).
  p.embed = add("model.embed_tokens.weight", {V, D}, false);
  for (int l = 0; l < c.n_layers; ++l) {
    LayerOffsets o;
    const std::string pre = fmt::format("model.layers.{}.", l);
    o.attn_norm = add(pre + "input_layernorm.weight", {D}, false);
    o.wq = add(pre + "self_attn.q_proj.weight", {H * Dh, D}, true);
    p.tensors.back().rope_rows = true;
    p.tensors.back().rope_heads = static_cast<int>(H);
    o.wk = add(pre + "self_attn.k_proj.weight", {Hkv * Dh, D}, true);
    p.tensors.back().rope_rows = true;
    p.tensors.back().rope_heads = static_cast<int>(Hkv);
    o.wv = add(pre + "self_attn.v_proj.weight", {Hkv * Dh, D}, true);
    o.wo = add(pre + "self_attn.o_proj.weight", {D, H * Dh}, true);
    if (c.attention == "sink-logit" || c.attention == "softmax1") {
      o.sinks = add(pre + "self_attn.sinks", {H}, false);
      // softmax1 (softmax-off-by-one, Miller 2023): the same slot with its logit held at 0.
      p.tensors.back().frozen = c.attention == "softmax1";
    }
    // Gated attention: z *= sigmoid(xn W_gate^T) before o_proj (a sinkscope extension of the
    // Llama layout, self_attn.output_gate.weight; Qwen3-Next keeps these rows inside q_proj).
    if (c.attention == "gated") o.gate = add(pre + "self_attn.output_gate.weight", {H * Dh, D}, true);
    // kv-bias: a key and a value slot per kv head (a sinkscope extension, self_attn.bias_key /
    // bias_value), not decayed (like the sink logits, they are per-head constants).
    if (c.attention == "kv-bias") {
      o.bias_key = add(pre + "self_attn.bias_key", {Hkv * Dh}, false);
      p.tensors.back().rope_rows = true;  // dotted with the query: its dims follow q's layout
      p.tensors.back().rope_heads = static_cast<int>(Hkv);
      o.bias_value = add(pre + "self_attn.bias_value", {Hkv * Dh}, false);
    }
    if (c.qk_norm) {
      o.q_norm = add(pre + "self_attn.q_norm.weight", {Dh}, false);
      o.k_norm = add(pre + "self_attn.k_norm.weight", {Dh}, false);
    }
    o.ffn_norm = add(pre + "post_attention_layernorm.weight", {D}, false);
    if (E == 0) {
      o.w1 = add(pre + "mlp.gate_proj.weight", {F, D}, true);
      o.w3 = add(pre + "mlp.up_proj.weight", {F, D}, true);
      o.w2 = add(pre + "mlp.down_proj.weight", {D, F}, true);
    } else {
      o.router = add(pre + "mlp.gate.weight", {E, D}, true);
      // Experts are contiguous per projection so the trainer sees (E, F, D) arrays.
      for (int e = 0; e < E; ++e) {
        int64_t off = add(fmt::format("{}mlp.experts.{}.gate_proj.weight", pre, e), {F, D}, true);
        if (e == 0) o.ew1 = off;
      }
      for (int e = 0; e < E; ++e) {
        int64_t off = add(fmt::format("{}mlp.experts.{}.up_proj.weight", pre, e), {F, D}, true);
        if (e == 0) o.ew3 = off;
      }
      for (int e = 0; e < E; ++e) {
        int64_t off = add(fmt::format("{}mlp.experts.{}.down_proj.weight", pre, e), {D, F}, true);
        if (e == 0) o.ew2 = off;
      }
    }
    p.layers.push_back(o);
  }
  p.final_norm = add("model.norm.weight", {D}, false);
  p.lm_head = c.tied_embeddings ? p.embed : add("lm_head.weight", {V, D}, true);
  return p;
}

const ParamTensor* ParamLayout::Find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace ss::train
