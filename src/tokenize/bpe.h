// Byte-level BPE: a vocabulary of byte strings with merge priorities, and
// the merge itself. Priorities follow tiktoken: the adjacent pair whose
// concatenation has the lowest priority merges first, leftmost on ties.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "outboard/status.h"

namespace outboard::tokenize {

class BpeVocab {
 public:
  static constexpr uint32_t kNoPriority = UINT32_MAX;

  /// Adds a token; kInvalidArgument on a duplicate (bytes or id).
  Status add(std::string_view bytes, int32_t id, uint32_t priority);
  /// Id and priority of `bytes`, or false.
  bool find(const uint8_t* p, size_t n, int32_t& id, uint32_t& priority) const;
  /// Bytes of token `id` (empty view if unknown).
  [[nodiscard]] std::string_view bytes_of(int32_t id) const;
  [[nodiscard]] size_t size() const { return count_; }
  [[nodiscard]] int32_t max_id() const { return static_cast<int32_t>(by_id_.size()) - 1; }

  /// Appends the ids of one pre-tokenized piece to `out`.
  Status encode_piece(const uint8_t* p, size_t n, std::vector<int32_t>& out) const;

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t offset = 0, length = 0;
    int32_t id = -1;
    uint32_t priority = kNoPriority;
  };
  uint32_t priority_of(const uint8_t* p, size_t n) const;
  void grow();
  Status small_merge(const uint8_t* p, size_t n, std::vector<int32_t>& out) const;
  Status heap_merge(const uint8_t* p, size_t n, std::vector<int32_t>& out) const;
  Status emit(const uint8_t* p, size_t n, std::vector<int32_t>& out) const;

  std::string arena_;
  std::vector<Slot> slots_;          // open addressing, power-of-two size
  std::vector<uint32_t> by_id_;      // id -> slot index + 1 (0: none)
  size_t count_ = 0;
};

}  // namespace outboard::tokenize
