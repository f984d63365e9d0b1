// Timed loops behind `outboard bench`: native, so the figures measure the
// channel rather than the interpreter. Every loop uses distinct payloads
// (a repeated payload flatters caches) and verifies what it moved outside
// the timed part. Thread mode: one loop per connection at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "outboard/channel.h"
#include "outboard/status.h"

namespace outboard::bench {

/// Called every few thousand iterations; a non-ok status stops the loop with
/// it (how the Python layer delivers Ctrl-C).
using Interrupt = std::function<Status()>;

struct RoundTrips {
  std::vector<double> samples_us;  ///< one per timed request
  uint64_t mismatches = 0;         ///< responses that differ from the request
};
/// Requests to `echo` of `size` bytes: warm-up, then one timed sample each.
Result<RoundTrips> round_trips(Connection& c, size_t size, size_t iterations, size_t warmup, double timeout_s,
                               const Interrupt& interrupt);

struct Stream {
  double seconds = 0;     ///< first send to the sink's tally in hand
  uint64_t messages = 0;  ///< as tallied by the sink
  uint64_t bytes = 0;
  bool verified = false;  ///< count, bytes and order-sensitive digest all match what was sent
};
/// `count` one-way messages of `size` bytes to `sink`, then its tally.
Result<Stream> stream(Connection& c, size_t size, uint64_t count, double timeout_s, const Interrupt& interrupt);

struct Session {
  double connect_us = 0;  ///< connection set-up: bootstrap, worker addresses, endpoints
  double stream_us = 0;   ///< `count` messages and the sink's tally
  bool verified = false;
};
/// A whole short-lived client, as DOCA's secure_channel sample times it,
/// with set-up reported apart from the messages.
Result<Session> session(const std::string& address, size_t size, uint64_t count, double timeout_s);

}  // namespace outboard::bench
