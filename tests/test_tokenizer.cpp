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
#include "test_util.h"
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
    EXPECT_EQ(Join(got), Join(cases[i].ids)) << vocab << " case " << i << ": '" << cases[i].text << "'";
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
  EXPECT_EQ(FindInvalidUtf8("ab\xC0\x80"), 2u);          // overlong
  EXPECT_EQ(FindInvalidUtf8("\xED\xA0\x80"), 0u);        // surrogate
  EXPECT_EQ(FindInvalidUtf8("abc\xF4\x90\x80\x80"), 3u);  // > U+10FFFF
  EXPECT_EQ(FindInvalidUtf8("x\xE2\x82"), 1u);           // truncated
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
  for (const auto& entry : std::filesystem::directory_iterator(test::RepoPath("tests/data/reference"))) {
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
              std::string::npos) << e.what();
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

}  // namespace
}  // namespace ss
