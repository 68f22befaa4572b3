// AdamW with decoupled weight decay (Loshchilov & Hutter 2019, "Decoupled Weight Decay
// Regularization", Algorithm 2), a linear-warmup + cosine learning-rate schedule (Loshchilov &
// Hutter 2017, SGDR, without restarts) and global gradient-norm clipping (Pascanu et al. 2013).
#pragma once

#include <cstdint>
#include <vector>

#include "train/params.h"

namespace ss::train {

// Learning rate for 0-based `step`: linear warmup from lr/warmup to lr over warmup_steps, then a
// cosine from lr down to min_lr at the last step.
double LearningRate(const TrainConfig& config, int step);

// Scales `grads` so their global L2 norm is at most max_norm (no-op when max_norm <= 0). Returns
// the norm before clipping (NaN/Inf when a gradient is not finite: the caller stops).
double ClipGradNorm(std::vector<float>& grads, float max_norm);

class AdamW {
 public:
  void Init(int64_t n) {
    m.assign(n, 0.0f);
    v.assign(n, 0.0f);
    t = 0;
  }
  // One update of `params` from `grads` at learning rate lr. Decay only on tensors whose
  // ParamTensor::decay is set (matrices; not norm gains, not embeddings: docs/TRAINING.md).
  //   p <- p - lr * wd * p;  m <- b1 m + (1-b1) g;  v <- b2 v + (1-b2) g^2;
  //   p <- p - lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)
  void Step(std::vector<float>& params, const std::vector<float>& grads, const ParamLayout& layout,
            const TrainConfig& config, double lr);

  std::vector<float> m, v;  // (P) first and second moments
  int64_t t = 0;            // updates taken (bias correction)
};

}  // namespace ss::train
