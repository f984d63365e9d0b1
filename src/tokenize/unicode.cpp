#include "tokenize/unicode.h"

#include <algorithm>
#include <string>

#include "tokenize/char_kind.h"
#include "tokenize/small_load.h"

namespace outboard::tokenize {
namespace {
struct MappingEntry {
  char32_t cp;
  uint32_t offset;
  uint32_t length;
};
#include "unicode_tables.inc"

template <size_t N>
bool lookup(const MappingEntry (&table)[N], const char32_t* pool, char32_t cp, const char32_t*& out, size_t& length) {
  auto it = std::lower_bound(std::begin(table), std::end(table), cp,
                             [](const MappingEntry& e, char32_t c) { return e.cp < c; });
  if (it == std::end(table) || it->cp != cp) return false;
  out = pool + it->offset;
  length = it->length;
  return true;
}
}  // namespace

bool decompose(char32_t cp, const char32_t*& out, size_t& length) {
  if (cp < 0xC0) return false;
  return lookup(kDecomposition, kDecompositionPool, cp, out, length);
}

bool lowercase(char32_t cp, const char32_t*& out, size_t& length) {
  if (cp < 0x80) {
    static const char32_t ascii[26] = {U'a', U'b', U'c', U'd', U'e', U'f', U'g', U'h', U'i', U'j', U'k', U'l', U'm',
                                       U'n', U'o', U'p', U'q', U'r', U's', U't', U'u', U'v', U'w', U'x', U'y', U'z'};
    if (cp < 'A' || cp > 'Z') return false;
    out = &ascii[cp - 'A'];
    length = 1;
    return true;
  }
  return lookup(kLowercase, kLowercasePool, cp, out, length);
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

constexpr uint8_t class_of(char32_t cp) {
  return cp >= 0x110000 ? 0 : kClassStage2[kClassStage1[cp >> 8] * 256u + (cp & 0xFF)];
}

uint8_t char_class(char32_t cp) { return class_of(cp); }

constexpr uint8_t case_class_of(char32_t cp) {
  return cp >= 0x110000 ? 0 : kCaseStage2[kCaseStage1[cp >> 8] * 256u + (cp & 0xFF)];
}

uint8_t case_class(char32_t cp) { return case_class_of(cp); }

// 2 bits of each BMP code point, built at compile time (constinit: no
// initialization order to mind).
template <typename Bits>
constexpr detail::BmpBits bmp_table(Bits bits) {
  detail::BmpBits table{};
  for (char32_t cp = 0; cp < 0x10000; ++cp) table[cp / 4] |= unsigned(bits(cp)) << (cp % 4 * 2);
  return table;
}

static_assert(int(Kind::kOther) < 4 && (kUpperish | kLowerish) < 4, "a kind and a case class fit in 2 bits");
constinit const detail::BmpBits detail::kBmpKinds = bmp_table([](char32_t cp) { return kind_of_class(class_of(cp)); });
constinit const detail::BmpBits detail::kBmpCases = bmp_table(case_class_of);

std::string_view unicode_version() { return kUnicodeVersion; }

int utf8_sequence(const uint8_t* p, size_t n, int& bad) {
  uint8_t b = p[0];
  bad = 1;
  if (b < 0x80) return 1;
  int need;
  uint8_t lo = 0x80, hi = 0xBF;  // range of the second byte (Unicode Table 3-7)
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 2;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 3;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (int k = 1; k <= need; ++k) {
    if (size_t(k) >= n) return bad = k, 0;
    uint8_t c = p[k];
    bool ok = k == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) return bad = k, 0;
  }
  return need + 1;
}

size_t first_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    if (s[i] < 0x80) {
      ++i;
      while (i + 8 <= n && (load8(s + i) & 0x8080808080808080ull) == 0) i += 8;  // ASCII, 8 at a time
      continue;
    }
    // Two- and three-byte characters inline (most non-ASCII text is made of
    // them); the rest, and every error, as utf8_sequence says.
    const uint8_t b = s[i];
    if (b >= 0xC2 && b <= 0xDF && i + 1 < n && (s[i + 1] & 0xC0) == 0x80) {
      i += 2;
      continue;
    }
    if ((b & 0xF0) == 0xE0 && i + 2 < n && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80 &&
        (b != 0xE0 || s[i + 1] >= 0xA0) && (b != 0xED || s[i + 1] < 0xA0)) {  // no overlong form, no surrogate
      i += 3;
      continue;
    }
    int bad, len = utf8_sequence(s + i, n - i, bad);
    if (len == 0) break;
    i += len;
  }
  return i;
}

}  // namespace outboard::tokenize
