// Owned bytes: what a message, a request or a response carries.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

namespace outboard {

/// Owned, uninitialised-on-allocation bytes. Move-only.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t size);
  static Buffer copy_of(std::span<const uint8_t> bytes);
  static Buffer copy_of(std::string_view text) {
    return copy_of({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  }
  [[nodiscard]] uint8_t* data() { return data_.get(); }
  [[nodiscard]] const uint8_t* data() const { return data_.get(); }
  [[nodiscard]] size_t size() const { return size_; }
  [[nodiscard]] std::span<const uint8_t> span() const { return {data_.get(), size_}; }
  [[nodiscard]] std::span<uint8_t> span() { return {data_.get(), size_}; }

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t size_ = 0;
};

}  // namespace outboard
