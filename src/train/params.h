// The trainer's parameters live in ONE contiguous array (and so do their gradients and the AdamW
// moments), so that clipping, the optimiser step, the MPI all-reduce and checkpointing are single
// loops over a flat buffer. ParamLayout names every slice with its Hugging Face tensor name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train/train_config.h"

namespace ss::train {

struct ParamTensor {
  std::string name;            // HF name: "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // as HF stores it, (out, in) for linear weights
  int64_t offset = 0;          // into the flat array
  int64_t numel = 0;
  bool decay = false;      // AdamW weight decay applies (matrices only)
  bool rope_rows = false;  // q_proj / k_proj: rows permuted on export for interleaved RoPE
  int rope_heads = 0;      // heads in those rows
  bool frozen = false;     // never trained (its gradient stays 0): softmax1's sink logits
};

// Offsets of one layer's tensors in the flat array (-1 when absent).
struct LayerOffsets {
  int64_t attn_norm = -1, wq = -1, wk = -1, wv = -1, wo = -1, q_norm = -1, k_norm = -1;
  std::vector<int64_t> attn;  // the attention variant's tensors, AttnVariant::params order
  int64_t ffn_norm = -1, w1 = -1, w2 = -1, w3 = -1;  // dense SwiGLU
  int64_t router = -1, ew1 = -1, ew2 = -1,
          ew3 = -1;  // MoE: (E, D), (E, F, D), (E, D, F), (E, F, D)
};

struct ParamLayout {
  std::vector<ParamTensor> tensors;  // every HF tensor (experts one tensor each)
  int64_t embed = -1;                // (V, D)
  int64_t lm_head = -1;              // (V, D); == embed when tied
  int64_t final_norm = -1;           // (D)
  std::vector<LayerOffsets> layers;
  int64_t total = 0;

  static ParamLayout Build(const TrainConfig& config);
  const ParamTensor* Find(const std::string& name) const;
};

}  // namespace ss::train
