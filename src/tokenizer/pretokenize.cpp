#include "tokenizer/pretokenize.h"

#include "common/error.h"
#include "tokenizer/unicode.h"

namespace ss {
namespace {

// The regex strings as they appear in tokenizer.json files ("pattern": {"Regex": ...}).
constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Code points of the text with the classes the regexes ask about.
struct Scanner {
  std::vector<CodePoint> cps;
  size_t n() const { return cps.size(); }
  uint32_t at(size_t i) const { return i < cps.size() ? cps[i].value : 0xFFFFFFFFu; }
  bool Letter(size_t i) const { return i < n() && IsLetter(cps[i].value); }
  bool Number(size_t i) const { return i < n() && IsNumber(cps[i].value); }
  bool Space(size_t i) const { return i < n() && IsWhitespace(cps[i].value); }
  // [^\s\p{L}\p{N}]
  bool Other(size_t i) const { return i < n() && !Space(i) && !Letter(i) && !Number(i); }
  bool Newline(size_t i) const { return at(i) == '\r' || at(i) == '\n'; }
};

uint32_t Lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// 's 't 're 've 'm 'll 'd at i; returns the match length in code points or 0.
size_t MatchContraction(const Scanner& s, size_t i, bool ignore_case) {
  if (s.at(i) != '\'') return 0;
  auto c = [&](size_t k) { return ignore_case ? Lower(s.at(k)) : s.at(k); };
  uint32_t a = c(i + 1), b = c(i + 2);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// \s+(?!\S)|\s+ at a whitespace position i: the run minus its last character when a
// non-space follows (so that the last space can lead the next word), else the whole run.
size_t MatchTrailingSpace(const Scanner& s, size_t i) {
  size_t end = i;
  while (s.Space(end)) ++end;
  if (end < s.n() && end - i > 1) return end - i - 1;
  return end - i;
}

size_t MatchGpt2(const Scanner& s, size_t i) {
  if (size_t k = MatchContraction(s, i, false)) return k;
  size_t j = (s.at(i) == ' ') ? i + 1 : i;  // the optional leading space of ` ?X+`
  if (s.Letter(j)) {
    while (s.Letter(j)) ++j;
    return j - i;
  }
  if (s.Number(j)) {
    while (s.Number(j)) ++j;
    return j - i;
  }
  if (s.Other(j)) {
    while (s.Other(j)) ++j;
    return j - i;
  }
  SS_ASSERT(s.Space(i));
  return MatchTrailingSpace(s, i);
}

size_t MatchLlama3(const Scanner& s, size_t i, size_t max_digits) {
  if (size_t k = MatchContraction(s, i, true)) return k;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  {
    size_t j = i;
    if (!s.Newline(i) && !s.Letter(i) && !s.Number(i) && s.Letter(i + 1)) j = i + 1;
    if (s.Letter(j)) {
      while (s.Letter(j)) ++j;
      return j - i;
    }
  }
  // \p{N}{1,max}
  if (s.Number(i)) {
    size_t j = i;
    while (s.Number(j) && j - i < max_digits) ++j;
    return j - i;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  {
    size_t j = (s.at(i) == ' ') ? i + 1 : i;
    if (s.Other(j)) {
      while (s.Other(j)) ++j;
      while (s.Newline(j)) ++j;
      return j - i;
    }
  }
  SS_ASSERT(s.Space(i));
  // \s*[\r\n]+ : the greedy \s* backs off to the last newline of the whitespace run.
  size_t end = i;
  size_t last_newline = SIZE_MAX;
  while (s.Space(end)) {
    if (s.Newline(end)) last_newline = end;
    ++end;
  }
  if (last_newline != SIZE_MAX) return last_newline + 1 - i;
  return MatchTrailingSpace(s, i);
}

}  // namespace

const char* PreTokenizerName(PreTokenizer pre) {
  switch (pre) {
    case PreTokenizer::kNone: return "none";
    case PreTokenizer::kGpt2: return "gpt-2";
    case PreTokenizer::kLlama3: return "llama3";
    case PreTokenizer::kQwen2: return "qwen2";
  }
  return "?";
}

std::string_view PreTokenizerRegex(PreTokenizer pre) {
  switch (pre) {
    case PreTokenizer::kNone: return {};
    case PreTokenizer::kGpt2: return kGpt2Regex;
    case PreTokenizer::kLlama3: return kLlama3Regex;
    case PreTokenizer::kQwen2: return kQwen2Regex;
  }
  return {};
}

std::optional<PreTokenizer> PreTokenizerFromRegex(std::string_view regex) {
  if (regex == kGpt2Regex) return PreTokenizer::kGpt2;
  if (regex == kLlama3Regex) return PreTokenizer::kLlama3;
  if (regex == kQwen2Regex) return PreTokenizer::kQwen2;
  return std::nullopt;
}

std::vector<std::string_view> PreTokenize(PreTokenizer pre, std::string_view text) {
  std::vector<std::string_view> words;
  if (text.empty()) return words;
  if (pre == PreTokenizer::kNone) {
    words.push_back(text);
    return words;
  }
  Scanner s{DecodeUtf8(text)};
  for (size_t i = 0; i < s.n();) {
    size_t k = pre == PreTokenizer::kGpt2     ? MatchGpt2(s, i)
               : pre == PreTokenizer::kLlama3 ? MatchLlama3(s, i, 3)
                                              : MatchLlama3(s, i, 1);
    SS_ASSERT(k > 0 && i + k <= s.n());
    size_t begin = s.cps[i].offset;
    size_t end = (i + k < s.n()) ? s.cps[i + k].offset : text.size();
    words.push_back(text.substr(begin, end - begin));
    i += k;
  }
  return words;
}

}  // namespace ss
