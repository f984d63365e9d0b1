// One-sided data path against a real agent's memory service.
#include <cstring>

#include "../agent_fixture.h"
#include "outboard/checksum.h"

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
  auto desc = c->request("memory", op('A', {4096}).span(), soon());
  ASSERT_TRUE(desc.ok());
  auto remote = c->import_region(desc.value().span());
  ASSERT_TRUE(remote.ok());
  ASSERT_TRUE(c->request("memory", op('P', {5}).span(), soon()).ok());
  auto before = c->request("memory", op('S', {0, 4096}).span(), soon());

  std::vector<uint8_t> data(100, 0xab);
  Status st = c->put(remote.value(), 4000, data, soon());
  EXPECT_EQ(st.code(), Code::kOutOfRange);
  EXPECT_EQ(st.message(), "put of 100 B at offset 4000 exceeds remote region of 4096 B");
  EXPECT_EQ(c->put(remote.value(), UINT64_MAX - 10, data, soon()).code(), Code::kOutOfRange);
  EXPECT_EQ(c->get(remote.value(), 4097, std::span<uint8_t>(data.data(), 0), soon()).code(), Code::kOutOfRange);
  auto after = c->request("memory", op('S', {0, 4096}).span(), soon());
  EXPECT_EQ(as_u64(before.value()), as_u64(after.value()));
  EXPECT_TRUE(c->request("echo", data, soon()).ok());  // connection unharmed
}

TEST_F(RegionTest, AgentWriteWithNotifyLandsBeforeTheNotification) {
  auto c = connect();
  ASSERT_TRUE(c);
  std::vector<uint8_t> mine(1 << 20, 0);
  auto region = c->register_memory(mine.data(), mine.size());
  ASSERT_TRUE(region.ok()) << region.status().to_string();
  for (uint64_t i = 0; i < 20; ++i) {
    uint64_t len = 1000 + i * 40000, offset = i * 512;
    auto r = c->request("memory", op('W', {i + 100, offset, len, i}, region.value().descriptor()).span(), soon());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    auto note = c->receive(soon());
    ASSERT_TRUE(note.ok());
    ASSERT_EQ(note.value().kind, Incoming::Kind::kNotify);
    EXPECT_EQ(note.value().cookie, i + 100);
    EXPECT_EQ(note.value().offset, offset);
    EXPECT_EQ(note.value().length, len);
    EXPECT_EQ(checksum({mine.data() + offset, len}), as_u64(r.value()));
  }
}

TEST_F(RegionTest, ImportRejectsGarbageDescriptors) {
  auto c = connect();
  ASSERT_TRUE(c);
  std::vector<uint8_t> junk(64, 0x11);
  EXPECT_EQ(c->import_region(junk).status().code(), Code::kInvalidArgument);
  auto r = c->request("memory", op('W', {1, 0, 10, 1}, junk).span(), soon());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace outboard
