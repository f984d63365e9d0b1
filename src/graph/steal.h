// When a thief steals, as pure functions: the executor applies them, and the
// tests check them without depending on how threads get scheduled.
#pragma once

#include <algorithm>
#include <cstdint>

#include "outboard/graph.h"

namespace outboard::graph::detail {

inline constexpr uint64_t kStealPatienceNs = 300;  // a thread's first
inline constexpr uint64_t kMinStealPatienceNs = 50;
inline constexpr uint64_t kMaxStealPatienceNs = 4000;
/// A victim holding more than this many items has a backlog: taken at once.
inline constexpr int64_t kStealBacklogItems = 64;

/// What a thief saw at the top of one victim's deque: the top index of the
/// oldest item (which names one item for as long as it is there), and since when.
struct Seen {
  int64_t top = -1;
  uint64_t since_ns = 0;
};

/// Whether a thief may steal from a victim whose deque holds `size` items,
/// the oldest at `top`, at time `now_ns`: that item has waited `patience_ns`
/// since the thief first saw it, or the victim has a backlog. A new oldest
/// item starts the wait again.
inline bool patient_enough(int64_t size, int64_t top, uint64_t now_ns, Seen& seen, uint64_t patience_ns) {
  if (size <= 0) return false;
  if (size > kStealBacklogItems) return true;
  if (seen.top != top) {
    seen = {top, now_ns};
    return false;
  }
  return now_ns - seen.since_ns >= patience_ns;
}

/// The thief's patience after a steal that brought `tasks` tasks, at its
/// fastest recent pace of `best_ns_per_task`: a chain worth less than a
/// hand-off (crumbs) doubles it, up to the maximum; real work halves it.
inline uint64_t adapted_patience(uint64_t patience_ns, uint32_t tasks, double best_ns_per_task) {
  const bool worth = static_cast<double>(tasks) * best_ns_per_task >= static_cast<double>(kHandOffNs);
  return worth ? std::max(patience_ns / 2, kMinStealPatienceNs) : std::min(patience_ns * 2, kMaxStealPatienceNs);
}

}  // namespace outboard::graph::detail
