// sinkscope trace --checkpoints DIR|PATH... [--samples N --length T --seed S --text FILE]
//   [--keep-going] [--json OUT] [--html OUT] [--no-cache]
// The sink profile and formation stage of every checkpoint of a run (docs/TRACE.md). Under mpirun
// the checkpoints are sharded across ranks and rank 0 writes the one report.
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>

#include "analysis/conditions.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "common/error.h"
#include "common/file_util.h"
#include "common/sha256.h"
#include "io/hf_config.h"
#include "model/precision.h"
#include "report/report.h"
#include "tokenizer/find.h"
#include "trace/trace.h"
#include "train/comm.h"
#include "train/data.h"
#include "train/train_config.h"

namespace ss::cli {
namespace {

struct TraceArgs {
  std::vector<std::string> checkpoints;
  SampleOptions input;
  SinkOptions sink;
  LayerThresholdOptions layers;
  int early_blocks = 1;
  double other_share = 0.1;
  int stable_window = 3;
  bool keep_going = false;
  bool no_cache = false;
  std::string json, html;
  std::string precision = "f32";
};

void Validate(const TraceArgs& a) {
  ParsePrecision(a.precision);
  a.input.Validate(/*conditions=*/1);
  a.sink.Validate();
  a.layers.Validate();
  CheckInt("--early-blocks", a.early_blocks, 0, std::numeric_limits<int>::max());
  CheckReal("--other-share", a.other_share, 0, Bound::kOpen, 1, Bound::kClosed);
  CheckInt("--stable-window", a.stable_window, 1, std::numeric_limits<int>::max());
  std::vector<FlagPath> inputs = SampleInputs("", a.input.text_file, "", a.input.tokenizer);
  for (const std::string& c : a.checkpoints)
    for (FlagPath& f : ModelInputs("--checkpoints", c)) inputs.push_back(std::move(f));
  CheckOutputs({{"--json", a.json}, {"--html", a.html}}, inputs);
}

// How the samples are made, decided from the flags and the first checkpoint, before any model
// runs: a Bigram-Backcopy run's own data distribution (the task it was trained on), or text windows
// (BOS + T-1 tokens) tokenized with the checkpoint's tokenizer.
struct SamplePlan {
  std::string source;  // for the report and the cache key
  bool bigram = false;
  train::TrainConfig bb;
  std::string text_name;  // "PATH" or "default text"
  std::string text;       // its contents
};

SamplePlan PlanSamples(const TraceArgs& a, const std::string& first_checkpoint) {
  SamplePlan plan;
  const std::string tc = first_checkpoint + "/train_config.json";
  if (a.input.text_file.empty() && IsDirectory(first_checkpoint) && FileExists(tc)) {
    const train::TrainConfig c = train::LoadTrainConfig(tc);
    if (c.data == train::DataKind::kBigramBackcopy) {
      plan.bigram = true;
      plan.bb = c;
      plan.source = fmt::format("bigram-backcopy V={} triggers={} table_seed={} bos={}", c.vocab_size,
                                c.bb_triggers, c.bb_seed, c.bos);
      return plan;
    }
  }
  plan.text_name = a.input.text_file.empty() ? "default text" : a.input.text_file;
  plan.text = a.input.text_file.empty() ? std::string(DefaultText())
                                        : ReadInputFile(a.input.text_file, "--text");
  plan.source = fmt::format("text {} sha256={}", plan.text_name, Sha256Hex(plan.text).substr(0, 16));
  return plan;
}

trace::SampleMaker MakeSampleMaker(const SamplePlan& plan, const TraceArgs& a) {
  return [plan, a](const Model& model) {
    // Each checkpoint's context, as analyze and explain check theirs.
    CheckLength(model.config, a.input.length, /*allow_long=*/false, /*has_allow_flag=*/false);
    std::vector<std::vector<int>> samples;
    if (plan.bigram) {
      train::BigramBackcopy data(plan.bb.vocab_size, plan.bb.bb_triggers, plan.bb.bb_seed, plan.bb.bos);
      train::Rng rng(a.input.seed);
      for (int i = 0; i < a.input.samples; ++i) {
        std::vector<int> s(a.input.length);
        data.Sample(rng, a.input.length, s.data());
        samples.push_back(std::move(s));
      }
      return samples;
    }
    const std::vector<int> stream =
        FindTokenizer(model, a.input.tokenizer)->Encode(plan.text, false);
    const ModelConfig& c = model.config;
    analysis::SampleSpec spec{a.input.samples, a.input.length, a.input.seed,
                              c.vocab_size,    c.bos_id,       c.eos_id};
    return analysis::BuildSamples(stream, analysis::Condition::kBos, spec, "--text " + plan.text_name);
  };
}

void RunTrace(const TraceArgs& a) {
  Validate(a);
  train::Comm& comm = train::Comm::World();
  const bool root = comm.is_root();
  auto log = [&](const std::string& line) {
    Log(comm.size() > 1 ? fmt::format("[rank {}] {}", comm.rank(), line) : line);
  };

  std::vector<trace::CheckpointRef> refs;
  std::string cache_dir;
  if (a.checkpoints.size() == 1 && IsDirectory(a.checkpoints[0]) &&
      !FileExists(a.checkpoints[0] + "/config.json")) {
    refs = trace::FindCheckpoints(a.checkpoints[0]);
    cache_dir = a.checkpoints[0] + "/.sinkscope-trace-cache";
  } else {
    refs = trace::CheckpointsFromPaths(a.checkpoints);
  }
  if (a.no_cache) cache_dir.clear();
  trace::CheckSameFamily(refs);

  // --length against the first checkpoint's context before any work (each checkpoint is checked
  // again when it is analysed).
  const std::string first_config = refs.front().path + "/config.json";
  if (IsDirectory(refs.front().path) && FileExists(first_config))
    CheckLength(ReadHfConfig(first_config), a.input.length, false, false);
  const SamplePlan plan = PlanSamples(a, refs.front().path);
  trace::TraceSettings settings;
  settings.samples_source = plan.source;
  settings.samples = a.input.samples;
  settings.length = a.input.length;
  settings.seed = a.input.seed;
  settings.precision = ParsePrecision(a.precision);
  if (const std::string note = PrecisionNote(settings.precision); !note.empty()) Log("note: " + note);
  settings.profile.eps = a.sink.eps;
  settings.profile.onset_sink_rate = a.layers.onset;
  settings.profile.amplification_ratio = a.layers.amplification;
  settings.stage.early_block_limit = a.early_blocks;
  settings.stage.other_sink_share = a.other_share;
  settings.stage.stable_window = a.stable_window;
  settings.cache_dir = cache_dir;
  if (root)
    log(fmt::format("{} checkpoints (steps {} .. {}); samples: {} x {} tokens, {}, seed {}{}",
                    refs.size(), refs.front().step, refs.back().step, a.input.samples,
                    a.input.length, plan.source, a.input.seed,
                    comm.size() > 1 ? fmt::format("; {} MPI ranks", comm.size()) : ""));

  std::vector<trace::CheckpointResult> results = trace::AnalyseCheckpoints(
      refs, settings, MakeSampleMaker(plan, a), comm.rank(), comm.size(), log);
  results = trace::GatherResults(results, comm.rank(), comm.size());
  trace::AssignStages(results, settings.stage);

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
  cmd->add_option("--checkpoints", a->checkpoints,
                  "A run directory (checkpoint sub-directories or *.gguf) or a list of checkpoints")
      ->required();
  a->input.Add(cmd, /*default_samples=*/16, /*prompt_and_tokens=*/false);
  a->sink.Add(cmd, /*with_first_k=*/false);
  a->layers.Add(cmd);
  cmd->add_option("--early-blocks", a->early_blocks, "Last block that counts as early (blocks 0..B)")
      ->capture_default_str();
  cmd->add_option("--other-share", a->other_share,
                  "Share of heads sinking on a position != 0 that makes a checkpoint transitional")
      ->capture_default_str();
  cmd->add_option("--stable-window", a->stable_window, "k: checkpoints that must agree for converged")
      ->capture_default_str();
  cmd->add_flag("--keep-going", a->keep_going, "Exit 0 even if some checkpoints failed");
  cmd->add_flag("--no-cache", a->no_cache, "Do not read or write DIR/.sinkscope-trace-cache");
  AddPrecisionOption(cmd, &a->precision);
  cmd->add_option("--json", a->json, "Write the report as JSON (sinkscope.trace/1)");
  cmd->add_option("--html", a->html, "Write the report as a self-contained HTML page");
  cmd->callback([a] { RunTrace(*a); });
}

}  // namespace ss::cli
