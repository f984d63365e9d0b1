// Loads of a few bytes that compile to a couple of moves: a memcpy of a
// variable length is a call into libc, and every piece is hashed, looked up
// and compared, most of them under 8 bytes. Never reads outside [p, p + n).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace outboard::tokenize {

/// The n <= 8 bytes at p in the low bytes of a word, the rest zero (as a
/// memcpy into a zeroed word on a little-endian machine).
inline uint64_t load_upto8(const uint8_t* p, size_t n) {
  if (n >= 4) {  // two overlapping 4-byte loads
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + n - 4, 4);
    return lo | uint64_t{hi} << ((n - 4) * 8);
  }
  if (n == 0) return 0;
  return p[0] | uint64_t{p[n / 2]} << (n / 2 * 8) | uint64_t{p[n - 1]} << ((n - 1) * 8);
}

inline uint64_t load8(const uint8_t* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}

}  // namespace outboard::tokenize
