#include "outboard/config.h"

#include <gtest/gtest.h>

namespace outboard::config {
namespace {

Options table() {
  return Options("t", {{"max-msg-size", Type::kSize, "64KiB", "limit"},
                       {"listen", Type::kString, "127.0.0.1:0", "addr"},
                       {"verbose", Type::kBool, "false", "flag"},
                       {"window", Type::kInt, "16", "credits"}});
}

TEST(ConfigTest, DefaultsParseWithUnits) {
  auto o = table();
  EXPECT_EQ(o.size("max-msg-size"), 65536u);
  EXPECT_EQ(o.integer("window"), 16);
  EXPECT_FALSE(o.flag("verbose"));
  EXPECT_EQ(o.str("log-level"), "warning");
}

TEST(ConfigTest, CommandLineOverridesJson) {
  auto o = table();
  ASSERT_TRUE(o.apply_json(R"({"window": 8, "listen": "0.0.0.0:7000", "verbose": true})", "f.json").ok());
  const char* argv[] = {"t", "--window", "4", "--max-msg-size=1MiB"};
  ASSERT_TRUE(o.parse(4, argv).ok());
  EXPECT_EQ(o.integer("window"), 4);
  EXPECT_EQ(o.size("max-msg-size"), 1u << 20);
  EXPECT_EQ(o.str("listen"), "0.0.0.0:7000");
  EXPECT_TRUE(o.flag("verbose"));
}

TEST(ConfigTest, UnknownJsonKeyIsNamed) {
  auto o = table();
  Status st = o.apply_json(R"({"windw": 8})", "'cfg.json'");
  EXPECT_EQ(st.code(), Code::kBadConfig);
  EXPECT_NE(st.message().find("unknown key 'windw'"), std::string::npos) << st.message();
}

TEST(ConfigTest, WrongJsonTypeNamesKeyAndExpectedType) {
  auto o = table();
  Status st = o.apply_json(R"({"window": "eight"})", "'cfg.json'");
  EXPECT_EQ(st.code(), Code::kBadConfig);
  EXPECT_NE(st.message().find("key 'window'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("expected integer"), std::string::npos) << st.message();
  st = o.apply_json(R"({"verbose": 1})", "'cfg.json'");
  EXPECT_NE(st.message().find("expected boolean"), std::string::npos) << st.message();
}

TEST(ConfigTest, DocaGroupedJsonIsAccepted) {
  auto o = table();
  ASSERT_TRUE(o.apply_json(R"({"doca_general_flags": {"log-level": 60}, "doca_program_flags": {"window": 2}})",
                           "f")
                  .ok());
  EXPECT_EQ(o.str("log-level"), "60");
  EXPECT_EQ(o.integer("window"), 2);
}

TEST(ConfigTest, BadValuesAreRejected) {
  auto o = table();
  const char* bad_size[] = {"t", "--max-msg-size", "12parsecs"};
  EXPECT_EQ(o.parse(3, bad_size).code(), Code::kBadConfig);
  const char* bad_level[] = {"t", "--log-level", "loud"};
  EXPECT_EQ(table().parse(3, bad_level).code(), Code::kBadConfig);
  const char* unknown[] = {"t", "--nope", "1"};
  EXPECT_EQ(table().parse(3, unknown).code(), Code::kBadConfig);
  EXPECT_EQ(table().apply_json("[1,2]", "f").code(), Code::kBadConfig);
}

TEST(ConfigTest, ParseSizeUnits) {
  EXPECT_EQ(parse_size("4080").value(), 4080u);
  EXPECT_EQ(parse_size("64k").value(), 65536u);
  EXPECT_EQ(parse_size("64MiB").value(), 64u << 20);
  EXPECT_EQ(parse_size("1G").value(), 1u << 30);
  EXPECT_EQ(parse_size("1TiB").value(), 1ull << 40);
  EXPECT_EQ(parse_size("2p").value(), 2ull << 50);
  EXPECT_FALSE(parse_size("").ok());
  EXPECT_FALSE(parse_size("99999999999999999999G").ok());
  EXPECT_FALSE(parse_size("16384P").ok());  // 2^64: overflows
  EXPECT_EQ(parse_size("3parsecs").status().message(),
            "'3parsecs' has an unknown size unit 'parsecs' (k, m, g, t or p, with or without i and B)");
}

TEST(ConfigTest, AJsonSyntaxErrorNamesWhereItIs) {
  Status st = table().apply_json("{\"max-msg-size\": ", "'cfg.json'");
  EXPECT_EQ(st.code(), Code::kBadConfig);
  EXPECT_NE(st.message().find("'cfg.json' is not valid JSON"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("line 1, column 18"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace outboard::config
