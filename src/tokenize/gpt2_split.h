// GPT-2's pre-tokenizer as a hand-written scanner. Equivalent to
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (and to tiktoken's r50k pattern) with no regex engine and no lookahead
// beyond one code point.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tokenize/char_kind.h"

namespace outboard::tokenize {

/// Calls emit(begin, end) with the byte offsets of each piece of `text`
/// (which must be valid UTF-8), in order.
template <typename Emit>
void split_gpt2(std::string_view text, Emit&& emit) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  auto at = [&](size_t i, int& len) { return decode_valid(s + i, len); };
  auto run = [&](size_t i, Kind kind) { return run_of(s, n, i, kind); };

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
    Kind kind = kind_of(c);
    size_t start = i;
    if (c == ' ' && i + 1 < n) {
      int len2;
      Kind next = kind_of(at(i + 1, len2));
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
    const SpaceRun ws = space_run(s, n, i);
    const size_t end = ws.end < n && ws.last > i ? ws.last : ws.end;
    emit(start, end);
    i = end;
  }
}

}  // namespace outboard::tokenize
