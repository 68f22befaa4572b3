#include "model/random_init.h"

#include <cmath>
#include <random>

namespace ss {

Model MakeRandomModel(const ModelConfig& c, uint64_t seed, float scale) {
  SS_ASSERT(c.dim > 0 && c.n_layers > 0 && c.n_heads > 0 && c.n_kv_heads > 0 && c.head_dim > 0);
  if (scale <= 0) scale = 1.0f / std::sqrt(static_cast<float>(c.dim));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  auto random = [&](std::vector<int64_t> shape) {
    Tensor t = Tensor::Zeros(std::move(shape));
    for (int64_t i = 0; i < t.numel(); ++i) t[i] = normal(rng);
    return t;
  };
  auto ones = [](int64_t n) {
    Tensor t = Tensor::Zeros({n});
    t.Fill(1.0f);
    return t;
  };
  Model model;
  model.config = c;
  model.source = "random";
  model.format = "random";
  ModelWeights& w = model.weights;
  w.token_embedding = random({c.vocab_size, c.dim});
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights layer;
    layer.attn_norm = ones(c.dim);
    layer.wq = random({c.q_dim(), c.dim});
    layer.wk = random({c.kv_dim(), c.dim});
    layer.wv = random({c.kv_dim(), c.dim});
    layer.wo = random({c.dim, c.q_dim()});
    layer.ffn_norm = ones(c.dim);
    layer.w1 = random({c.hidden_dim, c.dim});
    layer.w2 = random({c.dim, c.hidden_dim});
    if (c.gated_mlp) layer.w3 = random({c.hidden_dim, c.dim});
    w.layers.push_back(std::move(layer));
  }
  w.final_norm = ones(c.dim);
  w.lm_head = c.tied_embeddings ? w.token_embedding : random({c.vocab_size, c.dim});
  return model;
}

}  // namespace ss
