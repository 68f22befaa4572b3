// Input validation, one class per section (docs/GUARANTEES.md):
//   config values  every ModelConfig value checked against its domain at load (config.json, GGUF,
//                  llama2.c, training configs), stored layers against declared layers both ways,
//                  NaN/Inf weights at load, NaN/Inf activations in a forward pass named by layer;
//   flags          every numeric flag checked for NaN and range, the shared options one domain;
//   hangs          FIFOs and devices refused as models and inputs, sizes checked against memory
//                  and input caps before anything is read or allocated;
//   messages       a message shows what it quotes whole: bytes that would cut it or garble it
//                  escaped, numbers as they were written.
// Each class is tested at the library level and through the sinkscope binary.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "common/error.h"
#include "common/file_util.h"
#include "explain/explain.h"
#include "io/gguf_writer.h"
#include "io/hf_config.h"
#include "io/load.h"
#include "io/model_files.h"
#include "io/token_ids.h"
#include "kernels/dequant.h"
#include "kernels/parallel.h"
#include "model/model.h"
#include "random_model.h"
#include "test_util.h"
#include "tokenizer/export.h"
#include "tokenizer/find.h"
#include "train/train_config.h"

namespace ss {
namespace {

namespace fs = std::filesystem;

const std::string kStories = test::RepoPath("models/stories260K/stories260K.bin");
const std::string kTokenizer = test::RepoPath("models/stories260K/tok512.bin");

// The message of the ss::Error `f` throws ("" if it throws none), printed so every run shows it.
template <typename F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    std::printf("error: %s\n", e.what());
    return e.what();
  }
  return "";
}

// Expects exit code 1 with stderr holding every needle, on one line unless the verb logs progress
// before it fails (`one_line` false).
void ExpectCliError(const std::string& args, const std::vector<std::string>& needles,
                    bool one_line = true) {
  const test::CliResult r = test::RunCli(args);
  EXPECT_EQ(r.code, 1) << args << "\nstderr: " << r.err;
  if (one_line) {
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << args << "\nstderr: " << r.err;
  }
  for (const std::string& needle : needles)
    EXPECT_NE(r.err.find(needle), std::string::npos)
        << args << "\nmissing: " << needle << "\nstderr: " << r.err;
}

// stories260K as a Hugging Face directory (config.json, model.safetensors, tokenizer.json).
std::string WriteStoriesHf(const std::string& tag, const Model& model) {
  const std::string dir = test::TempDir("validate_" + tag) + "/hf";
  fs::create_directories(dir);
  WriteHfModel(model, dir, SafetensorsDtype::kF32);
  WriteFileAtomic(dir + "/tokenizer.json", TokenizerJsonText(*FindTokenizer(model, kTokenizer)));
  return dir;
}

// Rewrites one key of DIR/config.json.
void SetConfigKey(const std::string& dir, const std::string& key, const nlohmann::json& value) {
  nlohmann::json j = nlohmann::json::parse(ReadFile(dir + "/config.json"));
  j[key] = value;
  WriteFileAtomic(dir + "/config.json", j.dump(2));
}

std::string WriteStoriesGguf(const std::string& tag, const Model& model) {
  const std::string path = test::TempDir("validate_" + tag) + "/model.gguf";
  GgufWriter writer;
  AddGgufModel(model, writer, kGgmlTypeF32);
  AddGgufTokenizer(*FindTokenizer(LoadModel(kStories), kTokenizer), writer);
  writer.Write(path);
  return path;
}

// Overwrites the uint32 value of GGUF metadata `key` in place.
void PatchGgufU32(const std::string& path, const std::string& key, uint32_t value) {
  std::string bytes = ReadFile(path);
  std::string needle(8, '\0');
  const uint64_t n = key.size();
  std::memcpy(needle.data(), &n, 8);
  needle += key;
  const size_t at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos) << key;
  uint32_t type;
  std::memcpy(&type, bytes.data() + at + needle.size(), 4);
  ASSERT_EQ(type, 4u) << key << " is not uint32";
  std::memcpy(bytes.data() + at + needle.size() + 4, &value, 4);
  WriteFileAtomic(path, bytes);
}

// A copy of stories260K.bin with `value` written over float `index` of the (L, F... ) array that
// starts `floats_before` floats after the 28-byte legacy header.
std::string StoriesWithFloat(const std::string& tag, int64_t float_offset, float value,
                             int64_t count = 1) {
  std::string bytes = ReadFile(kStories);
  for (int64_t i = 0; i < count; ++i)
    std::memcpy(bytes.data() + 28 + (float_offset + i) * 4, &value, 4);
  const std::string dir = test::TempDir("validate_" + tag);
  const std::string path = dir + "/stories260K.bin";
  WriteFileAtomic(path, bytes);
  fs::copy_file(kTokenizer, dir + "/tok512.bin", fs::copy_options::overwrite_existing);
  return path;
}

// Float offsets in the legacy llama2.c layout of stories260K (D 64, L 5, Hkv*Dh 32, V 512):
// embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, ...
constexpr int64_t kD = 64, kL = 5, kKv = 32, kV = 512;
constexpr int64_t kWqOffset = kV * kD + kL * kD;
constexpr int64_t kFfnNormOffset = kWqOffset + kL * kD * kD * 2 + kL * kKv * kD * 2;

// ================================================================================================
// Class: configuration values

TEST(ValidateConfig, EveryFieldOutsideItsDomainIsRefusedNamingTheKey) {
  ModelConfig good = test::RandomLlama({}).config;
  EXPECT_EQ(ErrorOf([&] { ValidateConfig(good, "m"); }), "");
  struct Case {
    void (*set)(ModelConfig&);
    const char* key;
  };
  const Case cases[] = {
      {[](ModelConfig& c) { c.norm_eps = std::nanf(""); }, "'norm_eps' is nan"},
      {[](ModelConfig& c) { c.norm_eps = -1e-5f; }, "'norm_eps' is -1e-05"},
      {[](ModelConfig& c) { c.norm_eps = 0; }, "'norm_eps' is 0"},
      {[](ModelConfig& c) { c.rope_theta = 0; }, "'rope_theta' is 0"},
      {[](ModelConfig& c) { c.rope_theta = -10000; }, "'rope_theta'"},
      {[](ModelConfig& c) { c.rope_theta = INFINITY; }, "'rope_theta' is inf"},
      {[](ModelConfig& c) { c.rotary_dim = 3; }, "'rotary_dim'"},
      {[](ModelConfig& c) { c.n_layers = 0; }, "'n_layers'"},
      {[](ModelConfig& c) { c.n_kv_heads = 3; }, "'n_heads' 4 is not a multiple of 'n_kv_heads' 3"},
      {[](ModelConfig& c) { c.final_logit_softcap = std::nanf(""); }, "'final_logit_softcap'"},
      {[](ModelConfig& c) {
         c.rope_scaling = RopeScalingKind::kLinear;
         c.rope_scaling_factor = 0;
       },
       "'rope_scaling_factor'"},
      {[](ModelConfig& c) {
         c.rope_scaling = RopeScalingKind::kLlama3;
         c.rope_original_max_seq_len = 64;
         c.rope_high_freq_factor = c.rope_low_freq_factor;
       },
       "'rope_high_freq_factor'"},
      {[](ModelConfig& c) {
         c.n_experts = 4;
         c.n_experts_per_tok = 5;
       },
       "'n_experts_per_tok'"},
      {[](ModelConfig& c) { c.sliding_window = -1; }, "'sliding_window'"},
  };
  for (const Case& k : cases) {
    ModelConfig c = good;
    k.set(c);
    EXPECT_NE(ErrorOf([&] { ValidateConfig(c, "src.json"); }).find(k.key), std::string::npos)
        << k.key;
  }
  // The reader's key name replaces the field name.
  ModelConfig c = good;
  c.norm_eps = -1;
  EXPECT_NE(ErrorOf([&] {
              ValidateConfig(c, "x/config.json", {{"norm_eps", "rms_norm_eps"}});
            }).find("x/config.json: 'rms_norm_eps' is -1"),
            std::string::npos);
}

TEST(ValidateConfig, ConfigJsonValuesOutsideTheirDomain) {
  const std::string base = R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
    "intermediate_size": 172, "num_hidden_layers": 2, "num_attention_heads": 8,
    "num_key_value_heads": 4, "vocab_size": 512, "max_position_embeddings": 512)";
  EXPECT_EQ(ErrorOf([&] { ParseHfConfig(base + "}", "c/config.json"); }), "");
  struct Case {
    std::string extra, needle;
  };
  const Case cases[] = {
      {R"(, "rms_norm_eps": -1e-5)", "c/config.json: 'rms_norm_eps' is -1e-05"},
      {R"(, "rms_norm_eps": 0)", "'rms_norm_eps' is 0"},
      {R"(, "rms_norm_eps": 1e-60)", "'rms_norm_eps' is 0"},  // underflows the float
      {R"(, "rope_theta": 0)", "c/config.json: 'rope_theta' is 0"},
      {R"(, "rope_theta": -500000)", "'rope_theta' is -500000"},
      {R"(, "rope_theta": 1e39)", "'rope_theta' is inf"},  // beyond the float range
      {R"(, "final_logit_softcapping": -30)", "'final_logit_softcapping'"},
      {R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 4,
          "high_freq_factor": 1, "original_max_position_embeddings": 64})",
       "'rope_scaling.high_freq_factor'"},
  };
  for (const Case& k : cases)
    EXPECT_NE(ErrorOf([&] { ParseHfConfig(base + k.extra + "}", "c/config.json"); }).find(k.needle),
              std::string::npos)
        << k.extra;
  // GPT-2 names its epsilon differently; the message uses the file's key.
  const std::string gpt2 = R"({"architectures": ["GPT2LMHeadModel"], "n_embd": 64, "n_layer": 2,
    "n_head": 4, "vocab_size": 97, "n_positions": 64, "layer_norm_epsilon": -1})";
  EXPECT_NE(
      ErrorOf([&] { ParseHfConfig(gpt2, "g/config.json"); }).find("'layer_norm_epsilon' is -1"),
      std::string::npos);
}

TEST(ValidateConfig, GgufValuesOutsideTheirDomain) {
  Model model = LoadModel(kStories);
  model.config.norm_eps = std::nanf("");
  std::string path = WriteStoriesGguf("gguf_nan_eps", model);
  EXPECT_NE(
      ErrorOf([&] { LoadModel(path); }).find("'llama.attention.layer_norm_rms_epsilon' is nan"),
      std::string::npos);
  model = LoadModel(kStories);
  model.config.rope_theta = 0;
  path = WriteStoriesGguf("gguf_zero_theta", model);
  EXPECT_NE(ErrorOf([&] { LoadModel(path); }).find("'llama.rope.freq_base' is 0"),
            std::string::npos);
  model = LoadModel(kStories);
  model.config.rope_theta = -10000;
  path = WriteStoriesGguf("gguf_negative_theta", model);
  EXPECT_NE(ErrorOf([&] { LoadModel(path); }).find("'llama.rope.freq_base' is -10000"),
            std::string::npos);
}

TEST(ValidateConfig, StoredLayersMustMatchTheDeclaredCountBothWays) {
  const Model stories = LoadModel(kStories);
  // config.json declares fewer layers than model.safetensors stores: refused, naming the tensor.
  const std::string dir = WriteStoriesHf("hf_layers", stories);
  EXPECT_NO_THROW(LoadModel(dir));
  SetConfigKey(dir, "num_hidden_layers", 3);
  std::string e = ErrorOf([&] { LoadModel(dir); });
  EXPECT_NE(e.find("tensor 'model.layers.3."), std::string::npos) << e;
  EXPECT_NE(e.find("declares 3 layers ('num_hidden_layers')"), std::string::npos) << e;
  // ... and more layers than it stores: a missing tensor.
  SetConfigKey(dir, "num_hidden_layers", 6);
  EXPECT_NE(ErrorOf([&] { LoadModel(dir); }).find("missing tensor 'model.layers.5."),
            std::string::npos);
  // GGUF: block_count below and above the stored blocks.
  const std::string gguf = WriteStoriesGguf("gguf_layers", stories);
  EXPECT_NO_THROW(LoadModel(gguf));
  PatchGgufU32(gguf, "llama.block_count", 4);
  e = ErrorOf([&] { LoadModel(gguf); });
  EXPECT_NE(e.find("tensor 'blk.4."), std::string::npos) << e;
  EXPECT_NE(e.find("('llama.block_count')"), std::string::npos) << e;
  PatchGgufU32(gguf, "llama.block_count", 6);
  EXPECT_NE(ErrorOf([&] { LoadModel(gguf); }).find("missing tensor 'blk.5."), std::string::npos);
}

TEST(ValidateConfig, NonFiniteWeightsAreRefusedAtLoad) {
  // llama2.c: a NaN in layer 2 of wq, named with its layer.
  const std::string bin = StoriesWithFloat("bin_nan", kWqOffset + 2 * kD * kD + 5, std::nanf(""));
  std::string e = ErrorOf([&] { LoadModel(bin); });
  EXPECT_NE(e.find("weight 'wq' holds a non-finite value (nan)"), std::string::npos) << e;
  EXPECT_NE(e.find("in layer 2 at element 5"), std::string::npos) << e;
  // safetensors and GGUF: an Inf in layer 1's down_proj, named by its file name.
  Model model = LoadModel(kStories);
  Tensor w2 = model.weights.layers[1].w2.Copy();
  w2[7] = INFINITY;
  model.weights.layers[1].w2 = w2;
  const std::string dir = WriteStoriesHf("hf_inf", model);
  EXPECT_NE(ErrorOf([&] {
              LoadModel(dir);
            }).find("tensor 'model.layers.1.mlp.down_proj.weight' holds a non-finite value (inf)"),
            std::string::npos);
  const std::string gguf = WriteStoriesGguf("gguf_inf", model);
  EXPECT_NE(
      ErrorOf([&] { LoadModel(gguf); }).find("tensor 'blk.1.ffn_down.weight' holds a non-finite"),
      std::string::npos);
}

TEST(ValidateConfig, NonFiniteActivationsStopTheForwardNamingTheLayer) {
  Model model = test::RandomLlama({});
  const std::vector<int> tokens = {1, 5, 9, 13, 17, 21};
  auto run = [&](LogitsMode mode) {
    KVCache cache = KVCache::CreateSingleUse(model.config, static_cast<int>(tokens.size()));
    RunState state;
    ForwardRequest req;
    req.tokens = tokens;
    req.logits = mode;
    Forward(model, cache, state, req);
  };
  EXPECT_EQ(ErrorOf([&] { run(LogitsMode::kAll); }), "");
  // A NaN weight in layer 1's attention output projection (in memory: no load-time scan).
  Tensor wo = model.weights.layers[1].wo.Copy();
  wo[3] = std::nanf("");
  model.weights.layers[1].wo = wo;
  for (LogitsMode mode : {LogitsMode::kAll, LogitsMode::kLast, LogitsMode::kNone}) {
    const std::string e = ErrorOf([&] { run(mode); });
    EXPECT_NE(e.find("non-finite"), std::string::npos) << e;
    EXPECT_NE(e.find("blocks.1.hook_attn_out"), std::string::npos) << e;
  }
  // Finite weights that overflow: an MLP norm weight of 3e38 in block 0 makes its input Inf, and
  // the MLP output is the first activation that shows it.
  model = test::RandomLlama({});
  Tensor norm = model.weights.layers[0].ffn_norm.Copy();
  norm.Fill(3e38f);
  model.weights.layers[0].ffn_norm = norm;
  EXPECT_NE(ErrorOf([&] { run(LogitsMode::kLast); }).find("blocks.0.hook_mlp_out"),
            std::string::npos);
}

TEST(ValidateConfig, TrainConfigRefusesDuplicateKeysAndNonIntegers) {
  const std::string dir = test::TempDir("validate_train_config");
  auto load = [&](const std::string& text) {
    WriteFileAtomic(dir + "/c.json", text);
    return ErrorOf([&] {
      train::TrainConfig c = train::LoadTrainConfig(dir + "/c.json");
      c.Validate(dir + "/c.json");
    });
  };
  EXPECT_EQ(load(R"({"preset": "quick", "steps": 10})"), "");
  EXPECT_NE(load(R"({"steps": 10, "steps": 20})").find("duplicate key 'steps'"), std::string::npos);
  EXPECT_NE(load(R"({"steps": 2.5})").find("'steps' must be an integer"), std::string::npos);
  EXPECT_NE(load(R"({"seed": -1})").find("'seed' must be an integer"), std::string::npos);
  EXPECT_NE(load(R"({"dim": 1e10})").find("'dim' must be an integer"), std::string::npos);
  EXPECT_NE(load(R"({"norm_eps": -1e-5})").find("'norm_eps' is -1e-05"), std::string::npos);
  EXPECT_NE(load(R"({"rope_theta": 0})").find("'rope_theta' is 0"), std::string::npos);
  train::TrainConfig c;
  EXPECT_NE(ErrorOf([&] {
              train::ApplyJson(c, {{"lr", std::nan("")}}, "x");
            }).find("'lr' must be a finite number"),
            std::string::npos);
}

TEST(ValidateConfigCli, BadConfigValuesFailAtLoadNotWithNan) {
  const Model stories = LoadModel(kStories);
  const std::string dir = WriteStoriesHf("cli_theta", stories);
  SetConfigKey(dir, "rope_theta", 0);
  ExpectCliError("ppl --model " + dir + " --prompt 'Once upon a time'",
                 {"config.json: 'rope_theta' is 0"});
  SetConfigKey(dir, "rope_theta", 10000);
  SetConfigKey(dir, "rms_norm_eps", -1e-5);
  ExpectCliError("explain --model " + dir + " --samples 1 --length 16",
                 {"'rms_norm_eps' is -1e-05"});
  SetConfigKey(dir, "rms_norm_eps", 1e-5);
  SetConfigKey(dir, "num_hidden_layers", 4);
  ExpectCliError("analyze --model " + dir + " --samples 1 --length 16",
                 {"'model.layers.4.", "('num_hidden_layers')"});

  Model nan_eps = stories;
  nan_eps.config.norm_eps = std::nanf("");
  ExpectCliError("ppl --model " + WriteStoriesGguf("cli_gguf_nan", nan_eps) + " --prompt 'Once'",
                 {"'llama.attention.layer_norm_rms_epsilon' is nan"});
  ExpectCliError("ppl --model " + StoriesWithFloat("cli_bin_nan", kWqOffset + 9, std::nanf("")) +
                     " --prompt 'Once'",
                 {"weight 'wq' holds a non-finite value"});
  // Finite weights that overflow in block 2's MLP (its norm weight 3e38): ppl stops instead of
  // printing nan.
  const std::string overflow =
      StoriesWithFloat("cli_bin_overflow", kFfnNormOffset + 2 * kD, 3e38f, kD);
  ExpectCliError("ppl --model " + overflow + " --prompt 'Once upon a time'",
                 {"non-finite", "blocks.2.hook_mlp_out"}, /*one_line=*/false);
  ExpectCliError("explain --model " + overflow + " --samples 1 --length 16",
                 {"non-finite", "blocks.2."}, /*one_line=*/false);

  const std::string tdir = test::TempDir("validate_cli_train");
  WriteFileAtomic(tdir + "/dup.json", R"({"preset": "quick", "steps": 5, "steps": 6})");
  ExpectCliError("train --config " + tdir + "/dup.json --out " + tdir + "/run",
                 {"duplicate key 'steps'"});
  WriteFileAtomic(tdir + "/frac.json", R"({"preset": "quick", "steps": 2.5})");
  ExpectCliError("train --config " + tdir + "/frac.json --out " + tdir + "/run",
                 {"'steps' must be an integer"});
}

// ================================================================================================
// Class: flags

TEST(ValidateFlags, LibraryOptionChecksRefuseNan) {
  // explain's options (the library check behind the CLI's): NaN fails every range.
  explain::ExplainOptions o;
  o.eps = std::nan("");
  EXPECT_NE(ErrorOf([&] { explain::CheckOptions(o); }).find("--eps"), std::string::npos);
  o = {};
  o.onset_threshold = 1;  // "rate > 1" can never hold
  EXPECT_NE(ErrorOf([&] { explain::CheckOptions(o); }).find("--onset-threshold"),
            std::string::npos);
  o = {};
  o.share = std::nan("");
  EXPECT_NE(ErrorOf([&] { explain::CheckOptions(o); }).find("--share"), std::string::npos);
}

TEST(ValidateFlags, NumericFlagsAreCheckedForNanAndRange) {
  const std::string m = " --model " + kStories;
  ExpectCliError("generate" + m + " --temperature nan",
                 {"--temperature: expected a number in [0, 100]"});
  ExpectCliError("generate" + m + " --top-p nan", {"--top-p: expected a number in (0, 1]"});
  ExpectCliError("generate" + m + " --top-p -0.5", {"--top-p"});
  ExpectCliError("generate" + m + " --steps 0", {"--steps"});
  ExpectCliError("chat" + m + " --temperature inf", {"--temperature"});

  const std::string dir = test::TempDir("validate_flags_train");
  const std::string train = "train --preset quick --out " + dir + "/run";
  ExpectCliError(train + " --steps -5", {"--steps: expected an integer in [1,", "got -5"});
  ExpectCliError(train + " --steps 0", {"--steps"});
  ExpectCliError(train + " --lr -0.001", {"--lr"});
  ExpectCliError(train + " --lr nan", {"--lr", "got nan"});
  ExpectCliError(train + " --seed -1", {"--seed"});
  ExpectCliError(train + " --threads -2", {"--threads"});
  ExpectCliError(train + " --batch 0", {"--batch"});
  EXPECT_FALSE(fs::exists(dir + "/run"));
}

TEST(ValidateFlags, SharedOptionsHaveOneDomainInEveryVerb) {
  const std::string m = " --model " + kStories;
  const std::vector<std::string> verbs = {"analyze" + m, "explain" + m,
                                          "trace --checkpoints " + kStories};
  for (const std::string& v : verbs) {
    ExpectCliError(v + " --length 3", {"--length: expected an integer in [4,"});
    ExpectCliError(v + " --samples 0", {"--samples: expected an integer in [1,"});
    ExpectCliError(v + " --eps nan", {"--eps: expected a threshold in (0, 1], got nan"});
    ExpectCliError(v + " --text /nonexistent/x.txt", {"/nonexistent/x.txt"});
  }
  // The layer thresholds: one domain, under either verb's name.
  for (const std::string& v : {"explain" + m + " --onset-threshold",
                               "trace --checkpoints " + kStories + " --onset-rate"}) {
    ExpectCliError(v + " 1", {"--onset-threshold: expected a sink rate in (0, 1), got 1"});
    ExpectCliError(v + " 0", {"--onset-threshold"});
    ExpectCliError(v + " nan", {"--onset-threshold"});
  }
  ExpectCliError("trace --checkpoints " + kStories + " --amplification-ratio nan",
                 {"--amplification-threshold"});
  // --length against the context: trace checks it as analyze and explain do (stories: 512).
  ExpectCliError("analyze" + m + " --length 600", {"--length: T = 600 exceeds"});
  ExpectCliError("explain" + m + " --length 600", {"--length: T = 600 exceeds"});
  const std::string run = test::TempDir("validate_trace_run");
  fs::copy_file(kStories, run + "/step-100.bin", fs::copy_options::overwrite_existing);
  fs::copy_file(kTokenizer, run + "/tok512.bin", fs::copy_options::overwrite_existing);
  ExpectCliError("trace --checkpoints " + run + "/step-100.bin --length 600 --samples 1 --no-cache",
                 {"--length: T = 600 exceeds"}, /*one_line=*/false);
}

// --seed: one domain, [0, 2^64 - 1], in every verb that has it; CLI11 alone would read -1 as
// 18446744073709551615 and write that to the report.
TEST(ValidateFlags, SeedIsANonNegative64BitIntegerInEveryVerb) {
  const std::string m = " --model " + kStories;
  // Each runs one small sample if the seed got through, so a regression fails fast.
  const std::vector<std::string> verbs = {
      "analyze" + m + " --conditions bos --samples 1 --length 8",
      "explain" + m + " --samples 1 --length 8 --intervention-samples 1",
      "trace --checkpoints " + kStories + " --samples 1 --length 8 --no-cache",
      "generate" + m + " --steps 4",
      "chat" + m + " < /dev/null",
      "train --preset quick --steps 1 --out " + test::TempDir("validate_seed_train") + "/run"};
  const std::string domain = "--seed: expected an integer in [0, 18446744073709551615], got ";
  for (const std::string& v : verbs) {
    ExpectCliError(v + " --seed -1", {domain + "-1"});
    ExpectCliError(v + " --seed 18446744073709551616", {domain + "18446744073709551616"});
    ExpectCliError(v + " --seed 1.5", {domain + "1.5"});
    ExpectCliError(v + " --seed +7", {domain + "+7"});
    ExpectCliError(v + " --seed 0x10", {domain + "0x10"});
  }
  // The largest seed runs and is reported as given.
  const std::string json = test::TempDir("validate_seed") + "/analyze.json";
  const test::CliResult r = test::RunCli("analyze" + m +
                                         " --conditions bos --samples 1 --length 8 "
                                         "--seed 18446744073709551615 --json " +
                                         json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(ReadFile(json))["settings"]["seed"].get<uint64_t>(), UINT64_MAX);
}

// --threads: the same domain on every verb, in train's flag and config (0 there: the default),
// and in the Python module's set_threads (python/tests): 1 to kMaxThreads, an error outside it.
TEST(ValidateFlags, ThreadCountsHaveOneDomainEverywhere) {
  const std::string m = " --model " + kStories;
  const std::string domain =
      "--threads: expected a thread count in [1, " + std::to_string(kMaxThreads) + "], got ";
  for (const std::string& v : {"inspect" + m, "ppl" + m + " --prompt hi", "analyze" + m}) {
    ExpectCliError(v + " --threads " + std::to_string(kMaxThreads + 1),
                   {domain + std::to_string(kMaxThreads + 1)});
    ExpectCliError(v + " --threads 0", {domain + "0"});
    ExpectCliError(v + " --threads -3", {domain + "-3"});
    ExpectCliError(v + " --threads 100000000000", {domain + "100000000000"});
  }
  // Inside the domain, a count the OpenBLAS in use cannot run (Debian's is built for 64) is refused
  // naming its limit, not lowered without a word; the limit itself runs.
  test::CliResult r = test::RunCli("inspect" + m + " --threads " + std::to_string(kMaxThreads));
  std::smatch limit;
  if (r.code != 0) {
    EXPECT_EQ(r.code, 1) << r.err;
    const std::string prefix = "--threads: " + std::to_string(kMaxThreads) +
                               " threads asked, but the OpenBLAS in use runs at most ";
    ASSERT_TRUE(std::regex_search(r.err, limit, std::regex(prefix + "([0-9]+) \\(OpenBLAS")))
        << r.err;
    r = test::RunCli("inspect" + m + " --threads " + limit[1].str());
  }
  EXPECT_EQ(r.code, 0) << r.err;
  const std::string run = test::TempDir("validate_threads_train") + "/run";
  ExpectCliError(
      "train --preset quick --out " + run + " --threads " + std::to_string(kMaxThreads + 1),
      {"--threads: expected an integer in [0, " + std::to_string(kMaxThreads) + "]"});
  train::TrainConfig c = train::Preset("quick");
  nlohmann::json j = {{"threads", kMaxThreads + 1}};
  EXPECT_NE(ErrorOf([&] {
              train::ApplyJson(c, j, "config.json");
              c.Validate("config.json");
            }).find("threads must be in [0, " + std::to_string(kMaxThreads) + "]"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(run));
  EXPECT_NE(ErrorOf([] { CheckThreadCount("threads", kMaxThreads + 1); }).find("threads: expected"),
            std::string::npos);
  EXPECT_EQ(ErrorOf([] { CheckThreadCount("threads", kMaxThreads); }), "");
}

// ================================================================================================
// Class: messages

TEST(ValidateMessages, BytesThatWouldCutOrGarbleAMessageAreEscaped) {
  using namespace std::string_literals;
  EXPECT_EQ(Printable("ab\0cd"s), "ab\\x00cd");
  EXPECT_EQ(Printable("tab\there\x1b[31m\x7f"), "tab\\x09here\\x1b[31m\\x7f");
  EXPECT_EQ(Printable("line\nnext\ttab", /*keep_layout=*/true), "line\nnext\ttab");
  // Valid UTF-8 stays; stray, truncated, overlong and surrogate sequences are bytes.
  EXPECT_EQ(Printable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(Printable("\xff\xc3 \xc0\xaf \xed\xa0\x80"), "\\xff\\xc3 \\xc0\\xaf \\xed\\xa0\\x80");
  EXPECT_EQ(PrintableExcerpt("abcdef", 4), "abcd...");
  EXPECT_EQ(PrintableExcerpt("abcd", 4), "abcd");
  // Every ss::Error carries its message whole through what().
  const Error e("found 'x\0y' in a file"s);
  EXPECT_EQ(std::string(e.what()), "found 'x\\x00y' in a file");
  // Escaping twice changes nothing.
  EXPECT_EQ(Error(Printable("\x01")).what(), std::string("\\x01"));
}

// Token ids of a --tokens file: an id beyond the vocabulary is named as it was written, however
// many digits it has; a malformed item is quoted with its odd bytes escaped (a NUL used to end
// the message there).
TEST(ValidateMessages, TokenIdsAreQuotedAsWritten) {
  using namespace std::string_literals;
  auto parse = [](const std::string& text) { return ParseTokenIds(text, "ids.txt", 512); };
  EXPECT_EQ(parse("1 0000000000000000000007 511\n"), (std::vector<int>{1, 7, 511}));
  auto error = [&](const std::string& text) { return ErrorOf([&] { parse(text); }); };
  EXPECT_NE(error("1 9223372036854775813")
                .find("line 1: token id 9223372036854775813 is outside the model's vocabulary "
                      "[0, 512)"),
            std::string::npos);
  EXPECT_NE(
      error("3\n18446744073709551621").find("line 2: token id 18446744073709551621 is outside"),
      std::string::npos);
  EXPECT_NE(error(std::string(60, '9')).find("token id " + std::string(40, '9') + "... is outside"),
            std::string::npos);
  EXPECT_NE(error("12\n5 ab\0cd 7"s)
                .find("line 2: 'ab\\x00cd' is not a token id (expected non-negative integers"),
            std::string::npos);
  // Through the CLI: the whole message reaches stderr.
  const std::string dir = test::TempDir("validate_token_ids");
  WriteFileAtomic(dir + "/nul.txt", "1 2\n3 x\0y 4\n"s);
  WriteFileAtomic(dir + "/big.txt", "1 9223372036854775813\n");
  for (const char* verb : {"analyze", "stream"}) {
    ExpectCliError(std::string(verb) + " --model " + kStories + " --tokens " + dir + "/nul.txt",
                   {"--tokens " + dir +
                    "/nul.txt: line 2: 'x\\x00y' is not a token id (expected "
                    "non-negative integers separated by whitespace)"},
                   /*one_line=*/false);
    ExpectCliError(std::string(verb) + " --model " + kStories + " --tokens " + dir + "/big.txt",
                   {"line 1: token id 9223372036854775813 is outside the model's vocabulary"},
                   /*one_line=*/false);
  }
}

// ================================================================================================
// Class: hangs

// Runs the CLI with `args`; if it has not finished after 20 s (blocked opening `fifo`), opens the
// FIFO's write end once so that the blocked open returns: the test then fails instead of hanging.
test::CliResult RunCliWithFifoWatchdog(const std::string& args, const std::string& fifo) {
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    while (!done) {
      const int fd = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  const auto start = std::chrono::steady_clock::now();
  test::CliResult r = test::RunCli(args);
  done = true;
  watchdog.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15)) << args;
  return r;
}

std::string MakeFifo(const std::string& path) {
  fs::remove(path);
  EXPECT_EQ(mkfifo(path.c_str(), 0600), 0) << path << ": " << std::strerror(errno);
  return path;
}

TEST(ValidateHangs, FifosAndDevicesAreRefusedWithoutBlocking) {
  const std::string dir = test::TempDir("validate_fifo");
  const std::string fifo = MakeFifo(dir + "/model.bin");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_NE(
      ErrorOf([&] { LoadModel(fifo); }).find("is a FIFO (named pipe), expected a regular file"),
      std::string::npos);
  EXPECT_NE(ErrorOf([&] { ReadFile(fifo); }).find("FIFO"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { MapFile(fifo); }).find("FIFO"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { ReadInputFile("/dev/zero", "--text"); }).find("a character device"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { ReadFile(dir); }).find("is a directory"), std::string::npos);
  // A Hugging Face directory whose weights are a FIFO.
  const std::string hf = WriteStoriesHf("fifo_hf", LoadModel(kStories));
  fs::remove(hf + "/model.safetensors");
  MakeFifo(hf + "/model.safetensors");
  EXPECT_NE(ErrorOf([&] { LoadModel(hf); }).find("model.safetensors: is a FIFO"),
            std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(ValidateHangs, SizesAreCheckedBeforeReadingOrAllocating) {
  // An input text over the cap fails from its stat size (a sparse file: nothing is written).
  const std::string big = test::TempDir("validate_big") + "/big.txt";
  {
    const int fd = open(big.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, static_cast<off_t>(kMaxInputTextBytes) + 1), 0);
    close(fd);
  }
  EXPECT_NE(ErrorOf([&] {
              ReadInputFile(big, "--text");
            }).find("the file is 67108865 bytes, more than the 64 MiB"),
            std::string::npos);
  EXPECT_EQ(ErrorOf([&] { ReadInputFile(kTokenizer, "--text"); }), "");
  // Memory: an impossible request names both figures.
  const std::string e = ErrorOf([&] { CheckMemory(uint64_t{1} << 62, "--samples 7"); });
  EXPECT_NE(e.find("--samples 7: needs 4.0 EiB of memory, but only "), std::string::npos) << e;
  EXPECT_GT(AvailableMemoryBytes(), 0u);
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
}

TEST(ValidateHangsCli, FifoModelsAndInputsFailFast) {
  const std::string dir = test::TempDir("validate_fifo_cli");
  const std::string fifo = MakeFifo(dir + "/model.bin");
  test::CliResult r = RunCliWithFifoWatchdog("ppl --model " + fifo + " --prompt 'Once'", fifo);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("is a FIFO"), std::string::npos) << r.err;
  r = RunCliWithFifoWatchdog("tokenize --model " + fifo + " --prompt 'Once'", fifo);
  EXPECT_NE(r.err.find("is a FIFO"), std::string::npos) << r.err;
  const std::string hf = WriteStoriesHf("fifo_hf_cli", LoadModel(kStories));
  fs::remove(hf + "/model.safetensors");
  const std::string weights = MakeFifo(hf + "/model.safetensors");
  r = RunCliWithFifoWatchdog("analyze --model " + hf + " --samples 1 --length 16", weights);
  EXPECT_NE(r.err.find("model.safetensors: is a FIFO"), std::string::npos) << r.err;
  const std::string text = MakeFifo(dir + "/text.txt");
  r = RunCliWithFifoWatchdog("analyze --model " + kStories + " --text " + text, text);
  EXPECT_NE(r.err.find("text.txt: is a FIFO"), std::string::npos) << r.err;
  r = RunCliWithFifoWatchdog("stream --model " + kStories + " --text " + text, text);
  EXPECT_NE(r.err.find("text.txt: is a FIFO"), std::string::npos) << r.err;
}

TEST(ValidateHangsCli, AbsurdSizesAreRefusedWithTheFigure) {
  const std::string m = " --model " + kStories;
  const auto start = std::chrono::steady_clock::now();
  ExpectCliError(
      "analyze" + m + " --samples 2000000000",
      {"--samples 2000000000 x --length 64 x 4 conditions: needs", "of memory, but only"});
  ExpectCliError("explain" + m + " --samples 2000000000",
                 {"--samples 2000000000 x --length 64: needs"});
  ExpectCliError("analyze" + m + " --length 100000000 --allow-long-context",
                 {"--length 100000000", "of memory, but only"});
  ExpectCliError("analyze" + m + " --text /dev/zero", {"/dev/zero: is a character device"});
  ExpectCliError("ppl" + m + " --text /dev/zero", {"/dev/zero: is a character device"});
  ExpectCliError("stream" + m + " --tokens /dev/zero", {"/dev/zero: is a character device"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

}  // namespace
}  // namespace ss
