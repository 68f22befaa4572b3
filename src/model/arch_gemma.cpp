// Gemma 2 and Gemma 3 text (transformers' Gemma2ForCausalLM, modeling_gemma2.py, and
// Gemma3ForCausalLM / model_type gemma3_text, modeling_gemma3.py; Gemma Team 2024, "Gemma 2",
// section 2): the Llama layout with
//  - token embeddings multiplied by sqrt(hidden_size) (config.embed_scale);
//  - RMSNorm that multiplies by (1 + w) (config.norm_weight_offset = 1), computed in f32;
//  - "sandwich" norms: input_layernorm before attention and post_attention_layernorm on its output,
//    pre_feedforward_layernorm before the MLP and post_feedforward_layernorm on its output:
//      h   = x + norm_post_attn(Attention(norm_in(x)))
//      out = h + norm_post_ffw(MLP(norm_pre_ffw(h)))
//  - a GeGLU MLP (gelu_pytorch_tanh), scores scaled by 1 / sqrt(query_pre_attn_scalar);
//  - sliding-window and global layers (layer_types; Gemma 2 alternates from a sliding layer 0,
//    Gemma 3 has 5 sliding layers per global one);
//  - Gemma 2: attention logits soft-capped (attn_logit_softcapping, 50) and final logits too (30);
//  - Gemma 3: per-head q/k RMSNorm (1 + w) before RoPE, and sliding layers with their own RoPE base
//    (rope_local_base_freq) without the global layers' rope_scaling.
//
// Tensor names: HF as above. llama.cpp (GGUF gemma2 / gemma3): attn_norm, post_attention_norm,
// ffn_norm (the pre-feed-forward norm), post_ffw_norm, attn_q_norm / attn_k_norm, output_norm; its
// converter stores every norm weight as 1 + w (convert_hf_to_gguf.py, Gemma2Model), so the GGUF
// specs carry offset 1 and the model keeps w either way.
#include "model/arch.h"
#include "model/blocks.h"

namespace ss {

TensorMap GemmaTensors(const ModelConfig& c, TensorNaming naming, ModelWeights& w) {
  const bool hf = naming == TensorNaming::kHf;
  TensorMap map = LlamaLayoutTensors(c, naming, w, /*input_norms=*/false);
  map.file_rope = RopeKind::kHalf;  // llama.cpp runs Gemma with NEOX (rotate-half) RoPE too
  std::erase_if(map.specs, [](const TensorSpec& s) { return s.name == "rope_freqs.weight"; });
  // Every RMSNorm weight: GGUF stores 1 + w.
  auto norm = [&](std::string name, Tensor* target, int64_t size) {
    TensorSpec spec = Spec(std::move(name), {target}, {size});
    if (!hf) spec.offset = 1.0f;
    return spec;
  };
  const int64_t D = c.dim, Dh = c.head_dim;
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& lw = w.layers[l];
    auto name = [&](const char* hf_name, const char* gguf) { return LayerTensorName(naming, l, hf_name, gguf); };
    map.specs.push_back(norm(name("input_layernorm.weight", "attn_norm.weight"), &lw.attn_norm, D));
    map.specs.push_back(norm(name("post_attention_layernorm.weight", "post_attention_norm.weight"), &lw.attn_post_norm, D));
    map.specs.push_back(norm(name("pre_feedforward_layernorm.weight", "ffn_norm.weight"), &lw.ffn_norm, D));
    map.specs.push_back(norm(name("post_feedforward_layernorm.weight", "post_ffw_norm.weight"), &lw.ffn_post_norm, D));
    if (c.qk_norm == QkNormKind::kPerHead) {
      TensorSpec qn = norm(name("self_attn.q_norm.weight", "attn_q_norm.weight"), &lw.q_norm, Dh);
      TensorSpec kn = norm(name("self_attn.k_norm.weight", "attn_k_norm.weight"), &lw.k_norm, Dh);
      qn.rope_heads = kn.rope_heads = 1;
      map.specs.push_back(qn);
      map.specs.push_back(kn);
    }
  }
  for (TensorSpec& s : map.specs)
    if (s.name == "output_norm.weight") s.offset = 1.0f;
  return map;
}

}  // namespace ss
