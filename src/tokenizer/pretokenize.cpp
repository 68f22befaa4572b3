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
// tiktoken's o200k_base pat_str, the seven alternatives joined with '|'.
constexpr std::string_view kO200kRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

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
  bool Mark(size_t i) const {
    return i < n() && ClassifyCodePoint(cps[i].value) == UnicodeClass::kMark;
  }
  // o200k's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}].
  bool UpperLike(size_t i) const {
    return Mark(i) || (Letter(i) && CaseOf(cps[i].value) != LetterCase::kLower);
  }
  bool LowerLike(size_t i) const {
    return Mark(i) || (Letter(i) && CaseOf(cps[i].value) != LetterCase::kUpper);
  }
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

// \s*[\r\n]+|\s+(?!\S)|\s+ at a whitespace position i: the greedy \s* backs off to the last
// newline of the whitespace run; without one, MatchTrailingSpace.
size_t MatchNewlinesOrSpace(const Scanner& s, size_t i) {
  size_t end = i;
  size_t last_newline = SIZE_MAX;
  while (s.Space(end)) {
    if (s.Newline(end)) last_newline = end;
    ++end;
  }
  if (last_newline != SIZE_MAX) return last_newline + 1 - i;
  return MatchTrailingSpace(s, i);
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
  return MatchNewlinesOrSpace(s, i);
}

// o200k's first two alternatives at j (after the optional prefix); the match end or 0.
//   lower_required: [U]*[L]+  (U and L overlap in Lm, Lo, M: the greedy [U]* backs off to the last
//                              L of its run when no L follows it)
//   else:           [U]+[L]*
// each followed by an optional contraction.
size_t MatchO200kWord(const Scanner& s, size_t j, bool lower_required) {
  size_t e = j;
  while (s.UpperLike(e)) ++e;
  size_t end = 0;
  if (lower_required) {
    if (s.LowerLike(e)) {
      end = e;
      while (s.LowerLike(end)) ++end;
    } else {
      for (size_t q = e; q > j; --q)
        if (s.LowerLike(q - 1)) {
          end = q;
          break;
        }
      if (end == 0) return 0;
    }
  } else {
    if (e == j) return 0;
    end = e;
    while (s.LowerLike(end)) ++end;
  }
  return end + MatchContraction(s, end, true);
}

size_t MatchO200k(const Scanner& s, size_t i) {
  // [^\r\n\p{L}\p{N}]? tried with and then without the prefix, for each word alternative.
  const bool prefix = s.n() > i && !s.Newline(i) && !s.Letter(i) && !s.Number(i);
  for (bool lower_required : {true, false}) {
    if (prefix)
      if (size_t end = MatchO200kWord(s, i + 1, lower_required)) return end - i;
    if (size_t end = MatchO200kWord(s, i, lower_required)) return end - i;
  }
  // \p{N}{1,3}
  if (s.Number(i)) {
    size_t j = i;
    while (s.Number(j) && j - i < 3) ++j;
    return j - i;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n/]*'
  {
    size_t j = (s.at(i) == ' ') ? i + 1 : i;
    if (s.Other(j)) {
      while (s.Other(j)) ++j;
      while (s.Newline(j) || s.at(j) == '/') ++j;
      return j - i;
    }
  }
  SS_ASSERT(s.Space(i));
  return MatchNewlinesOrSpace(s, i);
}

}  // namespace

const char* PreTokenizerName(PreTokenizer pre) {
  switch (pre) {
    case PreTokenizer::kNone:
      return "none";
    case PreTokenizer::kGpt2:
      return "gpt-2";
    case PreTokenizer::kLlama3:
      return "llama3";
    case PreTokenizer::kQwen2:
      return "qwen2";
    case PreTokenizer::kO200k:
      return "o200k";
  }
  return "?";
}

std::string_view PreTokenizerRegex(PreTokenizer pre) {
  switch (pre) {
    case PreTokenizer::kNone:
      return {};
    case PreTokenizer::kGpt2:
      return kGpt2Regex;
    case PreTokenizer::kLlama3:
      return kLlama3Regex;
    case PreTokenizer::kQwen2:
      return kQwen2Regex;
    case PreTokenizer::kO200k:
      return kO200kRegex;
  }
  return {};
}

std::optional<PreTokenizer> PreTokenizerFromRegex(std::string_view regex) {
  if (regex == kGpt2Regex) return PreTokenizer::kGpt2;
  if (regex == kLlama3Regex) return PreTokenizer::kLlama3;
  if (regex == kQwen2Regex) return PreTokenizer::kQwen2;
  if (regex == kO200kRegex) return PreTokenizer::kO200k;
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
               : pre == PreTokenizer::kO200k  ? MatchO200k(s, i)
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
