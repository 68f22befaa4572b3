// Qwen3 (Qwen3ForCausalLM, modeling_qwen3.py): the Llama layout and forward loop plus an RMSNorm on
// each head's query and key (one weight of Dh values shared by all heads, q_norm / k_norm) after
// the projection and before RoPE; SelfAttention applies it from config.qk_norm = kPerHead.
// llama.cpp names them attn_q_norm / attn_k_norm and uses rotate-half RoPE (no permutation).
#include "model/arch.h"

namespace ss {

namespace {

TensorMap Qwen3Tensors(const ModelConfig& c, TensorNaming naming, ModelWeights& w) {
  TensorMap map = LlamaLayoutTensors(c, naming, w, /*input_norms=*/true);
  map.file_rope = RopeKind::kHalf;
  const int64_t Dh = c.head_dim;
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& lw = w.layers[l];
    TensorSpec q = Spec(LayerTensorName(naming, l, "self_attn.q_norm.weight", "attn_q_norm.weight"),
                        {&lw.q_norm}, {Dh});
    TensorSpec k = Spec(LayerTensorName(naming, l, "self_attn.k_norm.weight", "attn_k_norm.weight"),
                        {&lw.k_norm}, {Dh});
    q.rope_heads = k.rope_heads = 1;  // the gains follow their dimensions if RoPE order changes
    map.specs.push_back(q);
    map.specs.push_back(k);
  }
  return map;
}

void ReadQwen3(const ConfigReader& r, const FamilyDefaults& d, ModelConfig* c) {
  ReadLlamaCore(r, d, /*head_dim_default=*/128, c);
  ReadAttentionBias(r, false, c);
  c->qk_norm = QkNormKind::kPerHead;
  ReadQwenSlidingWindow(r, c);
}

void WriteQwen3(const ModelConfig& c, ConfigWriter& w) {
  WriteLlamaCore(c, w);
  w.Bool({"attention_bias", nullptr}, c.qkv_bias);
  WriteQwenSlidingWindow(c, w);
}

}  // namespace

std::span<const ArchEntry> Families_qwen3() {
  static const ArchEntry families[] = {
      {"qwen3",
       "Qwen3ForCausalLM",
       "qwen3",
       "Qwen3: the Llama layout with per-head q/k RMSNorm",
       {false, 1e-6f, 10000.0f, 32768, -1, -1},
       &ReadQwen3,
       &WriteQwen3,
       &Qwen3Tensors,
       &ForwardSequential},
  };
  return families;
}

}  // namespace ss
