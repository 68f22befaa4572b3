// sinkscope trace --checkpoints DIR|PATH... | --twins DIR,DIR... [--samples N --length T --seed S
//   --text FILE] [--keep-going] [--json OUT] [--html OUT] [--no-cache]
// The sink profile and formation stage of every checkpoint of a run (docs/TRACE.md); with --twins,
// of several runs on the same samples, side by side and overlaid. Under mpirun the checkpoints are
// sharded across ranks and rank 0 writes the one report.
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <set>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/options.h"
#include "cli/verbs.h"
#include "common/error.h"
#include "common/file_util.h"
#include "io/json_util.h"
#include "report/report.h"
#include "trace/trace.h"
#include "train/comm.h"

namespace ss::cli {
namespace {

struct TraceArgs {
  TraceRequest request;
  std::vector<std::string> twins;
  bool keep_going = false;
  OutputOptions output;
};

// The twins' run directories: as given, or a scripts/twins.sh folder (with comparison.json)
// expanded to its variants' directories in its order.
std::vector<std::string> TwinDirs(const std::vector<std::string>& given) {
  if (given.size() == 1 && FileExists(given[0] + "/comparison.json")) {
    const std::string path = given[0] + "/comparison.json";
    const nlohmann::json doc = ParseJsonStrict(ReadFile(path), path);
    std::vector<std::string> dirs;
    if (doc.contains("runs") && doc["runs"].is_array())
      for (const auto& r : doc["runs"])
        if (r.contains("variant") && r["variant"].is_string())
          dirs.push_back(given[0] + "/" + r["variant"].get<std::string>());
    if (dirs.empty()) Fail("{}: no runs listed (expected a scripts/twins.sh comparison)", path);
    return dirs;
  }
  return given;
}

void Validate(const TraceArgs& a) {
  const TraceRequest& r = a.request;
  if (r.checkpoints.empty() == a.twins.empty())
    Fail("trace: give either --checkpoints (one run) or --twins (several runs to compare)");
  std::vector<FlagPath> inputs = SampleInputs("", r.input.text_file, "", r.input.tokenizer);
  if (a.twins.empty()) {
    ValidateTrace(r);
    for (const std::string& c : r.checkpoints)
      for (FlagPath& f : ModelInputs("--checkpoints", c)) inputs.push_back(std::move(f));
  } else {
    const std::vector<std::string> dirs = TwinDirs(a.twins);
    if (dirs.size() < 2)
      Fail("--twins: expected two or more run directories (or a scripts/twins.sh folder), got {}",
           dirs.size());
    std::set<std::string> names;
    for (const std::string& d : dirs) {
      if (!IsDirectory(d)) Fail("--twins: '{}' is not a run directory", d);
      if (!names.insert(std::filesystem::path(d).lexically_normal().filename().string()).second)
        Fail("--twins: two runs are named '{}' (the directory names label the runs)",
             std::filesystem::path(d).lexically_normal().filename().string());
      TraceRequest one = r;
      one.checkpoints = {d};
      ValidateTrace(one);
      for (FlagPath& f : ModelInputs("--twins", d)) inputs.push_back(std::move(f));
    }
  }
  CheckOutputs({{"--json", a.output.json}, {"--html", a.output.html}}, inputs);
}

// --twins: each run traced in turn with the same sample settings; the samples must come out the
// same (same source), else the comparison would not be one: checked before any analysis.
void RunTwins(const TraceArgs& a) {
  train::Comm& comm = train::Comm::World();
  const bool root = comm.is_root();
  const std::vector<std::string> dirs = TwinDirs(a.twins);
  std::string first_source;
  for (const std::string& dir : dirs) {
    TraceRequest one = a.request;
    one.checkpoints = {dir};
    const std::string source = TraceSamplesSource(one);
    if (first_source.empty()) {
      first_source = source;
    } else if (source != first_source) {
      Fail(
          "--twins: {} draws its samples from {}, {} from {}: twins must share their samples "
          "(the same data and tokenizer)",
          dirs.front(), first_source, dir, source);
    }
  }
  std::vector<trace::TwinRun> runs;
  trace::TraceSettings settings;
  int failed = 0;
  for (const std::string& dir : dirs) {
    const std::string name = std::filesystem::path(dir).lexically_normal().filename().string();
    TraceRequest one = a.request;
    one.checkpoints = {dir};
    TraceRun run = RunTraceAnalysis(one, comm.rank(), comm.size(), [&](const std::string& line) {
      Log(comm.size() > 1 ? fmt::format("[rank {}] {}: {}", comm.rank(), name, line)
                          : name + ": " + line);
    });
    if (runs.empty()) settings = run.settings;
    for (const auto& r : run.results) failed += !r.ok;
    runs.push_back({name, dir, std::move(run.results)});
  }
  if (!root) {
    if (failed && !a.keep_going) std::exit(1);
    return;
  }
  for (const trace::TwinRun& run : runs) {
    fmt::print("== {} ({})\n{}", run.name, run.dir, trace::TraceTable(run.results, settings.stage));
    for (const auto& r : run.results)
      if (!r.ok) fmt::print("FAILED {} step {}: {}\n", run.name, r.ref.step, r.error);
  }
  fmt::print("== side by side (alpha0: the largest layer's mean over heads)\n{}",
             trace::TwinsTable(runs));
  const OutputOptions& out = a.output;
  WriteReports(out.json, out.json.empty() ? "" : report::JsonText(trace::TwinsJson(runs, settings)),
               out.html, out.html.empty() ? "" : trace::TwinsHtml(runs, settings));
  if (failed && !a.keep_going)
    Fail(
        "{} checkpoints failed (listed above; the others are in the report); pass --keep-going "
        "to exit 0 anyway",
        failed);
}

void RunTrace(const TraceArgs& a) {
  Validate(a);
  if (!a.twins.empty()) return RunTwins(a);
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
  const OutputOptions& out = a.output;
  WriteReports(out.json,
               out.json.empty() ? "" : report::JsonText(trace::TraceJson(results, settings)),
               out.html, out.html.empty() ? "" : trace::TraceHtml(results, settings));
  if (failed == static_cast<int>(results.size()))
    Fail("all {} checkpoints failed to load or analyse (first: {})", failed, results.front().error);
  if (failed && !a.keep_going)
    Fail(
        "{} of {} checkpoints failed (listed above; the others are in the report); pass "
        "--keep-going to exit 0 anyway",
        failed, results.size());
}

}  // namespace

void RegisterTrace(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "trace",
      "Sink profile and formation stage (none/early/transitional/converged) of every "
      "checkpoint of a training run");
  auto a = std::make_shared<TraceArgs>();
  cmd->add_option(
      "--checkpoints", a->request.checkpoints,
      "A run directory (checkpoint sub-directories or *.gguf) or a list of checkpoints");
  cmd->add_option(
         "--twins", a->twins,
         "Several run directories to trace on the same samples and compare (comma-separated), "
         "or a scripts/twins.sh folder")
      ->delimiter(',');
  cmd->add_option("--early-blocks", a->request.early_blocks,
                  "Last block that counts as early (blocks 0..B)")
      ->capture_default_str();
  cmd->add_option("--other-share", a->request.other_share,
                  "Share of heads sinking on a position != 0 that makes a checkpoint transitional")
      ->capture_default_str();
  cmd->add_option("--stable-window", a->request.stable_window,
                  "k: checkpoints that must agree for converged")
      ->capture_default_str();
  cmd->add_flag("--keep-going", a->keep_going, "Exit 0 even if some checkpoints failed");
  cmd->add_flag("--no-cache", a->request.no_cache,
                "Do not read or write DIR/.sinkscope-trace-cache");
  AddPrecisionOption(cmd, &a->request.precision);
  a->request.input.Add(cmd, /*default_samples=*/16, /*prompt_and_tokens=*/false);
  a->request.sink.Add(cmd, /*with_first_k=*/false);
  a->request.layers.Add(cmd);
  a->output.Add(cmd, /*html=*/true, fmt::format("with --twins {}", trace::kTwinsSchema));
  cmd->callback([a] { RunTrace(*a); });
}

}  // namespace ss::cli
