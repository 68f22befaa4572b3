// sinkscope trace, library side: the stage classifier on synthetic profile series with known
// stages, step reading, checkpoint discovery, and the measured profile of small trainer checkpoints
// (against the analysis library run directly, and the loss of a near-uniform model).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "analysis/analyze.h"
#include "common/error.h"
#include "common/file_util.h"
#include "naive_hf.h"
#include "test_util.h"
#include "trace/trace.h"
#include "train/checkpoint.h"
#include "train/params.h"
#include "train/rng.h"
#include "train/train_model.h"

namespace ss {
namespace {

namespace fs = std::filesystem;
using trace::Profile;
using trace::Stage;

// A profile of L layers x 4 heads: sink rate and P0 norm ratio per layer, and the share of heads
// sinking on another position.
Profile MakeProfile(std::vector<double> sink_rate, std::vector<double> p0_ratio,
                    double other = 0.0) {
  Profile p;
  p.n_layers = static_cast<int>(sink_rate.size());
  p.n_heads = 4;
  p.sink_rate = sink_rate;
  p.alpha0 = sink_rate;
  p.alpha1.assign(p.n_layers, 0.0);
  p.other_top.assign(p.n_layers, 0.0);
  p.p0_norm_ratio = p0_ratio;
  p.other_sink_share = other;
  trace::ComputeLayers(p, trace::ProfileOptions{});
  return p;
}

std::vector<std::string> Names(const std::vector<Stage>& stages) {
  std::vector<std::string> out;
  for (Stage s : stages) out.push_back(trace::StageName(s));
  return out;
}

TEST(TraceStages, OnsetAndAmplificationLayers) {
  const Profile p = MakeProfile({0.25, 0.5, 0.75, 1.0}, {1.0, 2.9, 3.1, 50.0});
  EXPECT_EQ(p.onset_layer, 2);          // 0.5 is not > 0.5
  EXPECT_EQ(p.amplification_layer, 2);  // 2.9 is not > 3
  const Profile none = MakeProfile({0.0, 0.25}, {1.0, 1.0});
  EXPECT_EQ(none.onset_layer, -1);
  EXPECT_EQ(none.amplification_layer, -1);
}

// The paper's sequence (none -> early in middle layers -> transitional (sinks at another position,
// onset moving) -> converged in blocks 0-1), one checkpoint per row.
TEST(TraceStages, KnownSeries) {
  const std::vector<Profile> series = {
      MakeProfile({0, 0, 0, 0}, {1, 1, 1, 1}),               // none
      MakeProfile({0, 0, 0.25, 0.25}, {1, 1, 1, 1}),         // none: no layer above 0.5
      MakeProfile({0, 0, 0.75, 1.0}, {1, 1, 2, 5}),          // early: onset 2
      MakeProfile({0, 0, 1.0, 1.0}, {1, 1, 4, 8}),           // early: onset 2
      MakeProfile({0, 0.75, 1.0, 1.0}, {1, 4, 8, 8}, 0.25),  // transitional: position-1 sinks
      MakeProfile({0, 0.75, 1.0, 1.0}, {1, 4, 8, 8}),        // transitional: onset 1, 1 of 3 stable
      MakeProfile({0.75, 1.0, 1.0, 1.0}, {5, 8, 8, 8}),      // transitional: onset moved to 0
      MakeProfile({0.75, 1.0, 1.0, 1.0}, {5, 8, 8, 8}),      // transitional: 2 of 3
      MakeProfile({1.0, 1.0, 1.0, 1.0}, {6, 9, 9, 9}),       // converged: 3 of 3 with onset 0
      MakeProfile({1.0, 1.0, 1.0, 1.0}, {6, 9, 9, 9}),       // converged
  };
  const std::vector<std::string> expected = {
      "none",         "none",         "early",        "early",     "transitional",
      "transitional", "transitional", "transitional", "converged", "converged"};
  EXPECT_EQ(Names(trace::ClassifyStages(series, trace::StageOptions{})), expected);
}

TEST(TraceStages, NotAmplifiedInFirstBlocksIsNotConverged) {
  // Sinks from layer 0 but the P0 norm grows only at layer 3: the circuit is not in blocks 0-1.
  std::vector<Profile> series(5, MakeProfile({1, 1, 1, 1}, {1, 1.5, 2, 10}));
  for (Stage s : trace::ClassifyStages(series, trace::StageOptions{}))
    EXPECT_EQ(s, Stage::kTransitional);
  // With amplification already from block 0 it converges after k = 3 checkpoints.
  series.assign(5, MakeProfile({1, 1, 1, 1}, {10, 10, 10, 10}));
  EXPECT_EQ(Names(trace::ClassifyStages(series, trace::StageOptions{})),
            (std::vector<std::string>{"transitional", "transitional", "converged", "converged",
                                      "converged"}));
}

TEST(TraceStages, ThresholdsAreConfigurable) {
  std::vector<Profile> series(3, MakeProfile({0, 0, 1, 1}, {1, 1, 10, 10}));
  trace::StageOptions o;
  EXPECT_EQ(trace::ClassifyStages(series, o).back(), Stage::kEarly);
  o.early_block_limit = 2;  // blocks 0-2 count as early blocks
  EXPECT_EQ(trace::ClassifyStages(series, o).back(), Stage::kConverged);
  o.stable_window = 4;  // not enough checkpoints yet
  EXPECT_EQ(trace::ClassifyStages(series, o).back(), Stage::kTransitional);
  // Other-position share exactly at the threshold counts.
  std::vector<Profile> other(1, MakeProfile({1, 1}, {9, 9}, 0.1));
  EXPECT_EQ(trace::ClassifyStages(other, trace::StageOptions{})[0], Stage::kTransitional);
  trace::StageOptions high;
  high.other_sink_share = 0.5;
  high.stable_window = 1;
  EXPECT_EQ(trace::ClassifyStages(other, high)[0], Stage::kConverged);
}

TEST(TraceStages, OnsetMovingBackIsTransitional) {
  // Converged, then the onset jumps from 0 to 1 and back: not stable over the last 3.
  std::vector<Profile> series(3, MakeProfile({1, 1, 1}, {9, 9, 9}));
  series.push_back(MakeProfile({0, 1, 1}, {9, 9, 9}));
  series.push_back(MakeProfile({1, 1, 1}, {9, 9, 9}));
  EXPECT_EQ(Names(trace::ClassifyStages(series, trace::StageOptions{})),
            (std::vector<std::string>{"transitional", "transitional", "converged", "transitional",
                                      "transitional"}));
}

TEST(TraceStages, ProfileJsonRoundTrip) {
  Profile p = MakeProfile({0.1, 0.9}, {1.5, 30.25}, 0.125);
  p.loss = 3.14159;
  const Profile q =
      trace::ProfileFromJson(nlohmann::json::parse(trace::ProfileJson(p).dump()), "x");
  EXPECT_EQ(trace::ProfileJson(p), trace::ProfileJson(q));
  nlohmann::json bad = trace::ProfileJson(p);
  bad["sink_rate"] = {1.0};
  EXPECT_THROW(trace::ProfileFromJson(bad, "bad"), Error);
}

// A gpt_oss checkpoint with large learned sink logits: the profile carries the slot share per
// layer, which survives the cache's JSON (and a wrong length is refused).
TEST(TraceStages, LearnedSinkSlotShareInTheProfile) {
  const Model m =
      test::LoadRandomHf(test::SmallGptOssConfig(), 4, "trace_gpt_oss", test::SetSinkLogits(12.0f));
  std::vector<std::vector<int>> samples(2, std::vector<int>(16));
  for (int n = 0; n < 2; ++n)
    for (int t = 0; t < 16; ++t) samples[n][t] = (7 * t + 13 * n + 1) % 61;
  const Profile p = trace::MeasureProfile(m, samples, {});
  EXPECT_EQ(p.sink_slot_rate, (std::vector<double>{1.0, 1.0}));
  EXPECT_EQ(p.onset_layer, -1);  // nothing on position 0
  const Profile q =
      trace::ProfileFromJson(nlohmann::json::parse(trace::ProfileJson(p).dump()), "x");
  EXPECT_EQ(q.sink_slot_rate, p.sink_slot_rate);
  nlohmann::json bad = trace::ProfileJson(p);
  bad["sink_slot_rate"] = {1.0};
  EXPECT_THROW(trace::ProfileFromJson(bad, "bad"), Error);
  std::vector<trace::CheckpointResult> results(1);
  results[0].ok = true;
  results[0].profile = p;
  EXPECT_NE(trace::TraceTable(results, {}).find("slot share"), std::string::npos);
}

// Qwen3.5 checkpoints (Gated DeltaNet layers 0 and 2, no BOS token): trace runs on them, on the
// windows as cut (no BOS to put first), the linear layers' attention metrics are NaN (null in
// JSON, and read back as NaN from the cache and the report), and the other-position share counts
// the attention layers' heads only.
TEST(TraceProfile, Qwen35CheckpointsWithoutBos) {
  const char* config = R"({"architectures": ["Qwen3_5ForCausalLM"], "hidden_size": 32,
    "intermediate_size": 48, "num_hidden_layers": 4, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 8, "vocab_size": 512, "max_position_embeddings": 64,
    "partial_rotary_factor": 0.5, "full_attention_interval": 2, "linear_num_key_heads": 1,
    "linear_num_value_heads": 2, "linear_key_head_dim": 8, "linear_value_head_dim": 4})";
  const Model m = test::LoadRandomHf(config, 3, "trace_qwen35");
  ASSERT_LT(m.config.bos_id, 0);
  std::vector<std::vector<int>> samples(2, std::vector<int>(16));
  for (int n = 0; n < 2; ++n)
    for (int t = 0; t < 16; ++t) samples[n][t] = (7 * t + 13 * n + 1) % 512;
  const Profile p = trace::MeasureProfile(m, samples, {});
  for (int l : {0, 2}) {
    EXPECT_TRUE(std::isnan(p.sink_rate[l]) && std::isnan(p.alpha0[l]) &&
                std::isnan(p.other_top[l]));
  }
  EXPECT_FALSE(std::isnan(p.alpha0[1]));
  const Profile q =
      trace::ProfileFromJson(nlohmann::json::parse(trace::ProfileJson(p).dump()), "x");
  EXPECT_TRUE(std::isnan(q.alpha0[0]));
  EXPECT_EQ(q.alpha0[3], p.alpha0[3]);
  const std::string run = test::TempDir("trace_qwen35_run");
  std::filesystem::remove_all(run);
  std::filesystem::create_directories(run);
  for (int step : {10, 20})
    std::filesystem::rename(
        test::WriteRandomHf(config, 3 + step, "trace_qwen35_" + std::to_string(step)),
        run + "/step-" + std::to_string(step));
  const std::string args = "trace --checkpoints " + run + " --tokenizer " +
                           test::RepoPath("models/stories260K/tok512.bin") +
                           " --samples 2 --length 16 --json " + run + "/t.json";
  for (int pass = 0; pass < 2; ++pass) {  // computed, then from the cache
    const auto r = test::RunCli(args);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.err.find("unreadable cache"), std::string::npos) << r.err;
    std::ifstream in(run + "/t.json");
    const nlohmann::json doc = nlohmann::json::parse(in);
    ASSERT_EQ(doc["checkpoints"].size(), 2u);
    EXPECT_TRUE(doc["checkpoints"][0]["profile"]["alpha0"][0].is_null());
    EXPECT_EQ(doc["checkpoints"][1]["stage"], "none");
  }
  std::filesystem::remove_all(run);
}

// Fuzz findings (fuzz/seeds/fuzz_trace_cache/regression-*): a float where an integer belongs was
// converted with undefined behaviour (3.3e44 to int), and a layer outside the profile was accepted.
TEST(TraceStages, ProfileJsonIntegersAreCheckedIntegers) {
  const nlohmann::json good = trace::ProfileJson(MakeProfile({0.1, 0.9}, {1.5, 30.25}, 0.125));
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, nlohmann::json>>{{"n_layers", 3.33333e44},
                                                           {"n_layers", 2.5},
                                                           {"n_heads", -1},
                                                           {"n_layers", "2"},
                                                           {"onset_layer", 91},
                                                           {"amplification_layer", -2},
                                                           {"n_layers", 18446744073709551615ull}}) {
    nlohmann::json bad = good;
    bad[key] = value;
    try {
      trace::ProfileFromJson(bad, "cache.json");
      ADD_FAILURE() << key << " = " << value.dump() << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cache.json: '" + key + "'"), std::string::npos)
          << e.what();
    }
  }
  nlohmann::json result = {{"path", "run/step-100"},
                           {"step", 1.00778e47},
                           {"step_source", "name"},
                           {"ok", true},
                           {"profile", good}};
  EXPECT_THROW(trace::ResultFromJson(result), Error);
  result["step"] = 100;
  EXPECT_EQ(trace::ResultFromJson(result).ref.step, 100);
}

TEST(TraceFind, StepFromNames) {
  EXPECT_EQ(trace::ReadStep("/runs/x/step-1000"), 1000);
  EXPECT_EQ(trace::ReadStep("/runs/x/checkpoint-250"), 250);
  EXPECT_EQ(trace::ReadStep("/pythia/step143000"), 143000);
  EXPECT_EQ(trace::ReadStep("/runs/model-step_7.gguf"), 7);
  EXPECT_EQ(trace::ReadStep("/runs/step-99999999999999999999"), -1);  // no int64_t: not a step
  EXPECT_EQ(trace::ReadStep("/runs/step-5/final"), -1);               // only the last name counts
  EXPECT_EQ(trace::ReadStep("/runs/final"), -1);
}

TEST(TraceFind, DiscoveryAndBadInput) {
  const std::string dir = test::TempDir("trace_find");
  EXPECT_THROW(trace::FindCheckpoints(dir), Error);  // empty
  for (const char* name : {"step-20", "step-3", "checkpoint-100"}) {
    fs::create_directories(dir + "/" + name);
    std::ofstream(dir + "/" + name + "/config.json") << "{}";
  }
  fs::create_directories(dir + "/.hidden-step-1");
  std::ofstream(dir + "/.hidden-step-1/config.json") << "{}";
  fs::create_directories(dir + "/notes");  // no config.json: not a checkpoint
  const auto refs = trace::FindCheckpoints(dir);
  ASSERT_EQ(refs.size(), 3u);
  EXPECT_EQ(refs[0].step, 3);
  EXPECT_EQ(refs[1].step, 20);
  EXPECT_EQ(refs[2].step, 100);
  // trainer_state.json wins over the name.
  std::ofstream(dir + "/step-3/trainer_state.json") << R"({"step": 7})";
  EXPECT_EQ(trace::ReadStep(dir + "/step-3"), 7);
  // A checkpoint without a step is named in the error.
  fs::create_directories(dir + "/final");
  std::ofstream(dir + "/final/config.json") << "{}";
  try {
    trace::FindCheckpoints(dir);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("final"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// ---- measured profiles of small trainer checkpoints

train::TrainConfig TinyConfig() {
  train::TrainConfig c;
  c.dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 32;
  c.seq_len = 16;
  return c;
}

// Writes DIR/step-<step> with weights N(0, init_std * scale) from `seed`.
std::string WriteCheckpoint(const std::string& dir, int step, uint64_t seed, float scale) {
  const train::TrainConfig c = TinyConfig();
  const train::ParamLayout layout = train::ParamLayout::Build(c);
  train::TrainModel<float> m(c, 1, c.seq_len);
  m.InitParams(seed);
  train::TrainerState s;
  s.step = step;
  s.params = m.params;
  for (auto& p : s.params) p *= scale;
  s.adam_m.assign(layout.total, 0.0f);
  s.adam_v.assign(layout.total, 0.0f);
  return train::SaveCheckpoint(dir, c, layout, s, "");
}

std::vector<std::vector<int>> Samples(int n, int T, int V) {
  train::Rng rng(3);
  std::vector<std::vector<int>> out(n, std::vector<int>(T));
  for (auto& s : out) {
    s[0] = 0;
    for (int t = 1; t < T; ++t) s[t] = 1 + rng.Below(V - 1);
  }
  return out;
}

TEST(TraceProfile, MatchesAnalysisAndUniformLoss) {
  const std::string dir = test::TempDir("trace_profile");
  const std::string ck = WriteCheckpoint(dir, 10, 1, 1.0f);
  const Model model = trace::LoadCheckpoint(ck);
  const auto samples = Samples(3, 12, 32);
  const Profile p = trace::MeasureProfile(model, samples, trace::ProfileOptions{});
  analysis::AnalyzeOptions ao;
  const auto r = analysis::AnalyzeSamples(model, analysis::Condition::kBos, samples, ao);
  ASSERT_EQ(p.n_layers, 2);
  std::vector<float> a(p.alpha0.begin(), p.alpha0.end()), b(2, 0.0f);
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 4; ++h) b[l] += static_cast<float>(r.Alpha(0, l, h) / 4);
  EXPECT_LT(test::MaxDiff(a, b, "mean alpha_0 per layer vs AnalyzeSamples"), 1e-6);
  std::vector<float> pa(p.p0_norm_ratio.begin(), p.p0_norm_ratio.end());
  std::vector<float> pb(r.p0_norm_ratio.begin(), r.p0_norm_ratio.end());
  EXPECT_LT(test::MaxDiff(pa, pb, "P0 norm ratio vs AnalyzeSamples"), 1e-6);
  // Weights N(0, 0.02): logits near zero, so the loss is close to ln V.
  std::printf("loss %.5f vs ln V %.5f\n", p.loss, std::log(32.0));
  EXPECT_NEAR(p.loss, std::log(32.0), 0.05);
  fs::remove_all(dir);
}

TEST(TraceProfile, AnalyseCacheAndFailures) {
  const std::string dir = test::TempDir("trace_cache");
  WriteCheckpoint(dir, 5, 1, 1.0f);
  WriteCheckpoint(dir, 10, 2, 20.0f);
  WriteCheckpoint(dir, 15, 3, 40.0f);
  auto refs = trace::FindCheckpoints(dir);
  ASSERT_EQ(refs.size(), 3u);
  trace::TraceSettings settings;
  settings.samples_source = "test";
  settings.samples = 2;
  settings.length = 12;
  settings.cache_dir = dir + "/.cache";
  int made = 0;
  auto maker = [&](const Model& m) {
    ++made;
    return Samples(2, 12, m.config.vocab_size);
  };
  auto first = trace::AnalyseCheckpoints(refs, settings, maker);
  for (const auto& r : first) {
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_FALSE(r.cached);
  }
  EXPECT_EQ(made, 1);
  // Larger weights give a larger loss than the near-uniform one: the checkpoints really differ.
  EXPECT_GT(first[2].profile.loss, first[0].profile.loss);
  auto second = trace::AnalyseCheckpoints(refs, settings, maker);
  for (size_t i = 0; i < second.size(); ++i) {
    EXPECT_TRUE(second[i].cached);
    EXPECT_EQ(trace::ProfileJson(second[i].profile), trace::ProfileJson(first[i].profile));
  }
  // Other settings miss the cache.
  trace::TraceSettings other = settings;
  other.seed = 9;
  for (const auto& r : trace::AnalyseCheckpoints(refs, other, maker)) EXPECT_FALSE(r.cached);
  // New weights at the same step miss the cache; a corrupted checkpoint is recorded, not thrown.
  fs::remove_all(refs[1].path);
  WriteCheckpoint(dir, 10, 7, 20.0f);
  std::ofstream(refs[2].path + "/model.safetensors", std::ios::trunc) << "garbage";
  auto third = trace::AnalyseCheckpoints(refs, settings, maker);
  EXPECT_TRUE(third[0].cached);
  EXPECT_TRUE(third[1].ok);
  EXPECT_FALSE(third[1].cached);
  EXPECT_FALSE(third[2].ok);
  EXPECT_NE(third[2].error.find("model.safetensors"), std::string::npos) << third[2].error;
  // Sharding: rank 1 of 2 analyses only checkpoint 1.
  auto shard = trace::AnalyseCheckpoints(refs, settings, maker, 1, 2);
  EXPECT_FALSE(shard[0].ok);
  EXPECT_TRUE(shard[0].error.empty());
  EXPECT_TRUE(shard[1].ok);
  fs::remove_all(dir);
}

// Each file's hash is remembered against its size, mtime and inode: an unchanged file is not
// hashed again (a planted wrong hash in its entry shows through), a changed one is.
TEST(TraceProfile, FileHashesAreRememberedByStat) {
  const std::string dir = test::TempDir("trace_hash_index");
  const std::string ck = WriteCheckpoint(dir, 10, 1, 1.0f);
  const std::string index = dir + "/index";
  const std::string truth = trace::CheckpointHash(ck);
  EXPECT_EQ(trace::CheckpointHash(ck, index), truth);
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(index)) entries.push_back(e.path().string());
  ASSERT_GE(entries.size(), 2u);  // config.json and model.safetensors at least
  for (const std::string& entry : entries) {
    nlohmann::json j = nlohmann::json::parse(ReadFile(entry));
    j["sha256"] = std::string(64, '0');
    std::ofstream(entry, std::ios::trunc) << j.dump();
  }
  const std::string remembered = trace::CheckpointHash(ck, index);
  EXPECT_NE(remembered, truth);  // read from the entries, not from the files
  std::ofstream(ck + "/model.safetensors", std::ios::app) << "x";  // size and mtime change
  const std::string changed = trace::CheckpointHash(ck);
  const std::string again = trace::CheckpointHash(ck, index);
  EXPECT_NE(changed, truth);
  EXPECT_NE(again, remembered);
  // config.json's entry still holds the planted hash; model.safetensors was hashed again.
  fs::remove_all(index);
  EXPECT_EQ(trace::CheckpointHash(ck, index), changed);
  fs::remove_all(dir);
}

// ---- end to end on checkpoints with planted sinks and known stages

// A 3-layer model whose residual stream is its embedding at every layer (wo, w2 zero, so the
// blocks add nothing): content tokens are c + small noise (c = e_0), BOS is s * e_{D-1}. A
// "planted" layer's heads read c into the query and e_{D-1} into the key, on the lowest-frequency
// RoPE pair (dims Dh/2-1 and Dh-1 of each head under rotate_half; frequency 10000^(-6/8) = 0.001,
// so over 16 positions the rotation is below 0.02 rad): every query's score on BOS is ~100, so the
// layer's heads are all sinks, and unplanted layers attend uniformly (alpha_0 = H_16/16 = 0.21 <
// eps). The P0 norm ratio is |s| / |c + noise| at every layer: s = 1 no amplification, s = 10 from
// layer 0.
std::string WritePlanted(const std::string& dir, int step, std::vector<int> sink_layers, float s) {
  train::TrainConfig c = TinyConfig();
  c.n_layers = 3;
  const int D = c.dim, Dh = c.dim / c.n_heads, V = c.vocab_size;
  const train::ParamLayout layout = train::ParamLayout::Build(c);
  std::vector<float> params(layout.total, 0.0f);
  auto tensor = [&](const std::string& name) -> float* {
    const train::ParamTensor* t = layout.Find(name);
    SS_ASSERT(t);
    return params.data() + t->offset;
  };
  train::Rng rng(step);
  float* emb = tensor("model.embed_tokens.weight");  // (V, D)
  for (int v = 1; v < V; ++v) {
    emb[size_t(v) * D] = 1.0f;
    for (int d = 1; d < D - 1; ++d)
      emb[size_t(v) * D + d] = 0.1f * static_cast<float>(rng.Uniform() - 0.5);
  }
  emb[size_t(D) - 1] = s;  // BOS (id 0)
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    for (const char* norm : {"input_layernorm.weight", "post_attention_layernorm.weight"}) {
      float* w = tensor(pre + norm);
      for (int d = 0; d < D; ++d) w[d] = 1.0f;
    }
    if (std::find(sink_layers.begin(), sink_layers.end(), l) == sink_layers.end()) continue;
    float* wq = tensor(pre + "self_attn.q_proj.weight");  // (H * Dh, D)
    float* wk = tensor(pre + "self_attn.k_proj.weight");  // (Hkv * Dh, D)
    for (int h = 0; h < c.n_heads; ++h) wq[size_t(h * Dh + Dh / 2 - 1) * D + 0] = 1.0f;
    for (int h = 0; h < c.n_kv_heads; ++h) wk[size_t(h * Dh + Dh / 2 - 1) * D + (D - 1)] = 10.0f;
  }
  float* fn = tensor("model.norm.weight");
  for (int d = 0; d < D; ++d) fn[d] = 1.0f;
  train::TrainerState st;
  st.step = step;
  st.params = params;
  st.adam_m.assign(layout.total, 0.0f);
  st.adam_v.assign(layout.total, 0.0f);
  return train::SaveCheckpoint(dir, c, layout, st, "");
}

TEST(TraceEndToEnd, PlantedSinksGiveKnownStages) {
  const std::string dir = test::TempDir("trace_planted");
  WritePlanted(dir, 100, {}, 1.0f);          // none
  WritePlanted(dir, 200, {2}, 1.0f);         // early: onset 2
  WritePlanted(dir, 300, {1, 2}, 10.0f);     // transitional: onset 1, not yet stable
  WritePlanted(dir, 400, {0, 1, 2}, 10.0f);  // transitional: onset moved to 0
  WritePlanted(dir, 500, {0, 1, 2}, 10.0f);  // transitional: 2 of 3
  WritePlanted(dir, 600, {0, 1, 2}, 10.0f);  // converged
  const auto refs = trace::FindCheckpoints(dir);
  trace::TraceSettings settings;
  settings.samples_source = "planted";
  settings.samples = 2;
  settings.length = 16;
  auto results = trace::AnalyseCheckpoints(
      refs, settings, [](const Model& m) { return Samples(2, 16, m.config.vocab_size); });
  trace::AssignStages(results, settings.stage);
  std::vector<std::string> stages;
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok) << r.error;
    stages.push_back(trace::StageName(r.stage));
    std::printf("step %lld: onset %d amplification %d sink rate %.2f %.2f %.2f P0 ratio %.2f\n",
                static_cast<long long>(r.ref.step), r.profile.onset_layer,
                r.profile.amplification_layer, r.profile.sink_rate[0], r.profile.sink_rate[1],
                r.profile.sink_rate[2], r.profile.p0_norm_ratio[0]);
  }
  EXPECT_EQ(stages, (std::vector<std::string>{"none", "early", "transitional", "transitional",
                                              "transitional", "converged"}));
  EXPECT_EQ(results[1].profile.onset_layer, 2);
  EXPECT_EQ(results[1].profile.amplification_layer, -1);
  EXPECT_EQ(results[5].profile.onset_layer, 0);
  EXPECT_EQ(results[5].profile.amplification_layer, 0);
  EXPECT_GT(results[5].profile.alpha0[0], 0.95);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ss
