// Clocks and pacing shared by the benchmark loops.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

#include "outboard/clock.h"

namespace outboard::bench {

/// Loop iterations between calls to the Interrupt callback.
inline constexpr size_t kInterruptEvery = 4096;

/// Per-sample timing of latency loops. Reads the CPU's constant-rate counter
/// where there is one (the invariant TSC on x86-64, the virtual counter on
/// AArch64), as ucx_perftest, our peer, does (it does not fence the read; we
/// do): a steady_clock read costs ~25 ns on the VMs we measure on, a TSC read
/// ~9, against a ~70 ns one-way trip. The counter is converted with the rate
/// measured against steady_clock across the whole loop.
class SampleClock {
 public:
  SampleClock() : start_ticks_(ticks()), start_ns_(now_ns()) {}

  /// Records one sample from two ticks() readings.
  void add(uint64_t from, uint64_t to) { samples_.push_back(to - from); }
  void reserve(size_t n) { samples_.reserve(n); }
  /// The samples in microseconds, at the rate measured from construction to now.
  [[nodiscard]] std::vector<double> microseconds() const {
    const uint64_t elapsed = ticks() - start_ticks_;
    const double ns_per_tick = elapsed ? static_cast<double>(now_ns() - start_ns_) / static_cast<double>(elapsed) : 1.0;
    std::vector<double> us;
    us.reserve(samples_.size());
    for (uint64_t t : samples_) us.push_back(static_cast<double>(t) * ns_per_tick / 1000.0);
    return us;
  }

  /// The counter now; else steady_clock's nanoseconds.
  static uint64_t ticks() {
#if defined(__x86_64__)
    static const bool invariant = [] {
      unsigned a = 0, b = 0, c = 0, d = 0;
      return __get_cpuid(0x80000007, &a, &b, &c, &d) && (d & (1u << 8)) != 0;
    }();
    if (invariant) {
      _mm_lfence();  // not before the awaited load has completed: rdtsc alone may run ahead of it
      return __rdtsc();
    }
#elif defined(__aarch64__)
    uint64_t v;
    asm volatile("isb; mrs %0, cntvct_el0" : "=r"(v));
    return v;
#endif
    return now_ns();
  }

 private:
  uint64_t start_ticks_;
  uint64_t start_ns_;
  std::vector<uint64_t> samples_;
};

inline Deadline deadline_in(double seconds) {
  return Deadline::after(std::chrono::nanoseconds(static_cast<int64_t>(seconds * 1e9)));
}

}  // namespace outboard::bench
