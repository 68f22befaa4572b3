// Tokenizers against reference token ids: llama2.c's tok512.bin (ids from an independent
// implementation), and llama.cpp's vocabulary test vectors (.inp/.out, produced with the original
// SentencePiece / Hugging Face tokenizers) for the Llama SentencePiece and GPT-2 vocabularies.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "common/file_util.h"
#include "gguf_writer.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "test_util.h"
#include "tokenizer/export.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace ss {
namespace {

std::string Tok(const std::string& name) { return test::RepoPath("tests/data/tokenizers/" + name); }

std::string Join(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

struct VocabCase {
  std::string text;
  std::vector<int> ids;
};

// .inp: cases separated by "\n__ggml_vocab_test__\n"; .out: one line of ids per case.
std::vector<VocabCase> ReadVocabCases(const std::string& vocab) {
  std::string inp = ReadFile(Tok(vocab + ".inp"));
  std::string out = ReadFile(Tok(vocab + ".out"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<VocabCase> cases;
  size_t pos = 0;
  while (pos < inp.size()) {
    size_t end = inp.find(sep, pos);
    if (end == std::string::npos) break;
    cases.push_back({inp.substr(pos, end - pos), {}});
    pos = end + sep.size();
  }
  std::istringstream lines(out);
  std::string line;
  for (VocabCase& c : cases) {
    std::getline(lines, line);
    std::istringstream ids(line);
    int id;
    while (ids >> id) c.ids.push_back(id);
  }
  return cases;
}

// Runs every case; prints each mismatch and the pass count.
void ExpectAllCases(const Tokenizer& tok, const std::string& vocab) {
  std::vector<VocabCase> cases = ReadVocabCases(vocab);
  ASSERT_EQ(cases.size(), 46u);
  int passed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<int> got = tok.Encode(cases[i].text, false);
    if (got == cases[i].ids) ++passed;
    EXPECT_EQ(Join(got), Join(cases[i].ids))
        << vocab << " case " << i << ": '" << cases[i].text << "'";
    // Byte-level BPE is lossless; SentencePiece loses nothing either except for the empty text.
    EXPECT_EQ(tok.Decode(got), cases[i].text) << vocab << " case " << i;
  }
  std::printf("%s: %d of %zu cases pass\n", vocab.c_str(), passed, cases.size());
}

TEST(Unicode, Classes) {
  EXPECT_TRUE(IsLetter('a'));
  EXPECT_TRUE(IsLetter(0x0439));   // й
  EXPECT_TRUE(IsLetter(0x6211));   // 我
  EXPECT_FALSE(IsLetter(0x17B6));  // Khmer vowel sign: a mark, not \p{L}
  EXPECT_TRUE(IsNumber(0x00BD));   // ½ is No
  EXPECT_FALSE(IsLetter(0x1F999));
  EXPECT_TRUE(IsWhitespace(0x3000));
  EXPECT_FALSE(IsWhitespace(0x200B));  // zero width space is not White_Space
  EXPECT_EQ(FindInvalidUtf8("ok \xC3\xA9"), std::string_view::npos);
  EXPECT_EQ(FindInvalidUtf8("ab\xC0\x80"), 2u);           // overlong
  EXPECT_EQ(FindInvalidUtf8("\xED\xA0\x80"), 0u);         // surrogate
  EXPECT_EQ(FindInvalidUtf8("abc\xF4\x90\x80\x80"), 3u);  // > U+10FFFF
  EXPECT_EQ(FindInvalidUtf8("x\xE2\x82"), 1u);            // truncated
}

TEST(Llama2cTokenizer, ReferenceIds) {
  auto tok = LoadLlama2cTokenizer(test::RepoPath("models/stories260K/tok512.bin"), 512);
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->kind(), "llama2c");
  EXPECT_EQ(Join(tok->Encode("Once upon a time, there was a little girl named Lily.", true)),
            "1 403 407 261 378 432 383 286 261 376 298 315 421 395 317 426");
  int n = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(test::RepoPath("tests/data/reference"))) {
    if (entry.path().extension() != ".json") continue;
    nlohmann::json ref = nlohmann::json::parse(ReadFile(entry.path().string()));
    std::string text = ref["text"];
    std::vector<int> ids = tok->Encode(text, ref["bos"].get<bool>());
    EXPECT_EQ(Join(ids), Join(ref["tokens"].get<std::vector<int>>())) << entry.path();
    EXPECT_EQ(tok->Decode(ids), text) << entry.path();
    ++n;
  }
  EXPECT_EQ(n, 3);
  // Streaming: the first word after BOS loses its dummy-prefix space, later words keep theirs.
  std::vector<int> ids = tok->Encode("Lily", true);
  EXPECT_EQ(tok->DecodeToken(1, ids[1]).substr(0, 1), "L");
  EXPECT_EQ(tok->DecodeToken(5, ids[1]).substr(0, 2), " L");
  // Characters outside the 512 pieces fall back to bytes (id = byte + 3) and decode losslessly.
  std::string odd = "Zoë 🦙\n";
  EXPECT_EQ(tok->Decode(tok->Encode(odd, true)), odd);
  std::vector<int> nl = tok->Encode("\n", false);
  EXPECT_EQ(nl.back(), '\n' + 3);
  EXPECT_TRUE(tok->Encode("", false).empty());
  EXPECT_EQ(Join(tok->Encode("", true)), "1");
}

TEST(Llama2cTokenizer, BadInputs) {
  std::string path = test::RepoPath("models/stories260K/tok512.bin");
  try {
    LoadLlama2cTokenizer(path, 32000);
    FAIL() << "expected a vocabulary size mismatch";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("fewer than the expected 32000 tokens"), std::string::npos) << msg;
  }
  try {
    LoadLlama2cTokenizer(path, 500);
    FAIL() << "expected a vocabulary size mismatch";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more tokens than the model's vocabulary size 500"),
              std::string::npos)
        << e.what();
  }
  auto dir = std::filesystem::temp_directory_path() / ("sinkscope_tok_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::string bytes = ReadFile(path);
  std::string cut = (dir / "cut.bin").string();
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  try {
    LoadLlama2cTokenizer(cut, 512);
    FAIL() << "expected a truncation error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(cut), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);

  auto tok = LoadLlama2cTokenizer(path, 512);
  try {
    tok->Encode("ok \xFF no", true);
    FAIL() << "expected invalid UTF-8";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "prompt is not valid UTF-8 at byte 3");
  }
  EXPECT_THROW(tok->DecodeToken(-1, 512), Error);
}

TEST(GgufTokenizer, LlamaSpmAllCases) {
  GgufFile gguf = GgufFile::Open(Tok("ggml-vocab-llama-spm.gguf"));
  auto tok = LoadGgufTokenizer(gguf);
  EXPECT_EQ(tok->kind(), "spm");
  EXPECT_EQ(tok->vocab_size(), 32000);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  ExpectAllCases(*tok, "ggml-vocab-llama-spm.gguf");
  EXPECT_EQ(Join(tok->Encode("Hello world", true)), "1 15043 3186");
}

TEST(GgufTokenizer, Gpt2AllCases) {
  GgufFile gguf = GgufFile::Open(Tok("ggml-vocab-gpt-2.gguf"));
  auto tok = LoadGgufTokenizer(gguf);
  EXPECT_EQ(tok->kind(), "bpe/gpt-2");
  EXPECT_EQ(tok->vocab_size(), 50257);
  ExpectAllCases(*tok, "ggml-vocab-gpt-2.gguf");
}

TEST(GgufTokenizer, GptNeoxRoundTripAndHandChecked) {
  GgufFile gguf = GgufFile::Open(Tok("ggml-vocab-gpt-neox.gguf"));
  auto tok = LoadGgufTokenizer(gguf);
  EXPECT_EQ(tok->kind(), "bpe/gpt-2");
  for (const VocabCase& c : ReadVocabCases("ggml-vocab-gpt-2.gguf"))
    EXPECT_EQ(tok->Decode(tok->Encode(c.text, false)), c.text);
  // Hand-checked against the vocabulary: each word is one token, spaces as 'Ġ' (U+0120).
  std::vector<std::string> pieces = gguf.GetStringArray("tokenizer.ggml.tokens");
  auto piece_ids = [&](const std::vector<int>& ids) {
    std::string s;
    for (int id : ids) s += "[" + pieces.at(id) + "]";
    return s;
  };
  EXPECT_EQ(piece_ids(tok->Encode("Hello world", false)), "[Hello][\xC4\xA0world]");
  // GPT-NeoX-20B has user-defined tokens for runs of spaces; like Hugging Face and llama.cpp,
  // those are cut out of the text before the pre-tokenizer runs.
  EXPECT_EQ(piece_ids(tok->Encode("   Hello", false)), "[   ][Hello]");
  EXPECT_EQ(piece_ids(tok->Encode(" Hello", false)), "[\xC4\xA0Hello]");
  EXPECT_EQ(piece_ids(tok->Encode("I'm 42", false)), "[I]['m][\xC4\xA0\x34\x32]");
}

std::vector<std::string> Split(PreTokenizer pre, std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view w : PreTokenize(pre, text)) out.emplace_back(w);
  return out;
}
using Words = std::vector<std::string>;

TEST(PreTokenizer, HandCheckedSplits) {
  EXPECT_EQ(Split(PreTokenizer::kGpt2, "Hello, y'all!  I've 12345 \u00bdx\n\n"),
            (Words{"Hello", ",", " y", "'", "all", "!", " ", " I", "'ve", " 12345", " \u00bd", "x",
                   "\n\n"}));
  // Llama 3: a leading punctuation char joins the word, digits in threes, newlines kept apart.
  EXPECT_EQ(Split(PreTokenizer::kLlama3, "(normal) I'M 1234567 ok\n\n  next  "),
            (Words{"(normal", ")", " I", "'M", " ", "123", "456", "7", " ok", "\n\n", " ", " next",
                   "  "}));
  EXPECT_EQ(Split(PreTokenizer::kQwen2, "ab 123!!\n"), (Words{"ab", " ", "1", "2", "3", "!!\n"}));
  EXPECT_EQ(Split(PreTokenizer::kLlama3, "x \t\n y"), (Words{"x", " \t\n", " y"}));
}

// o200k (GPT-4o, gpt-oss): 422 texts split by the `regex` module with tiktoken's pattern
// (scripts/gen_o200k_vectors.py: hand-picked texts and random strings over every class the regex
// distinguishes: cased, title-case, modifier and other letters, marks, numbers, contractions).
TEST(PreTokenizer, O200kMatchesTheRegexModuleOnEveryVector) {
  std::ifstream in(test::RepoPath("tests/data/tokenizers/o200k_pretokenize.json"));
  ASSERT_TRUE(in) << "tests/data/tokenizers/o200k_pretokenize.json";
  const nlohmann::json data = nlohmann::json::parse(in);
  EXPECT_EQ(data["pattern"].get<std::string>(), PreTokenizerRegex(PreTokenizer::kO200k));
  EXPECT_EQ(PreTokenizerFromRegex(data["pattern"].get<std::string>()), PreTokenizer::kO200k);
  int cases = 0, failures = 0;
  for (const auto& c : data["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const Words want = c["words"].get<Words>();
    const Words got = Split(PreTokenizer::kO200k, text);
    ++cases;
    if (got != want && ++failures <= 5) ADD_FAILURE() << "text " << nlohmann::json(text).dump();
  }
  EXPECT_EQ(cases, 422);
  EXPECT_EQ(failures, 0);
  // The case change splits words; contractions stay on their word; '/' follows punctuation.
  EXPECT_EQ(Split(PreTokenizer::kO200k, "helloWorld NASA's a/\nb"),
            (Words{"hello", "World", " NASA's", " a", "/\n", "b"}));
}

// A tokenizer.json holding exactly the vocabulary and merges of a GGUF byte-level file.
std::string Gpt2GgufAsTokenizerJson(const GgufFile& gguf, bool merges_as_pairs) {
  nlohmann::json vocab = nlohmann::json::object();
  std::vector<std::string> pieces = gguf.GetStringArray("tokenizer.ggml.tokens");
  std::vector<int64_t> types = gguf.GetIntArray("tokenizer.ggml.token_type");
  nlohmann::json added = nlohmann::json::array();
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (types[i] == 3)
      added.push_back({{"id", i}, {"content", pieces[i]}, {"special", true}});
    else
      vocab[pieces[i]] = i;
  }
  nlohmann::json merges = nlohmann::json::array();
  for (const std::string& m : gguf.GetStringArray("tokenizer.ggml.merges")) {
    if (!merges_as_pairs) {
      merges.push_back(m);
      continue;
    }
    size_t space = m.find(' ', 1);
    merges.push_back({m.substr(0, space), m.substr(space + 1)});
  }
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"unk_token", nullptr}}}};
  return j.dump();
}

// gpt-oss's tokenizer.json shape (o200k_harmony as transformers' TikTokenConverter writes it):
// Sequence [Split(o200k regex, Isolated), ByteLevel(use_regex false)], here over GPT-2's vocabulary
// and merges. Words never cross an o200k boundary (the case change in "helloWorld", which GPT-2's
// regex keeps as one word), and the GGUF export names it gpt-4o and reads back the same ids.
nlohmann::json O200kPreTokenizer() {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{"Regex", std::string(PreTokenizerRegex(PreTokenizer::kO200k))}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"},
             {"add_prefix_space", false},
             {"trim_offsets", true},
             {"use_regex", false}}}}};
}

TEST(TokenizerJson, O200kSplitSequenceAsGptOssWritesIt) {
  GgufFile gguf = GgufFile::Open(Tok("ggml-vocab-gpt-2.gguf"));
  nlohmann::json j = nlohmann::json::parse(Gpt2GgufAsTokenizerJson(gguf, false));
  j["pre_tokenizer"] = O200kPreTokenizer();
  auto tok = ParseTokenizerJson("gpt-oss/tokenizer.json", j.dump());
  EXPECT_EQ(tok->kind(), "bpe/o200k");
  auto gpt2 = LoadGgufTokenizer(gguf);
  const std::string text = "helloWorld NASA's GPT-OSS /path/to/file in 2024";
  std::vector<int> ids = tok->Encode(text, false);
  EXPECT_EQ(tok->Decode(ids), text);
  std::vector<std::string> words;
  for (std::string_view w : PreTokenize(PreTokenizer::kO200k, text)) words.emplace_back(w);
  std::vector<int> by_words;
  for (const std::string& w : words)
    for (int id : gpt2->Encode(w, false)) by_words.push_back(id);
  EXPECT_EQ(ids, by_words);  // the same as encoding each o200k word on its own
  EXPECT_NE(
      ids,
      gpt2->Encode(text, false));  // and not what GPT-2's regex gives (" 2024" vs " ", "202", "4")
  ss::GgufWriter w;
  w.SetString("general.architecture", "gpt-oss");
  AddGgufTokenizer(*tok, w);
  const std::string bytes = w.Build();
  GgufFile exported = GgufFile::Parse("o200k.gguf", reinterpret_cast<const uint8_t*>(bytes.data()),
                                      bytes.size(), nullptr);
  EXPECT_EQ(exported.GetString("tokenizer.ggml.pre"), "gpt-4o");
  EXPECT_EQ(LoadGgufTokenizer(exported)->Encode(text, false), ids);
}

// tokenizer.json's ignore_merges (tiktoken's rule: a word that is itself a token is not merged) has
// no ggml key: the export writes sinkscope.tokenizer.ignore_merges, and a GGUF without it follows
// the pre-tokenizer (true for gpt-4o, as gpt-oss's and Llama 3's tokenizer.json set it; false for
// GPT-2). Either value reads back as exported.
TEST(TokenizerJson, IgnoreMergesReadsBackFromGguf) {
  GgufFile gguf = GgufFile::Open(Tok("ggml-vocab-gpt-2.gguf"));
  auto flag = [](const Tokenizer& t) {
    return nlohmann::json::parse(TokenizerJsonText(t))["model"]["ignore_merges"].get<bool>();
  };
  for (bool ignore : {false, true}) {
    nlohmann::json j = nlohmann::json::parse(Gpt2GgufAsTokenizerJson(gguf, false));
    j["pre_tokenizer"] = O200kPreTokenizer();
    j["model"]["ignore_merges"] = ignore;
    auto tok = ParseTokenizerJson("o200k/tokenizer.json", j.dump());
    ASSERT_EQ(tok->kind(), "bpe/o200k");
    ASSERT_EQ(flag(*tok), ignore);
    ss::GgufWriter w;
    w.SetString("general.architecture", "gpt-oss");
    AddGgufTokenizer(*tok, w);
    const std::string bytes = w.Build();
    GgufFile exported = GgufFile::Parse(
        "o200k.gguf", reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), nullptr);
    EXPECT_EQ(exported.GetBool("sinkscope.tokenizer.ignore_merges"), ignore);
    EXPECT_EQ(flag(*LoadGgufTokenizer(exported)), ignore);
  }
  // Without the key: the pre-tokenizer's default.
  for (auto [pre, expected] : {std::pair{"gpt-4o", true}, {"llama-bpe", true}, {"gpt-2", false}}) {
    ss::GgufWriter w;
    w.SetString("general.architecture", "gpt2");
    w.SetString("tokenizer.ggml.model", "gpt2");
    w.SetString("tokenizer.ggml.pre", pre);
    w.SetStringArray("tokenizer.ggml.tokens", gguf.GetStringArray("tokenizer.ggml.tokens"));
    w.SetStringArray("tokenizer.ggml.merges", gguf.GetStringArray("tokenizer.ggml.merges"));
    const std::string bytes = w.Build();
    GgufFile plain = GgufFile::Parse("plain.gguf", reinterpret_cast<const uint8_t*>(bytes.data()),
                                     bytes.size(), nullptr);
    EXPECT_EQ(flag(*LoadGgufTokenizer(plain)), expected) << pre;
  }
}

TEST(TokenizerJson, ConvertedGpt2MatchesGguf) {
  GgufFile gguf = GgufFile::Open(Tok("ggml-vocab-gpt-2.gguf"));
  auto from_gguf = LoadGgufTokenizer(gguf);
  for (bool pairs : {false, true}) {
    auto from_json = ParseTokenizerJson("gpt2.json", Gpt2GgufAsTokenizerJson(gguf, pairs));
    EXPECT_EQ(from_json->kind(), "bpe/gpt-2");
    EXPECT_EQ(from_json->vocab_size(), from_gguf->vocab_size());
    EXPECT_EQ(from_json->eos_id(), 50256);
    ExpectAllCases(*from_json, "ggml-vocab-gpt-2.gguf");
  }
}

// A tiny SentencePiece-style vocabulary in both formats: GGUF "llama" (scores) and the
// tokenizer.json that Hugging Face's SentencePiece converter would write for it: a merge (a, b)
// for every split of every piece into two pieces, ranked by the score of the merged piece.
TEST(TokenizerJson, TinySentencePieceMatchesGguf) {
  const std::string m = "\xE2\x96\x81";  // U+2581
  std::vector<std::string> pieces = {"<unk>", "<s>", "</s>"};
  for (int b = 0; b < 256; ++b) pieces.push_back(fmt::format("<0x{:02X}>", b));
  for (const char* c : {"t", "h", "e", "c", "a"}) pieces.push_back(c);
  pieces.push_back(m);
  std::vector<float> scores(pieces.size(), 0.f);
  // Merged pieces, best first.
  for (const std::string& p : {m + "t", std::string("he"), m + "the", std::string("ca"),
                               std::string("cat"), m + "ca", m + "cat", m + m}) {
    scores.push_back(-static_cast<float>(pieces.size()));
    pieces.push_back(p);
  }
  std::vector<int32_t> types(pieces.size(), 1);
  types[0] = 2;
  types[1] = types[2] = 3;
  for (int b = 0; b < 256; ++b) types[3 + b] = 6;

  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < pieces.size(); ++i) vocab[pieces[i]] = i;
  nlohmann::json jm = nlohmann::json::array();
  for (size_t i = 259; i < pieces.size(); ++i)  // already in score order
    for (size_t k = 1; k < pieces[i].size(); ++k)
      if (vocab.contains(pieces[i].substr(0, k)) && vocab.contains(pieces[i].substr(k)))
        jm.push_back(pieces[i].substr(0, k) + " " + pieces[i].substr(k));
  nlohmann::json j = {{"added_tokens",
                       {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                        {{"id", 1}, {"content", "<s>"}, {"special", true}},
                        {{"id", 2}, {"content", "</s>"}, {"special", true}}}},
                      {"normalizer",
                       {{"type", "Sequence"},
                        {"normalizers",
                         {{{"type", "Prepend"}, {"prepend", m}},
                          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", m}}}}}},
                      {"pre_tokenizer", nullptr},
                      {"post_processor",
                       {{"type", "TemplateProcessing"},
                        {"single",
                         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}}},
                      {"model",
                       {{"type", "BPE"},
                        {"vocab", vocab},
                        {"merges", jm},
                        {"byte_fallback", true},
                        {"unk_token", "<unk>"}}}};
  auto from_json = ParseTokenizerJson("tiny.json", j.dump());

  test::GgufWriter w;
  w.KeyString("tokenizer.ggml.model", "llama");
  w.KeyStrings("tokenizer.ggml.tokens", pieces);
  w.KeyF32s("tokenizer.ggml.scores", scores);
  w.KeyI32s("tokenizer.ggml.token_type", types);
  std::string bytes = w.Build();
  GgufFile gguf = GgufFile::Parse("tiny.gguf", reinterpret_cast<const uint8_t*>(bytes.data()),
                                  bytes.size(), nullptr);
  auto from_gguf = LoadGgufTokenizer(gguf);
  EXPECT_EQ(from_json->bos_id(), 1);
  EXPECT_EQ(from_json->eos_id(), 2);
  for (const char* text : {"the cat", "cat  the", "tea, cheat", "  héllo\n", "", "thecat ca t"}) {
    std::vector<int> a = from_json->Encode(text, true), b = from_gguf->Encode(text, true);
    EXPECT_EQ(Join(a), Join(b)) << text;
    EXPECT_EQ(from_json->Decode(a), text);
  }
  // "the cat" -> <s> ▁the ▁cat
  std::vector<int> ids = from_json->Encode("the cat", true);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(pieces[ids[1]], m + "the");
  EXPECT_EQ(pieces[ids[2]], m + "cat");
}

TEST(TokenizerJson, UnsupportedAndBrokenFilesNameTheProblem) {
  auto expect = [](const std::string& json, const std::string& needle) {
    try {
      ParseTokenizerJson("t.json", json);
      ADD_FAILURE() << "expected an error for " << json;
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.rfind("t.json: ", 0), 0u) << msg;
      EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    }
  };
  expect(R"({"model": {"type": "WordPiece", "vocab": {}}})",
         "model.type 'WordPiece' is not supported");
  expect(R"({"model": {"type": "Unigram", "vocab": []}})", "model.type 'Unigram' is not supported");
  expect("{", "not valid JSON");
  expect("[]", "expected a JSON object");
  expect(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a c"]}})",
         "names a piece that is not in the vocabulary");
  expect(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]},
             "pre_tokenizer": {"type": "Whitespace"}})",
         "pre_tokenizer type 'Whitespace' is not supported");
  expect(R"({"model": {"type": "BPE", "vocab": {"a": 4000000000}, "merges": []}})",
         "has id 4000000000");
  expect(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": 5}})",
         "model.merges is not an array");
  expect(R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}})",
         "token \"a\" has id \"x\"");
}

TEST(LoadTokenizer, DispatchesOnContent) {
  EXPECT_EQ(LoadTokenizer(Tok("ggml-vocab-llama-spm.gguf"), -1)->kind(), "spm");
  EXPECT_EQ(LoadTokenizer(test::RepoPath("models/stories260K/tok512.bin"), 512)->kind(), "llama2c");
  try {
    LoadTokenizer(test::RepoPath("models/stories260K/tok512.bin"), -1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs the model's vocabulary size"), std::string::npos);
  }
}

TEST(GgufTokenizer, BadMetadata) {
  auto load = [](test::GgufWriter& w) {
    std::string bytes = w.Build();
    GgufFile gguf = GgufFile::Parse("m.gguf", reinterpret_cast<const uint8_t*>(bytes.data()),
                                    bytes.size(), nullptr);
    try {
      LoadGgufTokenizer(gguf);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  test::GgufWriter a;
  a.KeyString("tokenizer.ggml.model", "bert");
  EXPECT_EQ(load(a),
            "m.gguf: missing metadata key 'tokenizer.ggml.tokens' (expected an array of strings)");
  a.KeyStrings("tokenizer.ggml.tokens", {"a"});
  EXPECT_EQ(
      load(a),
      "m.gguf: tokenizer.ggml.model 'bert' is not supported (expected \"llama\" or \"gpt2\")");
  test::GgufWriter b;
  b.KeyString("tokenizer.ggml.model", "gpt2");
  b.KeyString("tokenizer.ggml.pre", "deepseek-coder");
  b.KeyStrings("tokenizer.ggml.tokens", {"a"});
  EXPECT_NE(load(b).find("tokenizer.ggml.pre 'deepseek-coder' is not supported"),
            std::string::npos);
  test::GgufWriter c;
  c.KeyString("tokenizer.ggml.model", "llama");
  c.KeyStrings("tokenizer.ggml.tokens", {"a", "b"});
  c.KeyF32s("tokenizer.ggml.scores", {0.f});
  EXPECT_EQ(load(c), "m.gguf: tokenizer.ggml.scores has 1 entries for 2 tokens");
}

}  // namespace
}  // namespace ss
