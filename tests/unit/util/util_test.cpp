// Status, statistics, checksums and core lists.
#include <gtest/gtest.h>

#include "outboard/affinity.h"
#include "outboard/checksum.h"
#include "outboard/stats.h"
#include "outboard/status.h"

namespace outboard {
namespace {

Result<int> half(int x) {
  if (x % 2) return Status(Code::kInvalidArgument, "odd value " + std::to_string(x));
  return x / 2;
}

Result<int> quarter(int x) {
  OB_ASSIGN_OR_RETURN(int h, half(x));
  return half(h);
}

TEST(StatusTest, CodesAndMessagesPropagate) {
  EXPECT_EQ(quarter(8).value(), 2);
  Status st = quarter(6).status();
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_EQ(st.to_string(), "invalid argument: odd value 3");
  EXPECT_EQ(st.with_context("quarter").message(), "quarter: odd value 3");
  EXPECT_EQ(code_name(Code::kConnectionReset), "connection reset");
  EXPECT_EQ(code_name(Code::kShutDown), "shut down");
}

// Misuse aborts naming the condition and where; failure returns a Status.
TEST(StatusDeathTest, ValueOfAnErrorAndABrokenCheckAbortNamingWhere) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Result<int> none = Status{Code::kNotFound, "no such thing"};
  EXPECT_DEATH((void)none.value(), "check failed: ok\\(\\) at .*status.h:[0-9]+: value\\(\\) of not found: no such thing");
  const int limit = 3;
  EXPECT_DEATH(OB_CHECK(limit > 4, "limit is " + std::to_string(limit)), "check failed: limit > 4 at .*util_test.cpp:[0-9]+: limit is 3");
  OB_CHECK(limit == 3);  // holds: nothing happens
}

TEST(StatsTest, NearestRankPercentiles) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  auto s = stats::summarize(v);
  EXPECT_EQ(s.count, 100u);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.p50, 50);
  EXPECT_EQ(s.p90, 90);
  EXPECT_EQ(s.p99, 99);
  EXPECT_EQ(s.max, 100);
  EXPECT_EQ(stats::summarize({}).count, 0u);
}

TEST(ChecksumTest, PatternDependsOnSeedAndChecksumOnEveryByte) {
  std::vector<uint8_t> a(1000), b(1000);
  fill_pattern(a, 1);
  fill_pattern(b, 2);
  EXPECT_NE(checksum(a), checksum(b));
  fill_pattern(b, 1);
  EXPECT_EQ(a, b);
  b[999] ^= 1;
  EXPECT_NE(checksum(a), checksum(b));
  EXPECT_EQ(checksum({}), 0x2D06800538D394C2ull);  // XXH3-64 of nothing: xxHash's known answer
}

TEST(AffinityTest, CoreLists) {
  EXPECT_EQ(parse_core_list("0,2-4").value(), (std::vector<int>{0, 2, 3, 4}));
  EXPECT_EQ(parse_core_list("x").status().code(), Code::kBadConfig);
  EXPECT_EQ(parse_core_list("3-1").status().code(), Code::kBadConfig);
  EXPECT_EQ(pin_to_cores({100000}).code(), Code::kBadConfig);
}

}  // namespace
}  // namespace outboard
