// sinkscope trace (docs/TRACE.md): the sink profile of every checkpoint of a training run, measured
// with the same samples, and the stage of sink formation each checkpoint is in (none, early,
// transitional, converged), as the paper's three stages made into explicit, configurable criteria.
//
// The metrics come from the analysis library (analysis::AnalyzeSamples, condition "bos" semantics:
// the samples are used as given); nothing is re-measured here. The stage classifier is a pure
// function of the per-checkpoint profiles, so it is tested without models.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "analysis/analyze.h"
#include "model/weights.h"

namespace ss::trace {

inline constexpr const char* kTraceSchema = "sinkscope.trace/1";

// ---- finding checkpoints

struct CheckpointRef {
  std::string path;  // an HF-layout directory or a GGUF file
  int64_t step = -1;
  std::string step_source;  // "trainer_state.json", "config.json", "name"
};

// The step of a checkpoint: "step" / "global_step" in DIR/trainer_state.json (sinkscope's trainer
// and the HF Trainer write these), then the last "step-N", "step_N", "stepN", "checkpoint-N"
// in the file or folder name (Pythia's "step1000"). Returns -1 when there is none.
int64_t ReadStep(const std::string& path, std::string* source = nullptr);

// The checkpoints in `dir`: every sub-directory with a config.json and every *.gguf file (hidden
// entries skipped), ordered by step. Throws ss::Error naming the directory when there are none,
// and naming the checkpoint when its step cannot be read, or two have the same step.
std::vector<CheckpointRef> FindCheckpoints(const std::string& dir);
// The same for an explicit list of paths (each must exist and carry a step).
std::vector<CheckpointRef> CheckpointsFromPaths(const std::vector<std::string>& paths);

// What must agree across a run's checkpoints: architecture and shapes from config.json, and the
// tokenizer files' hash. Empty fields for GGUF (checked after loading instead).
struct CheckpointIdentity {
  std::string arch;       // model_type / architectures[0]
  std::string shape;      // "layers=L heads=H kv=Hkv dim=D vocab=V"
  std::string tokenizer;  // sha256 of tokenizer.model / tokenizer.json, "" if none
};
CheckpointIdentity IdentifyCheckpoint(const std::string& path);
// Throws ss::Error naming the first two checkpoints that differ in architecture or tokenizer.
void CheckSameFamily(const std::vector<CheckpointRef>& checkpoints);

// Loads a checkpoint as an ss::Model. Trainer checkpoints (with train_config.json) go through the
// trainer's reader (train::LoadCheckpointModel) until HF directories load through ss::LoadModel
// (branch arch); everything else through ss::LoadModel.
// At Precision::kBf16 a file checkpoint holds its projections in bf16 only (io/load.h); a
// trainer checkpoint loads in f32 and the caller packs it (SetPrecision).
Model LoadCheckpoint(const std::string& path, Precision precision = Precision::kF32);

// Content hash of a checkpoint: sha256 over its weight and config files (sorted names and bytes).
// With index_dir, each file's hash is remembered there against its size, mtime and inode, and
// reused while they are unchanged.
std::string CheckpointHash(const std::string& path, const std::string& index_dir = "");

// ---- per-checkpoint profile

struct Profile {
  int n_layers = 0, n_heads = 0;
  std::vector<double> sink_rate;      // (L) Sink_0^eps of layer l (share of its heads)
  std::vector<double> alpha0;         // (L) mean over heads of alpha_0^{l,h}
  std::vector<double> alpha1;         // (L) mean over heads of alpha_1^{l,h}
  std::vector<double> other_top;      // (L) share of heads whose most frequent top key is not 0
  std::vector<double> p0_norm_ratio;  // (L) ||h_0|| / median_{i>=1} ||h_i|| after block l
  double other_sink_share = 0;        // share of all heads with alpha_k > eps for some k in 1..K-1
  double alpha1_share = 0;            // Sink_1^eps: share of all heads with alpha_1 > eps
  int onset_layer = -1;               // first layer with sink_rate > onset threshold; -1 none
  int amplification_layer =
      -1;           // first layer with p0_norm_ratio > amplification threshold; -1 none
  double loss = 0;  // mean next-token cross-entropy (nats) over the samples
  // Models with learned sink logits (gpt-oss): per layer, the share of heads whose mass on the
  // sink slot (alpha_sink) exceeds eps. Empty for other models.
  std::vector<double> sink_slot_rate;
};

struct ProfileOptions {
  double eps = 0.3;                  // Sink^eps threshold (DESIGN.md default)
  int first_k = 4;                   // alpha_k for k < K
  double onset_sink_rate = 0.5;      // a layer "has a sink" when more than half its heads are sinks
  double amplification_ratio = 3.0;  // P0 norm ratio that counts as amplified
};

// Runs the analysis on `samples` (N sequences of T tokens; position 0 as given) and the loss of
// predicting token t+1 from tokens 0..t.
Profile MeasureProfile(const Model& model, const std::vector<std::vector<int>>& samples,
                       const ProfileOptions& options);
// Onset and amplification layers from the per-layer arrays.
void ComputeLayers(Profile& profile, const ProfileOptions& options);

nlohmann::json ProfileJson(const Profile& profile);
Profile ProfileFromJson(const nlohmann::json& j, const std::string& source);

// ---- stage classifier

enum class Stage { kNone, kEarly, kTransitional, kConverged };
std::string StageName(Stage stage);

struct StageOptions {
  int early_block_limit = 1;      // "blocks 0-1": onset/amplification layer <= this is early-block
  double other_sink_share = 0.1;  // heads sinking on a position != 0 that make a stage transitional
  int stable_window = 3;          // k: converged needs the last k checkpoints to agree
};

// The stage of every checkpoint i (profiles ordered by step), from checkpoints 0..i only:
//   none          no layer has a sink (onset_layer == -1)
//   transitional  other_sink_share >= other_sink_share threshold (sink mass at a position != 0)
//   early         onset_layer > early_block_limit
//   converged     onset and amplification in blocks 0..limit at each of the last k checkpoints,
//   with
//                 the same onset layer at all k
//   transitional  otherwise (onset in the first blocks but still moving, not yet amplified there,
//                 or fewer than k checkpoints seen)
std::vector<Stage> ClassifyStages(const std::vector<Profile>& profiles,
                                  const StageOptions& options);

// ---- the whole trace

struct TraceSettings {
  std::string samples_source;  // how the samples were made (for the report and the cache key)
  int samples = 0, length = 0;
  uint64_t seed = 0;
  ProfileOptions profile;
  StageOptions stage;
  std::string cache_dir;                  // "" = no cache
  Precision precision = Precision::kF32;  // the forward's products (--precision)
};

struct CheckpointResult {
  CheckpointRef ref;
  bool ok = false;
  std::string error;  // when !ok
  bool cached = false;
  Profile profile;
  Stage stage = Stage::kNone;
};

// Analyses the checkpoints given to this rank (`rank`, `ranks`: checkpoint i goes to rank i %
// ranks) and returns their results (others left !ok with empty error). Failed checkpoints are
// recorded, not thrown. `make_samples` builds the samples from the first model loaded (vocabulary,
// BOS).
using SampleMaker = std::function<std::vector<std::vector<int>>(const Model&)>;
std::vector<CheckpointResult> AnalyseCheckpoints(
    const std::vector<CheckpointRef>& checkpoints, const TraceSettings& settings,
    const SampleMaker& make_samples, int rank = 0, int ranks = 1,
    const std::function<void(const std::string&)>& log = {});
// Fills in stages (over the ok results, in step order).
void AssignStages(std::vector<CheckpointResult>& results, const StageOptions& options);

// The cache key of a checkpoint under the settings.
std::string CacheKey(const std::string& content_hash, const TraceSettings& settings);

nlohmann::json TraceJson(const std::vector<CheckpointResult>& results,
                         const TraceSettings& settings);
std::string TraceTable(const std::vector<CheckpointResult>& results, const StageOptions& options);
std::string TraceHtml(const std::vector<CheckpointResult>& results, const TraceSettings& settings);

// Scale-out: every rank analyses checkpoints i with i % ranks == rank; this exchanges the results
// (MPI_Allgatherv of their JSON) so every rank holds all of them, in the original order. A single
// process (or a build without MPI) returns `local` unchanged.
std::vector<CheckpointResult> GatherResults(const std::vector<CheckpointResult>& local, int rank,
                                            int ranks);

// ---- twins: runs that differ in one setting (scripts/twins.sh), traced on the same samples

inline constexpr const char* kTwinsSchema = "sinkscope.trace-twins/1";

struct TwinRun {
  std::string name;  // the variant (the run directory's name)
  std::string dir;
  std::vector<CheckpointResult> results;  // stages assigned
};

// Per checkpoint, over layers: the largest mean-over-heads alpha_0, the largest sink rate, the
// largest P0 norm ratio, and the mean share of heads on a sink slot (NaN without a slot).
struct TwinPoint {
  int64_t step = 0;
  Stage stage = Stage::kNone;
  double loss = 0, alpha0 = 0, sink_rate = 0, p0_norm_ratio = 0, slot_share = 0;
};
std::vector<TwinPoint> TwinPoints(const TwinRun& run);

// JSON "sinkscope.trace-twins/1": the settings once, each run's trace (as TraceJson) and its
// points; the terminal table (one row per step, each run's stage and alpha_0 side by side); the
// HTML page (each metric's curves of every run overlaid, and the side-by-side stages).
nlohmann::json TwinsJson(const std::vector<TwinRun>& runs, const TraceSettings& settings);
std::string TwinsTable(const std::vector<TwinRun>& runs);
std::string TwinsHtml(const std::vector<TwinRun>& runs, const TraceSettings& settings);

// Per-checkpoint result to/from JSON (for the cache and the MPI gather).
nlohmann::json ResultJson(const CheckpointResult& r);
CheckpointResult ResultFromJson(const nlohmann::json& j);

}  // namespace ss::trace
