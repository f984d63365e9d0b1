#include <algorithm>
#include <random>

#include "../agent_fixture.h"
#include "channel/connection_impl.h"
#include "channel/hub.h"
#include "outboard/checksum.h"

namespace outboard {
namespace {

using testing::AgentFixture;

class ConnectionTest : public AgentFixture {
 protected:
  // The agent again, its sessions allowed three budgeted requests' bytes, with the "holder" service.
  testing::Holder* start_holding_agent() {
    AgentConfig config = testing::test_config();
    config.max_session_memory = 3 * kBudgetedRequestBytes;
    auto holder = std::make_unique<testing::Holder>();
    testing::Holder* held = holder.get();
    stop_agent();
    start_agent(config, std::move(holder));
    return held;
  }
};

Deadline soon() { return Deadline::after_ms(10000); }

TEST_F(ConnectionTest, EchoesBoundarySizesByteForByte) {
  auto c = connect();
  ASSERT_TRUE(c);
  for (size_t size : {0ul, 1ul, 4080ul, 4096ul, 65535ul, 65536ul, 1ul << 20}) {
    std::vector<uint8_t> msg(size);
    fill_pattern(msg, size);
    auto r = c->request("echo", msg, soon());
    ASSERT_TRUE(r.ok()) << size << ": " << r.status().to_string();
    ASSERT_EQ(r.value().size(), size);
    EXPECT_EQ(checksum(r.value().span()), checksum(msg)) << size;
  }
}

TEST_F(ConnectionTest, OversizeMessageIsRefusedAndConnectionStaysUsable) {
  stop_agent();
  AgentConfig cfg = testing::test_config();
  cfg.channel.max_msg_size = 65536;
  start_agent(cfg);
  auto c = connect();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->peer_max_msg_size(), 65536u);
  std::vector<uint8_t> big(70000);
  auto r = c->request("echo", big, soon());
  EXPECT_EQ(r.status().code(), Code::kTooBig);
  EXPECT_EQ(r.status().message(), "message of 70000 B exceeds max_msg_size 65536 B (agent option --max-msg-size)");
  EXPECT_EQ(c->send(big, soon(), "echo").code(), Code::kTooBig);
  std::vector<uint8_t> max(65536, 7);
  auto ok = c->request("echo", max, soon());
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok.value().size(), 65536u);
}

TEST_F(ConnectionTest, OneWayMessagesArriveInOrderWithoutLoss) {
  auto c = connect();
  ASSERT_TRUE(c);
  std::mt19937_64 rng(42);
  constexpr int kCount = 2000;
  std::vector<uint64_t> sums;
  int received = 0;
  auto check_one = [&](Result<Incoming> in) {
    ASSERT_TRUE(in.ok()) << in.status().to_string();
    ASSERT_EQ(checksum(in.value().data.span()), sums[received]) << "message " << received;
    ++received;
  };
  for (int i = 0; i < kCount; ++i) {
    // Mix eager and rendezvous sizes so rendezvous frames complete out of order.
    size_t size = (rng() % 8 == 0) ? 20000 + rng() % 200000 : rng() % 2000;
    std::vector<uint8_t> msg(size);
    fill_pattern(msg, i);
    sums.push_back(checksum(msg));
    ASSERT_TRUE(c->send(msg, soon(), "echo").ok());
    while (received + 64 < i) check_one(c->receive(soon()));  // keep the agent's credits flowing
  }
  while (received < kCount) check_one(c->receive(soon()));
}

TEST_F(ConnectionTest, PostedMessagesStayInOrderAndEachCompletesOnce) {
  constexpr int kCount = 600;
  std::vector<std::vector<uint8_t>> msgs(kCount);  // declared before the connection: they outlive it
  std::vector<int> completions(kCount, 0);
  auto c = connect();
  ASSERT_TRUE(c);
  std::mt19937_64 rng(7);
  int received = 0;
  for (int i = 0; i < kCount; ++i) {
    msgs[i].resize((rng() % 6 == 0) ? 30000 + rng() % 100000 : rng() % 1500);  // eager and rendezvous
    fill_pattern(msgs[i], 500 + i);
    ASSERT_TRUE(c->post(msgs[i], soon(), "echo", [&, i](Status st) {
      EXPECT_TRUE(st.ok()) << st.to_string();
      ++completions[i];
    }).ok());
    while (received + 64 < i) {  // the echo's replies return our credits
      auto in = c->receive(soon());
      ASSERT_TRUE(in.ok()) << in.status().to_string();
      ASSERT_EQ(checksum(in.value().data.span()), checksum(msgs[received])) << received;
      ++received;
    }
  }
  while (received < kCount) {
    auto in = c->receive(soon());
    ASSERT_TRUE(in.ok()) << in.status().to_string();
    ASSERT_EQ(checksum(in.value().data.span()), checksum(msgs[received])) << received;
    ++received;
  }
  Deadline d = soon();
  while (std::count(completions.begin(), completions.end(), 1) < kCount && !d.expired()) c->progress();
  EXPECT_EQ(std::count(completions.begin(), completions.end(), 1), kCount);
}

TEST_F(ConnectionTest, NonBlockingSendSaysAgainWhenCreditsRunOut) {
  stop_agent();
  AgentConfig cfg = testing::test_config();
  cfg.channel.recv_window_msgs = 4;
  start_agent(cfg);
  auto c = connect();
  ASSERT_TRUE(c);
  // The agent reflects each one-way echo; without reading them here its
  // credits toward us run out and it stops consuming ours.
  std::vector<uint8_t> msg(16, 1);
  int sent = 0;
  Status st;
  for (int i = 0; i < 10000 && (st = c->try_send(msg, "echo")).ok(); ++i) {
    ++sent;
    c->progress();
  }
  EXPECT_EQ(st.code(), Code::kAgain) << st.to_string();
  EXPECT_GT(sent, 0);
  EXPECT_LT(sent, 10000);
}

TEST_F(ConnectionTest, UnknownServiceIsNamed) {
  auto c = connect();
  ASSERT_TRUE(c);
  auto r = c->request("nope", {}, soon());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_NE(r.status().message().find("'nope'"), std::string::npos);
  EXPECT_NE(r.status().message().find("echo"), std::string::npos);
}

TEST_F(ConnectionTest, StatsCountClientsAndMessages) {
  auto a = connect();
  auto b = connect();
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->request("echo", bytes("x"), soon()).ok());
  auto r = b->request("stats", {}, soon());
  ASSERT_TRUE(r.ok());
  std::string json(reinterpret_cast<const char*>(r.value().data()), r.value().size());
  EXPECT_NE(json.find("\"clients\":2"), std::string::npos) << json;
  EXPECT_NE(json.find("\"messages_in\":2"), std::string::npos) << json;
}

TEST_F(ConnectionTest, AsyncRequestsCompleteThroughProgress) {
  auto c = connect();
  ASSERT_TRUE(c);
  int done = 0;
  for (int i = 0; i < 100; ++i) {
    std::string s = "req" + std::to_string(i);
    ASSERT_TRUE(c->submit("echo", Buffer::copy_of(bytes(s)), soon(), [&, s](Result<Buffer> r) {
                   ASSERT_TRUE(r.ok());
                   EXPECT_EQ(std::string(reinterpret_cast<const char*>(r.value().data()), r.value().size()), s);
                   ++done;
                 }).ok());
  }
  Deadline d = soon();
  while (done < 100 && !d.expired()) c->wait(Deadline::after_ms(10));
  EXPECT_EQ(done, 100);
}

// A blocking request's answer completes inside UCX's callback; an async one's
// callback may block (here: a request of its own), so it must run from
// progress, and messages must keep their order around both.
TEST_F(ConnectionTest, BlockingAsyncAndOneWayTrafficInterleaveInOrder) {
  auto c = connect();
  ASSERT_TRUE(c);
  auto hub = channel::Hub::get();  // the process's, which the connection uses
  ASSERT_TRUE(hub.ok());
  int async_done = 0;
  auto text = [](const Buffer& b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); };
  for (int i = 0; i < 100; ++i) {
    const std::string m = "msg" + std::to_string(i), a = "async" + std::to_string(i), b = "block" + std::to_string(i);
    ASSERT_TRUE(c->submit("echo", Buffer::copy_of(bytes(a)), soon(), [&, a](Result<Buffer> r) {
                   ASSERT_TRUE(r.ok());
                   EXPECT_EQ(text(r.value()), a);
                   EXPECT_FALSE(hub.value()->in_ucx_callback()) << "an async callback ran inside UCX's";
                   auto nested = c->request("echo", bytes("nested"), soon());
                   ASSERT_TRUE(nested.ok()) << nested.status().to_string();
                   EXPECT_EQ(text(nested.value()), "nested");
                   ++async_done;
                 }).ok());
    ASSERT_TRUE(c->send(bytes(m), soon(), "echo").ok());  // echo reflects it back
    auto r = c->request("echo", bytes(b), soon());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(text(r.value()), b);
    auto in = c->receive(soon());
    ASSERT_TRUE(in.ok()) << in.status().to_string();
    EXPECT_EQ(text(in.value().data), m);
  }
  Deadline d = soon();
  while (async_done < 100 && !d.expired()) c->wait(Deadline::after_ms(10));
  EXPECT_EQ(async_done, 100);
}

// Records whether handle() ran inside UCX's receive callback.
class Witness final : public Service {
 public:
  explicit Witness(bool handles_inline) : inline_(handles_inline) {}
  std::string name() const override { return "witness"; }
  bool handles_inline() const override { return inline_; }
  void handle(ServiceRequest r) override {
    inside.push_back(hub->in_ucx_callback());
    r.responder.respond(std::move(r.payload));
  }
  const bool inline_;
  std::shared_ptr<channel::Hub> hub;  // set before any request (Hub::get() may not run under its lock)
  std::vector<bool> inside;
};

TEST_F(ConnectionTest, OnlyServicesThatNeverBlockRunInsideUcxCallbacks) {
  for (bool handles_inline : {false, true}) {
    stop_agent();
    auto service = std::make_unique<Witness>(handles_inline);
    Witness* w = service.get();
    start_agent({}, std::move(service));
    w->hub = channel::Hub::get().value();
    auto c = connect();
    ASSERT_TRUE(c);
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(c->request("witness", bytes("x"), soon()).ok());
    ASSERT_EQ(w->inside.size(), 50u);
    const auto inside = std::count(w->inside.begin(), w->inside.end(), true);
    if (handles_inline)
      EXPECT_GT(inside, 0) << "a service that never blocks is still deferred";
    else
      EXPECT_EQ(inside, 0) << "a service that may block ran inside UCX's callback";
  }
}

TEST_F(ConnectionTest, RequestDeadlineExpiresAndLateAnswerIsDropped) {
  stop_agent();
  auto sink = std::make_unique<testing::Holder>();
  testing::Holder* s = sink.get();
  start_agent({}, std::move(sink));
  auto c = connect();
  ASSERT_TRUE(c);
  auto t0 = Clock::now();
  auto r = c->request("holder", bytes("wait"), Deadline::after_ms(200));
  auto waited = Clock::now() - t0;
  EXPECT_EQ(r.status().code(), Code::kTimedOut) << r.status().to_string();
  EXPECT_GE(waited, std::chrono::milliseconds(200));
  EXPECT_LT(waited, std::chrono::milliseconds(1500));
  ASSERT_TRUE(c->request("echo", bytes("probe"), soon()).ok());  // the agent thread has seen the request
  ASSERT_EQ(s->held(), 1u);
  s->answer_all(bytes("late"));
  EXPECT_TRUE(c->request("echo", bytes("still"), soon()).ok());
}

TEST_F(ConnectionTest, ShutdownFailsInFlightRequestsWithShutDown) {
  stop_agent();
  start_agent({}, std::make_unique<testing::Holder>());
  auto c = connect();
  ASSERT_TRUE(c);
  Status answer;
  bool done = false;
  ASSERT_TRUE(c->submit("holder", Buffer(), soon(), [&](Result<Buffer> r) {
                 answer = r.status();
                 done = true;
               }).ok());
  ASSERT_TRUE(c->request("echo", bytes("probe"), soon()).ok());  // the sink holds the request now
  stop_agent();
  Deadline d = Deadline::after_ms(2000);
  while (!done && !d.expired()) c->wait(Deadline::after_ms(10));
  ASSERT_TRUE(done);
  EXPECT_EQ(answer.code(), Code::kShutDown) << answer.to_string();
}

TEST_F(ConnectionTest, TheAgentBoundsTheRequestsOfAClientThatDoesNotCountItsOwn) {
  stop_agent();
  AgentConfig config = testing::test_config();
  config.channel.max_outstanding_requests = 4;
  auto holder = std::make_unique<testing::Holder>();
  testing::Holder* held = holder.get();
  start_agent(config, std::move(holder));
  ChannelConfig lax;
  lax.max_outstanding_requests = 100;  // the client would let 100 out
  auto c = connect(lax);
  ASSERT_TRUE(c);
  std::vector<Status> answers(6);
  int done = 0;
  for (size_t i = 0; i < answers.size(); ++i)
    ASSERT_TRUE(c->submit("holder", Buffer(), soon(), [&, i](Result<Buffer> r) {
                   answers[i] = r.status();
                   ++done;
                 }).ok());
  ASSERT_TRUE(c->wait_until(soon(), [&] { return done == 2; }));
  for (size_t i : {4u, 5u}) {
    EXPECT_EQ(answers[i].code(), Code::kAgain);
    EXPECT_EQ(answers[i].message(),
              "4 requests outstanding reach max_outstanding_requests 4 (agent option --max-outstanding-requests)");
  }
  EXPECT_EQ(held->held(), 4u);
  held->answer_all(bytes("ok"));
  ASSERT_TRUE(c->wait_until(soon(), [&] { return done == 6; }));
  for (size_t i : {0u, 1u, 2u, 3u}) EXPECT_TRUE(answers[i].ok()) << answers[i].to_string();
}

TEST_F(ConnectionTest, LargeRequestsAServiceHoldsCountInTheSessionsMemoryUntilAnswered) {
  testing::Holder* held = start_holding_agent();
  auto c = connect();
  ASSERT_TRUE(c);
  std::vector<Status> answers;
  int done = 0;
  auto submit = [&](size_t bytes) {
    const size_t i = answers.size();
    answers.emplace_back();
    ASSERT_TRUE(c->submit("holder", Buffer(bytes), soon(), [&, i](Result<Buffer> r) {
                   answers[i] = r.status();
                   ++done;
                 }).ok());
  };
  for (int i = 0; i < 3; ++i) submit(kBudgetedRequestBytes);
  submit(kBudgetedRequestBytes - 1);  // smaller ones are bounded by their number, not counted here
  submit(kBudgetedRequestBytes);
  ASSERT_TRUE(c->wait_until(soon(), [&] { return done == 1; }));
  EXPECT_EQ(answers[4].code(), Code::kNoMemory);
  EXPECT_EQ(answers[4].message(), "request of 65536 B: this session holds 196608 B of its quota of 196608 B (agent "
                                  "option --max-session-memory)");
  EXPECT_EQ(held->held(), 4u);
  held->answer_all(bytes("ok"));  // answered: what they held is free again
  ASSERT_TRUE(c->wait_until(soon(), [&] { return done == 5; }));
  submit(kBudgetedRequestBytes);
  ASSERT_TRUE(c->request("echo", bytes("probe"), soon()).ok());  // in order: the holder has it
  EXPECT_EQ(held->held(), 1u);
  EXPECT_EQ(done, 5);
  held->answer_all(bytes("ok"));
  ASSERT_TRUE(c->wait_until(soon(), [&] { return done == 6; }));
  EXPECT_TRUE(answers[5].ok()) << answers[5].to_string();
}

TEST_F(ConnectionTest, LargeOneWayMessagesAServiceHoldsCountInTheSessionsMemoryAndOneOverEndsTheConnection) {
  testing::Holder* held = start_holding_agent();
  auto c = connect();
  ASSERT_TRUE(c);
  const std::vector<uint8_t> large(kBudgetedRequestBytes, 1), small(kBudgetedRequestBytes - 1, 2);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(c->send(large, soon(), "holder").ok());
  ASSERT_TRUE(c->send(small, soon(), "holder").ok());  // smaller ones are bounded by their number, not counted here
  std::optional<Status> answer;
  ASSERT_TRUE(c->submit("holder", Buffer(kBudgetedRequestBytes), soon(), [&](Result<Buffer> r) {
                 answer = r.status();
               }).ok());
  ASSERT_TRUE(c->request("echo", bytes("probe"), soon()).ok());  // in order: the holder has all four
  EXPECT_EQ(held->held(), 4u);
  held->answer_all(bytes("ok"));  // acknowledged and answered: what they held is free again
  ASSERT_TRUE(c->wait_until(soon(), [&] { return answer.has_value(); }));
  ASSERT_TRUE(answer->ok()) << answer->to_string();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(c->send(large, soon(), "holder").ok());
  ASSERT_TRUE(c->request("echo", bytes("probe"), soon()).ok());
  // The fourth has no answer to carry a refusal: the connection ends, saying why.
  ASSERT_TRUE(c->send(large, soon(), "holder").ok());
  auto after = c->request("echo", bytes("after"), soon());
  EXPECT_EQ(after.status().code(), Code::kNoMemory);
  EXPECT_NE(after.status().message().find("closed the connection: one-way message of 65536 B: this session holds "
                                          "196608 B of its quota of 196608 B (agent option --max-session-memory)"),
            std::string::npos)
      << after.status().to_string();
  EXPECT_FALSE(c->is_open());
  EXPECT_EQ(held->held(), 3u);
  held->answer_all(bytes("ok"));  // acknowledging on a closed connection is a no-op
  auto again = connect();  // the closed connection's messages went back to the session
  ASSERT_TRUE(again);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(again->send(large, soon(), "holder").ok());
  ASSERT_TRUE(again->request("echo", bytes("probe"), soon()).ok());
  EXPECT_EQ(held->held(), 3u);
  held->answer_all(bytes("ok"));
}

TEST_F(ConnectionTest, ShutdownFailsClientWithShutDown) {
  auto c = connect();
  ASSERT_TRUE(c);
  stop_agent();
  auto r = c->request("echo", bytes("late"), Deadline::after_ms(2000));
  EXPECT_TRUE(r.status().code() == Code::kShutDown) << r.status().to_string();
  EXPECT_FALSE(c->is_open());
}

TEST_F(ConnectionTest, ConnectToNobodyFailsFast) {
  ChannelConfig cfg;
  cfg.connect_timeout_ms = 2000;
  auto c = Connection::connect("127.0.0.1:1", cfg);
  EXPECT_FALSE(c.ok());
  EXPECT_TRUE(c.status().code() == Code::kConnectionReset || c.status().code() == Code::kTimedOut)
      << c.status().to_string();
  EXPECT_EQ(Connection::connect("no-port", cfg).status().code(), Code::kBadConfig);
}

}  // namespace
}  // namespace outboard
