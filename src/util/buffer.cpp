#include "outboard/buffer.h"

#include <cstring>

namespace outboard {

Buffer::Buffer(size_t size) : data_(std::make_unique_for_overwrite<uint8_t[]>(size)), size_(size) {}

Buffer Buffer::copy_of(std::span<const uint8_t> bytes) {
  Buffer b(bytes.size());
  if (!bytes.empty()) std::memcpy(b.data(), bytes.data(), bytes.size());
  return b;
}

}  // namespace outboard
