#include "explain/explain_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "report/report.h"

namespace ss::explain {

using json = nlohmann::json;
using report::FormatNumber;

namespace {

// JSON has no NaN: non-finite numbers become null.
json Num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
json Layer(int l) { return l >= 0 ? json(l) : json(nullptr); }

// The effect quantities of a row, as measured or as estimated.
json Values(const EffectValues& v) {
  return {{"sink_after", Num(v.sink_after)},
          {"removed_share", Num(v.removed_share)},
          {"norm_ratio_after", Num(v.norm_ratio_after)},
          {"target_share", Num(v.target_share)},
          {"alpha0_share", Num(v.alpha0_share)}};
}
EffectValues MeasuredValues(const InterventionEffect& e) {
  EffectValues v;
  v.sink_after = e.sink_after;
  v.removed_share = e.removed_share;
  v.norm_ratio_after = e.norm_ratio_after;
  v.target_share = e.target_share;
  v.alpha0_share = e.alpha0_share;
  return v;
}

// How the table was made, for the summary and the page: rows estimated and measured, and how well
// the estimates ranked the measured rows.
std::string DescribeEstimates(const ExplainResult& r) {
  const EstimateSummary& es = r.estimates;
  auto rho = [](double v) {
    return std::isfinite(v) ? fmt::format("{:.3f}", v) : std::string("undefined");
  };
  const StoppingSummary& st = r.stopping;
  auto bound = [](double v) {
    return std::isfinite(v) ? fmt::format("{:.3f}", v) : std::string("-");
  };
  std::string stopping = fmt::format("measured on {} of at most {} intervention samples ({}",
                                     st.used, st.upper_bound, st.reason);
  if (st.early_stop && std::isfinite(st.circuit_lower))
    stopping += fmt::format(
        "; {:.0f}% bounds on the circuit's removed share: lower {}, upper {}{}",
        100 * st.confidence, bound(st.circuit_lower), bound(st.circuit_upper),
        std::isfinite(st.subset_upper)
            ? fmt::format(", its one-smaller subsets at most {}", bound(st.subset_upper))
            : std::string());
  stopping += ")";
  return fmt::format(
      "{} MLP / head / patch rows estimated by recomputing position 0 on {} sample(s) ({}), {} of "
      "them "
      "measured exactly ({}), {}; the circuit search uses measured rows only. Spearman rank "
      "correlation, estimate vs measured over the {} measured rows: Sink_0 share removed in layers "
      ">= {} {}, alpha_0 mass removed {}, P0 norm ratio after {}",
      es.candidates, es.samples,
      fmt::format("{} position-0 sweeps, {} one-token block evaluations", es.recompute_calls,
                  es.recompute_rows),
      es.verified,
      es.exhaustive ? "--exhaustive" : fmt::format("the best {} by estimate", es.verify_top),
      stopping, es.verified, es.target_from_layer, rho(es.spearman_target), rho(es.spearman_alpha0),
      rho(es.spearman_norm_ratio));
}

std::string EffectName(const InterventionEffect& e) {
  if (e.kind == "head-zero" || e.kind == "head-mean")
    return fmt::format("{} {}.{}", e.kind, e.layer, e.head);
  if (e.kind == "set") return "set (--ablate)";
  if (e.layer >= 0) return fmt::format("{} {}", e.kind, e.layer);
  return e.kind;
}

// The interventions worth showing: every MLP / patch / input row, and the heads whose ablation
// changed the downstream sink (all heads would be L x H rows).
std::vector<const InterventionEffect*> ShownEffects(const ExplainResult& r, size_t max_heads) {
  std::vector<const InterventionEffect*> out, heads;
  for (const auto& e : r.interventions) {
    if (e.kind == "head-zero" || e.kind == "head-mean")
      heads.push_back(&e);
    else
      out.push_back(&e);
  }
  std::stable_sort(heads.begin(), heads.end(), [](auto* a, auto* b) {
    return std::fabs(a->removed_share) > std::fabs(b->removed_share);
  });
  for (size_t i = 0; i < std::min(max_heads, heads.size()); ++i) out.push_back(heads[i]);
  return out;
}

std::string Describe(const ExplainResult& r) {
  if (r.verdict == "no-sink")
    return fmt::format(
        "no layer has Sink_0^{} above {} and no other position draws a sink; "
        "there is no sink to explain",
        r.options.eps, r.options.onset_threshold);
  if (r.verdict == "sink-on-learned-slot")
    return fmt::format(
        "heads put their sink mass on the learned sink slot (from layer {}; {:.0f}% "
        "of heads have alpha_sink > {}), and no layer sinks on position 0: the sink "
        "is a parameter, not a position, so there is no position-0 circuit",
        r.slot_onset_layer, 100 * r.sink_slot_rate, r.options.eps);
  if (r.verdict == "sink-not-at-p0")
    return fmt::format("heads sink on a position other than 0 (from layer {}), not on position 0",
                       r.other_sink_layer);
  std::string names;
  for (const auto& c : r.circuit.components) names += (names.empty() ? "" : ", ") + c.Name();
  if (r.verdict == "sink-suppressed-by-output-gate") {
    double most = 0;
    int at = -1;
    for (size_t l = 0; l < r.layers.size(); ++l)
      if (!r.layers[l].linear && r.layers[l].gated_sink_rate >= most)
        most = r.layers[l].gated_sink_rate, at = static_cast<int>(l);
    return fmt::format(
        "the attention maps sink on position 0 from layer {}, but the output gates close on it: in "
        "no layer do more than {:.0f}% of heads pass more than {} of it through their gate "
        "(gate-weighted alpha_0; at most {:.0f}%, layer {}){}",
        r.onset_layer, 100 * r.options.onset_threshold, r.options.eps, 100 * most, at,
        r.circuit.found ? fmt::format("; the map's sink is made by {{{}}}", names) : "");
  }
  if (r.verdict == "p0-sink-no-circuit-found")
    return fmt::format(
        "P0 sink from layer {}, but no set of up to {} components removes {:.0f}% of "
        "it (best {:.0f}%)",
        r.onset_layer, r.options.max_components, 100 * r.options.share,
        100 * r.circuit.removed_share);
  return fmt::format(
      "P0 sink from layer {}; ablating {{{}}} at position 0 removes {:.0f}% of the "
      "sink in layers >= {}",
      r.onset_layer, names, 100 * r.circuit.removed_share, r.circuit.from_layer);
}

}  // namespace

// Long on purpose: the schema's keys in the order the document has them, one short block each;
// splitting it would only move the order out of sight.
json ReportJson(const ExplainReport& rep) {
  const ExplainResult& r = rep.result;
  const analysis::ModelIdentity& m = rep.model;
  json j;
  j["schema"] = kExplainSchema;
  j["verdict"] = r.verdict;
  j["summary"] = Describe(r);
  j["model"] = analysis::ModelIdentityJson(m);
  const ExplainOptions& o = r.options;
  j["settings"] = {
      {"source", rep.source},
      {"condition", rep.condition},
      {"seed", rep.seed},
      {"samples", r.samples},
      {"length", r.length},
      {"eps", o.eps},
      {"amplification_threshold", o.amplification_threshold},
      {"onset_threshold", o.onset_threshold},
      {"share", o.share},
      {"max_components", o.max_components},
      {"greedy_width", o.greedy_width},
      {"ablation", AblationName(o.ablation)},
      {"verify", o.exhaustive ? "all" : "top"},
      {"verify_top", o.verify_top},
      {"estimate_samples", o.estimate_samples},
      {"early_stop", o.early_stop},
      {"confidence", o.confidence},
      {"intervention_samples",
       std::min(r.samples, o.intervention_samples > 0 ? o.intervention_samples : r.samples)}};
  j["amplification_layer"] = Layer(r.amplification_layer);
  j["onset_layer"] = Layer(r.onset_layer);
  j["other_sink_layer"] = Layer(r.other_sink_layer);
  j["sink_rate"] = Num(r.sink_rate);
  if (r.has_sink_slot) {
    j["sink_slot_rate"] = Num(r.sink_slot_rate);
    j["slot_onset_layer"] = r.slot_onset_layer;
  }
  j["forward_passes"] = r.forward_passes;
  j["block_evaluations"] = r.block_evaluations;
  j["seconds"] = {{"clean", r.clean_seconds},
                  {"interventions", r.intervention_seconds},
                  {"estimate", r.estimate_seconds},
                  {"search", r.search_seconds}};
  const EstimateSummary& es = r.estimates;
  j["estimates"] = {{"method", "p0-recompute"},
                    {"verify", es.exhaustive ? "all" : "top"},
                    {"verify_top", es.verify_top},
                    {"candidates", es.candidates},
                    {"verified", es.verified},
                    {"target_from_layer", es.target_from_layer},
                    {"spearman",
                     {{"target_share", Num(es.spearman_target)},
                      {"alpha0_share", Num(es.spearman_alpha0)},
                      {"norm_ratio_after", Num(es.spearman_norm_ratio)}}},
                    {"recompute_calls", es.recompute_calls},
                    {"recompute_rows", es.recompute_rows},
                    {"samples", es.samples}};
  const StoppingSummary& st = r.stopping;
  j["stopping"] = {{"early_stop", st.early_stop},
                   {"confidence", st.confidence},
                   {"min_samples", st.min_samples},
                   {"upper_bound", st.upper_bound},
                   {"used", st.used},
                   {"reason", st.reason},
                   {"circuit_lower", Num(st.circuit_lower)},
                   {"circuit_upper", Num(st.circuit_upper)},
                   {"subset_upper", Num(st.subset_upper)}};
  json layers = json::array();
  for (size_t l = 0; l < r.layers.size(); ++l) {
    const LayerDecomposition& d = r.layers[l];
    json heads0 = json::array(), heads_o = json::array();
    for (double v : d.p0_head) heads0.push_back(Num(v));
    for (double v : d.other_head) heads_o.push_back(Num(v));
    json gated = json::array();
    for (double v : d.gated_alpha0) gated.push_back(Num(v));
    layers.push_back(
        {{"layer", l},
         {"kind", d.linear ? "linear_attention" : "attention"},
         {"gated_alpha0", d.gated_alpha0.empty() ? json(nullptr) : gated},
         {"gated_sink_rate", d.gated_alpha0.empty() ? json(nullptr) : Num(d.gated_sink_rate)},
         {"sink_rate", Num(d.sink_rate)},
         {"mean_alpha0", Num(d.mean_alpha0)},
         {"other_sink_rate", Num(d.other_sink_rate)},
         {"mean_alpha_sink", Num(d.mean_alpha_sink)},
         {"sink_slot_rate", Num(d.sink_slot_rate)},
         {"p0_norm_ratio", Num(d.p0_norm_ratio)},
         {"p0",
          {{"norm_pre", Num(d.p0_norm_pre)},
           {"norm_post", Num(d.p0_norm_post)},
           {"carry", Num(d.p0_carry)},
           {"attn", Num(d.p0_attn)},
           {"mlp", Num(d.p0_mlp)},
           {"unexplained", Num(d.p0_unexplained)},
           {"cos_pre", Num(d.p0_cos_pre)},
           {"cos_attn", Num(d.p0_cos_attn)},
           {"cos_mlp", Num(d.p0_cos_mlp)},
           {"attn_norm", Num(d.p0_attn_norm)},
           {"mlp_norm", Num(d.p0_mlp_norm)},
           {"heads", heads0}}},
         {"others",
          {{"norm_pre", Num(d.other_norm_pre)},
           {"norm_post", Num(d.other_norm_post)},
           {"carry", Num(d.other_carry)},
           {"attn", Num(d.other_attn)},
           {"mlp", Num(d.other_mlp)},
           {"cos_attn", Num(d.other_cos_attn)},
           {"cos_mlp", Num(d.other_cos_mlp)},
           {"heads", heads_o}}}});
  }
  j["layers"] = layers;
  json comps = json::array();
  for (const Component& c : r.circuit.components) {
    const std::string name = c.Name();
    json cj = {{"name", name},
               {"kind", name.substr(0, name.find('.'))},
               {"layer", c.layer},
               {"head", c.head >= 0 ? json(c.head) : json(nullptr)}};
    // Its measured effect alone (the row of the search's ablation).
    const std::string mode = AblationName(r.options.ablation);
    for (const auto& e : r.interventions)
      if (e.layer == c.layer &&
          ((c.kind == ComponentKind::kMlp && e.kind == "mlp-" + mode) ||
           (c.kind == ComponentKind::kMixer && e.kind == "mixer-" + mode) ||
           (c.kind == ComponentKind::kGate &&
            e.kind == (r.options.ablation == Ablation::kZero ? "gate-open" : "gate-mean")) ||
           (c.kind == ComponentKind::kHead && e.kind == "head-" + mode && e.head == c.head)))
        cj["alone"] = {{"sink_clean", Num(e.sink_clean)},
                       {"sink_after", Num(e.sink_after)},
                       {"removed_share", Num(e.removed_share)},
                       {"norm_ratio_clean", Num(e.norm_ratio_clean)},
                       {"norm_ratio_after", Num(e.norm_ratio_after)}};
    comps.push_back(cj);
  }
  const CircuitSearch& cs = r.circuit;
  json steps = json::array();
  for (double v : cs.removed_after_step) steps.push_back(Num(v));
  j["circuit"] = {{"ran", cs.ran},
                  {"found", cs.found},
                  {"from_layer", cs.ran ? json(cs.from_layer) : json(nullptr)},
                  {"sink_clean", Num(cs.target_clean)},
                  {"removed_share", Num(cs.removed_share)},
                  {"removed_after_step", steps},
                  {"components", comps}};
  json effects = json::array();
  for (const auto& e : r.interventions) {
    json ej = {{"kind", e.kind},
               {"layer", Layer(e.layer)},
               {"head", e.head >= 0 ? json(e.head) : json(nullptr)},
               {"samples", e.samples},
               {"sink_clean", Num(e.sink_clean)},
               {"sink_after", Num(e.sink_after)},
               {"removed_share", Num(e.removed_share)},
               {"norm_ratio_clean", Num(e.norm_ratio_clean)},
               {"norm_ratio_after", Num(e.norm_ratio_after)},
               {"target_share", Num(e.target_share)},
               {"alpha0_share", Num(e.alpha0_share)},
               {"method", e.Method()},
               {"rank", e.rank >= 0 ? json(e.rank) : json(nullptr)},
               {"estimate", e.estimated ? Values(e.estimate) : json(nullptr)},
               {"measured", e.measured ? Values(MeasuredValues(e)) : json(nullptr)}};
    if (e.sink1_after >= 0) ej["sink1_after"] = Num(e.sink1_after);
    effects.push_back(ej);
  }
  j["interventions"] = effects;
  json cones = json::array();
  for (const ConeFit& f : r.cones)
    cones.push_back({{"layer", f.layer},
                     {"head", f.head},
                     {"a", Num(f.a)},
                     {"correlation", Num(f.correlation)},
                     {"p0_predicted_max", Num(f.p0_predicted_max)},
                     {"p0_measured_max", Num(f.p0_measured_max)},
                     {"predicted_p0", Num(f.predicted_p0)},
                     {"measured_p0", Num(f.measured_p0)},
                     {"predicted_other", Num(f.predicted_other)},
                     {"measured_other", Num(f.measured_other)}});
  j["cones"] = cones;
  j["cone_normalisation"] =
      "measured ||o_i||^2 / mean_j ||v_j||^2 per head and sample; predicted "
      "a^2 + (1 - a^2) sum_j p_ij^2";
  return j;
}

std::string ReportSummary(const ExplainReport& rep) {
  const ExplainResult& r = rep.result;
  std::string out = fmt::format("verdict: {}\n  {}\n", r.verdict, Describe(r));
  out += fmt::format(
      "amplification layer (P0 norm ratio > {}): {}; sink onset layer (Sink_0 rate > {}): {}\n",
      r.options.amplification_threshold,
      r.amplification_layer >= 0 ? std::to_string(r.amplification_layer) : "none",
      r.options.onset_threshold, r.onset_layer >= 0 ? std::to_string(r.onset_layer) : "none");
  std::vector<std::vector<std::string>> rows{{"layer", "Sink_0", "other sink", "P0 ratio", "||h0||",
                                              "attn->h0", "mlp->h0", "attn->h_i", "mlp->h_i"}};
  const bool gated = std::any_of(r.layers.begin(), r.layers.end(),
                                 [](const auto& d) { return !d.gated_alpha0.empty(); });
  if (gated) rows[0].insert(rows[0].begin() + 2, "gated Sink_0");
  for (size_t l = 0; l < r.layers.size(); ++l) {
    const LayerDecomposition& d = r.layers[l];
    if (d.linear) {  // Gated DeltaNet: no attention map
      rows.push_back({std::to_string(l), "linear attention: no attention map", "",
                      FormatNumber(d.p0_norm_ratio), FormatNumber(d.p0_norm_post),
                      FormatNumber(d.p0_attn), FormatNumber(d.p0_mlp), FormatNumber(d.other_attn),
                      FormatNumber(d.other_mlp)});
      if (gated) rows.back().insert(rows.back().begin() + 2, "");
      continue;
    }
    rows.push_back({std::to_string(l), FormatNumber(d.sink_rate), FormatNumber(d.other_sink_rate),
                    FormatNumber(d.p0_norm_ratio), FormatNumber(d.p0_norm_post),
                    FormatNumber(d.p0_attn), FormatNumber(d.p0_mlp), FormatNumber(d.other_attn),
                    FormatNumber(d.other_mlp)});
    if (gated) rows.back().insert(rows.back().begin() + 2, FormatNumber(d.gated_sink_rate));
  }
  out += report::FormatTable(rows);
  std::vector<std::vector<std::string>> eff{{"intervention", "Sink_0 after layer: clean", "after",
                                             "removed", "P0 ratio clean", "after", "method",
                                             "estimated removed"}};
  for (const InterventionEffect* e : ShownEffects(r, 5))
    eff.push_back({EffectName(*e), FormatNumber(e->sink_clean), FormatNumber(e->sink_after),
                   FormatNumber(e->removed_share), FormatNumber(e->norm_ratio_clean),
                   FormatNumber(e->norm_ratio_after), e->Method(),
                   e->estimated ? FormatNumber(e->estimate.removed_share) : "-"});
  out += "interventions at position 0 (" + std::to_string(r.stopping.used) +
         " samples measured; the 5 heads with the largest effect; method p0-recompute: an "
         "estimate, not "
         "measured):\n" +
         report::FormatTable(eff);
  out += DescribeEstimates(r) + "\n";
  double corr = 0;
  int p0_meas = 0;
  for (const ConeFit& f : r.cones) {
    corr += f.correlation;
    p0_meas += f.p0_measured_max > 0.5;
  }
  if (!r.cones.empty())
    out += fmt::format(
        "cone model: mean correlation predicted vs measured {:.3f} over {} heads; "
        "position 0 has the largest measured norm in most samples for {} heads\n",
        corr / r.cones.size(), r.cones.size(), p0_meas);
  out += fmt::format(
      "{} forward passes ({} block evaluations, {} without resuming) and {} "
      "position-0 recomputations ({} one-token block evaluations)\n",
      r.forward_passes, r.block_evaluations, r.forward_passes * r.n_layers,
      r.estimates.recompute_calls, r.estimates.recompute_rows);
  return out;
}

std::string ReportHtml(const ExplainReport& rep) {
  const ExplainResult& r = rep.result;
  report::HtmlPage page("sinkscope explain: " + rep.model.path);
  page.Heading("Verdict: " + r.verdict, 1);
  page.Paragraph(Describe(r));
  page.Paragraph(fmt::format(
      "model {} ({} layers x {} heads); {} samples of {} tokens ({}, {}); eps {}", rep.model.path,
      r.n_layers, r.n_heads, r.samples, r.length, rep.condition, rep.source, r.options.eps));
  page.Heading("P0 norm decomposition per layer");
  page.Paragraph(
      "||h'_0|| = u.h_0 (carry) + u.attn_0 + u.mlp_0 with u = h'_0 / ||h'_0||: what each "
      "sublayer adds along the output direction.");
  report::Series carry{"carry", {}, {}}, attn{"attention", {}, {}}, mlp{"MLP", {}, {}},
      post{"||h'_0||", {}, {}}, other{"||h'_i|| (i >= 1)", {}, {}};
  for (size_t l = 0; l < r.layers.size(); ++l) {
    const double x = static_cast<double>(l);
    for (auto* s : {&carry, &attn, &mlp, &post, &other}) s->x.push_back(x);
    carry.y.push_back(r.layers[l].p0_carry);
    attn.y.push_back(r.layers[l].p0_attn);
    mlp.y.push_back(r.layers[l].p0_mlp);
    post.y.push_back(r.layers[l].p0_norm_post);
    other.y.push_back(r.layers[l].other_norm_post);
  }
  report::ChartOptions co;
  co.title = "P0 norm decomposition";
  co.x_label = "layer";
  co.y_label = "contribution to ||h'_0||";
  page.Raw(report::LineChart({carry, attn, mlp, post, other}, co));
  report::Series ratio{"P0 norm ratio", {}, {}}, sink{"Sink_0 rate", {}, {}};
  for (size_t l = 0; l < r.layers.size(); ++l) {
    ratio.x.push_back(l);
    ratio.y.push_back(r.layers[l].p0_norm_ratio);
    sink.x.push_back(l);
    sink.y.push_back(r.layers[l].sink_rate);
  }
  report::ChartOptions ro;
  ro.title = "P0 norm ratio";
  ro.x_label = "layer";
  ro.y_label = "ratio";
  ro.has_reference = true;
  ro.reference_y = r.options.amplification_threshold;
  ro.reference_label = "amplification threshold";
  page.Raw(report::LineChart({ratio}, ro));
  report::ChartOptions so = ro;
  so.title = "Sink_0 rate per layer";
  so.y_label = "share of heads";
  so.reference_y = r.options.onset_threshold;
  so.reference_label = "onset threshold";
  page.Raw(report::LineChart({sink}, so));
  std::vector<std::vector<double>> heads;
  for (const auto& d : r.layers) heads.push_back(d.p0_head);
  double lo = 0, hi = 0;
  for (const auto& row : heads)
    for (double v : row) lo = std::min(lo, v), hi = std::max(hi, v);
  report::HeatmapOptions ho;
  ho.title = "per-head contribution to ||h'_0||";
  ho.row_label = "layer";
  ho.col_label = "head";
  ho.min_value = lo;
  ho.max_value = hi > lo ? hi : lo + 1;
  page.Raw(report::Heatmap(heads, ho));
  page.Heading("Interventions at position 0");
  page.Paragraph(DescribeEstimates(r) +
                 ". Rows marked p0-recompute show the estimate: they were "
                 "not measured, and neither the circuit nor the verdict uses them.");
  std::vector<std::vector<std::string>> rows{
      {"intervention", "samples", "Sink_0 downstream (clean)", "after", "removed share",
       "P0 ratio clean", "after", "method", "estimated removed share", "rank"}};
  for (const InterventionEffect* e : ShownEffects(r, 20))
    rows.push_back({EffectName(*e), std::to_string(e->samples), FormatNumber(e->sink_clean),
                    FormatNumber(e->sink_after), FormatNumber(e->removed_share),
                    FormatNumber(e->norm_ratio_clean), FormatNumber(e->norm_ratio_after),
                    e->Method(), e->estimated ? FormatNumber(e->estimate.removed_share) : "-",
                    e->rank >= 0 ? std::to_string(e->rank) : "-"});
  page.Table(rows);
  page.Heading("Cone model");
  page.Paragraph(
      "Predicted E||o_i||^2 = a^2 + (1 - a^2) sum_j p_ij^2; measured ||o_i||^2 / mean_j "
      "||v_j||^2.");
  std::vector<std::vector<std::string>> cones{{"head", "a", "corr", "P0 max predicted",
                                               "P0 max measured", "pred P0", "meas P0", "pred i>=1",
                                               "meas i>=1"}};
  for (const ConeFit& f : r.cones)
    cones.push_back({fmt::format("{}.{}", f.layer, f.head), FormatNumber(f.a),
                     FormatNumber(f.correlation), FormatNumber(f.p0_predicted_max),
                     FormatNumber(f.p0_measured_max), FormatNumber(f.predicted_p0),
                     FormatNumber(f.measured_p0), FormatNumber(f.predicted_other),
                     FormatNumber(f.measured_other)});
  page.Table(cones);
  return page.Render();
}

}  // namespace ss::explain
