// Mixed-precision linear products for training at --precision bf16 (TrainConfig::precision):
// bf16 operands with f32 sums (kernels/gemm_bf16.h) for the forward product and for the input
// gradient, on f32 master weights that the optimiser updates as before. The weights change every
// step, so each call packs them again (in parallel: a small share of the product's time). Weight
// gradients stay f32 sgemm: packing an activation of N rows per product would cost as much as the
// bf16 product saves, and the gradients the optimiser accumulates keep their f32 precision.
#pragma once

#include <vector>

#include "kernels/gemm_bf16.h"

namespace ss::train {

class Bf16Linear {
 public:
  // y (N, out) = bf16(x) (N, in) bf16(W)^T, W (out, in).
  void Forward(const float* x, const float* w, float* y, int N, int in, int out);
  // dx (N, in) = (or += when accumulate) bf16(dy) (N, out) bf16(W), W (out, in).
  void BackwardInput(const float* dy, const float* w, float* dx, int N, int in, int out,
                     bool accumulate);

 private:
  PackedBf16 pack_;
  std::vector<float> sum_;  // the product before it is added to dx
};

}  // namespace ss::train
