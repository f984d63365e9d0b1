// One-sided data path against a real agent's memory service.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <thread>

#include "../agent_fixture.h"
#include "outboard/checksum.h"
#include "services/builtin.h"

namespace outboard {
namespace {

using RegionTest = testing::AgentFixture;

Deadline soon() { return Deadline::after_ms(10000); }

Buffer op(char code, std::initializer_list<uint64_t> args, std::span<const uint8_t> tail = {}) {
  Buffer b(1 + 8 * args.size() + tail.size());
  b.data()[0] = static_cast<uint8_t>(code);
  size_t at = 1;
  for (uint64_t a : args) {
    std::memcpy(b.data() + at, &a, 8);
    at += 8;
  }
  if (!tail.empty()) std::memcpy(b.data() + at, tail.data(), tail.size());
  return b;
}

uint64_t as_u64(const Buffer& b) {
  uint64_t v = 0;
  std::memcpy(&v, b.data(), 8);
  return v;
}

// The agent's `memory` region of `size` bytes for `c`, imported.
RemoteRegion agent_region(Connection& c, uint64_t size) {
  auto desc = c.request("memory", op('A', {size}).span(), soon());
  EXPECT_TRUE(desc.ok()) << desc.status().to_string();
  if (!desc.ok()) return {};
  auto remote = c.import_region(desc.value().span());
  EXPECT_TRUE(remote.ok()) << remote.status().to_string();
  return remote.ok() ? std::move(remote).value() : RemoteRegion();
}

// The agent's memory service writes `len` B of pattern `seed` at `offset` of our `region` (over
// `mine`) with put_notify: the notification names it, and the data is there when it comes.
void agent_writes(Connection& c, const Region& region, std::span<const uint8_t> mine, uint64_t cookie,
                  uint64_t offset, uint64_t len, uint64_t seed) {
  auto r = c.request("memory", op('W', {cookie, offset, len, seed}, region.descriptor()).span(), soon());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto note = c.receive(soon());
  ASSERT_TRUE(note.ok());
  ASSERT_EQ(note.value().kind, Incoming::Kind::kNotify);
  EXPECT_EQ(note.value().cookie, cookie);
  EXPECT_EQ(note.value().offset, offset);
  EXPECT_EQ(note.value().length, len);
  EXPECT_EQ(checksum(mine.subspan(offset, len)), as_u64(r.value()));
}

TEST_F(RegionTest, PutThenGetRoundTripsAndAgentSeesTheBytes) {
  auto c = connect();
  ASSERT_TRUE(c);
  constexpr size_t kSize = 1 << 20;
  auto desc = c->request("memory", op('A', {kSize}).span(), soon());
  ASSERT_TRUE(desc.ok()) << desc.status().to_string();
  auto remote = c->import_region(desc.value().span());
  ASSERT_TRUE(remote.ok()) << remote.status().to_string();
  EXPECT_EQ(remote.value().size(), kSize);

  std::vector<uint8_t> data(300000);
  fill_pattern(data, 9);
  ASSERT_TRUE(c->put(remote.value(), 4096, data, soon()).ok());
  ASSERT_TRUE(c->flush(soon()).ok());
  auto sum = c->request("memory", op('S', {4096, data.size()}).span(), soon());
  ASSERT_TRUE(sum.ok());
  EXPECT_EQ(as_u64(sum.value()), checksum(data));

  std::vector<uint8_t> back(data.size());
  ASSERT_TRUE(c->get(remote.value(), 4096, back, soon()).ok());
  EXPECT_EQ(back, data);
}

TEST_F(RegionTest, OutOfBoundsAccessIsAnErrorAndWritesNothing) {
  auto c = connect();
  ASSERT_TRUE(c);
  RemoteRegion remote = agent_region(*c, 4096);
  ASSERT_EQ(remote.size(), 4096u);
  ASSERT_TRUE(c->request("memory", op('P', {5}).span(), soon()).ok());
  auto before = c->request("memory", op('S', {0, 4096}).span(), soon());

  std::vector<uint8_t> data(100, 0xab);
  Status st = c->put(remote, 4000, data, soon());
  EXPECT_EQ(st.code(), Code::kOutOfRange);
  EXPECT_EQ(st.message(), "put of 100 B at offset 4000 exceeds remote region of 4096 B");
  EXPECT_EQ(c->put(remote, UINT64_MAX - 10, data, soon()).code(), Code::kOutOfRange);
  EXPECT_EQ(c->get(remote, 4097, std::span<uint8_t>(data.data(), 0), soon()).code(), Code::kOutOfRange);
  auto after = c->request("memory", op('S', {0, 4096}).span(), soon());
  EXPECT_EQ(as_u64(before.value()), as_u64(after.value()));
  EXPECT_TRUE(c->request("echo", data, soon()).ok());  // connection unharmed
}

// On one host UCX maps the agent's region here: puts, gets, put_signal and
// put_notify are CPU copies. Turned off, the same calls go through UCX. Both must move
// the same bytes and refuse the same ranges.
TEST_F(RegionTest, AMappedRegionAndUcxMoveTheSameBytes) {
  for (bool map : {true, false}) {
    SCOPED_TRACE(map ? "mapped" : "through UCX");
    ChannelConfig config;
    config.map_peer_regions = map;
    auto c = connect(config);
    ASSERT_TRUE(c);
    RemoteRegion remote = agent_region(*c, 1 << 16);
    ASSERT_EQ(remote.size(), 1u << 16);
    // An agent in this process is never mapped (Connection::Impl::peer_in_process).
    EXPECT_EQ(remote.mapped(), map && !agent_in_process());

    std::vector<uint8_t> data(5000);
    fill_pattern(data, map ? 1 : 2);
    ASSERT_TRUE(c->put(remote, 100, data, soon()).ok());
    auto sum = c->request("memory", op('S', {100, data.size()}).span(), soon());
    ASSERT_TRUE(sum.ok());
    EXPECT_EQ(as_u64(sum.value()), checksum(data));
    std::vector<uint8_t> back(data.size());
    ASSERT_TRUE(c->get(remote, 100, back, soon()).ok());
    EXPECT_EQ(back, data);

    const uint64_t signal = 0x0123456789abcdefull;
    ASSERT_TRUE(c->put_signal(remote, 8192, {data.data(), 64}, 8192 + 64, signal, soon()).ok());
    std::vector<uint8_t> expect(data.begin(), data.begin() + 64);
    expect.resize(72);
    std::memcpy(expect.data() + 64, &signal, 8);
    sum = c->request("memory", op('S', {8192, 72}).span(), soon());
    ASSERT_TRUE(sum.ok());
    EXPECT_EQ(as_u64(sum.value()), checksum(expect));

    // Write-with-notify: the agent's memory service answers the notification
    // with the checksum of what it sees, so the data came first.
    ASSERT_TRUE(c->put_notify(remote, 20000, data, 77, soon(), "memory").ok());
    auto reply = c->receive(soon());
    ASSERT_TRUE(reply.ok()) << reply.status().to_string();
    ASSERT_EQ(reply.value().data.size(), 16u);
    uint64_t cookie_and_sum[2];
    std::memcpy(cookie_and_sum, reply.value().data.data(), 16);
    EXPECT_EQ(cookie_and_sum[0], 77u);
    EXPECT_EQ(cookie_and_sum[1], checksum(data));

    Status st = c->put(remote, (1 << 16) - 10, {data.data(), 11}, soon());
    EXPECT_EQ(st.message(), "put of 11 B at offset 65526 exceeds remote region of 65536 B");
    st = c->get(remote, (1 << 16) + 1, {back.data(), 0}, soon());
    EXPECT_EQ(st.code(), Code::kOutOfRange);

    c->close();  // a closed connection refuses the region, mapped or not
    EXPECT_EQ(c->put(remote, 0, {data.data(), 8}, soon()).code(), Code::kNotConnected);
    EXPECT_EQ(c->get(remote, 0, {back.data(), 8}, soon()).code(), Code::kNotConnected);
    EXPECT_EQ(c->put_signal(remote, 0, {}, 0, 1, soon()).code(), Code::kNotConnected);
  }
}

TEST_F(RegionTest, AgentWriteWithNotifyLandsBeforeTheNotification) {
  auto c = connect();
  ASSERT_TRUE(c);
  std::vector<uint8_t> mine(1 << 20, 0);
  auto region = c->register_memory(mine.data(), mine.size());
  ASSERT_TRUE(region.ok()) << region.status().to_string();
  for (uint64_t i = 0; i < 20; ++i) agent_writes(*c, region.value(), mine, i + 100, i * 512, 1000 + i * 40000, i);
}

// Memory exposed to the agent is written by the kernel's copies (put_notify's data lands before
// the notification as for registered memory), only within its bounds; pages the client unmapped
// fail that write and nothing else.
TEST_F(RegionTest, ExposedMemoryIsWrittenByTheAgentThroughTheKernel) {
  auto c = connect();
  ASSERT_TRUE(c);
  std::vector<uint8_t> mine(1 << 18, 0);
  auto region = c->expose_memory(mine.data(), mine.size());
  ASSERT_TRUE(region.ok()) << region.status().to_string();
  for (uint64_t i = 0; i < 4; ++i) agent_writes(*c, region.value(), mine, i + 1, i * 4096 + 3, 1000 + i * 50000, i);
  auto over = c->request("memory", op('W', {9, mine.size() - 10, 11, 1}, region->descriptor()).span(), soon());
  EXPECT_EQ(over.status().code(), Code::kOutOfRange) << over.status().to_string();

  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  void* gone = ::mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(gone, MAP_FAILED);
  auto freed = c->expose_memory(gone, page);
  ASSERT_TRUE(freed.ok());
  // Taken away as a free would, but never handed out again (an agent in this process could map
  // something new at an unmapped address): the kernel refuses pages of no access alike.
  ASSERT_EQ(0, ::mprotect(gone, page, PROT_NONE));
  auto lost = c->request("memory", op('W', {10, 0, 64, 1}, freed->descriptor()).span(), soon());
  EXPECT_NE(lost.status().message().find("does not map this memory"), std::string::npos) << lost.status().to_string();
  ::munmap(gone, page);
  EXPECT_TRUE(c->request("echo", mine, soon()).ok());  // connection unharmed
}

TEST_F(RegionTest, ImportRejectsGarbageDescriptors) {
  auto c = connect();
  ASSERT_TRUE(c);
  std::vector<uint8_t> junk(64, 0x11);
  EXPECT_EQ(c->import_region(junk).status().code(), Code::kInvalidArgument);
  auto r = c->request("memory", op('W', {1, 0, 10, 1}, junk).span(), soon());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
}

// GPU memory is allocated by UCX where it carries CUDA memory (each side makes
// a CUDA context current first); elsewhere both ends refuse it naming why, and
// the connection goes on serving host regions.
TEST_F(RegionTest, GpuRegionsAreCarriedByUcxOrRefusedNamingWhy) {
  auto c = connect();
  ASSERT_TRUE(c);
  auto mine = c->allocate_memory(4096, MemoryKind::kCuda);
  std::vector<uint8_t> gpu_kind = {1};
  auto desc = c->request("memory", op('A', {4096}, gpu_kind).span(), soon());
  if (!transport_carries_gpu_memory()) {
    EXPECT_EQ(mine.status().code(), Code::kUnsupported);
    EXPECT_NE(mine.status().message().find("GPU memory region of 4096 B: this UCX has no CUDA memory support"),
              std::string::npos)
        << mine.status().to_string();
    uint64_t word = 0;  // what a GPU pointer would be registered as is refused the same way
    auto registered = c->register_memory(&word, sizeof word, MemoryKind::kCuda);
    EXPECT_EQ(registered.status().code(), Code::kUnsupported);
    EXPECT_NE(registered.status().message().find("GPU memory region of 8 B"), std::string::npos);
    // The agent shares this process's UCX.
    ASSERT_FALSE(desc.ok());
    EXPECT_EQ(desc.status().code(), Code::kUnsupported);
    EXPECT_NE(desc.status().message().find("GPU memory region of 4096 B"), std::string::npos);
  } else {
    ASSERT_TRUE(mine.ok()) << mine.status().to_string();
    EXPECT_EQ(mine.value().kind(), MemoryKind::kCuda);
    // GPU memory of the caller's (here UCX's allocation again, as a cudaMalloc's would be).
    auto registered = c->register_memory(mine.value().data(), 4096, MemoryKind::kCuda);
    ASSERT_TRUE(registered.ok()) << registered.status().to_string();
    EXPECT_EQ(registered.value().kind(), MemoryKind::kCuda);
    ASSERT_TRUE(desc.ok()) << desc.status().to_string();
    auto remote = c->import_region(desc.value().span());
    ASSERT_TRUE(remote.ok()) << remote.status().to_string();
    EXPECT_FALSE(remote.value().mapped());  // never a CPU copy into GPU memory
    std::vector<uint8_t> data(4096), back(4096);
    fill_pattern(data, 21);
    ASSERT_TRUE(c->put(remote.value(), 0, data, soon()).ok());
    ASSERT_TRUE(c->flush(soon()).ok());
    ASSERT_TRUE(c->get(remote.value(), 0, back, soon()).ok());
    EXPECT_EQ(back, data);
    auto sum = c->request("memory", op('S', {0, 64}).span(), soon());
    EXPECT_EQ(sum.status().code(), Code::kUnsupported);
    EXPECT_NE(sum.status().message().find("checksum: this connection's region is GPU memory"), std::string::npos);
  }
  std::vector<uint8_t> bad_kind = {2};
  auto bad = c->request("memory", op('A', {4096}, bad_kind).span(), soon());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "region kind 2 is neither 0 (host) nor 1 (GPU)");
  std::vector<uint8_t> two_bytes = {0, 0};
  EXPECT_EQ(c->request("memory", op('A', {4096}, two_bytes).span(), soon()).status().code(), Code::kInvalidArgument);

  RemoteRegion host = agent_region(*c, 4096);
  std::vector<uint8_t> data(4096), back(4096);
  fill_pattern(data, 22);
  ASSERT_TRUE(c->put(host, 0, data, soon()).ok());
  ASSERT_TRUE(c->get(host, 0, back, soon()).ok());
  EXPECT_EQ(back, data);
}

// The agent's memory mirror (services/builtin.h): slot i at i * size of
// both regions, its last 8 bytes the signal word.
using services::mirror_signal_at;

// A mirror polls from the agent's progress thread, which then never sleeps:
// once the session is over, the agent (in this process) must go idle again.
double busy_fraction_while_idle() {
  const uint64_t cpu0 = process_cpu_ns(), t0 = now_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  return static_cast<double>(process_cpu_ns() - cpu0) / static_cast<double>(now_ns() - t0);
}

Buffer mirror_op(uint64_t size, uint64_t slots, uint64_t pings, uint64_t idle_ms, const Region& mine) {
  return op('M', {size, slots, pings, idle_ms}, mine.descriptor());
}

TEST_F(RegionTest, PutSignalPingsAreMirroredByAnAgentPollingMemory) {
  auto c = connect();
  ASSERT_TRUE(c);
  constexpr uint64_t kSize = 304, kSlots = 4, kPings = 200;
  RemoteRegion agent = agent_region(*c, kSlots * kSize);
  ASSERT_GT(agent.size(), 0u);
  auto mine = c->allocate_memory(kSlots * kSize);
  ASSERT_TRUE(mine.ok()) << mine.status().to_string();
  std::memset(mine.value().data(), 0, mine.value().size());
  std::optional<Result<Buffer>> answer;
  ASSERT_TRUE(c->submit("memory", mirror_op(kSize, kSlots, kPings, 10000, mine.value()), soon(),
                        [&](Result<Buffer> r) { answer = std::move(r); })
                  .ok());
  std::vector<uint8_t> ping(kSize - 8);  // and the signal
  for (uint64_t i = 1; i <= kPings; ++i) {
    fill_pattern(ping, i);  // every ping its own bytes
    const uint64_t slot = (i - 1) % kSlots, at = slot * kSize, signal_at = mirror_signal_at(slot, kSize);
    ASSERT_TRUE(c->put_signal(agent, at, ping, signal_at, i, soon()).ok());
    Status st = c->wait_signal(mine.value(), signal_at, i, soon());
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_EQ(std::memcmp(mine.value().data() + at, ping.data(), ping.size()), 0) << "ping " << i;
  }
  ASSERT_TRUE(c->wait_until(soon(), [&] { return answer.has_value(); }));
  ASSERT_TRUE(answer->ok()) << answer->status().to_string();
  EXPECT_EQ(as_u64(answer->value()), kPings);
  EXPECT_LT(busy_fraction_while_idle(), 0.5);
}

TEST_F(RegionTest, PutSignalChecksBothRangesBeforeWritingAnything) {
  auto c = connect();
  ASSERT_TRUE(c);
  RemoteRegion remote = agent_region(*c, 4096);
  ASSERT_EQ(remote.size(), 4096u);
  ASSERT_TRUE(c->request("memory", op('P', {3}).span(), soon()).ok());
  auto before = c->request("memory", op('S', {0, 4096}).span(), soon());
  std::vector<uint8_t> data(100, 0xcd);

  Status st = c->put_signal(remote, 0, data, 12, 1, soon());
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_EQ(st.message(), "signal offset 12 is not a multiple of 8");
  st = c->put_signal(remote, 0, data, 4096, 1, soon());
  EXPECT_EQ(st.code(), Code::kOutOfRange);
  EXPECT_EQ(st.message(), "signal word at offset 4096 exceeds remote region of 4096 B");
  EXPECT_EQ(c->put_signal(remote, 4000, data, 0, 1, soon()).code(), Code::kOutOfRange);  // the data
  auto after = c->request("memory", op('S', {0, 4096}).span(), soon());
  EXPECT_EQ(as_u64(before.value()), as_u64(after.value()));
}

TEST_F(RegionTest, WaitSignalTimesOutNamingTheWord) {
  auto c = connect();
  ASSERT_TRUE(c);
  auto mine = c->allocate_memory(4096);
  ASSERT_TRUE(mine.ok());
  std::memset(mine.value().data(), 0, 4096);
  Status st = c->wait_signal(mine.value(), 8, 1, Deadline::after_ms(50));
  EXPECT_EQ(st.code(), Code::kTimedOut);
  EXPECT_EQ(st.message(), "signal word at offset 8 is 0, not yet 1, at the deadline");
  EXPECT_EQ(c->wait_signal(mine.value(), 4, 1, soon()).code(), Code::kInvalidArgument);
  EXPECT_EQ(c->wait_signal(mine.value(), 4096, 1, soon()).code(), Code::kOutOfRange);
}

TEST_F(RegionTest, AMirrorThatHearsNothingEndsAndHarmsNoOtherClient) {
  auto c = connect(), other = connect();
  ASSERT_TRUE(c && other);
  ASSERT_TRUE(c->request("memory", op('A', {64}).span(), soon()).ok());
  auto mine = c->allocate_memory(64);
  ASSERT_TRUE(mine.ok());
  std::optional<Result<Buffer>> answer;
  ASSERT_TRUE(c->submit("memory", mirror_op(64, 1, 10, 200, mine.value()), soon(),
                        [&](Result<Buffer> r) { answer = std::move(r); })
                  .ok());
  // While it waits: a second mirror or a new region on that connection is
  // refused, and another client is served.
  auto again = c->request("memory", mirror_op(64, 1, 10, 200, mine.value()).span(), soon());
  EXPECT_EQ(again.status().code(), Code::kBadState);
  EXPECT_EQ(c->request("memory", op('A', {64}).span(), soon()).status().code(), Code::kBadState);
  std::vector<uint8_t> hello(32, 7);
  EXPECT_TRUE(other->request("echo", hello, soon()).ok());
  ASSERT_TRUE(c->wait_until(soon(), [&] { return answer.has_value(); }));
  EXPECT_EQ(answer->status().code(), Code::kTimedOut);
  EXPECT_EQ(answer->status().message(), "mirror: no ping 1 within 200 ms");
  EXPECT_TRUE(c->request("echo", hello, soon()).ok());  // the connection is unharmed
}

TEST_F(RegionTest, MirrorRequestsOutsideTheRegionAreRefused) {
  auto c = connect();
  ASSERT_TRUE(c);
  auto mine = c->allocate_memory(4096);
  ASSERT_TRUE(mine.ok());
  auto none = c->request("memory", mirror_op(64, 1, 1, 100, mine.value()).span(), soon());
  EXPECT_EQ(none.status().code(), Code::kNotFound);  // no region yet
  ASSERT_TRUE(c->request("memory", op('A', {4096}).span(), soon()).ok());
  auto big = c->request("memory", mirror_op(1024, 5, 1, 100, mine.value()).span(), soon());
  EXPECT_EQ(big.status().code(), Code::kOutOfRange);
  EXPECT_EQ(big.status().message(), "mirror of 5 slots of 1024 B exceeds the region of 4096 B");
  auto odd = c->request("memory", mirror_op(60, 1, 1, 100, mine.value()).span(), soon());
  EXPECT_EQ(odd.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(odd.status().message(),
            "mirror slot size 60 is not a multiple of 8 (its last 8 bytes are the signal word)");
  auto empty = c->request("memory", mirror_op(0, 1, 1, 100, mine.value()).span(), soon());
  EXPECT_EQ(empty.status().code(), Code::kInvalidArgument);
}

TEST_F(RegionTest, AMirrorWhoseClientLeavesIsDropped) {
  auto c = connect();
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->request("memory", op('A', {64}).span(), soon()).ok());
  auto mine = c->allocate_memory(64);
  ASSERT_TRUE(mine.ok());
  ASSERT_TRUE(c->submit("memory", mirror_op(64, 1, 10, 60000, mine.value()), soon(), [](Result<Buffer>) {}).ok());
  ASSERT_TRUE(c->request("echo", std::vector<uint8_t>(8, 1), soon()).ok());  // the mirror is running
  c->close();
  auto next = connect();
  ASSERT_TRUE(next);
  ASSERT_TRUE(next->request("memory", op('A', {64}).span(), soon()).ok());
  EXPECT_TRUE(next->request("echo", std::vector<uint8_t>(8, 2), soon()).ok());
  EXPECT_LT(busy_fraction_while_idle(), 0.5);  // the left client's mirror stopped polling
}

}  // namespace
}  // namespace outboard
