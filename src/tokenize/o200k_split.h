// o200k's pre-tokenizer (GPT-4o) and Tekken's (Mistral NeMo) as one
// hand-written scanner; Tekken's pattern is o200k's with single digits and
// no contractions. o200k's, with U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and
// L = [\p{Ll}\p{Lm}\p{Lo}\p{M}]:
//   [^\r\n\p{L}\p{N}]?U*L+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
//   [^\r\n\p{L}\p{N}]?U+L*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
//   \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
// The regex backtracks; the scanner finds the same first match directly:
// U*L+ ends after the L run that follows the U run, or else after the last
// character of the U run that is in L too (Lm, Lo, M). Where SSE2 or NEON
// is, ASCII text goes 64 bytes at a time (o200k_window), as cl100k's does.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tokenize/char_kind.h"

namespace outboard::tokenize {

/// How o200k-style patterns differ.
struct O200kRules {
  int max_digits;     ///< \p{N}{1,max_digits}
  bool contractions;  ///< a contraction may end a word
};
inline constexpr O200kRules kO200kRules{3, true}, kTekkenRules{1, false};

namespace detail {
inline uint8_t case_at(const uint8_t* s, size_t i, int& len) {
  if (s[i] < 0x80) {
    len = 1;
    return s[i] >= 'a' && s[i] <= 'z' ? kLowerish : s[i] >= 'A' && s[i] <= 'Z' ? kUpperish : 0;
  }
  return case_of(decode_valid(s + i, len));
}

// End of the run of characters in case class `bit` from i; `both_end` is set
// to the end of the run's last character that is in both classes (else kept).
inline size_t case_run(const uint8_t* s, size_t n, size_t i, uint8_t bit, size_t& both_end) {
  while (i < n) {
    if (bit == kLowerish && s[i] < 0x80 && i + 8 <= n) {  // lower-case ASCII, eight bytes at a time
      const uint64_t lower = ascii_lower(load8(s + i));
      if (lower == kHigh) {
        i += 8;
        continue;
      }
      i += std::countr_zero(~lower & kHigh) / 8;
    }
    int len;
    const uint8_t c = case_at(s, i, len);
    if (!(c & bit)) break;
    i += len;
    if (c == (kUpperish | kLowerish)) both_end = i;
  }
  return i;
}
}  // namespace detail

/// The contraction that ends a word at s[end], if the rules have them.
template <const O200kRules& kRules>
size_t o200k_contraction(const uint8_t* s, size_t n, size_t end) {
  return kRules.contractions && end < n && s[end] == '\'' ? contraction_length(s, n, end) : 0;
}

/// The end of [\r\n/]* from `end`.
inline size_t o200k_trail(const uint8_t* s, size_t n, size_t end) {
  while (end < n && (s[end] == '\r' || s[end] == '\n' || s[end] == '/')) ++end;
  return end;
}

/// The scanner alone: emits the piece at `i` (a piece's start) and returns its end.
template <const O200kRules& kRules, typename Emit>
size_t o200k_piece(const uint8_t* s, size_t n, size_t i, Emit& emit) {
  // U*L+ from q (0: no match), then U+L* (which, where U*L+ failed, is the U run).
  auto upper_lower = [&](size_t q, bool lower_required) -> size_t {
    size_t both_end = 0;
    const size_t u = detail::case_run(s, n, q, kUpperish, both_end);
    int len;
    if (u < n && (detail::case_at(s, u, len) & kLowerish)) return detail::case_run(s, n, u, kLowerish, both_end);
    if (lower_required) return both_end;
    return u > q ? u : 0;
  };
  auto piece = [&](size_t end) {
    emit(i, end);
    return end;
  };
  auto word = [&](size_t end) { return piece(end + o200k_contraction<kRules>(s, n, end)); };
  int len;
  const char32_t c = decode_valid(s + i, len);
  const Kind kind = kind_of(c);
  // [^\r\n\p{L}\p{N}]? before the word: taken first, then not. A word
  // starts only where a character has a case class.
  const bool prefix = (kind == Kind::kOther || kind == Kind::kSpace) && c != '\r' && c != '\n';
  const size_t j = i + len;
  int next_len;
  const uint8_t here = c < 0x80 ? detail::case_at(s, i, len) : case_of(c);
  const uint8_t next = prefix && j < n ? detail::case_at(s, j, next_len) : 0;
  if ((next == kLowerish && s[j] < 0x80) || (here == kLowerish && c < 0x80)) {  // most words: lower-case ASCII
    size_t unused;
    return word(detail::case_run(s, n, next == kLowerish ? j : i, kLowerish, unused));
  }
  size_t end = 0;
  for (bool lower_required : {true, false}) {
    if (next && (end = upper_lower(j, lower_required))) break;
    if (here && (end = upper_lower(i, lower_required))) break;
  }
  if (end) return word(end);
  if (kind == Kind::kNumber) return piece(number_run(s, n, i, kRules.max_digits));
  // " ?[^\s\p{L}\p{N}]+[\r\n/]*"
  if (kind == Kind::kOther || (c == ' ' && j < n && kind_at(s, j, next_len) == Kind::kOther))
    return piece(o200k_trail(s, n, run_of(s, n, kind == Kind::kOther ? i : j, Kind::kOther)));
  // Whitespace: through its last line break (\s*[\r\n]+), else all but
  // the last character before a non-space (\s+(?!\S)), else all (\s+).
  const SpaceRun ws = space_run(s, n, i);
  if (ws.after_break) return piece(ws.after_break);
  return piece(ws.end < n && ws.last > i ? ws.last : ws.end);
}

/// Calls emit(begin, end) with the byte offsets of each piece of `text`
/// (which must be valid UTF-8), in order, one piece at a time.
template <const O200kRules& kRules, typename Emit>
void split_o200k_scanner(std::string_view text, Emit&& emit) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = 0; i < text.size();) i = o200k_piece<kRules>(s, text.size(), i, emit);
}

#if defined(OUTBOARD_ASCII_WINDOWS)
/// The pieces that start at s[i] (a piece's start) among the next 64 bytes, by the scanner's rules
/// with bit scans for the runs, as far as the bytes are ASCII and settle each piece's end; returns
/// the start of the first piece not emitted (i where none could be). ASCII letters have one case
/// each, so a word is its upper-case run and the lower-case run after it.
template <const O200kRules& kRules, typename Emit>
size_t o200k_window(const uint8_t* s, size_t n, size_t i, Emit& emit) {
  const AsciiWindow w(s, n, i);
  const uint8_t* p = w.bytes;
  const size_t len = w.len;
  const uint64_t lower = w.letter & ~w.upper;
  size_t k = 0;
  while (k < len) {
    const uint8_t c = p[k];
    const Kind kind = kAsciiKind[c];
    size_t end;
    if (kind == Kind::kNumber) {
      end = k + std::min<size_t>(w.run(w.digit, k), kRules.max_digits);
    } else {
      const size_t j = k + 1;
      const bool prefix = kind != Kind::kLetter && c != '\r' && c != '\n';
      if (prefix && j >= len && !w.to_end) break;  // the next character decides
      const bool letter_next = prefix && j < len && kAsciiKind[p[j]] == Kind::kLetter;
      if (kind == Kind::kLetter || letter_next) {
        const size_t from = letter_next ? j : k;
        const size_t u = from + w.run(w.upper, from);
        end = u + w.run(lower, u);
        if (!w.settled(end)) break;
        end += o200k_contraction<kRules>(s, n, i + end);  // the text's own bytes: settled
      } else if (kind == Kind::kOther || (c == ' ' && j < len && kAsciiKind[p[j]] == Kind::kOther)) {
        const size_t from = kind == Kind::kOther ? k : j;
        end = from + w.run(w.other, from);
        if (!w.settled(end)) break;
        end = o200k_trail(s, n, i + end) - i;
      } else {  // whitespace: through its last break, else all but its last before a non-space, else all
        const size_t e = k + w.run(w.space, k);
        if (!w.settled(e)) break;
        const size_t after = w.after_last_break(k, e);
        end = after ? after : e < len && e - k > 1 ? e - 1 : e;
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
template <const O200kRules& kRules, typename Emit>
void split_o200k(std::string_view text, Emit&& emit) {
#if defined(OUTBOARD_ASCII_WINDOWS)
  split_by_windows(
      text, emit, [](auto&&... a) { return o200k_piece<kRules>(a...); },
      [](auto&&... a) { return o200k_window<kRules>(a...); });
#else
  split_o200k_scanner<kRules>(text, emit);
#endif
}

}  // namespace outboard::tokenize
