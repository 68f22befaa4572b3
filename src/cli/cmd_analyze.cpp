// sinkscope analyze --model PATH [--text FILE | --prompt TEXT | --tokens FILE] [--conditions LIST]
//   [--samples N] [--length T] [--seed S] [--first-k K] [--eps E] [--patterns SPEC]
//   [--json OUT] [--html OUT] [--allow-long-context]
// Measures a model's attention sinks under first-token conditions (docs/ANALYZE.md). Every flag is
// checked, and the output paths too, before the model runs; outputs are written atomically at the end.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "analysis/analyze.h"
#include "analysis/analyze_report.h"
#include "analysis/conditions.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "common/error.h"
#include "common/file_util.h"
#include "io/load.h"
#include "model/precision.h"
#include "report/report.h"
#include "tokenizer/find.h"

namespace ss::cli {
namespace {

struct AnalyzeArgs {
  std::string model;
  std::string text_file;
  std::string prompt;
  std::string tokens_file;
  std::string tokenizer;
  std::string conditions = "bos,no-bos,random-p0,repeat";
  int samples = 64;
  int length = 64;
  uint64_t seed = 0;
  int first_k = 4;
  double eps = 0.3;
  std::string patterns;
  std::string json;
  std::string html;
  std::string attn_path = "fused";
  std::string precision = "f32";
  bool allow_long_context = false;
  bool has_prompt = false;
};

void Validate(const AnalyzeArgs& a) {
  if (!(a.eps > 0.0 && a.eps <= 1.0)) Fail("--eps: expected a threshold in (0, 1], got {}", a.eps);
  if (a.samples < 1) Fail("--samples: expected at least 1, got {}", a.samples);
  if (a.length < 2) Fail("--length: expected at least 2 tokens, got {}", a.length);
  if (a.first_k < 1 || a.first_k > 64) Fail("--first-k: expected 1..64, got {}", a.first_k);
  if (a.has_prompt && a.prompt.empty()) Fail("--prompt: the prompt is empty");
  if (a.attn_path != "fused" && a.attn_path != "materialised")
    Fail("--attention: expected fused or materialised, got '{}'", a.attn_path);
  ParsePrecision(a.precision);
  analysis::ParseConditions(a.conditions, "--conditions");
  if (!a.json.empty()) CheckWritable(a.json, "--json");
  if (!a.html.empty()) CheckWritable(a.html, "--html");
  if (!a.json.empty() && a.json == a.html) Fail("--json and --html name the same file {}", a.json);
}

void RunAnalyze(AnalyzeArgs a) {
  Validate(a);
  const auto conditions = analysis::ParseConditions(a.conditions, "--conditions");
  Model model = LoadModel(a.model);
  ApplyPrecision(model, a.precision);
  const ModelConfig& c = model.config;
  const auto heads = analysis::ParsePatternSpec(a.patterns, c, "--patterns");

  // The token stream (text tokens, no BOS) and where it came from.
  const SampleStream input =
      ReadSampleStream(model, a.text_file, a.prompt, a.has_prompt, a.tokens_file, a.tokenizer);
  const std::vector<int>& stream = input.tokens;
  const std::string& source = input.source;
  const std::string& flag = input.flag;

  analysis::SampleSpec spec{a.samples, a.length, a.seed, c.vocab_size, c.bos_id, c.eos_id};
  std::vector<std::vector<std::vector<int>>> samples;
  for (analysis::Condition cond : conditions) {
    if (a.has_prompt) {
      samples.push_back({analysis::PromptSample(stream, cond, spec)});
    } else {
      samples.push_back(analysis::BuildSamples(stream, cond, spec, flag));
    }
  }
  int T = 0;
  for (const auto& s : samples) T = std::max(T, static_cast<int>(s[0].size()));
  if (T < 2) Fail("{}: {} token(s); the analysis needs at least 2", flag, T);
  if (T < a.first_k) Fail("--first-k: K = {} is larger than the {} tokens per sample", a.first_k, T);
  if (c.max_seq_len > 0 && T > c.max_seq_len) {
    if (c.rope == RopeKind::kNone)
      Fail("--length: T = {} exceeds the model's context of {} tokens, and its learned position "
           "embeddings have no entries beyond it", T, c.max_seq_len);
    if (!a.allow_long_context)
      Fail("--length: T = {} exceeds the model's trained context of {} tokens; pass "
           "--allow-long-context to run a RoPE model past it anyway", T, c.max_seq_len);
    Log(fmt::format("note: T = {} is beyond the trained context of {} tokens (--allow-long-context)",
                    T, c.max_seq_len));
  }
  if (a.has_prompt) a.samples = 1;

  analysis::AnalyzeOptions options;
  options.first_k = a.first_k;
  options.eps = a.eps;
  options.path = a.attn_path == "fused" ? analysis::AttnPath::kFused
                                        : analysis::AttnPath::kMaterialised;
  options.patterns = heads;
  analysis::AnalyzeReport rep;
  for (size_t i = 0; i < conditions.size(); ++i) {
    report::Progress progress("analyze " + analysis::ConditionName(conditions[i]),
                              static_cast<int64_t>(samples[i].size()), "samples");
    options.progress = [&](int64_t done, int64_t) { progress.Update(done); };
    rep.conditions.push_back(analysis::AnalyzeSamples(model, conditions[i], samples[i], options));
    progress.Finish();
  }
  rep.model = analysis::IdentifyModel(model);
  rep.settings = {source, a.samples, T, a.seed, a.first_k, a.eps, a.attn_path, a.patterns,
                  a.allow_long_context};

  // Render everything first, then write: a failure leaves no half of the outputs behind.
  const std::string summary = analysis::ReportSummary(rep);
  std::string json_text, html_text;
  if (!a.json.empty()) json_text = analysis::ReportJson(rep).dump(2) + "\n";
  if (!a.html.empty()) html_text = analysis::ReportHtml(rep);
  fmt::print("model {} ({}, {} layers x {} heads); {}\n", model.source, model.format, c.n_layers,
             c.n_heads, source);
  fmt::print("{}", summary);
  WriteReports(a.json, json_text, a.html, html_text);
}

}  // namespace

void RegisterAnalyze(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "analyze", "Measure a model's attention sinks (alpha_k, Sink_k^eps, P0 norms, massive "
                 "activations) with and without BOS");
  auto a = std::make_shared<AnalyzeArgs>();
  cmd->add_option("--model", a->model, "Model file or directory")->required();
  auto* text = cmd->add_option("--text", a->text_file, "Text file to cut random windows from "
                                                       "(default: the shipped data/default_text.txt)");
  auto* prompt = cmd->add_option("--prompt", a->prompt, "One sample: this text");
  auto* tokens = cmd->add_option("--tokens", a->tokens_file,
                                 "Token ids (whitespace-separated) to cut random windows from");
  text->excludes(prompt)->excludes(tokens);
  prompt->excludes(tokens);
  cmd->add_option("--tokenizer", a->tokenizer,
                  "Tokenizer file (default: found beside or inside the model)");
  cmd->add_option("--conditions", a->conditions, "Comma-separated: bos,no-bos,random-p0,repeat")
      ->capture_default_str();
  cmd->add_option("--samples", a->samples, "Samples per condition (N)")->capture_default_str();
  cmd->add_option("--length", a->length, "Tokens per sample (T)")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed for windows and random first tokens")->capture_default_str();
  cmd->add_option("--first-k", a->first_k, "K: alpha_k for k < K")->capture_default_str();
  cmd->add_option("--eps", a->eps, "Sink threshold on alpha_k, in (0, 1]")->capture_default_str();
  cmd->add_option("--patterns", a->patterns,
                  "Heads whose full pattern to keep for the HTML, e.g. 0:3,1:* (layer:head)");
  cmd->add_option("--attention", a->attn_path,
                  "fused (statistics inside the kernel) or materialised (full patterns per layer)")
      ->capture_default_str();
  AddPrecisionOption(cmd, &a->precision);
  cmd->add_option("--json", a->json, "Write the results as JSON (schema sinkscope.analyze/1)");
  cmd->add_option("--html", a->html, "Write a self-contained HTML report");
  cmd->add_flag("--allow-long-context", a->allow_long_context,
                "Allow T beyond the model's trained context (RoPE models only)");
  cmd->callback([a, prompt] {
    AnalyzeArgs args = *a;
    args.has_prompt = prompt->count() > 0;
    RunAnalyze(args);
  });
}

}  // namespace ss::cli
