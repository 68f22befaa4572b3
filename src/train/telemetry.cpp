#include "train/telemetry.h"

#include <algorithm>
#include <cmath>

#include "analysis/analyze.h"

namespace ss::train {

SinkProfile MeasureSinkProfile(const Model& model, const std::vector<std::vector<int>>& sequences,
                               double eps) {
  analysis::AnalyzeOptions options;
  options.first_k = 2;
  options.eps = eps;
  // The condition only labels the result: the sequences are the trainer's own.
  const analysis::ConditionResult r =
      analysis::AnalyzeSamples(model, analysis::Condition::kBos, sequences, options);
  const int L = r.n_layers, H = r.n_heads;
  auto head_mean = [H](const std::vector<double>& lh, int l) {  // (L, H) -> the layer's mean
    double sum = 0;
    for (int h = 0; h < H; ++h) sum += lh[static_cast<size_t>(l) * H + h];
    return sum / H;
  };
  SinkProfile p;
  p.alpha0_heads.assign(L, std::vector<double>(H, 0.0));
  for (int l = 0; l < L; ++l) {
    double rate = 0, m0 = 0, m1 = 0;
    for (int h = 0; h < H; ++h) {
      p.alpha0_heads[l][h] = r.Alpha(0, l, h);
      rate += r.Alpha(0, l, h) > eps;  // the threshold on the sequences' mean alpha_0
      m0 += r.Alpha(0, l, h);
      m1 += r.Alpha(1, l, h);
    }
    p.sink_rate.push_back(rate / H);
    p.alpha0.push_back(m0 / H);
    p.alpha1.push_back(m1 / H);
    const analysis::Activation& top = r.top_activations[l].front();
    p.top_abs.push_back(std::fabs(top.value));
    p.top_abs_ratio.push_back(std::fabs(top.value) / std::max(top.median_abs, 1e-30));
    p.top_abs_at_p0.push_back(top.position == 0);
    if (r.has_sink_slot) p.alpha_sink.push_back(head_mean(r.alpha_sink, l));
    if (r.has_sigmoid_weights) {
      p.alpha0_raw.push_back(head_mean(r.alpha0_raw, l));
      p.row_sum.push_back(head_mean(r.row_sum, l));
    }
  }
  p.p0_norm_ratio = r.p0_norm_ratio;
  if (r.has_output_gate) {
    p.gate_p0 = r.gate_p0;
    p.gate_rest = r.gate_rest;
  }
  return p;
}

nlohmann::json ToJson(const SinkProfile& p) {
  nlohmann::json j = {{"sink_rate", p.sink_rate},
                      {"alpha0", p.alpha0},
                      {"alpha1", p.alpha1},
                      {"p0_norm_ratio", p.p0_norm_ratio},
                      {"alpha0_heads", p.alpha0_heads},
                      {"top_abs", p.top_abs},
                      {"top_abs_ratio", p.top_abs_ratio},
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
