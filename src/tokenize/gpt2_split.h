// GPT-2's pre-tokenizer as a hand-written scanner. Equivalent to
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (and to tiktoken's r50k pattern) with no regex engine and no lookahead
// beyond one code point. Where SSE2 or NEON is (every x86-64 and aarch64),
// ASCII text goes 64 bytes at a time: where each piece starts follows from
// bit masks of the bytes' kinds, and the scanner takes only what those
// cannot settle.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tokenize/char_kind.h"

namespace outboard::tokenize {

/// Length of the contraction ('s|'t|'re|'ve|'m|'ll|'d, lower case only) whose apostrophe the bytes
/// `a` and `b` follow (0 where there is none; `b` is 0 past the text's end).
inline size_t gpt2_contraction(uint8_t a, uint8_t b) {
  if (a == 's' || a == 'd' || a == 'm' || a == 't') return 2;
  return (a == 'l' && b == 'l') || (a == 'v' && b == 'e') || (a == 'r' && b == 'e') ? 3 : 0;
}

/// The scanner alone: emits the piece at `i` (a piece's start) and returns its end.
template <typename Emit>
size_t gpt2_piece(const uint8_t* s, size_t n, size_t i, Emit& emit) {
  auto at = [&](size_t k, int& len) { return decode_valid(s + k, len); };
  int len;
  char32_t c = at(i, len);
  if (c == '\'' && i + 1 < n)
    if (const size_t k = gpt2_contraction(s[i + 1], i + 2 < n ? s[i + 2] : 0)) {
      emit(i, i + k);
      return i + k;
    }
  Kind kind = kind_of(c);
  if (c == ' ' && i + 1 < n) {
    int len2;
    Kind next = kind_of(at(i + 1, len2));
    if (next != Kind::kSpace) {  // " ?X+": the space joins the run after it
      const size_t end = run_of(s, n, i + 1, next);
      emit(i, end);
      return end;
    }
  }
  if (kind != Kind::kSpace) {
    const size_t end = run_of(s, n, i, kind);
    emit(i, end);
    return end;
  }
  // Whitespace: \s+(?!\S) keeps the last character for the next piece
  // when something other than whitespace follows.
  const SpaceRun ws = space_run(s, n, i);
  const size_t end = ws.end < n && ws.last > i ? ws.last : ws.end;
  emit(i, end);
  return end;
}

/// Calls emit(begin, end) with the byte offsets of each piece of `text`
/// (which must be valid UTF-8), in order, one piece at a time.
template <typename Emit>
void split_gpt2_scanner(std::string_view text, Emit&& emit) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = 0; i < text.size();) i = gpt2_piece(s, text.size(), i, emit);
}

#if defined(OUTBOARD_ASCII_WINDOWS)
/// The pieces that start at s[i] (a piece's start) among the next 64 bytes, as far as those bytes
/// are ASCII and settle where each one ends; returns the start of the first piece not emitted (i
/// where none could be).
template <typename Emit>
size_t gpt2_window(const uint8_t* s, size_t n, size_t i, Emit& emit) {
  const AsciiWindow w(s, n, i);
  const uint8_t* p = w.bytes;
  const size_t len = w.len;
  const uint64_t solid = w.valid & ~w.space;
  auto begins = [](uint64_t kind) { return kind & ~(kind << 1); };
  // A piece starts where the kind changes, but not just after a ' ' that joins the run after it;
  // and at a run of whitespace's last character where two or more come before something else.
  uint64_t starts = ((begins(w.letter) | begins(w.digit) | begins(w.space) | begins(w.other)) & ~((w.blank << 1) & solid)) |
                    (w.space & (w.space << 1) & (solid >> 1)) | 1;
  // An apostrophe that starts a piece may start a contraction, which ends its own piece.
  for (uint64_t q = w.quote & starts; q; q &= q - 1) {
    const size_t k = static_cast<size_t>(std::countr_zero(q));
    if (k + 1 >= len) break;
    const size_t c = gpt2_contraction(p[k + 1], k + 2 < len ? p[k + 2] : 0);
    if (!c) continue;
    starts &= ~(((uint64_t{1} << (c - 1)) - 1) << (k + 1));
    if (k + c < 64) starts |= uint64_t{1} << (k + c);
  }
  // A start is settled where the bytes up to two after it are: at the text's end, every one.
  const size_t last = w.to_end ? len : len >= 3 ? len - 3 : 0;
  size_t from = 0;
  for (uint64_t e = starts & ~uint64_t{1}; e; e &= e - 1) {
    const size_t at = static_cast<size_t>(std::countr_zero(e));
    if (at > last) break;
    emit(i + from, i + at);
    from = at;
  }
  if (w.to_end && from < len) {
    emit(i + from, n);
    return n;
  }
  return i + from;
}
#endif

/// Calls emit(begin, end) with the byte offsets of each piece of `text`
/// (which must be valid UTF-8), in order.
template <typename Emit>
void split_gpt2(std::string_view text, Emit&& emit) {
#if defined(OUTBOARD_ASCII_WINDOWS)
  split_by_windows(
      text, emit, [](auto&&... a) { return gpt2_piece(a...); }, [](auto&&... a) { return gpt2_window(a...); });
#else
  split_gpt2_scanner(text, emit);
#endif
}

}  // namespace outboard::tokenize
