// cl100k's pre-tokenizer (GPT-3.5/4, and Llama 3's pattern) as a
// hand-written scanner. Equivalent to tiktoken's
//   '(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+|
//    ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s
// with no regex engine. Where it differs from r50k: contractions ignore
// case, any one non-letter (a space, a tab, a quote) joins the letters after
// it, digits go in threes, and line breaks end a whitespace piece.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tokenize/char_kind.h"

namespace outboard::tokenize {

/// Calls emit(begin, end) with the byte offsets of each piece of `text`
/// (which must be valid UTF-8), in order.
template <typename Emit>
void split_cl100k(std::string_view text, Emit&& emit) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  auto piece = [&](size_t end) {
    emit(i, end);
    i = end;
  };
  while (i < n) {
    int len;
    const char32_t c = decode_valid(s + i, len);
    if (c == '\'') {
      if (size_t k = contraction_length(s, n, i)) {
        piece(i + k);
        continue;
      }
    }
    const Kind kind = kind_of(c);
    if (kind == Kind::kLetter) {
      piece(run_of(s, n, i, Kind::kLetter));
      continue;
    }
    if (kind == Kind::kNumber) {  // \p{N}{1,3}
      piece(number_run(s, n, i, 3));
      continue;
    }
    // A space or other character: [^\r\n\p{L}\p{N}]?+\p{L}++ first.
    const size_t j = i + len;
    int next_len = 0;
    const Kind next = j < n ? kind_at(s, j, next_len) : Kind::kSpace;
    if (next == Kind::kLetter && c != '\r' && c != '\n') {
      piece(run_of(s, n, j, Kind::kLetter));
      continue;
    }
    // " ?[^\s\p{L}\p{N}]++[\r\n]*+"
    if (kind == Kind::kOther || (c == ' ' && j < n && next == Kind::kOther)) {
      size_t end = run_of(s, n, kind == Kind::kOther ? i : j, Kind::kOther);
      while (end < n && (s[end] == '\r' || s[end] == '\n')) ++end;
      piece(end);
      continue;
    }
    // Whitespace: to the end of the text (\s++$), else through its last line
    // break (\s*[\r\n]), else all but the last character when more than one
    // (\s+(?!\S)), else the one character (\s).
    const SpaceRun ws = space_run(s, n, i);
    if (ws.end == n) piece(n);
    else if (ws.after_break) piece(ws.after_break);
    else piece(ws.last > i ? ws.last : ws.end);
  }
}

}  // namespace outboard::tokenize
