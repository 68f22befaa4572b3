#include "tokenizer/export.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>
#include <unordered_map>

#include "common/error.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/unicode.h"

namespace ss {
namespace {

using OrderedJson = nlohmann::ordered_json;
const std::string kSpaceMarker = "\xE2\x96\x81";  // U+2581

const BpeModel& ModelOf(const Tokenizer& tok) {
  const auto* bpe = dynamic_cast<const BpeTokenizer*>(&tok);
  if (!bpe) Fail("tokenizer of kind '{}' cannot be exported", tok.kind());
  return bpe->model();
}

bool IsBytePiece(const std::string& p) {
  return p.size() == 6 && p.compare(0, 3, "<0x") == 0 && p[5] == '>';
}

// Pieces as the target format spells them: SentencePiece spaces as U+2581, llama2.c's decorated
// BOS/EOS as <s>/</s>.
std::vector<std::string> NormalisedPieces(const BpeModel& m) {
  std::vector<std::string> pieces = m.pieces;
  if (m.kind == BpeModel::Kind::kSentencePiece && m.space_marker != kSpaceMarker) {
    for (auto& p : pieces) {
      std::string out;
      for (char ch : p) {
        if (ch == ' ')
          out += kSpaceMarker;
        else
          out += ch;
      }
      p = out;
    }
  }
  if (m.name == "llama2c") {
    if (m.bos >= 0) pieces[m.bos] = "<s>";
    if (m.eos >= 0) pieces[m.eos] = "</s>";
  }
  return pieces;
}

// Merge list in rank order: the model's own, or derived from scores (see export.h).
std::vector<std::pair<int, int>> MergesOf(const BpeModel& m,
                                          const std::vector<std::string>& pieces) {
  if (!m.merges.empty() || m.scores.empty()) return m.merges;
  std::unordered_map<std::string, int> ids;
  for (int i = 0; i < static_cast<int>(pieces.size()); ++i) ids.emplace(pieces[i], i);
  // (score, id, split) sorted by score descending, then id, then split position.
  std::vector<std::tuple<float, int, size_t, int, int>> found;
  for (int id = 0; id < static_cast<int>(pieces.size()); ++id) {
    const std::string& p = pieces[id];
    if (m.types[id] == TokenType::kControl || IsBytePiece(p)) continue;
    for (size_t cut = 1; cut < p.size(); ++cut) {
      if ((static_cast<unsigned char>(p[cut]) & 0xC0) == 0x80) continue;  // inside a character
      auto a = ids.find(p.substr(0, cut));
      auto b = ids.find(p.substr(cut));
      if (a == ids.end() || b == ids.end()) continue;
      found.emplace_back(m.scores[id], id, cut, a->second, b->second);
    }
  }
  std::sort(found.begin(), found.end(), [](const auto& x, const auto& y) {
    if (std::get<0>(x) != std::get<0>(y)) return std::get<0>(x) > std::get<0>(y);
    return std::make_pair(std::get<1>(x), std::get<2>(x)) <
           std::make_pair(std::get<1>(y), std::get<2>(y));
  });
  std::vector<std::pair<int, int>> merges;
  for (const auto& f : found) merges.emplace_back(std::get<3>(f), std::get<4>(f));
  return merges;
}

}  // namespace

std::string TokenizerJsonText(const Tokenizer& tok) {
  const BpeModel& m = ModelOf(tok);
  const std::vector<std::string> pieces = NormalisedPieces(m);
  const int n = static_cast<int>(pieces.size());
  OrderedJson root;
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  OrderedJson added = OrderedJson::array();
  for (int i = 0; i < n; ++i) {
    TokenType t = m.types[i];
    if (t != TokenType::kControl && t != TokenType::kUnknown && t != TokenType::kUserDefined)
      continue;
    if (pieces[i].empty()) continue;
    added.push_back({{"id", i},
                     {"content", pieces[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", t != TokenType::kUserDefined}});
  }
  root["added_tokens"] = added;
  const bool spm = m.kind == BpeModel::Kind::kSentencePiece;
  if (spm && !m.split_on_space_marker) {
    OrderedJson seq = OrderedJson::array();
    if (m.add_space_prefix) seq.push_back({{"type", "Prepend"}, {"prepend", kSpaceMarker}});
    seq.push_back({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpaceMarker}});
    root["normalizer"] = {{"type", "Sequence"}, {"normalizers", seq}};
    root["pre_tokenizer"] = nullptr;
  } else if (spm) {
    root["normalizer"] = nullptr;
    root["pre_tokenizer"] = {{"type", "Metaspace"},
                             {"replacement", kSpaceMarker},
                             {"prepend_scheme", m.add_space_prefix ? "first" : "never"},
                             {"split", true}};
  } else {
    root["normalizer"] = nullptr;
    if (m.pre == PreTokenizer::kGpt2 || m.pre == PreTokenizer::kNone) {
      root["pre_tokenizer"] = {{"type", "ByteLevel"},
                               {"add_prefix_space", false},
                               {"trim_offsets", true},
                               {"use_regex", m.pre == PreTokenizer::kGpt2}};
    } else {
      OrderedJson split = {{"type", "Split"},
                           {"pattern", {{"Regex", std::string(PreTokenizerRegex(m.pre))}}},
                           {"behavior", "Isolated"},
                           {"invert", false}};
      OrderedJson level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", false},
                           {"use_regex", false}};
      root["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split, level}}};
    }
  }
  if (m.bos >= 0) {
    const std::string& bos = pieces[m.bos];
    root["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair", OrderedJson::array()},
        {"special_tokens", {{bos, {{"id", bos}, {"ids", {m.bos}}, {"tokens", {bos}}}}}}};
  } else {
    root["post_processor"] = nullptr;
  }
  root["decoder"] = nullptr;
  // The vocabulary object is serialised by hand: nlohmann's ordered_json looks keys up linearly,
  // which makes a 50K-piece object quadratic to build.
  std::unordered_map<std::string, int> seen;
  std::string vocab = "{";
  for (int i = 0; i < n; ++i) {
    // JSON strings are UTF-8: a piece that is not (a damaged or foreign vocabulary) cannot be
    // written, and nlohmann::json would throw its own type_error from dump().
    if (const size_t bad = FindInvalidUtf8(pieces[i]); bad != std::string::npos)
      Fail("tokenizer {}: piece {} is not valid UTF-8 (at byte {}); tokenizer.json cannot hold it",
           m.source, i, bad);
    auto [it, fresh] = seen.emplace(pieces[i], i);
    if (!fresh)
      Fail(
          "tokenizer {}: piece \"{}\" appears twice (ids {} and {}); tokenizer.json cannot hold it",
          m.source, pieces[i], it->second, i);
    vocab += (i ? ",\n  " : "\n  ") + OrderedJson(pieces[i]).dump() + ": " + std::to_string(i);
  }
  vocab += "\n }";
  OrderedJson merges = OrderedJson::array();
  for (auto [a, b] : MergesOf(m, pieces)) merges.push_back({pieces[a], pieces[b]});
  OrderedJson model = {{"type", "BPE"}, {"dropout", nullptr}};
  model["unk_token"] = m.unk >= 0 ? OrderedJson(pieces[m.unk]) : OrderedJson(nullptr);
  model["continuing_subword_prefix"] = nullptr;
  model["end_of_word_suffix"] = nullptr;
  model["fuse_unk"] = spm;
  model["byte_fallback"] = spm;
  model["ignore_merges"] = m.ignore_merges;
  const std::string kVocabSlot = "\x01vocab\x01";
  model["vocab"] = kVocabSlot;
  model["merges"] = std::move(merges);
  root["model"] = std::move(model);
  std::string text = root.dump(1) + "\n";
  const std::string slot = OrderedJson(kVocabSlot).dump();
  text.replace(text.find(slot), slot.size(), vocab);
  return text;
}

void AddGgufTokenizer(const Tokenizer& tok, GgufWriter& w) {
  const BpeModel& m = ModelOf(tok);
  const std::vector<std::string> pieces = NormalisedPieces(m);
  const int n = static_cast<int>(pieces.size());
  std::vector<int32_t> types(n);
  for (int i = 0; i < n; ++i) {
    types[i] = static_cast<int32_t>(m.types[i]);
    if (m.kind == BpeModel::Kind::kSentencePiece && m.types[i] == TokenType::kNormal &&
        IsBytePiece(pieces[i]))
      types[i] = static_cast<int32_t>(TokenType::kByte);
  }
  if (m.kind == BpeModel::Kind::kSentencePiece) {
    if (m.split_on_space_marker)
      Fail("tokenizer {}: Metaspace word splitting has no GGUF \"llama\" equivalent", m.source);
    std::vector<float> scores(n, 0.0f);
    if (!m.scores.empty()) {
      scores = m.scores;
    } else {
      std::vector<bool> set(n, false);
      std::unordered_map<std::string, int> ids;
      for (int i = 0; i < n; ++i) ids.emplace(pieces[i], i);
      for (size_t r = 0; r < m.merges.size(); ++r) {
        auto [a, b] = m.merges[r];
        auto it = ids.find(pieces[a] + pieces[b]);
        if (it != ids.end() && !set[it->second]) {
          scores[it->second] = -static_cast<float>(r);
          set[it->second] = true;
        }
      }
      for (int i = 0; i < n; ++i)
        if (!set[i]) scores[i] = -1e9f;  // never the product of a merge
    }
    w.SetString("tokenizer.ggml.model", "llama");
    w.SetStringArray("tokenizer.ggml.tokens", pieces);
    w.SetF32Array("tokenizer.ggml.scores", scores);
    w.SetI32Array("tokenizer.ggml.token_type", types);
    w.SetBool("tokenizer.ggml.add_space_prefix", m.add_space_prefix);
  } else {
    std::string pre;
    switch (m.pre) {
      case PreTokenizer::kGpt2:
        pre = "gpt-2";
        break;
      case PreTokenizer::kLlama3:
        pre = "llama-bpe";
        break;
      case PreTokenizer::kQwen2:
        pre = "qwen2";
        break;
      case PreTokenizer::kO200k:
        pre = "gpt-4o";
        break;
      case PreTokenizer::kNone:
        Fail("tokenizer {}: byte-level BPE without a pre-tokenizer regex has no GGUF name",
             m.source);
    }
    std::vector<std::string> merges;
    for (auto [a, b] : m.merges) merges.push_back(pieces[a] + " " + pieces[b]);
    w.SetString("tokenizer.ggml.model", "gpt2");
    w.SetString("tokenizer.ggml.pre", pre);
    w.SetStringArray("tokenizer.ggml.tokens", pieces);
    w.SetI32Array("tokenizer.ggml.token_type", types);
    w.SetStringArray("tokenizer.ggml.merges", merges);
    // Not one of ggml's keys (tokenizer/gguf_tokenizer.cpp reads it, other readers skip it).
    w.SetBool("sinkscope.tokenizer.ignore_merges", m.ignore_merges);
  }
  if (m.bos >= 0) w.SetU32("tokenizer.ggml.bos_token_id", m.bos);
  if (m.eos >= 0) w.SetU32("tokenizer.ggml.eos_token_id", m.eos);
  if (m.unk >= 0) w.SetU32("tokenizer.ggml.unknown_token_id", m.unk);
}

}  // namespace ss
