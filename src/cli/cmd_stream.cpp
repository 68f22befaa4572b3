// sinkscope stream: streaming perplexity through a bounded KV cache (StreamingLLM, Xiao et al.
// 2023). The text is fed token by token (teacher forcing); each token's NLL is recorded. Memory is
// flat in the text length: per-token rows go straight to the CSV's temporary file, and only
// per-block sums (one per 1,000 tokens) are kept.
#include <fmt/format.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "common/file_util.h"
#include "io/load.h"
#include "io/token_ids.h"
#include "report/report.h"
#include "stream/stream.h"
#include "tokenizer/find.h"
#include "tokenizer/tokenizer.h"

namespace ss::cli {

namespace fs = std::filesystem;

namespace {

constexpr int kBlock = 1000;  // tokens per perplexity block

struct RunResult {
  stream::Policy policy;
  int sinks = 0, window = 0, budget = 0;
  int64_t scored = 0;
  double sum_nll = 0;
  std::vector<double> block_sum;
  std::vector<int64_t> block_count;
  double seconds = 0;
  int64_t peak_kv_bytes = 0;
  double MeanNll() const { return scored ? sum_nll / scored : NAN; }
};

// Sinks and window actually used by a policy (window and recompute spend the S + W budget on
// recent tokens; dense keeps everything).
void EffectiveShape(const stream::StreamOptions& o, const Model& m, RunResult* r) {
  switch (o.policy) {
    case stream::Policy::kSinks: r->sinks = o.sinks, r->window = o.window; break;
    case stream::Policy::kWindow:
    case stream::Policy::kRecompute: r->sinks = 0, r->window = o.sinks + o.window; break;
    case stream::Policy::kDense: r->sinks = 0, r->window = m.config.max_seq_len; break;
  }
  r->budget = r->sinks + r->window;
}

// csv: null, or the open CSV; with_policy adds the policy column (--compare).
RunResult RunPolicy(const Model& model, const stream::StreamOptions& options,
                    const std::vector<int>& tokens, std::FILE* csv, bool with_policy) {
  RunResult r;
  r.policy = options.policy;
  EffectiveShape(options, model, &r);
  auto cache = stream::MakeStreamCache(model, options);
  const int V = model.config.vocab_size;
  const int64_t n = static_cast<int64_t>(tokens.size()) - 1;  // tokens scored
  report::Progress progress(fmt::format("stream {}", stream::PolicyName(options.policy)), n, "tok");
  const auto start = std::chrono::steady_clock::now();
  const char* name = stream::PolicyName(options.policy);
  for (int64_t i = 0; i < n; ++i) {
    Tensor logits = cache->Step(tokens[i]);
    const int64_t position = i + 1;  // position of the predicted token in the stream
    const double nll = stream::TokenNll(logits.data(), V, tokens[i + 1]);
    r.sum_nll += nll;
    const size_t block = static_cast<size_t>(position / kBlock);
    if (block >= r.block_sum.size()) {
      r.block_sum.push_back(0);
      r.block_count.push_back(0);
    }
    r.block_sum[block] += nll;
    r.block_count[block] += 1;
    if (csv) {
      if (with_policy) std::fprintf(csv, "%s,", name);
      std::fprintf(csv, "%lld,%d,%.6f\n", static_cast<long long>(position), tokens[i + 1], nll);
    }
    if ((i & 63) == 0) progress.Update(i);
  }
  progress.Update(n);
  progress.Finish();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.scored = n;
  r.peak_kv_bytes = cache->peak_kv_bytes();
  return r;
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

struct StreamArgs {
  std::string model, text, token_file, tokenizer, policy = "sinks", compare, csv, json, html;
  int sinks = 4, window = 252;
  int64_t max_tokens = 0;
  bool force = false, no_bos = false;
};

void RunStream(const StreamArgs& a) {
  CheckOutputs({{"--csv", a.csv}, {"--json", a.json}, {"--html", a.html}},
               SampleInputs(a.model, a.text, a.token_file, a.tokenizer));
  if (a.max_tokens < 0) Fail("--max-tokens: expected 0 (all) or more, got {}", a.max_tokens);
  std::vector<stream::Policy> policies;
  if (!a.compare.empty()) {
    for (const auto& p : SplitList(a.compare)) policies.push_back(stream::ParsePolicy(p, "--compare"));
    if (policies.empty()) Fail("--compare: expected a comma-separated list of policies, got '{}'", a.compare);
  } else {
    policies.push_back(stream::ParsePolicy(a.policy, "--policy"));
  }
  Model model = LoadModel(a.model);
  std::vector<stream::StreamOptions> options;
  for (auto p : policies) {
    stream::StreamOptions o;
    o.policy = p;
    o.sinks = a.sinks;
    o.window = a.window;
    o.force = a.force;
    stream::ValidateOptions(o, model.config);
    options.push_back(o);
  }
  if (a.text.empty() == a.token_file.empty()) Fail("stream: give --text FILE or --tokens FILE (one of them)");
  const std::string input = a.text.empty() ? a.token_file : a.text;
  const std::string input_flag = a.text.empty() ? "--tokens" : "--text";
  const std::string text = ReadInputFile(input, input_flag);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    Fail("{} {}: the file is empty; expected at least two tokens to score", input_flag, input);
  std::vector<int> tokens;
  if (!a.token_file.empty()) {
    tokens = ReadTokenIds(input, model.config.vocab_size);
  } else {
    auto tokenizer = FindTokenizer(model, a.tokenizer);
    try {
      tokens = tokenizer->Encode(text, /*add_bos=*/!a.no_bos && tokenizer->bos_id() >= 0);
    } catch (const Error& e) {
      Fail("--text {}: {}", a.text, e.what());
    }
  }
  if (a.max_tokens > 0 && static_cast<int64_t>(tokens.size()) > a.max_tokens) tokens.resize(a.max_tokens);
  if (tokens.size() < 2)
    Fail("{} {}: {} token(s); expected at least two (one to condition on, one to score)", input_flag,
         input, tokens.size());
  for (const auto& o : options) {
    if (o.policy == stream::Policy::kDense && !a.force &&
        static_cast<int64_t>(tokens.size()) > model.config.max_seq_len)
      Fail("--policy dense: the text has {} tokens, more than the model's context of {}; use "
           "--max-tokens {}, a streaming policy, or --force",
           tokens.size(), model.config.max_seq_len, model.config.max_seq_len);
  }
  Log(fmt::format("streaming {} tokens of {} through {} ({})", tokens.size(), input, a.model,
                  fmt::join(SplitList(a.compare.empty() ? a.policy : a.compare), ", ")));

  std::vector<RunResult> results;
  auto run_all = [&](std::FILE* csv) {
    results.clear();
    const bool with_policy = !a.compare.empty();
    if (csv) std::fprintf(csv, "%sposition,token,nll\n", with_policy ? "policy," : "");
    for (const auto& o : options) results.push_back(RunPolicy(model, o, tokens, csv, with_policy));
  };
  if (!a.csv.empty()) {
    WriteFileAtomic(a.csv, [&](std::FILE* f) { run_all(f); });
  } else {
    run_all(nullptr);
  }

  // Terminal table.
  std::vector<std::vector<std::string>> rows = {
      {"policy", "sinks", "window", "tokens", "mean NLL", "perplexity", "tokens/s", "peak KV"}};
  for (const auto& r : results) {
    rows.push_back({stream::PolicyName(r.policy), std::to_string(r.sinks), std::to_string(r.window),
                    std::to_string(r.scored), fmt::format("{:.4f}", r.MeanNll()),
                    fmt::format("{:.3f}", std::exp(r.MeanNll())),
                    fmt::format("{:.0f}", r.scored / std::max(r.seconds, 1e-9)),
                    fmt::format("{:.1f} KiB", r.peak_kv_bytes / 1024.0)});
  }
  std::fputs(report::FormatTable(rows).c_str(), stdout);

  if (!a.json.empty()) {
    nlohmann::json doc;
    doc["schema"] = "sinkscope.stream/1";
    doc["model"] = a.model;
    doc["text"] = input;
    doc["tokens"] = tokens.size();
    doc["bos"] = !a.no_bos;
    doc["block_size"] = kBlock;
    doc["settings"] = {{"sinks", a.sinks}, {"window", a.window}, {"force", a.force},
                       {"max_tokens", a.max_tokens}};
    doc["runs"] = nlohmann::json::array();
    for (const auto& r : results) {
      nlohmann::json blocks = nlohmann::json::array();
      for (size_t b = 0; b < r.block_sum.size(); ++b)
        blocks.push_back({{"first_position", std::max<int64_t>(1, b * kBlock)},
                          {"tokens", r.block_count[b]},
                          {"mean_nll", r.block_sum[b] / r.block_count[b]},
                          {"perplexity", std::exp(r.block_sum[b] / r.block_count[b])}});
      doc["runs"].push_back({{"policy", stream::PolicyName(r.policy)},
                             {"sinks", r.sinks},
                             {"window", r.window},
                             {"cache_entries", r.budget},
                             {"tokens_scored", r.scored},
                             {"mean_nll", r.MeanNll()},
                             {"perplexity", std::exp(r.MeanNll())},
                             {"blocks", blocks},
                             {"seconds", r.seconds},
                             {"tokens_per_second", r.scored / std::max(r.seconds, 1e-9)},
                             {"peak_kv_cache_bytes", r.peak_kv_bytes}});
    }
    report::WriteJson(a.json, doc);
  }
  if (!a.html.empty()) {
    report::HtmlPage page("sinkscope stream");
    page.Heading("Streaming perplexity", 1);
    page.Paragraph(fmt::format("Model {}, text {} ({} tokens), sinks {}, window {}. Perplexity of "
                               "each {}-token block as the text streams through the cache.",
                               a.model, input, tokens.size(), a.sinks, a.window, kBlock));
    page.Table(rows);
    std::vector<report::Series> series;
    double lo = INFINITY, hi = 0;
    for (const auto& r : results) {
      report::Series s;
      s.name = fmt::format("{} ({}+{})", stream::PolicyName(r.policy), r.sinks, r.window);
      for (size_t b = 0; b < r.block_sum.size(); ++b) {
        const double ppl = std::exp(r.block_sum[b] / r.block_count[b]);
        s.x.push_back(static_cast<double>(b * kBlock + r.block_count[b]));
        s.y.push_back(ppl);
        lo = std::min(lo, ppl);
        hi = std::max(hi, ppl);
      }
      series.push_back(std::move(s));
    }
    report::ChartOptions chart;
    chart.title = "Perplexity per 1,000-token block";
    chart.x_label = "position (tokens)";
    chart.y_label = "perplexity";
    chart.width = 760;
    chart.log_y = hi > 10 * lo;
    page.Raw(report::LineChart(series, chart));
    page.Save(a.html);
  }
}

}  // namespace

void RegisterStream(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "stream", "Streaming perplexity through a bounded KV cache (StreamingLLM attention sinks)");
  auto a = std::make_shared<StreamArgs>();
  cmd->add_option("--model", a->model, "Model file or directory")->required();
  cmd->add_option("--text", a->text, "UTF-8 text file to stream");
  cmd->add_option("--tokens", a->token_file,
                  "Token ids to stream instead of a text (whitespace-separated, e.g. from `train --write-stream`)");
  cmd->add_option("--tokenizer", a->tokenizer, "Tokenizer (default: found beside the model)");
  cmd->add_option("--policy", a->policy, "dense | window | sinks | recompute")->default_val("sinks");
  cmd->add_option("--sinks", a->sinks, "S initial tokens kept (window/recompute use S + W recent)")
      ->default_val(4);
  cmd->add_option("--window", a->window, "W most recent tokens kept (the current one included)")
      ->default_val(252);
  cmd->add_option("--max-tokens", a->max_tokens, "Stream at most N tokens (0: all)");
  cmd->add_option("--compare", a->compare, "Several policies on the same text, e.g. window,sinks,recompute");
  cmd->add_option("--csv", a->csv, "Per-token NLL: position,token,nll (policy first with --compare)");
  cmd->add_option("--json", a->json, "Summary (schema sinkscope.stream/1)");
  cmd->add_option("--html", a->html, "Report page with a perplexity-vs-position chart");
  cmd->add_flag("--force", a->force, "Allow S + W beyond the model's context (or dense beyond it)");
  cmd->add_flag("--no-bos", a->no_bos, "Do not start the stream with BOS");
  cmd->callback([a] { RunStream(*a); });
}

}  // namespace ss::cli
