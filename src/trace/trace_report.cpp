// The trace report: JSON "sinkscope.trace/1", the terminal table and the HTML page.
#include <fmt/format.h>

#include <algorithm>

#include "report/report.h"
#include "trace/trace.h"

namespace ss::trace {
namespace {

// Mean of the first two entries (blocks 0-1) or of what there is.
double FirstBlocksMax(const std::vector<double>& v) {
  double m = 0;
  for (size_t i = 0; i < std::min<size_t>(2, v.size()); ++i) m = std::max(m, v[i]);
  return m;
}

}  // namespace

nlohmann::json TraceJson(const std::vector<CheckpointResult>& results, const TraceSettings& s) {
  nlohmann::json doc;
  doc["schema"] = kTraceSchema;
  doc["settings"] = {{"samples_source", s.samples_source},
                     {"samples", s.samples},
                     {"length", s.length},
                     {"seed", s.seed},
                     {"eps", s.profile.eps},
                     {"first_k", s.profile.first_k},
                     {"onset_sink_rate", s.profile.onset_sink_rate},
                     {"amplification_ratio", s.profile.amplification_ratio},
                     {"early_block_limit", s.stage.early_block_limit},
                     {"other_sink_share", s.stage.other_sink_share},
                     {"stable_window", s.stage.stable_window}};
  nlohmann::json list = nlohmann::json::array();
  nlohmann::json failed = nlohmann::json::array();
  for (const auto& r : results) {
    if (!r.ok) {
      failed.push_back({{"path", r.ref.path}, {"step", r.ref.step}, {"error", r.error}});
      continue;
    }
    list.push_back({{"path", r.ref.path},
                    {"step", r.ref.step},
                    {"loss", r.profile.loss},
                    {"stage", StageName(r.stage)},
                    {"onset_layer", r.profile.onset_layer},
                    {"amplification_layer", r.profile.amplification_layer},
                    {"profile", ProfileJson(r.profile)}});
  }
  doc["checkpoints"] = list;
  doc["failed"] = failed;
  return doc;
}

std::string TraceTable(const std::vector<CheckpointResult>& results, const StageOptions& options) {
  // Checkpoints with learned sink logits (gpt-oss) add the share of heads on the sink slot.
  const bool slot = std::any_of(results.begin(), results.end(),
                                [](const CheckpointResult& r) { return r.ok && !r.profile.sink_slot_rate.empty(); });
  std::vector<std::vector<std::string>> rows = {
      {"step", "loss", "stage", "onset", "amplif", "P0 ratio b0-1", "sink rate b0-1", "alpha1 share",
       "other-pos share"}};
  if (slot) rows[0].push_back("slot share");
  for (const auto& r : results) {
    if (!r.ok) {
      rows.push_back({std::to_string(r.ref.step), "-", "FAILED", "-", "-", "-", "-", "-", "-"});
      if (slot) rows.back().push_back("-");
      continue;
    }
    const Profile& p = r.profile;
    rows.push_back({std::to_string(r.ref.step), fmt::format("{:.4f}", p.loss), StageName(r.stage),
                    p.onset_layer < 0 ? "-" : std::to_string(p.onset_layer),
                    p.amplification_layer < 0 ? "-" : std::to_string(p.amplification_layer),
                    fmt::format("{:.2f}", FirstBlocksMax(p.p0_norm_ratio)),
                    fmt::format("{:.2f}", FirstBlocksMax(p.sink_rate)),
                    fmt::format("{:.3f}", p.alpha1_share), fmt::format("{:.3f}", p.other_sink_share)});
    if (slot) {
      double mean = 0;
      for (double v : p.sink_slot_rate) mean += v / std::max<size_t>(1, p.sink_slot_rate.size());
      rows.back().push_back(p.sink_slot_rate.empty() ? "-" : fmt::format("{:.3f}", mean));
    }
  }
  return report::FormatTable(rows);
}

std::string TraceHtml(const std::vector<CheckpointResult>& results, const TraceSettings& s) {
  std::vector<const CheckpointResult*> ok;
  for (const auto& r : results)
    if (r.ok) ok.push_back(&r);
  report::HtmlPage page("sinkscope trace");
  page.Heading("sinkscope trace", 1);
  page.Paragraph(fmt::format(
      "{} checkpoints analysed ({} failed); {} samples of {} tokens ({}), seed {}. Sink: alpha_0 > {}; "
      "onset layer: first layer with sink rate > {}; amplification layer: first layer with P0 norm "
      "ratio > {}. Stage thresholds: blocks 0-{}, other-position sink share >= {}, stable over {} "
      "checkpoints (docs/TRACE.md).",
      ok.size(), results.size() - ok.size(), s.samples, s.length, s.samples_source, s.seed,
      s.profile.eps, s.profile.onset_sink_rate, s.profile.amplification_ratio,
      s.stage.early_block_limit, s.stage.other_sink_share, s.stage.stable_window));
  if (ok.empty()) return page.Render();

  // Stage bands: one row per stage over the steps (1 where the checkpoint is in that stage).
  const std::vector<Stage> all = {Stage::kNone, Stage::kEarly, Stage::kTransitional, Stage::kConverged};
  std::vector<std::vector<double>> bands(all.size(), std::vector<double>(ok.size(), 0.0));
  for (size_t c = 0; c < ok.size(); ++c)
    for (size_t k = 0; k < all.size(); ++k) bands[k][c] = ok[c]->stage == all[k] ? 1.0 : 0.0;
  page.Heading("Stage bands");
  page.Paragraph("Rows: none, early, transitional, converged; columns: checkpoints in step order (" +
                 fmt::format("steps {} .. {}", ok.front()->ref.step, ok.back()->ref.step) +
                 "). A filled cell marks the checkpoint's stage.");
  report::HeatmapOptions bo;
  bo.title = "stage (rows: none / early / transitional / converged)";
  bo.row_label = "stage";
  bo.col_label = "checkpoint";
  bo.annotate = false;
  page.Raw(report::Heatmap(bands, bo));

  const int L = ok.front()->profile.n_layers;
  std::vector<std::vector<double>> heat(L, std::vector<double>(ok.size(), 0.0));
  for (size_t c = 0; c < ok.size(); ++c)
    for (int l = 0; l < L && l < ok[c]->profile.n_layers; ++l) heat[l][c] = ok[c]->profile.sink_rate[l];
  page.Heading("Sink rate per layer over training");
  report::HeatmapOptions ho;
  ho.title = "Sink_0 rate (rows: layers, columns: checkpoints by step)";
  ho.row_label = "layer";
  ho.col_label = "checkpoint";
  ho.annotate = ok.size() <= 24;
  page.Raw(report::Heatmap(heat, ho));

  report::Series onset{"onset layer", {}, {}}, amp{"amplification layer", {}, {}}, loss{"loss", {}, {}};
  for (const auto* r : ok) {
    const double x = static_cast<double>(r->ref.step);
    onset.x.push_back(x);
    onset.y.push_back(r->profile.onset_layer);
    amp.x.push_back(x);
    amp.y.push_back(r->profile.amplification_layer);
    loss.x.push_back(x);
    loss.y.push_back(r->profile.loss);
  }
  page.Heading("Onset and amplification layer over training");
  report::ChartOptions lo;
  lo.title = "onset / amplification layer (-1: none)";
  lo.x_label = "step";
  lo.y_label = "layer";
  page.Raw(report::LineChart({onset, amp}, lo));
  page.Heading("Loss over training");
  report::ChartOptions co;
  co.title = "validation loss on the trace samples";
  co.x_label = "step";
  co.y_label = "loss (nats/token)";
  page.Raw(report::LineChart({loss}, co));

  std::vector<std::vector<std::string>> rows = {{"step", "loss", "stage", "onset", "amplification"}};
  for (const auto* r : ok)
    rows.push_back({std::to_string(r->ref.step), fmt::format("{:.4f}", r->profile.loss),
                    StageName(r->stage), std::to_string(r->profile.onset_layer),
                    std::to_string(r->profile.amplification_layer)});
  page.Heading("Checkpoints");
  page.Table(rows);
  return page.Render();
}

}  // namespace ss::trace
