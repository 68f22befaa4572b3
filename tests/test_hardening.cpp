// Bad input that once crashed the binary or gave silent wrong numbers (docs/GUARANTEES.md): each
// reproduction now gets one clear line naming the flag or file, a non-zero exit and nothing
// written; and the number parsers, the norms and the mapped files they came from, one by one.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/options.h"
#include "cli/verbs.h"
#include "common/error.h"
#include "common/file_util.h"
#include "io/hf_config.h"
#include "io/load.h"
#include "io/safetensors.h"
#include "kernels/ops.h"
#include "stream/stream.h"
#include "test_util.h"

namespace ss {
namespace {

namespace fs = std::filesystem;
using test::CliResult;
using test::RunCli;

const std::string kModel = test::RepoPath("models/stories260K/stories260K.bin");

// One line on stderr, nothing on stdout, a non-zero exit that is not a signal, and `needles` in
// the message.
void ExpectOneLineError(const std::string& args, const std::vector<std::string>& needles) {
  const CliResult r = RunCli(args);
  // 1 for bad input a verb finds, 2 for a flag the parser refuses; never a signal.
  EXPECT_TRUE(r.code == 1 || r.code == 2) << args << " exited " << r.code << "\n" << r.err;
  EXPECT_TRUE(r.out.empty()) << args << "\n" << r.out;
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
  for (const std::string& n : needles)
    EXPECT_NE(r.err.find(n), std::string::npos) << args << "\nstderr: " << r.err;
  // The message itself, after the logs of what ran before it: one line.
  const size_t at = r.err.find("error");
  ASSERT_NE(at, std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin() + at, r.err.end(), '\n'), 1) << r.err;
}

TEST(Hardening, APromptShorterThanKInOneConditionIsAnError) {
  // "hi there" is 4 tokens with BOS and 3 without; K = 4 is the default.
  ExpectOneLineError("analyze --model " + kModel + " --prompt 'hi there'",
                     {"--first-k", "K = 4", "3 tokens", "no-bos"});
  // K within the shortest condition: it runs.
  const CliResult r = RunCli("analyze --model " + kModel + " --prompt 'hi there' --first-k 3");
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST(Hardening, IntegerFlagsAreDecimalOnly) {
  const std::string analyze = "analyze --model " + kModel + " --conditions bos ";
  for (const char* flag : {"--length 0x20", "--samples ' 5'", "--samples '5 '", "--samples 1e1",
                           "--first-k +0x3", "--samples 0b11"})
    ExpectOneLineError(analyze + flag, {std::string(flag).substr(0, std::string(flag).find(' ')),
                                        "expected a decimal integer"});
  ExpectOneLineError("stream --model " + kModel + " --window 0x100", {"--window", "'0x100'"});
  ExpectOneLineError("explain --model " + kModel + " --verify-top 0x10", {"--verify-top"});
  ExpectOneLineError("serve --model " + kModel + " --port 0x50", {"--port", "'0x50'"});
  // A leading zero is decimal: 010 is ten samples (strtoll's octal made it 8), 0100000 a port
  // beyond 65535 (octal 32768 was a port).
  ExpectOneLineError("serve --model " + kModel + " --port 0100000", {"--port", "100000"});
  CliResult r = RunCli(analyze + "--samples 010 --length 016");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("10 sample(s) per condition of T = 16 tokens"), std::string::npos) << r.out;
  ExpectOneLineError(analyze + "--eps 0x1p-2", {"--eps", "expected a decimal number"});
  r = RunCli(analyze + "--samples 2 --length 16 --eps 0.25 --first-k 2");
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST(Hardening, DecimalCheck) {
  for (const char* ok : {"0", "7", "-3", "+3", "123456"})
    EXPECT_EQ(cli::CheckDecimal(ok, true, false), "") << ok;
  for (const char* bad : {"", "010x", "0x10", " 5", "5 ", "1e3", "--5", "5-", "1.5", "\t1"})
    EXPECT_NE(cli::CheckDecimal(bad, true, false), "") << bad;
  EXPECT_NE(cli::CheckDecimal("-3", true, /*is_unsigned=*/true), "");
  for (const char* ok : {"0.5", "1e-3", "-2.5E+2", ".5", "inf", "nan"})
    EXPECT_EQ(cli::CheckDecimal(ok, false, false), "") << ok;
  for (const char* bad : {"0x1p3", " 0.5", "0.5 ", "e", "infinity", "1,5"})
    EXPECT_NE(cli::CheckDecimal(bad, false, false), "") << bad;
}

TEST(Hardening, EmptyValuesAreRefusedByName) {
  const std::string stream = "stream --model " + kModel + " --text " +
                             test::RepoPath("data/default_text.txt") + " --max-tokens 64 ";
  ExpectOneLineError("ppl --model " + kModel + " --prompt 'Once upon a time' --json ''",
                     {"--json", "empty"});
  // A name the file system cannot hold is refused before the work, naming the flag.
  const CliResult r = RunCli("ppl --model " + kModel + " --prompt 'Once upon a time' --json /tmp/" +
                             std::string(300, 'n') + ".json");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("at most 255"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("loaded"), std::string::npos) << r.err;  // before the model loads
  ExpectOneLineError(stream + "--kv-type-k ''", {"--kv-type-k", "empty"});
  ExpectOneLineError(stream + "--kv-type q8_0 --kv-keep ''", {"--kv-keep", "empty"});
  ExpectOneLineError(stream + "--compare-kv ''", {"--compare-kv", "empty"});
  ExpectOneLineError(stream + "--compare-kv q8_0,,q4_0", {"--compare-kv", "empty item"});
  ExpectOneLineError(stream + "--compare-kv q8_0,", {"--compare-kv", "empty item"});
  ExpectOneLineError("inspect --model ''", {"--model", "empty"});
}

TEST(Hardening, KvFlagsNameThemselves) {
  const std::string stream = "stream --model " + kModel + " --text " +
                             test::RepoPath("data/default_text.txt") + " --max-tokens 64 ";
  ExpectOneLineError(stream + "--kv-type q8_0 --kv-keep first:1000000000",
                     {"--kv-keep", "first:1000000000", "more entries"});
  ExpectOneLineError(stream + "--kv-type q8_0 --kv-keep first:010", {"--kv-keep", "decimal"});
  ExpectOneLineError(stream + "--kv-type-v q8_0 --policy recompute", {"--kv-type-v"});
  ExpectOneLineError(stream + "--compare-kv q8_0,q4_0 --policy recompute", {"--compare-kv"});
  // 5,000 copies of one type are one run; 17 different ones are refused.
  std::string copies = "q8_0";
  for (int i = 1; i < 5000; ++i) copies += ",q8_0";
  const CliResult r = RunCli(stream + "--compare-kv " + copies);
  EXPECT_EQ(r.code, 0) << r.err.substr(0, 400);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 4) << r.out;  // header, rule, f32, q8_0
  std::string many = "q8_0";
  for (int i = 1; i <= cli::kMaxKvConfigs; ++i) many += fmt::format(",q8_0+first:{}", i);
  ExpectOneLineError(stream + "--compare-kv " + many, {"--compare-kv", "more than 16"});
}

TEST(Hardening, PathsThatCannotBeReachedAreNamed) {
  const std::string dir = test::TempDir("hardening_paths");
  const std::string loop = dir + "/loop";
  fs::create_symlink(loop, loop);  // a link to itself
  ExpectOneLineError("inspect --model " + loop, {loop, "too many levels of symbolic links"});
  const std::string long_name(5000, 'a');
  ExpectOneLineError("inspect --model " + dir + "/" + long_name, {"name too long"});
}

TEST(Hardening, FilesystemErrorsAreOneLine) {
  const std::string dir = test::TempDir("hardening_fs");
  const std::string file = dir + "/afile";
  std::ofstream(file) << "x";
  // train --out under a regular file, a dangling link, a name too long: refused before training.
  for (const std::string& out :
       {file + "/sub", dir + "/dangling", dir + "/" + std::string(5000, 'b')}) {
    if (out == dir + "/dangling") fs::create_symlink(dir + "/nowhere/at/all", out);
    ExpectOneLineError("train --preset quick --steps 2 --out " + out, {"--out"});
  }
  // trace over a directory that holds a symlink loop: named, not an uncaught exception.
  const std::string ckpts = dir + "/ckpts";
  fs::create_directories(ckpts);
  fs::create_symlink(ckpts + "/loop", ckpts + "/loop");
  fs::create_symlink(ckpts + "/x.gguf", ckpts + "/x.gguf");
  ExpectOneLineError("trace --checkpoints " + ckpts, {ckpts + "/", "too many levels"});
  ExpectOneLineError("trace --twins " + ckpts + "," + dir, {ckpts + "/", "too many levels"});
  // convert --out through a symlink loop.
  const std::string loop = dir + "/outloop";
  fs::create_symlink(loop, loop);
  ExpectOneLineError("convert --model " + kModel + " --to hf --out " + loop, {"--out"});
  EXPECT_TRUE(fs::is_symlink(loop));
}

TEST(Hardening, NormsOfHugeFiniteRowsStayFinite) {
  // |x| = 1e19 in every lane: the float sum of squares is Inf, which made the scale 0 and the row
  // zeros. The row's norm is taken in double: x / rms(x) = 1 in every lane.
  const int D = 64;
  std::vector<float> x(2 * D), w(D, 1.0f), out(2 * D);
  for (int i = 0; i < D; ++i) {
    x[i] = (i % 2 ? -1 : 1) * 1e19f;
    x[D + i] = 0.01f * (i + 1);  // an ordinary row keeps the float path's bits
  }
  RmsNorm(x.data(), w.data(), out.data(), 2, D, 1e-5f, 0.0f);
  for (int i = 0; i < D; ++i) EXPECT_NEAR(out[i], i % 2 ? -1.0 : 1.0, 1e-6) << i;
  float ss = 0;
  for (int i = 0; i < D; ++i) ss += x[D + i] * x[D + i];
  const float scale = 1.0f / std::sqrt(ss / D + 1e-5f);
  for (int i = 0; i < D; ++i) EXPECT_EQ(out[D + i], x[D + i] * scale * 1.0f) << i;
  std::vector<float> b(D, 0.0f);
  for (int i = 0; i < D; ++i) x[i] = (i % 2 ? -3e38f : 3e38f);
  LayerNorm(x.data(), w.data(), b.data(), out.data(), 1, D, 1e-5f);
  for (int i = 0; i < D; ++i) EXPECT_NEAR(out[i], i % 2 ? -1.0 : 1.0, 1e-5) << i;
}

TEST(Hardening, ATruncatedMappingIsAnErrorNamingTheFile) {
  const std::string path = test::TempDir("hardening_map") + "/weights.bin";
  std::ofstream(path) << std::string(1 << 16, 'x');
  EXPECT_EXIT(
      {
        const auto map = MapFile(path);
        if (truncate(path.c_str(), 0) != 0) std::abort();
        volatile uint8_t sink = map->data[1 << 15];  // past the end of the file now: SIGBUS
        (void)sink;
        std::exit(0);
      },
      ::testing::ExitedWithCode(1), "weights.bin: the file was truncated or overwritten");
  // The check a long-lived process makes before each request sees the change.
  std::ofstream(path) << std::string(1 << 16, 'y');
  const auto map = MapFile(path);
  CheckMappedFilesUnchanged();
  std::ofstream(path, std::ios::app) << "more";
  try {
    CheckMappedFilesUnchanged();
    ADD_FAILURE() << "a grown file passed the check";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("weights.bin: the file changed on disk"),
              std::string::npos)
        << e.what();
  }
}

TEST(Hardening, AssertionsThrowWhereAProcessMustSurvive) {
  SetAssertionsThrow(true);
  EXPECT_THROW(SS_ASSERT(1 + 1 == 3), InternalError);
  SetAssertionsThrow(false);
  EXPECT_DEATH(SS_ASSERT(1 + 1 == 3), "assertion failed");
}

TEST(Hardening, SmallerHolesInConfigsAndIndexes) {
  // gpt-oss's two names for k, when both are given, must agree.
  const std::string both = R"({"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
    "hidden_size": 64, "intermediate_size": 64, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "vocab_size": 512,
    "num_local_experts": 4, "max_position_embeddings": 256, "sliding_window": 128,
    "experts_per_token": 2, "num_experts_per_tok": XX})";
  std::string agree = both, disagree = both;
  agree.replace(agree.find("XX"), 2, "2");
  disagree.replace(disagree.find("XX"), 2, "3");
  EXPECT_EQ(ParseHfConfig(agree, "a/config.json").n_experts_per_tok, 2);
  try {
    ParseHfConfig(disagree, "d/config.json");
    ADD_FAILURE() << "disagreeing expert counts were taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'experts_per_token' is 2 but num_experts_per_tok is 3"),
              std::string::npos)
        << e.what();
  }
  // A NUL inside a shard's name in the index names another file where the system reads it.
  const std::string dir = test::TempDir("hardening_index");
  std::ofstream(dir + "/model.safetensors.index.json")
      << R"({"weight_map": {"w": "model.safetensors\u0000.evil"}})";
  try {
    SafetensorsDir::Open(dir);
    ADD_FAILURE() << "a NUL in a shard name was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("plain file name"), std::string::npos) << e.what();
  }
}

TEST(Hardening, TrainingAndDetectionNeedEnoughTokens) {
  ExpectOneLineError("train --preset quick --steps 1 --seq-len 1 --out " +
                         test::TempDir("hardening_train") + "/run",
                     {"'seq_len' must be at least 2"});
  // Two tokens: query 1 sees two keys, so key 0 holds half of an even spread; that is no sink.
  const Model model = LoadModel(kModel);
  EXPECT_TRUE(stream::DetectSinkPositions(model, std::vector<int>{1, 200}).empty());
  const CliResult r = RunCli("generate --model " + kModel +
                             " --prompt 'Once' --steps 2 --kv-type q8_0 --kv-keep detected");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("too few to tell a sink"), std::string::npos) << r.err;
}

TEST(Hardening, PathsThatAreNotUtf8StillGiveJson) {
  // A model directory whose name is not UTF-8: the JSON report names it with U+FFFD, not an
  // exception from the JSON writer.
  const std::string dir = test::TempDir("hardening_utf8") + "/m\xe9";
  fs::create_directories(dir);
  fs::copy_file(kModel, dir + "/stories260K.bin");
  fs::copy_file(test::RepoPath("models/stories260K/tok512.bin"), dir + "/tok512.bin");
  const std::string json = test::TempDir("hardening_utf8") + "/ppl.json";
  const CliResult r = RunCli("ppl --model '" + dir +
                             "/stories260K.bin' --prompt 'Once upon a time' --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(ReadFile(json).find("m\xef\xbf\xbd"), std::string::npos);
}

}  // namespace
}  // namespace ss
