// An independent, deliberately plain forward pass for Llama-family models: one token at a time,
// plain loops, one thread, no BLAS and none of the shared kernels, so that an error in a fast
// kernel cannot hide in the reference too. It is the slow reference that tests hold the fast path
// to, and the naive baseline in the benchmarks.
#pragma once

#include <vector>

#include "model/weights.h"

namespace ss {

class NaiveLlama {
 public:
  explicit NaiveLlama(const Model& model);
  // Feeds one token at the next position; returns the logits (V).
  const std::vector<float>& Step(int token);
  int position() const { return pos_; }

 private:
  const Model& model_;
  int pos_ = 0;
  std::vector<std::vector<float>> key_cache_, value_cache_;  // per layer (S_max * Hkv * Dh)
  std::vector<float> x_, xb_, xb2_, q_, k_, v_, att_, hb_, hb2_, logits_;
};

}  // namespace ss
