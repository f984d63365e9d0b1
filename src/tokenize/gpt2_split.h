// GPT-2's pre-tokenizer as a hand-written scanner. Equivalent to
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (and to tiktoken's r50k pattern) with no regex engine and no lookahead
// beyond one code point.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tokenize/small_load.h"
#include "tokenize/unicode.h"

namespace outboard::tokenize {

namespace detail {
enum class Kind : uint8_t { kLetter, kNumber, kSpace, kOther };
inline constexpr auto kAsciiKind = [] {
  std::array<Kind, 128> t{};
  for (int c = 0; c < 128; ++c)
    t[c] = ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ? Kind::kLetter
           : (c >= '0' && c <= '9')                ? Kind::kNumber
           : (c == ' ' || (c >= 0x09 && c <= 0x0D)) ? Kind::kSpace
                                                    : Kind::kOther;
  return t;
}();
inline Kind kind_of(char32_t cp) {
  if (cp < 0x80) return kAsciiKind[cp];
  uint8_t c = char_class(cp);
  if (c & kLetter) return Kind::kLetter;
  if (c & kNumber) return Kind::kNumber;
  if (c & kSpace) return Kind::kSpace;
  return Kind::kOther;
}

// Eight bytes at a time (SWAR): the high bit of each byte of the result is
// set where `x` holds an ASCII letter (digit). Bytes are cleared to 7 bits
// before adding, so no carry crosses into the next byte.
static_assert(std::endian::native == std::endian::little, "byte i of a loaded word is its i-th lowest");
constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
inline uint64_t ascii_letters(uint64_t x) {
  const uint64_t y = (x | 0x20 * kOnes) & 0x7F * kOnes;  // lower case: letters are 'a'..'z'
  return (y + 0x1F * kOnes) & ~(y + 0x05 * kOnes) & ~x & kHigh;  // >= 'a', not >= '{', ASCII
}
inline uint64_t ascii_digits(uint64_t x) {
  const uint64_t y = x & 0x7F * kOnes;
  return (y + 0x50 * kOnes) & ~(y + 0x46 * kOnes) & ~x & kHigh;  // >= '0', not >= ':', ASCII
}
}  // namespace detail

/// Calls emit(begin, end) with the byte offsets of each piece of `text`
/// (which must be valid UTF-8), in order.
template <typename Emit>
void split_gpt2(std::string_view text, Emit&& emit) {
  using detail::Kind;
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  auto at = [&](size_t i, int& len) { return decode_valid(s + i, len); };
  // End of the run of characters of `kind` starting at i. Letter and digit
  // runs skip ASCII eight bytes at a time: no branch per character.
  auto run = [&](size_t i, Kind kind) {
    const bool swar = kind == Kind::kLetter || kind == Kind::kNumber;
    while (i < n) {
      if (s[i] >= 0x80) {
        int len;
        if (detail::kind_of(at(i, len)) != kind) break;
        i += len;
      } else if (swar && i + 8 <= n) {
        const uint64_t x = load8(s + i);
        const uint64_t same = kind == Kind::kLetter ? detail::ascii_letters(x) : detail::ascii_digits(x);
        if (same == detail::kHigh) {
          i += 8;
          continue;
        }
        i += std::countr_zero(~same & detail::kHigh) / 8;
        if (s[i] < 0x80) break;  // ASCII of another kind; a non-ASCII character is decoded above
      } else {
        if (detail::kAsciiKind[s[i]] != kind) break;
        ++i;
      }
    }
    return i;
  };

  size_t i = 0;
  while (i < n) {
    int len;
    char32_t c = at(i, len);
    if (c == '\'' && i + 1 < n) {
      uint8_t b = s[i + 1];
      if (b == 's' || b == 'd' || b == 'm' || b == 't') {
        emit(i, i + 2);
        i += 2;
        continue;
      }
      if (i + 2 < n && ((b == 'l' && s[i + 2] == 'l') || (b == 'v' && s[i + 2] == 'e') ||
                        (b == 'r' && s[i + 2] == 'e'))) {
        emit(i, i + 3);
        i += 3;
        continue;
      }
    }
    Kind kind = detail::kind_of(c);
    size_t start = i;
    if (c == ' ' && i + 1 < n) {
      int len2;
      Kind next = detail::kind_of(at(i + 1, len2));
      if (next != Kind::kSpace) {  // " ?X+": the space joins the run after it
        size_t end = run(i + 1, next);
        emit(start, end);
        i = end;
        continue;
      }
    }
    if (kind != Kind::kSpace) {
      size_t end = run(i, kind);
      emit(start, end);
      i = end;
      continue;
    }
    // Whitespace: \s+(?!\S) keeps the last character for the next piece
    // when something other than whitespace follows.
    size_t end = i, last = i;
    while (end < n) {
      int l;
      if (detail::kind_of(at(end, l)) != Kind::kSpace) break;
      last = end;
      end += l;
    }
    if (end < n && last > i) end = last;
    emit(start, end);
    i = end;
  }
}

}  // namespace outboard::tokenize
