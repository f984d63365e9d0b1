// A map from 64-bit ids to values, for the channel's per-request tables.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace outboard {

/// Open addressing with linear probing in one array; erasing shifts later
/// entries back (no tombstones). Once grown, inserting and erasing allocate
/// nothing: a request round trip used to allocate and free a node of
/// std::unordered_map on each side. Ids may come from a peer, so they are
/// mixed (Fibonacci hashing) before use; callers bound how many are held.
template <class T>
class IdMap {
 public:
  IdMap() = default;
  IdMap(IdMap&& o) noexcept : slots_(std::move(o.slots_)), size_(std::exchange(o.size_, 0)), shift_(o.shift_) {
    o.slots_.clear();
  }
  IdMap& operator=(IdMap&& o) noexcept {
    slots_ = std::move(o.slots_);
    o.slots_.clear();
    size_ = std::exchange(o.size_, 0);
    shift_ = o.shift_;
    return *this;
  }

  [[nodiscard]] size_t size() const { return size_; }
  [[nodiscard]] bool empty() const { return size_ == 0; }

  const T* find(uint64_t id) const {
    size_t i = locate(id);
    return i == kAbsent ? nullptr : &*slots_[i].value;
  }

  /// Inserts `value` under `id` unless `id` is present; the entry, and
  /// whether it was inserted.
  std::pair<T*, bool> emplace(uint64_t id, T value) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    size_t i = home(id);
    for (; slots_[i].value; i = next(i))
      if (slots_[i].id == id) return {&*slots_[i].value, false};
    slots_[i].id = id;
    slots_[i].value.emplace(std::move(value));
    ++size_;
    return {&*slots_[i].value, true};
  }

  /// Removes `id`'s entry and hands back its value (nullopt if absent).
  std::optional<T> take(uint64_t id) {
    size_t i = locate(id);
    if (i == kAbsent) return std::nullopt;
    std::optional<T> out = std::move(slots_[i].value);
    remove_at(i);
    return out;
  }

  void clear() {
    for (auto& s : slots_) s.value.reset();
    size_ = 0;
  }

  /// Calls f(id, value) for every entry; f must not insert or erase.
  template <class F>
  void for_each(F&& f) {
    for (auto& s : slots_)
      if (s.value) f(s.id, *s.value);
  }

 private:
  struct Slot {
    uint64_t id = 0;
    std::optional<T> value;
  };
  static constexpr size_t kMinSlots = 16;
  static constexpr size_t kAbsent = SIZE_MAX;

  [[nodiscard]] size_t locate(uint64_t id) const {
    if (size_ == 0) return kAbsent;
    for (size_t i = home(id);; i = next(i)) {
      if (!slots_[i].value) return kAbsent;
      if (slots_[i].id == id) return i;
    }
  }

  [[nodiscard]] size_t home(uint64_t id) const { return (id * 0x9e3779b97f4a7c15ull) >> shift_; }
  [[nodiscard]] size_t next(size_t i) const { return (i + 1) & (slots_.size() - 1); }

  void grow() {
    std::vector<Slot> old = std::move(slots_);
    size_t n = old.empty() ? kMinSlots : old.size() * 2;
    slots_ = std::vector<Slot>(n);
    shift_ = 64 - std::countr_zero(n);
    for (auto& s : old) {
      if (!s.value) continue;
      size_t i = home(s.id);
      while (slots_[i].value) i = next(i);
      slots_[i] = std::move(s);
    }
  }

  // Backward-shift deletion: each later entry of the run that may move into
  // the hole does, so lookups never meet a gap before their entry.
  void remove_at(size_t hole) {
    for (size_t j = next(hole); slots_[j].value; j = next(j)) {
      size_t k = home(slots_[j].id);
      // Entry j may fill the hole when its home is not cyclically in (hole, j].
      bool stays = hole <= j ? (hole < k && k <= j) : (hole < k || k <= j);
      if (stays) continue;
      slots_[hole] = std::move(slots_[j]);
      hole = j;
    }
    slots_[hole].value.reset();
    --size_;
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
  int shift_ = 64;
};

}  // namespace outboard
