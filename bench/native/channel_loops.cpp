#include <algorithm>
#include <cstring>
#include <memory>

#include "bench/native/loops.h"
#include "bench/native/timing.h"
#include "outboard/checksum.h"

namespace outboard::bench {
namespace {

constexpr size_t kDistinctBytes = 64u << 20;  // payloads cycle through this much distinct data

// Distinct payloads and their checksums, made before the clock starts.
struct Payloads {
  std::vector<std::vector<uint8_t>> data;
  std::vector<uint64_t> sums;
  Payloads(size_t size, uint64_t uses) {
    size_t n = std::clamp<uint64_t>(size ? kDistinctBytes / size : uses, 1, std::max<uint64_t>(uses, 1));
    n = std::min<size_t>(n, 1u << 16);
    data.assign(n, std::vector<uint8_t>(size));
    sums.resize(n);
    for (size_t i = 0; i < n; ++i) {
      fill_pattern(data[i], size * 1000003 + i);
      sums[i] = checksum(data[i]);
    }
  }
  const std::vector<uint8_t>& operator[](uint64_t i) const { return data[i % data.size()]; }
};

}  // namespace

Result<RoundTrips> round_trips(Connection& c, size_t size, size_t iterations, size_t warmup, double timeout_s,
                               const Interrupt& interrupt) {
  Payloads payloads(size, iterations + warmup);
  RoundTrips out;
  SampleClock clock;
  clock.reserve(iterations);
  for (size_t i = 0; i < warmup + iterations; ++i) {
    const auto& p = payloads[i];
    const Deadline deadline = deadline_in(timeout_s);
    uint64_t t0 = SampleClock::ticks();
    auto r = c.request("echo", p, deadline);
    uint64_t t1 = SampleClock::ticks();
    if (!r.ok()) return r.status();
    if (r.value().size() != size || (size && std::memcmp(r.value().data(), p.data(), size) != 0)) ++out.mismatches;
    if (i >= warmup) clock.add(t0, t1);
    if (i % kInterruptEvery == kInterruptEvery - 1 && interrupt) OB_RETURN_IF_ERROR(interrupt());
  }
  out.samples_us = clock.microseconds();
  return out;
}

namespace {

Result<Stream> timed_stream(Connection& c, const Payloads& payloads, size_t size, uint64_t count, double timeout_s,
                            const Interrupt& interrupt) {
  // Fold the expected digest as we go: cheap next to a send.
  uint64_t digest = kChecksumChainSeed;
  const auto* sums = payloads.sums.data();
  const size_t distinct = payloads.data.size();
  Deadline deadline = deadline_in(timeout_s);
  // Posted messages still point into `payloads`: whatever ends this function
  // (an error, an interrupt's exception) first waits for their completions,
  // and closes the connection (cancelling them) if they do not come.
  struct InFlight {
    Connection& c;
    Deadline deadline;
    std::shared_ptr<std::pair<uint64_t, Status>> done = std::make_shared<std::pair<uint64_t, Status>>();
    uint64_t posted = 0;
    ~InFlight() {
      while (done->first < posted && !deadline.expired()) c.progress();
      if (done->first < posted) c.close();
    }
  } flight{c, deadline};
  auto on_done = [state = flight.done](Status st) {
    ++state->first;
    if (!st.ok() && state->second.ok()) state->second = std::move(st);
  };
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < count; ++i) {
    OB_RETURN_IF_ERROR(c.post(payloads[i], deadline, "sink", on_done));
    ++flight.posted;
    digest = checksum_fold(digest, sums[i % distinct]);
    if (i % kInterruptEvery == kInterruptEvery - 1 && interrupt) OB_RETURN_IF_ERROR(interrupt());
  }
  OB_ASSIGN_OR_RETURN(Buffer tally, c.request("sink", {}, deadline));  // ordered after every message
  uint64_t t1 = now_ns();
  while (flight.done->first < count && !deadline.expired()) c.progress();  // local completions, already past
  OB_RETURN_IF_ERROR(flight.done->second);
  if (flight.done->first < count) return Status(Code::kTimedOut, "stream: sends not completed before the deadline");
  Stream out;
  out.seconds = static_cast<double>(t1 - t0) / 1e9;
  uint64_t got[3] = {0, 0, 0};
  if (tally.size() == sizeof(got)) std::memcpy(got, tally.data(), sizeof(got));
  out.messages = got[0];
  out.bytes = got[1];
  out.verified = tally.size() == sizeof(got) && got[0] == count && got[1] == count * size && got[2] == digest;
  return out;
}

}  // namespace

Result<Stream> stream(Connection& c, size_t size, uint64_t count, bool reuse_payload, double timeout_s,
                      const Interrupt& interrupt) {
  Payloads payloads(size, reuse_payload ? 1 : count);
  OB_RETURN_IF_ERROR(c.request("sink", {}, deadline_in(timeout_s)).status());  // start a fresh tally
  return timed_stream(c, payloads, size, count, timeout_s, interrupt);
}

Result<Session> session(const std::string& address, size_t size, uint64_t count, double timeout_s) {
  Payloads payloads(size, count);
  uint64_t t0 = now_ns();
  OB_ASSIGN_OR_RETURN(auto conn, Connection::connect(address));
  uint64_t t1 = now_ns();
  OB_ASSIGN_OR_RETURN(Stream s, timed_stream(*conn, payloads, size, count, timeout_s, {}));
  conn->close();
  return Session{static_cast<double>(t1 - t0) / 1000.0, s.seconds * 1e6, s.verified};
}

}  // namespace outboard::bench
