// Agent memory that services hold for clients (regions, graph instances),
// counted agent-wide against --max-memory. A session process is one of
// many: the count lives in memory they all map (a memfd the listener makes),
// with a slot per session so that what a session held when it ended (or
// crashed) goes back, and so that no session holds more than its quota
// (--max-session-memory): one client cannot take what the others need.
// Thread mode: multi (atomics).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>

#include "outboard/status.h"

namespace outboard {

class MemoryBudget {
 public:
  /// A budget of `limit` bytes, at most `quota` of them per session, for up to `slots` sessions, in shared memory.
  static Result<std::shared_ptr<MemoryBudget>> create(uint64_t limit, uint64_t quota, uint32_t slots);
  /// A session's view of the listener's budget (`fd` from create()'s fd()).
  static Result<std::shared_ptr<MemoryBudget>> attach(int fd, uint64_t limit, uint64_t quota, uint32_t slots,
                                                      uint32_t slot);
  ~MemoryBudget();

  /// Takes `bytes` for `what` in this session's slot; kNoMemory naming the
  /// use and the limit (the session's quota or the agent's) it would go over.
  [[nodiscard]] Status reserve(uint64_t bytes, std::string_view what);
  void release(uint64_t bytes);
  /// The listener: session `slot` ended, what it held is free.
  void release_slot(uint32_t slot);

  [[nodiscard]] int fd() const { return fd_; }
  [[nodiscard]] uint64_t used() const { return words_[0].load(std::memory_order_relaxed); }
  [[nodiscard]] uint64_t limit() const { return limit_; }

 private:
  MemoryBudget(int fd, std::atomic<uint64_t>* words, uint32_t slots, uint64_t limit, uint64_t quota, uint32_t slot)
      : fd_(fd), words_(words), slots_(slots), limit_(limit), quota_(quota), slot_(slot) {}
  int fd_;
  std::atomic<uint64_t>* words_;  // [0] total, [1 + i] session i's
  uint32_t slots_;
  uint64_t limit_;
  uint64_t quota_;
  uint32_t slot_;
};

}  // namespace outboard
