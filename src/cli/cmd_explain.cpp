// sinkscope explain --model PATH [--text FILE | --prompt TEXT | --tokens FILE] [--conditions C]
//   [--samples N] [--length T] [--seed S] [--eps E] [--amplification-threshold X]
//   [--onset-threshold X] [--share X] [--intervention-samples N] [--max-components N]
//   [--ablate SPEC] [--verify-top K | --exhaustive] [--estimate-samples N] [--confidence C]
//   [--no-early-stop] [--json OUT] [--html OUT]
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
#include "cli/options.h"
#include "cli/verbs.h"
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
  ExplainRequest request;
  ConditionOptions conditions;
  SinkOptions sink;
  LayerThresholdOptions layers;
  OutputOptions output;
  std::string precision;          // empty: the file's
  bool verify_top_given = false;  // --verify-top on the command line (it contradicts --exhaustive)
  bool no_early_stop = false;
};

void RunExplain(ExplainArgs a) {
  a.sink.Validate();
  a.layers.Validate();
  ExplainRequest& r = a.request;
  if (r.options.exhaustive && a.verify_top_given)
    Fail("--verify-top: cannot be combined with --exhaustive, which measures every row");
  r.options.eps = a.sink.eps;
  r.options.onset_threshold = a.layers.onset;
  r.options.amplification_threshold = a.layers.amplification;
  r.condition = a.conditions.Parse(/*single=*/true)[0];
  ValidateExplain(r);
  CheckPrecisionFlag(a.precision);
  const SampleOptions& in = r.input;
  CheckOutputs({{"--json", a.output.json}, {"--html", a.output.html}},
               SampleInputs(a.model, in.text_file, in.tokens_file, in.tokenizer));

  Model model = LoadModelAt(a.model, a.precision);
  const ModelConfig& c = model.config;
  // --length and --ablate against the model before the input is read (RunExplanation checks
  // them again).
  if (!in.has_prompt()) CheckLength(c, in.length, /*allow_long=*/false, /*allow_name=*/{});
  explain::ParseComponents(r.ablate, c, "--ablate");
  const SampleStream input = ReadSampleStream(model, in.text_file, in.prompt, in.has_prompt(),
                                              in.tokens_file, in.tokenizer);
  const explain::ExplainReport rep = RunExplanation(model, input, r);

  const std::string summary = explain::ReportSummary(rep);
  std::string json_text, html_text;
  if (!a.output.json.empty()) json_text = report::JsonText(explain::ReportJson(rep));
  if (!a.output.html.empty()) html_text = explain::ReportHtml(rep);
  fmt::print("model {} ({}, {} layers x {} heads); {} samples of {} tokens, {}; {}\n", model.source,
             model.format, c.n_layers, c.n_heads, rep.result.samples, rep.result.length,
             rep.condition, input.source);
  fmt::print("{}", summary);
  WriteReports(a.output.json, json_text, a.output.html, html_text);
}

}  // namespace

void RegisterExplain(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "explain",
      "Locate the P0 attention-sink circuit: norm decomposition, interventions at "
      "position 0, greedy circuit search, cone model");
  auto a = std::make_shared<ExplainArgs>();
  cmd->add_option("--share", a->request.options.share,
                  "Share of the downstream sink a circuit must remove, in (0, 1]")
      ->capture_default_str();
  cmd->add_option("--intervention-samples", a->request.options.intervention_samples,
                  "Samples the interventions run on (0: all)")
      ->capture_default_str();
  cmd->add_option("--max-components", a->request.options.max_components,
                  "Largest circuit the greedy search builds")
      ->capture_default_str();
  cmd->add_option(
         "--ablation", a->request.ablation,
         "How components are knocked out at P0 for the head rows, the search and --ablate: "
         "mean (their mean over positions >= 1) or zero")
      ->capture_default_str();
  cmd->add_option(
      "--ablate", a->request.ablate,
      "Also measure ablating this set at P0, e.g. mlp.1,head.0.3 (Qwen3.5: mixer.L, gate.L)");
  auto* verify_top =
      cmd->add_option("--verify-top", a->request.options.verify_top,
                      "Measure exactly only the K MLP / head / patch rows with the largest "
                      "estimated effect (P0 recomputation); the rest stay estimates")
          ->capture_default_str();
  cmd->add_flag("--exhaustive", a->request.options.exhaustive,
                "Measure every row of the intervention table exactly (L H + 3 L - 1 forwards per "
                "intervention sample)");
  cmd->add_option("--estimate-samples", a->request.options.estimate_samples,
                  "Intervention samples the estimates rank the rows on (0: all)")
      ->capture_default_str();
  cmd->add_option("--confidence", a->request.options.confidence,
                  "Confidence of the bounds that decide when the circuit is settled and no more "
                  "intervention samples are needed, in [0.5, 1)")
      ->capture_default_str();
  cmd->add_flag(
      "--no-early-stop", a->no_early_stop,
      "Measure every intervention sample, even once the verdict and the circuit are settled");
  AddModelOptions(cmd, &a->model, /*tokenizer=*/nullptr,
                  &a->precision);  // --tokenizer: the samples'
  a->request.input.Add(cmd, /*default_samples=*/16, /*prompt_and_tokens=*/true);
  a->conditions.Add(cmd, "bos", "one of them (this verb runs one condition)");
  a->sink.Add(cmd, /*with_first_k=*/false);
  a->layers.Add(cmd);
  a->output.Add(cmd, /*html=*/true);
  cmd->callback([a, verify_top] {
    a->verify_top_given = verify_top->count() > 0;
    a->request.options.early_stop = !a->no_early_stop;
    RunExplain(*a);
  });
}

}  // namespace ss::cli
