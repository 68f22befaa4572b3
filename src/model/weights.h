// ModelWeights: the tensors of a model, separate from its config and from any run state
// (one set of weights serves many KV caches and many runs at once). Linear weights are stored as
// PyTorch's nn.Linear stores them, (out, in), so y = x W^T.
#pragma once

#include <memory>
#include <vector>

#include "kernels/gemm_bf16.h"
#include "kernels/gemm_ggml.h"
#include "kernels/gemm_q8.h"
#include "model/config.h"
#include "tensor/tensor.h"

namespace ss {

// How the forward holds and multiplies the projections (--precision; model/precision.h): f32
// (OpenBLAS sgemm, the default), bf16 operands with f32 accumulation (MatMulBf16 on weights packed
// once; the tiled attention too), or Q8_0 weights (int8 blocks with a scale, MatMulQ8) with f32
// activations and attention; or native: each projection kept in the type the file stores it
// (F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, MXFP4 rows, usually a view of the file's mapping;
// MatMulGgml) with f32 activations, and an F32 one as f32.
enum class Precision { kF32, kBf16, kQ8_0, kNative };

// A projection held in the model's precision rather than f32: a bf16 pack, Q8_0 blocks or the
// file's own rows, at most one of them non-empty.
struct PackedWeight {
  PackedBf16 bf16;
  PackedQ8 q8;
  GgmlMatrix ggml;
  bool empty() const { return bf16.data.empty() && q8.empty() && ggml.empty(); }
  int out() const { return !q8.empty() ? q8.out : !ggml.empty() ? ggml.out : bf16.out; }
  int in() const { return !q8.empty() ? q8.in : !ggml.empty() ? ggml.in : bf16.in; }
};

// y (T, out) = x (T, in) W^T (+ bias) on whichever form w holds.
inline void MatMulPacked(const float* x, const PackedWeight& w, const float* bias, float* y,
                         int T) {
  if (!w.q8.empty())
    MatMulQ8(x, w.q8, bias, y, T);
  else if (!w.ggml.empty())
    MatMulGgml(x, w.ggml, bias, y, T);
  else
    MatMulBf16(x, w.bf16, bias, y, T);
}

// A layer's projections in the model's precision (SetPrecision, WeightPacker). At bf16 and q8_0
// the MoE experts and the router stay f32: they run one token at a time, where the product is
// bound by memory. At native the experts stay in the file's bytes where the file stacks them in a
// type MatMulGgml multiplies (GGUF ffn_*_exps, gpt-oss's MXFP4 blocks): all E experts as one
// matrix of E * rows rows, expert e its rows [e * rows, (e + 1) * rows) (GgmlMatrix::Rows), so that
// routing reads only the chosen experts' bytes.
struct LayerPacked {
  PackedWeight wq, wk, wv, wo, w1, w2, w3;
  PackedWeight moe_w1, moe_w2, moe_w3;  // (E * F, D), (E * D, F), (E * F, D); native only
  // Gated DeltaNet projections (q, k, v, z in, out); b and a (nv rows each) stay f32.
  PackedWeight lin_wq, lin_wk, lin_wv, lin_wz, lin_out;
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
  Tensor q_norm;  // (Dh) or (H * Dh)
  Tensor k_norm;  // (Dh) or (Hkv * Dh)
  // Mixture-of-experts FFN (replaces w1/w2/w3 when config.n_experts > 0).
  Tensor moe_router;  // (E, D)  router logits = x W^T
  Tensor moe_w1;      // (E, F, D)  per-expert gate_proj
  Tensor moe_w2;      // (E, D, F)  per-expert down_proj
  Tensor moe_w3;      // (E, F, D)  per-expert up_proj
  // ---- Added for the Hugging Face / GGUF families (append-only).
  Tensor b3;               // (F) optional up_proj bias (Llama with mlp_bias)
  Tensor attn_post_norm;   // (D) OLMo 2: RMSNorm of the attention output before the residual add
  Tensor ffn_post_norm;    // (D) OLMo 2: RMSNorm of the MLP output before the residual add
  Tensor attn_sinks;       // (H) gpt-oss: each head's learned sink logit (config.attn_sinks)
  Tensor moe_router_bias;  // (E) gpt-oss: router bias (config.moe_bias)
  Tensor moe_b1, moe_b3;   // (E, F) gpt-oss: expert gate / up biases
  Tensor moe_b2;           // (E, D) gpt-oss: expert down bias
  Tensor attn_gate;        // (H*Dh, D) gated attention's gate projection (config.attn_output_gate)
  Tensor attn_bias_key;    // (Hkv*Dh) the kv-bias slot's key per kv head (config.attn_kv_bias)
  Tensor attn_bias_value;  // (Hkv*Dh) the kv-bias slot's value per kv head
  // Gated DeltaNet (config.LinearLayer; model/linear_attn.cpp), in place of wq..wo on its layers.
  Tensor lin_wq, lin_wk;      // (nk*dk, D)  the q and k channels of the convolution's input
  Tensor lin_wv, lin_wz;      // (nv*dv, D)  v channels; z, the output norm's gate
  Tensor lin_wb, lin_wa;      // (nv, D)     beta = sigmoid(x wb); a, the decay's input
  Tensor lin_conv;            // (C, 1, K) or (C, K): per channel q | k | v, K taps, oldest first
  Tensor lin_dt_bias;         // (nv)
  Tensor lin_a_log;           // (nv)  decay rate: g = -exp(A_log) softplus(a + dt_bias)
  Tensor lin_norm;            // (dv)  the gated RMSNorm's weight (plain w)
  Tensor lin_out;             // (D, nv*dv)
  Tensor shared_expert_gate;  // (1, D) sigmoid gate of the shared expert (w1/w2/w3 then hold it)
  // The projections in the model's precision (bf16, Q8_0); null at f32. At native a projection
  // the file stores as F32 (or fused, or transposed) stays in its f32 member and its pack is empty.
  std::shared_ptr<const LayerPacked> packed;
};

struct ModelWeights {
  Tensor token_embedding;  // (V, D)
  std::vector<LayerWeights> layers;
  Tensor final_norm;       // (D)
  Tensor final_norm_bias;  // (D)  LayerNorm only
  Tensor lm_head;          // (V, D); shares storage with token_embedding when tied
  // ---- Added for the Hugging Face / GGUF families (append-only).
  Tensor position_embedding;  // (max_seq_len, D) learned absolute positions (GPT-2)
  Tensor rope_freq_factors;   // (rot_dim / 2) optional: pair i turns at inv_freq[i] / factor[i]
                              // (GGUF "rope_freqs.weight", how llama.cpp stores Llama 3 scaling)
  std::shared_ptr<const PackedWeight> lm_head_packed;  // at bf16, Q8_0, native; null at f32
  // native: the token embedding in its stored type (token_embedding then empty): the lookup
  // dequantises the rows it needs. Null otherwise (the embedding is f32).
  std::shared_ptr<const PackedWeight> embedding_packed;
};

// A loaded model: config + weights + whatever keeps mapped storage alive.
struct Model {
  ModelConfig config;
  ModelWeights weights;
  std::string source;                     // file or directory it was read from
  std::string format;                     // "llama2c", "hf", "gguf"
  Precision precision = Precision::kF32;  // set by SetPrecision (model/precision.h)
  // Loaded at bf16 or Q8_0 (LoadModel's precision): the dense projections and the LM head are held
  // only in that form, their f32 tensors empty (model/precision.h, WeightPacker).
  bool packed_only = false;
  int64_t ParameterCount() const;
};

}  // namespace ss
