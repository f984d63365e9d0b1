// Test fixture: a real agent (real UCX listener and endpoints) served by a
// thread of the test process.
#pragma once

#include <gtest/gtest.h>

#include <thread>

#include "outboard/agent.h"

namespace outboard::testing {

class AgentFixture : public ::testing::Test {
 protected:
  void start_agent(AgentConfig config = {}, std::unique_ptr<Service> extra = nullptr) {
    auto agent = Agent::create(config);
    ASSERT_TRUE(agent.ok()) << agent.status().to_string();
    agent_ = std::move(agent).value();
    if (extra) {
      ASSERT_TRUE(agent_->add_service(std::move(extra)).ok());
    }
    ASSERT_TRUE(agent_->start().ok());
    thread_ = std::thread([this] { (void)agent_->run(); });
  }
  void SetUp() override { start_agent(); }
  void TearDown() override { stop_agent(); }
  void stop_agent() {
    if (!agent_) return;
    agent_->stop();
    thread_.join();
    agent_.reset();
  }
  std::unique_ptr<Connection> connect(ChannelConfig config = {}) {
    auto c = Connection::connect(agent_->address(), config);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  static std::span<const uint8_t> bytes(const std::string& s) {
    return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
  }

  std::unique_ptr<Agent> agent_;
  std::thread thread_;
};

}  // namespace outboard::testing
