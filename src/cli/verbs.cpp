#include "cli/verbs.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "analysis/conditions.h"
#include "cli/commands.h"
#include "common/error.h"
#include "common/file_util.h"
#include "common/sha256.h"
#include "io/hf_config.h"
#include "model/precision.h"
#include "report/report.h"
#include "tokenizer/find.h"
#include "train/data.h"
#include "train/rng.h"
#include "train/train_config.h"

namespace ss::cli {

// ---- analyze

void ValidateAnalyze(const AnalyzeRequest& r) {
  if (r.conditions.empty()) Fail("--conditions: expected at least one condition");
  r.input.Validate(static_cast<int>(r.conditions.size()));
  r.sink.Validate();
  if (r.attn_path != "fused" && r.attn_path != "materialised")
    Fail("--attention: expected fused or materialised, got '{}'", r.attn_path);
}

std::vector<std::vector<int>> AnalysisSamples(const Model& model, const SampleStream& input,
                                              const AnalyzeRequest& r, analysis::Condition condition) {
  const ModelConfig& c = model.config;
  analysis::SampleSpec spec{r.input.samples, r.input.length, r.input.seed,
                            c.vocab_size,    c.bos_id,       c.eos_id};
  if (r.input.has_prompt()) return {analysis::PromptSample(input.tokens, condition, spec)};
  return analysis::BuildSamples(input.tokens, condition, spec, input.flag);
}

analysis::AnalyzeReport RunAnalysis(const Model& model, const SampleStream& input,
                                    const AnalyzeRequest& r) {
  ValidateAnalyze(r);
  const ModelConfig& c = model.config;
  const auto heads = analysis::ParsePatternSpec(r.patterns, c, "--patterns");
  const bool has_prompt = r.input.has_prompt();
  // --length against the context and the memory before the samples are cut (with --prompt, T
  // comes from the prompt and is checked below).
  if (!has_prompt) CheckLength(c, r.input.length, r.allow_long_context, /*has_allow_flag=*/true);

  std::vector<std::vector<std::vector<int>>> samples;
  for (analysis::Condition cond : r.conditions) samples.push_back(AnalysisSamples(model, input, r, cond));
  int T = 0;
  for (const auto& s : samples) T = std::max(T, static_cast<int>(s[0].size()));
  if (T < 2) Fail("{}: {} token(s); the analysis needs at least 2", input.flag, T);
  if (T < r.sink.first_k)
    Fail("--first-k: K = {} is larger than the {} tokens per sample", r.sink.first_k, T);
  CheckLength(c, T, r.allow_long_context, /*has_allow_flag=*/true);
  if (c.max_seq_len > 0 && T > c.max_seq_len)
    Log(fmt::format("note: T = {} is beyond the trained context of {} tokens (--allow-long-context)",
                    T, c.max_seq_len));

  analysis::AnalyzeOptions options;
  options.first_k = r.sink.first_k;
  options.eps = r.sink.eps;
  options.path = r.attn_path == "fused" ? analysis::AttnPath::kFused
                                        : analysis::AttnPath::kMaterialised;
  options.patterns = heads;
  analysis::AnalyzeReport rep;
  for (size_t i = 0; i < r.conditions.size(); ++i) {
    report::Progress progress("analyze " + analysis::ConditionName(r.conditions[i]),
                              static_cast<int64_t>(samples[i].size()), "samples");
    options.progress = [&](int64_t done, int64_t) { progress.Update(done); };
    rep.conditions.push_back(analysis::AnalyzeSamples(model, r.conditions[i], samples[i], options));
    progress.Finish();
  }
  rep.model = analysis::IdentifyModel(model);
  rep.settings = {input.source,
                  has_prompt ? 1 : r.input.samples,
                  T,
                  r.input.seed,
                  r.sink.first_k,
                  r.sink.eps,
                  r.attn_path,
                  r.patterns,
                  r.allow_long_context};
  return rep;
}

// ---- explain

void ValidateExplain(const ExplainRequest& r) {
  r.input.Validate(/*conditions=*/1);
  explain::CheckOptions(r.options);
  if (r.ablation != "mean" && r.ablation != "zero")
    Fail("--ablation: expected mean or zero, got '{}'", r.ablation);
}

explain::ExplainReport RunExplanation(const Model& model, const SampleStream& input,
                                      const ExplainRequest& r) {
  ValidateExplain(r);
  const ModelConfig& c = model.config;
  const bool has_prompt = r.input.has_prompt();
  if (!has_prompt) CheckLength(c, r.input.length, /*allow_long=*/false, /*has_allow_flag=*/false);
  explain::ExplainOptions options = r.options;
  options.ablate = explain::ParseComponents(r.ablate, c, "--ablate");
  options.ablation = r.ablation == "zero" ? explain::Ablation::kZero : explain::Ablation::kMean;
  analysis::SampleSpec spec{r.input.samples, r.input.length, r.input.seed,
                            c.vocab_size,    c.bos_id,       c.eos_id};
  const std::vector<std::vector<int>> samples =
      has_prompt
          ? std::vector<std::vector<int>>{analysis::PromptSample(input.tokens, r.condition, spec)}
          : analysis::BuildSamples(input.tokens, r.condition, spec, input.flag);
  const int T = static_cast<int>(samples[0].size());
  if (T < SampleOptions::kMinLength)
    Fail("{}: {} token(s); explain needs at least {}", input.flag, T, SampleOptions::kMinLength);
  CheckLength(c, T, /*allow_long=*/false, /*has_allow_flag=*/false);

  report::Progress progress("explain", 1, "forwards");
  options.progress = [&](int64_t done, int64_t) { progress.Update(done); };
  explain::ExplainReport rep;
  rep.result = explain::Explain(model, samples, options);
  progress.Finish();
  rep.model = analysis::IdentifyModel(model);
  rep.source = input.source;
  rep.condition = analysis::ConditionName(r.condition);
  rep.seed = r.input.seed;
  return rep;
}

// ---- trace

void ValidateTrace(const TraceRequest& r) {
  if (r.checkpoints.empty()) Fail("--checkpoints: expected a run directory or checkpoints");
  ParsePrecision(r.precision);
  r.input.Validate(/*conditions=*/1);
  r.sink.Validate();
  r.layers.Validate();
  CheckInt("--early-blocks", r.early_blocks, 0, std::numeric_limits<int>::max());
  CheckReal("--other-share", r.other_share, 0, Bound::kOpen, 1, Bound::kClosed);
  CheckInt("--stable-window", r.stable_window, 1, std::numeric_limits<int>::max());
}

namespace {

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

SamplePlan PlanSamples(const TraceRequest& r, const std::string& first_checkpoint) {
  SamplePlan plan;
  const std::string tc = first_checkpoint + "/train_config.json";
  if (r.input.text_file.empty() && IsDirectory(first_checkpoint) && FileExists(tc)) {
    const train::TrainConfig c = train::LoadTrainConfig(tc);
    if (c.data == train::DataKind::kBigramBackcopy) {
      plan.bigram = true;
      plan.bb = c;
      plan.source = fmt::format("bigram-backcopy V={} triggers={} table_seed={} bos={}", c.vocab_size,
                                c.bb_triggers, c.bb_seed, c.bos);
      return plan;
    }
  }
  plan.text_name = r.input.text_file.empty() ? "default text" : r.input.text_file;
  plan.text = r.input.text_file.empty() ? std::string(DefaultText())
                                        : ReadInputFile(r.input.text_file, "--text");
  plan.source = fmt::format("text {} sha256={}", plan.text_name, Sha256Hex(plan.text).substr(0, 16));
  return plan;
}

trace::SampleMaker MakeSampleMaker(const SamplePlan& plan, const TraceRequest& r) {
  return [plan, input = r.input](const Model& model) {
    // Each checkpoint's context, as analyze and explain check theirs.
    CheckLength(model.config, input.length, /*allow_long=*/false, /*has_allow_flag=*/false);
    std::vector<std::vector<int>> samples;
    if (plan.bigram) {
      train::BigramBackcopy data(plan.bb.vocab_size, plan.bb.bb_triggers, plan.bb.bb_seed, plan.bb.bos);
      train::Rng rng(input.seed);
      for (int i = 0; i < input.samples; ++i) {
        std::vector<int> s(input.length);
        data.Sample(rng, input.length, s.data());
        samples.push_back(std::move(s));
      }
      return samples;
    }
    const std::vector<int> stream = FindTokenizer(model, input.tokenizer)->Encode(plan.text, false);
    const ModelConfig& c = model.config;
    analysis::SampleSpec spec{input.samples, input.length, input.seed,
                              c.vocab_size,  c.bos_id,     c.eos_id};
    return analysis::BuildSamples(stream, analysis::Condition::kBos, spec, "--text " + plan.text_name);
  };
}

}  // namespace

namespace {

// The request's checkpoints in step order; a run directory also names its cache directory.
std::vector<trace::CheckpointRef> TraceCheckpoints(const TraceRequest& r, std::string* cache_dir) {
  if (r.checkpoints.size() == 1 && IsDirectory(r.checkpoints[0]) &&
      !FileExists(r.checkpoints[0] + "/config.json")) {
    if (cache_dir) *cache_dir = r.checkpoints[0] + "/.sinkscope-trace-cache";
    return trace::FindCheckpoints(r.checkpoints[0]);
  }
  return trace::CheckpointsFromPaths(r.checkpoints);
}

}  // namespace

std::string TraceSamplesSource(const TraceRequest& r) {
  ValidateTrace(r);
  const std::string first = TraceCheckpoints(r, nullptr).front().path;
  const SamplePlan plan = PlanSamples(r, first);
  if (plan.bigram) return plan.source;
  // Text samples are token ids: the same text through another tokenizer is other samples. The
  // file the samples are encoded with (FindTokenizer: --tokenizer, else a directory's
  // tokenizer.json) is compared, not tokenizer.model, whose bytes name the path it was trained into.
  const std::string json = first + "/tokenizer.json";
  if (!r.input.tokenizer.empty() || !IsDirectory(first) || !FileExists(json)) return plan.source;
  return plan.source + ", tokenizer.json sha256=" + Sha256File(json).substr(0, 16);
}

TraceRun RunTraceAnalysis(const TraceRequest& r, int rank, int ranks,
                          const std::function<void(const std::string&)>& log) {
  ValidateTrace(r);
  std::string cache_dir;
  const std::vector<trace::CheckpointRef> refs = TraceCheckpoints(r, &cache_dir);
  if (r.no_cache) cache_dir.clear();
  trace::CheckSameFamily(refs);

  // --length against the first checkpoint's context before any work (each checkpoint is checked
  // again when it is analysed).
  const std::string first_config = refs.front().path + "/config.json";
  if (IsDirectory(refs.front().path) && FileExists(first_config))
    CheckLength(ReadHfConfig(first_config), r.input.length, false, false);
  const SamplePlan plan = PlanSamples(r, refs.front().path);
  TraceRun run;
  trace::TraceSettings& settings = run.settings;
  settings.samples_source = plan.source;
  settings.samples = r.input.samples;
  settings.length = r.input.length;
  settings.seed = r.input.seed;
  settings.precision = ParsePrecision(r.precision);
  if (const std::string note = PrecisionNote(settings.precision); !note.empty()) Log("note: " + note);
  settings.profile.eps = r.sink.eps;
  settings.profile.onset_sink_rate = r.layers.onset;
  settings.profile.amplification_ratio = r.layers.amplification;
  settings.stage.early_block_limit = r.early_blocks;
  settings.stage.other_sink_share = r.other_share;
  settings.stage.stable_window = r.stable_window;
  settings.cache_dir = cache_dir;
  if (rank == 0 && log)
    log(fmt::format("{} checkpoints (steps {} .. {}); samples: {} x {} tokens, {}, seed {}{}",
                    refs.size(), refs.front().step, refs.back().step, r.input.samples,
                    r.input.length, plan.source, r.input.seed,
                    ranks > 1 ? fmt::format("; {} MPI ranks", ranks) : ""));

  run.results = trace::AnalyseCheckpoints(refs, settings, MakeSampleMaker(plan, r), rank, ranks, log);
  run.results = trace::GatherResults(run.results, rank, ranks);
  trace::AssignStages(run.results, settings.stage);
  return run;
}

// ---- stream

double StreamRun::MeanNll() const { return scored ? sum_nll / scored : NAN; }

namespace {

// Sinks and window actually used by a policy (window and recompute spend the S + W budget on
// recent tokens; dense keeps everything).
void EffectiveShape(const stream::StreamOptions& o, const Model& m, StreamRun* r) {
  switch (o.policy) {
    case stream::Policy::kSinks: r->sinks = o.sinks, r->window = o.window; break;
    case stream::Policy::kWindow:
    case stream::Policy::kRecompute: r->sinks = 0, r->window = o.sinks + o.window; break;
    case stream::Policy::kDense: r->sinks = 0, r->window = m.config.max_seq_len; break;
  }
  r->budget = r->sinks + r->window;
}

}  // namespace

StreamRun RunStreamPolicy(const Model& model, const stream::StreamOptions& options,
                          const std::vector<int>& tokens, std::FILE* csv, bool with_policy,
                          bool keep_nll) {
  StreamRun r;
  r.policy = options.policy;
  EffectiveShape(options, model, &r);
  auto cache = stream::MakeStreamCache(model, options);
  const int V = model.config.vocab_size;
  const int64_t n = static_cast<int64_t>(tokens.size()) - 1;  // tokens scored
  if (keep_nll) r.nll.reserve(static_cast<size_t>(std::max<int64_t>(n, 0)));
  report::Progress progress(fmt::format("stream {}", stream::PolicyName(options.policy)), n, "tok");
  const auto start = std::chrono::steady_clock::now();
  const char* name = stream::PolicyName(options.policy);
  for (int64_t i = 0; i < n; ++i) {
    Tensor logits = cache->Step(tokens[i]);
    const int64_t position = i + 1;  // position of the predicted token in the stream
    const double nll = stream::TokenNll(logits.data(), V, tokens[i + 1]);
    r.sum_nll += nll;
    const size_t block = static_cast<size_t>(position / kStreamBlock);
    if (block >= r.block_sum.size()) {
      r.block_sum.push_back(0);
      r.block_count.push_back(0);
    }
    r.block_sum[block] += nll;
    r.block_count[block] += 1;
    if (keep_nll) r.nll.push_back(static_cast<float>(nll));
    if (csv) {
      if (with_policy) std::fprintf(csv, "%s,", name);
      std::fprintf(csv, "%lld,%d,%.6f\n", static_cast<long long>(position), tokens[i + 1], nll);
    }
    if ((i & 63) == 0) progress.Update(i);
  }
  progress.Update(n);
  progress.Finish();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.scored = n;
  r.peak_kv_bytes = cache->peak_kv_bytes();
  return r;
}

nlohmann::json StreamJson(const StreamDocument& d, const std::vector<StreamRun>& runs) {
  nlohmann::json doc;
  doc["schema"] = "sinkscope.stream/1";
  doc["model"] = d.model;
  doc["text"] = d.text;
  doc["tokens"] = d.tokens;
  doc["bos"] = d.bos;
  doc["block_size"] = kStreamBlock;
  doc["settings"] = {{"sinks", d.sinks}, {"window", d.window}, {"force", d.force},
                     {"max_tokens", d.max_tokens}};
  doc["runs"] = nlohmann::json::array();
  for (const auto& r : runs) {
    nlohmann::json blocks = nlohmann::json::array();
    for (size_t b = 0; b < r.block_sum.size(); ++b)
      blocks.push_back({{"first_position", std::max<int64_t>(1, b * kStreamBlock)},
                        {"tokens", r.block_count[b]},
                        {"mean_nll", r.block_sum[b] / r.block_count[b]},
                        {"perplexity", std::exp(r.block_sum[b] / r.block_count[b])}});
    doc["runs"].push_back({{"policy", stream::PolicyName(r.policy)},
                           {"sinks", r.sinks},
                           {"window", r.window},
                           {"cache_entries", r.budget},
                           {"tokens_scored", r.scored},
                           {"mean_nll", r.MeanNll()},
                           {"perplexity", std::exp(r.MeanNll())},
                           {"blocks", blocks},
                           {"seconds", r.seconds},
                           {"tokens_per_second", r.scored / std::max(r.seconds, 1e-9)},
                           {"peak_kv_cache_bytes", r.peak_kv_bytes}});
  }
  return doc;
}

}  // namespace ss::cli
