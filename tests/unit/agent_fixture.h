// Test fixture: a real agent (real UCX listener and endpoints) served by a
// thread of the test process.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "outboard/agent.h"

namespace outboard::testing {

// A service that answers only when told to (a stand-in for slow work); its
// requests hold the agent's window until then.
class Holder final : public Service {
 public:
  std::string name() const override { return "holder"; }
  void handle(ServiceRequest r) override {
    std::lock_guard lock(mu_);
    held_.push_back(std::move(r.responder));
  }
  size_t held() {
    std::lock_guard lock(mu_);
    return held_.size();
  }
  void answer_all(std::span<const uint8_t> reply) {
    std::vector<Responder> answer;
    {
      std::lock_guard lock(mu_);  // not held while responding: handle() runs under the channel's lock
      answer.swap(held_);
    }
    for (Responder& r : answer) r.respond(Buffer::copy_of(reply));
  }

 private:
  std::mutex mu_;
  std::vector<Responder> held_;
};

/// A config whose sessions run in processes of this build's outboard-agent;
/// with OUTBOARD_TEST_ISOLATION=none, in this process (agent and client
/// then share one UCX worker, which is how a peer's mapped memory can
/// outlive the peer).
inline AgentConfig test_config() {
  AgentConfig config;
  config.session_program = OUTBOARD_AGENT_PATH;
  if (const char* isolation = std::getenv("OUTBOARD_TEST_ISOLATION"); isolation && std::string(isolation) == "none")
    config.isolation = Isolation::kNone;
  return config;
}

class AgentFixture : public ::testing::Test {
 protected:
  /// With `extra`, the agent serves every client in this process
  /// (Isolation::kNone): a session process runs the built-in services only.
  void start_agent(AgentConfig config = test_config(), std::unique_ptr<Service> extra = nullptr) {
    if (extra) config.isolation = Isolation::kNone;
    isolation_ = config.isolation;
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
  /// Whether the agent serves its clients in this process.
  bool agent_in_process() const { return agent_ && isolation_ == Isolation::kNone; }
  static std::span<const uint8_t> bytes(const std::string& s) {
    return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
  }

  std::unique_ptr<Agent> agent_;
  std::thread thread_;
  Isolation isolation_ = Isolation::kProcess;
};

/// Another agent in this process, beside a fixture's, as another node's. Agents reach each other
/// over TCP, which an agent's same-host sessions have when UCX_TLS names it: set while this lives
/// (before the fixture's agent starts; session processes inherit this process's environment).
class PeerAgent {
 public:
  PeerAgent() {
    if (const char* tls = std::getenv("UCX_TLS")) saved_tls_ = tls;
    setenv("UCX_TLS", "posix,tcp", 1);
  }
  ~PeerAgent() {
    stop();
    if (saved_tls_) setenv("UCX_TLS", saved_tls_->c_str(), 1);
    else unsetenv("UCX_TLS");
  }
  PeerAgent(const PeerAgent&) = delete;
  PeerAgent& operator=(const PeerAgent&) = delete;
  void start(const AgentConfig& config) {
    stop();
    auto agent = Agent::create(config);
    ASSERT_TRUE(agent.ok()) << agent.status().to_string();
    agent_ = std::move(agent).value();
    ASSERT_TRUE(agent_->start().ok());
    thread_ = std::thread([this] { (void)agent_->run(); });
  }
  void stop() {
    if (!agent_) return;
    agent_->stop();
    thread_.join();
    agent_.reset();
  }
  Agent* operator->() { return agent_.get(); }

 private:
  std::unique_ptr<Agent> agent_;
  std::thread thread_;
  std::optional<std::string> saved_tls_;
};

}  // namespace outboard::testing
