// Next-token choice from logits: greedy (temperature 0), temperature sampling, nucleus (top-p,
// Holtzman et al. 2019). Seeded and deterministic for a given seed.
#pragma once

#include <cstdint>
#include <vector>

namespace ss {

struct SamplerOptions {
  float temperature = 1.0f;  // 0: greedy (argmax)
  float top_p = 1.0f;        // 1: sample from the full distribution
  uint64_t seed = 42;
};

class Sampler {
 public:
  explicit Sampler(SamplerOptions options);
  // Picks a token from logits (V). Does not modify them.
  int Sample(const float* logits, int vocab_size);
  // Uniform float in [0, 1): xorshift64* (Vigna 2016), so results are the same on every platform.
  float NextUniform();

 private:
  SamplerOptions options_;
  uint64_t state_;
  std::vector<float> probs_;
  std::vector<int> order_;
};

int Argmax(const float* x, int n);

}  // namespace ss
