// gpt-oss end to end on small shapes: the harmony chat format (tokenizer/harmony.h) rendered
// against token sequences written out by hand from the format's description (openai/harmony
// docs/format.md), the chat verb's turns in that format, and scripts/make_test_model.py's
// gpt-oss checkpoint in the published layout (MXFP4 experts, shards, quantization_config, the
// harmony tokenizer) read by the loader: the experts decoded by the spec's decoder equal what the
// f32 load holds, native logits equal f32 ones, the tokenizer has the special tokens where the
// script says.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "common/file_util.h"
#include "io/load.h"
#include "io/safetensors.h"
#include "kernels/dequant.h"
#include "model/model.h"
#include "model/precision.h"
#include "mxfp4_spec.h"
#include "naive_hf.h"
#include "test_util.h"
#include "tokenizer/find.h"
#include "tokenizer/harmony.h"
#include "tokenizer/tokenizer.h"

namespace ss {
namespace {

namespace fs = std::filesystem;

// GPT-2's byte-level alphabet (bytes_to_unicode): the printable Latin-1 bytes stand for
// themselves, the others move to U+0100 on, in byte order.
std::string ByteChar(int b) {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    int extra = 0;
    for (int c = 0; c < 256; ++c) {
      const bool keep = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE);
      const int cp = keep ? c : 256 + extra++;
      std::string s;
      if (cp < 0x80) {
        s += static_cast<char>(cp);
      } else {
        s += static_cast<char>(0xC0 | cp >> 6);
        s += static_cast<char>(0x80 | (cp & 0x3F));
      }
      t[c] = s;
    }
    return t;
  }();
  return table[b];
}

// The harmony tokens in o200k_harmony's order from id 199998 (openai/harmony
// src/tiktoken_ext/public_encodings.rs), "" for a reserved id.
const std::vector<std::string> kHarmonyOrder = {"<|startoftext|>",
                                                "<|endoftext|>",
                                                "",
                                                "",
                                                "<|return|>",
                                                "<|constrain|>",
                                                "",
                                                "<|channel|>",
                                                "<|start|>",
                                                "<|end|>",
                                                "<|message|>",
                                                "",
                                                "",
                                                "",
                                                "<|call|>",
                                                ""};

// A tiny byte-level tokenizer.json in gpt-oss's shape: ids 0-255 the bytes in byte order, the
// merges u + s -> 256 "us" and us + e -> 257 "use", then the 16 harmony tokens at 258-273.
constexpr int kTinyVocab = 274;
constexpr int kUs = 256, kUse = 257;
// <|startoftext|> and <|endoftext|> are in the vocabulary but no test writes them.
[[maybe_unused]] constexpr int kStartOfText = 258, kEndOfText = 259, kReturn = 262,
                               kConstrain = 263, kChannel = 265, kStart = 266, kEnd = 267,
                               kMessage = 268, kCall = 272;

std::string TinyHarmonyTokenizerJson() {
  nlohmann::ordered_json vocab;
  for (int b = 0; b < 256; ++b) vocab[ByteChar(b)] = b;
  vocab["us"] = kUs;
  vocab["use"] = kUse;
  nlohmann::json added = nlohmann::json::array();
  for (size_t i = 0; i < kHarmonyOrder.size(); ++i) {
    const std::string text =
        kHarmonyOrder[i].empty() ? fmt::format("<|reserved_{}|>", 199998 + i) : kHarmonyOrder[i];
    added.push_back({{"id", 258 + static_cast<int>(i)}, {"content", text}, {"special", true}});
  }
  std::ifstream in(test::RepoPath("tests/data/tokenizers/o200k_pretokenize.json"));
  const std::string pattern = nlohmann::json::parse(in)["pattern"];
  const nlohmann::json j = {
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", pattern}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"model",
       {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"u s", "us e"}}, {"unk_token", nullptr}}}};
  return j.dump();
}

// The bytes of `s` as token ids of the tiny tokenizer (no merge applies in these texts).
std::vector<int> Bytes(const std::string& s) {
  std::vector<int> out;
  for (unsigned char c : s) out.push_back(c);
  return out;
}

std::vector<int> Cat(std::initializer_list<std::vector<int>> parts) {
  std::vector<int> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(Harmony, SystemAndDeveloperContentAsTheFormatSpellsThem) {
  // docs/format.md's example system message (less its functions line, which only a conversation
  // with function tools has) and its developer message.
  EXPECT_EQ(
      HarmonySystemContent("You are ChatGPT, a large language model trained by OpenAI.", "2024-06",
                           "2025-06-28", "high"),
      "You are ChatGPT, a large language model trained by OpenAI.\n"
      "Knowledge cutoff: 2024-06\n"
      "Current date: 2025-06-28\n"
      "\n"
      "Reasoning: high\n"
      "\n"
      "# Valid channels: analysis, commentary, final. Channel must be included for every message.");
  EXPECT_EQ(HarmonySystemContent("I.", "2024-06", "", "low"),
            "I.\nKnowledge cutoff: 2024-06\n\nReasoning: low\n\n# Valid channels: analysis, "
            "commentary, final. Channel must be included for every message.");
  EXPECT_EQ(HarmonyDeveloperContent("Use a friendly tone."),
            "# Instructions\n\nUse a friendly tone.");
}

// A conversation with every role and an earlier reply in the final channel, then the open
// assistant turn, against the sequence written out by hand: <|start|>{role}[<|channel|>{channel}]
// <|message|>{content}<|end|> per message, "<|start|>assistant" last.
TEST(Harmony, RendersAConversationAsTheHandWrittenTokens) {
  const auto tok = ParseTokenizerJson("harmony.json", TinyHarmonyTokenizerJson());
  const HarmonyTokens t = HarmonyTokens::Find(*tok, "harmony.json");
  EXPECT_EQ(t.start, kStart);
  EXPECT_EQ(t.end, kEnd);
  EXPECT_EQ(t.message, kMessage);
  EXPECT_EQ(t.channel, kChannel);
  EXPECT_EQ(t.return_, kReturn);
  EXPECT_EQ(t.call, kCall);
  EXPECT_EQ(tok->SpecialTokenId("<|constrain|>"), kConstrain);
  EXPECT_EQ(tok->SpecialTokenId("us"), -1);  // an ordinary piece is no special token
  const std::vector<HarmonyMessage> conversation = {{"system", "", "Hi"},
                                                    {"developer", "", "Be."},
                                                    {"user", "", "Hi there"},
                                                    {"assistant", "final", "Yes."},
                                                    {"user", "", "Bye"}};
  const std::vector<int> want = {
      kStart, 's',      'y',  's', 't',      'e',      'm',    kMessage, 'H',  'i',
      kEnd,   kStart,   'd',  'e', 'v',      'e',      'l',    'o',      'p',  'e',
      'r',    kMessage, 'B',  'e', '.',      kEnd,     kStart, kUse,     'r',  kMessage,
      'H',    'i',      ' ',  't', 'h',      'e',      'r',    'e',      kEnd, kStart,
      'a',    's',      's',  'i', 's',      't',      'a',    'n',      't',  kChannel,
      'f',    'i',      'n',  'a', 'l',      kMessage, 'Y',    'e',      's',  '.',
      kEnd,   kStart,   kUse, 'r', kMessage, 'B',      'y',    'e',      kEnd, kStart,
      'a',    's',      's',  'i', 's',      't',      'a',    'n',      't'};
  EXPECT_EQ(RenderHarmony(*tok, t, conversation, /*open_assistant=*/true), want);
  // Without the open turn the last message ends the sequence.
  EXPECT_EQ(RenderHarmony(*tok, t, {{"user", "", "Bye"}}, false),
            Cat({{kStart, kUse, 'r', kMessage}, Bytes("Bye"), {kEnd}}));

  // A tokenizer without the format's tokens is refused naming the token and the file.
  nlohmann::json plain = nlohmann::json::parse(TinyHarmonyTokenizerJson());
  plain["added_tokens"] = nlohmann::json::array();
  const auto no_specials = ParseTokenizerJson("plain.json", plain.dump());
  try {
    HarmonyTokens::Find(*no_specials, "plain.json");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("plain.json: the tokenizer has no special token <|start|>"),
        std::string::npos)
        << e.what();
  }
}

// The reply parser on the format's example output (analysis, then final, ended by <|return|>),
// and the other ways a reply ends.
TEST(Harmony, ReplyParserFollowsChannelsAndStops) {
  const auto tok = ParseTokenizerJson("harmony.json", TinyHarmonyTokenizerJson());
  const HarmonyTokens t = HarmonyTokens::Find(*tok, "harmony.json");
  using Part = HarmonyReplyParser::Part;
  struct Seen {
    std::string analysis, final_text;
    int steps = 0;
    bool ended = false;
  };
  auto run = [&](const std::vector<int>& reply) {
    HarmonyReplyParser parser(t);
    Seen seen;
    for (int token : reply) {
      const std::string text = tok->DecodeToken(-1, token);
      const HarmonyReplyParser::Step step = parser.Feed(token, text);
      ++seen.steps;
      if (step.ends_reply) {
        seen.ended = true;
        break;
      }
      if (step.part != Part::kContent) continue;
      (parser.channel() == "final" ? seen.final_text : seen.analysis) += text;
    }
    return seen;
  };
  // <|channel|>analysis<|message|>Sum.<|end|><|start|>assistant<|channel|>final<|message|>4.<|return|>
  const std::vector<int> example = Cat({{kChannel},
                                        Bytes("analysis"),
                                        {kMessage},
                                        Bytes("Sum."),
                                        {kEnd, kStart},
                                        Bytes("assistant"),
                                        {kChannel},
                                        Bytes("final"),
                                        {kMessage},
                                        Bytes("4."),
                                        {kReturn},
                                        Bytes("after")});
  Seen seen = run(example);
  EXPECT_EQ(seen.analysis, "Sum.");
  EXPECT_EQ(seen.final_text, "4.");
  EXPECT_TRUE(seen.ended);
  EXPECT_EQ(seen.steps, static_cast<int>(example.size()) - 5);  // stopped at <|return|>
  // The final message closed by <|end|> ends the reply too; an analysis message's <|end|> does not.
  seen = run(Cat({{kChannel}, Bytes("final"), {kMessage}, Bytes("ok"), {kEnd}, Bytes("x")}));
  EXPECT_EQ(seen.final_text, "ok");
  EXPECT_TRUE(seen.ended);
  seen = run(Cat({{kChannel}, Bytes("analysis"), {kMessage}, Bytes("a"), {kEnd}, Bytes("x")}));
  EXPECT_FALSE(seen.ended);
  EXPECT_EQ(seen.analysis, "a");  // "x" lies between messages: shown nowhere
  // A tool call: "commentary to=functions.f <|constrain|>json" is the commentary channel; <|call|>
  // stops.
  seen = run(Cat({{kChannel},
                  Bytes("commentary to=functions.f "),
                  {kConstrain},
                  Bytes("json"),
                  {kMessage},
                  Bytes("{}"),
                  {kCall}}));
  EXPECT_EQ(seen.analysis, "{}");
  EXPECT_TRUE(seen.ended);
}

// A tiny random gpt-oss directory with the tiny harmony tokenizer beside it.
std::string TinyGptOssWithTokenizer(const std::string& name) {
  const std::string dir = test::WriteRandomHf(test::SmallGptOssConfig(kTinyVocab), 11, name);
  WriteFileAtomic(dir + "/tokenizer.json", TinyHarmonyTokenizerJson());
  return dir;
}

// Lines of `text` starting with `prefix`, the prefix cut off.
std::vector<std::string> LinesAfter(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) out.push_back(line.substr(prefix.size()));
  return out;
}

std::vector<int> Ids(const std::string& list) {
  std::vector<int> out;
  std::istringstream in(list);
  for (int id; in >> id;) out.push_back(id);
  return out;
}

// chat on a gpt-oss model speaks harmony: the first turn is the system message and the user's line
// in the open assistant turn; the second starts with the <|end|> that closes the first reply in
// the history (its stop token was not fed), then the user's line. Written out by hand.
TEST(ChatCli, GptOssTurnsAreHarmonyMessages) {
  const std::string dir = TinyGptOssWithTokenizer("chat_harmony");
  const std::string input = dir + "/turns.txt";
  WriteFileAtomic(input, "Hi\nBye\n");
  const test::CliResult r = test::RunCli(
      "chat --model " + dir +
      " --window 100 --temperature 0 --max-reply 5 --log-tokens --identity I. < " + input);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("harmony messages (reasoning medium)"), std::string::npos) << r.err;
  const std::vector<std::string> prompts = LinesAfter(r.err, "chat: turn 1 prompt tokens: ");
  ASSERT_EQ(prompts.size(), 1u) << r.err;
  // The system message's text byte by byte but for "must", whose "us" merges.
  const std::vector<int> system = Cat(
      {Bytes("I.\nKnowledge cutoff: 2024-06\n\nReasoning: medium\n\n# Valid channels: analysis, "
             "commentary, final. Channel m"),
       {kUs},
       Bytes("t be included for every message.")});
  const std::vector<int> assistant = Cat({{kStart}, Bytes("assistant")});
  EXPECT_EQ(Ids(prompts[0]), Cat({{kStart},
                                  Bytes("system"),
                                  {kMessage},
                                  system,
                                  {kEnd},
                                  {kStart, kUse, 'r', kMessage},
                                  Bytes("Hi"),
                                  {kEnd},
                                  assistant}));
  const std::vector<std::string> second = LinesAfter(r.err, "chat: turn 2 prompt tokens: ");
  ASSERT_EQ(second.size(), 1u) << r.err;
  EXPECT_EQ(Ids(second[0]),
            Cat({{kEnd, kStart, kUse, 'r', kMessage}, Bytes("Bye"), {kEnd}, assistant}));
  const std::vector<std::string> replies = LinesAfter(r.err, "chat: turn 1 reply tokens: ");
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_FALSE(Ids(replies[0]).empty());
  EXPECT_NE(r.err.find("end of input after 2 turn(s)"), std::string::npos) << r.err;

  // --format plain: the lines as text, no harmony tokens.
  const test::CliResult plain = test::RunCli("chat --model " + dir +
                                             " --window 100 --temperature 0 "
                                             "--max-reply 3 --log-tokens --format plain < " +
                                             input);
  ASSERT_EQ(plain.code, 0) << plain.err;
  const std::vector<std::string> plain_prompts =
      LinesAfter(plain.err, "chat: turn 2 prompt tokens: ");
  ASSERT_EQ(plain_prompts.size(), 1u) << plain.err;
  EXPECT_EQ(Ids(plain_prompts[0]), Bytes("Bye"));

  // A model whose tokenizer lacks the format's tokens: chat says which, and that --format plain
  // runs.
  const std::string bare =
      test::WriteRandomHf(test::SmallGptOssConfig(kTinyVocab), 11, "chat_bare");
  nlohmann::json j = nlohmann::json::parse(TinyHarmonyTokenizerJson());
  j["added_tokens"] = nlohmann::json::array();
  WriteFileAtomic(bare + "/tokenizer.json", j.dump());
  const test::CliResult refused = test::RunCli("chat --model " + bare + " --window 100 < " + input);
  EXPECT_EQ(refused.code, 1);
  EXPECT_NE(refused.err.find("has no special token <|start|>"), std::string::npos) << refused.err;
}

// convert --expert-type writes the same model's experts in another type (here BF16 beside Q8_0
// weights): kept as stored at native, the forward of the file's values (the file at f32).
TEST(ConvertCli, ExpertTypeWritesTheExpertsInThatType) {
  const std::string dir = TinyGptOssWithTokenizer("convert_experts");
  const std::string out = test::TempDir("convert_experts_out") + "/m.gguf";
  test::CliResult r = test::RunCli("convert --model " + dir +
                                   " --to gguf --type q8_0 --expert-type bf16 --out " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("experts bf16"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("fell back: blk.0.ffn_gate_exps"), std::string::npos) << r.err;
  const Model native = LoadModel(out, Precision::kNative);
  const Model f32 = LoadModel(out, Precision::kF32);
  ASSERT_TRUE(native.weights.layers[0].packed);
  EXPECT_EQ(native.weights.layers[0].packed->moe_w1.ggml.type, kGgmlTypeBF16);
  EXPECT_EQ(native.weights.layers[0].packed->moe_w2.ggml.type, kGgmlTypeBF16);
  std::vector<int> tokens;
  for (int i = 0; i < 16; ++i) tokens.push_back((29 * i + 3) % 256);
  auto logits = [&](const Model& m) {
    KVCache cache = KVCache::Create(m.config, static_cast<int>(tokens.size()));
    RunState state;
    ForwardRequest req;
    req.tokens = tokens;
    const Tensor t = Forward(m, cache, state, req);
    return std::vector<float>(t.data(), t.data() + t.numel());
  };
  EXPECT_LT(
      test::MaxRelDiff(logits(native), logits(f32), "GGUF Q8_0 + BF16 experts, native vs f32"),
      1e-5);
  for (const char* bad :
       {"--to hf --expert-type bf16", "--to gguf --type mxfp4 --expert-type q8_0"}) {
    r = test::RunCli("convert --model " + dir + " " + bad + " --out " + out + ".x");
    EXPECT_EQ(r.code, 1) << bad;
    EXPECT_NE(r.err.find("--expert-type: only for --to gguf"), std::string::npos) << r.err;
  }
}

// scripts/make_test_model.py's tiny gpt-oss, sharded: the published layout as the loader reads it.
TEST(MakeTestModel, GptOssTinyIsThePublishedLayout) {
  if (std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0)
    GTEST_SKIP() << "python3-numpy is not installed: scripts/make_test_model.py cannot run "
                    "(scripts/setup.sh installs it)";
  const std::string dir = test::TempDir("make_gpt_oss") + "/model";
  ASSERT_EQ(std::system(("/usr/bin/python3 " + test::RepoPath("scripts/make_test_model.py") +
                         " --preset gpt-oss-tiny --shard-gb 0.0001 --seed 3 --out " + dir +
                         " 2>/dev/null")
                            .c_str()),
            0);
  // Shards named as the published ones (from 0), an index, config.json's quantization_config.
  int shards = 0;
  for (const auto& entry : fs::directory_iterator(dir))
    shards += entry.path().filename().string().rfind("model-0000", 0) == 0;
  EXPECT_GT(shards, 2);
  EXPECT_TRUE(
      FileExists(dir + "/model-00000-of-" + fmt::format("{:05d}", shards - 1) + ".safetensors"));
  const nlohmann::json config = nlohmann::json::parse(ReadFile(dir + "/config.json"));
  EXPECT_EQ(config["quantization_config"]["quant_method"], "mxfp4");
  EXPECT_EQ(config["quantization_config"]["modules_to_not_convert"].size(), 4u);

  const Model native = LoadModel(dir, Precision::kNative);
  const Model f32 = LoadModel(dir, Precision::kF32);
  const ModelConfig& c = f32.config;
  EXPECT_TRUE(c.mxfp4_experts);
  EXPECT_EQ(FilePrecision(dir), Precision::kNative);
  ASSERT_TRUE(native.weights.layers[0].packed);
  EXPECT_EQ(native.weights.layers[0].packed->moe_w1.ggml.type, kTypeMxfp4Split);

  // The experts as the f32 load decoded them equal the spec's decoding of the stored bytes: gate
  // the even rows of gate_up_proj_blocks, up the odd ones, down as stored (out, in).
  const SafetensorsDir st = SafetensorsDir::Open(dir);
  const int E = c.n_experts, F = c.hidden_dim, D = c.dim;
  int64_t checked = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string base = fmt::format("model.layers.{}.mlp.experts.", l);
    EXPECT_EQ(st.Info(base + "gate_up_proj_blocks").dtype, SafetensorsDtype::kU8);
    const uint8_t* gu = st.RawData(base + "gate_up_proj_blocks");
    const uint8_t* gu_s = st.RawData(base + "gate_up_proj_scales");
    const uint8_t* dn = st.RawData(base + "down_proj_blocks");
    const uint8_t* dn_s = st.RawData(base + "down_proj_scales");
    const LayerWeights& w = f32.weights.layers[l];
    for (int e = 0; e < E; ++e) {
      for (int f = 0; f < F; ++f)
        for (int i = 0; i < D; ++i)
          for (int which = 0; which < 2; ++which) {  // 0: gate (row 2f), 1: up (row 2f + 1)
            const size_t row = static_cast<size_t>(e) * 2 * F + 2 * f + which;
            const double want = test::SpecSplitElement(gu + row * D / 2, gu_s + row * D / 32, i);
            const Tensor& t = which == 0 ? w.moe_w1 : w.moe_w3;  // (E, F, D)
            ASSERT_EQ(t[(static_cast<int64_t>(e) * F + f) * D + i], static_cast<float>(want))
                << base << " expert " << e << " row " << f << (which ? " up" : " gate") << " col "
                << i;
            ++checked;
          }
      for (int d = 0; d < D; ++d)
        for (int f = 0; f < F; ++f) {
          const size_t row = static_cast<size_t>(e) * D + d;
          const double want = test::SpecSplitElement(dn + row * F / 2, dn_s + row * F / 32, f);
          ASSERT_EQ(w.moe_w2[(static_cast<int64_t>(e) * D + d) * F + f], static_cast<float>(want));
          ++checked;
        }
    }
  }
  std::printf(
      "make_test_model gpt-oss-tiny: %lld expert weights equal the spec's decoding of the "
      "stored blocks\n",
      static_cast<long long>(checked));
  // Every stored value is a parameter (two weights a block byte; scales are none), biases included.
  int64_t stored = 0;
  for (const std::string& name : st.names()) {
    int64_t n = 1;
    for (int64_t d : st.Info(name).shape) n *= d;
    stored += name.ends_with("_scales") ? 0 : name.ends_with("_blocks") ? 2 * n : n;
  }
  EXPECT_EQ(f32.ParameterCount(), stored);
  EXPECT_EQ(native.ParameterCount(), stored);

  std::vector<int> tokens;
  for (int i = 0; i < 24; ++i) tokens.push_back((37 * i + 5) % c.vocab_size);
  auto logits = [&](const Model& m) {
    KVCache cache = KVCache::Create(m.config, static_cast<int>(tokens.size()));
    RunState state;
    ForwardRequest req;
    req.tokens = tokens;
    const Tensor out = Forward(m, cache, state, req);
    return std::vector<float>(out.data(), out.data() + out.numel());
  };
  EXPECT_LT(
      test::MaxRelDiff(logits(native), logits(f32), "make_test_model gpt-oss-tiny native vs f32"),
      1e-5);

  // The tokenizer: the model's vocabulary, the 16 harmony tokens at the top in the published
  // order, config.json's eos <|return|> and pad <|endoftext|> among them.
  const auto tok = FindTokenizer(native, "");
  EXPECT_EQ(tok->vocab_size(), c.vocab_size);
  EXPECT_EQ(tok->kind(), "bpe/o200k");
  const int first = c.vocab_size - 16;
  for (size_t i = 0; i < kHarmonyOrder.size(); ++i) {
    const std::string text =
        kHarmonyOrder[i].empty() ? fmt::format("<|reserved_{}|>", 199998 + i) : kHarmonyOrder[i];
    EXPECT_EQ(tok->SpecialTokenId(text), first + static_cast<int>(i)) << text;
  }
  EXPECT_EQ(config["eos_token_id"], first + 4);
  EXPECT_EQ(config["pad_token_id"], first + 1);
  const std::string text = "The sink holds attention. 42 times!\nNew line";
  const std::vector<int> ids = tok->Encode(text, false);
  EXPECT_EQ(tok->Decode(ids), text);
  EXPECT_LT(ids.size(), text.size());  // merges apply
  const HarmonyTokens h = HarmonyTokens::Find(*tok, dir);
  EXPECT_EQ(h.start, first + 8);
}

}  // namespace
}  // namespace ss
