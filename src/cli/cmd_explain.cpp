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
  std::string model;
  SampleOptions input;
  ConditionOptions conditions;
  SinkOptions sink;
  LayerThresholdOptions layers;
  explain::ExplainOptions options;
  std::string ablate;
  std::string ablation = "mean";
  std::string json, html;
  std::string precision = "f32";
};

void RunExplain(ExplainArgs a) {
  a.input.Validate(/*conditions=*/1);
  a.sink.Validate();
  a.layers.Validate();
  a.options.eps = a.sink.eps;
  a.options.onset_threshold = a.layers.onset;
  a.options.amplification_threshold = a.layers.amplification;
  explain::CheckOptions(a.options);
  ParsePrecision(a.precision);
  const auto conditions = a.conditions.Parse(/*single=*/true);
  CheckOutputs({{"--json", a.json}, {"--html", a.html}},
               SampleInputs(a.model, a.input.text_file, a.input.tokens_file, a.input.tokenizer));

  Model model = LoadModel(a.model);
  ApplyPrecision(model, a.precision);
  const ModelConfig& c = model.config;
  const bool has_prompt = a.input.has_prompt();
  if (!has_prompt) CheckLength(c, a.input.length, /*allow_long=*/false, /*has_allow_flag=*/false);
  a.options.ablate = explain::ParseComponents(a.ablate, c, "--ablate");
  if (a.ablation != "mean" && a.ablation != "zero")
    Fail("--ablation: expected mean or zero, got '{}'", a.ablation);
  a.options.ablation = a.ablation == "zero" ? explain::Ablation::kZero : explain::Ablation::kMean;
  const SampleStream input = ReadSampleStream(model, a.input.text_file, a.input.prompt, has_prompt,
                                              a.input.tokens_file, a.input.tokenizer);
  const std::vector<int>& stream = input.tokens;
  const std::string& source = input.source;
  const std::string& flag = input.flag;
  analysis::SampleSpec spec{a.input.samples, a.input.length, a.input.seed,
                            c.vocab_size,    c.bos_id,       c.eos_id};
  const std::vector<std::vector<int>> samples =
      has_prompt
          ? std::vector<std::vector<int>>{analysis::PromptSample(stream, conditions[0], spec)}
          : analysis::BuildSamples(stream, conditions[0], spec, flag);
  const int T = static_cast<int>(samples[0].size());
  if (T < SampleOptions::kMinLength)
    Fail("{}: {} token(s); explain needs at least {}", flag, T, SampleOptions::kMinLength);
  CheckLength(c, T, /*allow_long=*/false, /*has_allow_flag=*/false);

  report::Progress progress("explain", 1, "forwards");
  a.options.progress = [&](int64_t done, int64_t) { progress.Update(done); };
  explain::ExplainReport rep;
  rep.result = explain::Explain(model, samples, a.options);
  progress.Finish();
  rep.model = analysis::IdentifyModel(model);
  rep.source = source;
  rep.condition = analysis::ConditionName(conditions[0]);
  rep.seed = a.input.seed;

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
  a->input.Add(cmd, /*default_samples=*/16, /*prompt_and_tokens=*/true);
  a->conditions.Add(cmd, "bos", "First-token condition: bos, no-bos, random-p0 or repeat");
  a->sink.Add(cmd, /*with_first_k=*/false);
  a->layers.Add(cmd);
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
  cmd->callback([a] { RunExplain(*a); });
}

}  // namespace ss::cli
