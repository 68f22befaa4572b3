// The `sinkscope analyze` command as users run it: the built binary, its exit codes, its one-line
// errors for bad input (and that nothing is written then), and the HTML report in headless
// Chromium.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "naive_hf.h"
#include "test_util.h"

namespace ss {
namespace {

namespace fs = std::filesystem;

const std::string kBinary = std::string(SINKSCOPE_BINARY_DIR) + "/src/cli/sinkscope";
const std::string kModel = test::RepoPath("models/stories260K/stories260K.bin");

struct Result {
  int code = -1;
  std::string output;  // stdout and stderr together
};

Result RunCli(const std::string& args) {
  Result r;
  std::FILE* p = popen((kBinary + " " + args + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class AnalyzeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("sinkscope_analyze_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    // A token stream of 700 ids (stories260K's vocabulary is 512; 3..258 are byte fallbacks).
    std::ofstream out(Path("tokens.txt"));
    for (int i = 0; i < 700; ++i) out << 259 + (i * 37) % 253 << (i % 20 == 19 ? "\n" : " ");
    std::ofstream short_out(Path("short.txt"));
    for (int i = 0; i < 30; ++i) short_out << 300 + i << " ";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::string Base() const {
    return "analyze --model " + kModel + " --tokens " + Path("tokens.txt");
  }

  // A bad input: exit code 1, one line "sinkscope: error: ..." containing `expected`, no outputs.
  void ExpectError(const std::string& args, const std::string& expected) {
    const std::string json = Path("out.json"), html = Path("out.html");
    Result r = RunCli(args + " --json " + json + " --html " + html);
    EXPECT_EQ(r.code, 1) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("sinkscope: error: "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(expected), std::string::npos) << "expected '" << expected << "' in\n"
                                                          << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_FALSE(fs::exists(json)) << args;
    EXPECT_FALSE(fs::exists(html)) << args;
    for (const auto& e : fs::directory_iterator(dir_))
      EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }

  fs::path dir_;
};

TEST_F(AnalyzeCli, BadInputGivesOneLineErrorsAndNoFiles) {
  ExpectError(Base() + " --conditions bos,nobos", "--conditions: unknown condition 'nobos'");
  ExpectError(Base() + " --conditions bos,bos", "listed twice");
  ExpectError(Base() + " --eps 0", "--eps: expected a threshold in (0, 1]");
  ExpectError(Base() + " --eps 1.5", "--eps: expected a threshold in (0, 1]");
  ExpectError(Base() + " --eps nan", "--eps");
  ExpectError(Base() + " --length 600", "T = 600 exceeds the model's trained context of 512");
  ExpectError("analyze --model " + kModel + " --tokens " + Path("short.txt"),
              "30 tokens, fewer than the sample length T = 64");
  ExpectError("analyze --model " + kModel + " --prompt ''", "--prompt: the prompt is empty");
  std::ofstream(Path("short_text.txt")) << "Once upon a time.";
  ExpectError("analyze --model " + kModel + " --text " + Path("short_text.txt"),
              "fewer than the sample length T = 64");
  ExpectError("analyze --model " + kModel + " --text " + Path("no_such.txt"), "no_such.txt");
  ExpectError(Base() + " --patterns 9:0", "--patterns: layer 9");
  ExpectError(Base() + " --samples 0", "--samples");
  ExpectError(Base() + " --first-k 0", "--first-k");
  ExpectError("analyze --model " + Path("missing.bin") + " --tokens " + Path("tokens.txt"),
              "missing.bin");
  // An unwritable output path fails before any work, and the other output is not written either.
  Result r = RunCli(Base() + " --json " + Path("out.json") + " --html /nonexistent_dir/x.html");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("--html"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("/nonexistent_dir/x.html"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(Path("out.json")));
  r = RunCli(Base() + " --json /nonexistent_dir/x.json");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("--json"), std::string::npos) << r.output;
}

TEST_F(AnalyzeCli, DefaultTextRuns) {
  Result r = RunCli("analyze --model " + kModel + " --samples 2 --length 32 --conditions no-bos");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("default text"), std::string::npos) << r.output;
}

TEST_F(AnalyzeCli, LongContextNeedsTheFlag) {
  Result r =
      RunCli(Base() + " --length 600 --samples 1 --conditions bos --allow-long-context --json " +
             Path("long.json"));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("beyond the trained context"), std::string::npos) << r.output;
  std::ifstream in(Path("long.json"));
  ASSERT_TRUE(in);
  EXPECT_EQ(nlohmann::json::parse(in)["conditions"][0]["length"], 600);
}

// The acceptance check: with --prompt and one sample, alpha_0, alpha_1 and the P0 norm
// ratios equal the float64 reference (which tokenised the same text, with BOS or without).
TEST_F(AnalyzeCli, PromptMatchesTheFloat64Reference) {
  for (const char* name : {"lily_bos", "cat_nobos", "park_bos"}) {
    std::ifstream ref_in(test::RepoPath(std::string("tests/data/reference/") + name + ".json"));
    nlohmann::json ref = nlohmann::json::parse(ref_in);
    const std::string condition = ref["bos"].get<bool>() ? "bos" : "no-bos";
    const std::string out = Path(std::string(name) + ".json");
    std::ofstream(Path("prompt.txt")) << ref["text"].get<std::string>();
    // The prompt goes through a file and $(cat) so that the shell does not touch its punctuation.
    Result r = RunCli("analyze --model " + kModel + " --prompt \"$(cat " + Path("prompt.txt") +
                      ")\" --conditions " + condition + " --first-k 2 --json " + out);
    ASSERT_EQ(r.code, 0) << r.output;
    std::ifstream in(out);
    nlohmann::json c = nlohmann::json::parse(in)["conditions"][0];
    EXPECT_EQ(c["length"], ref["tokens"].size()) << name;
    auto flat = [](const nlohmann::json& m) {
      std::vector<float> v;
      for (const auto& row : m)
        for (float x : row) v.push_back(x);
      return v;
    };
    EXPECT_LT(
        test::MaxDiff(flat(c["alpha"][0]), flat(ref["alpha0"]), std::string(name) + " cli alpha0"),
        1e-4);
    EXPECT_LT(
        test::MaxDiff(flat(c["alpha"][1]), flat(ref["alpha1"]), std::string(name) + " cli alpha1"),
        1e-4);
    EXPECT_LT(test::MaxDiff(c["p0_norm_ratio_per_layer"].get<std::vector<float>>(),
                            ref["p0_norm_ratio_per_layer"].get<std::vector<float>>(),
                            std::string(name) + " cli p0 norm ratio"),
              1e-4);
    EXPECT_EQ(c["sink_rate_per_layer"][0].get<std::vector<float>>(),
              ref["sink0_rate_eps0.3_per_layer"].get<std::vector<float>>());
  }
}

// Renders `html` to a PNG with headless Chromium; returns the PNG's size in bytes (0 on failure).
int64_t Screenshot(const std::string& chromium, const std::string& html, const std::string& png,
                   const std::string& profile) {
  const std::string cmd =
      "timeout 120 " + chromium +
      " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
      "--disable-background-networking --disable-component-update --disable-sync "
      "--user-data-dir=" +
      profile + " --screenshot=" + png + " --window-size=1200,2000 file://" + html +
      " > /dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0 || !fs::exists(png)) return 0;
  return static_cast<int64_t>(fs::file_size(png));
}

TEST_F(AnalyzeCli, WritesJsonAndHtmlThatChromiumRenders) {
  const std::string json = Path("a.json"), html = Path("a.html");
  Result r = RunCli(Base() + " --samples 4 --length 48 --patterns 0:1,4:* --json " + json +
                    " --html " + html);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("Sink_0"), std::string::npos) << r.output;
  std::ifstream in(json);
  nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["schema"], "sinkscope.analyze/1");
  EXPECT_EQ(j["model"]["sha256"],
            "b0a507e7ad0f626624f17112325e66691f9076d622e1d3274d103d00299f2696");
  EXPECT_EQ(j["conditions"].size(), 4u);
  EXPECT_EQ(j["conditions"][0]["patterns"].size(), 9u);
  EXPECT_EQ(j["conditions"][0]["alpha"][0].size(), 5u);

  std::string chromium;
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (fs::exists(c)) chromium = c;
  // scripts/setup.sh installs Chromium, so under CI a missing browser is a failure, not a skip.
  if (chromium.empty() && std::getenv("CI"))
    FAIL() << "chromium is not installed: CI must run this test";
  if (chromium.empty()) GTEST_SKIP() << "chromium is not installed (apt-get install chromium)";
  // The page parses: Chromium's DOM holds the SVG charts and the tables.
  const std::string dom_file = Path("dom.html");
  const std::string dump =
      "timeout 120 " + chromium +
      " --headless --no-sandbox --disable-gpu --user-data-dir=" + Path("profile0") +
      " --dump-dom file://" + html + " > " + dom_file + " 2>/dev/null";
  ASSERT_EQ(std::system(dump.c_str()), 0);
  std::ifstream dom_in(dom_file);
  const std::string dom((std::istreambuf_iterator<char>(dom_in)), std::istreambuf_iterator<char>());
  EXPECT_NE(dom.find("<svg"), std::string::npos);
  EXPECT_NE(dom.find("Massive activations"), std::string::npos);
  // The screenshot is not blank: far larger than the PNG of an empty page of the same size (a
  // uniform page compresses to a few KB; charts and text do not).
  std::ofstream(Path("empty.html")) << "<!DOCTYPE html><html><body></body></html>\n";
  const int64_t empty =
      Screenshot(chromium, Path("empty.html"), Path("empty.png"), Path("profile1"));
  const int64_t page = Screenshot(chromium, html, Path("page.png"), Path("profile2"));
  std::printf("screenshot sizes: empty page %lld bytes, report %lld bytes\n",
              static_cast<long long>(empty), static_cast<long long>(page));
  ASSERT_GT(empty, 0);
  EXPECT_GT(page, 20000);
  EXPECT_GT(page, 5 * empty);
}

// A gpt-oss checkpoint with large learned sink logits, end to end: no BOS id, so the default
// conditions are refused by name (nothing written); without bos the JSON and the summary report
// the sink slot, not position 0. Then the same on the tiny preset of scripts/make_test_model.py
// (BF16, YaRN, 4 layers), when numpy is there to run it.
TEST_F(AnalyzeCli, GptOssReportsTheLearnedSinkSlot) {
  const std::string model = test::WriteRandomHf(test::SmallGptOssConfig(600), 3, "cli_gpt_oss",
                                                test::SetSinkLogits(10.0f));
  const std::string base =
      "analyze --model " + model + " --tokens " + Path("tokens.txt") + " --samples 4 --length 32";
  ExpectError(base, "declares no BOS token");
  const std::string json_path = Path("gpt_oss.json");
  Result r = RunCli(base + " --conditions no-bos,random-p0 --json " + json_path);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(
                "sink carried by (no-bos): the learned sink slot (100 % of heads), not position 0"),
            std::string::npos)
      << r.output;
  // alpha_sink beside alpha_0, per layer and for the heads at both ends of the slot's mass.
  EXPECT_NE(
      r.output.find(
          "layer  alpha_sink no-bos  alpha_0 no-bos  alpha_sink random-p0  alpha_0 random-p0"),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("heads with the most (left) and the least (right) mass on the sink slot"),
            std::string::npos)
      << r.output;
  std::ifstream in(json_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  const auto& c = j["conditions"][0];
  EXPECT_EQ(c["sink_slot"]["rate"], 1.0);
  EXPECT_EQ(c["sink_rate"][0], 0.0);
  EXPECT_EQ(c["layer_window"], nlohmann::json({8, 0}));

  if (std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0)
    GTEST_SKIP() << "python3-numpy is not installed: scripts/make_test_model.py cannot run "
                    "(scripts/setup.sh installs it)";
  const std::string tiny = Path("gpt_oss_tiny");
  ASSERT_EQ(std::system(("/usr/bin/python3 " + test::RepoPath("scripts/make_test_model.py") +
                         " --preset gpt-oss-tiny --sink-logit 4 --out " + tiny + " 2>/dev/null")
                            .c_str()),
            0);
  r = RunCli("analyze --model " + tiny + " --tokens " + Path("tokens.txt") +
             " --samples 4 --length 48 --conditions no-bos --json " + json_path);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("sink carried by (no-bos): the learned sink slot"), std::string::npos)
      << r.output;
}

// Qwen3.5 as the Hub ships it (scripts/make_test_model.py --preset qwen3.5-tiny: image-text
// config, BF16 with F32 A_log and gated norms): analyze names the Gated DeltaNet layers and gives
// them no attention metrics, in the table and in the JSON.
TEST_F(AnalyzeCli, Qwen35ReportsLinearLayersWithoutAnAttentionMap) {
  if (std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0)
    GTEST_SKIP() << "python3-numpy is not installed (scripts/setup.sh installs it)";
  const std::string tiny = Path("qwen35_tiny");
  ASSERT_EQ(std::system(("/usr/bin/python3 " + test::RepoPath("scripts/make_test_model.py") +
                         " --preset qwen3.5-tiny --out " + tiny + " 2>/dev/null")
                            .c_str()),
            0);
  const std::string json_path = Path("qwen35.json");
  const auto r = RunCli("analyze --model " + tiny + " --tokens " + Path("tokens.txt") +
                        " --samples 2 --length 48 --conditions no-bos --json " + json_path);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("Gated DeltaNet layers 0 1 2 (3 of 4)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("linear attention: no attention map"), std::string::npos);
  std::ifstream in(json_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  const auto& c = j["conditions"][0];
  EXPECT_EQ(c["layer_kind"], nlohmann::json({"linear_attention", "linear_attention",
                                             "linear_attention", "attention"}));
  EXPECT_TRUE(c["alpha"][0][0][0].is_null());
  EXPECT_TRUE(c["alpha"][0][3][0].is_number());
  EXPECT_TRUE(c["p0_norm_ratio_per_layer"][0].is_number());
}

}  // namespace
}  // namespace ss
