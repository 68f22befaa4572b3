// Checkpoints: DIR/step-<N>/ in the Hugging Face layout, so the analysis reads them like any HF
// model, plus the trainer's own state:
//   config.json             LlamaForCausalLM (Qwen3ForCausalLM with q/k norm, Qwen3MoeForCausalLM
//                           with experts) fields
//   model.safetensors       F32, HF tensor names (model.embed_tokens.weight, model.layers.{i}.
//                           self_attn.q_proj.weight, ..., model.norm.weight, lm_head.weight)
//   tokenizer.model         text runs: the SentencePiece model; tokenizer_config.json beside it
//   train_config.json       the sinkscope TrainConfig (to resume, and to reload without HF)
//   trainer_state.json      step, AdamW step count, RNG state (the data position), tokens seen
//   optimizer.safetensors   AdamW moments "adam.m", "adam.v" (flat, F32)
// RoPE: HF Llama rotates halves ("rotate_half"). Runs with rope "half" (the default) store weights
// as trained; runs with rope "interleaved" permute the rows of q_proj/k_proj (and q/k norm gains)
// within each head, (2i, 2i+1) -> (i, i + Dh/2), which leaves every attention score unchanged;
// the reader applies the inverse.
// Everything is written into DIR/.step-<N>.tmp.<pid> and renamed to DIR/step-<N> at the end, so a
// crash or a full disk never leaves a half-written checkpoint and the previous ones survive; the
// next save removes such temporaries of processes that no longer run. Reading a checkpoint named
// step-<N> whose trainer_state.json says another step is refused.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/weights.h"
#include "train/params.h"

namespace ss::train {

struct TrainerState {
  int step = 0;  // steps completed
  int64_t adam_t = 0;
  std::array<uint64_t, 4> rng{};  // data RNG after `step` steps
  int64_t tokens_seen = 0;
  std::vector<float> params, adam_m, adam_v;  // (P) each, trainer layout (not permuted)
};

// An ss::Model whose tensors view `params` (no copy; keep params alive and unchanged while used).
// Uses the run's own RoPE pairing, so no permutation.
Model ExportModel(const TrainConfig& config, const ParamLayout& layout, std::vector<float>& params);

// The ModelConfig a checkpoint's config.json describes (rotate_half RoPE; Qwen3 q/k norm), and
// its config.json text (written by io/hf_config.h, which checks that it reads back the same).
ModelConfig HfModelConfig(const TrainConfig& config);
std::string CheckpointConfigJson(const TrainConfig& config);

// Writes DIR/step-<N>/ atomically. `tokenizer` is the SentencePiece model to include ("" for
// synthetic data). Throws ss::Error (nothing of the new checkpoint left behind) if a write fails.
std::string SaveCheckpoint(const std::string& run_dir, const TrainConfig& config,
                           const ParamLayout& layout, const TrainerState& state,
                           const std::string& tokenizer);
// The newest complete DIR/step-<N> of a run directory, or `dir` itself when it is a checkpoint;
// throws ss::Error naming `dir` when there is none.
std::string FindCheckpoint(const std::string& dir);
// Reads a checkpoint written by SaveCheckpoint: its TrainConfig, and the state when wanted.
TrainConfig ReadCheckpointConfig(const std::string& step_dir);
TrainerState ReadCheckpointState(const std::string& step_dir, const TrainConfig& config,
                                 const ParamLayout& layout);
// The counters of a trainer_state.json text (step, adam_t, tokens_seen, rng; not the tensors),
// checking its "parameters" against `n_params`. Throws ss::Error naming `source` for malformed
// JSON, a missing or mistyped field, an rng word that is not hexadecimal, or a parameter mismatch.
TrainerState ParseTrainerState(std::string_view text, const std::string& source, int64_t n_params);
// A checkpoint as an owning ss::Model read the Hugging Face way: config.json and the HF tensor
// names only (the reload path used by tests and `train --eval`).
Model LoadCheckpointModel(const std::string& step_dir);

// io's WriteSafetensors (F32) behind the test hook that simulates a full disk.
void WriteSafetensorsF32(const std::string& path,
                         const std::vector<std::pair<std::string, Tensor>>& tensors);

// Test hook: make the n-th file written by the next SaveCheckpoint calls fail as a full disk
// would (0: off). Counts across calls until it fires once.
void InjectCheckpointWriteFailure(int nth_file);

}  // namespace ss::train
