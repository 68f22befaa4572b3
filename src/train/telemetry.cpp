#include "train/telemetry.h"

#include <algorithm>
#include <cmath>

#include "common/stats.h"

namespace ss::train {

SinkProfile MeasureSinkProfile(const Model& model, const std::vector<std::vector<int>>& sequences,
                               double eps) {
  const ModelConfig& c = model.config;
  const int L = c.n_layers, H = c.n_heads;
  SinkProfile p;
  p.alpha0_heads.assign(L, std::vector<double>(H, 0.0));
  std::vector<std::vector<double>> alpha1(L, std::vector<double>(H, 0.0));
  p.p0_norm_ratio.assign(L, 0.0);
  p.top_abs.assign(L, 0.0);
  p.top_abs_ratio.assign(L, 0.0);
  p.top_abs_at_p0.assign(L, 0);
  if (c.HasSinkSlot()) p.alpha_sink.assign(L, 0.0);
  if (c.attn_output_gate) {
    p.gate_p0.assign(L, 0.0);
    p.gate_rest.assign(L, 0.0);
  }
  if (c.attn_sigmoid) {
    p.alpha0_raw.assign(L, 0.0);
    p.row_sum.assign(L, 0.0);
  }
  RunState state;
  for (const auto& seq : sequences) {
    const int T = static_cast<int>(seq.size());
    KVCache cache = KVCache::CreateSingleUse(c, T);
    AttnStatsBuffers stats;
    stats.first_k = 2;
    Hooks hooks;
    hooks.Add(HookPoint::kResidPost, -1, [&](const HookContext& ctx, Tensor& x) {
      std::vector<double> norms(T);
      for (int t = 0; t < T; ++t) {
        double s = 0;
        for (int d = 0; d < c.dim; ++d) s += double(x.row(t)[d]) * x.row(t)[d];
        norms[t] = std::sqrt(s);
      }
      std::vector<double> rest(norms.begin() + 1, norms.end());
      p.p0_norm_ratio[ctx.layer] += norms[0] / std::max(Median(rest), 1e-30);
      // The largest |activation| of this sequence and layer against the median |activation|.
      std::vector<float> mags(static_cast<size_t>(T) * c.dim);
      int64_t top = 0;
      for (int64_t i = 0; i < static_cast<int64_t>(mags.size()); ++i) {
        mags[i] = std::fabs(x.data()[i]);
        if (mags[i] > mags[top]) top = i;
      }
      const float largest = mags[top];
      const double median = Median(mags);
      if (largest > p.top_abs[ctx.layer]) {
        p.top_abs[ctx.layer] = largest;
        p.top_abs_ratio[ctx.layer] = largest / std::max(median, 1e-30);
        p.top_abs_at_p0[ctx.layer] = top < c.dim;
      }
    });
    if (c.attn_output_gate)
      hooks.Add(HookPoint::kAttnGate, -1, [&](const HookContext& ctx, Tensor& g) {
        const int64_t width = static_cast<int64_t>(c.n_heads) * c.head_dim;
        double p0 = 0, rest = 0;
        for (int64_t i = 0; i < width; ++i) p0 += g.data()[i];
        for (int64_t i = width; i < int64_t(T) * width; ++i) rest += g.data()[i];
        p.gate_p0[ctx.layer] += p0 / width;
        if (T > 1) p.gate_rest[ctx.layer] += rest / (double(T - 1) * width);
      });
    ForwardRequest req;
    req.tokens = seq;
    req.logits = LogitsMode::kNone;
    req.hooks = &hooks;
    req.stats = &stats;
    Forward(model, cache, state, req);
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < H; ++h) {
        double a0 = 0, a1 = 0;
        for (int t = 0; t < T; ++t) {
          const float* fk = stats.first_k_probs.data() + ((int64_t(l) * H + h) * T + t) * 2;
          a0 += fk[0];
          if (t >= 1) a1 += fk[1];
        }
        p.alpha0_heads[l][h] += a0 / T;
        alpha1[l][h] += T > 1 ? a1 / (T - 1) : 0.0;
        if (c.attn_sigmoid) {
          double w0 = 0, total = 0;
          for (int t = 0; t < T; ++t) {
            const int64_t at = (int64_t(l) * H + h) * T + t;
            w0 += stats.first_k_probs.data()[at * 2] * stats.row_sum.data()[at];
            total += stats.row_sum.data()[at];
          }
          p.alpha0_raw[l] += w0 / T / H;
          p.row_sum[l] += total / T / H;
        }
        if (c.HasSinkSlot()) {
          double slot = 0;
          for (int t = 0; t < T; ++t) slot += stats.sink_prob[(int64_t(l) * H + h) * T + t];
          p.alpha_sink[l] += slot / T / H;
        }
      }
  }
  const double n = std::max<size_t>(1, sequences.size());
  for (int l = 0; l < L; ++l) {
    double rate = 0, m0 = 0, m1 = 0;
    for (int h = 0; h < H; ++h) {
      p.alpha0_heads[l][h] /= n;
      rate += p.alpha0_heads[l][h] > eps;
      m0 += p.alpha0_heads[l][h];
      m1 += alpha1[l][h] / n;
    }
    p.sink_rate.push_back(rate / H);
    p.alpha0.push_back(m0 / H);
    p.alpha1.push_back(m1 / H);
    p.p0_norm_ratio[l] /= n;
    if (c.HasSinkSlot()) p.alpha_sink[l] /= n;
    if (c.attn_sigmoid) {
      p.alpha0_raw[l] /= n;
      p.row_sum[l] /= n;
    }
    if (c.attn_output_gate) {
      p.gate_p0[l] /= n;
      p.gate_rest[l] /= n;
    }
  }
  return p;
}

nlohmann::json ToJson(const SinkProfile& p) {
  nlohmann::json j = {{"sink_rate", p.sink_rate}, {"alpha0", p.alpha0}, {"alpha1", p.alpha1},
                      {"p0_norm_ratio", p.p0_norm_ratio}, {"alpha0_heads", p.alpha0_heads},
                      {"top_abs", p.top_abs}, {"top_abs_ratio", p.top_abs_ratio},
                      {"top_abs_at_p0", p.top_abs_at_p0}};
  if (!p.alpha_sink.empty()) j["alpha_sink"] = p.alpha_sink;
  if (!p.alpha0_raw.empty()) {
    j["alpha0_raw"] = p.alpha0_raw;
    j["row_sum"] = p.row_sum;
  }
  if (!p.gate_p0.empty()) {
    j["gate_p0"] = p.gate_p0;
    j["gate_rest"] = p.gate_rest;
  }
  return j;
}

}  // namespace ss::train
