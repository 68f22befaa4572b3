// sinkscope train: pretrain a small Llama-style (or Qwen3-MoE-style) model from scratch with sink
// telemetry (docs/TRAINING.md). Under mpirun it trains data-parallel.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/options.h"
#include "common/error.h"
#include "common/file_util.h"
#include "kernels/parallel.h"
#include "model/precision.h"
#include "train/checkpoint.h"
#include "train/comm.h"
#include "train/data.h"
#include "train/rng.h"
#include "train/trainer.h"

namespace ss::cli {

namespace {

struct TrainFlags {
  std::string config_path, preset, out, resume, eval_dir, write_stream;
  int64_t stream_tokens = 200000;
  std::vector<std::string> sets;
  // Overrides: absent unless given, and a given value is checked (never taken for "not given").
  std::optional<int> steps, threads, batch, seq_len, eval_every, checkpoint_every;
  int stop_after = 0, eval_batches = 2;
  std::optional<double> lr;
  std::optional<uint64_t> seed;
  std::string corpus;
  std::string precision;  // empty: the config's
  bool bos = false, no_bos = false, overwrite = false;
};

void RunTrain(const TrainFlags& f) {
  using namespace ss::train;
  CheckInt("--stop-after", f.stop_after, 0, std::numeric_limits<int>::max());
  CheckInt("--eval-batches", f.eval_batches, 1, std::numeric_limits<int>::max());
  if (!f.eval_dir.empty()) {
    const std::string dir = FindCheckpoint(f.eval_dir);
    const double loss = EvaluateCheckpoint(dir, f.eval_batches);
    fmt::print("{}\tval_loss\t{:.9g}\n", dir, loss);
    return;
  }
  TrainConfig c;
  if (!f.config_path.empty() && !f.preset.empty())
    Fail("--config and --preset: give one, not both");
  if (!f.config_path.empty()) {
    c = LoadTrainConfig(f.config_path);
  } else if (!f.preset.empty()) {
    c = Preset(f.preset);
  } else if (!f.resume.empty()) {
    c = ReadCheckpointConfig(FindCheckpoint(f.resume));  // continue with the checkpoint's settings
  } else {
    Fail("train: give --config FILE or --preset NAME (presets: {}) or --resume DIR",
         fmt::join(PresetNames(), ", "));
  }
  // --set key=value (value as JSON, or a bare string), then the named overrides.
  nlohmann::json overrides = nlohmann::json::object();
  for (const std::string& s : f.sets) {
    const auto eq = s.find('=');
    if (eq == std::string::npos) Fail("--set: expected key=value, found '{}'", s);
    const std::string key = s.substr(0, eq), value = s.substr(eq + 1);
    auto parsed = nlohmann::json::parse(value, nullptr, false);
    overrides[key] = parsed.is_discarded() ? nlohmann::json(value) : parsed;
  }
  auto count = [&](const char* flag, const char* key, const std::optional<int>& v, int64_t lo,
                   int64_t hi = std::numeric_limits<int>::max()) {
    if (!v) return;
    CheckInt(flag, *v, lo, hi);
    overrides[key] = *v;
  };
  count("--steps", "steps", f.steps, 1);
  count("--threads", "threads", f.threads, 0, kMaxThreads);  // 0: the default
  count("--batch", "batch_size", f.batch, 1);
  count("--seq-len", "seq_len", f.seq_len, 1);
  count("--eval-every", "eval_every", f.eval_every, 1);
  count("--checkpoint-every", "checkpoint_every", f.checkpoint_every, 1);
  if (f.lr) {
    CheckReal("--lr", *f.lr, 0, Bound::kOpen, std::numeric_limits<double>::infinity(),
              Bound::kOpen);
    overrides["lr"] = *f.lr;
  }
  if (f.seed) overrides["seed"] = *f.seed;  // checked as it was parsed (AddSeedOption)
  if (!f.corpus.empty()) overrides["corpus"] = f.corpus;
  if (!f.precision.empty()) {
    const Precision p = ParsePrecision(f.precision);
    if (const std::string note = PrecisionNote(p); !note.empty()) Log("note: " + note);
    overrides["precision"] = f.precision;
  }
  if (f.bos) overrides["bos"] = true;
  if (f.no_bos) overrides["bos"] = false;
  if (!f.out.empty())
    overrides["out"] = f.out;
  else if (!f.resume.empty()) {
    // Continue writing where the checkpoint lives.
    std::string dir = FindCheckpoint(f.resume);
    overrides["out"] = std::filesystem::path(dir).parent_path().string();
  }
  ApplyJson(c, overrides, "command line");
  if (!f.write_stream.empty()) {
    // One continuous Bigram-Backcopy sequence (BOS first when the config has bos), for
    // `sinkscope stream --tokens`: the synthetic task has no text and no tokenizer.
    if (c.data != DataKind::kBigramBackcopy)
      Fail(
          "--write-stream: only for data \"bigram-backcopy\" (stream a text run's corpus with "
          "`sinkscope stream --text`)");
    CheckOutputs(
        {{"--write-stream", f.write_stream}},
        {{"--config", f.config_path}, {"--corpus", c.corpus}, {"--tokenizer", c.tokenizer}});
    CheckInt("--stream-tokens", f.stream_tokens, 2, std::numeric_limits<int>::max());
    CheckMemory(static_cast<uint64_t>(f.stream_tokens) * sizeof(int),
                fmt::format("--stream-tokens {}", f.stream_tokens));
    const BigramBackcopy source(c.vocab_size, c.bb_triggers, c.bb_seed, c.bos);
    std::vector<int> tokens(f.stream_tokens);
    Rng rng(c.seed ^ 0x5eedULL);
    source.Sample(rng, static_cast<int>(tokens.size()), tokens.data());
    WriteFileAtomic(f.write_stream, [&](std::FILE* out) {
      for (size_t i = 0; i < tokens.size(); ++i)
        std::fprintf(out, "%d%c", tokens[i],
                     (i + 1) % 32 == 0 || i + 1 == tokens.size() ? '\n' : ' ');
    });
    fmt::print("wrote {} Bigram-Backcopy tokens to {}\n", tokens.size(), f.write_stream);
    return;
  }
  TrainerOptions options;
  options.resume = f.resume;
  options.stop_after = f.stop_after;
  options.overwrite = f.overwrite;
  const TrainResult r = RunTraining(c, options);
  if (Comm::World().is_root())
    fmt::print("steps\t{}\nval_loss\t{}\ntokens_per_s\t{:.0f}\ncheckpoint\t{}\n", r.end_step,
               r.val_step > 0 ? fmt::format("{:.6g}", r.val_loss) : "none (no evaluation ran)",
               r.tokens_per_second, r.last_checkpoint);
}

}  // namespace

void RegisterTrain(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Pretrain a small Llama-style or MoE model with sink telemetry (mpirun: data-parallel)");
  cmd->add_option("--config", flags->config_path,
                  "JSON config file (flat keys, see docs/TRAINING.md)");
  cmd->add_option("--preset", flags->preset,
                  "quick | bigram-backcopy | bigram-backcopy-nobos | text | moe-quick");
  cmd->add_option("--out", flags->out, "Run directory (checkpoints step-<N>/, telemetry.jsonl)");
  cmd->add_option("--resume", flags->resume,
                  "Continue from a run directory (newest checkpoint) or step-<N>");
  cmd->add_flag("--overwrite", flags->overwrite,
                "Start over in a --out directory that holds an earlier run (its checkpoints, logs "
                "and prepared data are removed first)");
  cmd->add_option("--set", flags->sets, "Override any config key: --set dim=128 --set data=text");
  cmd->add_option("--steps", flags->steps, "Total optimiser steps");
  cmd->add_option("--lr", flags->lr, "Peak learning rate");
  AddSeedOption(
      cmd, [flags](uint64_t v) { flags->seed = v; }, "the init and the data order", "",
      OptionGroup::kVerb);
  // --threads, --precision and --no-bos here are config keys, not the option table's
  // (cli/options.cpp OwnMeanings).
  cmd->add_option("--threads", flags->threads, "Threads for OpenMP and OpenBLAS (0: default)");
  cmd->add_option("--precision", flags->precision,
                  "f32 (default) or bf16: the projections' forward and input-gradient products "
                  "with bf16 operands and f32 sums; weights, optimiser and weight gradients f32");
  cmd->add_option("--batch", flags->batch, "Global batch size B (sequences)");
  cmd->add_option("--seq-len", flags->seq_len, "Sequence length T");
  cmd->add_option("--eval-every", flags->eval_every, "Steps between evaluations");
  cmd->add_option("--checkpoint-every", flags->checkpoint_every, "Steps between checkpoints");
  cmd->add_option("--corpus", flags->corpus, "Text corpus (data \"text\")");
  cmd->add_flag("--bos", flags->bos, "BOS at position 0 / windows at document starts");
  cmd->add_flag("--no-bos", flags->no_bos, "No BOS: position 0 is an arbitrary token");
  cmd->add_option("--stop-after", flags->stop_after,
                  "Stop after this step without a final checkpoint (testing)");
  cmd->add_option("--eval", flags->eval_dir,
                  "Only evaluate a checkpoint through the analysis forward pass");
  cmd->add_option("--eval-batches", flags->eval_batches, "Validation batches for --eval");
  cmd->add_option(
      "--write-stream", flags->write_stream,
      "Write one long Bigram-Backcopy sequence (token ids) for `stream --tokens`, then exit");
  cmd->add_option("--stream-tokens", flags->stream_tokens,
                  "Tokens for --write-stream (default 200000)");
  cmd->callback([flags] {
    try {
      RunTrain(*flags);
    } catch (const Error& e) {
      // Under mpirun the other ranks would wait forever in a collective: report and abort all.
      const train::Comm& comm = train::Comm::World();
      if (comm.size() > 1) {
        std::fprintf(stderr, "sinkscope: error (rank %d): %s\n", comm.rank(), e.what());
        comm.Abort(1);
      }
      throw;
    }
  });
}

}  // namespace ss::cli
