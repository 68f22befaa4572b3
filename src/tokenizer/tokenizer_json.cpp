// Hugging Face tokenizer.json (the `tokenizers` library's serialization), BPE models only:
//   {
//     "added_tokens": [{"id": 0, "content": "<s>", "special": true, ...}, ...],
//     "normalizer": null | {"type": "Sequence", "normalizers": [
//                             {"type": "Prepend", "prepend": "▁"},
//                             {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
//     "pre_tokenizer": null
//                    | {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}
//                    | {"type": "Sequence", "pretokenizers": [
//                         {"type": "Split", "pattern": {"Regex": "..."}, ...},
//                         {"type": "ByteLevel", "use_regex": false, ...}]}
//                    | {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", ...},
//     "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}},
//                        ...]} (gives BOS),
//     "model": {"type": "BPE", "vocab": {"piece": id, ...},
//               "merges": ["a b", ...] or [["a", "b"], ...],
//               "byte_fallback": bool, "unk_token": "<unk>" | null, "ignore_merges": bool}
//   }
// A ByteLevel pre-tokenizer makes a GPT-2 style byte-level model; without one the model is
// SentencePiece-style (spaces escaped to U+2581 by the normalizer or Metaspace).
// Not applied: NFC normalizers (text is assumed to be NFC already) and BPE dropout.
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "common/file_util.h"
#include "tokenizer/bpe_tokenizer.h"

namespace ss {
namespace {

using Json = nlohmann::json;

const std::string kSpaceMarker = "\xE2\x96\x81";  // U+2581

std::string TypeOf(const std::string& name, const Json& node, const char* what) {
  if (!node.is_object() || !node.contains("type") || !node["type"].is_string())
    Fail("{}: {} is not an object with a \"type\" string", name, what);
  return node["type"].get<std::string>();
}

struct Builder {
  explicit Builder(const std::string& file) : name(file) {}
  const std::string& name;
  BpeModel model;
  bool byte_level = false;
  bool byte_level_regex = false;  // ByteLevel with use_regex: the GPT-2 split
  std::optional<PreTokenizer> split;
  bool prepend_marker = false;
  bool replace_spaces = false;

  void Normalizer(const Json& node) {
    if (node.is_null()) return;
    std::string type = TypeOf(name, node, "normalizer");
    if (type == "Sequence") {
      if (!node.contains("normalizers") || !node["normalizers"].is_array())
        Fail("{}: normalizer Sequence without a \"normalizers\" array", name);
      for (const Json& n : node["normalizers"]) Normalizer(n);
    } else if (type == "Prepend") {
      if (node.value("prepend", std::string()) != kSpaceMarker)
        Fail("{}: normalizer Prepend is only supported with \"▁\"", name);
      prepend_marker = true;
    } else if (type == "Replace") {
      const Json& pattern = node.value("pattern", Json());
      if (!pattern.is_object() || pattern.value("String", std::string()) != " " ||
          node.value("content", std::string()) != kSpaceMarker)
        Fail("{}: normalizer Replace is only supported for \" \" -> \"▁\"", name);
      replace_spaces = true;
    } else if (type == "NFC") {
      // Accepted, not applied: see the header comment.
    } else {
      Fail("{}: normalizer type '{}' is not supported (supported: Sequence, Prepend, Replace, NFC)",
           name, type);
    }
  }

  void PreTok(const Json& node) {
    if (node.is_null()) return;
    std::string type = TypeOf(name, node, "pre_tokenizer");
    if (type == "Sequence") {
      if (!node.contains("pretokenizers") || !node["pretokenizers"].is_array())
        Fail("{}: pre_tokenizer Sequence without a \"pretokenizers\" array", name);
      for (const Json& n : node["pretokenizers"]) PreTok(n);
    } else if (type == "ByteLevel") {
      if (node.value("add_prefix_space", false))
        Fail("{}: ByteLevel with add_prefix_space=true is not supported", name);
      byte_level = true;
      byte_level_regex = node.value("use_regex", true);
    } else if (type == "Split") {
      const Json& pattern = node.value("pattern", Json());
      std::string regex = pattern.is_object() ? pattern.value("Regex", std::string()) : "";
      split = PreTokenizerFromRegex(regex);
      if (!split)
        Fail(
            "{}: Split pre-tokenizer regex is not one of the supported ones (gpt-2, llama3, "
            "qwen2, o200k): {}",
            name, regex);
      if (node.value("behavior", std::string("Isolated")) != "Isolated" ||
          node.value("invert", false))
        Fail("{}: Split pre-tokenizer is only supported with behavior Isolated, invert false",
             name);
    } else if (type == "Metaspace") {
      if (node.value("replacement", kSpaceMarker) != kSpaceMarker)
        Fail("{}: Metaspace is only supported with replacement \"▁\"", name);
      replace_spaces = true;
      std::string scheme = node.value("prepend_scheme", std::string());
      if (scheme.empty()) scheme = node.value("add_prefix_space", true) ? "always" : "never";
      if (scheme != "never") prepend_marker = true;
      model.split_on_space_marker = node.value("split", true);
    } else {
      Fail(
          "{}: pre_tokenizer type '{}' is not supported (supported: ByteLevel, Split, "
          "Metaspace, Sequence)",
          name, type);
    }
  }
};

}  // namespace

// Long on purpose: the fields of tokenizer.json in the order the file nests them (model,
// vocabulary, merges, pre-tokenizer, normalizer, added tokens), each checked where it is read.
std::unique_ptr<Tokenizer> ParseTokenizerJson(const std::string& name, std::string_view text) {
  Json root;
  try {
    root = Json::parse(text);
  } catch (const Json::exception& e) {
    Fail("{}: not valid JSON: {}", name, e.what());
  }
  try {
    if (!root.is_object()) Fail("{}: expected a JSON object at the top level", name);
    if (!root.contains("model")) Fail("{}: no \"model\" object: not a tokenizer.json", name);
    const Json& m = root["model"];
    std::string type = m.is_object() && m.contains("type") ? m["type"].get<std::string>() : "";
    if (type.empty() && m.is_object() && m.contains("merges")) type = "BPE";  // older files
    if (type != "BPE")
      Fail("{}: model.type '{}' is not supported (only BPE: byte-level or SentencePiece-style)",
           name, type);
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (m.contains(key) && !m[key].is_null() && m[key] != "")
        Fail("{}: BPE {} is not supported", name, key);
    if (!m.contains("vocab") || !m["vocab"].is_object())
      Fail("{}: model.vocab is missing or not an object", name);

    Builder b(name);
    b.model.source = name;
    const Json& vocab = m["vocab"];
    const Json& added = root.value("added_tokens", Json::array());
    if (!added.is_array()) Fail("{}: added_tokens is not an array", name);

    // Vocabulary ids must be (nearly) dense: bound the table before allocating it.
    const size_t entries = vocab.size() + added.size();
    int64_t max_id = -1;
    auto check_id = [&](const Json& id, const std::string& piece) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
          id.get<int64_t>() >= static_cast<int64_t>(entries) + 1024)
        Fail("{}: token \"{}\" has id {}, expected an integer in 0..{}", name, piece, id.dump(),
             entries + 1023);
      max_id = std::max(max_id, id.get<int64_t>());
      return static_cast<int>(id.get<int64_t>());
    };
    std::vector<std::pair<int, std::string>> entries_list;
    for (auto it = vocab.begin(); it != vocab.end(); ++it)
      entries_list.emplace_back(check_id(it.value(), it.key()), it.key());
    for (const Json& a : added) {
      if (!a.is_object() || !a.contains("id") || !a.contains("content") ||
          !a["content"].is_string())
        Fail("{}: added_tokens entry without id and content: {}", name, a.dump().substr(0, 80));
      check_id(a["id"], a["content"].get<std::string>());
    }
    if (max_id < 0) Fail("{}: the vocabulary is empty", name);
    const int n = static_cast<int>(max_id + 1);
    b.model.pieces.assign(n, std::string());
    b.model.types.assign(n, TokenType::kUnused);
    std::vector<bool> seen(n, false);
    for (auto& [id, piece] : entries_list) {
      if (seen[id]) Fail("{}: id {} is used by two vocabulary entries", name, id);
      seen[id] = true;
      b.model.pieces[id] = piece;
      b.model.types[id] = TokenType::kNormal;
    }
    for (const Json& a : added) {
      int id = static_cast<int>(a["id"].get<int64_t>());
      std::string content = a["content"].get<std::string>();
      if (seen[id] && b.model.pieces[id] != content)
        Fail("{}: added token \"{}\" has id {}, which the vocabulary gives to \"{}\"", name,
             content, id, b.model.pieces[id]);
      seen[id] = true;
      b.model.pieces[id] = content;
      b.model.types[id] = a.value("special", false) ? TokenType::kControl : TokenType::kUserDefined;
      b.model.atomic_tokens.push_back(id);
    }
    std::unordered_map<std::string, int> ids;
    for (int i = 0; i < n; ++i)
      if (seen[i]) ids.emplace(b.model.pieces[i], i);
    auto id_of = [&](const std::string& piece) {
      auto it = ids.find(piece);
      return it == ids.end() ? -1 : it->second;
    };

    const Json& merges = m.value("merges", Json::array());
    if (!merges.is_array()) Fail("{}: model.merges is not an array", name);
    b.model.merges.reserve(merges.size());
    for (size_t r = 0; r < merges.size(); ++r) {
      const Json& entry = merges[r];
      std::string left, right;
      if (entry.is_string()) {
        std::string s = entry.get<std::string>();
        size_t space = s.size() > 1 ? s.find(' ', 1) : std::string::npos;
        if (space == std::string::npos)
          Fail("{}: model.merges[{}] is \"{}\", expected \"left right\"", name, r, s);
        left = s.substr(0, space);
        right = s.substr(space + 1);
      } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() &&
                 entry[1].is_string()) {
        left = entry[0].get<std::string>();
        right = entry[1].get<std::string>();
      } else {
        Fail("{}: model.merges[{}] is neither \"a b\" nor [\"a\", \"b\"]", name, r);
      }
      int a = id_of(left), c = id_of(right);
      if (a < 0 || c < 0)
        Fail("{}: model.merges[{}] (\"{}\", \"{}\") names a piece that is not in the vocabulary",
             name, r, left, right);
      b.model.merges.emplace_back(a, c);
    }

    b.Normalizer(root.value("normalizer", Json()));
    b.PreTok(root.value("pre_tokenizer", Json()));
    if (b.byte_level) {
      b.model.kind = BpeModel::Kind::kByteLevel;
      b.model.pre = b.split              ? *b.split
                    : b.byte_level_regex ? PreTokenizer::kGpt2
                                         : PreTokenizer::kNone;
      b.model.name = std::string("bpe/") + PreTokenizerName(b.model.pre);
    } else {
      if (b.split) Fail("{}: a Split pre-tokenizer without ByteLevel is not supported", name);
      b.model.kind = BpeModel::Kind::kSentencePiece;
      b.model.name = "spm";
      b.model.space_marker = b.replace_spaces ? kSpaceMarker : " ";
      b.model.add_space_prefix = b.prepend_marker;
    }
    b.model.ignore_merges = m.value("ignore_merges", false);

    const Json& unk = m.value("unk_token", Json());
    if (unk.is_string()) {
      b.model.unk = id_of(unk.get<std::string>());
      if (b.model.unk < 0)
        Fail("{}: unk_token \"{}\" is not in the vocabulary", name, unk.get<std::string>());
    }
    // BOS: the first special token of the post-processor's single-sequence template, else a
    // conventional name. EOS is not recorded in tokenizer.json (it is in tokenizer_config.json):
    // conventional names are used.
    const Json& post = root.value("post_processor", Json());
    if (post.is_object() && post.value("type", std::string()) == "TemplateProcessing" &&
        post.contains("single") && post["single"].is_array()) {
      for (const Json& item : post["single"]) {
        if (item.is_object() && item.contains("SpecialToken")) {
          const Json& st = item["SpecialToken"];
          if (st.is_object() && st.contains("id") && st["id"].is_string())
            b.model.bos = id_of(st["id"].get<std::string>());
          break;
        }
        if (item.is_object() && item.contains("Sequence")) break;
      }
    }
    if (b.model.bos < 0)
      for (const char* s : {"<s>", "<|begin_of_text|>", "<|endoftext|>"})
        if ((b.model.bos = id_of(s)) >= 0) break;
    for (const char* s : {"</s>", "<|end_of_text|>", "<|endoftext|>", "<|im_end|>"})
      if ((b.model.eos = id_of(s)) >= 0) break;
    return std::make_unique<BpeTokenizer>(std::move(b.model));
  } catch (const Json::exception& e) {
    Fail("{}: unexpected tokenizer.json structure: {}", name, e.what());
  }
}

std::unique_ptr<Tokenizer> LoadTokenizerJson(const std::string& path) {
  return ParseTokenizerJson(path, ReadFile(path));
}

}  // namespace ss
