// End-to-end tests of the sinkscope binary: outputs, exit codes, and one clear error line for
// each kind of bad input.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/file_util.h"
#include "test_util.h"

namespace ss {
namespace {

using test::CliResult;
using test::RunCli;

std::string TempDir() { return test::TempDir("cli"); }

const std::string kModel = test::RepoPath("models/stories260K/stories260K.bin");

TEST(Cli, GenerateGreedyStory) {
  CliResult r = RunCli("generate --model " + kModel + " --temperature 0 --steps 256");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("Once upon a time, there was a little girl named Lily.", 0), 0u) << r.out;
  EXPECT_EQ(r.out.find("loaded"), std::string::npos);  // logs stay on stderr
  EXPECT_NE(r.err.find("generated"), std::string::npos);
  // The cache policy's default, as chat's and stream's (cli/options.h): 4 sinks + 252 recent
  // tokens, which 256 steps fill without evicting, so the text is the dense cache's.
  EXPECT_NE(r.err.find("with the sinks cache"), std::string::npos) << r.err;
  CliResult dense =
      RunCli("generate --model " + kModel + " --temperature 0 --steps 256 --policy dense");
  ASSERT_EQ(dense.code, 0) << dense.err;
  EXPECT_EQ(dense.out, r.out);
  EXPECT_EQ(dense.err.find("cache"), std::string::npos) << dense.err;
}

TEST(Cli, TokenizeAndInspect) {
  CliResult r = RunCli("tokenize --model " + kModel +
                       " --prompt 'Once upon a time, there was a little girl named Lily.'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "1 403 407 261 378 432 383 286 261 376 298 315 421 395 317 426\n");
  r = RunCli("inspect --model " + kModel);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("parameters    260032"), std::string::npos) << r.out;
}

TEST(Cli, PplJsonMatchesReference) {
  std::string json = TempDir() + "/ppl.json";
  CliResult r =
      RunCli("ppl --model " + kModel +
             " --prompt 'Once upon a time, there was a little girl named Lily.' --json " + json);
  ASSERT_EQ(r.code, 0) << r.err;
  std::string doc = ReadFile(json);
  EXPECT_NE(doc.find("\"mean_nll\": 0.10013"), std::string::npos) << doc;  // reference 0.1001373
  EXPECT_NE(r.out.find("perplexity  1.105"), std::string::npos) << r.out;
}

TEST(Cli, VocabularyOnlyGguf) {
  std::string vocab = test::RepoPath("tests/data/tokenizers/ggml-vocab-gpt-2.gguf");
  CliResult r = RunCli("tokenize --model " + vocab + " --no-bos --prompt 'Hello world'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "15496 995\n");
}

void ExpectError(const std::string& args, const std::string& needle) {
  CliResult r = RunCli(args);
  EXPECT_NE(r.code, 0) << args;
  EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\nstderr: " << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  // One line, not a stack trace or a crash.
  EXPECT_LE(std::count(r.err.begin(), r.err.end(), '\n'), 3) << r.err;
}

TEST(Cli, BadInputGivesOneClearLine) {
  std::string dir = TempDir();
  ExpectError("inspect --model " + dir + "/missing.bin", "missing.bin: no such file");
  std::string truncated = dir + "/truncated.bin";
  std::string bytes = ReadFile(kModel);
  WriteFileAtomic(truncated, std::string_view(bytes).substr(0, 500000));
  ExpectError("inspect --model " + truncated, "truncated");
  std::string garbage = dir + "/garbage.bin";
  WriteFileAtomic(garbage, std::string(100, 'x'));
  ExpectError("inspect --model " + garbage, "garbage.bin");
  ExpectError("generate --model " + kModel + " --tokenizer " +
                  test::RepoPath("tests/data/tokenizers/ggml-vocab-gpt-2.gguf"),
              "50257 tokens but model");
  ExpectError("tokenize --model " + kModel + " --prompt \"$(printf '\\377\\376')\"",
              "not valid UTF-8");
  ExpectError("generate --model " + kModel + " --bogus-flag", "bogus-flag");
  ExpectError("ppl --model " + kModel + " --prompt ''", "empty");
  ExpectError("ppl --model " + kModel + " --prompt hi --json /nonexistent-dir/x.json",
              "/nonexistent-dir");
  std::string big = dir + "/big.txt";
  std::string words;
  for (int i = 0; i < 400; ++i) words += "hello world ";
  WriteFileAtomic(big, words);
  ExpectError("ppl --model " + kModel + " --text " + big, "context of 512");
  std::string lonely = dir + "/lonely";
  std::filesystem::create_directories(lonely);
  std::filesystem::copy_file(kModel, lonely + "/m.bin",
                             std::filesystem::copy_options::overwrite_existing);
  ExpectError("generate --model " + lonely + "/m.bin", "no tokenizer found");
}

// stories260K converted by the CLI to every format: inspect, tokenize, ppl and generate give the
// same answers as on the llama2.c file.
TEST(Cli, ConvertThenEveryVerbWorksOnEveryFormat) {
  const std::string dir = TempDir() + "/convert";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string hf = dir + "/stories-hf", gguf = dir + "/stories.gguf",
                    q8 = dir + "/stories-q8.gguf";
  CliResult r = RunCli("convert --model " + kModel + " --to hf --out " + hf);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"})
    EXPECT_TRUE(std::filesystem::exists(hf + "/" + f)) << f;
  r = RunCli("convert --model " + hf + " --to gguf --out " + gguf);
  ASSERT_EQ(r.code, 0) << r.err;
  r = RunCli("convert --model " + kModel + " --to gguf --type q8_0 --out " + q8);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string prompt = "'Once upon a time, there was a little girl named Lily.'";
  for (const std::string& m : {hf, gguf, q8}) {
    r = RunCli("tokenize --model " + m + " --prompt " + prompt);
    ASSERT_EQ(r.code, 0) << m << r.err;
    EXPECT_EQ(r.out, "1 403 407 261 378 432 383 286 261 376 298 315 421 395 317 426\n") << m;
    r = RunCli("inspect --model " + m);
    ASSERT_EQ(r.code, 0) << m << r.err;
    EXPECT_NE(r.out.find("parameters    260032"), std::string::npos) << m << r.out;
    EXPECT_NE(r.out.find("architecture  llama"), std::string::npos) << m << r.out;
    r = RunCli("generate --model " + m + " --temperature 0 --steps 40");
    ASSERT_EQ(r.code, 0) << m << r.err;
    EXPECT_EQ(r.out.rfind("Once upon a time, there was a little girl named Lily.", 0), 0u)
        << m << r.out;
  }
  for (const std::string& m : {hf, gguf}) {
    r = RunCli("ppl --model " + m + " --prompt " + prompt);
    ASSERT_EQ(r.code, 0) << m << r.err;
    EXPECT_NE(r.out.find("mean NLL    0.10013"), std::string::npos)
        << m << r.out;  // llama2.c: 0.100137
  }
}

TEST(Cli, ConvertBadInput) {
  const std::string dir = TempDir() + "/convert_bad";
  std::filesystem::create_directories(dir);
  ExpectError("convert --model " + kModel + " --to gguf --type q5_k --out " + dir + "/x.gguf",
              "--type");
  ExpectError("convert --model " + kModel + " --to hf --type q8_0 --out " + dir + "/x",
              "--type q8_0");
  ExpectError("convert --model " + kModel + " --to gguf --out /nonexistent-dir/x.gguf",
              "/nonexistent-dir");
  ExpectError("convert --model " + kModel + " --to hf --out " + dir, "already exists");
  ExpectError("convert --model " + kModel + " --to onnx --out " + dir + "/y", "onnx");
}

}  // namespace
}  // namespace ss
