#include "train/trainer.h"

#include <cblas.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>

#include "common/error.h"
#include "common/file_util.h"
#include "kernels/parallel.h"
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

namespace {

// One run of RunTraining, in the phases it goes through: the configuration checked, the run
// directory and the data prepared (resume: the checkpoint's configuration compared), the model and
// optimiser initialised or restored, the logs opened; then per step the update, and on cadence an
// evaluation with the sink telemetry and a checkpoint.
class TrainingRun {
 public:
  TrainingRun(const TrainConfig& config, const TrainerOptions& options)
      : comm_(Comm::World()), config_(config), options_(options) {}

  TrainResult Run() {
    CheckConfig();
    PrepareOutput();
    PrepareData();
    InitModel();
    OpenLogs();
    report::Progress progress("train", int64_t(config_.steps - result_.start_step) * B_ * T_,
                              "tok");
    const auto wall_start = std::chrono::steady_clock::now();
    for (int step = result_.start_step; step < config_.steps; ++step) {
      Step(step);
      const int done = step + 1;
      if (!options_.quiet && comm_.is_root())
        progress.Update(int64_t(done - result_.start_step) * B_ * T_);
      if (done % config_.eval_every == 0 || done == config_.steps)
        Evaluate(done, result_.losses.back());
      if (done % config_.checkpoint_every == 0 || done == config_.steps) Checkpoint(done);
      if (options_.stop_after > 0 && done == options_.stop_after) break;
    }
    if (!options_.quiet && comm_.is_root()) progress.Finish();
    result_.end_step = result_.start_step + static_cast<int>(result_.losses.size());
    result_.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    result_.tokens_per_second =
        train_seconds_ > 0 ? double(result_.losses.size()) * B_ * T_ / train_seconds_ : 0;
    Log(fmt::format("train: {} steps in {:.1f} s, {:.0f} tokens/s (training only); {}",
                    result_.losses.size(), result_.seconds, result_.tokens_per_second,
                    result_.val_step > 0 ? fmt::format("last val loss {:.4f} (step {})",
                                                       result_.val_loss, result_.val_step)
                                         : std::string("no evaluation ran")));
    return result_;
  }

 private:
  void Log(const std::string& line) const {
    if (comm_.is_root() && !options_.quiet) std::fprintf(stderr, "%s\n", line.c_str());
  }

  // The configuration, its memory (before anything is allocated) and its split over the ranks.
  void CheckConfig() {
    config_.Validate("config");
    // Weights, gradients and AdamW's two moments: 16 bytes a parameter (activations come on top).
    // Refused before anything is allocated, rather than failing inside an allocation.
    const double D = config_.dim, Dh = D / config_.n_heads, F = config_.EffectiveHiddenDim();
    const double params = 2 * D * config_.vocab_size +
                          config_.n_layers * (D * Dh * 2 * (config_.n_heads + config_.n_kv_heads) +
                                              3 * D * F * std::max(1, config_.n_experts));
    const double bytes = 16 * params;
    CheckMemory(
        bytes < 1.8e19 ? static_cast<uint64_t>(bytes) : std::numeric_limits<uint64_t>::max(),
        fmt::format("the model of this config (about {:.3g} parameters, 16 bytes each for "
                    "training)",
                    params));
    if (config_.batch_size % comm_.size() != 0)
      Fail("batch_size {} is not divisible by the {} MPI ranks (the global batch is split evenly)",
           config_.batch_size, comm_.size());
  }

  // Threads, the run directory, and (resume) the checkpoint, which must come from a compatible
  // configuration.
  void PrepareOutput() {
    SetThreads(config_.threads);
    const std::string& out = config_.out;
    // Under MPI only rank 0 removes an earlier run (--overwrite); every rank refuses a non-empty
    // directory alike before the barrier below, after which rank 0 writes into it.
    if (comm_.is_root() || !options_.overwrite)
      PrepareRunDirectory(out, !options_.resume.empty(), options_.overwrite, config_);
    if (comm_.is_root()) CreateDirectories(out, "--out");
    comm_.Barrier();
    CheckWritable(out + "/telemetry.jsonl", "--out");
    if (options_.resume.empty()) return;
    resume_dir_ = FindCheckpoint(options_.resume);
    const TrainConfig saved = ReadCheckpointConfig(resume_dir_);
    const auto diff = IncompatibleFields(saved, config_);
    if (!diff.empty())
      Fail(
          "--resume: {} was trained with a different configuration ({} differ: checkpoint {} vs "
          "now {})",
          resume_dir_, fmt::join(diff, ", "),
          ToJson(saved)[diff[0]].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
          ToJson(config_)[diff[0]].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }

  // The data source: rank 0 prepares it (a text corpus is tokenised once), then every rank opens
  // it.
  void PrepareData() {
    if (comm_.is_root()) data_ = MakeDataSource(config_, config_.out, &tokenizer_);
    comm_.Barrier();
    if (!comm_.is_root()) data_ = MakeDataSource(config_, config_.out, &tokenizer_);
    B_ = config_.batch_size, T_ = config_.seq_len;
    tokens_.resize(size_t(B_) * T_);
    targets_.resize(size_t(B_) * T_);
    // Bigram-Backcopy: the validation loss split by the input token (Guo et al.): after a trigger
    // the next token is the copy of the one before it, elsewhere a bigram draw.
    backcopy_ = dynamic_cast<const BigramBackcopy*>(data_.get());
  }

  // The model (this rank's share of the batch) and AdamW: fresh, or restored from the checkpoint.
  void InitModel() {
    const int local_B = B_ / comm_.size();
    local_off_ = size_t(comm_.rank()) * local_B * T_;
    local_n_ = local_B * T_;
    model_ = std::make_unique<TrainModel<float>>(config_, local_B, T_);
    model_->ranks = comm_.size();
    model_->all_reduce_sum = [this](double* x, int64_t n) { comm_.AllReduceSum(x, n); };
    adam_.Init(model_->layout().total);
    data_rng_ = Rng(config_.seed ^ kDataStream);
    if (resume_dir_.empty()) {
      model_->InitParams(config_.seed);
      return;
    }
    TrainerState s = ReadCheckpointState(resume_dir_, config_, model_->layout());
    model_->params = std::move(s.params);
    adam_.m = std::move(s.adam_m);
    adam_.v = std::move(s.adam_v);
    adam_.t = s.adam_t;
    data_rng_.set_state(s.rng);
    tokens_seen_ = s.tokens_seen;
    result_.start_step = s.step;
    result_.last_checkpoint = resume_dir_;
  }

  // train_loss.tsv and telemetry.jsonl: new, or cut back to the resumed checkpoint's step.
  void OpenLogs() {
    loss_log_ = config_.out + "/train_loss.tsv", telemetry_log_ = config_.out + "/telemetry.jsonl";
    if (comm_.is_root()) {
      if (resume_dir_.empty()) {
        WriteFileAtomic(loss_log_, "step\tloss\tce\taux\tlr\tgrad_norm\n");
        WriteFileAtomic(telemetry_log_, "");
      } else {
        TruncateLog(loss_log_, result_.start_step, false);
        TruncateLog(telemetry_log_, result_.start_step, true);
      }
    }
    const TrainConfig& c = config_;
    Log(fmt::format(
        "train: {} | {} params | {} layers x {} wide, {} heads ({} kv){} | batch {} x {} "
        "| {} steps{}{}{}",
        data_->Describe(), model_->layout().total, c.n_layers, c.dim, c.n_heads, c.n_kv_heads,
        c.n_experts ? fmt::format(", {} experts top-{}", c.n_experts, c.n_experts_per_tok) : "", B_,
        T_, c.steps, comm_.size() > 1 ? fmt::format(" | {} MPI ranks", comm_.size()) : "",
        c.precision == "bf16" ? " | bf16 products" : "",
        resume_dir_.empty() ? "" : " | resumed from " + resume_dir_));
  }

  // One update: a batch, forward, backward, the ranks' mean, clipping and AdamW; a non-finite loss
  // or gradient stops the run before anything is saved, naming the step and the first such tensor.
  void Step(int step) {
    TrainModel<float>& model = *model_;
    const auto t0 = std::chrono::steady_clock::now();
    data_->TrainBatch(data_rng_, B_, T_, tokens_.data(), targets_.data());
    double loss = model.Forward(tokens_.data() + local_off_, targets_.data() + local_off_);
    comm_.AllReduceMean(&loss, 1);
    if (!std::isfinite(loss)) {
      std::string where;
      for (const ParamTensor& t : model.layout().tensors)
        for (int64_t i = 0; i < t.numel && where.empty(); ++i)
          if (!std::isfinite(model.params[t.offset + i])) where = "parameter " + t.name;
      if (where.empty()) where = "activation " + model.FirstNonFiniteActivation();
      Fail(
          "step {}: the loss is {} (first non-finite tensor: {}); stopped without saving, the last "
          "good checkpoint is {}",
          step + 1, loss, where, LastGoodCheckpoint());
    }
    model.Backward();
    comm_.AllReduceMean(model.grads.data(), int64_t(model.grads.size()));
    const double norm = ClipGradNorm(model.grads, config_.grad_clip);
    if (!std::isfinite(norm)) {
      std::string where = "?";
      for (const ParamTensor& t : model.layout().tensors)
        for (int64_t i = 0; i < t.numel && where == "?"; ++i)
          if (!std::isfinite(model.grads[t.offset + i])) where = t.name;
      Fail(
          "step {}: the gradient norm is {} (first non-finite gradient: {}); stopped without "
          "saving, the last good checkpoint is {}",
          step + 1, norm, where, LastGoodCheckpoint());
    }
    const double lr = LearningRate(config_, step);
    adam_.Step(model.params, model.grads, model.layout(), config_, lr);
    tokens_seen_ += int64_t(B_) * T_;
    train_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    result_.losses.push_back(loss);
    if (comm_.is_root())
      AppendLine(loss_log_, fmt::format("{}\t{:.17g}\t{:.9g}\t{:.9g}\t{:.6g}\t{:.6g}", step + 1,
                                        loss, model.ce_loss(), model.aux_loss(), lr, norm));
  }

  std::string LastGoodCheckpoint() const {
    return result_.last_checkpoint.empty() ? "none (no checkpoint yet)" : result_.last_checkpoint;
  }

  // Validation loss over the fixed batches (on Bigram-Backcopy split after triggers and elsewhere),
  // then on rank 0 the sink profile of the current weights, one telemetry line and a terminal line.
  void Evaluate(int step, double train_loss) {
    TrainModel<float>& model = *model_;
    double val = 0;
    double split[4] = {0, 0, 0, 0};  // trigger loss sum, trigger count, other sum, other count
    for (int i = 0; i < config_.eval_batches; ++i) {
      data_->ValBatch(i, B_, T_, tokens_.data(), targets_.data());
      model.Forward(tokens_.data() + local_off_, targets_.data() + local_off_);
      val += model.ce_loss();
      if (backcopy_)
        for (int n = 0; n < local_n_; ++n) {
          const bool trigger = backcopy_->IsTrigger(tokens_[local_off_ + n]);
          split[trigger ? 0 : 2] += model.TokenLoss(n);
          split[trigger ? 1 : 3] += 1;
        }
    }
    val /= config_.eval_batches;
    comm_.AllReduceMean(&val, 1);
    if (backcopy_) comm_.AllReduceMean(split, 4);
    result_.val_loss = val;
    result_.val_step = step;
    if (!comm_.is_root()) return;
    data_->ValBatch(0, B_, T_, tokens_.data(), targets_.data());
    std::vector<std::vector<int>> seqs;
    for (int b = 0; b < std::min(B_, 4); ++b)
      seqs.emplace_back(tokens_.begin() + size_t(b) * T_, tokens_.begin() + size_t(b + 1) * T_);
    const Model exported = ExportModel(config_, model.layout(), model.params);
    const SinkProfile profile = MeasureSinkProfile(exported, seqs);
    nlohmann::ordered_json j;
    j["step"] = step;
    j["tokens"] = tokens_seen_;
    j["train_loss"] = train_loss;
    j["val_loss"] = val;
    if (backcopy_ && split[1] > 0 && split[3] > 0) {
      j["trigger_loss"] = split[0] / split[1];
      j["other_loss"] = split[2] / split[3];
    }
    j["lr"] = LearningRate(config_, std::max(0, step - 1));
    const nlohmann::json pj = ToJson(profile);
    for (auto it = pj.begin(); it != pj.end(); ++it) j[it.key()] = it.value();
    AppendLine(telemetry_log_, j.dump());
    Log(fmt::format("step {:>6} | train {:.4f} | val {:.4f} | sink@0.3{}| a0{}| p0 ratio{}", step,
                    train_loss, val, Join(profile.sink_rate, " {:.2f}"),
                    Join(profile.alpha0, " {:.2f}"), Join(profile.p0_norm_ratio, " {:.1f}")));
  }

  void Checkpoint(int step) {
    if (comm_.is_root()) {
      TrainerState s;
      s.step = step;
      s.adam_t = adam_.t;
      s.rng = data_rng_.state();
      s.tokens_seen = tokens_seen_;
      s.params = model_->params;
      s.adam_m = adam_.m;
      s.adam_v = adam_.v;
      result_.last_checkpoint =
          SaveCheckpoint(config_.out, config_, model_->layout(), s, tokenizer_);
      Log(fmt::format("checkpoint {}", result_.last_checkpoint));
    }
    comm_.Barrier();
  }

  const Comm& comm_;
  TrainConfig config_;
  const TrainerOptions& options_;
  std::string resume_dir_, tokenizer_, loss_log_, telemetry_log_;
  std::unique_ptr<DataSource> data_;
  const BigramBackcopy* backcopy_ = nullptr;
  int B_ = 0, T_ = 0;     // the global batch
  size_t local_off_ = 0;  // this rank's first token in a batch
  int local_n_ = 0;       // tokens of this rank in a batch
  std::unique_ptr<TrainModel<float>> model_;
  AdamW adam_;
  Rng data_rng_{0};
  std::vector<int> tokens_, targets_;  // (B * T) the current batch
  TrainResult result_;
  int64_t tokens_seen_ = 0;
  double train_seconds_ = 0;
};

}  // namespace

TrainResult RunTraining(const TrainConfig& config, const TrainerOptions& options) {
  return TrainingRun(config, options).Run();
}

double EvaluateCheckpoint(const std::string& step_dir, int batches) {
  const TrainConfig config = ReadCheckpointConfig(step_dir);
  const Model model = LoadCheckpointModel(step_dir);
  std::unique_ptr<DataSource> data;
  if (config.data == DataKind::kBigramBackcopy) {
    data = std::make_unique<BigramBackcopy>(config.vocab_size, config.bb_triggers, config.bb_seed,
                                            config.bos);
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
