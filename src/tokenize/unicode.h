// Unicode character classes for the tokenizers' scanners: one table lookup
// per code point, generated at build time from a pinned Unicode version.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace outboard::tokenize {

// Letter, number and space follow the pinned Unicode version. Punctuation,
// control and nonspacing mark serve BERT only and follow HF tokenizers,
// whose character categories are Unicode 8.0's (see gen_unicode_tables.py).
enum CharClass : uint8_t {
  kLetter = 1,          ///< \p{L}
  kNumber = 2,          ///< \p{N}
  kSpace = 4,           ///< \s: the White_Space property
  kPunct = 8,           ///< P* (Unicode 8.0, as HF's BERT)
  kMarkNonspacing = 16, ///< Mn (Unicode 8.0, as HF's BERT strip-accents)
  kControl = 32,        ///< Cc Cf Co Cs (Unicode 8.0, as HF's BERT clean-text)
  kCjk = 64,            ///< BERT's CJK ideograph ranges
};

uint8_t char_class(char32_t cp);

namespace detail {
/// 2 bits for each code point of the Basic Multilingual Plane: one load,
/// where char_class and case_class are a call and two loads each.
using BmpBits = std::array<uint8_t, 0x10000 / 4>;
inline uint8_t bmp_bits(const BmpBits& table, char32_t cp) { return (table[cp / 4] >> (cp % 4 * 2)) & 3; }
/// What the byte-level pre-tokenizers ask of each BMP code point
/// (char_kind.h's Kind: letter, number, space, other).
extern const BmpBits kBmpKinds;
}  // namespace detail

// The word classes of o200k's and Tekken's patterns (pinned version).
enum CaseClass : uint8_t {
  kUpperish = 1,  ///< [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
  kLowerish = 2,  ///< [\p{Ll}\p{Lm}\p{Lo}\p{M}]
};

uint8_t case_class(char32_t cp);

namespace detail {
extern const BmpBits kBmpCases;  ///< case_class of each BMP code point
}  // namespace detail

/// case_class(cp), inline for the Basic Multilingual Plane: o200k's words
/// ask it of every non-ASCII character.
inline uint8_t case_of(char32_t cp) { return cp < 0x10000 ? detail::bmp_bits(detail::kBmpCases, cp) : case_class(cp); }

std::string_view unicode_version();

/// Canonical decomposition (NFD) of one code point; false if it has none.
bool decompose(char32_t cp, const char32_t*& out, size_t& length);
/// Full lowercase mapping of one code point (1 to 3 code points); false if unchanged.
bool lowercase(char32_t cp, const char32_t*& out, size_t& length);
/// Appends cp as UTF-8.
void append_utf8(char32_t cp, std::string& out);

/// Decodes the code point at p (valid UTF-8 assumed); sets len to 1..4.
inline char32_t decode_valid(const uint8_t* p, int& len) {
  uint8_t b = p[0];
  if (b < 0x80) {
    len = 1;
    return b;
  }
  if (b < 0xE0) {
    len = 2;
    return (char32_t(b & 0x1F) << 6) | (p[1] & 0x3F);
  }
  if (b < 0xF0) {
    len = 3;
    return (char32_t(b & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  }
  len = 4;
  return (char32_t(b & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) | (char32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}

/// Length of the longest valid UTF-8 sequence at p (1..4), or 0 when the
/// bytes there are ill-formed; `bad` is then the length of the maximal
/// subpart (what Python's errors="replace" turns into one U+FFFD).
int utf8_sequence(const uint8_t* p, size_t n, int& bad);

/// Offset of the first byte of `text` that starts no valid UTF-8 character
/// (text.size() if none).
size_t first_invalid_utf8(std::string_view text);

}  // namespace outboard::tokenize
