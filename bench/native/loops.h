// Timed loops behind `outboard bench`: native, so the figures measure the
// channel rather than the interpreter. Every loop uses distinct payloads
// (a repeated payload flatters caches) and verifies what it moved outside
// the timed part. Thread mode: one loop per connection at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "outboard/channel.h"
#include "outboard/status.h"
#include "outboard/tokenize_client.h"
#include "outboard/tokenizer.h"

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
/// `count` one-way messages of `size` bytes to `sink`, posted (many in
/// flight), then its tally. `reuse_payload`: one payload for every message,
/// as ucx_perftest sends (cache- and TLB-hot); else distinct payloads cycling
/// through 64 MiB.
Result<Stream> stream(Connection& c, size_t size, uint64_t count, bool reuse_payload, double timeout_s,
                      const Interrupt& interrupt);

struct Session {
  double connect_us = 0;  ///< connection set-up: bootstrap, worker addresses, endpoints
  double stream_us = 0;   ///< `count` messages and the sink's tally
  bool verified = false;
};
/// A whole short-lived client, as DOCA's secure_channel sample times it,
/// with set-up reported apart from the messages.
Result<Session> session(const std::string& address, size_t size, uint64_t count, double timeout_s);

}  // namespace outboard::bench

namespace outboard::bench {

/// A region of `size` bytes allocated by the agent's `memory` service for
/// this connection, imported for one-sided access.
Result<RemoteRegion> agent_region(Connection& c, uint64_t size, double timeout_s,
                                  MemoryKind kind = MemoryKind::kHost);

struct OneSidedBandwidth {
  std::vector<double> iteration_us;  ///< per iteration: `ops` operations then completion
  uint64_t ops = 0;                  ///< timed operations in all
  uint64_t bytes = 0;
  bool verified = false;  ///< the peer's bytes equal ours after the cell
};
/// perftest's bandwidth shape: each iteration issues `ops` puts (or gets) of
/// `size` bytes, spread over the connections round-robin into each one's
/// agent region, then waits for all of them (flush; gets complete in place).
/// Puts are verified by the agent's checksum of its region, gets against the
/// pattern the agent wrote. `reuse_buffer`: every operation uses the same
/// bytes at both ends, as perftest and ucx_perftest do (cache-hot); else
/// each of an iteration's operations has its own slot. `target` kCuda puts
/// into agent regions in GPU memory, which the agent's CPU does not read:
/// they are verified by getting the bytes back (puts only).
Result<OneSidedBandwidth> one_sided_bandwidth(std::span<Connection* const> connections, bool put, size_t size,
                                              size_t ops, size_t iterations, size_t warmup, bool reuse_buffer,
                                              MemoryKind target, double timeout_s, const Interrupt& interrupt);

struct PostedWrites {
  uint64_t wall_ns = 0;    ///< from the first store to the agent's answer that the last signal landed
  uint64_t kernel_ns = 0;  ///< the kernel's, by CUDA events (GPU-initiated only)
  uint64_t ops = 0, bytes = 0;  ///< timed, in all
  bool verified = false;        ///< the agent's checksum of the last iteration is ours
};
/// GPUNetIO's experiment on one host, in perftest's shape: `iterations` iterations of `ops` writes
/// of `size` bytes (a multiple of 8) into the agent's region, which this process maps, each
/// iteration followed by a signal word the agent polls (memory 'G'). `gpu`: a CUDA kernel makes the
/// stores (gpu/writes.h), no CPU in the data path; else this thread makes the same stores. After
/// `warmup` iterations, timed until the agent answers that the last signal landed, with the
/// checksum of what it holds.
Result<PostedWrites> posted_writes(Connection& c, bool gpu, size_t size, size_t ops, size_t iterations, size_t warmup,
                                   double timeout_s);

struct OneSidedLatency {
  std::vector<double> samples_us;  ///< full round trips
  uint64_t mismatches = 0;
};
/// Per operation: a get of `size` bytes (a round trip, as perftest's
/// read_lat), or a write-with-notify answered by the agent with the checksum
/// of what landed (write, peer sees it, peer answers: perftest's write_lat
/// ping-pong shape; halve for one-way).
Result<OneSidedLatency> one_sided_latency(Connection& c, bool notify, size_t size, size_t iterations, size_t warmup,
                                          double timeout_s, const Interrupt& interrupt);

/// perftest's write_lat shape on our API, like for like with ucx_perftest's
/// ucp_put_lat: a put_signal() of `size` bytes into the agent's region (the
/// data, then the signal in the last 8, as perftest's sequence number is the
/// last byte of its message), which the agent's `memory` mirror (polling
/// memory, as perftest's peer does) puts back into ours the same way; we poll
/// for it (wait_signal()). Samples are round trips; every pong is compared
/// with its ping.
Result<OneSidedLatency> signal_ping_pong(Connection& c, size_t size, size_t iterations, size_t warmup,
                                         double timeout_s, const Interrupt& interrupt);

/// An open-loop load run, as a C++ inference server would drive it: request i
/// (one text) arrives `arrivals_s[i]` seconds after the start and one
/// dispatcher thread hands it on at that moment, whatever is still running.
struct OpenLoop {
  std::vector<double> latency_us;   ///< arrival to ids in hand, per request that succeeded
  std::vector<uint64_t> checksums;  ///< per request: checksum() of its ids' bytes (0 if it failed)
  uint64_t failed = 0;
  double wall_s = 0;  ///< start to the last completion
  double cpu_s = 0;   ///< this process's CPU over the run, all threads
  /// Agent placement: CPU in the submit calls, in the completion callbacks,
  /// and the rest of the thread that waits for answers (its waits and wake-ups).
  double submit_cpu_s = 0, completion_cpu_s = 0, wait_cpu_s = 0;
};
/// The load generator alone: it wakes at every arrival and hands on nothing.
/// Its CPU is the floor every placement pays.
OpenLoop open_loop_arrivals(std::span<const double> arrivals_s);
/// Each text tokenized in this process by one of `threads` threads.
Result<OpenLoop> open_loop_host(const Tokenizer& tokenizer, std::span<const std::string_view> texts,
                                std::span<const double> arrivals_s, unsigned threads, double timeout_s);
/// Each text submitted to the agent; one thread drives the connection and
/// takes the completions (the ids are read in place, where the agent put them).
/// `time_phases`: fill the *_cpu_s phases (four thread-clock reads a request).
Result<OpenLoop> open_loop_agent(Connection& c, RemoteTokenizer& tokenizer, std::span<const std::string_view> texts,
                                 std::span<const double> arrivals_s, double timeout_s, bool time_phases = false);

/// A timerfd for event loops: readable from the CLOCK_MONOTONIC time given to
/// set() (Python's time.monotonic_ns()) until clear(). It wakes an asyncio
/// load test at each arrival the way a request's socket would, to the
/// nanosecond (a loop's own timers round their waits up to milliseconds).
class ArrivalTimer {
 public:
  static Result<ArrivalTimer> create();
  ArrivalTimer(ArrivalTimer&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  ArrivalTimer& operator=(ArrivalTimer&&) = delete;
  ~ArrivalTimer();
  [[nodiscard]] int fd() const { return fd_; }
  [[nodiscard]] Status set(uint64_t monotonic_ns);
  /// Consumes the expiry, so the fd is no longer readable.
  void clear();

 private:
  explicit ArrivalTimer(int fd) : fd_(fd) {}
  int fd_;
};

/// A cache line passed back and forth between threads pinned to `core_a`
/// and `core_b`: one-way time per batch of round trips. kTimedOut when the
/// batches take longer than `timeout_s` (the other core busy elsewhere).
struct CoreToCore {
  std::vector<double> one_way_ns;  ///< one per batch
};
Result<CoreToCore> core_to_core(int core_a, int core_b, size_t batches, size_t round_trips_per_batch,
                                double timeout_s);

}  // namespace outboard::bench
