// sinkscope stream: streaming perplexity through a bounded KV cache (StreamingLLM, Xiao et al.
// 2023). The text is fed token by token (teacher forcing); each token's NLL is recorded. Memory is
// flat in the text length: per-token rows go straight to the CSV's temporary file, and only
// per-block sums (one per 1,000 tokens) are kept.
#include <fmt/format.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/options.h"
#include "cli/verbs.h"
#include "common/file_util.h"
#include "io/load.h"
#include "io/token_ids.h"
#include "model/precision.h"
#include "report/report.h"
#include "stream/stream.h"
#include "tokenizer/find.h"
#include "tokenizer/tokenizer.h"

namespace ss::cli {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

struct StreamArgs {
  std::string model, text, token_file, tokenizer, compare, csv;
  std::string precision;  // empty: the file's
  CacheOptions cache;
  OutputOptions output;
  std::string compare_kv;
  int64_t max_tokens = 0;
  bool no_bos = false;
};

// The tokens to stream: --tokens ids, or --text encoded (BOS first unless --no-bos), cut to
// --max-tokens; at least two. *input_path: the file they came from.
std::vector<int> StreamTokens(const StreamArgs& a, const Model& model, std::string* input_path) {
  if (a.text.empty() == a.token_file.empty())
    Fail("stream: give --text FILE or --tokens FILE (one of them)");
  const std::string& input = *input_path = a.text.empty() ? a.token_file : a.text;
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
  if (a.max_tokens > 0 && static_cast<int64_t>(tokens.size()) > a.max_tokens)
    tokens.resize(a.max_tokens);
  if (tokens.size() < 2)
    Fail("{} {}: {} token(s); expected at least two (one to condition on, one to score)",
         input_flag, input, tokens.size());
  return tokens;
}

// A cache's storage as the tables name it: "q8_0", "q8_0/q4_0", "q4_0+first:4".
std::string KvName(const StreamRun& r) {
  std::string name = r.k_type == r.v_type
                         ? KvTypeName(r.k_type)
                         : fmt::format("{}/{}", KvTypeName(r.k_type), KvTypeName(r.v_type));
  if (r.keep != "none") name += "+" + r.keep;
  return name;
}

// The terminal table: one row per policy, or with kv (--compare-kv) one per storage against the
// f32 cache (results[0]).
std::vector<std::vector<std::string>> StreamTable(const std::vector<StreamRun>& results, bool kv) {
  std::vector<std::vector<std::string>> rows;
  if (!kv) {
    rows.push_back({"policy", "sinks", "window", "kv", "tokens", "mean NLL", "perplexity",
                    "tokens/s", "peak KV"});
    for (const auto& r : results)
      rows.push_back({stream::PolicyName(r.policy), std::to_string(r.sinks),
                      std::to_string(r.window), KvName(r), std::to_string(r.scored),
                      fmt::format("{:.4f}", r.MeanNll()),
                      fmt::format("{:.3f}", std::exp(r.MeanNll())),
                      fmt::format("{:.0f}", r.scored / std::max(r.seconds, 1e-9)),
                      fmt::format("{:.1f} KiB", r.peak_kv_bytes / 1024.0)});
  } else {
    rows.push_back({"kv cache", "bytes/token", "vs f32", "perplexity", "vs f32", "mean KL",
                    "max KL", "tokens/s", "peak KV"});
    const StreamRun& ref = results[0];
    for (const auto& r : results)
      rows.push_back({KvName(r), std::to_string(r.kv_bytes_per_token),
                      fmt::format("{:.3f}x", static_cast<double>(r.kv_bytes_per_token) /
                                                 ref.kv_bytes_per_token),
                      fmt::format("{:.4f}", std::exp(r.MeanNll())),
                      fmt::format("{:+.4f}", std::exp(r.MeanNll()) - std::exp(ref.MeanNll())),
                      fmt::format("{:.2e}", r.scored > 0 ? r.sum_kl / r.scored : 0.0),
                      fmt::format("{:.2e}", r.max_kl),
                      fmt::format("{:.0f}", r.scored / std::max(r.seconds, 1e-9)),
                      fmt::format("{:.1f} KiB", r.peak_kv_bytes / 1024.0)});
  }
  return rows;
}

// The HTML page: the table and each run's perplexity per 1,000-token block. kv_policy: set when
// the runs compare cache storages (--compare-kv) under that policy.
void WriteStreamHtml(const StreamArgs& a, const std::string& input, size_t n_tokens,
                     const std::vector<std::vector<std::string>>& rows,
                     const std::vector<StreamRun>& results,
                     std::optional<stream::Policy> kv_policy) {
  report::HtmlPage page("sinkscope stream");
  page.Heading("Streaming perplexity", 1);
  page.Paragraph(
      fmt::format("Model {}, text {} ({} tokens), sinks {}, window {}. Perplexity of "
                  "each {}-token block as the text streams through the cache.",
                  a.model, input, n_tokens, a.cache.sinks, a.cache.window, kStreamBlock));
  if (kv_policy)
    page.Paragraph(
        fmt::format("Cache storage types beside the f32 cache, each fed the same tokens in "
                    "lockstep under the {} policy: perplexity, and the KL divergence of each "
                    "next-token distribution from the f32 cache's (mean and largest).",
                    stream::PolicyName(*kv_policy)));
  page.Table(rows);
  std::vector<report::Series> series;
  double lo = INFINITY, hi = 0;
  for (const auto& r : results) {
    report::Series s;
    s.name = !kv_policy ? fmt::format("{} ({}+{})", stream::PolicyName(r.policy), r.sinks, r.window)
                        : fmt::format("{} cache", KvName(r));
    for (size_t b = 0; b < r.block_sum.size(); ++b) {
      const double ppl = std::exp(r.block_sum[b] / r.block_count[b]);
      s.x.push_back(static_cast<double>(b * kStreamBlock + r.block_count[b]));
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
  page.Save(a.output.html);
}

void RunStream(const StreamArgs& a) {
  CheckOutputs({{"--csv", a.csv}, {"--json", a.output.json}, {"--html", a.output.html}},
               SampleInputs(a.model, a.text, a.token_file, a.tokenizer));
  if (a.max_tokens < 0) Fail("--max-tokens: expected 0 (all) or more, got {}", a.max_tokens);
  std::vector<stream::Policy> policies;
  if (!a.compare.empty()) {
    for (const auto& p : SplitList(a.compare))
      policies.push_back(stream::ParsePolicy(p, "--compare"));
    if (policies.empty())
      Fail("--compare: expected a comma-separated list of policies, got '{}'", a.compare);
  } else {
    policies.push_back(stream::ParsePolicy(a.cache.policy, "--policy"));
  }
  const bool typed = a.cache.kv.typed();  // the flags' domains, before the model loads
  std::vector<KvConfig> kv_configs;
  if (!a.compare_kv.empty()) {
    if (policies.size() != 1)
      Fail("--compare-kv compares cache types under one policy; drop --compare");
    if (typed || a.cache.kv.keep != "none")
      Fail("--compare-kv lists the cache types itself; drop --kv-type and --kv-keep");
    kv_configs = ParseKvConfigs(a.compare_kv, "--compare-kv");
  }
  Model model = LoadModelAt(a.model, a.precision);
  std::vector<stream::StreamOptions> options;
  for (auto p : policies) {
    stream::StreamOptions o = a.cache.Options(stream::PolicyName(p), "--policy");
    stream::ValidateOptions(o, model.config);
    options.push_back(o);
  }
  for (const KvConfig& c : kv_configs) {  // each storage checked before any work
    stream::StreamOptions o = options[0];
    o.k_type = c.k_type, o.v_type = c.v_type, o.keep = c.keep_indices;
    stream::ValidateOptions(o, model.config, {"--compare-kv", "--compare-kv", "--compare-kv"});
  }
  std::string input;
  const std::vector<int> tokens = StreamTokens(a, model, &input);
  for (const auto& o : options) {
    // The caches grow as the stream fills them: what this text fills must fit, not S + W.
    if (o.policy != stream::Policy::kDense)
      stream::CheckCacheMemory(model.config,
                               std::min<int64_t>(static_cast<int64_t>(o.sinks) + o.window,
                                                 static_cast<int64_t>(tokens.size())),
                               o, "--sinks + --window");
    if (o.policy == stream::Policy::kDense && !a.cache.force &&
        static_cast<int64_t>(tokens.size()) > model.config.max_seq_len)
      Fail(
          "--policy dense: the text has {} tokens, more than the model's context of {}; use "
          "--max-tokens {}, a streaming policy, or --force",
          tokens.size(), model.config.max_seq_len, model.config.max_seq_len);
  }
  LogPending();
  Log(fmt::format("streaming {} tokens of {} through {} ({})", tokens.size(), input, a.model,
                  fmt::join(SplitList(a.compare.empty() ? a.cache.policy : a.compare), ", ")));

  for (auto& o : options) a.cache.kv.Apply(model, tokens, &o);

  std::vector<StreamRun> results;
  auto run_all = [&](std::FILE* csv) {
    results.clear();
    const bool with_policy = !a.compare.empty();
    if (csv) std::fprintf(csv, "%sposition,token,nll\n", with_policy ? "policy," : "");
    for (const auto& o : options)
      results.push_back(RunStreamPolicy(model, o, tokens, csv, with_policy, /*keep_nll=*/false));
  };
  if (!kv_configs.empty()) {
    if (!a.csv.empty()) Fail("--csv is not written with --compare-kv (use --json)");
    results = RunKvComparison(model, options[0], kv_configs, tokens);
  } else if (!a.csv.empty()) {
    WriteFileAtomic(a.csv, [&](std::FILE* f) { run_all(f); });
  } else {
    run_all(nullptr);
  }

  const std::vector<std::vector<std::string>> rows = StreamTable(results, !kv_configs.empty());
  std::fputs(report::FormatTable(rows).c_str(), stdout);

  if (!a.output.json.empty()) {
    const StreamDocument doc{a.model,
                             input,
                             static_cast<int64_t>(tokens.size()),
                             !a.no_bos,
                             a.cache.sinks,
                             a.cache.window,
                             a.cache.force,
                             a.max_tokens,
                             PrecisionName(model.precision),
                             ActivationsName(model)};
    report::WriteJson(a.output.json, StreamJson(doc, results));
  }
  if (!a.output.html.empty())
    WriteStreamHtml(a, input, tokens.size(), rows, results,
                    kv_configs.empty() ? std::nullopt : std::optional(options[0].policy));
}

}  // namespace

void RegisterStream(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "stream", "Streaming perplexity through a bounded KV cache (StreamingLLM attention sinks)");
  auto a = std::make_shared<StreamArgs>();
  cmd->add_option("--max-tokens", a->max_tokens, "Stream at most N tokens (0: all)");
  cmd->add_option("--compare", a->compare,
                  "Several policies on the same text, e.g. window,sinks,recompute");
  cmd->add_option(
      "--compare-kv", a->compare_kv,
      "Cache types side by side against f32, e.g. bf16,q8_0,q4_0,q4_0+first:4,q4_0+detected "
      "(K/V may differ: q8_0/q4_0): perplexity, KL to f32, bytes per token");
  AddModelOptions(cmd, &a->model, &a->tokenizer, &a->precision, GgmlActivations::kInt8);
  InputFlags input;
  input.text = &a->text;
  input.text_note = "streamed (give --text or --tokens)";
  input.tokens = &a->token_file;
  input.tokens_note = "streamed instead of a text (e.g. from `train --write-stream`)";
  input.no_bos = &a->no_bos;
  AddInputOptions(cmd, input);
  a->cache.Add(cmd, {}, "and --policy dense beyond it");
  a->output.Add(cmd, /*html=*/true, "the summary", "a perplexity-vs-position chart");
  cmd->add_option("--csv", a->csv,
                  "Per-token NLL: position,token,nll (policy first with --compare)")
      ->group(OptionGroupName(OptionGroup::kOutput));
  cmd->callback([a] { RunStream(*a); });
}

}  // namespace ss::cli
