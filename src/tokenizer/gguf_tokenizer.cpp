// Tokenizers from GGUF metadata (keys as written by llama.cpp's convert scripts, see the GGUF
// spec's "tokenizer.ggml.*" section):
//   tokenizer.ggml.model        "llama" (SentencePiece BPE) or "gpt2" (byte-level BPE)
//   tokenizer.ggml.tokens       string[n]
//   tokenizer.ggml.scores       float32[n]   merge priority for "llama"
//   tokenizer.ggml.token_type   int32[n]     1 normal, 2 unknown, 3 control, 4 user-defined,
//                                            5 unused, 6 byte
//   tokenizer.ggml.merges       string[]     "left right" in rank order, for "gpt2"
//   tokenizer.ggml.pre          string       pre-tokenizer name for "gpt2"
//   tokenizer.ggml.bos_token_id / eos_token_id / unknown_token_id   uint32
//   tokenizer.ggml.add_space_prefix   bool   SentencePiece dummy prefix (default true)
#include "common/error.h"
#include "io/gguf.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/unicode.h"

namespace ss {
namespace {

PreTokenizer PreTokenizerFromGguf(const GgufFile& gguf) {
  // Without the key, convert scripts of the time meant the GPT-2 regex ("default").
  std::string pre = gguf.GetString("tokenizer.ggml.pre", "default");
  // Names from llama.cpp's convert_hf_to_gguf.py. "default" is read as Hugging Face ByteLevel's
  // default (the GPT-2 regex); llama.cpp's own "default" splits digits differently.
  for (const char* name : {"default", "gpt-2", "gpt2", "gpt-neox", "olmo", "mpt", "phi-2",
                           "roberta-bpe", "jina-es", "jina-de"})
    if (pre == name) return PreTokenizer::kGpt2;
  for (const char* name : {"llama-bpe", "llama3", "llama-v3", "smaug-bpe", "dbrx"})
    if (pre == name) return PreTokenizer::kLlama3;
  if (pre == "qwen2") return PreTokenizer::kQwen2;
  if (pre == "gpt-4o") return PreTokenizer::kO200k;  // llama.cpp's name for o200k (GPT-4o, gpt-oss)
  Fail(
      "{}: tokenizer.ggml.pre '{}' is not supported (supported: gpt-2, gpt-neox, olmo, mpt, "
      "default, llama-bpe/llama3, qwen2, gpt-4o)",
      gguf.path(), pre);
}

bool IgnoresMergesByDefault(PreTokenizer pre) {
  return pre == PreTokenizer::kLlama3 || pre == PreTokenizer::kO200k;
}

int OptionalId(const GgufFile& gguf, const std::string& key, int fallback, int n) {
  int64_t id = gguf.GetInt(key, fallback);
  if (id < -1 || id >= n)
    Fail("{}: {} is {}, outside the vocabulary of {} tokens", gguf.path(), key, id, n);
  return static_cast<int>(id);
}

}  // namespace

std::unique_ptr<Tokenizer> LoadGgufTokenizer(const GgufFile& gguf) {
  const std::string& path = gguf.path();
  std::string kind = gguf.GetString("tokenizer.ggml.model");
  BpeModel model;
  model.source = path;
  model.pieces = gguf.GetStringArray("tokenizer.ggml.tokens");
  const int n = static_cast<int>(model.pieces.size());
  if (model.pieces.size() > (1u << 30))
    Fail("{}: {} tokens is too many", path, model.pieces.size());
  if (n == 0) Fail("{}: tokenizer.ggml.tokens is empty", path);

  if (gguf.Find("tokenizer.ggml.token_type")) {
    std::vector<int64_t> types = gguf.GetIntArray("tokenizer.ggml.token_type");
    if (static_cast<int>(types.size()) != n)
      Fail("{}: tokenizer.ggml.token_type has {} entries for {} tokens", path, types.size(), n);
    model.types.reserve(n);
    for (int i = 0; i < n; ++i) {
      if (types[i] < 0 || types[i] > 6)
        Fail("{}: tokenizer.ggml.token_type[{}] is {}, expected 0..6", path, i, types[i]);
      model.types.push_back(static_cast<TokenType>(types[i]));
    }
  }

  if (kind == "llama") {
    model.kind = BpeModel::Kind::kSentencePiece;
    model.name = "spm";
    std::vector<double> scores = gguf.GetFloatArray("tokenizer.ggml.scores");
    if (static_cast<int>(scores.size()) != n)
      Fail("{}: tokenizer.ggml.scores has {} entries for {} tokens", path, scores.size(), n);
    model.scores.assign(scores.begin(), scores.end());
    model.add_space_prefix = gguf.GetBool("tokenizer.ggml.add_space_prefix", true);
    model.bos = OptionalId(gguf, "tokenizer.ggml.bos_token_id", n > 1 ? 1 : -1, n);
    model.eos = OptionalId(gguf, "tokenizer.ggml.eos_token_id", n > 2 ? 2 : -1, n);
    model.unk = OptionalId(gguf, "tokenizer.ggml.unknown_token_id", 0, n);
  } else if (kind == "gpt2") {
    model.kind = BpeModel::Kind::kByteLevel;
    model.pre = PreTokenizerFromGguf(gguf);
    model.name = std::string("bpe/") + PreTokenizerName(model.pre);
    // ggml's keys do not say whether a pre-token found whole in the vocabulary skips the merges
    // (tokenizer.json's "ignore_merges", tiktoken's rule). sinkscope's export writes it as
    // sinkscope.tokenizer.ignore_merges; without that key it follows the pre-tokenizer, as the
    // tiktoken-derived tokenizer.json files of Llama 3 and of o200k (GPT-4o, gpt-oss) set it.
    model.ignore_merges =
        gguf.GetBool("sinkscope.tokenizer.ignore_merges", IgnoresMergesByDefault(model.pre));
    model.bos = OptionalId(gguf, "tokenizer.ggml.bos_token_id", -1, n);
    model.eos = OptionalId(gguf, "tokenizer.ggml.eos_token_id", -1, n);
    model.unk = OptionalId(gguf, "tokenizer.ggml.unknown_token_id", -1, n);
    std::vector<std::string> merges = gguf.GetStringArray("tokenizer.ggml.merges");
    std::unordered_map<std::string, int> ids;
    ids.reserve(n);
    for (int i = 0; i < n; ++i) ids.emplace(model.pieces[i], i);
    model.merges.reserve(merges.size());
    for (size_t r = 0; r < merges.size(); ++r) {
      const std::string& m = merges[r];
      // Byte-level pieces never contain a plain space (it is mapped to 'Ġ'), so the first space
      // after the first character separates the two halves.
      size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
      if (space == std::string::npos)
        Fail("{}: tokenizer.ggml.merges[{}] is \"{}\", expected \"left right\"", path, r, m);
      auto a = ids.find(m.substr(0, space));
      auto b = ids.find(m.substr(space + 1));
      if (a == ids.end() || b == ids.end())
        Fail("{}: tokenizer.ggml.merges[{}] \"{}\" names a piece that is not in the vocabulary",
             path, r, m);
      model.merges.emplace_back(a->second, b->second);
    }
  } else {
    Fail("{}: tokenizer.ggml.model '{}' is not supported (expected \"llama\" or \"gpt2\")", path,
         kind);
  }
  // llama.cpp splits user-defined tokens out of the text; control tokens only with
  // parse_special, which the reference vectors do not use.
  // A piece that is not whole UTF-8 is not split out: cutting a valid text there would leave half
  // a character on each side (the token stays in the vocabulary, reachable by merges).
  for (int i = 0; i < static_cast<int>(model.types.size()); ++i)
    if (model.types[i] == TokenType::kUserDefined &&
        FindInvalidUtf8(model.pieces[i]) == std::string_view::npos)
      model.atomic_tokens.push_back(i);
  return std::make_unique<BpeTokenizer>(std::move(model));
}

}  // namespace ss
