// A peer that does not keep to the channel's rules, played by a connection
// whose counts the test sets by hand: two connections of this process's hub
// joined through its worker (UCX's self transport).
#include <gtest/gtest.h>

#include "channel/connection_impl.h"

namespace outboard::channel {
namespace {

Deadline soon() { return Deadline::after_ms(10000); }

struct Pair {
  std::shared_ptr<Hub> hub = Hub::get().value();
  std::shared_ptr<Connection::Impl> agent, client;
  int served = 0;

  explicit Pair(const ChannelConfig& agent_config) {
    Lock lock(hub->mutex());
    ChannelConfig no_rings;
    no_rings.ring_slots = 0;
    ChannelConfig a = agent_config;
    a.ring_slots = 0;
    agent = std::make_shared<Connection::Impl>(hub, a);
    client = std::make_shared<Connection::Impl>(hub, no_rings);
    agent->peer_address = "client";
    client->peer_address = "agent";
    // A service that never answers: every frame keeps its credit.
    agent->on_service = [this](Connection::Impl&, const FrameHeader&, Buffer) { ++served; };
    agent->local_services = {"hold"};
    agent->inline_services = {false};
    agent->peer_id = client->local_id;
    client->peer_id = agent->local_id;
    client->peer_services = {"hold"};
    client->peer_max_msg = agent->config.max_msg_size;
    agent->start_data_endpoint(hub->worker().address());
    client->start_data_endpoint(hub->worker().address());
    agent->state = client->state = Connection::Impl::State::kOpen;
  }
  ~Pair() {
    Lock lock(hub->mutex());
    agent->fail(Status(Code::kNotConnected, "test over"));
    client->fail(Status(Code::kNotConnected, "test over"));
  }
  void send_one_way(uint64_t bytes) {
    FrameHeader h;
    h.type = FrameType::kMessage;
    h.service = 0;
    client->post(h, Buffer(bytes));
  }
  bool agent_closed() {
    Lock lock(hub->mutex());
    return hub->wait_until(soon(), {}, [&] { return agent->state == Connection::Impl::State::kClosed; });
  }
};

TEST(ChannelWindow, APeerThatSendsPastTheMessagesItWasGrantedIsCutOff) {
  ChannelConfig config;
  config.recv_window_msgs = 4;
  Pair p(config);
  {
    Lock lock(p.hub->mutex());
    for (int i = 0; i < 5; ++i) p.send_one_way(16);  // it was granted 4
  }
  ASSERT_TRUE(p.agent_closed());
  EXPECT_EQ(p.agent->reason.code(), Code::kConnectionReset);
  EXPECT_EQ(p.agent->reason.message(),
            "peer client sent past its window: 5 messages, 80 B unanswered against the 4 messages, 134217728 B granted");
  EXPECT_EQ(p.served, 4);  // the fifth never reached the service
}

TEST(ChannelWindow, APeerThatSendsPastTheBytesItWasGrantedIsCutOff) {
  ChannelConfig config;
  config.max_msg_size = 4096;
  config.recv_window_bytes = 4096;
  Pair p(config);
  {
    Lock lock(p.hub->mutex());
    p.send_one_way(3000);
    p.send_one_way(3000);
  }
  ASSERT_TRUE(p.agent_closed());
  EXPECT_NE(p.agent->reason.message().find("6000 B unanswered"), std::string::npos) << p.agent->reason.message();
}

TEST(ChannelWindow, AFrameFarAheadOfTheNextIsABrokenPeer) {
  Pair p(ChannelConfig{});
  {
    Lock lock(p.hub->mutex());
    p.client->next_tx_seq = 1u << 20;  // frames 0 .. 2^20 - 1 never sent
    p.send_one_way(8);
  }
  ASSERT_TRUE(p.agent_closed());
  EXPECT_EQ(p.agent->reason.message(), "peer client sent frame 1048576 where 0 was next");
  EXPECT_EQ(p.served, 0);
}

}  // namespace
}  // namespace outboard::channel
