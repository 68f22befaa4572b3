// sinkscope analyze --model PATH [--text FILE | --prompt TEXT | --tokens FILE] [--conditions LIST]
//   [--samples N] [--length T] [--seed S] [--first-k K] [--eps E] [--patterns SPEC]
//   [--json OUT] [--html OUT] [--allow-long-context]
// Measures a model's attention sinks under first-token conditions (docs/ANALYZE.md). Every flag is
// checked, and the output paths too, before the model runs; outputs are written atomically at the
// end.
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
#include "cli/options.h"
#include "cli/verbs.h"
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
  AnalyzeRequest request;
  ConditionOptions conditions;
  OutputOptions output;
  std::string precision;  // empty: the file's
};

void RunAnalyze(AnalyzeArgs a) {
  a.request.conditions = a.conditions.Parse(/*single=*/false);
  ValidateAnalyze(a.request);
  CheckPrecisionFlag(a.precision);
  const SampleOptions& in = a.request.input;
  CheckOutputs({{"--json", a.output.json}, {"--html", a.output.html}},
               SampleInputs(a.model, in.text_file, in.tokens_file, in.tokenizer));
  Model model = LoadModelAt(a.model, a.precision);
  // --length against the context before the input is read (RunAnalysis checks it again).
  if (!in.has_prompt())
    CheckLength(model.config, in.length, a.request.allow_long_context, kAllowLongFlag);
  const SampleStream input = ReadSampleStream(model, in.text_file, in.prompt, in.has_prompt(),
                                              in.tokens_file, in.tokenizer);
  const analysis::AnalyzeReport rep = RunAnalysis(model, input, a.request);

  // Render everything first, then write: a failure leaves no half of the outputs behind.
  const std::string summary = analysis::ReportSummary(rep);
  std::string json_text, html_text;
  if (!a.output.json.empty()) json_text = report::JsonText(analysis::ReportJson(rep));
  if (!a.output.html.empty()) html_text = analysis::ReportHtml(rep);
  fmt::print("model {} ({}, {} layers x {} heads); {}\n", model.source, model.format,
             model.config.n_layers, model.config.n_heads, input.source);
  fmt::print("{}", summary);
  WriteReports(a.output.json, json_text, a.output.html, html_text);
}

}  // namespace

void RegisterAnalyze(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "analyze",
      "Measure a model's attention sinks (alpha_k, Sink_k^eps, P0 norms, massive "
      "activations) with and without BOS");
  auto a = std::make_shared<AnalyzeArgs>();
  cmd->add_option("--patterns", a->request.patterns,
                  "Heads whose full pattern to keep for the HTML, e.g. 0:3,1:* (layer:head)");
  cmd->add_option("--attention", a->request.attn_path,
                  "fused (statistics inside the kernel) or materialised (full patterns per layer)")
      ->capture_default_str();
  cmd->add_flag("--allow-long-context", a->request.allow_long_context,
                "Allow T beyond the model's trained context (RoPE models only)");
  AddModelOptions(cmd, &a->model, /*tokenizer=*/nullptr,
                  &a->precision);  // --tokenizer: the samples'
  a->request.input.Add(cmd, /*default_samples=*/64, /*prompt_and_tokens=*/true);
  a->conditions.Add(cmd, "bos,no-bos,random-p0,repeat", "a comma-separated list");
  a->request.sink.Add(cmd, /*with_first_k=*/true);
  a->output.Add(cmd, /*html=*/true);
  cmd->callback([a] { RunAnalyze(*a); });
}

}  // namespace ss::cli
