#include "reference/naive_llama.h"

#include <cmath>

namespace ss {

namespace {

// out (d) = W (d, n) x (n)
void PlainMatVec(float* out, const float* x, const float* w, int n, int d) {
  for (int i = 0; i < d; ++i) {
    float sum = 0.0f;
    for (int j = 0; j < n; ++j) sum += w[static_cast<int64_t>(i) * n + j] * x[j];
    out[i] = sum;
  }
}

void PlainRmsNorm(float* out, const float* x, const float* w, int n, float eps) {
  float ss = 0.0f;
  for (int j = 0; j < n; ++j) ss += x[j] * x[j];
  ss = 1.0f / std::sqrt(ss / n + eps);
  for (int j = 0; j < n; ++j) out[j] = w[j] * (ss * x[j]);
}

void PlainRope(float* v, int n_heads, int head_dim, int rot_dim, int pos, float theta,
               RopeKind kind) {
  for (int h = 0; h < n_heads; ++h) {
    float* head = v + h * head_dim;
    for (int i = 0; i < rot_dim / 2; ++i) {
      float freq = 1.0f / std::pow(theta, (2.0f * i) / rot_dim);
      float angle = pos * freq;
      float c = std::cos(angle), s = std::sin(angle);
      int a = kind == RopeKind::kInterleaved ? 2 * i : i;
      int b = kind == RopeKind::kInterleaved ? 2 * i + 1 : i + rot_dim / 2;
      float x0 = head[a], x1 = head[b];
      head[a] = x0 * c - x1 * s;
      head[b] = x0 * s + x1 * c;
    }
  }
}

}  // namespace

NaiveLlama::NaiveLlama(const Model& model) : model_(model) {
  const ModelConfig& c = model.config;
  key_cache_.assign(c.n_layers,
                    std::vector<float>(static_cast<size_t>(c.max_seq_len) * c.kv_dim()));
  value_cache_ = key_cache_;
  x_.resize(c.dim);
  xb_.resize(std::max(c.dim, c.q_dim()));
  xb2_.resize(c.dim);
  q_.resize(c.q_dim());
  k_.resize(c.kv_dim());
  v_.resize(c.kv_dim());
  att_.resize(c.max_seq_len);
  hb_.resize(c.hidden_dim);
  hb2_.resize(c.hidden_dim);
  logits_.resize(c.vocab_size);
}

const std::vector<float>& NaiveLlama::Step(int token) {
  const ModelConfig& c = model_.config;
  const ModelWeights& w = model_.weights;
  const int D = c.dim, Dh = c.head_dim, kv_dim = c.kv_dim(), group = c.n_heads / c.n_kv_heads;
  const int pos = pos_;
  for (int i = 0; i < D; ++i) x_[i] = w.token_embedding.row(token)[i];
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& lw = w.layers[l];
    PlainRmsNorm(xb_.data(), x_.data(), lw.attn_norm.data(), D, c.norm_eps);
    PlainMatVec(q_.data(), xb_.data(), lw.wq.data(), D, c.q_dim());
    PlainMatVec(k_.data(), xb_.data(), lw.wk.data(), D, kv_dim);
    PlainMatVec(v_.data(), xb_.data(), lw.wv.data(), D, kv_dim);
    PlainRope(q_.data(), c.n_heads, Dh, c.rot_dim(), pos, c.rope_theta, c.rope);
    PlainRope(k_.data(), c.n_kv_heads, Dh, c.rot_dim(), pos, c.rope_theta, c.rope);
    float* kc = key_cache_[l].data() + static_cast<int64_t>(pos) * kv_dim;
    float* vc = value_cache_[l].data() + static_cast<int64_t>(pos) * kv_dim;
    for (int i = 0; i < kv_dim; ++i) kc[i] = k_[i], vc[i] = v_[i];
    for (int h = 0; h < c.n_heads; ++h) {
      const float* qh = q_.data() + h * Dh;
      const int kvh = h / group;
      float max_score = -1e30f;
      for (int t = 0; t <= pos; ++t) {
        const float* kh = key_cache_[l].data() + static_cast<int64_t>(t) * kv_dim + kvh * Dh;
        float score = 0.0f;
        for (int i = 0; i < Dh; ++i) score += qh[i] * kh[i];
        att_[t] = score / std::sqrt(static_cast<float>(Dh));
        if (att_[t] > max_score) max_score = att_[t];
      }
      float sum = 0.0f;
      for (int t = 0; t <= pos; ++t) sum += (att_[t] = std::exp(att_[t] - max_score));
      float* out = xb_.data() + h * Dh;
      for (int i = 0; i < Dh; ++i) out[i] = 0.0f;
      for (int t = 0; t <= pos; ++t) {
        const float* vh = value_cache_[l].data() + static_cast<int64_t>(t) * kv_dim + kvh * Dh;
        for (int i = 0; i < Dh; ++i) out[i] += att_[t] / sum * vh[i];
      }
    }
    PlainMatVec(xb2_.data(), xb_.data(), lw.wo.data(), c.q_dim(), D);
    for (int i = 0; i < D; ++i) x_[i] += xb2_[i];
    PlainRmsNorm(xb_.data(), x_.data(), lw.ffn_norm.data(), D, c.norm_eps);
    PlainMatVec(hb_.data(), xb_.data(), lw.w1.data(), D, c.hidden_dim);
    PlainMatVec(hb2_.data(), xb_.data(), lw.w3.data(), D, c.hidden_dim);
    for (int i = 0; i < c.hidden_dim; ++i) {
      float g = hb_[i];
      hb_[i] = g / (1.0f + std::exp(-g)) * hb2_[i];
    }
    PlainMatVec(xb2_.data(), hb_.data(), lw.w2.data(), c.hidden_dim, D);
    for (int i = 0; i < D; ++i) x_[i] += xb2_[i];
  }
  PlainRmsNorm(x_.data(), x_.data(), w.final_norm.data(), D, c.norm_eps);
  PlainMatVec(logits_.data(), x_.data(), w.lm_head.data(), D, c.vocab_size);
  ++pos_;
  return logits_;
}

}  // namespace ss
