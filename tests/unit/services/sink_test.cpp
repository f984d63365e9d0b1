#include <gtest/gtest.h>

#include <cstring>

#include "../agent_fixture.h"
#include "outboard/checksum.h"

namespace outboard {
namespace {

class SinkTest : public testing::AgentFixture {
 protected:
  // (count, bytes, digest) the sink answers, starting a new tally.
  std::array<uint64_t, 3> tally(Connection& c) {
    auto r = c.request("sink", {}, Deadline::after_ms(2000));
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    std::array<uint64_t, 3> t{};
    if (r.ok() && r.value().size() == sizeof t) std::memcpy(t.data(), r.value().data(), sizeof t);
    return t;
  }
};

TEST_F(SinkTest, TalliesMessagesInOrderAndStartsAfresh) {
  auto c = connect();
  ASSERT_TRUE(c);
  const std::string msgs[] = {"alpha", "", "gamma-gamma"};
  uint64_t digest = kChecksumChainSeed, reversed = kChecksumChainSeed;
  for (const auto& m : msgs) {
    ASSERT_TRUE(c->send(bytes(m), Deadline::after_ms(2000), "sink").ok());
    digest = checksum_chain(digest, bytes(m));
  }
  for (int i = 2; i >= 0; --i) reversed = checksum_chain(reversed, bytes(msgs[i]));
  EXPECT_NE(digest, reversed);  // order matters
  EXPECT_EQ(tally(*c), (std::array<uint64_t, 3>{3, 16, digest}));
  EXPECT_EQ(tally(*c), (std::array<uint64_t, 3>{0, 0, kChecksumChainSeed}));
}

TEST_F(SinkTest, TalliesArePerConnection) {
  auto a = connect(), b = connect();
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->send(bytes("x"), Deadline::after_ms(2000), "sink").ok());
  EXPECT_EQ(tally(*b)[0], 0u);
  EXPECT_EQ(tally(*a)[0], 1u);
}

}  // namespace
}  // namespace outboard
