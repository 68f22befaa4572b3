// sinkscope trace --checkpoints DIR|PATH... [--samples N --length T --seed S --text FILE]
//   [--keep-going] [--json OUT] [--html OUT] [--no-cache]
// The sink profile and formation stage of every checkpoint of a run (docs/TRACE.md). Under mpirun
// the checkpoints are sharded across ranks and rank 0 writes the one report.
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <memory>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/verbs.h"
#include "common/error.h"
#include "common/file_util.h"
#include "report/report.h"
#include "trace/trace.h"
#include "train/comm.h"

namespace ss::cli {
namespace {

struct TraceArgs {
  TraceRequest request;
  bool keep_going = false;
  std::string json, html;
};

void Validate(const TraceArgs& a) {
  const TraceRequest& r = a.request;
  ValidateTrace(r);
  std::vector<FlagPath> inputs = SampleInputs("", r.input.text_file, "", r.input.tokenizer);
  for (const std::string& c : r.checkpoints)
    for (FlagPath& f : ModelInputs("--checkpoints", c)) inputs.push_back(std::move(f));
  CheckOutputs({{"--json", a.json}, {"--html", a.html}}, inputs);
}

void RunTrace(const TraceArgs& a) {
  Validate(a);
  train::Comm& comm = train::Comm::World();
  const bool root = comm.is_root();
  auto log = [&](const std::string& line) {
    Log(comm.size() > 1 ? fmt::format("[rank {}] {}", comm.rank(), line) : line);
  };

  TraceRun run = RunTraceAnalysis(a.request, comm.rank(), comm.size(), log);
  const std::vector<trace::CheckpointResult>& results = run.results;
  const trace::TraceSettings& settings = run.settings;

  int failed = 0;
  for (const auto& r : results) failed += !r.ok;
  if (!root) {
    if (failed && !a.keep_going) std::exit(1);
    return;
  }
  fmt::print("{}", trace::TraceTable(results, settings.stage));
  for (const auto& r : results)
    if (!r.ok) fmt::print("FAILED step {}: {}\n", r.ref.step, r.error);
  WriteReports(a.json, a.json.empty() ? "" : trace::TraceJson(results, settings).dump(2) + "\n",
               a.html, a.html.empty() ? "" : trace::TraceHtml(results, settings));
  if (failed == static_cast<int>(results.size()))
    Fail("all {} checkpoints failed to load or analyse (first: {})", failed, results.front().error);
  if (failed && !a.keep_going)
    Fail("{} of {} checkpoints failed (listed above; the others are in the report); pass "
         "--keep-going to exit 0 anyway", failed, results.size());
}

}  // namespace

void RegisterTrace(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "trace", "Sink profile and formation stage (none/early/transitional/converged) of every "
               "checkpoint of a training run");
  auto a = std::make_shared<TraceArgs>();
  cmd->add_option("--checkpoints", a->request.checkpoints,
                  "A run directory (checkpoint sub-directories or *.gguf) or a list of checkpoints")
      ->required();
  a->request.input.Add(cmd, /*default_samples=*/16, /*prompt_and_tokens=*/false);
  a->request.sink.Add(cmd, /*with_first_k=*/false);
  a->request.layers.Add(cmd);
  cmd->add_option("--early-blocks", a->request.early_blocks, "Last block that counts as early (blocks 0..B)")
      ->capture_default_str();
  cmd->add_option("--other-share", a->request.other_share,
                  "Share of heads sinking on a position != 0 that makes a checkpoint transitional")
      ->capture_default_str();
  cmd->add_option("--stable-window", a->request.stable_window, "k: checkpoints that must agree for converged")
      ->capture_default_str();
  cmd->add_flag("--keep-going", a->keep_going, "Exit 0 even if some checkpoints failed");
  cmd->add_flag("--no-cache", a->request.no_cache, "Do not read or write DIR/.sinkscope-trace-cache");
  AddPrecisionOption(cmd, &a->request.precision);
  cmd->add_option("--json", a->json, "Write the report as JSON (sinkscope.trace/1)");
  cmd->add_option("--html", a->html, "Write the report as a self-contained HTML page");
  cmd->callback([a] { RunTrace(*a); });
}

}  // namespace ss::cli
