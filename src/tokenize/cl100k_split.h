// cl100k's pre-tokenizer (GPT-3.5/4, and Llama 3's pattern) as a
// hand-written scanner. Equivalent to tiktoken's
//   '(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+|
//    ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s
// with no regex engine. Where it differs from r50k: contractions ignore
// case, any one non-letter (a space, a tab, a quote) joins the letters after
// it, digits go in threes, and line breaks end a whitespace piece. Where SSE2
// or NEON is, ASCII text goes 64 bytes at a time: the same rules, each run's end a bit
// scan of the window's masks (AsciiWindow).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tokenize/char_kind.h"

namespace outboard::tokenize {

/// The scanner alone: emits the piece at `i` (a piece's start) and returns its end.
template <typename Emit>
size_t cl100k_piece(const uint8_t* s, size_t n, size_t i, Emit& emit) {
  auto piece = [&](size_t end) {
    emit(i, end);
    return end;
  };
  int len;
  const char32_t c = decode_valid(s + i, len);
  if (c == '\'')
    if (size_t k = contraction_length(s, n, i)) return piece(i + k);
  const Kind kind = kind_of(c);
  if (kind == Kind::kLetter) return piece(run_of(s, n, i, Kind::kLetter));
  if (kind == Kind::kNumber) return piece(number_run(s, n, i, 3));  // \p{N}{1,3}
  // A space or other character: [^\r\n\p{L}\p{N}]?+\p{L}++ first.
  const size_t j = i + len;
  int next_len = 0;
  const Kind next = j < n ? kind_at(s, j, next_len) : Kind::kSpace;
  if (next == Kind::kLetter && c != '\r' && c != '\n') return piece(run_of(s, n, j, Kind::kLetter));
  // " ?[^\s\p{L}\p{N}]++[\r\n]*+"
  if (kind == Kind::kOther || (c == ' ' && j < n && next == Kind::kOther)) {
    size_t end = run_of(s, n, kind == Kind::kOther ? i : j, Kind::kOther);
    while (end < n && (s[end] == '\r' || s[end] == '\n')) ++end;
    return piece(end);
  }
  // Whitespace: to the end of the text (\s++$), else through its last line
  // break (\s*[\r\n]), else all but the last character when more than one
  // (\s+(?!\S)), else the one character (\s).
  const SpaceRun ws = space_run(s, n, i);
  if (ws.end == n) return piece(n);
  if (ws.after_break) return piece(ws.after_break);
  return piece(ws.last > i ? ws.last : ws.end);
}

/// Calls emit(begin, end) with the byte offsets of each piece of `text`
/// (which must be valid UTF-8), in order, one piece at a time.
template <typename Emit>
void split_cl100k_scanner(std::string_view text, Emit&& emit) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = 0; i < text.size();) i = cl100k_piece(s, text.size(), i, emit);
}

#if defined(OUTBOARD_ASCII_WINDOWS)
/// The pieces that start at s[i] (a piece's start) among the next 64 bytes, by the scanner's rules
/// with bit scans for the runs, as far as the bytes are ASCII and settle each piece's end; returns
/// the start of the first piece not emitted (i where none could be).
template <typename Emit>
size_t cl100k_window(const uint8_t* s, size_t n, size_t i, Emit& emit) {
  const AsciiWindow w(s, n, i);
  const uint8_t* p = w.bytes;
  const size_t len = w.len;
  size_t k = 0;
  while (k < len) {
    const uint8_t c = p[k];
    if (c == '\'')
      if (const size_t q = contraction_length(s, n, i + k)) {  // the text's own bytes: settled
        emit(i + k, i + k + q);
        k += q;
        continue;
      }
    const Kind kind = kAsciiKind[c];
    size_t end;
    if (kind == Kind::kLetter) {
      end = k + w.run(w.letter, k);
    } else if (kind == Kind::kNumber) {
      end = k + std::min<size_t>(w.run(w.digit, k), 3);
    } else {
      const size_t j = k + 1;
      if (j >= len && !w.to_end) break;  // the next character decides
      const Kind next = j < len ? kAsciiKind[p[j]] : Kind::kSpace;
      if (next == Kind::kLetter && c != '\r' && c != '\n') {
        end = j + w.run(w.letter, j);
      } else if (kind == Kind::kOther || (c == ' ' && j < len && next == Kind::kOther)) {
        const size_t from = kind == Kind::kOther ? k : j;
        end = from + w.run(w.other, from);
        end += w.run(w.line_break, end);
      } else {  // whitespace: to the text's end, through its last break, all but its last, or one
        const size_t e = k + w.run(w.space, k);
        if (!w.settled(e)) break;
        const size_t after = w.after_last_break(k, e);
        end = e == len ? len : after ? after : e - k > 1 ? e - 1 : e;
      }
    }
    if (!w.settled(end)) break;
    emit(i + k, i + end);
    k = end;
  }
  return i + k;
}
#endif

/// Calls emit(begin, end) with the byte offsets of each piece of `text`
/// (which must be valid UTF-8), in order.
template <typename Emit>
void split_cl100k(std::string_view text, Emit&& emit) {
#if defined(OUTBOARD_ASCII_WINDOWS)
  split_by_windows(
      text, emit, [](auto&&... a) { return cl100k_piece(a...); }, [](auto&&... a) { return cl100k_window(a...); });
#else
  split_cl100k_scanner(text, emit);
#endif
}

}  // namespace outboard::tokenize
