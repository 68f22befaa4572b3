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
//  - Gemma 3: per-head q/k RMSNorm (1 + w) before RoPE, sliding layers with their own RoPE base
//    (rope_local_base_freq, or rope_parameters.sliding_attention) without the global layers'
//    scaling, and no attention soft-cap (an attn_logit_softcapping in its config is noted and not
//    applied, as transformers does not apply it).
//
// Tensor names: HF as above. llama.cpp (GGUF gemma2 / gemma3): attn_norm, post_attention_norm,
// ffn_norm (the pre-feed-forward norm), post_ffw_norm, attn_q_norm / attn_k_norm, output_norm; its
// converter stores every norm weight as 1 + w (convert_hf_to_gguf.py, Gemma2Model), so the GGUF
// specs carry offset 1 and the model keeps w either way.
#include <cmath>
#include <string>
#include <utility>

#include "common/note.h"
#include "model/arch.h"
#include "model/blocks.h"

namespace ss {

namespace {

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
    auto name = [&](const char* hf_name, const char* gguf) {
      return LayerTensorName(naming, l, hf_name, gguf);
    };
    map.specs.push_back(norm(name("input_layernorm.weight", "attn_norm.weight"), &lw.attn_norm, D));
    map.specs.push_back(norm(name("post_attention_layernorm.weight", "post_attention_norm.weight"),
                             &lw.attn_post_norm, D));
    map.specs.push_back(
        norm(name("pre_feedforward_layernorm.weight", "ffn_norm.weight"), &lw.ffn_norm, D));
    map.specs.push_back(norm(name("post_feedforward_layernorm.weight", "post_ffw_norm.weight"),
                             &lw.ffn_post_norm, D));
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

const Key kQueryScalar{"query_pre_attn_scalar", "sinkscope.query_pre_attn_scalar"};
const Key kLocalBase{"rope_local_base_freq", "sinkscope.rope_local_theta"};
const Key kAttnCap{"attn_logit_softcapping", "attn_logit_softcapping"};
const Key kFinalCap{"final_logit_softcapping", "final_logit_softcapping"};
const Key kWindow{"sliding_window", "attention.sliding_window"};

// Gemma 2: even layers slide (Gemma2DecoderLayer.is_sliding); Gemma 3: layer i slides unless
// (i + 1) is a multiple of sliding_window_pattern (Gemma3TextConfig). One rule: pattern 2 and 6.
LayerAttention SlidesUnlessPatternEnd(int l, int pattern) {
  return (l + 1) % pattern != 0 ? LayerAttention::kSliding : LayerAttention::kFull;
}

// A soft-cap: config.json's default when absent, off when null; GGUF: off when absent.
float ReadSoftcap(const ConfigReader& r, Key k, float hf_default) {
  r.Spelled(k.hf == kAttnCap.hf ? "attn_logit_softcap" : "final_logit_softcap", k);
  if (!r.Given(k)) return r.gguf() ? 0.0f : hf_default;
  if (!r.Has(k)) return 0.0f;
  const float cap = r.Real(k);
  if (!(cap > 0)) r.Fail(k, "must be positive (or null for none), found {}", cap);
  return cap;
}

void ReadGemma(const ConfigReader& r, const FamilyDefaults& d, ModelConfig* c) {
  const bool gemma3 = std::string(c->arch) == "gemma3_text";
  ReadLlamaCore(r, d, /*head_dim_default=*/256, c);
  ReadAttentionBias(r, false, c);
  if (c->qkv_bias)
    ss::Fail("{}: attention_bias = true is not supported for {}", r.source(), c->arch);
  // Gemma's MLP reads hidden_activation (hidden_act is the older name).
  const Key act = r.Has({"hidden_activation", nullptr}) ? Key{"hidden_activation", nullptr}
                                                        : Key{"hidden_act", nullptr};
  c->act = ReadAct(r, act, "gelu_pytorch_tanh");
  c->norm_weight_offset = 1.0f;  // GGUF: the file's norms hold 1 + w; the map subtracts the 1
  c->embed_scale = std::sqrt(static_cast<float>(c->dim));
  // llama.cpp derives the query scale from the head size; sinkscope's GGUF carries HF's value.
  r.Spelled("query_pre_attn_scalar", kQueryScalar);
  c->query_pre_attn_scalar = r.Real(kQueryScalar, r.gguf() ? c->head_dim : 256.0);
  if (!(c->query_pre_attn_scalar > 0))
    r.Fail(kQueryScalar, "must be positive, found {}", c->query_pre_attn_scalar);
  c->sliding_window = ReadSlidingWindow(r, r.HfDefault<int64_t>(4096), *c);
  int pattern = 2;
  if (gemma3) {
    c->qk_norm = QkNormKind::kPerHead;
    r.Spelled("rope_local_theta", kLocalBase);
    c->rope_local_theta = r.Real(kLocalBase, 10000.0);
    pattern = r.PositiveInt({"sliding_window_pattern", nullptr}, 6);
  }
  c->layer_attention = ReadLayerTypes(r, c->n_layers, &SlidesUnlessPatternEnd, pattern);
  // Soft-caps: Gemma 2's defaults are 50 and 30; Gemma 3 has none by default. Gemma3TextConfig
  // keeps an attn_logit_softcapping field, but Gemma3Attention never passes it to the attention
  // function (modeling_gemma3.py: Gemma 3 normalises q and k instead), so a value there changes
  // nothing in transformers and is not applied here either; final_logit_softcapping is applied by
  // Gemma3ForCausalLM and here.
  if (gemma3) {
    if (r.Has(kAttnCap))
      Note(
          fmt::format("{}: {} {} is not applied: transformers' Gemma 3 attention ignores it "
                      "(Gemma 3 normalises q and k instead; Gemma 2 soft-caps)",
                      r.source(), r.Name(kAttnCap), r.Real(kAttnCap)));
    c->attn_logit_softcap = 0.0f;
  } else {
    c->attn_logit_softcap = ReadSoftcap(r, kAttnCap, 50.0f);
  }
  c->final_logit_softcap = ReadSoftcap(r, kFinalCap, gemma3 ? 0.0f : 30.0f);
}

void WriteGemma(const ModelConfig& c, ConfigWriter& w) {
  WriteLlamaCore(c, w, {.act_key = "hidden_activation"});
  w.Bool({"attention_bias", nullptr}, false);
  w.Float(kQueryScalar, c.query_pre_attn_scalar);
  w.Int(kWindow, c.sliding_window);
  WriteLayerTypes(c, w);
  if (c.arch == "gemma3_text") w.Float(kLocalBase, c.rope_local_theta);
  for (auto [key, cap] :
       {std::pair{kAttnCap, c.attn_logit_softcap}, std::pair{kFinalCap, c.final_logit_softcap}}) {
    if (cap > 0) {
      w.Float(key, cap);
    } else {
      w.Null(key);
    }
  }
}

}  // namespace

std::span<const ArchEntry> Families_gemma() {
  static const ArchEntry families[] = {
      {"gemma2",
       "Gemma2ForCausalLM",
       "gemma2",
       "Gemma 2: scaled embeddings, (1 + w) RMSNorm before and after attention and MLP, GeGLU, "
       "soft-capped attention and output logits, alternating sliding / global layers",
       {true, 1e-6f, 10000.0f, 8192, 2, 1},
       &ReadGemma,
       &WriteGemma,
       &GemmaTensors,
       &ForwardSequential,
       false,
       /*reads_softcaps=*/true},
      {"gemma3_text",
       "Gemma3ForCausalLM",
       "gemma3",
       "Gemma 3 (text): Gemma 2's block with per-head q/k norms, 5 sliding layers per global one, "
       "a local RoPE base for sliding layers, no soft-capping",
       {true, 1e-6f, 1e6f, 131072, 2, 1},
       &ReadGemma,
       &WriteGemma,
       &GemmaTensors,
       &ForwardSequential,
       false,
       /*reads_softcaps=*/true},
  };
  return families;
}

}  // namespace ss
