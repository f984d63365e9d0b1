#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>

#include "bench/native/loops.h"
#include "bench/native/timing.h"
#include "gpu/writes.h"
#include "outboard/checksum.h"
#include "services/builtin.h"

namespace outboard::bench {
namespace {

std::vector<uint8_t> request_bytes(char op, std::initializer_list<uint64_t> args) {
  std::vector<uint8_t> out(1 + 8 * args.size());
  out[0] = static_cast<uint8_t>(op);
  size_t at = 1;
  for (uint64_t a : args) std::memcpy(out.data() + (at += 8) - 8, &a, 8);
  return out;
}

// A memory service request answered with one u64.
Result<uint64_t> agent_u64(Connection& c, char op, std::initializer_list<uint64_t> args, double timeout_s) {
  OB_ASSIGN_OR_RETURN(Buffer r, c.request("memory", request_bytes(op, args), deadline_in(timeout_s)));
  if (r.size() != 8)
    return Status(Code::kIoError, std::string("memory '") + op + "' answered " + std::to_string(r.size()) + " bytes, not 8");
  uint64_t v;
  std::memcpy(&v, r.data(), 8);
  return v;
}

Result<uint64_t> agent_checksum(Connection& c, uint64_t offset, uint64_t length, double timeout_s) {
  return agent_u64(c, 'S', {offset, length}, timeout_s);
}

}  // namespace

Result<RemoteRegion> agent_region(Connection& c, uint64_t size, double timeout_s, MemoryKind kind) {
  std::vector<uint8_t> request = request_bytes('A', {size});
  if (kind == MemoryKind::kCuda) request.push_back(1);
  OB_ASSIGN_OR_RETURN(Buffer desc, c.request("memory", request, deadline_in(timeout_s)));
  return c.import_region(desc.span());
}

Result<PostedWrites> posted_writes(Connection& c, bool gpu, size_t size, size_t ops, size_t iterations, size_t warmup,
                                   double timeout_s) {
  if (size == 0 || size % 8 != 0 || ops == 0 || iterations == 0)
    return Status(Code::kInvalidArgument, "posted writes of " + std::to_string(size) + " B x " + std::to_string(ops) +
                                              " x " + std::to_string(iterations) + ": sizes are whole words, counts at least 1");
  const uint64_t bytes = uint64_t{size} * ops, words = bytes / 8, signal_at = bytes;
  OB_ASSIGN_OR_RETURN(RemoteRegion region, agent_region(c, bytes + 8, timeout_s, MemoryKind::kHost));
  auto mapped = region.mapped_span(0, region.size());
  if (!mapped.ok())
    return Status(Code::kUnsupported, "the agent's region is not mapped into this process (another host, or "
                                      "map_peer_regions=False): stores into it need UCX's device API, which this "
                                      "build lacks");
  std::unique_ptr<gpu::GpuWriter> writer;
  if (gpu) {
    OB_ASSIGN_OR_RETURN(writer, gpu::GpuWriter::create(*mapped));
  }
  auto* memory = reinterpret_cast<uint64_t*>(mapped->data());
  // Iterations from 1: the signal word starts at 0.
  auto post = [&](uint64_t first, uint64_t count) -> Status {
    if (writer) return writer->launch(words, signal_at, first, count);
    for (uint64_t it = first; it < first + count; ++it) {
      gpu::write_words(memory, words, it, 0, 1);
      std::atomic_ref<uint64_t>(memory[words]).store(it, std::memory_order_release);
    }
    return {};
  };
  const auto timeout_ms = static_cast<uint64_t>(std::min(timeout_s * 1000, double(services::kMaxSignalWaitMs)));
  auto landed = [&](uint64_t last) {  // the agent's checksum once `last` is signalled
    return agent_u64(c, 'G', {signal_at, last, bytes, timeout_ms}, timeout_s);
  };
  if (warmup > 0) {
    OB_RETURN_IF_ERROR(post(1, warmup));
    OB_RETURN_IF_ERROR(landed(warmup).status());
    if (writer) OB_RETURN_IF_ERROR(writer->finish().status());
  }
  PostedWrites out;
  const uint64_t last = warmup + iterations;
  const uint64_t t0 = now_ns();
  OB_RETURN_IF_ERROR(post(warmup + 1, iterations));
  OB_ASSIGN_OR_RETURN(const uint64_t held, landed(last));
  out.wall_ns = now_ns() - t0;
  if (writer) {
    OB_ASSIGN_OR_RETURN(out.kernel_ns, writer->finish());
  }
  std::vector<uint64_t> expect(words);
  gpu::write_words(expect.data(), words, last, 0, 1);
  out.verified = held == checksum({reinterpret_cast<const uint8_t*>(expect.data()), bytes});
  out.ops = uint64_t{ops} * iterations;
  out.bytes = out.ops * size;
  return out;
}

Result<OneSidedBandwidth> one_sided_bandwidth(std::span<Connection* const> connections, bool put, size_t size,
                                              size_t ops, size_t iterations, size_t warmup, bool reuse_buffer,
                                              MemoryKind target, double timeout_s, const Interrupt& interrupt) {
  if (connections.empty()) return Status(Code::kInvalidArgument, "one_sided_bandwidth needs a connection");
  if (!put && target == MemoryKind::kCuda)
    return Status(Code::kInvalidArgument, "gets from a GPU region: the agent cannot fill it with a pattern to check");
  const size_t n = connections.size();
  const size_t per = (ops + n - 1) / n;  // slots per connection's region
  std::vector<RemoteRegion> regions;
  for (Connection* c : connections) {
    OB_ASSIGN_OR_RETURN(RemoteRegion r, agent_region(*c, std::max<uint64_t>(per * size, 1), timeout_s, target));
    regions.push_back(std::move(r));
  }
  // Puts: distinct source bytes per slot. Gets: the agent fills its region
  // with a pattern (seed = connection index) that we check afterwards.
  std::vector<std::vector<uint8_t>> local(n, std::vector<uint8_t>(per * size));
  for (size_t e = 0; e < n; ++e) {
    if (put) {
      fill_pattern(local[e], 7000 + e);
    } else {
      OB_RETURN_IF_ERROR(connections[e]->request("memory", request_bytes('P', {e}), deadline_in(timeout_s)).status());
    }
  }
  OneSidedBandwidth out;
  out.iteration_us.reserve(iterations);
  for (size_t it = 0; it < warmup + iterations; ++it) {
    if (!put && it + 1 == warmup + iterations)  // the verified iteration must bring every byte itself
      for (auto& l : local) std::fill(l.begin(), l.end(), 0);
    Deadline deadline = deadline_in(timeout_s);
    uint64_t t0 = now_ns();
    for (size_t k = 0; k < ops; ++k) {
      const size_t e = k % n, slot = reuse_buffer ? 0 : k / n;
      uint8_t* p = local[e].data() + slot * size;
      OB_RETURN_IF_ERROR(put ? connections[e]->put(regions[e], slot * size, {p, size}, deadline)
                             : connections[e]->get(regions[e], slot * size, {p, size}, deadline));
    }
    if (put)
      for (Connection* c : connections) OB_RETURN_IF_ERROR(c->flush(deadline));
    uint64_t t1 = now_ns();
    if (it >= warmup) out.iteration_us.push_back(static_cast<double>(t1 - t0) / 1000.0);
    if (it % 64 == 63 && interrupt) OB_RETURN_IF_ERROR(interrupt());
  }
  out.ops = static_cast<uint64_t>(ops) * iterations;
  out.bytes = out.ops * size;
  out.verified = true;
  for (size_t e = 0; e < n; ++e) {
    // Bytes this connection's operations covered.
    const size_t used = reuse_buffer ? size : std::min(per, (ops - e + n - 1) / n) * size;
    if (put && target == MemoryKind::kCuda) {
      std::vector<uint8_t> back(used);
      OB_RETURN_IF_ERROR(connections[e]->get(regions[e], 0, back, deadline_in(timeout_s)));
      out.verified = out.verified && std::memcmp(back.data(), local[e].data(), used) == 0;
    } else if (put) {
      OB_ASSIGN_OR_RETURN(uint64_t remote, agent_checksum(*connections[e], 0, used, timeout_s));
      out.verified = out.verified && remote == checksum({local[e].data(), used});
    } else {
      std::vector<uint8_t> expected(per * size);
      fill_pattern(expected, e);
      out.verified = out.verified && std::memcmp(expected.data(), local[e].data(), used) == 0;
    }
  }
  return out;
}

Result<OneSidedLatency> one_sided_latency(Connection& c, bool notify, size_t size, size_t iterations, size_t warmup,
                                          double timeout_s, const Interrupt& interrupt) {
  constexpr size_t kSlots = 64;  // rotate offsets so consecutive operations touch distinct bytes
  OB_ASSIGN_OR_RETURN(RemoteRegion region, agent_region(c, std::max<uint64_t>(kSlots * size, 1), timeout_s));
  std::vector<uint8_t> local(kSlots * size), expected(kSlots * size);
  std::vector<uint64_t> sums(kSlots);
  if (notify) {
    for (size_t s = 0; s < kSlots; ++s) {
      fill_pattern({local.data() + s * size, size}, 9000 + s);
      sums[s] = checksum({local.data() + s * size, size});
    }
  } else {
    OB_RETURN_IF_ERROR(c.request("memory", request_bytes('P', {42}), deadline_in(timeout_s)).status());
    fill_pattern(expected, 42);
  }
  OneSidedLatency out;
  SampleClock clock;
  clock.reserve(iterations);
  for (size_t i = 0; i < warmup + iterations; ++i) {
    const size_t s = i % kSlots;
    uint8_t* p = local.data() + s * size;
    Deadline deadline = deadline_in(timeout_s);
    uint64_t t0 = SampleClock::ticks();
    bool ok;
    if (notify) {
      OB_RETURN_IF_ERROR(c.put_notify(region, s * size, {p, size}, i, deadline, "memory"));
      OB_ASSIGN_OR_RETURN(Incoming reply, c.receive(deadline));
      uint64_t t1 = SampleClock::ticks();
      uint64_t got[2] = {0, 0};
      if (reply.data.size() == sizeof got) std::memcpy(got, reply.data.data(), sizeof got);
      ok = got[0] == i && got[1] == sums[s];
      if (i >= warmup) clock.add(t0, t1);
    } else {
      OB_RETURN_IF_ERROR(c.get(region, s * size, {p, size}, deadline));
      uint64_t t1 = SampleClock::ticks();
      ok = std::memcmp(p, expected.data() + s * size, size) == 0;
      std::memset(p, 0, size);  // the next read of this slot must bring the bytes again
      if (i >= warmup) clock.add(t0, t1);
    }
    if (!ok) ++out.mismatches;
    if (i % kInterruptEvery == kInterruptEvery - 1 && interrupt) OB_RETURN_IF_ERROR(interrupt());
  }
  out.samples_us = clock.microseconds();
  return out;
}

Result<OneSidedLatency> signal_ping_pong(Connection& c, size_t size, size_t iterations, size_t warmup,
                                         double timeout_s, const Interrupt& interrupt) {
  using services::mirror_signal_at;
  constexpr size_t kSlots = 64;  // rotate slots so consecutive pings carry distinct bytes
  if (size < 16 || size % 8 != 0)
    return Status(Code::kInvalidArgument, "a ping of " + std::to_string(size) +
                                              " B: a multiple of 8 from 16 expected (its last 8 are the signal)");
  const uint64_t bytes = kSlots * size;
  OB_ASSIGN_OR_RETURN(RemoteRegion agent, agent_region(c, bytes, timeout_s));
  // UCX-allocated, so the agent's puts land directly (registered user memory
  // is reached only through UCX's emulation on shared memory in 1.13).
  OB_ASSIGN_OR_RETURN(Region mine, c.allocate_memory(bytes));
  std::memset(mine.data(), 0, bytes);
  std::vector<uint8_t> pings(kSlots * size);
  fill_pattern(pings, 11000 + size);
  const uint64_t total = warmup + iterations;
  std::vector<uint8_t> start = request_bytes('M', {size, kSlots, total, static_cast<uint64_t>(timeout_s * 1000)});
  std::span<const uint8_t> desc = mine.descriptor();
  start.insert(start.end(), desc.begin(), desc.end());
  // The mirror answers once every ping is mirrored (or on failure).
  std::optional<Result<Buffer>> answer;
  OB_RETURN_IF_ERROR(c.submit("memory", Buffer::copy_of(std::span<const uint8_t>(start)), deadline_in(timeout_s),
                              [&answer](Result<Buffer> r) { answer = std::move(r); }, Connection::Credit::kWait));
  OneSidedLatency out;
  SampleClock clock;
  clock.reserve(iterations);
  for (uint64_t i = 1; i <= total && !answer; ++i) {
    // Each ping is `size` bytes put: its data, then the signal in its last 8.
    const size_t s = (i - 1) % kSlots;
    const uint64_t at = s * size, signal_at = mirror_signal_at(s, size);
    const uint8_t* ping = pings.data() + s * size;
    Deadline deadline = deadline_in(timeout_s);
    uint64_t t0 = SampleClock::ticks();
    OB_RETURN_IF_ERROR(c.put_signal(agent, at, {ping, size - 8}, signal_at, i, deadline));
    OB_RETURN_IF_ERROR(c.wait_signal(mine, signal_at, i, deadline));
    uint64_t t1 = SampleClock::ticks();
    if (std::memcmp(mine.data() + at, ping, size - 8) != 0) ++out.mismatches;
    std::memset(mine.data() + at, 0, size - 8);  // the slot's next pong must bring the bytes again
    if (i > warmup) clock.add(t0, t1);
    if (i % kInterruptEvery == 0 && interrupt) OB_RETURN_IF_ERROR(interrupt());
  }
  if (!c.wait_until(deadline_in(timeout_s), [&answer] { return answer.has_value(); }))
    return Status(Code::kTimedOut, "the agent's mirror did not answer after the last ping");
  if (!answer->ok()) return answer->status().with_context("agent mirror");
  if (answer->value().size() != 8) return Status(Code::kIoError, "mirror answered " +
                                                     std::to_string(answer->value().size()) + " bytes, not 8");
  out.samples_us = clock.microseconds();
  return out;
}

}  // namespace outboard::bench
