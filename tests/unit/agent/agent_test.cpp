// The agent layer on its own: its option table read into an AgentConfig
// (every limit named when out of range), the listen rule, and the control
// messages between the listener and its session processes.
#include <gtest/gtest.h>

#include "agent/control.h"
#include "agent/session.h"
#include "channel/hub.h"
#include "outboard/agent.h"

namespace outboard {
namespace {

Result<AgentConfig> parse(std::vector<const char*> args) {
  config::Options options = agent_options();
  args.insert(args.begin(), "outboard-agent");
  OB_RETURN_IF_ERROR(options.parse(static_cast<int>(args.size()), args.data()));
  return agent_config_from(options);
}

TEST(AgentConfigTest, OptionsBecomeTheConfig) {
  auto c = parse({"--tokenize-threads", "3", "--max-text-bytes", "1MiB", "--ring-slots", "16", "--isolation", "none"});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->tokenize_threads, 3u);
  EXPECT_EQ(c->max_text_bytes, 1u << 20);
  EXPECT_EQ(c->channel.ring_slots, 16u);
  EXPECT_EQ(c->isolation, Isolation::kNone);
  auto quotas = parse({"--max-client-requests", "7", "--max-client-graph-instances", "5"});
  ASSERT_TRUE(quotas.ok()) << quotas.status().to_string();
  EXPECT_EQ(agent::budget_quotas(*quotas).group_requests, 7u);  // what every session's budget counts by
  EXPECT_EQ(agent::budget_quotas(*quotas).group_instances, 5u);
}

TEST(AgentConfigTest, AnAgentPollsLongerThanAClientByDefault) {
  auto c = parse({});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->channel.spin_us, kAgentSpinUs);
  EXPECT_GT(kAgentSpinUs, ChannelConfig{}.spin_us);
  // Its requests ~100 us apart (8 KB tokenizations): a client would sleep between them, the agent polls.
  const channel::Spin spin = channel::spin_of(c->channel);
  channel::IdleGaps gaps;
  for (int i = 0; i < 8; ++i) gaps.learn(100'000, spin);
  EXPECT_GT(gaps.spin_ns(spin), 0u);
  EXPECT_EQ(parse({"--spin-us", "0"})->channel.spin_us, 0u);
}

TEST(AgentConfigTest, AValueOutOfRangeNamesTheOptionAndTheRange) {
  auto ring = parse({"--ring-slots", "3"});
  EXPECT_EQ(ring.status().code(), Code::kBadConfig);
  EXPECT_EQ(ring.status().message(), "option 'ring-slots' is 3, expected 0 or a power of two");
  auto window = parse({"--recv-window-msgs", "0"});
  EXPECT_EQ(window.status().code(), Code::kBadConfig);
  EXPECT_EQ(window.status().message(), "option 'recv-window-msgs' is 0, expected 1..4294967295");
  auto isolation = parse({"--isolation", "thread"});
  EXPECT_EQ(isolation.status().message(), "option 'isolation' is 'thread', expected process or none");
  EXPECT_EQ(parse({"--max-client-requests", "0"}).status().message(),
            "option 'max-client-requests' is 0, expected 1..4294967295");
}

TEST(AgentConfigTest, AListenerWiderThanLoopbackNeedsKeysOrInsecure) {
  auto c = parse({"--listen", "0.0.0.0:0", "--isolation", "none"});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  auto agent = Agent::create(c.value());
  ASSERT_EQ(agent.status().code(), Code::kBadConfig);
  EXPECT_NE(agent.status().message().find("--insecure"), std::string::npos) << agent.status().message();
}

TEST(ControlTest, AnAdoptCarriesThePeerAndItsHello) {
  channel::PeerInfo peer{.name = "127.0.0.1:40312 (pid 123)", .policy = {.shared_memory = true, .owner = 123}};
  const std::vector<uint8_t> hello = {1, 2, 3, 4};
  const std::vector<uint8_t> message = agent::encode_adopt(peer, hello);
  ASSERT_EQ(message.front(), static_cast<uint8_t>(agent::ControlKind::kAdopt));
  auto adopt = agent::decode_adopt(std::span(message).subspan(1));
  ASSERT_TRUE(adopt.ok()) << adopt.status().to_string();
  EXPECT_EQ(adopt->peer.name, peer.name);
  EXPECT_TRUE(adopt->peer.policy.shared_memory);
  EXPECT_EQ(adopt->peer.policy.owner, 123);
  EXPECT_EQ(std::vector<uint8_t>(adopt->hello.begin(), adopt->hello.end()), hello);

  auto truncated = agent::decode_adopt(std::span(message).subspan(1, 6));
  EXPECT_EQ(truncated.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(truncated.status().message(), "adopt message is truncated");
}

TEST(ControlTest, AnAdoptCarriesATlsPeersKeysAeadAndIdentity) {
  secure::Keys keys;
  keys.client_to_agent[0] = 1, keys.agent_to_client[31] = 2, keys.aead = secure::Aead::kChaCha20Poly1305;
  channel::PeerInfo peer{.name = "10.0.0.2:40312", .keys = keys, .identity = "/O=outboard/CN=tenant1"};
  const std::vector<uint8_t> hello = {1, 2, 3, 4};
  std::vector<uint8_t> message = agent::encode_adopt(peer, hello);
  auto adopt = agent::decode_adopt(std::span(message).subspan(1));
  ASSERT_TRUE(adopt.ok() && adopt->peer.keys) << adopt.status().to_string();
  EXPECT_EQ(adopt->peer.keys->client_to_agent, keys.client_to_agent);
  EXPECT_EQ(adopt->peer.keys->agent_to_client, keys.agent_to_client);
  EXPECT_EQ(adopt->peer.keys->aead, secure::Aead::kChaCha20Poly1305);
  EXPECT_EQ(adopt->peer.identity, "/O=outboard/CN=tenant1");  // services keep tenants apart by it
  EXPECT_EQ(std::vector<uint8_t>(adopt->hello.begin(), adopt->hello.end()), hello);

  message[message.size() - hello.size() - 1] = 9;  // the AEAD's byte
  EXPECT_EQ(agent::decode_adopt(std::span(message).subspan(1)).status().message(),
            "adopt message names AEAD 9, not 1 or 2");
}

}  // namespace
}  // namespace outboard
