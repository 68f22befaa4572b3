#include "analysis/analyze_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "common/sha256.h"
#include "model/precision.h"
#include "report/report.h"

namespace ss::analysis {

ModelIdentity IdentifyModel(const Model& model, int64_t hash_limit_bytes) {
  const ModelConfig& c = model.config;
  ModelIdentity id;
  id.path = model.source;
  id.format = model.format;
  id.arch = c.arch;
  id.n_layers = c.n_layers;
  id.n_heads = c.n_heads;
  id.n_kv_heads = c.n_kv_heads;
  id.dim = c.dim;
  id.head_dim = c.head_dim;
  id.hidden_dim = c.hidden_dim;
  id.vocab_size = c.vocab_size;
  id.max_seq_len = c.max_seq_len;
  id.parameters = model.ParameterCount();
  id.precision = PrecisionName(model.precision);
  id.activations = ActivationsName(model);
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!model.source.empty() && fs::is_regular_file(model.source, ec)) {
    id.file_bytes = static_cast<int64_t>(fs::file_size(model.source, ec));
    if (id.file_bytes <= hash_limit_bytes) id.sha256 = Sha256File(model.source);
  } else if (!model.source.empty() && fs::is_directory(model.source, ec)) {
    id.file_bytes = 0;
    for (const auto& e : fs::directory_iterator(model.source, ec))
      if (e.is_regular_file(ec)) id.file_bytes += static_cast<int64_t>(e.file_size(ec));
  }
  return id;
}

namespace {

using nlohmann::json;

// [a][b] nested arrays from a flat (a, b) vector.
template <typename T>
json Nested2(const std::vector<T>& flat, int a, int b) {
  json out = json::array();
  for (int i = 0; i < a; ++i)
    out.push_back(std::vector<T>(flat.begin() + static_cast<size_t>(i) * b,
                                 flat.begin() + static_cast<size_t>(i + 1) * b));
  return out;
}

json ActivationJson(const Activation& a) {
  return {{"layer", a.layer},    {"sample", a.sample}, {"position", a.position},
          {"dim", a.dim},        {"value", a.value},   {"median_abs", a.median_abs},
          {"massive", a.massive}};
}

// What a Gated DeltaNet layer shows where attention metrics would be.
constexpr const char* kNoMap = "linear attention: no attention map";

json ConditionJson(const ConditionResult& r) {
  const int K = r.first_k, L = r.n_layers, H = r.n_heads;
  json j;
  j["name"] = ConditionName(r.condition);
  j["samples"] = r.samples;
  j["length"] = r.length;
  json alpha = json::array();
  for (int k = 0; k < K; ++k)
    alpha.push_back(
        Nested2(std::vector<double>(r.alpha.begin() + static_cast<size_t>(k) * L * H,
                                    r.alpha.begin() + static_cast<size_t>(k + 1) * L * H),
                L, H));
  j["alpha"] = alpha;
  j["sink_rate"] = r.sink_rate;
  j["sink_rate_per_layer"] = Nested2(r.sink_rate_per_layer, K, L);
  j["sink_rate_from_layer"] = Nested2(r.sink_rate_from_layer, K, L);
  j["sink_rate_of_mean_alpha"] = r.sink_rate_of_mean_alpha;
  j["sink_rate_of_mean_alpha_per_layer"] = Nested2(r.sink_rate_of_mean_alpha_per_layer, K, L);
  j["top_key"] = {{"share", Nested2(r.top_share, L, H)},
                  {"mode_position", Nested2(r.top_mode, L, H)},
                  {"mode_rate", Nested2(r.top_mode_rate, L, H)},
                  {"p0_rate", Nested2(r.top_p0_rate, L, H)}};
  j["p0_norm_ratio_per_layer"] = r.p0_norm_ratio;
  j["p1_norm_ratio_per_layer"] = r.p1_norm_ratio;
  j["max_other_norm_ratio_per_layer"] = r.max_other_norm_ratio;
  json top = json::array();
  for (const auto& layer : r.top_activations) {
    json row = json::array();
    for (const auto& a : layer) row.push_back(ActivationJson(a));
    top.push_back(row);
  }
  j["massive_activations"] = {{"criterion", "|x| > 100 and |x| > 1000 x median |x| of the layer"},
                              {"median_abs_per_layer", r.median_abs},
                              {"count_per_layer", r.massive_count},
                              {"top_per_layer", top}};
  j["p0_cosine_per_layer"] = r.p0_cosine;
  j["other_cosine_per_layer"] = r.other_cosine;
  json patterns = json::array();
  for (const auto& p : r.patterns) {
    // Which heads were captured; the T x T matrices themselves are shown in the HTML only (they
    // would make the JSON grow as T^2).
    patterns.push_back({{"layer", p.head.layer}, {"head", p.head.head}, {"length", p.T}});
  }
  j["patterns"] = patterns;
  j["layer_window"] = r.layer_window;
  json kinds = json::array();
  for (int l = 0; l < L; ++l) kinds.push_back(r.LinearLayer(l) ? "linear_attention" : "attention");
  j["layer_kind"] = kinds;
  if (!r.linear_layers.empty()) j["linear_attention"] = kNoMap;
  j["sink_rate_global_layers"] = r.sink_rate_global;
  j["sink_rate_sliding_layers"] =
      std::isnan(r.sink_rate_sliding) ? json(nullptr) : json(r.sink_rate_sliding);
  if (r.has_output_gate) {
    json closed = json::array();
    for (auto [l, h] : r.GateClosedSinks()) closed.push_back({{"layer", l}, {"head", h}});
    j["output_gate"] = {{"p0", r.gate_p0},
                        {"rest", r.gate_rest},
                        {"head_p0", Nested2(r.gate_head_p0, L, H)},
                        {"head_rest", Nested2(r.gate_head_rest, L, H)},
                        {"gated_alpha0", Nested2(r.gated_alpha0, L, H)},
                        {"gate_closed_sinks", closed}};
  }
  if (r.has_sigmoid_weights)
    j["sigmoid_weights"] = {{"alpha0_raw", Nested2(r.alpha0_raw, L, H)},
                            {"row_sum", Nested2(r.row_sum, L, H)}};
  if (r.has_sink_slot) {
    j["sink_slot"] = {{"alpha_sink", Nested2(r.alpha_sink, L, H)},
                      {"rate", r.sink_slot_rate},
                      {"rate_per_layer", r.sink_slot_rate_per_layer}};
  }
  return j;
}

std::string F(double v, int precision = 3) { return report::FormatNumber(v, precision); }

// What the output gates do to the sink, in words: the heads whose attention sinks (alpha_0 > eps)
// while their gate passes at most eps of it, or that no head does so.
std::string GateSentence(const ConditionResult& r) {
  const auto closed = r.GateClosedSinks();
  int sinking = 0;
  double alpha = 0, gated = 0;
  int heads = 0;
  for (int l = 0; l < r.n_layers; ++l)
    for (int h = 0; h < r.n_heads; ++h) {
      if (r.LinearLayer(l)) continue;
      const double a = r.Alpha(0, l, h);
      sinking += a > r.eps;
      alpha += a;
      gated += r.gated_alpha0[static_cast<size_t>(l) * r.n_heads + h];
      ++heads;
    }
  std::string out = fmt::format(
      "output gate ({}): over the {} gated heads, mean alpha_0 {} and gate-weighted alpha_0 {}; ",
      ConditionName(r.condition), heads, F(heads ? alpha / heads : 0),
      F(heads ? gated / heads : 0));
  if (sinking == 0) return out + fmt::format("no head puts more than {:g} on position 0\n", r.eps);
  if (closed.empty())
    return out + fmt::format(
                     "the gates pass the sink through: each of the {} head(s) with alpha_0 > {:g} "
                     "keeps more than {:g} of it after its gate\n",
                     sinking, r.eps, r.eps);
  std::vector<std::string> names;
  for (auto [l, h] : closed) {
    const size_t lh = static_cast<size_t>(l) * r.n_heads + h;
    names.push_back(fmt::format("{}:{} (alpha_0 {}, gated {}, gate {} at P0 / {} elsewhere)", l, h,
                                F(r.Alpha(0, l, h)), F(r.gated_alpha0[lh]), F(r.gate_head_p0[lh]),
                                F(r.gate_head_rest[lh])));
  }
  return out + fmt::format(
                   "the gate closes where the head sinks: {} of the {} head(s) with alpha_0 > "
                   "{:g} pass at most {:g} of it through their gate: {}\n",
                   closed.size(), sinking, r.eps, r.eps, fmt::join(names, ", "));
}

// Which carries the sink: position 0 (alpha_0), the learned slot (alpha_sink), both or neither,
// judged on the share of heads above eps (mean over samples).
std::string SinkCarrier(const ConditionResult& r) {
  // Shares below 1 % keep two significant digits, so a rare sink does not read as "0 %".
  auto pct = [](double share) {
    return share >= 0.01 ? fmt::format("{:.0f} % of heads", 100 * share)
                         : fmt::format("{:.2g} % of heads", 100 * share);
  };
  const double p0 = r.sink_rate[0];
  if (!r.has_sink_slot)
    return p0 > 0 ? fmt::format("position 0 ({})", pct(p0)) : "no head sinks on position 0";
  const double slot = r.sink_slot_rate;
  if (slot == 0 && p0 == 0) return "neither the learned sink slot nor position 0";
  if (slot > 0 && p0 == 0)
    return fmt::format("the learned sink slot ({}), not position 0", pct(slot));
  if (slot == 0) return fmt::format("position 0 ({}), not the learned sink slot", pct(p0));
  return fmt::format("both: the learned sink slot ({}) and position 0 ({})", pct(slot), pct(p0));
}

double LayerMeanAlpha(const ConditionResult& r, int k, int l) {
  double s = 0;
  for (int h = 0; h < r.n_heads; ++h) s += r.Alpha(k, l, h);
  return s / r.n_heads;
}

// Heads ordered by alpha_0, largest first.
std::vector<std::pair<int, int>> TopHeads(const ConditionResult& r, size_t count) {
  std::vector<std::pair<int, int>> heads;
  for (int l = 0; l < r.n_layers; ++l)
    for (int h = 0; h < r.n_heads; ++h)
      if (!r.LinearLayer(l)) heads.push_back({l, h});  // a linear layer has no alpha
  std::stable_sort(heads.begin(), heads.end(), [&](auto a, auto b) {
    return r.Alpha(0, a.first, a.second) > r.Alpha(0, b.first, b.second);
  });
  heads.resize(std::min(count, heads.size()));
  return heads;
}

// A (T, T) pattern reduced to at most `max_cells` x `max_cells` by averaging square blocks.
std::vector<std::vector<double>> Downsample(const std::vector<float>& m, int T, int max_cells) {
  const int block = (T + max_cells - 1) / max_cells;
  const int n = (T + block - 1) / block;
  std::vector<std::vector<double>> out(n, std::vector<double>(n, 0.0));
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < n; ++c) {
      double s = 0;
      int count = 0;
      for (int i = r * block; i < std::min(T, (r + 1) * block); ++i)
        for (int j = c * block; j < std::min(T, (c + 1) * block); ++j, ++count)
          s += m[static_cast<size_t>(i) * T + j];
      out[r][c] = s / std::max(count, 1);
    }
  return out;
}

}  // namespace

nlohmann::json ModelIdentityJson(const ModelIdentity& m) {
  return {{"path", m.path},
          {"format", m.format},
          {"arch", m.arch},
          {"n_layers", m.n_layers},
          {"n_heads", m.n_heads},
          {"n_kv_heads", m.n_kv_heads},
          {"dim", m.dim},
          {"head_dim", m.head_dim},
          {"hidden_dim", m.hidden_dim},
          {"vocab_size", m.vocab_size},
          {"max_seq_len", m.max_seq_len},
          {"parameters", m.parameters},
          {"file_bytes", m.file_bytes},
          {"sha256", m.sha256.empty() ? json(nullptr) : json(m.sha256)},
          {"precision", m.precision},
          {"activations", m.activations}};
}

nlohmann::json ReportJson(const AnalyzeReport& report) {
  const ModelIdentity& m = report.model;
  const AnalyzeSettings& s = report.settings;
  json j;
  j["schema"] = kAnalyzeSchema;
  j["model"] = ModelIdentityJson(m);
  j["settings"] = {{"source", s.source},
                   {"samples", s.samples},
                   {"length", s.length},
                   {"seed", s.seed},
                   {"first_k", s.first_k},
                   {"eps", s.eps},
                   {"attention_path", s.attn_path},
                   {"patterns", s.patterns},
                   {"allow_long_context", s.allow_long_context},
                   {"averaging",
                    "mean over samples of per-sample metrics; top_key.mode_* pooled "
                    "over all queries of all samples; cosines across samples"}};
  j["conditions"] = json::array();
  for (const auto& r : report.conditions) j["conditions"].push_back(ConditionJson(r));
  return j;
}

// A (layer, head) heatmap of `values` (L x H, flat) titled "<name>, <condition>".
static std::string LayerHeadHeatmap(const std::vector<double>& values, int L, int H,
                                    const std::string& name, const ConditionResult& r) {
  std::vector<std::vector<double>> grid(L, std::vector<double>(H));
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h) grid[l][h] = values[static_cast<size_t>(l) * H + h];
  report::HeatmapOptions o;
  o.title = name + ", " + ConditionName(r.condition);
  o.row_label = "layer";
  o.col_label = "head";
  return report::Heatmap(grid, o);
}

// Long on purpose: the output's sections in the order they are shown, one short block each;
// splitting it would only move the order out of sight.
std::string ReportSummary(const AnalyzeReport& report) {
  const auto& conds = report.conditions;
  if (conds.empty()) return "";
  const int L = conds[0].n_layers;
  std::string lengths;
  bool same_length = true;
  for (const auto& r : conds) same_length &= r.length == conds[0].length;
  if (same_length)
    lengths = std::to_string(conds[0].length);
  else
    for (const auto& r : conds)
      lengths += fmt::format("{}{} ({})", lengths.empty() ? "" : ", ", r.length,
                             ConditionName(r.condition));
  std::string out =
      fmt::format("{} sample(s) per condition of T = {} tokens\n\n", conds[0].samples, lengths);
  if (!conds[0].linear_layers.empty()) {
    std::vector<int> linear;
    for (int l = 0; l < L; ++l)
      if (conds[0].LinearLayer(l)) linear.push_back(l);
    out += fmt::format(
        "Gated DeltaNet layers {} ({} of {}): {}; their hidden-state metrics are reported as any "
        "layer's, and the sink rates count the heads of the {} attention layers\n\n",
        fmt::join(linear, " "), linear.size(), L, kNoMap, L - static_cast<int>(linear.size()));
  }
  // One narrow table per metric, conditions side by side.
  auto per_layer = [&](const std::string& title, auto value) {
    std::vector<std::vector<std::string>> rows;
    std::vector<std::string> header = {"layer"};
    for (const auto& r : conds) header.push_back(ConditionName(r.condition));
    rows.push_back(header);
    for (int l = 0; l < L; ++l) {
      std::vector<std::string> row = {std::to_string(l)};
      for (const auto& r : conds) {
        const double v = value(r, l);
        row.push_back(r.LinearLayer(l) && std::isnan(v) ? kNoMap : F(v));
      }
      rows.push_back(row);
    }
    return title + "\n" + report::FormatTable(rows);
  };
  out +=
      per_layer(fmt::format("Sink_0 (share of heads with alpha_0 > {:g}) per layer", conds[0].eps),
                [](const ConditionResult& r, int l) { return r.sink_rate_per_layer[l]; });
  std::string all = "all layers (mean of per-sample rates):";
  for (const auto& r : conds)
    all += fmt::format(" {}={}", ConditionName(r.condition), F(r.sink_rate[0]));
  std::string of_mean = "all layers (threshold on the mean alpha_0):";
  for (const auto& r : conds)
    of_mean += fmt::format(" {}={}", ConditionName(r.condition), F(r.sink_rate_of_mean_alpha[0]));
  out += all + "\n" + of_mean + "\n";
  if (!std::isnan(conds[0].sink_rate_sliding)) {
    // A sliding layer's queries past its window cannot see position 0 at all.
    std::string split = "global layers:";
    for (const auto& r : conds)
      split += fmt::format(" {}={}", ConditionName(r.condition), F(r.sink_rate_global));
    split += "; sliding-window layers:";
    for (const auto& r : conds)
      split += fmt::format(" {}={}", ConditionName(r.condition), F(r.sink_rate_sliding));
    out += split +
           " (Sink_0, reported apart: past its window a sliding layer cannot see position 0)\n";
  }
  if (conds[0].has_sink_slot) {
    out +=
        "\n" +
        per_layer(fmt::format("learned sink slot: share of heads with alpha_sink > {:g} per layer",
                              conds[0].eps),
                  [](const ConditionResult& r, int l) { return r.sink_slot_rate_per_layer[l]; });
    // The slot's mass beside position 0's, per layer and per head: which of the two the heads use.
    std::vector<std::vector<std::string>> rows = {{"layer"}};
    for (const auto& r : conds)
      for (const char* m : {"alpha_sink", "alpha_0"})
        rows[0].push_back(fmt::format("{} {}", m, ConditionName(r.condition)));
    for (int l = 0; l < L; ++l) {
      std::vector<std::string> row = {std::to_string(l)};
      for (const auto& r : conds) {
        double sum = 0;
        for (int h = 0; h < r.n_heads; ++h)
          sum += r.alpha_sink[static_cast<size_t>(l) * r.n_heads + h];
        row.push_back(F(sum / r.n_heads));
        row.push_back(F(LayerMeanAlpha(r, 0, l)));
      }
      rows.push_back(row);
    }
    out += "mean alpha_sink and alpha_0 over the layer's heads\n" + report::FormatTable(rows);
    std::vector<std::vector<std::string>> heads = {{"condition", "layer", "head", "alpha_sink",
                                                    "alpha_0", "", "layer", "head", "alpha_sink",
                                                    "alpha_0"}};
    for (const auto& r : conds) {
      // Heads ordered by alpha_sink: the three that use the slot most, and the three that use it
      // least.
      std::vector<std::pair<int, int>> order;
      for (int l = 0; l < r.n_layers; ++l)
        for (int h = 0; h < r.n_heads; ++h) order.push_back({l, h});
      auto slot = [&](std::pair<int, int> lh) {
        return r.alpha_sink[static_cast<size_t>(lh.first) * r.n_heads + lh.second];
      };
      std::stable_sort(order.begin(), order.end(),
                       [&](auto a, auto b) { return slot(a) > slot(b); });
      const size_t n = std::min<size_t>(3, order.size());
      for (size_t i = 0; i < n; ++i) {
        const auto top = order[i], low = order[order.size() - n + i];
        heads.push_back(
            {ConditionName(r.condition), std::to_string(top.first), std::to_string(top.second),
             F(slot(top)), F(r.Alpha(0, top.first, top.second)), "|", std::to_string(low.first),
             std::to_string(low.second), F(slot(low)), F(r.Alpha(0, low.first, low.second))});
      }
    }
    out += "heads with the most (left) and the least (right) mass on the sink slot\n" +
           report::FormatTable(heads);
  }
  if (conds[0].has_sigmoid_weights) {
    auto layer_mean = [](const std::vector<double>& v, const ConditionResult& r, int l) {
      double sum = 0;
      for (int h = 0; h < r.n_heads; ++h) sum += v[static_cast<size_t>(l) * r.n_heads + h];
      return sum / r.n_heads;
    };
    out +=
        "\nsigmoid attention: alpha and the top-key share are of each row's weights divided by "
        "their "
        "sum (Gu et al.'s proxy); the weights themselves:\n";
    out += per_layer("mean weight on position 0", [&](const ConditionResult& r, int l) {
      return layer_mean(r.alpha0_raw, r, l);
    });
    out += per_layer("mean row total (how much a query attends)",
                     [&](const ConditionResult& r, int l) { return layer_mean(r.row_sum, r, l); });
  }
  if (conds[0].has_output_gate) {
    out += "\n" + per_layer("output gate, mean at position 0",
                            [](const ConditionResult& r, int l) { return r.gate_p0[l]; });
    out += per_layer("output gate, mean at positions >= 1",
                     [](const ConditionResult& r, int l) { return r.gate_rest[l]; });
    out += per_layer(
        "gate-weighted alpha_0 (A[i,0] x the head's mean gate at query i), mean over the heads",
        [](const ConditionResult& r, int l) {
          double sum = 0;
          for (int h = 0; h < r.n_heads; ++h)
            sum += r.gated_alpha0[static_cast<size_t>(l) * r.n_heads + h];
          return sum / r.n_heads;
        });
    for (const auto& r : conds) out += GateSentence(r);
  }
  for (const auto& r : conds)
    out += fmt::format("sink carried by ({}): {}\n", ConditionName(r.condition), SinkCarrier(r));
  if (!conds[0].has_sink_slot)  // else in the table beside alpha_sink above
    out +=
        "\n" + per_layer("mean alpha_0 over the layer's heads",
                         [](const ConditionResult& r, int l) { return LayerMeanAlpha(r, 0, l); });
  out += "\n" + per_layer("P0 norm ratio ||h_0|| / median_{i>=1} ||h_i|| after each block",
                          [](const ConditionResult& r, int l) { return r.p0_norm_ratio[l]; });
  out += "\nTop sink heads by alpha_0 (top key: most frequent argmax position, share of queries)\n";
  const bool slot = conds[0].has_sink_slot;
  std::vector<std::vector<std::string>> heads = {
      {"condition", "layer", "head", "alpha_0", "alpha_1", "top key", "top share"}};
  if (slot) heads[0].push_back("alpha_sink");
  for (const auto& r : conds)
    for (auto [l, h] : TopHeads(r, 3)) {
      heads.push_back({ConditionName(r.condition), std::to_string(l), std::to_string(h),
                       F(r.Alpha(0, l, h)), r.first_k > 1 ? F(r.Alpha(1, l, h)) : "-",
                       fmt::format("pos {} ({})", r.top_mode[l * r.n_heads + h],
                                   F(r.top_mode_rate[l * r.n_heads + h], 2)),
                       F(r.top_share[l * r.n_heads + h])});
      if (slot) heads.back().push_back(F(r.alpha_sink[static_cast<size_t>(l) * r.n_heads + h]));
    }
  out += report::FormatTable(heads);

  out += "\nLargest activation per condition (massive: |x| > 100 and > 1000 x median |x|)\n";
  std::vector<std::vector<std::string>> acts = {
      {"condition", "layer", "position", "dim", "value", "median |x|", "massive entries"}};
  for (const auto& r : conds) {
    const Activation* best = nullptr;
    for (const auto& layer : r.top_activations)
      for (const auto& a : layer)
        if (!best || std::fabs(a.value) > std::fabs(best->value)) best = &a;
    int64_t total = std::accumulate(r.massive_count.begin(), r.massive_count.end(), int64_t{0});
    if (best)
      acts.push_back({ConditionName(r.condition), std::to_string(best->layer),
                      std::to_string(best->position), std::to_string(best->dim), F(best->value),
                      F(best->median_abs), std::to_string(total)});
  }
  out += report::FormatTable(acts);
  return out;
}

// Long on purpose: the output's sections in the order they are shown, one short block each;
// splitting it would only move the order out of sight.
std::string ReportHtml(const AnalyzeReport& report) {
  const ModelIdentity& m = report.model;
  const AnalyzeSettings& s = report.settings;
  const auto& conds = report.conditions;
  report::HtmlPage page("sinkscope analyze: " + std::filesystem::path(m.path).filename().string());
  page.Paragraph(fmt::format(
      "{} ({}, {}): {} layers, {} heads ({} key/value), width {}, vocabulary {}, context {}, {} "
      "parameters{}.",
      m.path, m.format, m.arch, m.n_layers, m.n_heads, m.n_kv_heads, m.dim, m.vocab_size,
      m.max_seq_len, m.parameters, m.sha256.empty() ? "" : ", sha256 " + m.sha256));
  page.Paragraph(fmt::format(
      "Input: {}. {} samples of {} tokens per condition, seed {}, eps {}, attention statistics "
      "from the {} path. Every metric is the mean over samples of the per-sample metric.",
      s.source, s.samples, s.length, s.seed, F(s.eps), s.attn_path));
  if (conds.empty()) return page.Render();
  const int L = conds[0].n_layers, H = conds[0].n_heads;
  std::vector<double> layers(L);
  std::iota(layers.begin(), layers.end(), 0.0);

  page.Heading("Sink rate per layer");
  page.Paragraph(
      "Sink_0^eps: share of the layer's heads whose alpha_0 (mean attention on position "
      "0 over all queries) exceeds eps (Gu et al. 2025).");
  {
    std::vector<report::Series> series;
    for (const auto& r : conds)
      series.push_back(
          {ConditionName(r.condition), layers,
           std::vector<double>(r.sink_rate_per_layer.begin(), r.sink_rate_per_layer.begin() + L)});
    report::ChartOptions o;
    o.title = fmt::format("Sink_0 (eps {}) per layer", F(s.eps));
    o.x_label = "layer";
    o.y_label = "share of heads";
    o.has_reference = true;
    o.reference_y = 1.0;
    o.reference_label = "all heads";
    page.Raw(report::LineChart(series, o));
  }
  if (conds[0].has_sink_slot) {
    page.Heading("Learned sink slot per head");
    page.Paragraph(fmt::format(
        "This model gives every head a learned sink logit (gpt-oss): the softmax runs over the "
        "keys and the slot, so a row's probabilities over the tokens sum to 1 - alpha_sink. "
        "alpha_sink: mean mass on the slot over all queries. Sink carried by: {}.",
        SinkCarrier(conds[0])));
    for (const auto& r : conds) page.Raw(LayerHeadHeatmap(r.alpha_sink, L, H, "alpha_sink", r));
  }
  if (conds[0].has_output_gate) {
    page.Heading("Output gate and the sink");
    std::string sentences;
    for (const auto& r : conds) sentences += GateSentence(r);
    page.Paragraph(
        "Each attention head's output is multiplied by a sigmoid gate of the block's input "
        "(gated attention, Qiu et al. 2025). Gate-weighted alpha_0: A[i,0] times the head's mean "
        "gate at query i, averaged over the queries: the share of the head's output that comes "
        "from position 0 once the gate has scaled it. " +
        sentences);
    for (const auto& r : conds)
      page.Raw(LayerHeadHeatmap(r.gated_alpha0, L, H, "gate-weighted alpha_0", r));
  }
  if (!std::isnan(conds[0].sink_rate_sliding)) {
    std::string windows;
    for (int l = 0; l < L; ++l)
      windows += fmt::format("{}{}", l ? ", " : "",
                             conds[0].layer_window[l] > 0
                                 ? fmt::format("{}: W {}", l, conds[0].layer_window[l])
                                 : fmt::format("{}: global", l));
    std::string rates;
    for (const auto& r : conds)
      rates +=
          fmt::format("{}{}: global {}, sliding {}", rates.empty() ? "" : "; ",
                      ConditionName(r.condition), F(r.sink_rate_global), F(r.sink_rate_sliding));
    page.Paragraph(fmt::format(
        "Sliding-window layers ({}). Past its window a sliding layer's queries cannot see position "
        "0, so its alpha_0 is low by construction; Sink_0 apart: {}.",
        windows, rates));
  }
  page.Heading("alpha_0 per head");
  for (const auto& r : conds) {
    std::vector<std::vector<double>> grid(L, std::vector<double>(H));
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < H; ++h) grid[l][h] = r.Alpha(0, l, h);
    report::HeatmapOptions o;
    o.title = "alpha_0, " + ConditionName(r.condition);
    o.row_label = "layer";
    o.col_label = "head";
    page.Raw(report::Heatmap(grid, o));
  }
  page.Heading("Hidden-state norms");
  page.Paragraph(
      "||h_0|| / median over i >= 1 of ||h_i|| after each block, beside the same ratio "
      "for position 1 and for the largest position >= 1.");
  // One chart per condition: three lines stay readable where twelve would not.
  for (const auto& r : conds) {
    std::vector<report::Series> series = {{"position 0", layers, r.p0_norm_ratio},
                                          {"position 1", layers, r.p1_norm_ratio},
                                          {"max over i >= 1", layers, r.max_other_norm_ratio}};
    report::ChartOptions o;
    o.title = "norm ratio per layer, " + ConditionName(r.condition);
    o.x_label = "layer (residual stream after the block)";
    o.y_label = "norm / median norm";
    o.width = 520;
    o.height = 260;
    o.has_reference = true;
    o.reference_y = 1.0;
    o.reference_label = "median";
    page.Raw(report::LineChart(series, o));
  }
  page.Heading("Direction consistency");
  {
    std::vector<report::Series> series;
    for (const auto& r : conds) {
      const std::string n = ConditionName(r.condition);
      series.push_back({n + " h_0", layers, r.p0_cosine});
      series.push_back({n + " i>=1", layers, r.other_cosine});
    }
    report::ChartOptions o;
    o.title = "mean pairwise cosine across samples";
    o.x_label = "layer";
    o.y_label = "cosine";
    page.Raw(report::LineChart(series, o));
    if (conds[0].samples < 2) page.Paragraph("Needs at least two samples: not defined for one.");
  }
  page.Heading("Top sink heads");
  {
    std::vector<std::vector<std::string>> rows = {{"condition", "layer", "head", "alpha_0",
                                                   "alpha_1", "top key position",
                                                   "share of queries", "mean top prob"}};
    for (const auto& r : conds)
      for (auto [l, h] : TopHeads(r, 5))
        rows.push_back({ConditionName(r.condition), std::to_string(l), std::to_string(h),
                        F(r.Alpha(0, l, h)), r.first_k > 1 ? F(r.Alpha(1, l, h)) : "-",
                        std::to_string(r.top_mode[l * H + h]), F(r.top_mode_rate[l * H + h]),
                        F(r.top_share[l * H + h])});
    page.Table(rows);
  }
  page.Heading("Massive activations");
  page.Paragraph(
      "Largest |x| per layer in the residual stream (Sun et al. 2024 call an activation "
      "massive when |x| > 100 and > 1000 x the layer's median |x|).");
  {
    std::vector<std::vector<std::string>> rows = {{"condition", "layer", "sample", "position",
                                                   "dim", "value", "median |x|", "massive",
                                                   "massive entries in layer"}};
    for (const auto& r : conds)
      for (int l = 0; l < L; ++l)
        for (const auto& a : r.top_activations[l])
          rows.push_back({ConditionName(r.condition), std::to_string(l), std::to_string(a.sample),
                          std::to_string(a.position), std::to_string(a.dim), F(a.value),
                          F(a.median_abs), a.massive ? "yes" : "no",
                          std::to_string(r.massive_count[l])});
    page.Table(rows);
  }
  bool any_pattern = false;
  for (const auto& r : conds) any_pattern |= !r.patterns.empty();
  if (any_pattern) {
    page.Heading("Attention patterns");
    page.Paragraph(
        "Mean over samples of A[i][j] (query i down, key j across); long sequences are "
        "shown averaged over square blocks.");
    for (const auto& r : conds)
      for (const auto& p : r.patterns) {
        auto grid = Downsample(p.mean, p.T, 128);
        double mx = 0;
        for (const auto& row : grid)
          for (double v : row) mx = std::max(mx, v);
        report::HeatmapOptions o;
        o.title = fmt::format("{}: layer {} head {}", ConditionName(r.condition), p.head.layer,
                              p.head.head);
        o.row_label = "query";
        o.col_label = "key";
        o.max_value = mx > 0 ? mx : 1.0;
        o.cell = std::max(2, 384 / static_cast<int>(grid.size()));
        o.annotate = false;
        o.raster = true;
        page.Raw(report::Heatmap(grid, o));
      }
  }
  return page.Render();
}

}  // namespace ss::analysis
