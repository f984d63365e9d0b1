// Work-stealing deque (Chase-Lev, with the memory orders of Lê et al.,
// PPoPP'13): the owner pushes and pops at the bottom, thieves take from the
// top. Bounded: a full deque refuses the push and the caller spills.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace outboard::graph::detail {

struct InstanceRun;  // graph_impl.h

/// A unit of work: one node of an instance, or a run of its roots.
struct Item {
  InstanceRun* run = nullptr;
  uint32_t first = 0;  ///< node, or first root index
  uint32_t last = 0;   ///< 0: `first` is a node; else roots [first, last)
};

class WorkDeque {
 public:
  static constexpr int64_t kCapacity = 1 << 12;

  /// Owner only. False when full.
  bool push(const Item& item) {
    int64_t b = bottom_.load(std::memory_order_relaxed);
    int64_t t = top_.load(std::memory_order_acquire);
    if (b - t >= kCapacity) return false;
    Slot& s = slots_[b & (kCapacity - 1)];
    s.run.store(item.run, std::memory_order_relaxed);
    s.range.store(pack(item), std::memory_order_relaxed);
    // A release store rather than the paper's fence: same code on x86 and
    // ARM, and visible to TSan, which ignores standalone fences.
    bottom_.store(b + 1, std::memory_order_release);
    return true;
  }

  /// Owner only.
  bool pop(Item& out) {
    int64_t b = bottom_.load(std::memory_order_relaxed) - 1;
    bottom_.store(b, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    int64_t t = top_.load(std::memory_order_relaxed);
    if (t > b) {
      bottom_.store(b + 1, std::memory_order_relaxed);
      return false;
    }
    read(slots_[b & (kCapacity - 1)], out);
    if (t == b) {
      bool won = top_.compare_exchange_strong(t, t + 1, std::memory_order_seq_cst, std::memory_order_relaxed);
      bottom_.store(b + 1, std::memory_order_relaxed);
      return won;
    }
    return true;
  }

  /// Any thread.
  bool steal(Item& out) {
    int64_t t = top_.load(std::memory_order_acquire);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    int64_t b = bottom_.load(std::memory_order_acquire);
    if (t >= b) return false;
    // The slot may be rewritten under us; a torn read is then discarded
    // because the CAS fails (slots are atomics so that this is no data race).
    read(slots_[t & (kCapacity - 1)], out);
    return top_.compare_exchange_strong(t, t + 1, std::memory_order_seq_cst, std::memory_order_relaxed);
  }

  /// Any thread: the top index, and how many items there are (a snapshot).
  [[nodiscard]] int64_t top() const { return top_.load(std::memory_order_relaxed); }
  [[nodiscard]] int64_t size() const {
    return bottom_.load(std::memory_order_relaxed) - top_.load(std::memory_order_relaxed);
  }

  [[nodiscard]] bool empty() const {
    return top_.load(std::memory_order_relaxed) >= bottom_.load(std::memory_order_relaxed);
  }

 private:
  struct Slot {
    std::atomic<InstanceRun*> run{nullptr};
    std::atomic<uint64_t> range{0};
  };
  static uint64_t pack(const Item& i) { return (uint64_t{i.first} << 32) | i.last; }
  static void read(const Slot& s, Item& out) {
    out.run = s.run.load(std::memory_order_relaxed);
    uint64_t r = s.range.load(std::memory_order_relaxed);
    out.first = static_cast<uint32_t>(r >> 32);
    out.last = static_cast<uint32_t>(r);
  }

  alignas(64) std::atomic<int64_t> top_{0};
  alignas(64) std::atomic<int64_t> bottom_{0};
  alignas(64) std::unique_ptr<Slot[]> slots_{new Slot[kCapacity]};
};

/// FIFO of items behind a caller's lock: a ring that only ever grows, so a
/// steady stream of submissions allocates nothing (std::deque allocates and
/// frees a block every 32 items).
class ItemRing {
 public:
  void push(const Item& item) {
    if (size_ == slots_.size()) grow();
    slots_[(head_ + size_) & (slots_.size() - 1)] = item;
    ++size_;
  }
  bool pop(Item& out) {
    if (size_ == 0) return false;
    out = slots_[head_];
    head_ = (head_ + 1) & (slots_.size() - 1);
    --size_;
    return true;
  }
  [[nodiscard]] size_t size() const { return size_; }
  [[nodiscard]] bool empty() const { return size_ == 0; }

 private:
  void grow() {
    std::vector<Item> bigger(slots_.size() * 2);
    for (size_t i = 0; i < size_; ++i) bigger[i] = slots_[(head_ + i) & (slots_.size() - 1)];
    slots_.swap(bigger);
    head_ = 0;
  }
  std::vector<Item> slots_ = std::vector<Item>(64);
  size_t head_ = 0, size_ = 0;
};

}  // namespace outboard::graph::detail
