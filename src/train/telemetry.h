// The sink profile measured during training: analyze's metrics (analysis::AnalyzeSamples on the
// exported model, fused attention statistics, K = 2) on the trainer's validation sequences, per
// layer as the telemetry log records them:
//   alpha_k^{l,h} = mean over queries i in [k, T-1] of A^{l,h}[i, k], averaged over the sequences;
//   sink rate of layer l = share of its heads whose alpha_0 (the sequences' mean) > eps (0.3);
//   P0 norm ratio of layer l = ||h_0^l|| / median_{i>=1} ||h_i^l||, h^l the residual after block l,
//   averaged over the sequences;
//   top activation of layer l = the largest |h^l[i, d]| over the sequences, with its ratio to the
//   median |h^l[i, d]| of its sequence and whether it sits at position 0 (Sun et al. 2024's massive
//   activations: above 100 and 1000x the median).
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "model/model.h"

namespace ss::train {

struct SinkProfile {
  std::vector<double> sink_rate;                  // (L)
  std::vector<double> alpha0;                     // (L) mean over heads
  std::vector<double> alpha1;                     // (L)
  std::vector<double> p0_norm_ratio;              // (L)
  std::vector<std::vector<double>> alpha0_heads;  // (L, H)
  // attention=sink-logit (models with learned sink logits): mean over heads of the mass on the
  // sink slot, per layer. Empty otherwise.
  std::vector<double> alpha_sink;  // (L)
  // attention=gated (models with an output gate): the gate's mean (over heads and dimensions) at
  // position 0 and over positions >= 1, per layer. Empty otherwise.
  std::vector<double> gate_p0, gate_rest;  // (L)
  // attention=sigmoid: alpha_0 and alpha_1 above are over each row's weights divided by their sum
  // (Gu et al.'s proxy); these are the weights themselves: the mean weight on position 0 and the
  // mean row sum (how much a query attends at all), over heads and queries. Empty otherwise.
  std::vector<double> alpha0_raw, row_sum;     // (L)
  std::vector<double> top_abs, top_abs_ratio;  // (L) the largest |activation| and / its median
  std::vector<int> top_abs_at_p0;              // (L) 1 when it sits at position 0
};

SinkProfile MeasureSinkProfile(const Model& model, const std::vector<std::vector<int>>& sequences,
                               double eps = 0.3);
nlohmann::json ToJson(const SinkProfile& profile);

}  // namespace ss::train
