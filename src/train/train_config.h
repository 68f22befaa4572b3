// TrainConfig: everything a training run needs (model shape, data, optimiser, schedule, output),
// read from a flat JSON object (`sinkscope train --config FILE`), from a named preset, and from
// command-line overrides. Validate() rejects impossible shapes with one clear line each.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"

namespace ss::train {

enum class DataKind { kBigramBackcopy, kText };

struct TrainConfig {
  // ---- model (Llama-style dense, or Qwen3-MoE-style when n_experts > 0)
  int dim = 64;
  int n_layers = 2;
  int n_heads = 4;
  int n_kv_heads = 4;
  int hidden_dim = 0;   // 0: SwiGLU default, 8/3 * dim rounded up to a multiple of 8
  int vocab_size = 64;  // for text: the SentencePiece vocabulary size to train
  bool tied_embeddings = true;
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  // RoPE pairing. "half" (HF rotate_half) makes checkpoints plain HF; "interleaved" (llama2.c)
  // is supported and permuted to rotate_half on export (checkpoint.cpp).
  std::string rope = "half";
  bool qk_norm = false;  // per-head RMSNorm on q and k before RoPE (Qwen3); on for MoE
  // The attention variant: a name model/attention.h lists ("softmax", "sink-logit", "gated", ...;
  // each is one file, model/attn_<name>.cpp; docs/TRAINING.md describes them).
  std::string attention = "softmax";
  int n_experts = 0;            // E; 0: dense SwiGLU MLP
  int n_experts_per_tok = 0;    // top-k
  bool norm_topk_prob = true;   // renormalise the k routing weights to sum to 1
  float aux_loss_coef = 0.01f;  // load-balancing loss weight (Fedus et al. 2021 use 0.01)
  float init_std = 0.02f;       // N(0, init_std) for linear weights and embeddings (GPT-2 init)

  // ---- data
  DataKind data = DataKind::kBigramBackcopy;
  bool bos = true;  // BOS at position 0 (bigram-backcopy) / windows at document starts
  // text: a learnable sink token (StreamingLLM, Xiao et al. 2023, section 3.3: a placeholder token
  // at the start of every training sample): windows at random offsets, each behind the
  // tokenizer's BOS id, which then marks no document start. (On Bigram-Backcopy --bos is this.)
  bool sink_token = false;
  int bb_triggers = 3;    // Bigram-Backcopy trigger tokens (Guo et al. use k = 3)
  int bb_seed = 1234;     // seed of the fixed bigram table (part of the task, not the run)
  std::string corpus;     // text: the corpus file (documents separated by blank lines)
  std::string tokenizer;  // text: an existing SentencePiece .model; "" trains one into the out dir
  double val_fraction = 0.05;  // text: the tail of the token file held out for validation

  // ---- batch and optimiser
  int batch_size = 16;  // B (global: split over MPI ranks)
  int seq_len = 64;     // T
  int steps = 200;
  float lr = 3e-3f;
  float min_lr = 3e-4f;  // cosine decays to this
  int warmup_steps = 20;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float adam_eps = 1e-8f;
  float weight_decay = 0.1f;  // decoupled; only on matrices (not norms, not embeddings)
  float grad_clip = 1.0f;     // global L2 norm; 0: off
  uint64_t seed = 42;

  // ---- run
  int eval_every = 50;         // steps between evaluations (telemetry); also at the end
  int eval_batches = 2;        // validation batches of B x T per evaluation
  int checkpoint_every = 100;  // steps between checkpoints; also at the end
  int threads = 0;             // 0: leave OpenMP/OpenBLAS defaults
  // "f32", or "bf16": the dense projections' forward and input-gradient products with bf16
  // operands and f32 sums (train/linear_bf16.h); master weights, optimiser and weight gradients
  // f32.
  std::string precision = "f32";
  std::string out = "runs/train";

  // The derived ss::ModelConfig (arch "llama" or "qwen3_moe").
  ModelConfig ToModelConfig() const;
  int EffectiveHiddenDim() const;
  // Throws ss::Error naming `source` and the field for an impossible or unsupported setting.
  void Validate(const std::string& source) const;
};

nlohmann::json ToJson(const TrainConfig& config);
// Applies the keys of `j` onto `config`; unknown keys and wrong types fail naming `source`.
void ApplyJson(TrainConfig& config, const nlohmann::json& j, const std::string& source);
// The JSON text of a train config file (keys as in ToJson, plus "preset" and "comment"), applied
// onto the defaults; `source` names it in errors. LoadTrainConfig reads `path` and parses it.
TrainConfig ParseTrainConfig(std::string_view text, const std::string& source);
TrainConfig LoadTrainConfig(const std::string& path);
// Named presets: "quick", "bigram-backcopy", "bigram-backcopy-nobos", "text", "moe-quick".
TrainConfig Preset(const std::string& name);
std::vector<std::string> PresetNames();
// The fields that must agree for a checkpoint to be resumed under `b` (shape, data, optimiser
// hyper-parameters); returns the names of those that differ.
std::vector<std::string> IncompatibleFields(const TrainConfig& a, const TrainConfig& b);

}  // namespace ss::train
