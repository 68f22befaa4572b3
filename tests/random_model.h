// A Llama-family model with random weights, for tests and benchmarks that need a model of a given
// shape but not a trained one. Weights are uniform with standard deviation scale = 1/sqrt(fan_in)
// (so activations stay O(1) through the layers); norm weights 1; classifier tied to the embedding.
// Uniform rather than normal: a GPT-2-small-sized model (150 M weights) builds in about a second.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

#include "model/weights.h"

namespace ss::test {

struct RandomModelShape {
  int n_layers = 2, n_heads = 4, n_kv_heads = 2, dim = 32, hidden_dim = 64, vocab_size = 97;
  int max_seq_len = 4096;
  uint64_t seed = 1;
};

inline Tensor RandomTensor(std::vector<int64_t> shape, float scale, std::mt19937_64& rng) {
  Tensor t = Tensor::Zeros(std::move(shape));
  // U(-a, a) has standard deviation a / sqrt(3); two 32-bit draws per 64-bit output.
  const float a = scale * std::sqrt(3.0f);
  const int64_t n = t.numel();
  float* p = t.data();
  for (int64_t i = 0; i < n; i += 2) {
    const uint64_t bits = rng();
    p[i] = a * (2.0f * static_cast<float>(bits >> 40) / 16777216.0f - 1.0f);
    if (i + 1 < n)
      p[i + 1] = a * (2.0f * static_cast<float>((bits >> 8) & 0xffffff) / 16777216.0f - 1.0f);
  }
  return t;
}

inline Model RandomLlama(const RandomModelShape& s) {
  Model m;
  ModelConfig& c = m.config;
  c.arch = "llama";
  c.dim = s.dim;
  c.hidden_dim = s.hidden_dim;
  c.n_layers = s.n_layers;
  c.n_heads = s.n_heads;
  c.n_kv_heads = s.n_kv_heads;
  c.head_dim = s.dim / s.n_heads;
  c.vocab_size = s.vocab_size;
  c.max_seq_len = s.max_seq_len;
  std::mt19937_64 rng(s.seed);
  const float in_scale = 1.0f / std::sqrt(static_cast<float>(s.dim));
  const float hidden_scale = 1.0f / std::sqrt(static_cast<float>(s.hidden_dim));
  auto ones = [](int64_t n) {
    Tensor t = Tensor::Zeros({n});
    t.Fill(1.0f);
    return t;
  };
  m.weights.token_embedding = RandomTensor({s.vocab_size, s.dim}, 1.0f, rng);
  for (int l = 0; l < s.n_layers; ++l) {
    LayerWeights w;
    w.attn_norm = ones(s.dim);
    w.ffn_norm = ones(s.dim);
    w.wq = RandomTensor({c.q_dim(), s.dim}, in_scale, rng);
    w.wk = RandomTensor({c.kv_dim(), s.dim}, in_scale, rng);
    w.wv = RandomTensor({c.kv_dim(), s.dim}, in_scale, rng);
    w.wo = RandomTensor({s.dim, c.q_dim()}, in_scale, rng);
    w.w1 = RandomTensor({s.hidden_dim, s.dim}, in_scale, rng);
    w.w3 = RandomTensor({s.hidden_dim, s.dim}, in_scale, rng);
    w.w2 = RandomTensor({s.dim, s.hidden_dim}, hidden_scale, rng);
    m.weights.layers.push_back(std::move(w));
  }
  m.weights.final_norm = ones(s.dim);
  m.weights.lm_head = m.weights.token_embedding;
  m.source = "random";
  m.format = "random";
  return m;
}

// A GPT-2-family model (LayerNorm with biases, learned positions, ungated gelu_new MLP, biases on
// every projection, tied head) with random weights: the architecture of GPT-2 small when given its
// shape, and the same work per token as the PyTorch peers in ../shared/tools.
inline Model RandomGpt2(const RandomModelShape& s) {
  Model m = RandomLlama(RandomModelShape{s.n_layers, s.n_heads, s.n_heads, s.dim, s.hidden_dim,
                                         s.vocab_size, s.max_seq_len, s.seed});
  ModelConfig& c = m.config;
  c.arch = "gpt2";
  c.norm = NormKind::kLayer;
  c.norm_eps = 1e-5f;
  c.act = ActKind::kGeluTanh;
  c.gated_mlp = false;
  c.rope = RopeKind::kNone;
  c.rope_theta = 0.0f;
  c.learned_pos = true;
  c.qkv_bias = c.attn_out_bias = c.mlp_bias = true;
  std::mt19937_64 rng(s.seed + 1);
  auto small = [&](int64_t n) { return RandomTensor({n}, 0.02f, rng); };
  for (LayerWeights& w : m.weights.layers) {
    w.w3 = Tensor();
    w.attn_norm_bias = small(s.dim);
    w.ffn_norm_bias = small(s.dim);
    w.bq = small(c.q_dim());
    w.bk = small(c.kv_dim());
    w.bv = small(c.kv_dim());
    w.bo = small(s.dim);
    w.b1 = small(s.hidden_dim);
    w.b2 = small(s.dim);
  }
  m.weights.final_norm_bias = small(s.dim);
  m.weights.position_embedding = RandomTensor({s.max_seq_len, s.dim}, 0.1f, rng);
  return m;
}

}  // namespace ss::test
