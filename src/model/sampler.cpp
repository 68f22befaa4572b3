#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/ops.h"
#include "kernels/vecmath.h"

namespace ss {

Sampler::Sampler(SamplerOptions options)
    : options_(options), state_(options.seed ? options.seed : 0x9E3779B97F4A7C15ull) {}

float Sampler::NextUniform() {
  state_ ^= state_ >> 12;
  state_ ^= state_ << 25;
  state_ ^= state_ >> 27;
  uint64_t r = state_ * 0x2545F4914F6CDD1Dull;
  return static_cast<float>(r >> 40) / 16777216.0f;  // top 24 bits
}

int Argmax(const float* x, int n) {
  // The vectorised maximum, then its first position: two passes that stream, where max_element's
  // compare-and-branch per value took 4 % of a stories15M-sized decode.
  const float best = MaxOf(x, n);
  const float* at = std::find(x, x + n, best);
  if (at == x + n) at = std::max_element(x, x + n);  // NaN among the values: max_element's answer
  return static_cast<int>(at - x);
}

int Sampler::Sample(const float* logits, int vocab_size) {
  if (options_.temperature <= 0.0f) return Argmax(logits, vocab_size);
  probs_.assign(logits, logits + vocab_size);
  for (float& p : probs_) p /= options_.temperature;
  Softmax(probs_.data(), vocab_size);
  const float u = NextUniform();
  if (options_.top_p <= 0.0f || options_.top_p >= 1.0f) {
    float cdf = 0.0f;
    for (int i = 0; i < vocab_size; ++i) {
      cdf += probs_[i];
      if (u < cdf) return i;
    }
    return vocab_size - 1;  // rounding
  }
  // Nucleus: the smallest set of most likely tokens whose mass reaches top_p, renormalised.
  order_.resize(vocab_size);
  std::iota(order_.begin(), order_.end(), 0);
  std::sort(order_.begin(), order_.end(), [&](int a, int b) {
    return probs_[a] > probs_[b] || (probs_[a] == probs_[b] && a < b);
  });
  float mass = 0.0f;
  int kept = 0;
  while (kept < vocab_size) {
    mass += probs_[order_[kept++]];
    if (mass >= options_.top_p) break;
  }
  const float r = u * mass;
  float cdf = 0.0f;
  for (int i = 0; i < kept; ++i) {
    cdf += probs_[order_[i]];
    if (r < cdf) return order_[i];
  }
  return order_[kept - 1];
}

}  // namespace ss
