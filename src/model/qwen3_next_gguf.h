// The GGUF tensor map of Qwen3-Next (llama.cpp's qwen3next) and Qwen3.5 / Qwen3.5-MoE (qwen35,
// qwen35moe), for model/arch_qwen3_next.cpp. llama.cpp's converter (conversion/qwen.py) changes
// the Hugging Face layout in ways this map undoes on reading and redoes on writing
// (docs/specs/qwen3_next.md section 8.3):
//  - every RMSNorm weight but the DeltaNet output norm (ssm_norm) is stored as 1 + w;
//  - ssm_a holds -exp(A_log), where the model keeps A_log;
//  - qwen35 / qwen35moe with fewer key heads than value heads store the value heads "tiled":
//    stored head j nk + g is Hugging Face's head g r + j (r = nv / nk), in the V rows of attn_qkv,
//    attn_gate, ssm_beta, ssm_alpha, ssm_a, ssm_dt.bias, the V channels of ssm_conv1d and the
//    input columns of ssm_out;
//  - qwen3next's attn_qkv / attn_gate are in_proj_qkvz regrouped flat ([q | k | v] and z, heads in
//    Hugging Face's order); its ssm_ba keeps in_proj_ba's grouping per key head;
//  - ssm_conv1d is (C, K) where Hugging Face has (C, 1, K): the same values.
#pragma once

#include "model/config.h"
#include "model/tensor_map.h"
#include "model/weights.h"

namespace ss {

// `qwen35`: the qwen35 / qwen35moe layout (tiled value heads, separate ssm_beta / ssm_alpha);
// otherwise qwen3next's. A Qwen3.5-MoE layer may store its experts' gate and up projections fused
// (ffn_gate_up_exps, (E, 2F, D), gate rows first): read, never written.
TensorMap Qwen3NextGgufTensors(const ModelConfig& c, bool qwen35, ModelWeights& w);

// Reorders value heads between Hugging Face's grouped order (head g r + j) and llama.cpp's tiled
// order (head j nk + g). The heads are blocks of `block` rows starting at row `first` (or, with
// `columns`, blocks of `block` columns of every row). Returns a new tensor.
Tensor ReorderValueHeads(const Tensor& t, int64_t first, int64_t block, int nk, int nv,
                         bool to_tiled, bool columns = false);

// Splits experts' fused gate and up projections, `gate_up` (E, 2F, D: each expert's F gate rows,
// then its F up rows), into lw.moe_w1 and lw.moe_w3 (E, F, D), and frees `gate_up`.
void SplitExpertGateUp(Tensor* gate_up, LayerWeights& lw, int64_t E, int64_t F, int64_t D);

}  // namespace ss
