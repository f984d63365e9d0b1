#include "outboard/checksum.h"

#include <xxhash.h>

#include <cstring>

namespace outboard {

void fill_pattern(std::span<uint8_t> out, uint64_t seed) {
  uint64_t x = seed;
  size_t i = 0;
  while (i < out.size()) {
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    size_t n = std::min<size_t>(8, out.size() - i);
    std::memcpy(out.data() + i, &z, n);
    i += n;
  }
}

uint64_t checksum(std::span<const uint8_t> data) { return XXH3_64bits(data.data(), data.size()); }

}  // namespace outboard
