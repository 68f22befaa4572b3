// ModelConfig: everything the forward pass needs to know about a model's shape and conventions,
// independent of the file format it came from. Readers (io/) fill it; families (model/arch_*.cpp)
// interpret it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kernels/kinds.h"

namespace ss {

// Where query/key normalisation (an RMSNorm on q and k before RoPE) applies:
//  kPerHead: one weight of size Dh shared by all heads (Qwen3, Qwen3-MoE).
//  kFull: one weight over the whole projection, size H*Dh for q and Hkv*Dh for k (OLMo 2, OLMoE).
enum class QkNormKind { kNone, kPerHead, kFull };
// RoPE frequency rescaling for context extension (HF config.json "rope_scaling").
//  kLinear: every frequency divided by rope_scaling_factor (position interpolation).
//  kLlama3: Llama 3.1's piecewise rule: low-frequency bands divided by the factor, high-frequency
//           bands kept, a smooth blend between, set by low/high_freq_factor and the original
//           length.
//  kYarn:   YaRN (Peng et al. 2023, "YaRN: Efficient Context Window Extension", section 3.2):
//           frequencies blended between interpolated (/ factor) and original by a linear ramp over
//           the dims whose wavelengths fall between beta_fast and beta_slow rotations of the
//           original context, and q, k scaled by the attention factor 0.1 ln(factor) + 1.
enum class RopeScalingKind { kNone, kLinear, kLlama3, kYarn };
// A layer's attention span (HF config.json "layer_types").
enum class LayerAttention : uint8_t { kFull, kSliding };

struct ModelConfig {
  std::string arch = "llama";  // family name in the architecture registry
  int dim = 0;                 // D
  int hidden_dim = 0;          // F (MLP hidden width; per expert for MoE)
  int n_layers = 0;            // L
  int n_heads = 0;             // H
  int n_kv_heads = 0;          // Hkv (grouped-query attention: head h reads kv head h / (H / Hkv))
  int head_dim = 0;            // Dh
  int vocab_size = 0;          // V
  int max_seq_len = 0;         // trained context length
  float norm_eps = 1e-5f;
  NormKind norm = NormKind::kRms;
  ActKind act = ActKind::kSilu;
  bool gated_mlp = true;  // SwiGLU: w2(act(w1 x) * w3 x); else w2(act(w1 x))
  RopeKind rope = RopeKind::kInterleaved;
  float rope_theta = 10000.0f;
  int rotary_dim = 0;  // dims of each head that are rotated (partial rotary); 0 means head_dim
  bool tied_embeddings = true;
  int bos_id = 1;
  int eos_id = 2;
  // ---- Added for Hugging Face config.json families (io/hf_config.h). Defaults describe a plain
  // ---- Llama-style dense model, so code that ignores them keeps working for llama2.c models.
  bool qkv_bias = false;       // q/k/v projections carry biases (Qwen2, GPT-2, GPT-NeoX)
  bool attn_out_bias = false;  // the attention output projection carries a bias (GPT-2, GPT-NeoX)
  bool mlp_bias = false;       // MLP (and expert) projections carry biases (GPT-2, GPT-NeoX)
  bool learned_pos = false;    // learned absolute position embeddings, (max_seq_len, D) (GPT-2)
  QkNormKind qk_norm = QkNormKind::kNone;
  bool parallel_residual = false;  // GPT-NeoX: x + attn(ln1(x)) + mlp(ln2(x)) instead of sequential
  bool post_norms = false;  // OLMo 2: norm the attention / MLP output before the residual add,
                            // and no norm on their inputs
  int sliding_window = 0;   // attention sees only the last W keys (Mistral); 0: full causal
  // Per-layer attention kind (gpt-oss's layer_types): empty means every layer uses
  // sliding_window (Mistral); else layer l slides only when layer_attention[l] is kSliding.
  std::vector<LayerAttention> layer_attention;
  bool attn_sinks = false;  // one learned sink logit per head in the softmax (gpt-oss "sinks")
  // Gated attention (Qiu et al. 2025, arXiv 2505.06708, "G1": Qwen3-Next's gate): each head's
  // output z is multiplied elementwise by sigmoid(x W_gate^T) of the block's normed input before
  // the output projection (LayerWeights::attn_gate).
  bool attn_output_gate = false;
  // A learnable key/value bias (Sun et al. 2024, arXiv 2402.17762, section 4.3; the trainer's
  // attention=kv-bias): one more key k* and value v* per kv head (LayerWeights::attn_bias_key /
  // attn_bias_value) in every row's softmax. The slot is scored with the query before RoPE
  // (q . k* / sqrt(Dh)), so it has no position; analysis reports its mass as the sink slot's.
  bool attn_kv_bias = false;
  // Sigmoid attention without normalisation (Gu et al. 2024, arXiv 2410.10781, section 7.4; the
  // trainer's attention=sigmoid): weights sigmoid(q . k / sqrt(Dh)), not a softmax.
  bool attn_sigmoid = false;
  // Softpick attention (Zuhri et al. 2025, arXiv 2504.20966; model/attn_softpick.cpp): rectified
  // softmax weights ReLU(e^x - 1) / (sum |e^x - 1| + eps).
  bool attn_softpick = false;
  // gpt-oss's expert activation (modeling_gpt_oss.py GptOssExperts): gate clamped above at the
  // limit, up clamped to [-limit, limit], out = (up + 1) * gate * sigmoid(1.702 gate). 0: the
  // plain gated activation act(gate) * up.
  float swiglu_limit = 0.0f;
  bool moe_bias = false;  // router and expert projections carry biases (gpt-oss)
  // gpt-oss as published: the experts stored as MXFP4 blocks and scales (config.json's
  // quantization_config with quant_method "mxfp4"), which the tensor map reads as
  // mlp.experts.{gate_up,down}_proj_{blocks,scales}. Like torch_dtype a property of the checkpoint:
  // a writer of config.json clears it, since it writes the experts dequantised.
  bool mxfp4_experts = false;
  // ---- Gemma 2 / 3 (modeling_gemma2.py, modeling_gemma3.py).
  float norm_weight_offset = 0.0f;  // RMSNorm multiplies by (offset + w): 1 for Gemma
  float embed_scale = 0.0f;         // token embeddings multiplied by this; 0: not scaled
  float query_pre_attn_scalar =
      0;  // scores scaled by 1/sqrt(this) instead of 1/sqrt(head_dim); 0: head_dim
  float rope_local_theta = 0;  // RoPE base of sliding layers (Gemma 3); 0: rope_theta. The
                               // global layers' rope_scaling does not apply to them.
  // Mixture of experts (model/arch_moe.cpp). hidden_dim (above) is the width of one expert when
  // n_experts > 0.
  int n_experts = 0;            // E; 0 for dense models
  int n_experts_per_tok = 0;    // top-k experts routed per token
  bool norm_topk_prob = false;  // renormalise the top-k router probabilities to sum to 1
  int n_shared_experts = 0;     // experts every token goes through (none in the families so far)
  int shared_expert_hidden_dim = 0;
  int dense_hidden_dim = 0;  // Qwen3-MoE "intermediate_size": width of its dense MLP layers
  // Which layers of a mixture-of-experts model have a dense MLP (width dense_hidden_dim) instead
  // of experts (Qwen-MoE's mlp_only_layers and decoder_sparse_step): empty means none.
  std::vector<bool> dense_layers;
  RopeScalingKind rope_scaling = RopeScalingKind::kNone;
  float rope_scaling_factor = 1.0f;
  float rope_low_freq_factor = 1.0f;   // kLlama3 only
  float rope_high_freq_factor = 4.0f;  // kLlama3 only
  int rope_original_max_seq_len = 0;   // kLlama3 and kYarn: context length before scaling
  float rope_yarn_beta_fast = 32.0f;   // kYarn only
  float rope_yarn_beta_slow = 1.0f;    // kYarn only
  bool rope_yarn_truncate = true;      // kYarn: round the ramp's ends to whole dims (HF "truncate")
  float attn_logit_softcap = 0.0f;     // scores = c * tanh(scores / c) before softmax; 0: off
  float final_logit_softcap = 0.0f;    // the same on the output logits; 0: off
  // GPT-2's attention scaling (modeling_gpt2.py, GPT2Attention): scale_attn_weights = false leaves
  // the scores undivided by sqrt(head_dim); scale_attn_by_inverse_layer_idx divides block l's
  // scores also by l + 1.
  bool attn_scale_sqrt_dim = true;
  bool attn_scale_inverse_layer = false;
  std::vector<int> eos_ids;  // every end-of-sequence id when a config lists several; eos_id is
                             // the first. Ids are -1 when the config has none (null).
  std::string torch_dtype;   // dtype the checkpoint was saved in ("bfloat16", ...); "" if unknown
  // ---- Gated DeltaNet layers (Qwen3-Next, Qwen3.5; model/linear_attn.cpp, docs/specs/
  // ---- qwen3_next.md): layer l's token mixer is linear attention where linear_layers[l] (empty:
  // ---- none), with nk key heads and nv value heads of dk / dv, and a causal convolution of
  // ---- linear_conv taps over its q, k, v channels.
  std::vector<bool> linear_layers;
  int linear_k_heads = 0, linear_v_heads = 0, linear_k_dim = 0, linear_v_dim = 0;
  int linear_conv = 0;
  // The shared expert's output is scaled by sigmoid(x w_sg) per token (Qwen3-Next, Qwen3.5-MoE:
  // LayerWeights::shared_expert_gate).
  bool shared_expert_gate = false;

  bool operator==(const ModelConfig&) const = default;

  int kv_dim() const { return n_kv_heads * head_dim; }
  bool LinearLayer(int layer) const { return !linear_layers.empty() && linear_layers[layer]; }
  bool HasLinearLayers() const {
    return std::find(linear_layers.begin(), linear_layers.end(), true) != linear_layers.end();
  }
  // A linear-attention layer's sizes: q and k channels (nk dk), v channels (nv dv), and the
  // convolution's channels q | k | v.
  int linear_qk_dim() const { return linear_k_heads * linear_k_dim; }
  int linear_value_dim() const { return linear_v_heads * linear_v_dim; }
  int linear_conv_dim() const { return 2 * linear_qk_dim() + linear_value_dim(); }
  int q_dim() const { return n_heads * head_dim; }
  // The softmax has a slot that holds mass without being a key: a learned sink logit or a kv-bias.
  bool HasSinkSlot() const { return attn_sinks || attn_kv_bias; }
  int rot_dim() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  // Layer `layer` routes through experts (else it has a dense MLP).
  bool MoeLayer(int layer) const {
    return n_experts > 0 && (dense_layers.empty() || !dense_layers[layer]);
  }
  // The hidden width of layer `layer`'s FFN: per expert, or its dense MLP's.
  int FfnWidth(int layer) const {
    return n_experts > 0 && !MoeLayer(layer) ? dense_hidden_dim : hidden_dim;
  }
  int MaxFfnWidth() const {
    int f = std::max(hidden_dim, n_experts > 0 ? shared_expert_hidden_dim : 0);
    for (int l = 0; l < static_cast<int>(dense_layers.size()); ++l) f = std::max(f, FfnWidth(l));
    return f;
  }
  // The sliding window of layer `layer` (0: it attends to every earlier key).
  int Window(int layer) const {
    if (sliding_window == 0) return 0;
    if (layer_attention.empty()) return sliding_window;
    return layer_attention[layer] == LayerAttention::kSliding ? sliding_window : 0;
  }
  // What RoPE multiplies q and k by after rotating them: YaRN's attention factor
  // (transformers' _compute_yarn_parameters: 0.1 ln(factor) + 1 for factor > 1), else 1.
  float RopeMagnitude() const {
    if (rope_scaling != RopeScalingKind::kYarn || rope_scaling_factor <= 1.0f) return 1.0f;
    return 0.1f * std::log(rope_scaling_factor) + 1.0f;
  }
  // The factor block `layer` multiplies its queries by so that attention, which divides the
  // scores by sqrt(head_dim), gives the scaling above (and Gemma's 1 /
  // sqrt(query_pre_attn_scalar)); 1 for every other family.
  float QueryScale(int layer) const {
    float f = attn_scale_sqrt_dim ? 1.0f : std::sqrt(static_cast<float>(head_dim));
    if (query_pre_attn_scalar > 0) f *= std::sqrt(head_dim / query_pre_attn_scalar);
    if (attn_scale_inverse_layer) f /= static_cast<float>(layer + 1);
    return f;
  }
};

// How a file spells the ModelConfig fields it sets, for error messages: {"norm_eps",
// "rms_norm_eps"}. A field not listed is named as it is in ModelConfig.
using ConfigKeys = std::map<std::string, std::string>;

// Checks every field of `config` against its domain (sizes positive, epsilons and RoPE bases
// finite and positive, rotary dims even and within the head, scaling factors, expert counts,
// soft-caps finite and >= 0). Every reader (config.json, GGUF, llama2.c, training configs) calls it
// on what it read, so a NaN epsilon or a zero RoPE base fails at load, naming `source` and the
// key, instead of turning every logit into NaN. Throws ss::Error.
void ValidateConfig(const ModelConfig& config, const std::string& source,
                    const ConfigKeys& keys = {});

}  // namespace ss
