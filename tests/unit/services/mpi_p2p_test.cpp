// The `mpi` service's point-to-point half under a real agent: "ranks" are connections of this
// process (one session, as a job's ranks share one). Even ranks' buffers are registered with UCX,
// odd ranks' exposed to the agent (the kernel copies them): both paths, mixed in one message.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "../agent_fixture.h"
#include "services/mpi_wire.h"

namespace outboard {
namespace {

using services::mpi_wire::Envelope;
using services::mpi_wire::kAny;
using services::mpi_wire::Kind;
using services::mpi_wire::P2p;

constexpr int64_t kWaitMs = 10'000;
constexpr uint64_t kComm = 3;

struct Answer {
  std::optional<Status> status;
  Envelope envelope;
};

class MpiP2pTest : public testing::AgentFixture {
 protected:
  struct Rank {
    uint32_t rank = 0;
    std::unique_ptr<Connection> conn;
    std::vector<std::unique_ptr<std::vector<uint8_t>>> buffers;  // kept until the test ends
    std::vector<Region> regions;
  };

  std::vector<Rank> ranks(uint32_t n) {
    std::vector<Rank> out(n);
    for (uint32_t i = 0; i < n; ++i) out[i].rank = i, out[i].conn = connect();
    return out;
  }

  // Posts `m` (kind, peer, tag, sync, id; the rest filled in) with `buffer` on rank `r`.
  static void post(Rank& r, uint32_t size, P2p m, std::vector<uint8_t>* buffer, Answer& answer) {
    m.comm = kComm, m.size = size, m.rank = r.rank;
    if (buffer && !buffer->empty()) {
      auto region = r.rank % 2 ? r.conn->expose_memory(buffer->data(), buffer->size())
                               : r.conn->register_memory(buffer->data(), buffer->size());
      ASSERT_TRUE(region.ok()) << region.status().to_string();
      m.bytes = buffer->size();
      m.region.assign(region->descriptor().begin(), region->descriptor().end());
      r.regions.push_back(std::move(region).value());
    }
    answer = {};
    const bool receives = m.kind == Kind::kRecv || m.kind == Kind::kProbe;
    ASSERT_TRUE(r.conn->submit("mpi", Buffer::copy_of(services::mpi_wire::encode(m)), Deadline::after_ms(kWaitMs),
                               [&answer, receives](Result<Buffer> a) {
                                 if (a.ok() && receives) {
                                   auto e = services::mpi_wire::decode_envelope(a->span());
                                   ASSERT_TRUE(e.ok()) << e.status().to_string();
                                   answer.envelope = *e;
                                 }
                                 answer.status = a.status();
                               },
                               Connection::Credit::kWait)
                    .ok());
  }

  static std::vector<uint8_t>* buffer(Rank& r, std::vector<uint8_t> bytes) {
    return r.buffers.emplace_back(std::make_unique<std::vector<uint8_t>>(std::move(bytes))).get();
  }

  static void send(Rank& r, uint32_t size, int32_t to, int32_t tag, std::vector<uint8_t> bytes, Answer& answer,
                   bool sync = false) {
    P2p m;
    m.kind = Kind::kSend, m.peer = to, m.tag = tag, m.sync = sync;
    post(r, size, m, buffer(r, std::move(bytes)), answer);
  }

  // Returns the receive buffer (`capacity` bytes of 0xee before the message).
  static std::vector<uint8_t>* receive(Rank& r, uint32_t size, int32_t from, int32_t tag, uint64_t capacity,
                                       Answer& answer, uint64_t id = 0) {
    P2p m;
    m.kind = Kind::kRecv, m.peer = from, m.tag = tag, m.id = id;
    auto* into = buffer(r, std::vector<uint8_t>(capacity, 0xee));
    post(r, size, m, into, answer);
    return into;
  }

  static bool answered(Connection& conn, std::initializer_list<const Answer*> answers) {
    return conn.wait_until(Deadline::after_ms(kWaitMs), [&] {
      return std::all_of(answers.begin(), answers.end(), [](const Answer* a) { return a->status.has_value(); });
    });
  }

  static std::vector<uint8_t> bytes(size_t n, uint8_t seed) {
    std::vector<uint8_t> v(n);
    std::iota(v.begin(), v.end(), seed);
    return v;
  }
};

TEST_F(MpiP2pTest, ReceivesMatchSourceAndTagOrAnyInArrivalOrder) {
  auto rs = ranks(3);
  // Rank 1 sends rank 0 tags 5, 7, 5; rank 2 sends tag 7. All arrive before any receive.
  std::vector<Answer> sent(4);
  send(rs[1], 3, 0, 5, bytes(100, 1), sent[0]);
  send(rs[1], 3, 0, 7, bytes(200, 2), sent[1]);
  send(rs[1], 3, 0, 5, bytes(300, 3), sent[2]);
  send(rs[2], 3, 0, 7, bytes(400, 4), sent[3]);
  ASSERT_TRUE(answered(*rs[1].conn, {&sent[0], &sent[1], &sent[2]}));
  ASSERT_TRUE(answered(*rs[2].conn, {&sent[3]}));
  for (auto& a : sent) EXPECT_TRUE(a.status->ok()) << a.status->to_string();  // buffered: answered at once
  // Rank 2's tag 7, then any source with tag 5 twice (rank 1's, in the order sent), then anything.
  std::vector<Answer> got(4);
  auto* a = receive(rs[0], 3, 2, 7, 1000, got[0]);
  auto* b = receive(rs[0], 3, kAny, 5, 1000, got[1]);
  auto* c = receive(rs[0], 3, kAny, 5, 1000, got[2]);
  auto* d = receive(rs[0], 3, kAny, kAny, 1000, got[3]);
  ASSERT_TRUE(answered(*rs[0].conn, {&got[0], &got[1], &got[2], &got[3]}));
  auto expect = [](const Answer& ans, const std::vector<uint8_t>& buf, uint32_t source, int32_t tag, size_t n,
                   uint8_t seed) {
    ASSERT_TRUE(ans.status->ok()) << ans.status->to_string();
    EXPECT_EQ(ans.envelope.source, source);
    EXPECT_EQ(ans.envelope.tag, tag);
    EXPECT_EQ(ans.envelope.bytes, n);
    EXPECT_TRUE(std::equal(buf.begin(), buf.begin() + n, bytes(n, seed).begin()));
    EXPECT_EQ(buf[n], 0xee);  // nothing past the message
  };
  expect(got[0], *a, 2, 7, 400, 4);
  expect(got[1], *b, 1, 5, 100, 1);
  expect(got[2], *c, 1, 5, 300, 3);
  expect(got[3], *d, 1, 7, 200, 2);
}

TEST_F(MpiP2pTest, APostedReceiveTakesTheFirstMatchingSendStraightAcross) {
  auto rs = ranks(2);
  for (uint32_t to : {0u, 1u}) {  // into registered memory, and into exposed memory
    const uint32_t from = 1 - to;
    Answer got, sent;
    auto* into = receive(rs[to], 2, kAny, kAny, 1 << 16, got);
    Answer probed;  // answered after the receive was posted: the agent takes a rank's messages in order
    P2p probe;
    probe.kind = Kind::kProbe, probe.peer = kAny, probe.tag = kAny;
    post(rs[to], 2, probe, nullptr, probed);
    ASSERT_TRUE(answered(*rs[to].conn, {&probed}));
    EXPECT_FALSE(probed.envelope.found);
    send(rs[from], 2, static_cast<int32_t>(to), 9, bytes(1 << 16, 9), sent);
    ASSERT_TRUE(answered(*rs[from].conn, {&sent}));
    ASSERT_TRUE(answered(*rs[to].conn, {&got}));
    ASSERT_TRUE(got.status->ok()) << got.status->to_string();
    EXPECT_EQ(got.envelope.source, from);
    EXPECT_EQ(*into, bytes(1 << 16, 9));
  }
}

TEST_F(MpiP2pTest, AMessageLargerThanTheBounceBufferArrivesWhole) {
  auto rs = ranks(4);
  constexpr size_t kBytes = (3 << 20) + 123;  // pieces of 1 MiB through the agent, and a short one
  std::vector<uint8_t> big(kBytes);
  std::mt19937 rng(7);
  for (auto& b : big) b = static_cast<uint8_t>(rng());
  // Registered to registered (UCX puts, flushed), exposed to exposed (the kernel's copies); posted
  // first, so the agent copies straight across instead of buffering.
  for (auto [from, to] : {std::pair{0, 2}, std::pair{1, 3}}) {
    Answer got, sent, probed;
    auto* into = receive(rs[to], 4, from, 1, kBytes, got);
    P2p probe;
    probe.kind = Kind::kProbe, probe.peer = kAny, probe.tag = kAny;
    post(rs[to], 4, probe, nullptr, probed);
    ASSERT_TRUE(answered(*rs[to].conn, {&probed}));
    send(rs[from], 4, to, 1, big, sent);
    ASSERT_TRUE(answered(*rs[to].conn, {&got}));
    ASSERT_TRUE(answered(*rs[from].conn, {&sent}));
    ASSERT_TRUE(got.status->ok()) << got.status->to_string();
    EXPECT_EQ(*into, big) << from << " -> " << to;
  }
}

TEST_F(MpiP2pTest, OverTheBudgetASendWaitsForItsReceiveAndNothingIsLost) {
  AgentConfig config = testing::test_config();
  config.mpi_unexpected_bytes = 1000;
  stop_agent();
  start_agent(config);
  auto rs = ranks(2);
  std::vector<Answer> sent(4);
  for (int i = 0; i < 4; ++i) send(rs[1], 2, 0, 1, bytes(400, static_cast<uint8_t>(i)), sent[i]);
  ASSERT_TRUE(answered(*rs[1].conn, {&sent[0], &sent[1]}));
  // Two fit the budget; the third and fourth wait (their data stays with the sender).
  EXPECT_FALSE(rs[1].conn->wait_until(Deadline::after_ms(300), [&] { return sent[2].status.has_value(); }));
  EXPECT_FALSE(sent[3].status.has_value());
  std::vector<Answer> got(4);
  std::vector<std::vector<uint8_t>*> into;
  for (int i = 0; i < 4; ++i) {
    into.push_back(receive(rs[0], 2, 1, 1, 400, got[i]));
    ASSERT_TRUE(answered(*rs[0].conn, {&got[i]}));
    ASSERT_TRUE(got[i].status->ok()) << got[i].status->to_string();
    EXPECT_EQ(*into[i], bytes(400, static_cast<uint8_t>(i))) << "message " << i;
  }
  ASSERT_TRUE(answered(*rs[1].conn, {&sent[2], &sent[3]}));
  for (auto& a : sent) EXPECT_TRUE(a.status->ok()) << a.status->to_string();
  // Received, they gave the budget back: the next two are buffered at once again.
  std::vector<Answer> again(2), got_again(2);
  for (int i = 0; i < 2; ++i) send(rs[1], 2, 0, 1, bytes(400, static_cast<uint8_t>(10 + i)), again[i]);
  ASSERT_TRUE(answered(*rs[1].conn, {&again[0], &again[1]}));
  for (auto& a : again) ASSERT_TRUE(a.status->ok()) << a.status->to_string();  // not timed out waiting
  for (int i = 0; i < 2; ++i) {
    auto* into = receive(rs[0], 2, 1, 1, 400, got_again[i]);
    ASSERT_TRUE(answered(*rs[0].conn, {&got_again[i]}));
    EXPECT_EQ(*into, bytes(400, static_cast<uint8_t>(10 + i)));
  }
}

TEST_F(MpiP2pTest, ASynchronousSendIsAnsweredOnlyOnceMatched) {
  auto rs = ranks(2);
  Answer sent, got;
  send(rs[0], 2, 1, 0, bytes(10, 0), sent, /*sync=*/true);
  EXPECT_FALSE(rs[0].conn->wait_until(Deadline::after_ms(300), [&] { return sent.status.has_value(); }));
  receive(rs[1], 2, 0, 0, 10, got);
  ASSERT_TRUE(answered(*rs[0].conn, {&sent}));
  ASSERT_TRUE(answered(*rs[1].conn, {&got}));
  EXPECT_TRUE(sent.status->ok() && got.status->ok());
}

TEST_F(MpiP2pTest, AShortReceiveHearsTheWholeSizeAndGetsOnlyItsCapacity) {
  auto rs = ranks(2);
  Answer sent, got;
  send(rs[0], 2, 1, 3, bytes(100, 0), sent);
  auto* into = receive(rs[1], 2, 0, 3, 60, got);
  ASSERT_TRUE(answered(*rs[1].conn, {&got}));
  ASSERT_TRUE(answered(*rs[0].conn, {&sent}));
  ASSERT_TRUE(got.status->ok() && sent.status->ok());
  EXPECT_EQ(got.envelope.bytes, 100u);
  EXPECT_EQ(*into, bytes(60, 0));
}

TEST_F(MpiP2pTest, ProbeSeesAMessageWithoutTakingItAndCancelTakesBackAReceive) {
  auto rs = ranks(2);
  Answer probed, sent;
  P2p probe;
  probe.kind = Kind::kProbe, probe.peer = kAny, probe.tag = 4;
  post(rs[1], 2, probe, nullptr, probed);
  ASSERT_TRUE(answered(*rs[1].conn, {&probed}));
  EXPECT_FALSE(probed.envelope.found);
  send(rs[0], 2, 1, 4, bytes(33, 0), sent);
  ASSERT_TRUE(answered(*rs[0].conn, {&sent}));
  post(rs[1], 2, probe, nullptr, probed);
  ASSERT_TRUE(answered(*rs[1].conn, {&probed}));
  EXPECT_TRUE(probed.envelope.found);
  EXPECT_EQ(probed.envelope.source, 0u);
  EXPECT_EQ(probed.envelope.bytes, 33u);
  // A receive nobody sends to is cancelled; the probed message is still there for the next.
  Answer waiting, cancelled, got;
  receive(rs[1], 2, 0, 99, 8, waiting, /*id=*/41);
  P2p cancel;
  cancel.kind = Kind::kCancel, cancel.peer = 0, cancel.tag = 99, cancel.id = 41;
  post(rs[1], 2, cancel, nullptr, cancelled);
  ASSERT_TRUE(answered(*rs[1].conn, {&waiting, &cancelled}));
  EXPECT_TRUE(waiting.status->ok());
  EXPECT_TRUE(waiting.envelope.cancelled);
  auto* into = receive(rs[1], 2, kAny, kAny, 33, got);
  ASSERT_TRUE(answered(*rs[1].conn, {&got}));
  EXPECT_EQ(*into, bytes(33, 0));
}

TEST_F(MpiP2pTest, ARankThatLeavesFailsWhatWaitsForItNamingIt) {
  auto rs = ranks(3);
  Answer hello, from_two, to_two, later, sent;
  send(rs[2], 3, 1, 0, bytes(8, 0), hello);  // rank 2 is known to the communicator
  ASSERT_TRUE(answered(*rs[2].conn, {&hello}));
  receive(rs[1], 3, 2, 1, 8, from_two);  // never sent
  send(rs[0], 3, 2, 1, bytes(8, 0), to_two, /*sync=*/true);
  rs[2].conn->close();
  ASSERT_TRUE(answered(*rs[1].conn, {&from_two}));
  ASSERT_TRUE(answered(*rs[0].conn, {&to_two}));
  for (const Answer* a : {&from_two, &to_two}) {
    EXPECT_EQ(a->status->code(), Code::kConnectionReset) << a->status->to_string();
    EXPECT_NE(a->status->message().find("rank 2 left (its connection closed)"), std::string::npos);
  }
  // What rank 2 sent before it left is still delivered; what waits for it later fails at once.
  Answer got;
  auto* into = receive(rs[1], 3, 2, 0, 8, got);
  ASSERT_TRUE(answered(*rs[1].conn, {&got}));
  ASSERT_TRUE(got.status->ok()) << got.status->to_string();
  EXPECT_EQ(*into, bytes(8, 0));
  receive(rs[1], 3, 2, 0, 8, later);
  ASSERT_TRUE(answered(*rs[1].conn, {&later}));
  EXPECT_EQ(later.status->code(), Code::kConnectionReset);
  EXPECT_NE(later.status->message().find("receive of rank 1 from rank 2, tag 0, on communicator 3: rank 2 left"),
            std::string::npos)
      << later.status->to_string();
}

TEST_F(MpiP2pTest, ARanksUnmatchedMessagesAreBounded) {
  AgentConfig config = testing::test_config();
  config.mpi_max_messages = 2;
  stop_agent();
  start_agent(config);
  std::vector<Answer> got(3);  // outlives the connection, whose close fails the two waiting
  auto rs = ranks(2);
  for (auto& a : got) receive(rs[0], 2, 1, 0, 8, a);
  ASSERT_TRUE(answered(*rs[0].conn, {&got[2]}));
  EXPECT_EQ(got[2].status->code(), Code::kTooBig);
  EXPECT_NE(got[2].status->message().find("already has 2 sends and receives unmatched (limit 2, agent option "
                                          "--mpi-max-messages)"),
            std::string::npos)
      << got[2].status->to_string();
}

// Two agents, as on two nodes: rank 0 on the fixture's agent, rank 1 on another. A rank's sends
// to the other are forwarded by its agent to the other's, as a client of the job's session there
// (over TCP even on one host); a receive from the other rank watches that rank's agent.
class MpiP2pAcrossAgentsTest : public MpiP2pTest {
 protected:
  static constexpr const char* kToken = "5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed";
  void SetUp() override { restart(testing::test_config()); }
  void TearDown() override {
    other_.stop();
    MpiP2pTest::TearDown();
  }
  void restart(const AgentConfig& config) {
    other_.stop();
    stop_agent();
    start_agent(config);
    other_.start(config);
  }
  std::vector<Rank> ranks_on_both() {
    std::vector<Rank> out(2);
    ChannelConfig config;
    config.session = kToken;
    for (uint32_t i = 0; i < 2; ++i) {
      auto c = Connection::connect(i ? other_->address() : agent_->address(), config);
      EXPECT_TRUE(c.ok()) << c.status().to_string();
      out[i].rank = i;
      if (c.ok()) out[i].conn = std::move(c).value();
    }
    return out;
  }
  // A send to, or receive from, the other rank: it names that rank's agent.
  P2p across(Kind kind, uint32_t from_rank, int32_t tag, bool sync = false) {
    P2p m;
    m.kind = kind, m.peer = static_cast<int32_t>(1 - from_rank), m.tag = tag, m.sync = sync;
    m.token = kToken, m.agent = from_rank ? agent_->address() : other_->address();
    return m;
  }

  testing::PeerAgent other_;
};

TEST_F(MpiP2pAcrossAgentsTest, SendsBeyondTheWindowAndTheBudgetArriveInOrderAndALaterTagOvertakesThem) {
  // 1000 B for unexpected messages and 1500 B of forwards in flight: of eight 600 B messages the
  // sender's agent forwards what the window holds with their data and the rest as envelopes, and
  // the receiver's answers only what fits its budget (one). A synchronous message with another tag
  // sent last is received first: its envelope does not wait behind the flood.
  AgentConfig config = testing::test_config();
  config.mpi_unexpected_bytes = 1000;
  config.mpi_forward_window_bytes = 1500;
  restart(config);
  auto rs = ranks_on_both();
  std::vector<Answer> sent(9);
  for (int i = 0; i < 8; ++i) post(rs[1], 2, across(Kind::kSend, 1, 5), buffer(rs[1], bytes(600, uint8_t(i))), sent[i]);
  post(rs[1], 2, across(Kind::kSend, 1, 9, /*sync=*/true), buffer(rs[1], bytes(50, 200)), sent[8]);
  ASSERT_TRUE(answered(*rs[1].conn, {&sent[0]}));  // buffered by the receiver's agent
  // The rest wait: held over the budget, or their data still in the sender's memory.
  EXPECT_FALSE(rs[1].conn->wait_until(Deadline::after_ms(300), [&] {
    return std::any_of(sent.begin() + 1, sent.end(), [](const Answer& a) { return a.status.has_value(); });
  }));
  Answer last;
  auto* got_last = receive(rs[0], 2, 1, 9, 50, last);
  ASSERT_TRUE(answered(*rs[0].conn, {&last}));
  ASSERT_TRUE(last.status->ok()) << last.status->to_string();
  EXPECT_EQ(*got_last, bytes(50, 200));
  EXPECT_EQ(last.envelope.tag, 9);
  ASSERT_TRUE(answered(*rs[1].conn, {&sent[8]}));
  for (int i = 0; i < 8; ++i) {
    Answer got;
    auto* into = receive(rs[0], 2, kAny, 5, 600, got);
    ASSERT_TRUE(answered(*rs[0].conn, {&got}));
    ASSERT_TRUE(got.status->ok()) << got.status->to_string();
    EXPECT_EQ(*into, bytes(600, uint8_t(i))) << "message " << i;
    EXPECT_EQ(got.envelope.source, 1u);
  }
  for (auto& a : sent) {
    ASSERT_TRUE(answered(*rs[1].conn, {&a}));
    EXPECT_TRUE(a.status->ok()) << a.status->to_string();
  }
}

TEST_F(MpiP2pAcrossAgentsTest, AMessageOverOneForwardPieceFollowsInPiecesToAPostedAndToALaterReceive) {
  // Larger than one forward carries, and than the agents' message limit: its envelope goes first
  // and its data follows in pieces, in order, for a receive already posted and for one posted
  // after the receiver's agent buffered the message. The bytes never repeat with a piece's period.
  const size_t n = 2 * services::mpi_wire::kMaxForwardPiece + 12345;
  AgentConfig config = testing::test_config();
  config.channel.max_msg_size = services::mpi_wire::kMaxForwardPiece + 4096;
  restart(config);
  auto distinct = [n](uint32_t seed) {
    std::vector<uint8_t> v(n);
    for (auto& b : v) seed = seed * 1664525u + 1013904223u, b = static_cast<uint8_t>(seed >> 24);
    return v;
  };
  const std::vector<uint8_t> a = distinct(1), b = distinct(2);
  auto rs = ranks_on_both();
  Answer got_a, sent_a;
  auto* into_a = receive(rs[0], 2, 1, 4, n, got_a);
  post(rs[1], 2, across(Kind::kSend, 1, 4), buffer(rs[1], a), sent_a);
  ASSERT_TRUE(answered(*rs[0].conn, {&got_a}));
  ASSERT_TRUE(got_a.status->ok()) << got_a.status->to_string();
  EXPECT_EQ(got_a.envelope.bytes, n);
  EXPECT_TRUE(*into_a == a);
  ASSERT_TRUE(answered(*rs[1].conn, {&sent_a}));
  EXPECT_TRUE(sent_a.status->ok()) << sent_a.status->to_string();
  Answer sent_b, got_b;
  post(rs[1], 2, across(Kind::kSend, 1, 5), buffer(rs[1], b), sent_b);
  ASSERT_TRUE(answered(*rs[1].conn, {&sent_b}));  // buffered within the receiver's budget
  ASSERT_TRUE(sent_b.status->ok()) << sent_b.status->to_string();
  auto* into_b = receive(rs[0], 2, 1, 5, n, got_b);
  ASSERT_TRUE(answered(*rs[0].conn, {&got_b}));
  ASSERT_TRUE(got_b.status->ok()) << got_b.status->to_string();
  EXPECT_TRUE(*into_b == b);
}

TEST_F(MpiP2pAcrossAgentsTest, AReceiveFromARankWhoseAgentEndsFailsNamingIt) {
  auto rs = ranks_on_both();
  Answer got;
  const std::string other = other_->address();
  post(rs[0], 2, across(Kind::kRecv, 0, 3), buffer(rs[0], std::vector<uint8_t>(8)), got);
  EXPECT_FALSE(rs[0].conn->wait_until(Deadline::after_ms(200), [&] { return got.status.has_value(); }));
  rs[1].conn.reset();
  other_.stop();
  ASSERT_TRUE(answered(*rs[0].conn, {&got}));
  EXPECT_EQ(got.status->code(), Code::kConnectionReset);
  EXPECT_NE(got.status->message().find("rank 1 left (its agent " + other + " ended)"), std::string::npos)
      << got.status->to_string();
}

TEST(MpiWireTest, DecodeP2pChecksEveryField) {
  using namespace services::mpi_wire;
  P2p m;
  m.kind = Kind::kSend, m.comm = 1, m.size = 4, m.rank = 1, m.peer = 3, m.tag = 9, m.sync = true, m.bytes = 8;
  m.region = {1, 2};
  auto round = decode_p2p(encode(m));
  ASSERT_TRUE(round.ok()) << round.status().to_string();
  EXPECT_EQ(round->peer, 3);
  EXPECT_TRUE(round->sync);
  EXPECT_EQ(round->region, m.region);
  auto fails = [](const P2p& q, const std::string& what) {
    auto r = decode_p2p(encode(q));
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().to_string();
  };
  P2p q = m;
  q.peer = kAny;
  fails(q, "send to rank -1 of 4");
  q = m, q.peer = 4;
  fails(q, "to rank 4 of 4");
  q = m, q.tag = kAny;
  fails(q, "send with tag -1");
  q = m, q.region.clear();
  fails(q, "send of 8 B without a region");
  q = m, q.kind = Kind::kRecv;
  fails(q, "receive with flags 1");
  q.sync = false, q.peer = kAny, q.tag = kAny;
  EXPECT_TRUE(decode_p2p(encode(q)).ok());
  q = m, q.kind = Kind::kProbe, q.sync = false;
  fails(q, "probe of 8 B with a region");
  q = m, q.rank = 4;
  fails(q, "send by rank 4 of 4");
  EXPECT_EQ(decode_p2p(encode(Post{})).status().message(), "mpi: a post where a point-to-point message was expected");
  auto bytes = encode(m);
  EXPECT_EQ(decode_p2p({bytes.begin(), bytes.begin() + 10}).status().message(), "mpi: truncated send header");
  bytes.push_back(0);
  EXPECT_EQ(decode_p2p(bytes).status().message(), "mpi: 1 B after the send");
  const Envelope e{2, 5, 77, true, false};
  auto env = decode_envelope(encode(e));
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->bytes, 77u);
  EXPECT_TRUE(env->found);
  EXPECT_FALSE(decode_envelope(std::vector<uint8_t>{1, 2, 3}).ok());
}

TEST(MpiWireTest, RemoteSendsAndReceivesNameTheOtherAgent) {
  using namespace services::mpi_wire;
  P2p m;
  m.kind = Kind::kSend, m.comm = 1, m.size = 4, m.rank = 1, m.peer = 3, m.tag = 9, m.bytes = 8, m.region = {1, 2};
  m.token = std::string(kTokenHexDigits, 'a'), m.agent = "10.0.0.2:7000";
  auto round = decode_p2p(encode(m));
  ASSERT_TRUE(round.ok()) << round.status().to_string();
  EXPECT_EQ(round->agent, m.agent);
  EXPECT_EQ(round->token, m.token);
  P2p q = m;
  q.kind = Kind::kRecv;
  EXPECT_TRUE(decode_p2p(encode(q)).ok());  // a receive from one rank watches its agent
  q.peer = kAny;
  EXPECT_EQ(decode_p2p(encode(q)).status().message(), "mpi: receive with flags 2");
  q = m, q.kind = Kind::kProbe, q.bytes = 0, q.region.clear();
  EXPECT_EQ(decode_p2p(encode(q)).status().message(), "mpi: probe with flags 2");
  q = m, q.token = std::string(kTokenHexDigits, 'z');
  EXPECT_EQ(decode_p2p(encode(q)).status().message(), "mpi: session token is not 64 hex digits");
  q = m, q.agent = std::string(kMaxAddressBytes + 1, 'h');
  EXPECT_EQ(decode_p2p(encode(q)).status().message(),
            "mpi: send's agent address: truncated, empty or over 256 B");
}

TEST(MpiWireTest, DecodeForwardChecksEveryField) {
  using namespace services::mpi_wire;
  const std::vector<uint8_t> data = {7, 8, 9};
  Forward f;
  f.comm = 5, f.size = 4, f.source = 1, f.dest = 2, f.tag = 3, f.sync = true, f.bytes = 3, f.id = 11, f.data = data;
  const auto encoded = encode(f);  // the decoded data is a view into it
  auto round = decode_forward(encoded);
  ASSERT_TRUE(round.ok()) << round.status().to_string();
  EXPECT_EQ(round->id, 11u);
  EXPECT_TRUE(round->sync);
  EXPECT_EQ(std::vector<uint8_t>(round->data.begin(), round->data.end()), data);
  auto fails = [](const Forward& g, const std::string& what) {
    auto r = decode_forward(encode(g));
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_EQ(r.status().message(), "mpi: " + what);
  };
  Forward g = f;
  g.bytes = 4;
  fails(g, "forwarded send of 4 B carrying 3 B at offset 0");
  g = f, g.offset = 1;  // only a piece that follows has an offset
  fails(g, "forwarded send of 3 B carrying 3 B at offset 1");
  g = f, g.later = true;  // the envelope alone carries nothing
  fails(g, "forwarded send of 3 B carrying 3 B at offset 0");
  g.data = {};
  EXPECT_TRUE(decode_forward(encode(g)).ok());
  g.follows = true;
  fails(g, "forwarded send with flags 7");
  g = f, g.gone = true;
  fails(g, "forwarded send with flags 9");
  g.follows = true, g.data = {};
  EXPECT_TRUE(decode_forward(encode(g)).ok());  // its sender left: no data follows
  // Data that follows comes in pieces within the message, none over kMaxForwardPiece.
  g = f, g.follows = true, g.bytes = 10, g.offset = 7;
  auto piece = decode_forward(encode(g));
  ASSERT_TRUE(piece.ok()) << piece.status().to_string();
  EXPECT_EQ(piece->offset, 7u);
  EXPECT_EQ(piece->data.size(), 3u);
  g.offset = 8;
  fails(g, "forwarded send of 10 B carrying 3 B at offset 8");
  g.offset = 11, g.data = {};
  fails(g, "forwarded send of 10 B carrying 0 B at offset 11");
  g.offset = 4;
  fails(g, "forwarded send of 10 B carrying 0 B at offset 4");  // an empty piece ends nothing
  g.bytes = 0, g.offset = 0;
  EXPECT_TRUE(decode_forward(encode(g)).ok());  // a message of no bytes follows as one empty piece
  const std::vector<uint8_t> big(kMaxForwardPiece + 1);
  g = f, g.follows = true, g.bytes = 2 * kMaxForwardPiece, g.data = big;
  fails(g, "forwarded send of " + std::to_string(2 * kMaxForwardPiece) + " B carrying " +
               std::to_string(kMaxForwardPiece + 1) + " B at offset 0");
  g = f, g.dest = 4;
  fails(g, "forwarded send from rank 1 to rank 4 of 4 (1 to 1024 ranks)");
  g = f, g.tag = -1;
  fails(g, "forwarded send with tag -1");
  auto bytes = encode(f);
  EXPECT_EQ(decode_forward({bytes.begin(), bytes.begin() + 20}).status().message(),
            "mpi: truncated forwarded send header");
  EXPECT_EQ(decode_forward(encode_watch()).status().message(), "mpi: a watch where a forwarded send was expected");
  EXPECT_TRUE(decode_watch(encode_watch()).ok());
  auto watch = encode_watch();
  watch.push_back(0);
  EXPECT_EQ(decode_watch(watch).message(), "mpi: 1 B after the watch");
}

}  // namespace
}  // namespace outboard
