// Monotonic time and deadlines: every blocking wait in Outboard takes one.
#pragma once

#include <chrono>
#include <cstdint>

namespace outboard {

using Clock = std::chrono::steady_clock;

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
  [[nodiscard]] Clock::time_point at() const { return at_; }
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
