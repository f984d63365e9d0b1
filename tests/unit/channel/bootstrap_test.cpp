#include "channel/bootstrap.h"

#include <gtest/gtest.h>

namespace outboard::channel {
namespace {

Welcome sample_welcome() {
  Welcome w;
  w.connection_id = 7;
  w.pid = 42;
  w.worker_address = {1, 2, 3};
  w.max_msg_size = 1 << 20;
  w.window_msgs = 64;
  w.window_bytes = 1 << 22;
  w.services = {"echo", "tokenize"};
  w.facts = {{"tokenize_threads", 3}, {"graph_threads", 0}};
  return w;
}

std::span<const uint8_t> payload(const std::vector<uint8_t>& message) {
  return std::span<const uint8_t>(message).subspan(kBootHeaderBytes);
}

TEST(BootstrapTest, WelcomeCarriesTheAgentsFacts) {
  const std::vector<uint8_t> bytes = encode(sample_welcome());
  auto w = decode_welcome(payload(bytes));
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->services, (std::vector<std::string>{"echo", "tokenize"}));
  EXPECT_EQ(w->facts, sample_welcome().facts);
}

TEST(BootstrapTest, TooManyFactsNameTheLimit) {
  Welcome w = sample_welcome();
  w.facts.assign(kMaxFacts + 1, {"x", 1});
  const std::vector<uint8_t> bytes = encode(w);
  auto decoded = decode_welcome(payload(bytes));
  ASSERT_EQ(decoded.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(decoded.status().message(), "welcome field facts is 65, expected at most 64");
}

TEST(BootstrapTest, AnotherVersionIsRefusedByTheReader) {
  std::vector<uint8_t> bytes = encode(sample_welcome());
  bytes[5] = kBootVersion + 1;  // magic (4), kind (1), version (1)
  BootReader reader;
  Status st = reader.feed(std::span<const uint8_t>(bytes).first(reader.want()));
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("bootstrap version 3 (this side speaks 2)"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace outboard::channel
