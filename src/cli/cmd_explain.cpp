// sinkscope explain --model PATH [--text FILE | --prompt TEXT | --tokens FILE] [--conditions C]
//   [--samples N] [--length T] [--seed S] [--eps E] [--amplification-threshold X]
//   [--onset-threshold X] [--share X] [--intervention-samples N] [--max-components N]
//   [--ablate SPEC] [--json OUT] [--html OUT]
// Locates the P0 sink circuit with interventions at position 0 and fits the cone model
// (explain/explain.h). Flags and output paths are checked before the model runs; outputs are
// rendered first and written atomically at the end, so a failure leaves no partial file.
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <sstream>

#include "analysis/analyze_report.h"
#include "analysis/conditions.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "common/error.h"
#include "common/file_util.h"
#include "explain/explain.h"
#include "explain/explain_report.h"
#include "io/load.h"
#include "model/precision.h"
#include "report/report.h"
#include "tokenizer/find.h"

namespace ss::cli {
namespace {

struct ExplainArgs {
  std::string model, text_file, prompt, tokens_file, tokenizer;
  std::string conditions = "bos";
  int samples = 16;
  int length = 64;
  uint64_t seed = 0;
  explain::ExplainOptions options;
  std::string ablate;
  std::string ablation = "mean";
  std::string json, html;
  std::string precision = "f32";
  bool has_prompt = false;
};

void RunExplain(ExplainArgs a) {
  explain::CheckOptions(a.options);
  ParsePrecision(a.precision);
  if (a.samples < 1) Fail("--samples: expected at least 1, got {}", a.samples);
  if (a.length < 4) Fail("--length: expected at least 4 tokens, got {}", a.length);
  if (a.has_prompt && a.prompt.empty()) Fail("--prompt: the prompt is empty");
  const auto conditions = analysis::ParseConditions(a.conditions, "--conditions");
  if (conditions.size() != 1)
    Fail("--conditions: explain runs one condition at a time, got '{}'", a.conditions);
  if (!a.json.empty()) CheckWritable(a.json, "--json");
  if (!a.html.empty()) CheckWritable(a.html, "--html");
  if (!a.json.empty() && a.json == a.html) Fail("--json and --html name the same file {}", a.json);

  Model model = LoadModel(a.model);
  ApplyPrecision(model, a.precision);
  const ModelConfig& c = model.config;
  a.options.ablate = explain::ParseComponents(a.ablate, c, "--ablate");
  if (a.ablation != "mean" && a.ablation != "zero")
    Fail("--ablation: expected mean or zero, got '{}'", a.ablation);
  a.options.ablation = a.ablation == "zero" ? explain::Ablation::kZero : explain::Ablation::kMean;
  const SampleStream input =
      ReadSampleStream(model, a.text_file, a.prompt, a.has_prompt, a.tokens_file, a.tokenizer);
  const std::vector<int>& stream = input.tokens;
  const std::string& source = input.source;
  const std::string& flag = input.flag;
  analysis::SampleSpec spec{a.samples, a.length, a.seed, c.vocab_size, c.bos_id, c.eos_id};
  const std::vector<std::vector<int>> samples =
      a.has_prompt ? std::vector<std::vector<int>>{analysis::PromptSample(stream, conditions[0], spec)}
                   : analysis::BuildSamples(stream, conditions[0], spec, flag);
  const int T = static_cast<int>(samples[0].size());
  if (T < 4) Fail("{}: {} token(s); explain needs at least 4", flag, T);
  if (c.max_seq_len > 0 && T > c.max_seq_len)
    Fail("--length: T = {} exceeds the model's context of {} tokens", T, c.max_seq_len);

  report::Progress progress("explain", 1, "forwards");
  a.options.progress = [&](int64_t done, int64_t) { progress.Update(done); };
  explain::ExplainReport rep;
  rep.result = explain::Explain(model, samples, a.options);
  progress.Finish();
  rep.model = analysis::IdentifyModel(model);
  rep.source = source;
  rep.condition = analysis::ConditionName(conditions[0]);
  rep.seed = a.seed;

  const std::string summary = explain::ReportSummary(rep);
  std::string json_text, html_text;
  if (!a.json.empty()) json_text = explain::ReportJson(rep).dump(2) + "\n";
  if (!a.html.empty()) html_text = explain::ReportHtml(rep);
  fmt::print("model {} ({}, {} layers x {} heads); {} samples of {} tokens, {}; {}\n", model.source,
             model.format, c.n_layers, c.n_heads, samples.size(), T, rep.condition, source);
  fmt::print("{}", summary);
  WriteReports(a.json, json_text, a.html, html_text);
}

}  // namespace

void RegisterExplain(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "explain", "Locate the P0 attention-sink circuit: norm decomposition, interventions at "
                 "position 0, greedy circuit search, cone model");
  auto a = std::make_shared<ExplainArgs>();
  cmd->add_option("--model", a->model, "Model file or directory")->required();
  auto* text = cmd->add_option("--text", a->text_file, "Text file to cut random windows from "
                                                       "(default: the shipped data/default_text.txt)");
  auto* prompt = cmd->add_option("--prompt", a->prompt, "One sample: this text");
  auto* tokens = cmd->add_option("--tokens", a->tokens_file, "Token ids to cut random windows from");
  text->excludes(prompt)->excludes(tokens);
  prompt->excludes(tokens);
  cmd->add_option("--tokenizer", a->tokenizer, "Tokenizer file (default: found beside the model)");
  cmd->add_option("--conditions", a->conditions, "First-token condition: bos, no-bos, random-p0 or repeat")
      ->capture_default_str();
  cmd->add_option("--samples", a->samples, "Samples (N)")->capture_default_str();
  cmd->add_option("--length", a->length, "Tokens per sample (T)")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed for windows and random first tokens")->capture_default_str();
  cmd->add_option("--eps", a->options.eps, "Sink threshold on alpha_k, in (0, 1]")->capture_default_str();
  cmd->add_option("--amplification-threshold", a->options.amplification_threshold,
                  "P0 norm ratio that names the amplification layer (> 0)")->capture_default_str();
  cmd->add_option("--onset-threshold", a->options.onset_threshold,
                  "Per-layer Sink_0 rate that names the sink onset layer, in (0, 1]")->capture_default_str();
  cmd->add_option("--share", a->options.share,
                  "Share of the downstream sink a circuit must remove, in (0, 1]")->capture_default_str();
  cmd->add_option("--intervention-samples", a->options.intervention_samples,
                  "Samples the interventions run on (0: all)")->capture_default_str();
  cmd->add_option("--max-components", a->options.max_components,
                  "Largest circuit the greedy search builds")->capture_default_str();
  cmd->add_option("--ablation", a->ablation,
                  "How components are knocked out at P0 for the head rows, the search and --ablate: "
                  "mean (their mean over positions >= 1) or zero")->capture_default_str();
  cmd->add_option("--ablate", a->ablate,
                  "Also measure ablating this set at P0, e.g. mlp.1,head.0.3");
  AddPrecisionOption(cmd, &a->precision);
  cmd->add_option("--json", a->json, "Write the results as JSON (schema sinkscope.explain/1)");
  cmd->add_option("--html", a->html, "Write a self-contained HTML report");
  cmd->callback([a, prompt] {
    ExplainArgs args = *a;
    args.has_prompt = prompt->count() > 0;
    RunExplain(args);
  });
}

}  // namespace ss::cli
