// What sessions hold for clients, counted in memory every session process
// maps (a memfd the listener makes), with a slot per session so that what a
// session held when it ended (or crashed) goes back:
// - agent memory that services hold (regions, graph instances) and that
//   open requests and unacknowledged one-way messages hold, against
//   --max-memory agent-wide and --max-session-memory per session, so that
//   one client cannot take what the others need;
// - tokenize workers busy at once, the agent's CPU a client takes.
// Sessions of one TLS identity (a tenant) also share a group, which holds
// at most its own quota of each across them (--max-client-memory,
// --max-client-tokenize-threads), and of what its connections hold in
// numbers (outstanding requests, graph instances: --max-client-requests,
// --max-client-graph-instances): a tenant that opens more sessions or
// connections gets no more memory, cores, requests or instances.
// Thread mode: multi (atomics).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string_view>

#include "outboard/status.h"

namespace outboard {

class SessionBudget {
 public:
  /// A session in no group (a plaintext client's).
  static constexpr uint32_t kNoGroup = UINT32_MAX;
  /// What one session and one group may hold.
  struct Quotas {
    uint64_t session = 0;        ///< --max-session-memory
    uint64_t group = 0;          ///< --max-client-memory
    uint32_t group_workers = 0;  ///< --max-client-tokenize-threads; 0: no limit
    uint32_t group_requests = 0;   ///< --max-client-requests; 0: no limit
    uint32_t group_instances = 0;  ///< --max-client-graph-instances; 0: no limit
  };
  /// What a group's sessions hold in numbers.
  enum class Held : uint32_t { kRequests, kGraphInstances };
  static constexpr uint32_t kHeldKinds = 2;
  /// A budget of `limit` bytes, at most `quotas` of them per session and
  /// per group, for up to `slots` sessions (and as many groups), in shared memory.
  static Result<std::shared_ptr<SessionBudget>> create(uint64_t limit, Quotas quotas, uint32_t slots);
  /// A session's view of the listener's budget (`fd` from create()'s fd()):
  /// its `slot`, in `group` (< slots) or kNoGroup.
  static Result<std::shared_ptr<SessionBudget>> attach(int fd, uint64_t limit, Quotas quotas, uint32_t slots,
                                                       uint32_t slot, uint32_t group = kNoGroup);
  ~SessionBudget();

  /// Takes `bytes` for `what` in this session's slot; kNoMemory naming the
  /// use and the limit (the session's quota, its group's or the agent's) it would go over.
  [[nodiscard]] Status reserve(uint64_t bytes, std::string_view what);
  void release(uint64_t bytes);

  /// Takes one of its group's quotas.group_workers for a worker about to
  /// tokenize, waiting while the group's other sessions keep them all busy
  /// (each ends its batch, or its session ends). False, having taken none,
  /// once `stop` is set. Whether it had to wait goes to `waited`.
  [[nodiscard]] bool begin_work(const std::atomic<bool>& stop, bool& waited);
  /// Gives back what begin_work() took.
  void end_work();

  /// Takes one `held` of the group's quota; kAgain naming the quota and
  /// its option when the group holds all of it. A session of no group (a
  /// plaintext client's) counts nothing here: hold() and drop() do nothing.
  [[nodiscard]] Status hold(Held held);
  /// Gives back `n` that hold() took.
  void drop(Held held, uint32_t n = 1);

  /// The listener: session `slot` of `group` ended, what it held is free.
  void release_slot(uint32_t slot, uint32_t group = kNoGroup);

  /// Whether this session counts against a group's quotas (a TLS client's).
  [[nodiscard]] bool grouped() const { return group_ != kNoGroup; }
  [[nodiscard]] int fd() const { return fd_; }
  [[nodiscard]] uint64_t used() const { return words_[0].load(std::memory_order_relaxed); }
  [[nodiscard]] uint64_t limit() const { return limit_; }
  /// What the sessions of `group` hold of `held` now.
  [[nodiscard]] uint32_t held(Held held, uint32_t group) const {
    return group < slots_ ? count(held, slots_ + group).load(std::memory_order_relaxed) : 0;
  }
  /// Workers the sessions of `group` keep busy now.
  [[nodiscard]] uint32_t busy_workers(uint32_t group) const {
    return group < slots_ ? workers_[slots_ + group].load(std::memory_order_relaxed) : 0;
  }

 private:
  SessionBudget(int fd, void* mapped, uint32_t slots, uint64_t limit, Quotas quotas, uint32_t slot, uint32_t group);
  std::atomic<uint64_t>& group_word(uint32_t group) const { return words_[1 + slots_ + group]; }
  // This session's group's quota of `held`; 0 (nothing counted) without a group or a limit.
  uint32_t quota(Held held) const;
  // Session i's count of `held` at [i], group g's at [slots + g].
  std::atomic<uint32_t>& count(Held held, uint32_t index) const {
    return counts_[2 * size_t{slots_} * static_cast<uint32_t>(held) + index];
  }
  int fd_;
  std::atomic<uint64_t>* words_;    // [0] total bytes, [1 + i] session i's, [1 + slots + g] group g's
  std::atomic<uint32_t>* workers_;  // [i] session i's busy, [slots + g] group g's (a futex word), [2 slots + g] its waiters
  std::atomic<uint32_t>* counts_;   // kHeldKinds of 2 slots: count()
  uint32_t slots_;
  uint64_t limit_;
  Quotas quotas_;
  uint32_t slot_;
  uint32_t group_;
};

}  // namespace outboard
