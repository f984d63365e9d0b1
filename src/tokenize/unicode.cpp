#include "tokenize/unicode.h"

namespace outboard::tokenize {
namespace {
#include "unicode_tables.inc"
}  // namespace

uint8_t char_class(char32_t cp) {
  if (cp >= 0x110000) return 0;
  return kClassStage2[kClassStage1[cp >> 8] * 256u + (cp & 0xFF)];
}

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

}  // namespace outboard::tokenize
