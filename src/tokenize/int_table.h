// A frozen hash map from 64-bit keys: built once, then read from any number
// of threads. Open addressing, linear probing, load <= 0.5, Fibonacci
// hashing. Shared by the BPE pair table and the WordPiece tries.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace outboard::tokenize {

template <typename Value>
class IntTable {
 public:
  static constexpr uint64_t kEmpty = UINT64_MAX;  ///< the one key that cannot be stored

  void build(const std::vector<std::pair<uint64_t, Value>>& entries) {
    size_t size = 2;
    int bits = 1;
    while (size < entries.size() * 2 + 2) size <<= 1, ++bits;
    slots_.assign(size, Slot{});
    mask_ = size - 1;
    shift_ = 64 - bits;
    for (const auto& [key, value] : entries) {
      size_t i = slot(key);
      while (slots_[i].key != kEmpty) i = (i + 1) & mask_;
      slots_[i] = {key, value};
    }
  }
  const Value* find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i].value;
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }
  /// Starts loading key's slot: lookups issued together overlap their misses.
  void prefetch(uint64_t key) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[slot(key)]);
  }

 private:
  struct Slot {
    uint64_t key = kEmpty;
    Value value{};
  };
  size_t slot(uint64_t key) const { return (key * 0x9e3779b97f4a7c15ull) >> shift_; }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
};

}  // namespace outboard::tokenize
