#include "outboard/log.h"

#include <gtest/gtest.h>

#include <regex>

namespace outboard::log {
namespace {

TEST(LogTest, NumericAndNamedLevels) {
  EXPECT_EQ(parse_level("10").value(), Level::kDisable);
  EXPECT_EQ(parse_level("70").value(), Level::kTrace);
  EXPECT_EQ(parse_level("INFO").value(), Level::kInfo);
  EXPECT_EQ(parse_level("warn").value(), Level::kWarning);
  EXPECT_EQ(parse_level("Debug").value(), Level::kDebug);
  EXPECT_EQ(parse_level("55").status().code(), Code::kBadConfig);
  EXPECT_EQ(parse_level("chatty").status().code(), Code::kBadConfig);
}

TEST(LogTest, LinesCarryMicrosecondsLevelAndModule) {
  Level old = level();
  set_level(Level::kInfo);
  testing::internal::CaptureStderr();
  OB_LOG_MODULE("logtest");
  OB_LOG_INFO("hello %d", 42);
  OB_LOG_DBG("hidden");
  std::string out = testing::internal::GetCapturedStderr();
  set_level(old);
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(\d\d:\d\d:\d\d\.\d{6} INFO  \[logtest\] hello 42\n)"))) << out;
  EXPECT_EQ(out.find("hidden"), std::string::npos);
}

}  // namespace
}  // namespace outboard::log
