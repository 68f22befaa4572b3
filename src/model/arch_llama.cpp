// Llama family (Llama 2/3, TinyLlama, Mistral, llama2.c models): pre-norm RMSNorm, RoPE,
// grouped-query attention, SwiGLU MLP (Touvron et al. 2023, "Llama 2", section 2.2). Mistral is
// the same with sliding-window attention (Jiang et al. 2023, section 2), which SelfAttention
// applies from config.sliding_window.
//
// Tensor names: Hugging Face LlamaForCausalLM state dict (modeling_llama.py) and llama.cpp's GGUF
// names (gguf-py constants.py MODEL_TENSORS for LLM_ARCH_LLAMA). GGUF stores q/k rows in Meta's
// original interleaved RoPE order, Hugging Face in rotate-half order
// (convert_llama_weights_to_hf.py permutes them); the map records that so writers permute, while
// readers keep the file's order and set config.rope to match (no permutation at load).
#include "model/arch.h"
#include "model/attention.h"
#include "model/blocks.h"

namespace ss {

TensorMap LlamaLayoutTensors(const ModelConfig& c, TensorNaming naming, ModelWeights& w,
                             bool input_norms) {
  const bool hf = naming == TensorNaming::kHf;
  const int64_t D = c.dim, F = c.hidden_dim, V = c.vocab_size;
  const int64_t q_dim = c.q_dim(), kv_dim = c.kv_dim();
  TensorMap map;
  map.file_rope = hf ? RopeKind::kHalf : RopeKind::kInterleaved;
  auto& specs = map.specs;
  specs.push_back(
      Spec(hf ? "model.embed_tokens.weight" : "token_embd.weight", {&w.token_embedding}, {V, D}));
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& lw = w.layers[l];
    auto name = [&](const char* hf_name, const char* gguf_name) {
      return LayerTensorName(naming, l, hf_name, gguf_name);
    };
    if (input_norms)
      specs.push_back(
          Spec(name("input_layernorm.weight", "attn_norm.weight"), {&lw.attn_norm}, {D}));
    TensorSpec q = Spec(name("self_attn.q_proj.weight", "attn_q.weight"), {&lw.wq}, {q_dim, D});
    q.rope_heads = c.n_heads;
    TensorSpec k = Spec(name("self_attn.k_proj.weight", "attn_k.weight"), {&lw.wk}, {kv_dim, D});
    k.rope_heads = c.n_kv_heads;
    specs.push_back(q);
    specs.push_back(k);
    specs.push_back(Spec(name("self_attn.v_proj.weight", "attn_v.weight"), {&lw.wv}, {kv_dim, D}));
    specs.push_back(
        Spec(name("self_attn.o_proj.weight", "attn_output.weight"), {&lw.wo}, {D, q_dim}));
    if (c.qkv_bias) {
      TensorSpec bq = Spec(name("self_attn.q_proj.bias", "attn_q.bias"), {&lw.bq}, {q_dim});
      bq.rope_heads = c.n_heads;
      TensorSpec bk = Spec(name("self_attn.k_proj.bias", "attn_k.bias"), {&lw.bk}, {kv_dim});
      bk.rope_heads = c.n_kv_heads;
      specs.push_back(bq);
      specs.push_back(bk);
      specs.push_back(Spec(name("self_attn.v_proj.bias", "attn_v.bias"), {&lw.bv}, {kv_dim}));
    }
    if (c.attn_out_bias)
      specs.push_back(Spec(name("self_attn.o_proj.bias", "attn_output.bias"), {&lw.bo}, {D}));
    // The attention variant's tensors (model/attention.h: learned sink logits, an output gate, a
    // kv-bias slot), as sinkscope's trainer writes them.
    AppendAttentionTensors(c, naming, l, lw, specs);
    if (input_norms)
      specs.push_back(
          Spec(name("post_attention_layernorm.weight", "ffn_norm.weight"), {&lw.ffn_norm}, {D}));
    specs.push_back(Spec(name("mlp.gate_proj.weight", "ffn_gate.weight"), {&lw.w1}, {F, D}));
    specs.push_back(Spec(name("mlp.down_proj.weight", "ffn_down.weight"), {&lw.w2}, {D, F}));
    specs.push_back(Spec(name("mlp.up_proj.weight", "ffn_up.weight"), {&lw.w3}, {F, D}));
    if (c.mlp_bias) {
      specs.push_back(Spec(name("mlp.gate_proj.bias", "ffn_gate.bias"), {&lw.b1}, {F}));
      specs.push_back(Spec(name("mlp.down_proj.bias", "ffn_down.bias"), {&lw.b2}, {D}));
      specs.push_back(Spec(name("mlp.up_proj.bias", "ffn_up.bias"), {&lw.b3}, {F}));
    }
  }
  specs.push_back(Spec(hf ? "model.norm.weight" : "output_norm.weight", {&w.final_norm}, {D}));
  if (!c.tied_embeddings)
    specs.push_back(Spec(hf ? "lm_head.weight" : "output.weight", {&w.lm_head}, {V, D}));
  if (!hf) {
    // llama.cpp's form of Llama 3 RoPE scaling: per-frequency divisors.
    TensorSpec freqs = Spec("rope_freqs.weight", {&w.rope_freq_factors}, {c.rot_dim() / 2});
    freqs.optional = true;
    specs.push_back(freqs);
  }
  return map;
}

namespace {

TensorMap LlamaTensors(const ModelConfig& c, TensorNaming naming, ModelWeights& w) {
  return LlamaLayoutTensors(c, naming, w, /*input_norms=*/true);
}

// GGUF writes Llama, Mistral and Mixtral all as "llama": a file with experts is Mixtral, one with
// a sliding window Mistral (llama.cpp applies the window when the key is there).
void ReadLlama(const ConfigReader& r, const FamilyDefaults& d, ModelConfig* c) {
  if (r.gguf() && r.Int({nullptr, "expert_count"}, 0) > 0) {
    const ArchEntry& mixtral = FindArchitecture("mixtral");
    c->arch = mixtral.name;
    mixtral.read(r, mixtral.defaults, c);
    return;
  }
  ReadLlamaCore(r, d, 0, c);
  ReadAttentionBias(r, false, c);
  if (!r.gguf()) c->mlp_bias = r.Bool({"mlp_bias", nullptr}, false);
  if (r.gguf()) {
    c->sliding_window = ReadOptionalWindow(r);
    if (c->sliding_window > 0) c->arch = "mistral";
  }
}

void WriteLlama(const ModelConfig& c, ConfigWriter& w) {
  WriteLlamaCore(c, w);
  w.Bool({"attention_bias", nullptr}, c.qkv_bias);
  w.Bool({"mlp_bias", nullptr}, c.mlp_bias);
}

// Mistral: the Llama core and a sliding window (null: full attention); no bias keys.
void ReadMistral(const ConfigReader& r, const FamilyDefaults& d, ModelConfig* c) {
  ReadLlamaCore(r, d, 0, c);
  c->sliding_window = ReadOptionalWindow(r);
}

void WriteMistral(const ModelConfig& c, ConfigWriter& w) {
  WriteLlamaCore(c, w);
  WriteOptionalWindow(c, w);
}

}  // namespace

std::span<const ArchEntry> Families_llama() {
  static const ArchEntry families[] = {
      {"llama",
       "LlamaForCausalLM",
       "llama",
       "Llama 2/3, TinyLlama, llama2.c: RMSNorm, RoPE, GQA, SwiGLU",
       {false, 1e-6f, 10000.0f, 2048, 1, 2},
       &ReadLlama,
       &WriteLlama,
       &LlamaTensors,
       &ForwardSequential},
      {"mistral",
       "MistralForCausalLM",
       "llama",
       "Mistral: the Llama layout with sliding-window attention",
       {false, 1e-6f, 10000.0f, 4096 * 32, 1, 2},
       &ReadMistral,
       &WriteMistral,
       &LlamaTensors,
       &ForwardSequential},
  };
  return families;
}

}  // namespace ss
