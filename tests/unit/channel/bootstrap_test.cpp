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

TEST(BootstrapTest, ADoorbellDescriptorComesOnlyWithARing) {
  Welcome w = sample_welcome();
  w.ring_slots = 64;
  w.ring_descriptor = {9, 9};
  w.bell_fd = 5;
  auto rung = decode_welcome(payload(encode(w)));
  ASSERT_TRUE(rung.ok()) << rung.status().to_string();
  EXPECT_EQ(rung->bell_fd, 5u);
  EXPECT_EQ(decode_welcome(payload(encode(sample_welcome())))->bell_fd, kNoBell);

  w.bell_fd = uint32_t{INT32_MAX} + 1;
  EXPECT_EQ(decode_welcome(payload(encode(w))).status().message(),
            "welcome field bell_fd is 2147483648, expected a descriptor number or none");
  Hello h;
  h.connection_id = 3;
  h.max_msg_size = 1 << 20;
  h.window_msgs = 8;
  h.worker_address = {1};
  h.bell_fd = 4;  // without a ring
  EXPECT_EQ(decode_hello(payload(encode(h))).status().message(),
            "hello field bell_fd is 4, expected none without a ring");
}

TEST(BootstrapTest, AnotherVersionIsRefusedByTheReader) {
  std::vector<uint8_t> bytes = encode(sample_welcome());
  bytes[5] = kBootVersion + 1;  // magic (4), kind (1), version (1)
  BootReader reader;
  Status st = reader.feed(std::span<const uint8_t>(bytes).first(reader.want()));
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("bootstrap version 4 (this side speaks 3)"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace outboard::channel
