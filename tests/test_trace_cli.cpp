// `sinkscope trace` as users run it, on real trainer checkpoints (a few steps of the quick preset,
// written by `sinkscope train`): report contents and order, the cache on re-runs, and bad input
// (no checkpoints, mixed architectures / tokenizers, a corrupted checkpoint, no readable step).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/sha256.h"
#include "test_util.h"

namespace ss {
namespace {

namespace fs = std::filesystem;

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

class TraceCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    run_ = new std::string(test::TempDir("trace_cli_run"));
    // 6 steps of the quick preset with a checkpoint every 2: step-2, step-4, step-6.
    const auto r = test::RunCli(
        "train --preset quick --steps 6 --checkpoint-every 2 --eval-every 6 "
        "--threads 1 --out " +
        *run_);
    ASSERT_EQ(r.code, 0) << r.err;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*run_);
    delete run_;
  }
  // A copy of the run to damage.
  std::string CopyRun(const std::string& tag) {
    const std::string dir = test::TempDir(tag);
    fs::remove_all(dir);
    fs::create_directories(dir);
    for (const char* s : {"step-2", "step-4", "step-6"})
      fs::copy(*run_ + "/" + s, dir + "/" + s, fs::copy_options::recursive);
    return dir;
  }
  static std::string* run_;
  const std::string kFlags = " --samples 2 --length 16 --no-cache";
};
std::string* TraceCli::run_ = nullptr;

TEST_F(TraceCli, ReportOrderedByStepAndCacheOnRerun) {
  const std::string dir = CopyRun("trace_cli_ok");
  const std::string json = dir + "/trace.json", html = dir + "/trace.html";
  auto r = test::RunCli("trace --checkpoints " + dir + " --samples 2 --length 16 --json " + json +
                        " --html " + html);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("stage"), std::string::npos) << r.out;
  const nlohmann::json doc = ReadJson(json);
  EXPECT_EQ(doc["schema"], "sinkscope.trace/1");
  ASSERT_EQ(doc["checkpoints"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const auto& c = doc["checkpoints"][i];
    EXPECT_EQ(c["step"], 2 * (i + 1));
    EXPECT_EQ(c["path"], dir + "/step-" + std::to_string(2 * (i + 1)));
    EXPECT_TRUE(c["loss"].is_number());
    EXPECT_GT(c["loss"].get<double>(), 0.0);
    EXPECT_TRUE(c["stage"] == "none" || c["stage"] == "early" || c["stage"] == "transitional" ||
                c["stage"] == "converged");
    EXPECT_EQ(c["profile"]["sink_rate"].size(), 2u);
    EXPECT_EQ(c["onset_layer"], c["profile"]["onset_layer"]);
  }
  std::ifstream hin(html);
  const std::string page((std::istreambuf_iterator<char>(hin)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("<svg"), std::string::npos);
  EXPECT_NE(page.find("Sink rate per layer"), std::string::npos);

  // Re-run: every checkpoint comes from the cache and the report is identical.
  const std::string json2 = dir + "/trace2.json";
  r = test::RunCli("trace --checkpoints " + dir + " --samples 2 --length 16 --json " + json2);
  ASSERT_EQ(r.code, 0) << r.err;
  size_t cached = 0;
  for (size_t p = r.err.find("cached"); p != std::string::npos; p = r.err.find("cached", p + 1))
    ++cached;
  EXPECT_EQ(cached, 3u) << r.err;
  EXPECT_EQ(ReadJson(json2)["checkpoints"], doc["checkpoints"]);
  // Other settings are not served from the cache.
  r = test::RunCli("trace --checkpoints " + dir + " --samples 3 --length 16");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find("cached"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST_F(TraceCli, NoCheckpoints) {
  const std::string dir = test::TempDir("trace_cli_empty");
  fs::create_directories(dir);
  const auto r = test::RunCli("trace --checkpoints " + dir);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("no checkpoints"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST_F(TraceCli, CorruptedCheckpointSkippedAndReported) {
  const std::string dir = CopyRun("trace_cli_corrupt");
  std::ofstream(dir + "/step-4/model.safetensors", std::ios::trunc) << "not a safetensors file";
  const std::string json = dir + "/t.json";
  auto r = test::RunCli("trace --checkpoints " + dir + kFlags + " --json " + json);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("1 of 3 checkpoints failed"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("FAILED step 4"), std::string::npos) << r.out;
  nlohmann::json doc = ReadJson(json);  // the report of the others is still written
  ASSERT_EQ(doc["checkpoints"].size(), 2u);
  EXPECT_EQ(doc["checkpoints"][0]["step"], 2);
  EXPECT_EQ(doc["checkpoints"][1]["step"], 6);
  ASSERT_EQ(doc["failed"].size(), 1u);
  EXPECT_NE(doc["failed"][0]["error"].get<std::string>().find("model.safetensors"),
            std::string::npos);
  r = test::RunCli("trace --checkpoints " + dir + kFlags + " --keep-going");
  EXPECT_EQ(r.code, 0) << r.err;
  fs::remove_all(dir);
}

TEST_F(TraceCli, MixedArchitecturesAndTokenizers) {
  std::string dir = CopyRun("trace_cli_mixed_arch");
  {
    const std::string cfg = dir + "/step-4/config.json";
    nlohmann::json j = ReadJson(cfg);
    j["num_hidden_layers"] = 3;
    std::ofstream(cfg) << j.dump();
  }
  auto r = test::RunCli("trace --checkpoints " + dir + kFlags);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("mixed architectures"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("step-4"), std::string::npos) << r.err;
  fs::remove_all(dir);

  dir = CopyRun("trace_cli_mixed_tok");
  std::ofstream(dir + "/step-6/tokenizer.model") << "some other tokenizer";
  r = test::RunCli("trace --checkpoints " + dir + kFlags);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("mixed tokenizers"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST_F(TraceCli, CheckpointWithoutStep) {
  const std::string dir = CopyRun("trace_cli_nostep");
  fs::rename(dir + "/step-6", dir + "/final");
  fs::remove(dir + "/final/trainer_state.json");
  const auto r = test::RunCli("trace --checkpoints " + dir + kFlags);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("final: no readable step"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST_F(TraceCli, ListOfPathsAndBadOutputPath) {
  auto r = test::RunCli("trace --checkpoints " + *run_ + "/step-6 " + *run_ + "/step-2" + kFlags +
                        " --json /nonexistent-dir/x.json");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--json"), std::string::npos) << r.err;
  const std::string json = test::TempDir("trace_cli_list") + ".json";
  r = test::RunCli("trace --checkpoints " + *run_ + "/step-6 " + *run_ + "/step-2" + kFlags +
                   " --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto doc = ReadJson(json);
  ASSERT_EQ(doc["checkpoints"].size(), 2u);
  EXPECT_EQ(doc["checkpoints"][0]["step"], 2);
  fs::remove(json);
}

// The text path: windows of the shipped default text through the shipped stories260K (llama2.c
// files given as a list, steps from the names). The model has no P0 sink
// (shared/data/reference/README.md), so both are `none`, and two copies of the same weights must
// give the same profile.
TEST_F(TraceCli, TextSamplesOnLlama2cFiles) {
  const std::string dir = test::TempDir("trace_cli_text");
  for (const char* name : {"step-1.bin", "step-2.bin"})
    fs::copy_file(test::RepoPath("models/stories260K/stories260K.bin"), dir + "/" + name,
                  fs::copy_options::overwrite_existing);
  const std::string json = dir + "/t.json";
  const auto r = test::RunCli(
      "trace --checkpoints " + dir + "/step-2.bin " + dir + "/step-1.bin --tokenizer " +
      test::RepoPath("models/stories260K/tok512.bin") + " --samples 4 --length 32 --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  // The built-in default text is data/default_text.txt, byte for byte (its hash names it).
  const std::string hash = Sha256File(test::RepoPath("data/default_text.txt")).substr(0, 16);
  EXPECT_NE(r.err.find("text default text sha256=" + hash), std::string::npos) << r.err;
  const auto doc = ReadJson(json);
  ASSERT_EQ(doc["checkpoints"].size(), 2u);
  EXPECT_EQ(doc["checkpoints"][0]["step"], 1);
  EXPECT_EQ(doc["checkpoints"][0]["stage"], "none");
  EXPECT_EQ(doc["checkpoints"][0]["profile"], doc["checkpoints"][1]["profile"]);
  // A trained model: far below the ln 512 = 6.24 of a uniform guess.
  EXPECT_LT(doc["checkpoints"][0]["loss"].get<double>(), 4.0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ss
