// The training loop: data -> forward -> backward -> (all-reduce) -> clip -> AdamW, with
// evaluation + sink telemetry every eval_every steps and checkpoints every checkpoint_every steps.
//
// Outputs in config.out:
//   train_loss.tsv    one line per step: step, loss, ce, aux, lr, grad_norm (loss printed exactly)
//   telemetry.jsonl   one JSON object per evaluation: losses and the sink profile per layer
//   step-<N>/         checkpoints (train/checkpoint.h)
//   data/             text runs: tokenizer and token files
// Determinism: parameters, data order and dropout-free math depend only on the seed and the
// thread count, so two runs with the same config and threads give bit-identical loss sequences,
// and a resumed run continues the uninterrupted one exactly (the data RNG, AdamW moments and
// step count are in the checkpoint).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "train/train_config.h"

namespace ss::train {

struct TrainerOptions {
  std::string resume;  // a run directory (newest checkpoint) or a step-<N> directory
  int stop_after = 0;  // > 0: return after this step without the final checkpoint (tests)
  bool quiet = false;  // no terminal lines (tests)
  // A fresh run (no `resume`) refuses an out directory that is not empty, so that an earlier
  // run's logs are not truncated and its checkpoints not mixed with new ones; `overwrite` removes
  // the earlier run's files (PrepareRunDirectory) and starts over.
  bool overwrite = false;
};

struct TrainResult {
  int start_step = 0;  // steps already done before this call (resume)
  int end_step = 0;
  std::vector<double> losses;  // training loss of steps start_step+1 .. end_step
  double val_loss = 0;         // at the last evaluation
  int val_step = 0;            // the step of that evaluation; 0: no evaluation ran
  std::string last_checkpoint;
  double tokens_per_second = 0;  // training throughput (excluding evaluation and checkpoints)
  double seconds = 0;
};

// Runs (or resumes) a training run. Throws ss::Error with one clear line for bad input, a
// non-finite loss or gradient (naming the step and the tensor; the last good checkpoint stays), or
// a failed checkpoint write (the previous checkpoints stay).
TrainResult RunTraining(const TrainConfig& config, const TrainerOptions& options);

// Makes `out` ready for a run: refuses a non-empty directory for a fresh run unless `overwrite`,
// which removes what a run writes there (step-<N>/, train_loss.tsv, telemetry.jsonl, the prepared
// data/ files, the trace cache, stale temporaries) and leaves anything else alone. A resumed run
// (`resume`) continues in place. Throws ss::Error naming the directory.
void PrepareRunDirectory(const std::string& out, bool resume, bool overwrite,
                         const TrainConfig& config);

// Evaluates a checkpoint through the analysis forward pass (ss::Forward): mean next-token loss on
// the run's first `batches` validation batches. Used by `sinkscope train --eval` and the tests.
double EvaluateCheckpoint(const std::string& step_dir, int batches);

}  // namespace ss::train
