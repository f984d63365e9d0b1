// Futex wait/wake on a 32-bit atomic, with an absolute monotonic deadline:
// std::atomic::wait has no timeout, and every wait in Outboard needs one.
// kPrivate for a word of this process; kShared for one in memory that
// other processes map too (the agent's session budget).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <ctime>

#include "outboard/clock.h"

namespace outboard {

enum class FutexScope : int { kPrivate = FUTEX_PRIVATE_FLAG, kShared = 0 };

/// Sleeps while `word` holds `expected`, until woken or `deadline`.
inline void futex_wait(std::atomic<uint32_t>& word, uint32_t expected, Deadline deadline,
                       FutexScope scope = FutexScope::kPrivate) {
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.at().time_since_epoch()).count();
  timespec at{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  // steady_clock is CLOCK_MONOTONIC on Linux, the clock FUTEX_WAIT_BITSET uses.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_BITSET | static_cast<int>(scope), expected, &at,
          nullptr, FUTEX_BITSET_MATCH_ANY);
}

inline void futex_wake(std::atomic<uint32_t>& word, int count, FutexScope scope = FutexScope::kPrivate) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE | static_cast<int>(scope), count);
}

}  // namespace outboard
