// Cache-line ping-pong between two pinned threads: what one core's write
// costs to reach another here. On the 2-core VMs we measure on it moves from
// run to run (the host places the two vCPUs near or far), and every
// cross-process figure moves with it, so the suites record it beside them.
#include <atomic>
#include <chrono>
#include <thread>

#include "bench/native/loops.h"
#include "bench/native/timing.h"
#include "outboard/affinity.h"

namespace outboard::bench {
namespace {

struct alignas(64) Line {
  std::atomic<uint64_t> value{0};
};

// Spins until `line` holds `want`; false once `stop` is set.
bool await(const Line& line, uint64_t want, const std::atomic<bool>& stop) {
  for (uint32_t spins = 0;; ++spins) {
    if (line.value.load(std::memory_order_acquire) == want) return true;
    if ((spins & 1023) == 1023 && stop.load(std::memory_order_relaxed)) return false;
  }
}

}  // namespace

// Both sides run on threads of their own, so the caller's affinity (which
// the processes it starts inherit) is left alone.
Result<CoreToCore> core_to_core(int core_a, int core_b, size_t batches, size_t round_trips_per_batch,
                                double timeout_s) {
  if (batches == 0 || round_trips_per_batch == 0)
    return Status(Code::kInvalidArgument, "core_to_core needs at least one batch of one round trip");
  Line ping, pong;
  std::atomic<bool> stop{false};
  Status ping_status, pong_status;
  const uint64_t total = batches * round_trips_per_batch;
  std::thread ponger([&] {
    pong_status = pin_to_cores({core_b});
    if (!pong_status.ok()) return stop.store(true);
    for (uint64_t i = 1; i <= total; ++i) {
      if (!await(ping, i, stop)) return;
      pong.value.store(i, std::memory_order_release);
    }
  });
  CoreToCore out;
  std::thread pinger([&] {
    ping_status = pin_to_cores({core_a});
    uint64_t i = 0;
    for (size_t b = 0; ping_status.ok() && b < batches; ++b) {
      const uint64_t t0 = now_ns();
      for (size_t k = 0; k < round_trips_per_batch; ++k) {
        ping.value.store(++i, std::memory_order_release);
        if (!await(pong, i, stop)) return;
      }
      out.one_way_ns.push_back(static_cast<double>(now_ns() - t0) / (2.0 * static_cast<double>(round_trips_per_batch)));
    }
    stop.store(true);
  });
  // Nothing here may hang: past the deadline, both spinners are told to stop.
  const uint64_t deadline = now_ns() + static_cast<uint64_t>(timeout_s * 1e9);
  while (!stop.load() && now_ns() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool late = !stop.exchange(true);
  pinger.join();
  ponger.join();
  if (!ping_status.ok()) return ping_status;
  if (!pong_status.ok()) return pong_status;
  if (late || out.one_way_ns.size() != batches)
    return Status(Code::kTimedOut, "cores " + std::to_string(core_a) + " and " + std::to_string(core_b) +
                                       " did not finish " + std::to_string(total) + " round trips within " +
                                       std::to_string(timeout_s) + " s");
  return out;
}

}  // namespace outboard::bench
