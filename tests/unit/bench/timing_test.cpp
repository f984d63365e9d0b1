#include "bench/native/timing.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace outboard::bench {
namespace {

// The counter's rate is measured, not assumed: a sample must read as the
// steady_clock time it spans, whatever the counter (TSC, cntvct, the clock).
TEST(SampleClockTest, SamplesReadInMicrosecondsOfSteadyClockTime) {
  SampleClock clock;
  for (int i = 0; i < 3; ++i) {
    const uint64_t t0 = SampleClock::ticks();
    const uint64_t ns0 = now_ns();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const uint64_t ns1 = now_ns();
    clock.add(t0, SampleClock::ticks());
    const std::vector<double> us = clock.microseconds();
    ASSERT_EQ(us.size(), static_cast<size_t>(i + 1));
    const double expect_us = static_cast<double>(ns1 - ns0) / 1000.0;
    EXPECT_NEAR(us.back(), expect_us, expect_us * 0.02 + 5.0);
  }
}

TEST(SampleClockTest, NoSamplesGiveAnEmptyList) { EXPECT_TRUE(SampleClock().microseconds().empty()); }

}  // namespace
}  // namespace outboard::bench
