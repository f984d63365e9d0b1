// The hub's waits: adaptive spinning polls while answers come soon after a
// wait goes idle, and sleeps at once when they come late; its bell; the
// order of its deferred work.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "channel/hub.h"
#include "util/net.h"

namespace outboard::channel {
namespace {

constexpr Spin kAdaptive{1000, true};  // a 1 ms window

TEST(IdleGaps, ShortGapsKeepTheWindowAndLateOnesCloseIt) {
  IdleGaps gaps;
  EXPECT_EQ(gaps.spin_ns(kAdaptive), 1'000'000u);  // nothing learnt yet: poll
  for (int i = 0; i < 8; ++i) gaps.learn(5'000, kAdaptive);  // 5 us round trips
  EXPECT_EQ(gaps.spin_ns(kAdaptive), 1'000'000u);
  gaps.learn(50'000'000, kAdaptive);  // one late answer, counted as 2 windows
  EXPECT_LE(gaps.average_ns(), 1'000'000u);
  EXPECT_EQ(gaps.spin_ns(kAdaptive), 1'000'000u) << "one late answer stopped the polling";
  for (int i = 0; i < 4; ++i) gaps.learn(5'000'000, kAdaptive);  // 5 ms tokenizations
  EXPECT_EQ(gaps.spin_ns(kAdaptive), 0u);
  EXPECT_EQ(gaps.spin_ns({1000, false}), 1'000'000u) << "without adaptive the window always applies";
  for (int i = 0; i < 8; ++i) gaps.learn(5'000, kAdaptive);  // round trips again
  EXPECT_EQ(gaps.spin_ns(kAdaptive), 1'000'000u);
}

TEST(IdleGaps, ByDefaultAClientPollsThroughRoundTripsButNotThroughTokenizations) {
  const Spin spin = spin_of(ChannelConfig{});
  IdleGaps gaps;
  for (int i = 0; i < 8; ++i) gaps.learn(20'000, spin);  // a small request's round trip
  EXPECT_GT(gaps.spin_ns(spin), 0u);
  // An 8 KB tokenization's answer, or a loaded collector's next one: a sleep costs less.
  for (int i = 0; i < 8; ++i) gaps.learn(100'000, spin);
  EXPECT_EQ(gaps.spin_ns(spin), 0u);
}

// CPU this thread spends inside `waits` waits, each ended by another thread
// `late` after it began (the peer's start is not counted: under TSan it costs
// more than a wake-up).
uint64_t cpu_of_waits(Hub& hub, Spin spin, int waits, std::chrono::microseconds late) {
  uint64_t cpu = 0;
  for (int i = 0; i < waits; ++i) {
    std::atomic<bool> answered{false};
    std::thread peer([&] {
      std::this_thread::sleep_for(late);
      hub.post([&answered] { answered.store(true); });
    });
    const uint64_t cpu0 = thread_cpu_ns();
    {
      Lock lock(hub.mutex());
      EXPECT_TRUE(hub.wait_until(Deadline::after_ms(10000), spin, [&] { return answered.load(); }));
    }
    cpu += thread_cpu_ns() - cpu0;
    peer.join();
  }
  return cpu;
}

TEST(HubWait, AdaptiveWaitsSleepThroughLateAnswersThatFixedSpinsPollFor) {
  auto hub = Hub::get().value();
  constexpr Spin kWindow{2000, true};
  constexpr auto kLate = std::chrono::microseconds(10000);
  (void)cpu_of_waits(*hub, kWindow, 6, kLate);  // learns that answers come late
  const uint64_t adaptive = cpu_of_waits(*hub, kWindow, 5, kLate);
  const uint64_t fixed = cpu_of_waits(*hub, {kWindow.us, false}, 5, kLate);
  // Fixed: ~2 ms of polling per wait. Adaptive: a wake-up's worth.
  EXPECT_GT(fixed, 6'000'000u);
  EXPECT_LT(adaptive, fixed / 3) << "adaptive " << adaptive << " ns, fixed " << fixed << " ns";
}

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

TEST(HubBell, ARungBellWakesWhoeverPollsTheEventFdOnceAndArmResetsIt) {
  auto hub = Hub::get().value();
  Lock lock(hub->mutex());
  net::Fd self(static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0)));
  auto bell = net::open_peer_pipe(self, ::getpid(), hub->offer_bell());  // as a peer takes it
  ASSERT_TRUE(bell.ok()) << bell.status().to_string();
  ASSERT_TRUE(hub->arm().ok());
  ASSERT_FALSE(readable(hub->event_fd())) << "an idle hub, armed";
  ASSERT_EQ(2, ::write(bell->get(), "!!", 2));  // as a peer rings it (twice: a late ring for an earlier sleep)
  EXPECT_TRUE(readable(hub->event_fd()));
  hub->progress();
  // An event loop that polls event_fd() arms before it sleeps again: it must not find it readable forever.
  ASSERT_TRUE(hub->arm().ok());
  EXPECT_FALSE(readable(hub->event_fd())) << "the bell was not reset: whoever polls the hub would spin";
}

// Deferred work runs in the order it was deferred, also when a call blocks and progresses again
// meanwhile (as a service does that reads a client's memory): there the next calls run in the
// nested round, never a later one before an earlier. (A connection's frames wait here in order.)
TEST(HubDefer, ACallThatProgressesRunsTheNextInOrderAndNothingOvertakes) {
  auto hub = Hub::get().value();
  Lock lock(hub->mutex());
  std::vector<int> ran;
  hub->defer([&] {
    ran.push_back(0);
    hub->defer([&] { ran.push_back(2); });  // comes while 0 runs, after 1 was deferred
    hub->progress();
    ran.push_back(-1);  // 0 ends
  });
  hub->defer([&] { ran.push_back(1); });
  hub->progress();
  EXPECT_EQ(ran, (std::vector<int>{0, 1, 2, -1}));
}

}  // namespace
}  // namespace outboard::channel
