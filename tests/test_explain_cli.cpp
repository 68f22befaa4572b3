// The `sinkscope explain` command as users run it: the verdict on stories260K (no sink), the JSON
// schema, and one-line errors with a non-zero exit and no output file for bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "test_util.h"

namespace ss {
namespace {

namespace fs = std::filesystem;

const std::string kModel = test::RepoPath("models/stories260K/stories260K.bin");

int Lines(const std::string& s) {
  int n = 0;
  for (char ch : s) n += ch == '\n';
  return n;
}

TEST(ExplainCli, Stories260KSaysNoSink) {
  const std::string dir = test::TempDir("explain_cli");
  const std::string json = dir + "/e.json", html = dir + "/e.html";
  const auto r = test::RunCli("explain --model " + kModel +
                              " --samples 3 --length 32 "
                              "--intervention-samples 1 --json " +
                              json + " --html " + html);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("verdict: no-sink"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(ReadFile(json));
  EXPECT_EQ(j["schema"], "sinkscope.explain/1");
  EXPECT_EQ(j["verdict"], "no-sink");
  EXPECT_EQ(j["layers"].size(), 5u);
  EXPECT_EQ(j["cones"].size(), 5u * 8u);
  EXPECT_TRUE(j["circuit"]["components"].empty());
  const std::string page = ReadFile(html);
  EXPECT_NE(page.find("<svg"), std::string::npos);
  EXPECT_NE(page.find("Cone model"), std::string::npos);
  // The fast path by default: 5 layers x 8 heads give 2 L + L H + L - 1 = 54 estimated rows, of
  // which the best 16 are measured; each row says which it is.
  const auto& es = j["estimates"];
  EXPECT_EQ(es["verify"], "top");
  EXPECT_EQ(es["candidates"], 54);
  EXPECT_EQ(es["verified"], 16);
  EXPECT_TRUE(es["spearman"].contains("target_share"));
  int estimated = 0, measured = 0, only_estimated = 0;
  for (const auto& e : j["interventions"]) {
    const bool exact = e["method"] == "exact";
    EXPECT_TRUE(exact || e["method"] == "p0-recompute") << e.dump();
    EXPECT_EQ(e["measured"].is_null(), !exact) << e.dump();
    estimated += !e["estimate"].is_null();
    measured += !e["estimate"].is_null() && exact;
    only_estimated += !exact;
    if (!exact) {
      EXPECT_EQ(e["removed_share"], e["estimate"]["removed_share"]) << e.dump();
    }
  }
  EXPECT_EQ(estimated, 54);
  EXPECT_EQ(measured, 16);
  EXPECT_EQ(only_estimated, 54 - 16);
  EXPECT_NE(r.out.find("Spearman"), std::string::npos) << r.out;
  EXPECT_NE(page.find("p0-recompute"), std::string::npos);
}

TEST(ExplainCli, ExhaustiveMeasuresEveryRow) {
  const std::string dir = test::TempDir("explain_cli_exhaustive");
  const std::string json = dir + "/e.json";
  const auto r = test::RunCli("explain --model " + kModel +
                              " --samples 2 --length 16 "
                              "--intervention-samples 1 --exhaustive --json " +
                              json);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(ReadFile(json));
  EXPECT_EQ(j["estimates"]["verify"], "all");
  EXPECT_EQ(j["estimates"]["verified"], 54);
  EXPECT_EQ(j["settings"]["verify"], "all");
  for (const auto& e : j["interventions"]) {
    EXPECT_EQ(e["method"], "exact") << e.dump();
    EXPECT_FALSE(e["measured"].is_null()) << e.dump();
  }
}

struct BadCase {
  std::string args;
  std::string flag;  // the flag the one-line error must name
  bool one_line = true;
};

TEST(ExplainCli, BadInputFailsCleanly) {
  const std::string dir = test::TempDir("explain_cli_bad");
  const std::string json = dir + "/never.json";
  const std::vector<BadCase> cases = {
      {"--share 1.5", "--share"},
      {"--share 0", "--share"},
      {"--ablation half", "--ablation: expected mean or zero"},
      {"--onset-threshold 0", "--onset-threshold"},
      {"--onset-threshold 2", "--onset-threshold"},
      {"--eps -1", "--eps"},
      {"--amplification-threshold 0", "--amplification-threshold"},
      {"--ablate mlp.9", "--ablate"},
      {"--ablate head.0.8", "--ablate"},
      {"--ablate attn.0", "--ablate"},
      {"--conditions bos,no-bos", "--conditions"},
      {"--html /nonexistent_dir_xyz/e.html", "--html"},
      {"--verify-top 0", "--verify-top"},
      {"--verify-top -2", "--verify-top"},
      {"--verify-top many", "--verify-top"},
      {"--exhaustive --verify-top 4", "--verify-top"},
  };
  for (const BadCase& c : cases) {
    const auto r = test::RunCli("explain --model " + kModel + " --samples 2 --length 16 --json " +
                                json + " " + c.args);
    EXPECT_NE(r.code, 0) << c.args;
    if (c.one_line) {
      EXPECT_EQ(Lines(r.err), 1) << c.args << ": " << r.err;
    }
    EXPECT_NE(r.err.find(c.flag), std::string::npos) << c.args << ": " << r.err;
    EXPECT_FALSE(fs::exists(json)) << c.args << " left " << json;
  }
}

}  // namespace
}  // namespace ss
