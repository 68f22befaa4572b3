#include "trace/trace.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <regex>

#include "common/error.h"
#include "common/file_util.h"
#include "common/sha256.h"
#include "io/json_util.h"
#include "io/load.h"
#include "model/model.h"
#include "model/precision.h"
#include "train/checkpoint.h"

namespace ss::trace {
namespace fs = std::filesystem;

// ---------------------------------------------------------------- finding checkpoints

int64_t ReadStep(const std::string& path, std::string* source) {
  if (IsDirectory(path)) {
    const std::string state = path + "/trainer_state.json";
    if (FileExists(state)) {
      try {
        const nlohmann::json j = nlohmann::json::parse(ReadFile(state));
        for (const char* key : {"step", "global_step"})
          if (j.contains(key) && j[key].is_number_integer()) {
            if (source) *source = "trainer_state.json";
            return j[key].get<int64_t>();
          }
      } catch (const nlohmann::json::exception&) {
        // An unreadable state file: fall back to the name (the load reports the damage).
      }
    }
  }
  // The last "step-N" / "step_N" / "stepN" / "checkpoint-N" in the name (not the parent path).
  static const std::regex kStepRe(R"((?:step|checkpoint)[-_]?([0-9]+))", std::regex::icase);
  const std::string name = fs::path(path).filename().string().empty()
                               ? fs::path(path).parent_path().filename().string()
                               : fs::path(path).filename().string();
  int64_t step = -1;
  for (auto it = std::sregex_iterator(name.begin(), name.end(), kStepRe);
       it != std::sregex_iterator(); ++it) {
    // At most 18 digits always fit an int64_t; a longer run of digits is not a step number.
    const std::string digits = (*it)[1].str();
    step = digits.size() <= 18 ? std::stoll(digits) : -1;
  }
  if (step >= 0 && source) *source = "name";
  return step;
}

namespace {

bool IsCheckpointEntry(const fs::directory_entry& e) {
  const std::string name = e.path().filename().string();
  if (name.empty() || name[0] == '.') return false;  // hidden: caches, trainer temp dirs
  // An entry that cannot be followed (a symlink loop, a link into an unreadable directory) is
  // named, not skipped: it may be the checkpoint the user expects in the trace.
  if (const std::string why = UnreachableReason(e.path().string()); !why.empty())
    Fail("{}: {}", e.path().string(), why);
  std::error_code ec;
  if (e.is_directory(ec)) return FileExists((e.path() / "config.json").string());
  return e.is_regular_file(ec) && e.path().extension() == ".gguf";
}

std::vector<CheckpointRef> Order(std::vector<CheckpointRef> refs) {
  std::sort(refs.begin(), refs.end(),
            [](const CheckpointRef& a, const CheckpointRef& b) { return a.step < b.step; });
  for (size_t i = 1; i < refs.size(); ++i)
    if (refs[i].step == refs[i - 1].step)
      Fail("{}: same step {} as {}; give one checkpoint per step", refs[i].path, refs[i].step,
           refs[i - 1].path);
  return refs;
}

CheckpointRef MakeRef(const std::string& path) {
  CheckpointRef r;
  r.path = path;
  r.step = ReadStep(path, &r.step_source);
  if (r.step < 0)
    Fail(
        "{}: no readable step (expected \"step\" in trainer_state.json or a name such as "
        "step-1000, "
        "checkpoint-1000 or step1000)",
        path);
  return r;
}

}  // namespace

std::vector<CheckpointRef> FindCheckpoints(const std::string& dir) {
  if (const std::string why = UnreachableReason(dir); !why.empty())
    Fail("--checkpoints: {}: {}", dir, why);
  if (!IsDirectory(dir)) Fail("--checkpoints: {}: not a directory", dir);
  std::vector<std::string> paths;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  if (ec) Fail("{}: cannot list the checkpoints: {}", dir, ec.message());
  for (; it != end; it.increment(ec)) {
    if (IsCheckpointEntry(*it)) paths.push_back(it->path().string());
  }
  if (ec) Fail("{}: cannot list the checkpoints: {}", dir, ec.message());
  std::sort(paths.begin(), paths.end());
  if (paths.empty())
    Fail(
        "--checkpoints: {}: no checkpoints (expected sub-directories with config.json or *.gguf "
        "files)",
        dir);
  std::vector<CheckpointRef> refs;
  for (const auto& p : paths) refs.push_back(MakeRef(p));
  return Order(std::move(refs));
}

std::vector<CheckpointRef> CheckpointsFromPaths(const std::vector<std::string>& paths) {
  if (paths.empty()) Fail("--checkpoints: no checkpoints given");
  std::vector<CheckpointRef> refs;
  for (const auto& p : paths) {
    if (const std::string why = UnreachableReason(p); !why.empty()) Fail("{}: {}", p, why);
    refs.push_back(MakeRef(p));
  }
  return Order(std::move(refs));
}

CheckpointIdentity IdentifyCheckpoint(const std::string& path) {
  CheckpointIdentity id;
  if (!IsDirectory(path)) return id;
  const std::string cfg_path = path + "/config.json";
  nlohmann::json c;
  try {
    c = nlohmann::json::parse(ReadFile(cfg_path));
  } catch (const nlohmann::json::exception& e) {
    Fail("{}: not valid JSON ({})", cfg_path, e.what());
  }
  auto get_int = [&](const char* key) -> int64_t {
    return c.contains(key) && c[key].is_number_integer() ? c[key].get<int64_t>() : -1;
  };
  if (c.contains("model_type") && c["model_type"].is_string())
    id.arch = c["model_type"].get<std::string>();
  if (c.contains("architectures") && c["architectures"].is_array() && !c["architectures"].empty() &&
      c["architectures"][0].is_string())
    id.arch += "/" + c["architectures"][0].get<std::string>();
  id.shape = fmt::format("layers={} heads={} kv={} dim={} vocab={}", get_int("num_hidden_layers"),
                         get_int("num_attention_heads"), get_int("num_key_value_heads"),
                         get_int("hidden_size"), get_int("vocab_size"));
  for (const char* tok : {"tokenizer.model", "tokenizer.json"})
    if (FileExists(path + "/" + tok))
      id.tokenizer += std::string(tok) + ":" + Sha256File(path + "/" + tok);
  return id;
}

void CheckSameFamily(const std::vector<CheckpointRef>& checkpoints) {
  const CheckpointRef* first = nullptr;
  CheckpointIdentity ref;
  for (const auto& c : checkpoints) {
    if (!IsDirectory(c.path)) continue;
    CheckpointIdentity id;
    try {
      id = IdentifyCheckpoint(c.path);
    } catch (const Error&) {
      continue;  // unreadable: reported as a failed checkpoint when it is loaded
    }
    if (!first) {
      first = &c;
      ref = id;
      continue;
    }
    if (id.arch != ref.arch || id.shape != ref.shape)
      Fail("mixed architectures: {} is {} {}, but {} is {} {}; trace one run at a time", c.path,
           id.arch, id.shape, first->path, ref.arch, ref.shape);
    if (id.tokenizer != ref.tokenizer)
      Fail("mixed tokenizers: {} has {}, but {} has {}; trace one run at a time", c.path,
           id.tokenizer.empty() ? "none" : id.tokenizer.substr(0, 40), first->path,
           ref.tokenizer.empty() ? "none" : ref.tokenizer.substr(0, 40));
  }
}

Model LoadCheckpoint(const std::string& path, Precision precision) {
  // HF directories are not yet readable by ss::LoadModel in main; the trainer's own checkpoints
  // carry train_config.json and load exactly through its reader.
  if (IsDirectory(path) && FileExists(path + "/train_config.json"))
    return train::LoadCheckpointModel(path);
  return LoadModel(path, precision);
}

namespace {

// The SHA-256 of `file`, remembered in index_dir/<sha256 of its absolute path>.json beside its
// size, modification time (ns) and inode: a later trace of the same run rehashes only the files
// that changed. Hashing a 7B checkpoint's 13.4 GB takes about 85 s of CPU (160 MB/s), as long as
// analysing it, so a re-run served from the cache would otherwise pay it again for every
// checkpoint just to find its cache entry. One entry per file: MPI ranks hash disjoint
// checkpoints, so no two write the same entry.
std::string FileHash(const std::string& file, const std::string& index_dir) {
  if (index_dir.empty()) return Sha256File(file);
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return Sha256File(file);  // Sha256File says what is wrong
  const std::string abs = fs::absolute(file).lexically_normal().string();
  const std::string entry = index_dir + "/" + Sha256Hex(abs) + ".json";
  const int64_t mtime_ns =
      static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  const nlohmann::json want = {{"path", abs},
                               {"size", static_cast<int64_t>(st.st_size)},
                               {"mtime_ns", mtime_ns},
                               {"inode", static_cast<uint64_t>(st.st_ino)}};
  if (FileExists(entry)) {
    try {
      nlohmann::json j = nlohmann::json::parse(ReadFile(entry));
      const std::string sha = j.at("sha256").get<std::string>();
      j.erase("sha256");
      if (j == want && sha.size() == 64) return sha;
    } catch (const std::exception&) {
      // a damaged entry is recomputed and rewritten
    }
  }
  const std::string sha = Sha256File(file);
  nlohmann::json out = want;
  out["sha256"] = sha;
  fs::create_directories(index_dir);
  WriteFileAtomic(entry, out.dump() + "\n");
  return sha;
}

}  // namespace

std::string CheckpointHash(const std::string& path, const std::string& index_dir) {
  if (!IsDirectory(path)) return FileHash(path, index_dir);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(path)) {
    const std::string name = e.path().filename().string();
    // The weights and what shapes their interpretation; not the optimizer state or tokens.
    if (!e.is_regular_file()) continue;
    if (name == "config.json" || name == "train_config.json" ||
        (name.ends_with(".safetensors") && name != "optimizer.safetensors"))
      names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  std::string all;
  for (const auto& n : names) all += n + "=" + FileHash(path + "/" + n, index_dir) + "\n";
  return Sha256Hex(all);
}

// ---------------------------------------------------------------- profile

void ComputeLayers(Profile& p, const ProfileOptions& o) {
  p.onset_layer = -1;
  p.amplification_layer = -1;
  for (int l = 0; l < p.n_layers; ++l)
    if (p.sink_rate[l] > o.onset_sink_rate) {
      p.onset_layer = l;
      break;
    }
  for (int l = 0; l < p.n_layers; ++l)
    if (p.p0_norm_ratio[l] > o.amplification_ratio) {
      p.amplification_layer = l;
      break;
    }
}

Profile MeasureProfile(const Model& model, const std::vector<std::vector<int>>& samples,
                       const ProfileOptions& options) {
  SS_ASSERT(!samples.empty());
  analysis::AnalyzeOptions ao;
  ao.first_k = options.first_k;
  ao.eps = options.eps;
  ao.loss = true;  // the validation loss from the same forwards
  const analysis::ConditionResult r =
      analysis::AnalyzeSamples(model, analysis::Condition::kBos, samples, ao);
  Profile p;
  const int L = r.n_layers, H = r.n_heads, K = r.first_k;
  p.n_layers = L;
  p.n_heads = H;
  p.sink_rate.assign(r.sink_rate_per_layer.begin(), r.sink_rate_per_layer.begin() + L);  // k = 0
  p.alpha0.assign(L, 0);
  p.alpha1.assign(L, 0);
  p.other_top.assign(L, 0);
  int other_sinks = 0, attn_layers = 0;
  for (int l = 0; l < L; ++l) {
    if (r.LinearLayer(l)) {  // Gated DeltaNet: no map (NaN alpha, no top key)
      p.alpha0[l] = p.alpha1[l] = p.other_top[l] = std::numeric_limits<double>::quiet_NaN();
      continue;
    }
    ++attn_layers;
    for (int h = 0; h < H; ++h) {
      p.alpha0[l] += r.Alpha(0, l, h) / H;
      if (K > 1) p.alpha1[l] += r.Alpha(1, l, h) / H;
      if (r.top_mode[size_t(l) * H + h] != 0) p.other_top[l] += 1.0 / H;
      bool other = false;
      for (int k = 1; k < K; ++k) other = other || r.Alpha(k, l, h) > options.eps;
      other_sinks += other;
    }
  }
  p.other_sink_share = double(other_sinks) / (double(std::max(1, attn_layers)) * H);
  p.alpha1_share = K > 1 ? r.sink_rate[1] : 0.0;
  p.p0_norm_ratio = r.p0_norm_ratio;
  if (r.has_sink_slot) p.sink_slot_rate = r.sink_slot_rate_per_layer;
  ComputeLayers(p, options);

  p.loss = r.loss;
  return p;
}

nlohmann::json ProfileJson(const Profile& p) {
  nlohmann::json j = {{"n_layers", p.n_layers},
                      {"n_heads", p.n_heads},
                      {"sink_rate", p.sink_rate},
                      {"alpha0", p.alpha0},
                      {"alpha1", p.alpha1},
                      {"other_top_share", p.other_top},
                      {"p0_norm_ratio", p.p0_norm_ratio},
                      {"other_sink_share", p.other_sink_share},
                      {"alpha1_share", p.alpha1_share},
                      {"onset_layer", p.onset_layer},
                      {"amplification_layer", p.amplification_layer},
                      {"loss", p.loss}};
  if (!p.sink_slot_rate.empty()) j["sink_slot_rate"] = p.sink_slot_rate;
  return j;
}

// A per-layer array whose null entries (a Gated DeltaNet layer's attention metrics) read as NaN.
static std::vector<double> LayerValues(const nlohmann::json& j, const char* key) {
  std::vector<double> out;
  for (const nlohmann::json& v : j.at(key))
    out.push_back(v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>());
  return out;
}

Profile ProfileFromJson(const nlohmann::json& j, const std::string& source) {
  Profile p;
  try {
    // Layer and head counts as a model can have them (far below what the arrays could allocate).
    p.n_layers = static_cast<int>(JsonInteger(j, "n_layers", 0, 1 << 20, source));
    p.n_heads = static_cast<int>(JsonInteger(j, "n_heads", 0, 1 << 20, source));
    p.sink_rate = LayerValues(j, "sink_rate");
    p.alpha0 = LayerValues(j, "alpha0");
    p.alpha1 = LayerValues(j, "alpha1");
    p.other_top = LayerValues(j, "other_top_share");
    p.p0_norm_ratio = j.at("p0_norm_ratio").get<std::vector<double>>();
    p.other_sink_share = j.at("other_sink_share").get<double>();
    p.alpha1_share = j.at("alpha1_share").get<double>();
    const int last = std::max(-1, p.n_layers - 1);  // -1: none
    p.onset_layer = static_cast<int>(JsonInteger(j, "onset_layer", -1, last, source));
    p.amplification_layer =
        static_cast<int>(JsonInteger(j, "amplification_layer", -1, last, source));
    p.loss = j.at("loss").get<double>();
    if (j.contains("sink_slot_rate"))
      p.sink_slot_rate = j.at("sink_slot_rate").get<std::vector<double>>();
  } catch (const nlohmann::json::exception& e) {
    Fail("{}: not a sinkscope trace profile ({})", source, e.what());
  }
  const size_t L = static_cast<size_t>(p.n_layers);
  if (p.sink_rate.size() != L || p.alpha0.size() != L || p.alpha1.size() != L ||
      p.other_top.size() != L || p.p0_norm_ratio.size() != L ||
      (!p.sink_slot_rate.empty() && p.sink_slot_rate.size() != L))
    Fail("{}: per-layer arrays do not have n_layers = {} entries", source, L);
  return p;
}

// ---------------------------------------------------------------- stages

std::string StageName(Stage s) {
  switch (s) {
    case Stage::kNone:
      return "none";
    case Stage::kEarly:
      return "early";
    case Stage::kTransitional:
      return "transitional";
    case Stage::kConverged:
      return "converged";
  }
  return "?";
}

std::vector<Stage> ClassifyStages(const std::vector<Profile>& profiles, const StageOptions& o) {
  SS_ASSERT(o.stable_window >= 1);
  std::vector<Stage> out(profiles.size(), Stage::kNone);
  auto early_block = [&](int layer) { return layer >= 0 && layer <= o.early_block_limit; };
  for (size_t i = 0; i < profiles.size(); ++i) {
    const Profile& p = profiles[i];
    if (p.onset_layer < 0) {
      out[i] = Stage::kNone;
    } else if (p.other_sink_share >= o.other_sink_share) {
      out[i] = Stage::kTransitional;
    } else if (!early_block(p.onset_layer)) {
      out[i] = Stage::kEarly;
    } else {
      bool stable = i + 1 >= static_cast<size_t>(o.stable_window);
      for (size_t j = i + 1 - std::min(i + 1, size_t(o.stable_window)); stable && j <= i; ++j) {
        const Profile& q = profiles[j];
        stable = q.onset_layer == p.onset_layer && early_block(q.amplification_layer) &&
                 q.other_sink_share < o.other_sink_share;
      }
      out[i] = stable ? Stage::kConverged : Stage::kTransitional;
    }
  }
  return out;
}

void AssignStages(std::vector<CheckpointResult>& results, const StageOptions& options) {
  std::vector<Profile> profiles;
  std::vector<size_t> index;
  for (size_t i = 0; i < results.size(); ++i)
    if (results[i].ok) {
      profiles.push_back(results[i].profile);
      index.push_back(i);
    }
  const std::vector<Stage> stages = ClassifyStages(profiles, options);
  for (size_t i = 0; i < index.size(); ++i) results[index[i]].stage = stages[i];
}

// ---------------------------------------------------------------- analysing checkpoints

std::string CacheKey(const std::string& content_hash, const TraceSettings& s) {
  // Everything that changes a profile: the weights, the samples, the metric thresholds. The stage
  // options are not part of it: stages are recomputed from the profiles on every run.
  std::string settings = fmt::format(
      "trace-profile-v1|{}|N={}|T={}|seed={}|eps={:.17g}|K={}|onset={:.17g}|amp={:.17g}",
      s.samples_source, s.samples, s.length, s.seed, s.profile.eps, s.profile.first_k,
      s.profile.onset_sink_rate, s.profile.amplification_ratio);
  // bf16 and q8_0 profiles are cached apart; f32 keys stay those of earlier versions.
  if (s.precision != Precision::kF32)
    settings += std::string("|precision=") + PrecisionName(s.precision);
  // At native, x in int8 for some types (--activations int8) is cached apart too.
  if (s.precision == Precision::kNative && !Int8ActivationTypes().empty())
    settings += "|activations=int8(" + Int8ActivationTypes() + ")";
  return Sha256Hex(content_hash + "|" + settings).substr(0, 32);
}

nlohmann::json ResultJson(const CheckpointResult& r) {
  nlohmann::json j = {
      {"path", r.ref.path}, {"step", r.ref.step}, {"step_source", r.ref.step_source}, {"ok", r.ok}};
  if (r.ok) {
    j["profile"] = ProfileJson(r.profile);
  } else {
    j["error"] = r.error;
  }
  return j;
}

CheckpointResult ResultFromJson(const nlohmann::json& j) {
  CheckpointResult r;
  r.ref.path = j.at("path").get<std::string>();
  r.ref.step = JsonInteger(j, "step", -1, std::numeric_limits<int64_t>::max(), r.ref.path);
  r.ref.step_source = j.at("step_source").get<std::string>();
  r.ok = j.at("ok").get<bool>();
  if (r.ok)
    r.profile = ProfileFromJson(j.at("profile"), r.ref.path);
  else
    r.error = j.value("error", "");
  return r;
}

std::vector<CheckpointResult> AnalyseCheckpoints(
    const std::vector<CheckpointRef>& checkpoints, const TraceSettings& settings,
    const SampleMaker& make_samples, int rank, int ranks,
    const std::function<void(const std::string&)>& log) {
  std::vector<CheckpointResult> results(checkpoints.size());
  std::vector<std::vector<int>> samples;
  ModelConfig first_config;
  bool have_first = false;
  if (!settings.cache_dir.empty()) {
    std::error_code ec;
    fs::create_directories(settings.cache_dir, ec);
    if (ec)
      Fail("{}: cannot create the trace cache: {} (--no-cache runs without it)", settings.cache_dir,
           ec.message());
  }
  for (size_t i = 0; i < checkpoints.size(); ++i) {
    CheckpointResult& r = results[i];
    r.ref = checkpoints[i];
    if (static_cast<int>(i % ranks) != rank) continue;
    try {
      std::string cache_file;
      if (!settings.cache_dir.empty()) {
        cache_file =
            settings.cache_dir + "/" +
            CacheKey(CheckpointHash(r.ref.path, settings.cache_dir + "/file-hashes"), settings) +
            ".json";
        if (FileExists(cache_file)) {
          try {
            r.profile = ProfileFromJson(nlohmann::json::parse(ReadFile(cache_file)), cache_file);
            r.ok = true;
            r.cached = true;
            if (log) log(fmt::format("step {}: cached ({})", r.ref.step, cache_file));
            continue;
          } catch (const std::exception& e) {
            // A damaged cache entry is recomputed and rewritten.
            if (log)
              log(fmt::format("{}: ignoring unreadable cache entry ({})", cache_file, e.what()));
          }
        }
      }
      Model model = LoadCheckpoint(r.ref.path, settings.precision);
      SetPrecision(model, settings.precision);
      if (!have_first) {
        samples = make_samples(model);
        first_config = model.config;
        have_first = true;
      } else if (model.config.arch != first_config.arch ||
                 model.config.n_layers != first_config.n_layers ||
                 model.config.n_heads != first_config.n_heads ||
                 model.config.dim != first_config.dim ||
                 model.config.vocab_size != first_config.vocab_size) {
        Fail(
            "{}: architecture {} L={} H={} D={} V={} differs from the first checkpoint's {} L={} "
            "H={} "
            "D={} V={}",
            r.ref.path, model.config.arch, model.config.n_layers, model.config.n_heads,
            model.config.dim, model.config.vocab_size, first_config.arch, first_config.n_layers,
            first_config.n_heads, first_config.dim, first_config.vocab_size);
      }
      r.profile = MeasureProfile(model, samples, settings.profile);
      r.ok = true;
      if (!cache_file.empty()) WriteFileAtomic(cache_file, ProfileJson(r.profile).dump(1) + "\n");
      if (log)
        log(fmt::format("step {}: loss {:.4f}, onset layer {}", r.ref.step, r.profile.loss,
                        r.profile.onset_layer));
    } catch (const std::exception& e) {
      r.ok = false;
      r.error = e.what();
      if (r.error.empty()) r.error = "unknown error";
      if (log) log(fmt::format("skipping {}: {}", r.ref.path, r.error));
    }
  }
  return results;
}

}  // namespace ss::trace
