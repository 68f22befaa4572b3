#include "train/trainer.h"

#include "kernels/parallel.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fstream>

#include "common/error.h"
#include "common/file_util.h"
#include "report/report.h"
#include "train/checkpoint.h"
#include "train/comm.h"
#include "train/data.h"
#include "train/optimizer.h"
#include "train/telemetry.h"
#include "train/train_model.h"

namespace ss::train {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kDataStream = 0xda7a5eedull;  // the data RNG is seed ^ this; init uses seed

// Keeps the lines of a log whose first field (a step number) is <= max_step: a resumed run
// rewrites what came after its checkpoint.
void TruncateLog(const std::string& path, int max_step, bool json) {
  if (!FileExists(path)) return;
  std::ifstream in(path);
  std::string line, kept;
  while (std::getline(in, line)) {
    int step = -1;
    if (json) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.contains("step") && j["step"].is_number_integer() &&
          std::abs(j["step"].get<int64_t>()) <= std::numeric_limits<int>::max())
        step = static_cast<int>(j["step"].get<int64_t>());
    } else {
      step = std::atoi(line.c_str());
      if (line.rfind("step", 0) == 0) step = 0;  // header
    }
    if (step >= 0 && step <= max_step) kept += line + "\n";
  }
  WriteFileAtomic(path, kept);
}

void AppendLine(const std::string& path, const std::string& line) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (!f) Fail("{}: cannot append ({})", path, std::strerror(errno));
  std::fputs(line.c_str(), f);
  std::fputc('\n', f);
  std::fflush(f);
  std::fclose(f);
}

std::string Join(const std::vector<double>& v, const char* fmt_one) {
  std::string s;
  for (double x : v) s += fmt::format(fmt::runtime(fmt_one), x);
  return s;
}

// The config's "threads" (0: the default), refused if the OpenBLAS in use cannot run that many.
void SetThreads(int threads) {
  if (threads > 0) SetThreadCountChecked("threads", threads);
}

// What a run writes directly in its directory (trainer.h's list, checkpoint.h's names, the trace
// cache), which --overwrite may remove.
bool IsRunOutput(const std::string& name) {
  if (name == "train_loss.tsv" || name == "telemetry.jsonl" || name == ".sinkscope-trace-cache")
    return true;
  if (name.rfind("step-", 0) == 0)
    return name.size() > 5 && name.find_first_not_of("0123456789", 5) == std::string::npos;
  return name.rfind(".step-", 0) == 0 && name.find(".tmp.") != std::string::npos;
}

}  // namespace

void PrepareRunDirectory(const std::string& out, bool resume, bool overwrite,
                         const TrainConfig& config) {
  if (resume && overwrite) Fail("--resume and --overwrite: give one, not both");
  std::error_code ec;
  if (!fs::exists(out, ec) || resume) return;
  if (!fs::is_directory(out, ec)) Fail("--out {}: exists and is not a directory", out);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(out, ec))
    names.push_back(e.path().filename().string());
  if (ec) Fail("--out {}: cannot list: {}", out, ec.message());
  if (names.empty()) return;
  std::sort(names.begin(), names.end());
  if (!overwrite)
    Fail(
        "--out {}: is not empty (holds {}{}); pass --resume {} to continue the run there, or "
        "--overwrite to replace it",
        out, fmt::join(names.begin(), names.begin() + std::min<size_t>(names.size(), 3), ", "),
        names.size() > 3 ? fmt::format(" and {} more", names.size() - 3) : "", out);
  // Never remove a file the new run reads.
  auto is_input = [&](const fs::path& p) {
    for (const std::string& in : {config.corpus, config.tokenizer})
      if (!in.empty() && fs::equivalent(p, in, ec)) return true;
    return false;
  };
  for (const std::string& name : names) {
    const fs::path p = fs::path(out) / name;
    if (IsRunOutput(name) && !is_input(p)) {
      fs::remove_all(p, ec);
      if (ec) Fail("--overwrite: cannot remove {}: {}", p.string(), ec.message());
    }
  }
  // data/: the tokenizer and token files PrepareTextCorpus made (it reuses them when present).
  const fs::path data = fs::path(out) / "data";
  if (fs::is_directory(data, ec)) {
    for (const char* name : {"tokenizer.model", "tokens.u16", "docs.u32", "tokenizer.tmp.model",
                             "tokenizer.tmp.vocab"})
      if (!is_input(data / name)) fs::remove(data / name, ec);
    fs::remove(data, ec);  // only if nothing else is left in it
  }
}

TrainResult RunTraining(const TrainConfig& config_in, const TrainerOptions& options) {
  const Comm& comm = Comm::World();
  TrainConfig config = config_in;
  config.Validate("config");
  {
    // Weights, gradients and AdamW's two moments: 16 bytes a parameter (activations come on top).
    // Refused before anything is allocated, rather than failing inside an allocation.
    const double D = config.dim, Dh = D / config.n_heads, F = config.EffectiveHiddenDim();
    const double params =
        2 * D * config.vocab_size +
        config.n_layers * (D * Dh * 2 * (config.n_heads + config.n_kv_heads) +
                           3 * D * F * std::max(1, config.n_experts));
    const double bytes = 16 * params;
    CheckMemory(bytes < 1.8e19 ? static_cast<uint64_t>(bytes) : std::numeric_limits<uint64_t>::max(),
                fmt::format("the model of this config (about {:.3g} parameters, 16 bytes each for "
                            "training)", params));
  }
  if (config.batch_size % comm.size() != 0)
    Fail("batch_size {} is not divisible by the {} MPI ranks (the global batch is split evenly)",
         config.batch_size, comm.size());
  SetThreads(config.threads);
  const std::string out = config.out;
  // Under MPI only rank 0 removes an earlier run (--overwrite); every rank refuses a non-empty
  // directory alike before the barrier below, after which rank 0 writes into it.
  if (comm.is_root() || !options.overwrite)
    PrepareRunDirectory(out, !options.resume.empty(), options.overwrite, config);
  if (comm.is_root()) fs::create_directories(out);
  comm.Barrier();
  CheckWritable(out + "/telemetry.jsonl", "--out");

  // Resume: the checkpoint must come from a compatible configuration.
  std::string resume_dir;
  if (!options.resume.empty()) {
    resume_dir = FindCheckpoint(options.resume);
    const TrainConfig saved = ReadCheckpointConfig(resume_dir);
    const auto diff = IncompatibleFields(saved, config);
    if (!diff.empty())
      Fail("--resume: {} was trained with a different configuration ({} differ: checkpoint {} vs now {})",
           resume_dir, fmt::join(diff, ", "), ToJson(saved)[diff[0]].dump(), ToJson(config)[diff[0]].dump());
  }

  std::string tokenizer;
  std::unique_ptr<DataSource> data;
  if (comm.is_root()) data = MakeDataSource(config, out, &tokenizer);
  comm.Barrier();
  if (!comm.is_root()) data = MakeDataSource(config, out, &tokenizer);

  const int B = config.batch_size, T = config.seq_len, local_B = B / comm.size();
  TrainModel<float> model(config, local_B, T);
  model.ranks = comm.size();
  model.all_reduce_sum = [&comm](double* x, int64_t n) { comm.AllReduceSum(x, n); };
  AdamW adam;
  adam.Init(model.layout().total);
  Rng data_rng(config.seed ^ kDataStream);
  TrainResult result;
  int64_t tokens_seen = 0;
  if (!resume_dir.empty()) {
    TrainerState s = ReadCheckpointState(resume_dir, config, model.layout());
    model.params = std::move(s.params);
    adam.m = std::move(s.adam_m);
    adam.v = std::move(s.adam_v);
    adam.t = s.adam_t;
    data_rng.set_state(s.rng);
    tokens_seen = s.tokens_seen;
    result.start_step = s.step;
    result.last_checkpoint = resume_dir;
  } else {
    model.InitParams(config.seed);
  }
  const std::string loss_log = out + "/train_loss.tsv", telemetry_log = out + "/telemetry.jsonl";
  if (comm.is_root()) {
    if (resume_dir.empty()) {
      WriteFileAtomic(loss_log, "step\tloss\tce\taux\tlr\tgrad_norm\n");
      WriteFileAtomic(telemetry_log, "");
    } else {
      TruncateLog(loss_log, result.start_step, false);
      TruncateLog(telemetry_log, result.start_step, true);
    }
  }
  auto log = [&](const std::string& line) {
    if (comm.is_root() && !options.quiet) std::fprintf(stderr, "%s\n", line.c_str());
  };
  log(fmt::format("train: {} | {} params | {} layers x {} wide, {} heads ({} kv){} | batch {} x {} "
                  "| {} steps{}{}{}",
                  data->Describe(), model.layout().total, config.n_layers, config.dim,
                  config.n_heads, config.n_kv_heads,
                  config.n_experts ? fmt::format(", {} experts top-{}", config.n_experts, config.n_experts_per_tok) : "",
                  B, T, config.steps, comm.size() > 1 ? fmt::format(" | {} MPI ranks", comm.size()) : "",
                  config.precision == "bf16" ? " | bf16 products" : "",
                  resume_dir.empty() ? "" : " | resumed from " + resume_dir));

  std::vector<int> tokens(size_t(B) * T), targets(size_t(B) * T);
  const size_t local_off = size_t(comm.rank()) * local_B * T;
  const int local_n = local_B * T;  // tokens of this rank in a batch
  auto state_now = [&](int step) {
    TrainerState s;
    s.step = step;
    s.adam_t = adam.t;
    s.rng = data_rng.state();
    s.tokens_seen = tokens_seen;
    s.params = model.params;
    s.adam_m = adam.m;
    s.adam_v = adam.v;
    return s;
  };
  auto checkpoint = [&](int step) {
    if (comm.is_root()) {
      result.last_checkpoint = SaveCheckpoint(out, config, model.layout(), state_now(step), tokenizer);
      log(fmt::format("checkpoint {}", result.last_checkpoint));
    }
    comm.Barrier();
  };
  // Bigram-Backcopy: the validation loss split by the input token (Guo et al.): after a trigger the
  // next token is the copy of the one before it, elsewhere a bigram draw.
  const auto* backcopy = dynamic_cast<const BigramBackcopy*>(data.get());
  auto evaluate = [&](int step, double train_loss) {
    double val = 0;
    double split[4] = {0, 0, 0, 0};  // trigger loss sum, trigger count, other sum, other count
    for (int i = 0; i < config.eval_batches; ++i) {
      data->ValBatch(i, B, T, tokens.data(), targets.data());
      model.Forward(tokens.data() + local_off, targets.data() + local_off);
      val += model.ce_loss();
      if (backcopy)
        for (int n = 0; n < local_n; ++n) {
          const bool trigger = backcopy->IsTrigger(tokens[local_off + n]);
          split[trigger ? 0 : 2] += model.TokenLoss(n);
          split[trigger ? 1 : 3] += 1;
        }
    }
    val /= config.eval_batches;
    comm.AllReduceMean(&val, 1);
    if (backcopy) comm.AllReduceMean(split, 4);
    result.val_loss = val;
    result.val_step = step;
    if (!comm.is_root()) return;
    data->ValBatch(0, B, T, tokens.data(), targets.data());
    std::vector<std::vector<int>> seqs;
    for (int b = 0; b < std::min(B, 4); ++b)
      seqs.emplace_back(tokens.begin() + size_t(b) * T, tokens.begin() + size_t(b + 1) * T);
    const Model exported = ExportModel(config, model.layout(), model.params);
    const SinkProfile profile = MeasureSinkProfile(exported, seqs);
    nlohmann::ordered_json j;
    j["step"] = step;
    j["tokens"] = tokens_seen;
    j["train_loss"] = train_loss;
    j["val_loss"] = val;
    if (backcopy && split[1] > 0 && split[3] > 0) {
      j["trigger_loss"] = split[0] / split[1];
      j["other_loss"] = split[2] / split[3];
    }
    j["lr"] = LearningRate(config, std::max(0, step - 1));
    const nlohmann::json pj = ToJson(profile);
    for (auto it = pj.begin(); it != pj.end(); ++it) j[it.key()] = it.value();
    AppendLine(telemetry_log, j.dump());
    log(fmt::format("step {:>6} | train {:.4f} | val {:.4f} | sink@0.3{}| a0{}| p0 ratio{}", step,
                    train_loss, val, Join(profile.sink_rate, " {:.2f}"), Join(profile.alpha0, " {:.2f}"),
                    Join(profile.p0_norm_ratio, " {:.1f}")));
  };

  report::Progress progress("train", int64_t(config.steps - result.start_step) * B * T, "tok");
  double train_seconds = 0;
  const auto wall_start = std::chrono::steady_clock::now();
  for (int step = result.start_step; step < config.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    data->TrainBatch(data_rng, B, T, tokens.data(), targets.data());
    double loss = model.Forward(tokens.data() + local_off, targets.data() + local_off);
    comm.AllReduceMean(&loss, 1);
    if (!std::isfinite(loss)) {
      std::string where;
      for (const ParamTensor& t : model.layout().tensors)
        for (int64_t i = 0; i < t.numel && where.empty(); ++i)
          if (!std::isfinite(model.params[t.offset + i])) where = "parameter " + t.name;
      if (where.empty()) where = "activation " + model.FirstNonFiniteActivation();
      Fail("step {}: the loss is {} (first non-finite tensor: {}); stopped without saving, the last "
           "good checkpoint is {}",
           step + 1, loss, where, result.last_checkpoint.empty() ? "none (no checkpoint yet)" : result.last_checkpoint);
    }
    model.Backward();
    comm.AllReduceMean(model.grads.data(), int64_t(model.grads.size()));
    const double norm = ClipGradNorm(model.grads, config.grad_clip);
    if (!std::isfinite(norm)) {
      std::string where = "?";
      for (const ParamTensor& t : model.layout().tensors)
        for (int64_t i = 0; i < t.numel && where == "?"; ++i)
          if (!std::isfinite(model.grads[t.offset + i])) where = t.name;
      Fail("step {}: the gradient norm is {} (first non-finite gradient: {}); stopped without "
           "saving, the last good checkpoint is {}",
           step + 1, norm, where, result.last_checkpoint.empty() ? "none (no checkpoint yet)" : result.last_checkpoint);
    }
    const double lr = LearningRate(config, step);
    adam.Step(model.params, model.grads, model.layout(), config, lr);
    tokens_seen += int64_t(B) * T;
    train_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    result.losses.push_back(loss);
    const int done = step + 1;
    if (comm.is_root())
      AppendLine(loss_log, fmt::format("{}\t{:.17g}\t{:.9g}\t{:.9g}\t{:.6g}\t{:.6g}", done, loss,
                                       model.ce_loss(), model.aux_loss(), lr, norm));
    if (!options.quiet && comm.is_root()) progress.Update(int64_t(done - result.start_step) * B * T);
    if (done % config.eval_every == 0 || done == config.steps) evaluate(done, loss);
    if (done % config.checkpoint_every == 0 || done == config.steps) checkpoint(done);
    if (options.stop_after > 0 && done == options.stop_after) break;
  }
  if (!options.quiet && comm.is_root()) progress.Finish();
  result.end_step = result.start_step + static_cast<int>(result.losses.size());
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  result.tokens_per_second = train_seconds > 0 ? double(result.losses.size()) * B * T / train_seconds : 0;
  log(fmt::format("train: {} steps in {:.1f} s, {:.0f} tokens/s (training only); {}",
                  result.losses.size(), result.seconds, result.tokens_per_second,
                  result.val_step > 0 ? fmt::format("last val loss {:.4f} (step {})",
                                                    result.val_loss, result.val_step)
                                      : std::string("no evaluation ran")));
  return result;
}

double EvaluateCheckpoint(const std::string& step_dir, int batches) {
  const TrainConfig config = ReadCheckpointConfig(step_dir);
  const Model model = LoadCheckpointModel(step_dir);
  std::unique_ptr<DataSource> data;
  if (config.data == DataKind::kBigramBackcopy) {
    data = std::make_unique<BigramBackcopy>(config.vocab_size, config.bb_triggers, config.bb_seed, config.bos);
  } else {
    // Text: the token files of the run the checkpoint came from.
    const std::string dir = fs::path(step_dir).parent_path().string() + "/data";
    data = std::make_unique<TextData>(
        TextCorpusFiles{config.tokenizer.empty() ? dir + "/tokenizer.model" : config.tokenizer,
                        dir + "/tokens.u16", dir + "/docs.u32"},
        config);
  }
  const int B = config.batch_size, T = config.seq_len, V = config.vocab_size;
  std::vector<int> tokens(size_t(B) * T), targets(size_t(B) * T);
  RunState state;
  double total = 0;
  for (int i = 0; i < batches; ++i) {
    data->ValBatch(i, B, T, tokens.data(), targets.data());
    for (int b = 0; b < B; ++b) {
      KVCache cache = KVCache::Create(model.config, T);
      ForwardRequest req;
      req.tokens = std::span<const int>(tokens.data() + size_t(b) * T, T);
      Tensor logits = Forward(model, cache, state, req);
      for (int t = 0; t < T; ++t) {
        const float* row = logits.row(t);
        const double mx = *std::max_element(row, row + V);
        double z = 0;
        for (int v = 0; v < V; ++v) z += std::exp(row[v] - mx);
        total += std::log(z) + mx - row[targets[size_t(b) * T + t]];
      }
    }
  }
  return total / (double(batches) * B * T);
}

}  // namespace ss::train
