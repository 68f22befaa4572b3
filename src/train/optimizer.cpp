#include "train/optimizer.h"

#include <cmath>

namespace ss::train {

double LearningRate(const TrainConfig& c, int step) {
  if (step < c.warmup_steps) return c.lr * double(step + 1) / c.warmup_steps;
  const int decay_steps = c.steps - c.warmup_steps;
  if (decay_steps <= 1) return c.lr;
  const double progress = std::min(1.0, double(step - c.warmup_steps) / (decay_steps - 1));
  return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1.0 + std::cos(M_PI * progress));
}

double ClipGradNorm(std::vector<float>& grads, float max_norm) {
  double ss = 0;  // serial, in double: the same sum whatever the thread count
  for (float g : grads) ss += double(g) * g;
  const double norm = std::sqrt(ss);
  if (max_norm > 0 && std::isfinite(norm) && norm > max_norm) {
    const float scale = static_cast<float>(max_norm / (norm + 1e-6));
    for (float& g : grads) g *= scale;
  }
  return norm;
}

void AdamW::Step(std::vector<float>& params, const std::vector<float>& grads,
                 const ParamLayout& layout, const TrainConfig& c, double lr) {
  ++t;
  const double bc1 = 1.0 - std::pow(double(c.beta1), double(t));
  const double bc2 = 1.0 - std::pow(double(c.beta2), double(t));
  const float b1 = c.beta1, b2 = c.beta2, eps = c.adam_eps;
  const float step_size = static_cast<float>(lr / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  for (const ParamTensor& pt : layout.tensors) {
    const float decay = pt.decay ? static_cast<float>(1.0 - lr * c.weight_decay) : 1.0f;
    float* p = params.data() + pt.offset;
    const float* g = grads.data() + pt.offset;
    float* mm = m.data() + pt.offset;
    float* vv = v.data() + pt.offset;
#pragma omp parallel for schedule(static) if (pt.numel > 65536)
    for (int64_t i = 0; i < pt.numel; ++i) {
      mm[i] = b1 * mm[i] + (1.0f - b1) * g[i];
      vv[i] = b2 * vv[i] + (1.0f - b2) * g[i] * g[i];
      p[i] = p[i] * decay - step_size * mm[i] / (std::sqrt(vv[i]) * inv_sqrt_bc2 + eps);
    }
  }
}

}  // namespace ss::train
