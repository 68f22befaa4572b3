// Just enough Unicode for tokenizers: strict UTF-8 decoding, general-category classes (from the
// generated unicode_tables.inc, full Unicode 14 coverage) and the White_Space property.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ss {

// The major general category (the first letter of Unicode's two-letter category).
enum class UnicodeClass : uint8_t {
  kOther,        // C*: control, format, private use, surrogates and unassigned
  kLetter,       // L*: \p{L}
  kNumber,       // N*: \p{N} (Nd, Nl, No: '3', 'Ⅻ', '½')
  kMark,         // M*: combining marks (Khmer vowel signs, accents): not \p{L}
  kPunctuation,  // P*: \p{P}
  kSymbol,       // S*
  kSeparator,    // Z*: space separators, line/paragraph separators
};

UnicodeClass ClassifyCodePoint(uint32_t cp);
// A letter's case class: Lu and Lt are kUpper, Ll kLower, other letters (Lm, Lo) and non-letters
// kUncased (unicode_case_tables.inc, from the same database).
enum class LetterCase : uint8_t { kUncased, kUpper, kLower };
LetterCase CaseOf(uint32_t cp);
inline bool IsLetter(uint32_t cp) { return ClassifyCodePoint(cp) == UnicodeClass::kLetter; }
inline bool IsNumber(uint32_t cp) { return ClassifyCodePoint(cp) == UnicodeClass::kNumber; }
// Unicode's White_Space property (PropList.txt), which is what regex engines mean by \s.
bool IsWhitespace(uint32_t cp);

// Byte offset of the first invalid UTF-8 sequence (overlong forms, surrogates, code points above
// U+10FFFF and truncated sequences are invalid), or std::string_view::npos if `text` is valid.
size_t FindInvalidUtf8(std::string_view text);
// Length of the UTF-8 sequence starting with byte `lead` (1 for invalid leads).
int Utf8SequenceLength(uint8_t lead);

struct CodePoint {
  uint32_t value;
  uint32_t offset;  // byte offset into the text
  uint32_t length;  // bytes
};
// Decodes valid UTF-8 (checked with FindInvalidUtf8 first).
std::vector<CodePoint> DecodeUtf8(std::string_view text);
void AppendUtf8(std::string& out, uint32_t cp);

}  // namespace ss
