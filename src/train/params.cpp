#include "train/params.h"

#include <fmt/format.h>

#include "common/error.h"
#include "model/attention.h"

namespace ss::train {

ParamLayout ParamLayout::Build(const TrainConfig& c) {
  ParamLayout p;
  const int64_t D = c.dim, V = c.vocab_size, H = c.n_heads, Hkv = c.n_kv_heads,
                Dh = c.dim / c.n_heads;
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
    // The attention variant's tensors (model/attention.h), with their decay, and frozen when the
    // variant trains them not at all (softmax1).
    const AttnVariant& variant = FindAttnVariant(c.attention, "attention");
    const AttnShape shape{1,
                          0,
                          static_cast<int>(H),
                          static_cast<int>(Hkv),
                          static_cast<int>(Dh),
                          static_cast<int>(D)};
    for (const AttnParam& a : variant.params) {
      o.attn.push_back(add(pre + a.hf, AttnParamShape(a.shape, shape), a.decay));
      p.tensors.back().frozen = variant.frozen;
      p.tensors.back().rope_rows =
          a.rope_rows;  // dotted with the query: its dims follow q's layout
      if (a.rope_rows)
        p.tensors.back().rope_heads =
            static_cast<int>(a.shape == AttnParam::Shape::kHeads ? H : Hkv);
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
