// ModelConfig: everything the forward pass needs to know about a model's shape and conventions,
// independent of the file format it came from. Readers (io/) fill it; families (model/arch_*.cpp)
// interpret it.
#pragma once

#include <string>

#include "kernels/kinds.h"

namespace ss {

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
  bool gated_mlp = true;       // SwiGLU: w2(act(w1 x) * w3 x); else w2(act(w1 x))
  RopeKind rope = RopeKind::kInterleaved;
  float rope_theta = 10000.0f;
  int rotary_dim = 0;          // dims of each head that are rotated (partial rotary); 0 means head_dim
  bool tied_embeddings = true;
  int bos_id = 1;
  int eos_id = 2;
  // Mixture of experts (model/arch_moe.cpp). hidden_dim is the width of one expert when
  // n_experts > 0.
  int n_experts = 0;            // E; 0 for dense models
  int n_experts_per_tok = 0;    // top-k experts routed per token
  bool norm_topk_prob = false;  // renormalise the top-k router probabilities to sum to 1

  int kv_dim() const { return n_kv_heads * head_dim; }
  int q_dim() const { return n_heads * head_dim; }
  int rot_dim() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
};

}  // namespace ss
