// OLMo 2 (Olmo2ForCausalLM, modeling_olmo2.py; OLMo et al. 2024, "2 OLMo 2 Furious", section 3.1):
// no norm on the sublayer inputs; instead the attention and MLP outputs are RMS-normalised before
// they are added to the residual stream:
//   h   = x + RMSNorm_post_attention(Attention(x))
//   out = h + RMSNorm_post_feedforward(MLP(h))
// and q, k are RMS-normalised over the whole projection (H * Dh and Hkv * Dh values) before RoPE.
// Note the trap: Llama's "post_attention_layernorm" is the pre-MLP norm; OLMo 2's is applied to
// the attention output. llama.cpp names them post_attention_norm / post_ffw_norm and uses
// rotate-half RoPE for OLMo 2.
#include "model/arch.h"
#include "model/blocks.h"

namespace ss {

namespace {

TensorMap Olmo2Tensors(const ModelConfig& c, TensorNaming naming, ModelWeights& w) {
  TensorMap map = LlamaLayoutTensors(c, naming, w, /*input_norms=*/false);
  map.file_rope = RopeKind::kHalf;
  const int64_t D = c.dim;
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& lw = w.layers[l];
    auto name = [&](const char* hf, const char* gguf) {
      return LayerTensorName(naming, l, hf, gguf);
    };
    TensorSpec q =
        Spec(name("self_attn.q_norm.weight", "attn_q_norm.weight"), {&lw.q_norm}, {c.q_dim()});
    TensorSpec k =
        Spec(name("self_attn.k_norm.weight", "attn_k_norm.weight"), {&lw.k_norm}, {c.kv_dim()});
    q.rope_heads = c.n_heads;  // the gains follow their dimensions if RoPE order changes
    k.rope_heads = c.n_kv_heads;
    map.specs.push_back(q);
    map.specs.push_back(k);
    map.specs.push_back(Spec(name("post_attention_layernorm.weight", "post_attention_norm.weight"),
                             {&lw.attn_post_norm}, {D}));
    map.specs.push_back(Spec(name("post_feedforward_layernorm.weight", "post_ffw_norm.weight"),
                             {&lw.ffn_post_norm}, {D}));
  }
  return map;
}

void ReadOlmo2(const ConfigReader& r, const FamilyDefaults& d, ModelConfig* c) {
  ReadLlamaCore(r, d, 0, c);
  ReadAttentionBias(r, false, c);
  c->qk_norm = QkNormKind::kFull;
  c->post_norms = true;
}

void WriteOlmo2(const ModelConfig& c, ConfigWriter& w) {
  WriteLlamaCore(c, w);
  w.Bool({"attention_bias", nullptr}, c.qkv_bias);
}

}  // namespace

std::span<const ArchEntry> Families_olmo2() {
  static const ArchEntry families[] = {
      {"olmo2",
       "Olmo2ForCausalLM",
       "olmo2",
       "OLMo 2: norms after attention and MLP, whole-projection q/k RMSNorm",
       {false, 1e-5f, 10000.0f, 2048, -1, 50279},
       &ReadOlmo2,
       &WriteOlmo2,
       &Olmo2Tensors,
       &ForwardSequential},
  };
  return families;
}

}  // namespace ss
