// `sinkscope stream` and `sinkscope chat` end to end: outputs complete or absent, clear errors for
// bad input, clean exit at end of input in chat.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/file_util.h"
#include "naive_hf.h"
#include "test_util.h"

namespace ss {
namespace {

namespace fs = std::filesystem;

const std::string kBinary = std::string(SINKSCOPE_BINARY_DIR) + "/src/cli/sinkscope";
const std::string kModel = test::RepoPath("models/stories260K/stories260K.bin");

struct Result {
  int code;
  std::string out, err;
};

std::string Dir() {
  auto dir = fs::temp_directory_path() / ("sinkscope_stream_cli_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir.string();
}

Result RunCli(const std::string& args, const std::string& stdin_text = "") {
  const std::string d = Dir();
  WriteFileAtomic(d + "/stdin.txt", stdin_text);
  const std::string cmd = "OMP_NUM_THREADS=1 " + kBinary + " " + args + " < " + d +
                          "/stdin.txt > " + d + "/out.txt 2> " + d + "/err.txt";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadFile(d + "/out.txt"),
          ReadFile(d + "/err.txt")};
}

std::string Text(const std::string& name, const std::string& contents) {
  const std::string path = Dir() + "/" + name;
  WriteFileAtomic(path, contents);
  return path;
}

const char* kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
    "One day, she saw a big red ball under a tree. She ran to the ball and kicked it high.";

TEST(StreamCli, CompareWritesCompleteCsvJsonAndHtml) {
  const std::string d = Dir(), text = Text("story.txt", kStory);
  for (auto f : {"/a.csv", "/a.json", "/a.html"}) fs::remove(d + f);
  Result r = RunCli("stream --model " + kModel + " --text " + text +
                    " --compare window,sinks,recompute --sinks 2 --window 8 --csv " + d +
                    "/a.csv --json " + d + "/a.json --html " + d + "/a.html");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("recompute"), std::string::npos) << r.out;
  nlohmann::json j = nlohmann::json::parse(ReadFile(d + "/a.json"));
  EXPECT_EQ(j["schema"], "sinkscope.stream/1");
  ASSERT_EQ(j["runs"].size(), 3u);
  const int64_t scored = j["runs"][0]["tokens_scored"];
  EXPECT_EQ(scored + 1, j["tokens"].get<int64_t>());
  for (const auto& run : j["runs"]) {
    EXPECT_GT(run["perplexity"].get<double>(), 1.0);
    EXPECT_GT(run["peak_kv_cache_bytes"].get<int64_t>(), 0);
    EXPECT_EQ(run["cache_entries"], 10);
  }
  // One header and one row per scored token and policy.
  std::ifstream csv(d + "/a.csv");
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line, "policy,position,token,nll");
  int64_t rows = 0;
  while (std::getline(csv, line)) ++rows;
  EXPECT_EQ(rows, 3 * scored);
  const std::string html = ReadFile(d + "/a.html");
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("recompute (0+10)"), std::string::npos);
}

TEST(StreamCli, SinglePolicyCsvHasThreeColumns) {
  const std::string d = Dir(), text = Text("story.txt", kStory);
  Result r =
      RunCli("stream --model " + kModel + " --text " + text + " --window 16 --csv " + d + "/b.csv");
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream csv(d + "/b.csv");
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line, "position,token,nll");
  std::getline(csv, line);
  EXPECT_EQ(line.rfind("1,", 0), 0u) << line;
}

// Each bad input: exit 1, one clear line, and no output file left behind.
void ExpectFails(const std::string& args, const std::string& message) {
  const std::string d = Dir();
  fs::remove(d + "/bad.csv");
  fs::remove(d + "/bad.json");
  Result r = RunCli(args + " --csv " + d + "/bad.csv --json " + d + "/bad.json");
  EXPECT_EQ(r.code, 1) << args;
  EXPECT_NE(r.err.find(message), std::string::npos) << args << "\nstderr: " << r.err;
  EXPECT_FALSE(fs::exists(d + "/bad.csv")) << args;
  EXPECT_FALSE(fs::exists(d + "/bad.json")) << args;
  for (const auto& e : fs::directory_iterator(d))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

TEST(StreamCli, BadInputGivesClearErrorsAndNoOutputs) {
  const std::string base = "stream --model " + kModel + " --text ";
  const std::string story = Text("story.txt", kStory);
  ExpectFails(base + story + " --sinks 4 --window 600", "exceeds the model's context of 512");
  ExpectFails(base + story + " --sinks 8 --window 4", "--sinks 8 is larger than --window 4");
  ExpectFails(base + story + " --window 0", "--window");
  ExpectFails(base + story + " --sinks -2", "--sinks");
  ExpectFails(base + story + " --policy sink", "--policy");
  ExpectFails(base + story + " --compare window,,bogus", "--compare");
  ExpectFails(base + Text("empty.txt", ""), "empty");
  ExpectFails(base + Text("blank.txt", " \n\n "), "empty");
  ExpectFails(base + Text("bad_utf8.txt", std::string("Once upon a \xff\xfe time")),
              "not valid UTF-8");
  ExpectFails(base + Dir() + "/missing.txt", "missing.txt");
  std::string long_text;
  for (int i = 0; i < 30; ++i) long_text += kStory;
  ExpectFails(base + Text("long.txt", long_text) + " --policy dense",
              "more than the model's context");
  // --force lets S + W exceed the context; the run then completes.
  Result forced = RunCli(base + story + " --sinks 4 --window 600 --force");
  EXPECT_EQ(forced.code, 0) << forced.err;
}

// --compare-kv: the f32 cache and each storage in lockstep, one table and one JSON; the f32 run
// has no divergence, q4_0 takes 0.14x of f32's bytes, and "detected" on a model without a sink
// falls back to first:S and says so.
TEST(StreamCli, CompareKvTableAndJson) {
  const std::string d = Dir(), text = Text("story.txt", kStory);
  fs::remove(d + "/kv.json");
  fs::remove(d + "/kv.html");
  Result r = RunCli("stream --model " + kModel + " --text " + text + " --sinks 2 --window 30 " +
                    "--compare-kv bf16,q8_0,q4_0+first:2,q8_0/q4_0,q4_0+detected --json " + d +
                    "/kv.json --html " + d + "/kv.html");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("mean KL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("q8_0/q4_0"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("no position of the first 30 tokens is a sink"), std::string::npos) << r.err;
  const nlohmann::json j = nlohmann::json::parse(ReadFile(d + "/kv.json"));
  ASSERT_EQ(j["runs"].size(), 6u);
  const auto& ref = j["runs"][0];
  EXPECT_EQ(ref["kv_type_k"], "f32");
  EXPECT_EQ(ref["mean_kl_vs_f32"].get<double>(), 0.0);
  const double f32_bytes = ref["kv_bytes_per_token"].get<double>();
  EXPECT_EQ(f32_bytes, 5 * 2 * 32 * 4);  // stories260K: 5 layers, K and V rows of 32 floats
  EXPECT_EQ(j["runs"][3]["kv_keep"], "first:2");
  EXPECT_LE(j["runs"][3]["kv_bytes_per_token"].get<double>(), 0.3 * f32_bytes);
  EXPECT_EQ(j["runs"][4]["kv_type_k"], "q8_0");
  EXPECT_EQ(j["runs"][4]["kv_type_v"], "q4_0");
  for (size_t i = 1; i < j["runs"].size(); ++i) {
    EXPECT_GT(j["runs"][i]["mean_kl_vs_f32"].get<double>(), 0.0) << i;
    EXPECT_EQ(j["runs"][i]["tokens_scored"], ref["tokens_scored"]);
  }
  EXPECT_TRUE(fs::exists(d + "/kv.html"));
}

// Qwen3.5 (Gated DeltaNet layers 0 and 2, attention in 1 and 3, one kv head of 32): --compare-kv
// runs, and a token's bytes count the two attention layers' keys and values only (the DeltaNet
// layers keep a state of constant size).
TEST(StreamCli, CompareKvOnQwen35CountsTheAttentionLayers) {
  const std::string model = test::WriteRandomHf(R"({"architectures": ["Qwen3_5ForCausalLM"],
    "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 4, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 32, "vocab_size": 512, "max_position_embeddings": 256,
    "partial_rotary_factor": 0.5, "full_attention_interval": 2, "linear_num_key_heads": 1,
    "linear_num_value_heads": 2, "linear_key_head_dim": 8, "linear_value_head_dim": 4})",
                                                5, "stream_cli_qwen35");
  const std::string d = Dir(), text = Text("story.txt", kStory);
  Result r =
      RunCli("stream --model " + model + " --tokenizer " +
             test::RepoPath("models/stories260K/tok512.bin") + " --text " + text +
             " --no-bos --sinks 2 --window 10 --compare-kv bf16,q8_0 --json " + d + "/q35.json");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(ReadFile(d + "/q35.json"));
  ASSERT_EQ(j["runs"].size(), 3u);
  EXPECT_EQ(j["runs"][0]["kv_bytes_per_token"].get<double>(), 2 * 2 * 32 * 4);
  EXPECT_EQ(j["runs"][1]["kv_bytes_per_token"].get<double>(), 2 * 2 * 32 * 2);
  EXPECT_GT(j["runs"][1]["mean_kl_vs_f32"].get<double>(), 0.0);
}

TEST(StreamCli, KvCacheBadInput) {
  const std::string base = "stream --model " + kModel + " --text " + Text("story.txt", kStory);
  ExpectFails(base + " --kv-type q4_k", "--kv-type: expected one of f32, bf16, f16, q8_0, q4_0");
  ExpectFails(base + " --kv-type-v int8", "--kv-type-v");
  ExpectFails(base + " --kv-type q8_0 --kv-keep first:300 --sinks 4 --window 60",
              "more than the cache holds (64)");
  ExpectFails(base + " --kv-type q8_0 --kv-keep some", "--kv-keep: expected none, first:N");
  ExpectFails(base + " --kv-keep first:2", "applies with --kv-type");
  ExpectFails(base + " --kv-type q8_0 --policy recompute", "recompute");
  ExpectFails(base + " --compare-kv q8_0 --kv-type q4_0", "drop --kv-type");
  ExpectFails(base + " --compare-kv q8_0,zz", "--compare-kv");
  // A window of 500M entries (640 GB in f32, 90 GB in q4_0) over a short text: the cache holds
  // what the text fills, so it runs in the memory of a small one.
  for (const char* type : {"f32", "q4_0"}) {
    const std::string d = Dir();
    Result huge = RunCli(base + " --sinks 4 --window 499999996 --force --kv-type " + type +
                         " --json " + d + "/huge.json");
    ASSERT_EQ(huge.code, 0) << huge.err;
    const auto j = nlohmann::json::parse(ReadFile(d + "/huge.json"));
    // At most the first ring, 1,024 entries of 1,280 bytes (f32) after the 4 sinks.
    EXPECT_LE(j["runs"][0]["peak_kv_cache_bytes"].get<int64_t>(), (1024 + 4) * int64_t{1280})
        << type;
  }
  Result chat = RunCli("chat --model " + kModel + " --kv-type q8_0 --kv-keep detected", "hello\n");
  EXPECT_NE(chat.code, 0);
  EXPECT_NE(chat.err.find("first:N"), std::string::npos) << chat.err;
  // generate and chat run on a typed cache.
  Result gen = RunCli("generate --model " + kModel +
                      " --prompt Once --steps 40 --seed 3 --kv-type q4_0 --kv-keep first:4");
  ASSERT_EQ(gen.code, 0) << gen.err;
  EXPECT_NE(gen.err.find("q4_0 keys, q4_0 values"), std::string::npos) << gen.err;
  Result c =
      RunCli("chat --model " + kModel + " --kv-type-k q8_0 --kv-type-v q4_0 --max-reply 8 --seed 1",
             "Once upon a time\n");
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.err.find("q8_0 keys, q4_0 values"), std::string::npos) << c.err;
}

// --tokens streams pre-tokenized ids: the ids `tokenize` prints for the story give exactly the
// figures --text gives; malformed or out-of-vocabulary ids are refused with the line.
TEST(StreamCli, TokenIdsStreamLikeTheText) {
  const std::string d = Dir();
  Result ids = RunCli("tokenize --model " + kModel + " --prompt \"" + std::string(kStory) + "\"");
  ASSERT_EQ(ids.code, 0) << ids.err;
  std::string id_list = ids.out.substr(0, ids.out.find('\n'));  // "1 403 407 ..."
  for (size_t i = 40; i < id_list.size(); i += 40)              // spread over lines, as files are
    if (id_list[i] == ' ') id_list[i] = '\n';
  ASSERT_GT(id_list.size(), 20u) << ids.out;
  const std::string a = d + "/t.json", b = d + "/x.json";
  Result from_ids = RunCli("stream --model " + kModel + " --tokens " + Text("ids.txt", id_list) +
                           " --sinks 2 --window 8 --json " + a);
  ASSERT_EQ(from_ids.code, 0) << from_ids.err;
  Result from_text = RunCli("stream --model " + kModel + " --text " + Text("story.txt", kStory) +
                            " --sinks 2 --window 8 --json " + b);
  ASSERT_EQ(from_text.code, 0) << from_text.err;
  const auto ja = nlohmann::json::parse(ReadFile(a)), jb = nlohmann::json::parse(ReadFile(b));
  EXPECT_EQ(ja["tokens"], jb["tokens"]);
  EXPECT_EQ(ja["runs"][0]["mean_nll"], jb["runs"][0]["mean_nll"]);
  ExpectFails("stream --model " + kModel + " --tokens " + Text("bad1.txt", "1 403 x7 5"),
              "'x7' is not a token id");
  ExpectFails("stream --model " + kModel + " --tokens " + Text("bad2.txt", "1 403\n 99999 5"),
              "line 2: token id 99999 is outside");
  ExpectFails("stream --model " + kModel + " --tokens " + Text("bad3.txt", "1 -4 5"),
              "not a token id");
  ExpectFails("stream --model " + kModel, "--text FILE or --tokens FILE");
}

// `train --write-stream` writes one Bigram-Backcopy sequence: BOS first (the quick preset has
// BOS), ids in the vocabulary, and exactly the preset's 3 triggers obey the copy rule (the token
// after a trigger repeats the token before it) at every occurrence.
TEST(StreamCli, TrainWritesABigramBackcopyStream) {
  const std::string path = Dir() + "/bb.txt";
  Result r = RunCli("train --preset quick --write-stream " + path + " --stream-tokens 4000");
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream in(ReadFile(path));
  std::vector<int> t;
  for (int id; in >> id;) t.push_back(id);
  ASSERT_EQ(t.size(), 4000u);
  EXPECT_EQ(t[0], 0);
  std::map<int, std::pair<int, int>> seen;  // token -> (occurrences, copies obeyed)
  for (size_t i = 1; i + 1 < t.size(); ++i) {
    ASSERT_GE(t[i], 1);
    ASSERT_LT(t[i], 64);
    auto& [n, ok] = seen[t[i]];
    ++n;
    ok += t[i + 1] == t[i - 1];
  }
  int triggers = 0;
  for (const auto& [token, c] : seen) triggers += c.first >= 10 && c.first == c.second;
  EXPECT_EQ(triggers, 3);
  Result text = RunCli("train --preset text --write-stream " + Dir() + "/x.txt");
  EXPECT_EQ(text.code, 1);
  EXPECT_NE(text.err.find("only for data"), std::string::npos) << text.err;
  EXPECT_FALSE(fs::exists(Dir() + "/x.txt"));
}

TEST(StreamCli, ChatStreamsRepliesAndExitsCleanlyAtEndOfInput) {
  Result empty = RunCli("chat --model " + kModel, "");
  EXPECT_EQ(empty.code, 0) << empty.err;
  EXPECT_NE(empty.err.find("end of input"), std::string::npos) << empty.err;
  // Three turns on a 2 + 14 cache: the conversation outgrows the cache and goes on.
  Result r =
      RunCli("chat --model " + kModel + " --sinks 2 --window 14 --temperature 0 --max-reply 24",
             "Once upon a time\nThe cat\n\n");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_GT(r.out.size(), 20u) << r.out;
  size_t turns = 0;
  for (size_t p = r.err.find("[cache "); p != std::string::npos; p = r.err.find("[cache ", p + 1))
    ++turns;
  EXPECT_EQ(turns, 3u) << r.err;
  EXPECT_NE(r.err.find("[cache 16/16 entries"), std::string::npos) << r.err;
  Result bad = RunCli("chat --model " + kModel + " --sinks 300 --window 200", "hi\n");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("--sinks 300 is larger than --window 200"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace ss
