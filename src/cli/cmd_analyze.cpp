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
  SampleOptions input;
  ConditionOptions conditions;
  SinkOptions sink;
  std::string patterns;
  std::string json;
  std::string html;
  std::string attn_path = "fused";
  std::string precision = "f32";
  bool allow_long_context = false;
};

void Validate(const AnalyzeArgs& a) {
  const auto conditions = a.conditions.Parse(/*single=*/false);
  a.input.Validate(static_cast<int>(conditions.size()));
  a.sink.Validate();
  if (a.attn_path != "fused" && a.attn_path != "materialised")
    Fail("--attention: expected fused or materialised, got '{}'", a.attn_path);
  ParsePrecision(a.precision);
  CheckOutputs({{"--json", a.json}, {"--html", a.html}},
               SampleInputs(a.model, a.input.text_file, a.input.tokens_file, a.input.tokenizer));
}

void RunAnalyze(AnalyzeArgs a) {
  Validate(a);
  const auto conditions = a.conditions.Parse(/*single=*/false);
  Model model = LoadModel(a.model);
  ApplyPrecision(model, a.precision);
  const ModelConfig& c = model.config;
  const auto heads = analysis::ParsePatternSpec(a.patterns, c, "--patterns");
  const bool has_prompt = a.input.has_prompt();
  // --length against the context and the memory before the samples are cut (with --prompt, T
  // comes from the prompt and is checked below).
  if (!has_prompt) CheckLength(c, a.input.length, a.allow_long_context, /*has_allow_flag=*/true);

  // The token stream (text tokens, no BOS) and where it came from.
  const SampleStream input = ReadSampleStream(model, a.input.text_file, a.input.prompt, has_prompt,
                                              a.input.tokens_file, a.input.tokenizer);
  const std::vector<int>& stream = input.tokens;
  const std::string& source = input.source;
  const std::string& flag = input.flag;

  analysis::SampleSpec spec{a.input.samples, a.input.length, a.input.seed,
                            c.vocab_size,    c.bos_id,       c.eos_id};
  std::vector<std::vector<std::vector<int>>> samples;
  for (analysis::Condition cond : conditions) {
    if (has_prompt) {
      samples.push_back({analysis::PromptSample(stream, cond, spec)});
    } else {
      samples.push_back(analysis::BuildSamples(stream, cond, spec, flag));
    }
  }
  int T = 0;
  for (const auto& s : samples) T = std::max(T, static_cast<int>(s[0].size()));
  if (T < 2) Fail("{}: {} token(s); the analysis needs at least 2", flag, T);
  if (T < a.sink.first_k)
    Fail("--first-k: K = {} is larger than the {} tokens per sample", a.sink.first_k, T);
  CheckLength(c, T, a.allow_long_context, /*has_allow_flag=*/true);
  if (c.max_seq_len > 0 && T > c.max_seq_len)
    Log(fmt::format("note: T = {} is beyond the trained context of {} tokens (--allow-long-context)",
                    T, c.max_seq_len));
  if (has_prompt) a.input.samples = 1;

  analysis::AnalyzeOptions options;
  options.first_k = a.sink.first_k;
  options.eps = a.sink.eps;
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
  rep.settings = {source,     a.input.samples, T,          a.input.seed,        a.sink.first_k,
                  a.sink.eps, a.attn_path,     a.patterns, a.allow_long_context};

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
  a->input.Add(cmd, /*default_samples=*/64, /*prompt_and_tokens=*/true);
  a->conditions.Add(cmd, "bos,no-bos,random-p0,repeat",
                    "Comma-separated: bos,no-bos,random-p0,repeat");
  a->sink.Add(cmd, /*with_first_k=*/true);
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
  cmd->callback([a] { RunAnalyze(*a); });
}

}  // namespace ss::cli
