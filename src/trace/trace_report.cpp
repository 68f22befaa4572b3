// The trace report: JSON "sinkscope.trace/1", the terminal table and the HTML page.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

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
  const bool slot = std::any_of(results.begin(), results.end(), [](const CheckpointResult& r) {
    return r.ok && !r.profile.sink_slot_rate.empty();
  });
  std::vector<std::vector<std::string>> rows = {{"step", "loss", "stage", "onset", "amplif",
                                                 "P0 ratio b0-1", "sink rate b0-1", "alpha1 share",
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
                    fmt::format("{:.3f}", p.alpha1_share),
                    fmt::format("{:.3f}", p.other_sink_share)});
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
      "{} checkpoints analysed ({} failed); {} samples of {} tokens ({}), seed {}. Sink: alpha_0 > "
      "{}; "
      "onset layer: first layer with sink rate > {}; amplification layer: first layer with P0 norm "
      "ratio > {}. Stage thresholds: blocks 0-{}, other-position sink share >= {}, stable over {} "
      "checkpoints (docs/TRACE.md).",
      ok.size(), results.size() - ok.size(), s.samples, s.length, s.samples_source, s.seed,
      s.profile.eps, s.profile.onset_sink_rate, s.profile.amplification_ratio,
      s.stage.early_block_limit, s.stage.other_sink_share, s.stage.stable_window));
  if (ok.empty()) return page.Render();

  // Stage bands: one row per stage over the steps (1 where the checkpoint is in that stage).
  const std::vector<Stage> all = {Stage::kNone, Stage::kEarly, Stage::kTransitional,
                                  Stage::kConverged};
  std::vector<std::vector<double>> bands(all.size(), std::vector<double>(ok.size(), 0.0));
  for (size_t c = 0; c < ok.size(); ++c)
    for (size_t k = 0; k < all.size(); ++k) bands[k][c] = ok[c]->stage == all[k] ? 1.0 : 0.0;
  page.Heading("Stage bands");
  page.Paragraph(
      "Rows: none, early, transitional, converged; columns: checkpoints in step order (" +
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
    for (int l = 0; l < L && l < ok[c]->profile.n_layers; ++l)
      heat[l][c] = ok[c]->profile.sink_rate[l];
  page.Heading("Sink rate per layer over training");
  report::HeatmapOptions ho;
  ho.title = "Sink_0 rate (rows: layers, columns: checkpoints by step)";
  ho.row_label = "layer";
  ho.col_label = "checkpoint";
  ho.annotate = ok.size() <= 24;
  page.Raw(report::Heatmap(heat, ho));

  report::Series onset{"onset layer", {}, {}}, amp{"amplification layer", {}, {}},
      loss{"loss", {}, {}};
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

  std::vector<std::vector<std::string>> rows = {
      {"step", "loss", "stage", "onset", "amplification"}};
  for (const auto* r : ok)
    rows.push_back({std::to_string(r->ref.step), fmt::format("{:.4f}", r->profile.loss),
                    StageName(r->stage), std::to_string(r->profile.onset_layer),
                    std::to_string(r->profile.amplification_layer)});
  page.Heading("Checkpoints");
  page.Table(rows);
  return page.Render();
}

// ---- twins

std::vector<TwinPoint> TwinPoints(const TwinRun& run) {
  std::vector<TwinPoint> points;
  for (const auto& r : run.results) {
    if (!r.ok) continue;
    const Profile& p = r.profile;
    TwinPoint t;
    t.step = r.ref.step;
    t.stage = r.stage;
    t.loss = p.loss;
    for (double v : p.alpha0) t.alpha0 = std::max(t.alpha0, v);
    for (double v : p.sink_rate) t.sink_rate = std::max(t.sink_rate, v);
    for (double v : p.p0_norm_ratio) t.p0_norm_ratio = std::max(t.p0_norm_ratio, v);
    t.slot_share = std::numeric_limits<double>::quiet_NaN();
    if (!p.sink_slot_rate.empty()) {
      t.slot_share = 0;
      for (double v : p.sink_slot_rate) t.slot_share += v / p.sink_slot_rate.size();
    }
    points.push_back(t);
  }
  return points;
}

nlohmann::json TwinsJson(const std::vector<TwinRun>& runs, const TraceSettings& settings) {
  nlohmann::json doc;
  doc["schema"] = kTwinsSchema;
  nlohmann::json list = nlohmann::json::array();
  for (const TwinRun& run : runs) {
    nlohmann::json trace = TraceJson(run.results, settings);
    if (doc.find("settings") == doc.end()) doc["settings"] = trace["settings"];
    nlohmann::json points = nlohmann::json::array();
    for (const TwinPoint& t : TwinPoints(run))
      points.push_back({{"step", t.step},
                        {"stage", StageName(t.stage)},
                        {"loss", t.loss},
                        {"alpha0_max_layer", t.alpha0},
                        {"sink_rate_max_layer", t.sink_rate},
                        {"p0_norm_ratio_max_layer", t.p0_norm_ratio},
                        {"slot_share", std::isnan(t.slot_share) ? nlohmann::json(nullptr)
                                                                : nlohmann::json(t.slot_share)}});
    list.push_back({{"name", run.name},
                    {"dir", run.dir},
                    {"points", points},
                    {"checkpoints", trace["checkpoints"]},
                    {"failed", trace["failed"]}});
  }
  doc["runs"] = list;
  return doc;
}

namespace {

// Every step any run has, ascending, and per run its point at each (null where it has none).
std::pair<std::vector<int64_t>, std::vector<std::vector<const TwinPoint*>>> AlignSteps(
    const std::vector<std::vector<TwinPoint>>& points) {
  std::vector<int64_t> steps;
  for (const auto& run : points)
    for (const TwinPoint& t : run) steps.push_back(t.step);
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  std::vector<std::vector<const TwinPoint*>> at(
      points.size(), std::vector<const TwinPoint*>(steps.size(), nullptr));
  for (size_t r = 0; r < points.size(); ++r)
    for (const TwinPoint& t : points[r])
      at[r][std::lower_bound(steps.begin(), steps.end(), t.step) - steps.begin()] = &t;
  return {steps, at};
}

std::vector<std::vector<std::string>> SideBySideRows(
    const std::vector<TwinRun>& runs, const std::vector<std::vector<TwinPoint>>& points) {
  std::vector<std::vector<std::string>> rows = {{"step"}};
  for (const TwinRun& run : runs) {
    rows[0].push_back(run.name + " stage");
    rows[0].push_back(run.name + " alpha0");
  }
  const auto [steps, at] = AlignSteps(points);
  for (size_t i = 0; i < steps.size(); ++i) {
    std::vector<std::string> row = {std::to_string(steps[i])};
    for (size_t r = 0; r < runs.size(); ++r) {
      const TwinPoint* t = at[r][i];
      row.push_back(t ? StageName(t->stage) : "-");
      row.push_back(t ? fmt::format("{:.3f}", t->alpha0) : "-");
    }
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

std::string TwinsTable(const std::vector<TwinRun>& runs) {
  std::vector<std::vector<TwinPoint>> points;
  for (const TwinRun& run : runs) points.push_back(TwinPoints(run));
  return report::FormatTable(SideBySideRows(runs, points));
}

std::string TwinsHtml(const std::vector<TwinRun>& runs, const TraceSettings& s) {
  std::vector<std::vector<TwinPoint>> points;
  for (const TwinRun& run : runs) points.push_back(TwinPoints(run));
  report::HtmlPage page("sinkscope trace: twins");
  page.Heading("sinkscope trace: twins", 1);
  std::string names;
  for (const TwinRun& run : runs)
    names += (names.empty() ? "" : ", ") + run.name + " (" + run.dir + ")";
  page.Paragraph(fmt::format(
      "{} runs traced on the same {} samples of {} tokens ({}), seed {}: {}. Sink: alpha_0 > {}; "
      "stages as in docs/TRACE.md (blocks 0-{}, other-position share >= {}, stable over {} "
      "checkpoints). Each chart overlays the runs; values are per checkpoint, over layers.",
      runs.size(), s.samples, s.length, s.samples_source, s.seed, names, s.profile.eps,
      s.stage.early_block_limit, s.stage.other_sink_share, s.stage.stable_window));
  struct Metric {
    const char* title;
    const char* y_label;
    double TwinPoint::*field;
  };
  const Metric metrics[] = {
      {"alpha_0, largest layer mean over heads", "alpha_0", &TwinPoint::alpha0},
      {"sink rate (share of heads with alpha_0 > eps), largest layer", "sink rate",
       &TwinPoint::sink_rate},
      {"share of heads on a sink slot (runs with one)", "slot share", &TwinPoint::slot_share},
      {"P0 norm ratio, largest layer", "||h_0|| / median", &TwinPoint::p0_norm_ratio},
      {"loss on the trace samples", "nats/token", &TwinPoint::loss},
  };
  for (const Metric& m : metrics) {
    std::vector<report::Series> series;
    for (size_t r = 0; r < runs.size(); ++r) {
      report::Series se{runs[r].name, {}, {}};
      for (const TwinPoint& t : points[r])
        if (!std::isnan(t.*m.field)) {
          se.x.push_back(static_cast<double>(t.step));
          se.y.push_back(t.*m.field);
        }
      if (!se.x.empty()) series.push_back(se);
    }
    if (series.empty()) continue;
    report::ChartOptions co;
    co.title = m.title;
    co.x_label = "step";
    co.y_label = m.y_label;
    if (m.field == &TwinPoint::alpha0) {
      co.has_reference = true;
      co.reference_y = s.profile.eps;
      co.reference_label = "eps";
    }
    page.Heading(m.title);
    page.Raw(report::LineChart(series, co));
  }
  // The stages side by side: one heatmap row per run, 0 none .. 3 converged, columns the steps.
  const auto [steps, at] = AlignSteps(points);
  std::vector<std::vector<double>> stage_rows(runs.size(), std::vector<double>(steps.size(), -1.0));
  for (size_t r = 0; r < runs.size(); ++r)
    for (size_t i = 0; i < steps.size(); ++i)
      if (at[r][i]) stage_rows[r][i] = static_cast<double>(at[r][i]->stage);
  page.Heading("Stages side by side");
  page.Paragraph(
      "Rows: the runs in the order given; columns: steps " +
      (steps.empty() ? std::string("-") : fmt::format("{} .. {}", steps.front(), steps.back())) +
      "; 0 none, 1 early, 2 transitional, 3 converged (-1: no checkpoint at that step).");
  report::HeatmapOptions ho;
  ho.title = "stage per run";
  ho.row_label = "run";
  ho.col_label = "checkpoint";
  ho.min_value = -1;
  ho.max_value = 3;
  ho.annotate = steps.size() <= 24;
  page.Raw(report::Heatmap(stage_rows, ho));
  page.Heading("Side by side");
  page.Table(SideBySideRows(runs, points));
  return page.Render();
}

}  // namespace ss::trace
