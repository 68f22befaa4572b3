// sinkscope trace --checkpoints DIR|PATH... [--samples N --length T --seed S --text FILE]
//   [--keep-going] [--json OUT] [--html OUT] [--no-cache]
// The sink profile and formation stage of every checkpoint of a run (docs/TRACE.md). Under mpirun
// the checkpoints are sharded across ranks and rank 0 writes the one report.
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <memory>

#include "analysis/conditions.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "common/error.h"
#include "common/file_util.h"
#include "common/sha256.h"
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
  int samples = 16;
  int length = 64;
  uint64_t seed = 0;
  std::string text_file;
  std::string tokenizer;
  double eps = 0.3;
  double onset_rate = 0.5;
  double amplification = 3.0;
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
  if (a.samples < 1) Fail("--samples: expected at least 1, got {}", a.samples);
  if (a.length < 4) Fail("--length: expected at least 4 tokens, got {}", a.length);
  if (!(a.eps > 0 && a.eps <= 1)) Fail("--eps: expected a threshold in (0, 1], got {}", a.eps);
  if (!(a.onset_rate >= 0 && a.onset_rate < 1)) Fail("--onset-rate: expected [0, 1), got {}", a.onset_rate);
  if (!(a.amplification > 0)) Fail("--amplification-ratio: expected > 0, got {}", a.amplification);
  if (a.early_blocks < 0) Fail("--early-blocks: expected >= 0, got {}", a.early_blocks);
  if (!(a.other_share > 0 && a.other_share <= 1)) Fail("--other-share: expected (0, 1], got {}", a.other_share);
  if (a.stable_window < 1) Fail("--stable-window: expected >= 1, got {}", a.stable_window);
  if (!a.text_file.empty() && !FileExists(a.text_file)) Fail("--text: {}: no such file", a.text_file);
  if (!a.json.empty()) CheckWritable(a.json, "--json");
  if (!a.html.empty()) CheckWritable(a.html, "--html");
  if (!a.json.empty() && a.json == a.html) Fail("--json and --html name the same file {}", a.json);
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
  if (a.text_file.empty() && IsDirectory(first_checkpoint) && FileExists(tc)) {
    const train::TrainConfig c = train::LoadTrainConfig(tc);
    if (c.data == train::DataKind::kBigramBackcopy) {
      plan.bigram = true;
      plan.bb = c;
      plan.source = fmt::format("bigram-backcopy V={} triggers={} table_seed={} bos={}", c.vocab_size,
                                c.bb_triggers, c.bb_seed, c.bos);
      return plan;
    }
  }
  plan.text_name = a.text_file.empty() ? "default text" : a.text_file;
  plan.text = a.text_file.empty() ? std::string(DefaultText()) : ReadFile(a.text_file);
  plan.source = fmt::format("text {} sha256={}", plan.text_name, Sha256Hex(plan.text).substr(0, 16));
  return plan;
}

trace::SampleMaker MakeSampleMaker(const SamplePlan& plan, const TraceArgs& a) {
  return [plan, a](const Model& model) {
    std::vector<std::vector<int>> samples;
    if (plan.bigram) {
      train::BigramBackcopy data(plan.bb.vocab_size, plan.bb.bb_triggers, plan.bb.bb_seed, plan.bb.bos);
      train::Rng rng(a.seed);
      for (int i = 0; i < a.samples; ++i) {
        std::vector<int> s(a.length);
        data.Sample(rng, a.length, s.data());
        samples.push_back(std::move(s));
      }
      return samples;
    }
    const std::vector<int> stream = FindTokenizer(model, a.tokenizer)->Encode(plan.text, false);
    const ModelConfig& c = model.config;
    analysis::SampleSpec spec{a.samples, a.length, a.seed, c.vocab_size, c.bos_id, c.eos_id};
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

  const SamplePlan plan = PlanSamples(a, refs.front().path);
  trace::TraceSettings settings;
  settings.samples_source = plan.source;
  settings.samples = a.samples;
  settings.length = a.length;
  settings.seed = a.seed;
  settings.precision = ParsePrecision(a.precision);
  if (const std::string note = PrecisionNote(settings.precision); !note.empty()) Log("note: " + note);
  settings.profile.eps = a.eps;
  settings.profile.onset_sink_rate = a.onset_rate;
  settings.profile.amplification_ratio = a.amplification;
  settings.stage.early_block_limit = a.early_blocks;
  settings.stage.other_sink_share = a.other_share;
  settings.stage.stable_window = a.stable_window;
  settings.cache_dir = cache_dir;
  if (root)
    log(fmt::format("{} checkpoints (steps {} .. {}); samples: {} x {} tokens, {}, seed {}{}", refs.size(),
                    refs.front().step, refs.back().step, a.samples, a.length, plan.source, a.seed,
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
  if (!a.json.empty()) {
    report::WriteJson(a.json, trace::TraceJson(results, settings));
    Log("wrote " + a.json);
  }
  if (!a.html.empty()) {
    WriteFileAtomic(a.html, trace::TraceHtml(results, settings));
    Log("wrote " + a.html);
  }
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
  cmd->add_option("--samples", a->samples, "Samples (N), the same for every checkpoint")->capture_default_str();
  cmd->add_option("--length", a->length, "Tokens per sample (T)")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of the samples")->capture_default_str();
  cmd->add_option("--text", a->text_file,
                  "Text to cut samples from (default: a Bigram-Backcopy run's own data, else "
                  "data/default_text.txt)");
  cmd->add_option("--tokenizer", a->tokenizer, "Tokenizer for --text (default: found with the model)");
  cmd->add_option("--eps", a->eps, "Sink threshold on alpha_0")->capture_default_str();
  cmd->add_option("--onset-rate", a->onset_rate, "Sink rate above which a layer has a sink")->capture_default_str();
  cmd->add_option("--amplification-ratio", a->amplification, "P0 norm ratio that counts as amplified")
      ->capture_default_str();
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
