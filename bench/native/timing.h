// Clocks and pacing shared by the benchmark loops.
#pragma once

#include <chrono>
#include <cstdint>

#include "outboard/clock.h"

namespace outboard::bench {

/// Loop iterations between calls to the Interrupt callback.
inline constexpr size_t kInterruptEvery = 4096;

inline uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

inline Deadline deadline_in(double seconds) {
  return Deadline::after(std::chrono::nanoseconds(static_cast<int64_t>(seconds * 1e9)));
}

}  // namespace outboard::bench
