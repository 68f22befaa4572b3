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
  const auto r = test::RunCli("explain --model " + kModel + " --samples 3 --length 32 "
                              "--intervention-samples 1 --json " + json + " --html " + html);
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
}

struct BadCase {
  std::string args;
  std::string flag;  // the flag the one-line error must name
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
  };
  for (const BadCase& c : cases) {
    const auto r = test::RunCli("explain --model " + kModel + " --samples 2 --length 16 --json " +
                                json + " " + c.args);
    EXPECT_NE(r.code, 0) << c.args;
    EXPECT_EQ(Lines(r.err), 1) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.flag), std::string::npos) << c.args << ": " << r.err;
    EXPECT_FALSE(fs::exists(json)) << c.args << " left " << json;
  }
}

}  // namespace
}  // namespace ss
