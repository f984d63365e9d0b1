// Monotonic time and deadlines: every blocking wait in Outboard takes one.
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>

namespace outboard {

using Clock = std::chrono::steady_clock;

/// CPU time of a clock_gettime clock (CLOCK_PROCESS_CPUTIME_ID: every thread
/// of this process, user and system; CLOCK_THREAD_CPUTIME_ID: the caller).
inline uint64_t cpu_clock_ns(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(t.tv_nsec);
}
inline uint64_t process_cpu_ns() { return cpu_clock_ns(CLOCK_PROCESS_CPUTIME_ID); }
inline uint64_t thread_cpu_ns() { return cpu_clock_ns(CLOCK_THREAD_CPUTIME_ID); }

inline uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}

class Deadline {
 public:
  static Deadline after(std::chrono::nanoseconds d) { return Deadline(Clock::now() + d); }
  static Deadline after_ms(int64_t ms) { return after(std::chrono::milliseconds(ms)); }
  /// Already expired: a single non-blocking attempt.
  static Deadline now() { return Deadline(Clock::now()); }

  [[nodiscard]] bool expired() const { return Clock::now() >= at_; }
  /// As expired(), against a time the caller has read already (a clock read
  /// costs ~20 ns on the VMs we measure on).
  [[nodiscard]] bool expired_at(Clock::time_point now) const { return now >= at_; }
  [[nodiscard]] Clock::time_point at() const { return at_; }
  /// This deadline moved `d` later.
  [[nodiscard]] Deadline extended(std::chrono::nanoseconds d) const { return Deadline(at_ + d); }
  /// Milliseconds left, rounded up, 0 when expired.
  [[nodiscard]] int remaining_ms() const {
    auto left = at_ - Clock::now();
    if (left <= Clock::duration::zero()) return 0;
    return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
  }

 private:
  explicit Deadline(Clock::time_point at) : at_(at) {}
  Clock::time_point at_;
};

}  // namespace outboard
