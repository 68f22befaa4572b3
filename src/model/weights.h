// ModelWeights: the tensors of a model, separate from its config and from any run state
// (STYLE.md #5: one set of weights serves many KV caches and runs). Linear weights are stored as
// PyTorch's nn.Linear stores them, (out, in), so y = x W^T.
#pragma once

#include <memory>
#include <vector>

#include "kernels/gemm_bf16.h"
#include "model/config.h"
#include "tensor/tensor.h"

namespace ss {

// The arithmetic of the forward's matrix products (--precision): f32 (OpenBLAS sgemm, the default)
// or bf16 operands with f32 accumulation (MatMulBf16 on weights packed once; model/precision.h).
enum class Precision { kF32, kBf16 };

// A layer's projections rounded to bf16 and packed for MatMulBf16 (SetPrecision). MoE experts and
// the router stay f32: they run one token at a time, where the product is bound by memory.
struct LayerBf16 {
  PackedBf16 wq, wk, wv, wo, w1, w2, w3;
};

struct LayerWeights {
  Tensor attn_norm;       // (D)  RMSNorm / LayerNorm weight before attention
  Tensor attn_norm_bias;  // (D)  LayerNorm only
  Tensor wq;              // (H * Dh, D)
  Tensor wk;              // (Hkv * Dh, D)
  Tensor wv;              // (Hkv * Dh, D)
  Tensor wo;              // (D, H * Dh)
  Tensor bq, bk, bv, bo;  // optional biases
  Tensor ffn_norm;        // (D)
  Tensor ffn_norm_bias;   // (D)  LayerNorm only
  Tensor w1;              // (F, D)  gate_proj (or up/fc in ungated MLPs)
  Tensor w2;              // (D, F)  down_proj
  Tensor w3;              // (F, D)  up_proj (gated MLP only)
  Tensor b1, b2;          // optional MLP biases
  // Query/key RMSNorm applied before RoPE (Qwen3, OLMo 2): a weight of size Dh shared by all
  // heads, or of the whole projection width (H*Dh / Hkv*Dh). Empty: no q/k norm.
  Tensor q_norm;          // (Dh) or (H * Dh)
  Tensor k_norm;          // (Dh) or (Hkv * Dh)
  // Mixture-of-experts FFN (replaces w1/w2/w3 when config.n_experts > 0).
  Tensor moe_router;      // (E, D)  router logits = x W^T
  Tensor moe_w1;          // (E, F, D)  per-expert gate_proj
  Tensor moe_w2;          // (E, D, F)  per-expert down_proj
  Tensor moe_w3;          // (E, F, D)  per-expert up_proj
  // ---- Added for the Hugging Face / GGUF families (append-only).
  Tensor b3;              // (F) optional up_proj bias (Llama with mlp_bias)
  Tensor attn_post_norm;  // (D) OLMo 2: RMSNorm of the attention output before the residual add
  Tensor ffn_post_norm;   // (D) OLMo 2: RMSNorm of the MLP output before the residual add
  // bf16 packs of the projections when the model runs at Precision::kBf16; null at f32.
  std::shared_ptr<const LayerBf16> bf16;
};

struct ModelWeights {
  Tensor token_embedding;   // (V, D)
  std::vector<LayerWeights> layers;
  Tensor final_norm;        // (D)
  Tensor final_norm_bias;   // (D)  LayerNorm only
  Tensor lm_head;           // (V, D); shares storage with token_embedding when tied
  // ---- Added for the Hugging Face / GGUF families (append-only).
  Tensor position_embedding;  // (max_seq_len, D) learned absolute positions (GPT-2)
  Tensor rope_freq_factors;   // (rot_dim / 2) optional: pair i turns at inv_freq[i] / factor[i]
                              // (GGUF "rope_freqs.weight", how llama.cpp stores Llama 3 scaling)
  std::shared_ptr<const PackedBf16> lm_head_bf16;  // at Precision::kBf16; null at f32
};

// A loaded model: config + weights + whatever keeps mapped storage alive.
struct Model {
  ModelConfig config;
  ModelWeights weights;
  std::string source;  // file or directory it was read from
  std::string format;  // "llama2c", "hf", "gguf"
  Precision precision = Precision::kF32;  // set by SetPrecision (model/precision.h)
  // Loaded at Precision::kBf16 (LoadModel's precision): the dense projections and the LM head are
  // held only as bf16 packs, their f32 tensors empty (model/precision.h, Bf16Packer).
  bool bf16_only = false;
  int64_t ParameterCount() const;
};

}  // namespace ss
