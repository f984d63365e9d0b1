// What the byte-level BPE pre-tokenizers ask of a character: letter, number,
// whitespace or other (\p{L}, \p{N}, \s, the rest), and runs of one kind,
// ASCII letters and digits eight bytes at a time; where SSE2 or AArch64's
// NEON is, the kinds of 64 ASCII bytes at once, as bit masks.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#if defined(__SSE2__)
#include <emmintrin.h>
#define OUTBOARD_ASCII_WINDOWS 1
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#define OUTBOARD_ASCII_WINDOWS 1
#endif

#include "tokenize/small_load.h"
#include "tokenize/unicode.h"

namespace outboard::tokenize {

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

/// The kind of a character of class `c` (unicode.h's bits).
constexpr Kind kind_of_class(uint8_t c) {
  return c & kLetter ? Kind::kLetter : c & kNumber ? Kind::kNumber : c & kSpace ? Kind::kSpace : Kind::kOther;
}

inline Kind kind_of(char32_t cp) {
  if (cp < 0x80) return kAsciiKind[cp];
  if (cp < 0x10000) return Kind(detail::bmp_bits(detail::kBmpKinds, cp));
  return kind_of_class(char_class(cp));
}

/// Kind of the character at s[i] (valid UTF-8); sets its length.
inline Kind kind_at(const uint8_t* s, size_t i, int& len) { return kind_of(decode_valid(s + i, len)); }

namespace detail {
// Eight bytes at a time (SWAR): the high bit of each byte of the result is
// set where `x` holds an ASCII lower-case letter (letter, digit). Bytes are cleared to 7 bits
// before adding, so no carry crosses into the next byte.
static_assert(std::endian::native == std::endian::little, "byte i of a loaded word is its i-th lowest");
constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
inline uint64_t ascii_lower(uint64_t x) {
  const uint64_t y = x & 0x7F * kOnes;
  return (y + 0x1F * kOnes) & ~(y + 0x05 * kOnes) & ~x & kHigh;  // >= 'a', not >= '{', ASCII
}
inline uint64_t ascii_letters(uint64_t x) { return ascii_lower(x | 0x20 * kOnes); }  // bit 5 set: lower case
inline uint64_t ascii_digits(uint64_t x) {
  const uint64_t y = x & 0x7F * kOnes;
  return (y + 0x50 * kOnes) & ~(y + 0x46 * kOnes) & ~x & kHigh;  // >= '0', not >= ':', ASCII
}
}  // namespace detail

/// End of the run of characters of `kind` in s[i, n). Letter and digit runs
/// skip ASCII eight bytes at a time: no branch per character.
inline size_t run_of(const uint8_t* s, size_t n, size_t i, Kind kind) {
  const bool swar = kind == Kind::kLetter || kind == Kind::kNumber;
  while (i < n) {
    if (s[i] >= 0x80) {
      int len;
      if (kind_at(s, i, len) != kind) break;
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
      if (kAsciiKind[s[i]] != kind) break;
      ++i;
    }
  }
  return i;
}

/// End of at most `max` characters of \p{N} from i (the one at i is one).
inline size_t number_run(const uint8_t* s, size_t n, size_t i, int max) {
  int len;
  kind_at(s, i, len);
  size_t end = i + len;
  for (int more = 1; more < max && end < n && kind_at(s, end, len) == Kind::kNumber; ++more) end += len;
  return end;
}

/// The run of whitespace from s[i]: where it ends, where its last character
/// starts, and where its last line break (\r or \n) ends (0: none).
struct SpaceRun {
  size_t end, last, after_break;
};
inline SpaceRun space_run(const uint8_t* s, size_t n, size_t i) {
  SpaceRun r{i, i, 0};
  int len;
  while (r.end < n && kind_at(s, r.end, len) == Kind::kSpace) {
    if (s[r.end] == '\r' || s[r.end] == '\n') r.after_break = r.end + 1;
    r.last = r.end;
    r.end += len;
  }
  return r;
}

/// Length of the contraction (?i:'s|'t|'re|'ve|'m|'ll|'d) at s[i] == '\''
/// (0: none), as cl100k's and o200k's patterns match it. Case folds as the
/// regexes' (?i): 's' also matches U+017F LATIN SMALL LETTER LONG S.
inline size_t contraction_length(const uint8_t* s, size_t n, size_t i) {
  if (i + 1 >= n) return 0;
  const uint8_t a = s[i + 1] | 0x20, b = i + 2 < n ? s[i + 2] | 0x20 : 0;
  if (a == 's' || a == 'd' || a == 'm' || a == 't') return 2;
  if ((a == 'l' && b == 'l') || (a == 'v' && b == 'e') || (a == 'r' && b == 'e')) return 3;
  if (s[i + 1] == 0xC5 && i + 2 < n && s[i + 2] == 0xBF) return 3;  // 'ſ
  return 0;
}

#if defined(OUTBOARD_ASCII_WINDOWS)
namespace window {
// 16 bytes in a vector register, in GCC's and Clang's vector extensions: the operators below
// compile to SSE2 or NEON alike; only taking one bit per byte differs by target.
using Bytes = uint8_t __attribute__((vector_size(16)));
using Signed = int8_t __attribute__((vector_size(16)));

inline Bytes load(const uint8_t* p) {
  Bytes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline Bytes eq(Bytes x, uint8_t c) { return std::bit_cast<Bytes>(x == c); }
/// lo <= x < lo + count for ASCII x (bytes >= 0x80 land outside): x + (128 - lo) < -128 + count,
/// signed (the add wraps as unsigned).
inline Bytes in(Bytes x, int lo, int count) {
  return std::bit_cast<Bytes>(std::bit_cast<Signed>(x + static_cast<uint8_t>(128 - lo)) <
                              static_cast<int8_t>(-128 + count));
}
inline Bytes high(Bytes x) { return std::bit_cast<Bytes>(std::bit_cast<Signed>(x) < 0); }

/// Bit k for byte k of a, b, c and d, vectors of 0 or 0xFF bytes (the 64 bytes in order).
inline uint64_t bits(Bytes a, Bytes b, Bytes c, Bytes d) {
#if defined(__SSE2__)
  auto m = [](Bytes v) { return uint64_t{static_cast<uint16_t>(_mm_movemask_epi8(std::bit_cast<__m128i>(v)))}; };
  return m(a) | m(b) << 16 | m(c) << 32 | m(d) << 48;
#else
  // Each byte keeps its bit's weight within its 8; three pairwise adds sum each 8 into a byte.
  const uint8x16_t weight = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  auto w = [&](Bytes v) { return vandq_u8(std::bit_cast<uint8x16_t>(v), weight); };
  const uint8x16_t halves = vpaddq_u8(vpaddq_u8(w(a), w(b)), vpaddq_u8(w(c), w(d)));
  return vgetq_lane_u64(vreinterpretq_u64_u8(vpaddq_u8(halves, halves)), 0);
#endif
}
}  // namespace window

/// The 64 bytes from s[i] (those the text has), classified as far as they are ASCII: bit k of each
/// mask stands for the window's byte k, so a pre-tokenizer finds where a run ends by a bit scan
/// instead of byte by byte.
class AsciiWindow {
 public:
  AsciiWindow(const uint8_t* s, size_t n, size_t i) : bytes(s + i) {
    if (n - i < 64) {  // the text's end: zeros after it, outside `valid`
      std::memset(copy_, 0, sizeof copy_);
      std::memcpy(copy_, s + i, n - i);
      bytes = copy_;
    }
    using namespace window;
    const Bytes x[4] = {load(bytes), load(bytes + 16), load(bytes + 32), load(bytes + 48)};
    auto mask = [&x](auto kind) { return bits(kind(x[0]), kind(x[1]), kind(x[2]), kind(x[3])); };
    letter = mask([](Bytes v) { return in(v | 0x20, 'a', 26); });
    upper = mask([](Bytes v) { return in(v, 'A', 26); });
    digit = mask([](Bytes v) { return in(v, '0', 10); });
    space = mask([](Bytes v) { return in(v, '\t', 5) | eq(v, ' '); });  // \t \n \v \f \r and ' '
    blank = mask([](Bytes v) { return eq(v, ' '); });
    quote = mask([](Bytes v) { return eq(v, '\''); });
    line_break = mask([](Bytes v) { return eq(v, '\n') | eq(v, '\r'); });
    const uint64_t non_ascii = mask(high);
    len = std::min<size_t>({64, n - i, non_ascii ? static_cast<size_t>(std::countr_zero(non_ascii)) : 64});
    to_end = len == n - i;
    valid = len == 64 ? ~uint64_t{0} : (uint64_t{1} << len) - 1;
    for (uint64_t* m : {&letter, &upper, &digit, &space, &blank, &quote, &line_break}) *m &= valid;
    other = valid & ~(letter | digit | space);
  }
  AsciiWindow(const AsciiWindow&) = delete;
  AsciiWindow& operator=(const AsciiWindow&) = delete;

  /// The bits below bit k.
  static uint64_t below(size_t k) { return k >= 64 ? ~uint64_t{0} : (uint64_t{1} << k) - 1; }
  /// Whether a piece may end at `end`: before the classified end, or at the text's end (else what
  /// follows, more of the text or a non-ASCII character, may continue it).
  [[nodiscard]] bool settled(size_t end) const { return end < len || to_end; }
  /// Just after the last line break among bytes k to e - 1; 0 where there is none.
  [[nodiscard]] size_t after_last_break(size_t k, size_t e) const {
    const uint64_t breaks = line_break & below(e) & ~below(k);
    return breaks ? 64 - static_cast<size_t>(std::countl_zero(breaks)) : 0;
  }
  /// Bytes from k of the kind `mask` says, up to the classified end.
  [[nodiscard]] size_t run(uint64_t mask, size_t k) const {
    return k >= 64 ? 0 : std::min<size_t>(std::countr_one(mask >> k), len - std::min(k, len));
  }

  const uint8_t* bytes;  // the window's (a zero-padded copy at the text's end)
  size_t len = 0;        // bytes classified: to the first non-ASCII one, the text's end or 64
  bool to_end = false;   // the window holds the rest of the text
  uint64_t valid = 0;    // the classified bytes
  uint64_t letter = 0, upper = 0, digit = 0, space = 0, blank = 0, quote = 0, line_break = 0, other = 0;

 private:
  alignas(16) uint8_t copy_[64];
};

/// Whether a window pays at s[i]: the next 16 bytes are there and ASCII.
inline bool ascii_ahead(const uint8_t* s, size_t n, size_t i) {
  const window::Bytes none{};
  return n - i >= 16 && !window::bits(window::high(window::load(s + i)), none, none, none);
}

/// Splits `text` by `window(s, n, i, emit)` where it pays and `piece(s, n, i, emit)` elsewhere. Both
/// take a piece's start and return the next one; a window that cannot settle its first piece returns i.
template <typename Emit, typename Piece, typename Window>
void split_by_windows(std::string_view text, Emit& emit, Piece piece, Window window) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    // Windows pay where the text is ASCII for a while; elsewhere the scanner goes a piece at a time.
    if (ascii_ahead(s, n, i)) {
      const size_t next = window(s, n, i, emit);
      if (next != i) {
        i = next;
        continue;
      }
    }
    i = piece(s, n, i, emit);
  }
}
#endif

}  // namespace outboard::tokenize
