// GPT-2's pre-tokenizer as a hand-written scanner. Equivalent to
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (and to tiktoken's r50k pattern) with no regex engine and no lookahead
// beyond one code point.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tokenize/unicode.h"

namespace outboard::tokenize {

namespace detail {
enum class Kind : uint8_t { kLetter, kNumber, kSpace, kOther };
inline Kind kind_of(char32_t cp) {
  if (cp < 0x80) {  // ASCII fast path
    if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return Kind::kLetter;
    if (cp >= '0' && cp <= '9') return Kind::kNumber;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return Kind::kSpace;
    return Kind::kOther;
  }
  uint8_t c = char_class(cp);
  if (c & kLetter) return Kind::kLetter;
  if (c & kNumber) return Kind::kNumber;
  if (c & kSpace) return Kind::kSpace;
  return Kind::kOther;
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
  // End of the run of characters of `kind` starting at i.
  auto run = [&](size_t i, Kind kind) {
    while (i < n) {
      int len;
      Kind k = detail::kind_of(at(i, len));
      bool same = kind == Kind::kOther ? k == Kind::kOther : k == kind;
      if (!same) break;
      i += len;
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
