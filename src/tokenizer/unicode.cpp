#include "tokenizer/unicode.h"

#include <algorithm>
#include <iterator>

#include "common/error.h"

namespace ss {
namespace {

struct ClassRange {
  uint32_t first;
  uint32_t last;
  UnicodeClass cls;
};

constexpr ClassRange kClassRanges[] = {
#include "tokenizer/unicode_tables.inc"
};

struct CaseRange {
  uint32_t first;
  uint32_t last;
  LetterCase letter_case;
};

constexpr CaseRange kCaseRanges[] = {
#include "tokenizer/unicode_case_tables.inc"
};

}  // namespace

UnicodeClass ClassifyCodePoint(uint32_t cp) {
  // ASCII is the common case: answer it without the binary search.
  if (cp < 0x80) {
    if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return UnicodeClass::kLetter;
    if (cp >= '0' && cp <= '9') return UnicodeClass::kNumber;
  }
  auto it = std::upper_bound(std::begin(kClassRanges), std::end(kClassRanges), cp,
                             [](uint32_t c, const ClassRange& r) { return c < r.first; });
  if (it == std::begin(kClassRanges)) return UnicodeClass::kOther;
  --it;
  return cp <= it->last ? it->cls : UnicodeClass::kOther;
}

LetterCase CaseOf(uint32_t cp) {
  if (cp < 0x80) {
    if (cp >= 'A' && cp <= 'Z') return LetterCase::kUpper;
    if (cp >= 'a' && cp <= 'z') return LetterCase::kLower;
    return LetterCase::kUncased;
  }
  auto it = std::upper_bound(std::begin(kCaseRanges), std::end(kCaseRanges), cp,
                             [](uint32_t c, const CaseRange& r) { return c < r.first; });
  if (it == std::begin(kCaseRanges)) return LetterCase::kUncased;
  --it;
  return cp <= it->last ? it->letter_case : LetterCase::kUncased;
}

bool IsWhitespace(uint32_t cp) {
  // PropList.txt, White_Space (Unicode 14).
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

int Utf8SequenceLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

size_t FindInvalidUtf8(std::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    uint8_t b = s[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    int len;
    uint32_t cp, min;
    if ((b & 0xE0) == 0xC0) {
      len = 2;
      cp = b & 0x1F;
      min = 0x80;
    } else if ((b & 0xF0) == 0xE0) {
      len = 3;
      cp = b & 0x0F;
      min = 0x800;
    } else if ((b & 0xF8) == 0xF0) {
      len = 4;
      cp = b & 0x07;
      min = 0x10000;
    } else
      return i;
    if (n - i < static_cast<size_t>(len)) return i;
    for (int k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::vector<CodePoint> DecodeUtf8(std::string_view text) {
  SS_ASSERT(FindInvalidUtf8(text) == std::string_view::npos);
  std::vector<CodePoint> out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = 0; i < text.size();) {
    int len = Utf8SequenceLength(s[i]);
    uint32_t cp = len == 1 ? s[i] : (s[i] & (0x7F >> len));
    for (int k = 1; k < len; ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
    out.push_back({cp, static_cast<uint32_t>(i), static_cast<uint32_t>(len)});
    i += len;
  }
  return out;
}

void AppendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace ss
