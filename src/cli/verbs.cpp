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
#include "io/load.h"
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
                                              const AnalyzeRequest& r,
                                              analysis::Condition condition) {
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
  if (!has_prompt) CheckLength(c, r.input.length, r.allow_long_context, r.allow_long_name);

  std::vector<std::vector<std::vector<int>>> samples;
  for (analysis::Condition cond : r.conditions)
    samples.push_back(AnalysisSamples(model, input, r, cond));
  // With --prompt the conditions' samples differ in length (no-bos lacks the BOS in front): every
  // one of them must hold 2 tokens and K.
  int T = 0, shortest = std::numeric_limits<int>::max();
  size_t shortest_at = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const int n = static_cast<int>(samples[i][0].size());
    T = std::max(T, n);
    if (n < shortest) shortest = n, shortest_at = i;
  }
  const std::string which =
      samples.size() > 1 && shortest < T
          ? fmt::format(" (condition {})", analysis::ConditionName(r.conditions[shortest_at]))
          : "";
  if (shortest < 2)
    Fail("{}: {} token(s){}; the analysis needs at least 2", input.flag, shortest, which);
  if (shortest < r.sink.first_k)
    Fail(
        "--first-k: K = {} is larger than the {} tokens per sample{}; give a longer input or a "
        "smaller --first-k",
        r.sink.first_k, shortest, which);
  CheckLength(c, T, r.allow_long_context, r.allow_long_name, has_prompt ? input.flag : "--length");
  if (c.max_seq_len > 0 && T > c.max_seq_len)
    Log(fmt::format("note: T = {} is beyond the trained context of {} tokens ({})", T,
                    c.max_seq_len, r.allow_long_name));

  analysis::AnalyzeOptions options;
  options.first_k = r.sink.first_k;
  options.eps = r.sink.eps;
  options.path =
      r.attn_path == "fused" ? analysis::AttnPath::kFused : analysis::AttnPath::kMaterialised;
  options.patterns = heads;
  analysis::AnalyzeReport rep;
  LogPending();  // the input is checked: the precision line (CLI)
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
  if (!has_prompt) CheckLength(c, r.input.length, /*allow_long=*/false, /*allow_name=*/{});
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
  CheckLength(c, T, /*allow_long=*/false, /*allow_name=*/{}, has_prompt ? input.flag : "--length");

  LogPending();  // the input is checked: the precision line (CLI)
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
  CheckPrecisionFlag(r.precision);
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
      c.Validate(tc);  // its vocabulary and triggers size the sample maker
      plan.bigram = true;
      plan.bb = c;
      plan.source = fmt::format("bigram-backcopy V={} triggers={} table_seed={} bos={}",
                                c.vocab_size, c.bb_triggers, c.bb_seed, c.bos);
      return plan;
    }
  }
  plan.text_name = r.input.text_file.empty() ? "default text" : r.input.text_file;
  plan.text = r.input.text_file.empty() ? std::string(DefaultText())
                                        : ReadInputFile(r.input.text_file, "--text");
  plan.source =
      fmt::format("text {} sha256={}", plan.text_name, Sha256Hex(plan.text).substr(0, 16));
  return plan;
}

trace::SampleMaker MakeSampleMaker(const SamplePlan& plan, const TraceRequest& r) {
  // The checkpoints of a run share their tokenizer: text samples are encoded once per tokenizer
  // (the --tokenizer file, or a checkpoint directory's tokenizer.json by content, with the
  // model's vocabulary size and BOS / EOS ids) and reused by the checkpoints that have the same.
  struct Encoded {
    std::string key;
    std::vector<std::vector<int>> samples;
  };
  auto last = std::make_shared<Encoded>();
  return [plan, input = r.input, last](const Model& model) {
    // Each checkpoint's context, as analyze and explain check theirs.
    CheckLength(model.config, input.length, /*allow_long=*/false, /*allow_name=*/{});
    std::vector<std::vector<int>> samples;
    if (plan.bigram) {
      train::BigramBackcopy data(plan.bb.vocab_size, plan.bb.bb_triggers, plan.bb.bb_seed,
                                 plan.bb.bos);
      train::Rng rng(input.seed);
      for (int i = 0; i < input.samples; ++i) {
        std::vector<int> s(input.length);
        data.Sample(rng, input.length, s.data());
        samples.push_back(std::move(s));
      }
      return samples;
    }
    const ModelConfig& c = model.config;
    std::string key;
    if (!input.tokenizer.empty())
      key = "file " + input.tokenizer;
    else if (IsDirectory(model.source) && FileExists(model.source + "/tokenizer.json"))
      key = "sha256 " + Sha256File(model.source + "/tokenizer.json");
    if (!key.empty()) {
      key += fmt::format(" vocab {} bos {} eos {}", c.vocab_size, c.bos_id, c.eos_id);
      if (key == last->key) return last->samples;
    }
    const std::vector<int> stream = FindTokenizer(model, input.tokenizer)->Encode(plan.text, false);
    analysis::SampleSpec spec{input.samples, input.length, input.seed,
                              c.vocab_size,  c.bos_id,     c.eos_id};
    // A model without a BOS token (Qwen, gpt-oss) is traced on the windows as cut.
    const analysis::Condition condition =
        c.bos_id >= 0 ? analysis::Condition::kBos : analysis::Condition::kNoBos;
    samples = analysis::BuildSamples(stream, condition, spec, "--text " + plan.text_name);
    if (!key.empty()) *last = Encoded{key, samples};
    return samples;
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
  // tokenizer.json) is compared, not tokenizer.model, whose bytes name the path it was trained
  // into.
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
    CheckLength(ReadHfConfig(first_config), r.input.length, false, /*allow_name=*/{});
  const SamplePlan plan = PlanSamples(r, refs.front().path);
  TraceRun run;
  trace::TraceSettings& settings = run.settings;
  settings.samples_source = plan.source;
  settings.samples = r.input.samples;
  settings.length = r.input.length;
  settings.seed = r.input.seed;
  // Not given: the first checkpoint's (a run's checkpoints share one type; a trainer's are F32).
  std::string why = "--precision";
  settings.precision =
      r.precision.empty() ? FilePrecision(refs.front().path, &why) : ParsePrecision(r.precision);
  if (const std::string note = PrecisionNote(settings.precision); !note.empty())
    Log("note: " + note);
  settings.profile.eps = r.sink.eps;
  settings.profile.onset_sink_rate = r.layers.onset;
  settings.profile.amplification_ratio = r.layers.amplification;
  settings.stage.early_block_limit = r.early_blocks;
  settings.stage.other_sink_share = r.other_share;
  settings.stage.stable_window = r.stable_window;
  settings.cache_dir = cache_dir;
  if (rank == 0 && log)
    log(fmt::format(
        "{} checkpoints (steps {} .. {}); samples: {} x {} tokens, {}, seed {}{}; "
        "precision {} ({}{})",
        refs.size(), refs.front().step, refs.back().step, r.input.samples, r.input.length,
        plan.source, r.input.seed, ranks > 1 ? fmt::format("; {} MPI ranks", ranks) : "",
        PrecisionName(settings.precision), r.precision.empty() ? "the checkpoints': " : "", why));

  run.results =
      trace::AnalyseCheckpoints(refs, settings, MakeSampleMaker(plan, r), rank, ranks, log);
  run.results = trace::GatherResults(run.results, rank, ranks);
  trace::AssignStages(run.results, settings.stage);
  return run;
}

// ---- stream

double StreamRun::MeanNll() const { return scored ? sum_nll / scored : NAN; }

namespace {

// Bytes one token's entries take over the layers that keep keys and values (a Gated DeltaNet
// layer keeps a state of constant size instead), kept entries aside.
int64_t KvBytesPerToken(const ModelConfig& c, KvType k, KvType v) {
  int64_t layers = 0;
  for (int l = 0; l < c.n_layers; ++l) layers += !c.LinearLayer(l);
  return layers * static_cast<int64_t>(KvRowBytes(k, c.kv_dim()) + KvRowBytes(v, c.kv_dim()));
}

// "none", "first:N" for stream indices 0..N-1, else "positions a,b,...".
std::string KeepLabel(const std::vector<int64_t>& keep) {
  if (keep.empty()) return "none";
  bool prefix = true;
  for (size_t i = 0; i < keep.size(); ++i) prefix = prefix && keep[i] == static_cast<int64_t>(i);
  return prefix ? fmt::format("first:{}", keep.size())
                : fmt::format("positions {}", fmt::join(keep, ","));
}

// Sinks and window actually used by a policy (window and recompute spend the S + W budget on
// recent tokens; dense keeps everything).
void EffectiveShape(const stream::StreamOptions& o, const Model& m, StreamRun* r) {
  switch (o.policy) {
    case stream::Policy::kSinks:
      r->sinks = o.sinks, r->window = o.window;
      break;
    case stream::Policy::kWindow:
    case stream::Policy::kRecompute:
      r->sinks = 0, r->window = o.sinks + o.window;
      break;
    case stream::Policy::kDense:
      r->sinks = 0, r->window = m.config.max_seq_len;
      break;
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
  r.k_type = options.k_type;
  r.v_type = options.v_type;
  r.keep = KeepLabel(options.keep);
  r.kv_bytes_per_token = KvBytesPerToken(model.config, options.k_type, options.v_type);
  return r;
}

bool KvCacheFlags::typed() const {
  const KvType k =
      ParseKvType(type_k.empty() ? type : type_k, type_k.empty() ? "--kv-type" : "--kv-type-k");
  const KvType v =
      ParseKvType(type_v.empty() ? type : type_v, type_v.empty() ? "--kv-type" : "--kv-type-v");
  return k != KvType::kF32 || v != KvType::kF32;
}

void KvCacheFlags::Apply(const Model& model, const std::vector<int>& tokens,
                         stream::StreamOptions* o) const {
  o->k_type =
      ParseKvType(type_k.empty() ? type : type_k, type_k.empty() ? "--kv-type" : "--kv-type-k");
  o->v_type =
      ParseKvType(type_v.empty() ? type : type_v, type_v.empty() ? "--kv-type" : "--kv-type-v");
  bool detected = false;
  o->keep = stream::ParseKvKeep(keep, "--kv-keep", &detected);
  const stream::KvFlagNames names{type_k.empty() ? "--kv-type" : "--kv-type-k",
                                  type_v.empty() ? "--kv-type" : "--kv-type-v", "--kv-keep"};
  if (detected) {
    if (!o->typed())
      Fail("--kv-keep: an f32 cache keeps every entry exact already; it applies with --kv-type");
    if (tokens.size() < 2)
      Fail("--kv-keep detected: needs at least two tokens to look at (a prompt or a text)");
    o->keep = ResolveKvKeep(model, *o, keep, tokens);
  }
  stream::ValidateOptions(*o, model.config, names);
}

std::vector<KvConfig> ParseKvConfigs(const std::string& list, const std::string& flag) {
  std::vector<KvConfig> out;
  std::vector<std::string> seen;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, comma - start);
    start = comma + 1;
    if (item.empty())
      Fail(
          "{}: an empty item in '{}' (expected a comma-separated list of cache types, e.g. "
          "q8_0,q4_0+first:4)",
          flag, PrintableExcerpt(list, 80));
    if (std::find(seen.begin(), seen.end(), item) != seen.end()) continue;  // each run once
    seen.push_back(item);
    if (static_cast<int>(seen.size()) > kMaxKvConfigs)
      Fail("{}: more than {} different cache types in one comparison", flag, kMaxKvConfigs);
    KvConfig c;
    const size_t plus = item.find('+');
    const std::string types = item.substr(0, plus);
    const size_t slash = types.find('/');
    c.k_type = ParseKvType(types.substr(0, slash), flag);
    c.v_type = slash == std::string::npos ? c.k_type : ParseKvType(types.substr(slash + 1), flag);
    if (plus != std::string::npos) {
      c.keep = item.substr(plus + 1);
      bool detected = false;
      c.keep_indices = stream::ParseKvKeep(c.keep, flag, &detected);
    }
    out.push_back(std::move(c));
  }
  if (out.empty())
    Fail("{}: expected a comma-separated list of cache types, e.g. q8_0,q4_0+first:4", flag);
  return out;
}

std::vector<int64_t> ResolveKvKeep(const Model& model, const stream::StreamOptions& options,
                                   const std::string& spec, const std::vector<int>& tokens) {
  bool detected = false;
  std::vector<int64_t> keep = stream::ParseKvKeep(spec, "--kv-keep", &detected);
  if (!detected) return keep;
  const size_t n = std::min(tokens.size(), static_cast<size_t>(std::max(options.window, 2)));
  keep = stream::DetectSinkPositions(model, std::span<const int>(tokens.data(), n));
  if (!keep.empty()) {
    Log(
        fmt::format("--kv-keep detected: positions {} of the first {} tokens are sinks; their "
                    "entries stay f32",
                    fmt::join(keep, ", "), n));
    return keep;
  }
  const int fallback = std::max(options.sinks, 1);
  const int needed = static_cast<int>(std::floor(1.0 / 0.3)) + stream::kMinDetectQueries;
  if (static_cast<int>(n) < needed)
    Log(fmt::format(
        "--kv-keep detected: {} tokens are too few to tell a sink (at least {}); keeping "
        "first:{} instead",
        n, needed, fallback));
  else
    Log(fmt::format(
        "--kv-keep detected: no position of the first {} tokens is a sink for this model "
        "(alpha_k > 0.3 in a quarter of the heads); keeping first:{} instead",
        n, fallback));
  keep.resize(fallback);
  for (int i = 0; i < fallback; ++i) keep[i] = i;
  return keep;
}

std::vector<StreamRun> RunKvComparison(const Model& model, const stream::StreamOptions& base,
                                       const std::vector<KvConfig>& configs,
                                       const std::vector<int>& tokens) {
  struct Lane {
    stream::StreamOptions options;
    std::unique_ptr<stream::StreamCache> cache;
    StreamRun run;
  };
  std::vector<Lane> lanes(configs.size() + 1);
  for (size_t i = 0; i < lanes.size(); ++i) {
    Lane& lane = lanes[i];
    lane.options = base;
    lane.options.k_type = lane.options.v_type = KvType::kF32;
    lane.options.keep.clear();
    if (i > 0) {
      const KvConfig& c = configs[i - 1];
      lane.options.k_type = c.k_type;
      lane.options.v_type = c.v_type;
      lane.options.keep = c.keep == "detected" ? ResolveKvKeep(model, lane.options, c.keep, tokens)
                                               : c.keep_indices;
      lane.run.keep =
          c.keep == "detected" ? "detected (" + KeepLabel(lane.options.keep) + ")" : c.keep;
    }
    lane.cache = stream::MakeStreamCache(model, lane.options);
    lane.run.policy = base.policy;
    EffectiveShape(lane.options, model, &lane.run);
    lane.run.k_type = lane.options.k_type;
    lane.run.v_type = lane.options.v_type;
    lane.run.kv_bytes_per_token =
        KvBytesPerToken(model.config, lane.options.k_type, lane.options.v_type);
  }
  const int V = model.config.vocab_size;
  const int64_t n = static_cast<int64_t>(tokens.size()) - 1;
  std::vector<double> ref_logp(V), logp(V);
  auto log_softmax = [V](const float* x, std::vector<double>& out) {
    double mx = x[0];
    for (int i = 1; i < V; ++i) mx = std::max(mx, static_cast<double>(x[i]));
    double z = 0;
    for (int i = 0; i < V; ++i) z += std::exp(x[i] - mx);
    const double lz = std::log(z) + mx;
    for (int i = 0; i < V; ++i) out[i] = x[i] - lz;
  };
  report::Progress progress(
      fmt::format("stream {} x {} cache types", stream::PolicyName(base.policy), lanes.size()), n,
      "tok");
  for (int64_t i = 0; i < n; ++i) {
    for (size_t li = 0; li < lanes.size(); ++li) {
      Lane& lane = lanes[li];
      const auto t0 = std::chrono::steady_clock::now();
      const Tensor logits = lane.cache->Step(tokens[i]);
      lane.run.seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      log_softmax(logits.data(), li == 0 ? ref_logp : logp);
      const std::vector<double>& mine = li == 0 ? ref_logp : logp;
      const double nll = -mine[tokens[i + 1]];
      StreamRun& r = lane.run;
      r.sum_nll += nll;
      const size_t block = static_cast<size_t>((i + 1) / kStreamBlock);
      if (block >= r.block_sum.size()) {
        r.block_sum.push_back(0);
        r.block_count.push_back(0);
      }
      r.block_sum[block] += nll;
      r.block_count[block] += 1;
      if (li > 0) {
        double kl = 0;
        for (int v = 0; v < V; ++v) kl += std::exp(ref_logp[v]) * (ref_logp[v] - logp[v]);
        kl = std::max(kl, 0.0);  // rounding may leave a tiny negative for equal distributions
        r.sum_kl += kl;
        r.max_kl = std::max(r.max_kl, kl);
      }
    }
    if ((i & 63) == 0) progress.Update(i);
  }
  progress.Update(n);
  progress.Finish();
  std::vector<StreamRun> out;
  for (Lane& lane : lanes) {
    lane.run.scored = n;
    lane.run.peak_kv_bytes = lane.cache->peak_kv_bytes();
    out.push_back(std::move(lane.run));
  }
  return out;
}

nlohmann::json StreamJson(const StreamDocument& d, const std::vector<StreamRun>& runs) {
  nlohmann::json doc;
  doc["schema"] = "sinkscope.stream/1";
  doc["model"] = d.model;
  doc["text"] = d.text;
  doc["tokens"] = d.tokens;
  doc["bos"] = d.bos;
  doc["block_size"] = kStreamBlock;
  doc["settings"] = {{"sinks", d.sinks},         {"window", d.window},
                     {"force", d.force},         {"max_tokens", d.max_tokens},
                     {"precision", d.precision}, {"activations", d.activations}};
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
                           {"peak_kv_cache_bytes", r.peak_kv_bytes},
                           {"kv_type_k", KvTypeName(r.k_type)},
                           {"kv_type_v", KvTypeName(r.v_type)},
                           {"kv_keep", r.keep},
                           {"kv_bytes_per_token", r.kv_bytes_per_token},
                           {"mean_kl_vs_f32", r.scored > 0 ? r.sum_kl / r.scored : 0.0},
                           {"max_kl_vs_f32", r.max_kl}});
  }
  return doc;
}

}  // namespace ss::cli
