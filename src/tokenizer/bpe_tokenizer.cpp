#include "tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>

#include "common/error.h"
#include "tokenizer/unicode.h"

namespace ss {
namespace {

// GPT-2's bytes_to_unicode (openai/gpt-2 encoder.py): printable Latin-1 bytes ('!'..'~',
// '¡'..'¬', '®'..'ÿ') stand for themselves; the other 68 bytes map, in byte order, to U+0100 + n,
// so that every byte has a visible, non-space character.
std::array<uint32_t, 256> BytesToUnicode() {
  std::array<uint32_t, 256> map{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    map[b] = printable ? b : next++;
  }
  return map;
}

int ParseBytePiece(const std::string& piece) {
  // "<0xXX>" with upper-case hex, SentencePiece's spelling of byte-fallback pieces.
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  int value = 0;
  for (int k = 3; k < 5; ++k) {
    char c = piece[k];
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    value = value * 16 + d;
  }
  return value;
}

struct Symbol {
  uint32_t start;
  uint32_t length;  // 0 once merged into its left neighbour
  int prev;
  int next;
  int id;       // -1 if the text is not in the vocabulary (yet)
  bool frozen;  // byte-fallback symbols in llama2.c mode never merge
};

struct Candidate {
  double priority;  // lower merges first: -score or rank
  uint32_t position;
  int left;
  int right;
  uint32_t length;
  int id;
  bool operator>(const Candidate& o) const {
    return priority != o.priority ? priority > o.priority : position > o.position;
  }
};

}  // namespace

BpeTokenizer::BpeTokenizer(BpeModel model) : model_(std::move(model)) {
  const std::string& src = model_.source;
  const int n = static_cast<int>(model_.pieces.size());
  if (n == 0) Fail("{}: the vocabulary is empty", src);
  if (model_.types.empty()) model_.types.assign(n, TokenType::kNormal);
  if (static_cast<int>(model_.types.size()) != n)
    Fail("{}: {} token types for {} tokens", src, model_.types.size(), n);
  if (!model_.scores.empty() && static_cast<int>(model_.scores.size()) != n)
    Fail("{}: {} scores for {} tokens", src, model_.scores.size(), n);
  for (auto [what, id] :
       {std::pair{"BOS", model_.bos}, {"EOS", model_.eos}, {"unknown", model_.unk}})
    if (id < -1 || id >= n)
      Fail("{}: {} token id {} is outside the vocabulary of {}", src, what, id, n);

  piece_to_id_.reserve(n);
  for (int i = 0; i < n; ++i) piece_to_id_.emplace(model_.pieces[i], i);  // first id wins

  byte_tokens_.fill(-1);
  for (int i = 0; i < n; ++i) {
    int b = ParseBytePiece(model_.pieces[i]);
    if (b >= 0 && byte_tokens_[b] < 0) byte_tokens_[b] = i;
  }

  if (model_.kind == BpeModel::Kind::kByteLevel) {
    std::array<uint32_t, 256> map = BytesToUnicode();
    for (int b = 0; b < 256; ++b) {
      AppendUtf8(byte_to_char_[b], map[b]);
      char_to_byte_[map[b]] = static_cast<uint8_t>(b);
    }
  }

  // A NaN score would break the heap's ordering: such a piece never wins a merge.
  for (float& score : model_.scores)
    if (std::isnan(score)) score = -std::numeric_limits<float>::infinity();
  merge_ranks_.reserve(model_.merges.size());
  for (size_t r = 0; r < model_.merges.size(); ++r) {
    auto [a, b] = model_.merges[r];
    if (a < 0 || a >= n || b < 0 || b >= n)
      Fail("{}: merge {} refers to token ids {} and {} outside the vocabulary of {}", src, r, a, b,
           n);
    int id = Lookup(model_.pieces[a] + model_.pieces[b]);
    if (id < 0)
      Fail("{}: merge {} (\"{}\" + \"{}\") produces a piece that is not in the vocabulary", src, r,
           model_.pieces[a], model_.pieces[b]);
    merge_ranks_.emplace(PairKey(a, b), MergeResult{static_cast<int>(r), id});  // first rank wins
  }

  for (int id : model_.atomic_tokens)
    if (id < 0 || id >= n)
      Fail("{}: added token id {} is outside the vocabulary of {}", src, id, n);
  // Longest first, so that "<|im_start|>" wins over a shorter added token that is its prefix.
  std::erase_if(model_.atomic_tokens, [&](int id) { return model_.pieces[id].empty(); });
  std::stable_sort(model_.atomic_tokens.begin(), model_.atomic_tokens.end(),
                   [&](int a, int b) { return model_.pieces[a].size() > model_.pieces[b].size(); });

  if (model_.kind == BpeModel::Kind::kSentencePiece && !model_.space_marker.empty()) {
    const std::string& marker = model_.space_marker;
    split_before_marker_ = true;
    for (const std::string& piece : model_.pieces) {
      for (size_t k = piece.find(marker, 1); k != std::string::npos;
           k = piece.find(marker, k + 1)) {
        if (k < marker.size() || piece.compare(k - marker.size(), marker.size(), marker) != 0) {
          split_before_marker_ = false;
          break;
        }
      }
      if (!split_before_marker_) break;
    }
  }

  decoded_.resize(n);
  for (int i = 0; i < n; ++i) {
    const std::string& piece = model_.pieces[i];
    TokenType type = model_.types[i];
    std::string& out = decoded_[i];
    if (type == TokenType::kControl) continue;  // BOS, EOS, <|endoftext|>: print nothing
    if (model_.kind == BpeModel::Kind::kSentencePiece) {
      int b = ParseBytePiece(piece);
      if (b >= 0 && (type == TokenType::kByte || type == TokenType::kNormal ||
                     type == TokenType::kUndefined)) {
        out = std::string(1, static_cast<char>(b));
        continue;
      }
      if (type == TokenType::kUserDefined) {
        out = piece;
        continue;
      }
      const std::string& marker = model_.space_marker;
      for (size_t k = 0; k < piece.size();) {
        if (!marker.empty() && piece.compare(k, marker.size(), marker) == 0) {
          out += ' ';
          k += marker.size();
        } else {
          out += piece[k++];
        }
      }
    } else {
      if (type == TokenType::kUserDefined || FindInvalidUtf8(piece) != std::string_view::npos) {
        out = piece;
        continue;
      }
      for (const CodePoint& cp : DecodeUtf8(piece)) {
        auto it = char_to_byte_.find(cp.value);
        if (it != char_to_byte_.end())
          out += static_cast<char>(it->second);
        else
          out.append(piece, cp.offset, cp.length);  // added tokens are stored unmapped
      }
    }
  }
}

int BpeTokenizer::SpecialTokenId(std::string_view text) const {
  const int id = Lookup(text);
  if (id < 0) return -1;
  const TokenType type = model_.types[id];
  return type == TokenType::kControl || type == TokenType::kUserDefined ? id : -1;
}

int BpeTokenizer::Lookup(std::string_view piece) const {
  auto it = piece_to_id_.find(std::string(piece));
  return it == piece_to_id_.end() ? -1 : it->second;
}

void BpeTokenizer::EncodeWord(const std::string& word, std::vector<int>& out) const {
  if (word.empty()) return;
  if (model_.ignore_merges) {
    int id = Lookup(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (const CodePoint& cp : DecodeUtf8(word)) {
    int id = Lookup(std::string_view(word).substr(cp.offset, cp.length));
    if (id < 0 && model_.byte_fallback_before_merge) {
      for (uint32_t k = 0; k < cp.length; ++k) {
        int byte_id = byte_tokens_[static_cast<uint8_t>(word[cp.offset + k])];
        symbols.push_back({cp.offset + k, 1, 0, 0, byte_id, true});
      }
      continue;
    }
    symbols.push_back({cp.offset, cp.length, 0, 0, id, false});
  }
  const int n = static_cast<int>(symbols.size());
  for (int i = 0; i < n; ++i) {
    symbols[i].prev = i - 1;
    symbols[i].next = i + 1 < n ? i + 1 : -1;
  }

  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto consider = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& a = symbols[left];
    const Symbol& b = symbols[right];
    if (a.frozen || b.frozen) return;
    uint32_t length = a.length + b.length;
    if (!model_.scores.empty()) {
      int id = Lookup(std::string_view(word).substr(a.start, length));
      if (id < 0) return;
      heap.push({-static_cast<double>(model_.scores[id]), a.start, left, right, length, id});
    } else {
      if (a.id < 0 || b.id < 0) return;
      auto it = merge_ranks_.find(PairKey(a.id, b.id));
      if (it == merge_ranks_.end()) return;
      heap.push(
          {static_cast<double>(it->second.rank), a.start, left, right, length, it->second.id});
    }
  };
  for (int i = 0; i + 1 < n; ++i) consider(i, i + 1);

  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Symbol& a = symbols[c.left];
    Symbol& b = symbols[c.right];
    // Skip candidates made stale by an earlier merge of either side.
    if (a.length == 0 || b.length == 0 || a.next != c.right || a.length + b.length != c.length)
      continue;
    a.length = c.length;
    a.id = c.id;
    b.length = 0;
    a.next = b.next;
    if (b.next >= 0) symbols[b.next].prev = c.left;
    consider(a.prev, c.left);
    consider(c.left, a.next);
  }

  for (int i = 0; i >= 0 && i < n; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    for (uint32_t k = 0; k < s.length; ++k) {
      uint8_t byte = static_cast<uint8_t>(word[s.start + k]);
      int id = byte_tokens_[byte] >= 0 ? byte_tokens_[byte] : model_.unk;
      if (id < 0)
        Fail(
            "{}: cannot encode byte 0x{:02X}: the vocabulary has neither a byte token nor an "
            "unknown token",
            model_.source, byte);
      out.push_back(id);
      if (byte_tokens_[byte] < 0) break;  // one unknown token for the whole character
    }
  }
}

void BpeTokenizer::EncodeSegment(std::string_view text, bool after_special,
                                 std::vector<int>& out) const {
  if (text.empty()) return;
  if (model_.kind == BpeModel::Kind::kSentencePiece) {
    // SentencePiece escapes spaces as U+2581 and adds a "dummy prefix" space so that the first
    // word is tokenized like any word after a space (llama.cpp adds it at the start of the text
    // and after each special token).
    std::string word;
    word.reserve(text.size() * 3 / 2 + 3);
    if (model_.add_space_prefix && after_special) word = model_.space_marker;
    for (char c : text) {
      if (c == ' ')
        word += model_.space_marker;
      else
        word += c;
    }
    const std::string& marker = model_.space_marker;
    if (!model_.split_on_space_marker && !split_before_marker_) {
      EncodeWord(word, out);
      return;
    }
    // Metaspace's split cuts before every marker; the optimisation only before a marker that
    // follows another character (runs of markers stay together: "▁▁" is a piece).
    size_t start = 0;
    while (start < word.size()) {
      size_t next = word.find(marker, start + 1);
      if (!model_.split_on_space_marker)
        while (next != std::string::npos && next >= marker.size() &&
               word.compare(next - marker.size(), marker.size(), marker) == 0)
          next = word.find(marker, next + 1);
      if (next == std::string::npos) next = word.size();
      EncodeWord(word.substr(start, next - start), out);
      start = next;
    }
    return;
  }
  std::string mapped;
  for (std::string_view w : PreTokenize(model_.pre, text)) {
    mapped.clear();
    for (char c : w) mapped += byte_to_char_[static_cast<uint8_t>(c)];
    EncodeWord(mapped, out);
  }
}

std::vector<int> BpeTokenizer::Encode(std::string_view text, bool add_bos) const {
  size_t bad = FindInvalidUtf8(text);
  if (bad != std::string_view::npos) Fail("prompt is not valid UTF-8 at byte {}", bad);
  std::vector<int> out;
  if (add_bos && model_.bos >= 0) out.push_back(model_.bos);
  if (model_.atomic_tokens.empty()) {
    EncodeSegment(text, true, out);
    return out;
  }
  // Added tokens are cut out of the text first, longest match at each position.
  size_t segment_start = 0;
  bool after_special = true;
  for (size_t i = 0; i < text.size();) {
    int match = -1;
    for (int id : model_.atomic_tokens) {
      const std::string& p = model_.pieces[id];
      if (p[0] == text[i] && text.compare(i, p.size(), p) == 0) {
        match = id;
        break;
      }
    }
    if (match < 0) {
      ++i;
      continue;
    }
    EncodeSegment(text.substr(segment_start, i - segment_start), after_special, out);
    out.push_back(match);
    after_special = true;
    i += model_.pieces[match].size();
    segment_start = i;
  }
  EncodeSegment(text.substr(segment_start), after_special, out);
  return out;
}

std::string BpeTokenizer::DecodeToken(int prev_token, int token) const {
  if (token < 0 || token >= vocab_size())
    Fail("{}: token id {} is outside the vocabulary of {}", model_.source, token, vocab_size());
  const std::string& s = decoded_[token];
  // Drop the dummy-prefix space of the first word (llama2.c does this after BOS).
  if (model_.kind == BpeModel::Kind::kSentencePiece && model_.add_space_prefix &&
      (prev_token < 0 || prev_token == model_.bos) && !s.empty() && s[0] == ' ')
    return s.substr(1);
  return s;
}

}  // namespace ss
