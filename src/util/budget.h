// Agent memory that services hold for clients (regions, graph instances),
// counted agent-wide against --max-memory. A session process is one of
// many: the count lives in memory they all map (a memfd the listener makes),
// with a slot per session so that what a session held when it ended (or
// crashed) goes back, and so that no session holds more than its quota
// (--max-session-memory): one client cannot take what the others need.
// Sessions of one TLS identity (a tenant) also share a group, which holds
// at most its own quota (--max-client-memory) across them.
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
  /// A session in no group (a plaintext client's).
  static constexpr uint32_t kNoGroup = UINT32_MAX;
  /// What one session and one group may hold.
  struct Quotas {
    uint64_t session = 0;  ///< --max-session-memory
    uint64_t group = 0;    ///< --max-client-memory
  };
  /// A budget of `limit` bytes, at most `quotas` of them per session and
  /// per group, for up to `slots` sessions (and as many groups), in shared memory.
  static Result<std::shared_ptr<MemoryBudget>> create(uint64_t limit, Quotas quotas, uint32_t slots);
  /// A session's view of the listener's budget (`fd` from create()'s fd()):
  /// its `slot`, in `group` (< slots) or kNoGroup.
  static Result<std::shared_ptr<MemoryBudget>> attach(int fd, uint64_t limit, Quotas quotas, uint32_t slots,
                                                      uint32_t slot, uint32_t group = kNoGroup);
  ~MemoryBudget();

  /// Takes `bytes` for `what` in this session's slot; kNoMemory naming the
  /// use and the limit (the session's quota, its group's or the agent's) it would go over.
  [[nodiscard]] Status reserve(uint64_t bytes, std::string_view what);
  void release(uint64_t bytes);
  /// The listener: session `slot` of `group` ended, what it held is free.
  void release_slot(uint32_t slot, uint32_t group = kNoGroup);

  [[nodiscard]] int fd() const { return fd_; }
  [[nodiscard]] uint64_t used() const { return words_[0].load(std::memory_order_relaxed); }
  [[nodiscard]] uint64_t limit() const { return limit_; }

 private:
  MemoryBudget(int fd, std::atomic<uint64_t>* words, uint32_t slots, uint64_t limit, Quotas quotas, uint32_t slot,
               uint32_t group)
      : fd_(fd), words_(words), slots_(slots), limit_(limit), quotas_(quotas), slot_(slot), group_(group) {}
  std::atomic<uint64_t>& group_word(uint32_t group) const { return words_[1 + slots_ + group]; }
  int fd_;
  std::atomic<uint64_t>* words_;  // [0] total, [1 + i] session i's, [1 + slots + g] group g's
  uint32_t slots_;
  uint64_t limit_;
  Quotas quotas_;
  uint32_t slot_;
  uint32_t group_;
};

}  // namespace outboard
