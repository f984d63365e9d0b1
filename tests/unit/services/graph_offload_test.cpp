// Offloaded graphs against an in-process agent over real UCX: the seed graph
// with distinct payloads per instance and run, host nodes between agent
// nodes, one-sided transfers both ways, and every refusal naming its item.
#include <sodium.h>

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "../agent_fixture.h"
#include "outboard/graph_offload.h"

namespace outboard::graph {
namespace {

constexpr size_t kPayload = 1024;
constexpr size_t kSlot = kPayload + 32;  // per instance in host memory: copy, digest

Deadline soon() { return Deadline::after_ms(20000); }

class GraphOffloadTest : public testing::AgentFixture {
 protected:
  void SetUp() override { start(testing::test_config()); }

  void start(AgentConfig config) {
    start_agent(config);
    auto off = Offload::connect(agent_->address(), soon());
    ASSERT_TRUE(off.ok()) << off.status().to_string();
    off_ = std::move(off).value();
  }

  // Host memory for `instances` slots, registered and bound.
  void host_memory(size_t instances) {
    host_.assign(instances * kSlot, 0);
    auto region = off_->connection().register_memory(host_.data(), host_.size());
    ASSERT_TRUE(region.ok()) << region.status().to_string();
    region_ = std::move(region).value();
    auto handle = off_->bind(region_, soon());
    ASSERT_TRUE(handle.ok()) << handle.status().to_string();
    handle_ = handle.value();
  }

  std::unique_ptr<Offload> off_;
  std::vector<uint8_t> host_;
  Region region_;
  uint32_t handle_ = 0;
};

// Engine nodes on the agent's progress thread (0) and on executor workers.
class GraphOffloadThreads : public GraphOffloadTest, public ::testing::WithParamInterface<uint32_t> {
 protected:
  void SetUp() override {
    AgentConfig config = testing::test_config();
    config.graph_threads = GetParam();
    start(config);
  }
};

// What the host check of one instance compares against.
struct Expected {
  std::vector<uint8_t> payload;
  uint8_t digest[32];
  const uint8_t* copy = nullptr;      // where the dma node put the payload
  const uint8_t* got_digest = nullptr;
  int checks = 0;
};

Status check(void* d) {
  auto* e = static_cast<Expected*>(d);
  ++e->checks;
  if (std::memcmp(e->copy, e->payload.data(), kPayload) != 0) return {Code::kFailed, "copy differs"};
  if (std::memcmp(e->got_digest, e->digest, 32) != 0) return {Code::kFailed, "digest differs"};
  return {};
}

TEST_P(GraphOffloadThreads, SeedGraphRunsOnTheAgentWithDistinctPayloadsAndChecksOnTheHost) {
  constexpr size_t kInstances = 48;
  host_memory(kInstances);
  auto g = Graph::create("seed");
  NodeId sha = g->add_engine("sha", sha256_engine()).value();
  NodeId dma = g->add_engine("dma", copy_engine()).value();
  NodeId chk = g->add_host("check", check).value();
  ASSERT_TRUE(g->add_dependency(sha, chk).ok());
  ASSERT_TRUE(g->add_dependency(dma, chk).ok());
  ASSERT_TRUE(g->freeze().ok());
  auto remote = off_->ship(g, kPayload, soon());
  ASSERT_TRUE(remote.ok()) << remote.status().to_string();

  std::vector<std::unique_ptr<RemoteInstance>> insts;
  std::vector<Expected> expected(kInstances);
  for (size_t i = 0; i < kInstances; ++i) {
    std::vector<Buffers> b(g->size());
    b[sha] = {Ref::agent(0, kPayload), Ref::host(handle_, i * kSlot + kPayload, 32)};
    b[dma] = {Ref::agent(0, kPayload), Ref::host(handle_, i * kSlot, kPayload)};
    auto inst = off_->instantiate(remote.value(), b, soon());
    ASSERT_TRUE(inst.ok()) << inst.status().to_string();
    expected[i].copy = &host_[i * kSlot];
    expected[i].got_digest = &host_[i * kSlot + kPayload];
    ASSERT_TRUE(inst.value()->set_host_data(chk, &expected[i]).ok());
    insts.push_back(std::move(inst).value());
  }
  uint64_t seed = 1;
  int completions = 0;
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < kInstances; ++i) {
      Expected& e = expected[i];
      e.payload.resize(kPayload);
      for (auto& byte : e.payload) byte = static_cast<uint8_t>((seed = seed * 6364136223846793005ull + 1) >> 56);
      crypto_hash_sha256(e.digest, e.payload.data(), kPayload);
      insts[i]->set_callback([&](RemoteInstance&, const Status& st) {
        EXPECT_TRUE(st.ok()) << st.to_string();
        ++completions;
      });
      AgentWrite w{0, e.payload};
      ASSERT_TRUE(off_->submit(*insts[i], {&w, 1}).ok());
    }
    EXPECT_EQ(off_->in_flight(), kInstances);
    ASSERT_TRUE(off_->drain(soon()).ok());
    for (size_t i = 0; i < kInstances; ++i) {
      EXPECT_TRUE(insts[i]->status().ok()) << insts[i]->status().to_string();
      EXPECT_EQ(expected[i].checks, round + 1);
    }
  }
  EXPECT_EQ(completions, 3 * static_cast<int>(kInstances));
}

TEST_P(GraphOffloadThreads, HostNodesBetweenAgentNodesAndTransfersBothWays) {
  // produce (host) -> fetch (dma host->agent) -> sha (digest to host) -> verify (host)
  host_memory(1);
  struct Data {
    uint8_t* src;
    const uint8_t* digest;
    uint8_t want[32];
    int runs = 0;
  } data{host_.data(), host_.data() + kPayload};
  auto g = Graph::create("chain");
  NodeId produce = g->add_host("produce", [](void* d) {
                     auto* x = static_cast<Data*>(d);
                     for (size_t i = 0; i < kPayload; ++i) x->src[i] = static_cast<uint8_t>(i * 7 + x->runs);
                     crypto_hash_sha256(x->want, x->src, kPayload);
                     return Status();
                   }).value();
  NodeId fetch = g->add_engine("fetch", copy_engine()).value();
  NodeId sha = g->add_engine("sha", sha256_engine()).value();
  NodeId verify = g->add_host("verify", [](void* d) {
                    auto* x = static_cast<Data*>(d);
                    ++x->runs;
                    return std::memcmp(x->digest, x->want, 32) == 0 ? Status() : Status(Code::kFailed, "digest differs");
                  }).value();
  ASSERT_TRUE(g->add_dependency(produce, fetch).ok());
  ASSERT_TRUE(g->add_dependency(fetch, sha).ok());
  ASSERT_TRUE(g->add_dependency(sha, verify).ok());
  ASSERT_TRUE(g->freeze().ok());
  auto remote = off_->ship(g, kPayload, soon()).value();
  std::vector<Buffers> b(g->size());
  b[fetch] = {Ref::host(handle_, 0, kPayload), Ref::agent(0, kPayload)};
  b[sha] = {Ref::agent(0, kPayload), Ref::host(handle_, kPayload, 32)};
  auto inst = off_->instantiate(remote, b, soon()).value();
  ASSERT_TRUE(inst->set_host_data(produce, &data).ok());
  ASSERT_TRUE(inst->set_host_data(verify, &data).ok());
  for (int run = 0; run < 5; ++run) {
    ASSERT_TRUE(off_->submit(*inst).ok());
    EXPECT_EQ(off_->submit(*inst).code(), Code::kBadState);  // in flight
    Status st = off_->wait(*inst, soon());
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(data.runs, run + 1);
  }
}

TEST_F(GraphOffloadTest, AFailingHostNodeFailsOnlyItsInstance) {
  host_memory(2);
  int* fail_first = new int(0);
  std::unique_ptr<int> owner(fail_first);
  auto g = Graph::create("g");
  NodeId copy = g->add_engine("copy", copy_engine()).value();
  NodeId host = g->add_host("judge", [](void* d) {
                  return d ? Status(Code::kIoError, "disk full") : Status();
                }).value();
  ASSERT_TRUE(g->add_dependency(copy, host).ok());
  ASSERT_TRUE(g->freeze().ok());
  auto remote = off_->ship(g, 64, soon()).value();
  std::vector<Buffers> b(2);
  b[copy] = {Ref::agent(0, 64), Ref::host(handle_, 0, 64)};
  auto bad = off_->instantiate(remote, b, soon()).value();
  auto good = off_->instantiate(remote, b, soon()).value();
  ASSERT_TRUE(bad->set_host_data(host, fail_first).ok());
  ASSERT_TRUE(off_->submit(*bad).ok());
  ASSERT_TRUE(off_->submit(*good).ok());
  Status st = off_->wait(*bad, soon());
  EXPECT_EQ(st.code(), Code::kIoError);
  EXPECT_EQ(st.message(), "judge: disk full");
  EXPECT_TRUE(off_->wait(*good, soon()).ok());
}

TEST_F(GraphOffloadTest, RefusalsNameTheItemTheValueAndTheLimit) {
  host_memory(1);
  auto user = Graph::create("u");
  (void)user->add_user("local", [](void*) { return Status(); });
  ASSERT_TRUE(user->freeze().ok());
  auto r = off_->ship(user, 0, soon());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("node 'local' cannot be offloaded"), std::string::npos) << r.status().to_string();

  auto g = Graph::create("g");
  NodeId sha = g->add_engine("sha", sha256_engine()).value();
  NodeId dma = g->add_engine("dma", copy_engine()).value();
  ASSERT_TRUE(g->freeze().ok());
  auto remote = off_->ship(g, 256, soon()).value();
  auto refused = [&](std::vector<Buffers> b, const std::string& words) {
    auto inst = off_->instantiate(remote, b, soon());
    ASSERT_FALSE(inst.ok());
    EXPECT_NE(inst.status().message().find(words), std::string::npos) << inst.status().to_string();
  };
  std::vector<Buffers> ok(2);
  ok[sha] = {Ref::agent(0, 256), Ref::agent(0, 32)};
  ok[dma] = {Ref::agent(0, 128), Ref::agent(128, 128)};
  auto b = ok;
  b[dma].dst = Ref::agent(200, 128);
  refused(b, "node 'dma' destination: 128 B at offset 200 is outside the instance's 256 B of agent memory");
  b = ok;
  b[sha].src = Ref::host(handle_, 0, 16);
  refused(b, "node 'sha': sha256 reads agent memory");
  b = ok;
  b[sha].dst = Ref::agent(0, 16);
  refused(b, "node 'sha': the digest destination is 16 B; sha256 writes 32");
  b = ok;
  b[dma].src = Ref::host(7, 0, 128);
  refused(b, "node 'dma' source: region 7 was not bound on this connection");
  b = ok;
  b[dma].src = Ref::host(handle_, host_.size() - 8, 128);
  refused(b, "is outside bound region");
  b = ok;
  b[dma].src = Ref::host(handle_, 0, 128);
  b[dma].dst = Ref::host(handle_, 128, 128);
  refused(b, "dma between two client buffers");
  EXPECT_EQ(off_->instantiate(remote, std::vector<Buffers>(1), soon()).status().code(), Code::kInvalidArgument);

  auto inst = off_->instantiate(remote, ok, soon()).value();
  std::vector<uint8_t> bytes(64);
  AgentWrite w{250, bytes};
  Status st = off_->submit(*inst, {&w, 1});
  EXPECT_EQ(st.code(), Code::kOutOfRange);
  EXPECT_NE(st.message().find("write of 64 B at offset 250 is outside the 256 B"), std::string::npos) << st.to_string();
  ASSERT_TRUE(off_->submit(*inst).ok());
  EXPECT_TRUE(off_->wait(*inst, soon()).ok());
}

TEST_F(GraphOffloadTest, InstanceAndMemoryLimitsOfAConnection) {
  stop_agent();
  off_.reset();
  AgentConfig config = testing::test_config();
  config.graph_max_instances = 2;
  config.graph_max_memory = 4096;
  start(config);
  auto g = Graph::create("g");
  (void)g->add_engine("dma", copy_engine()).value();
  ASSERT_TRUE(g->freeze().ok());
  std::vector<Buffers> b{{Ref::agent(0, 8), Ref::agent(8, 8)}};
  auto big = off_->ship(g, 8192, soon());
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("8192 B of agent memory per instance exceeds the connection's 4096 B (agent option --graph-max-memory)"),
            std::string::npos) << big.status().to_string();
  auto remote = off_->ship(g, 2048, soon()).value();
  auto a = off_->instantiate(remote, b, soon());
  auto c = off_->instantiate(remote, b, soon());
  ASSERT_TRUE(a.ok() && c.ok());
  auto third = off_->instantiate(remote, b, soon());
  EXPECT_EQ(third.status().code(), Code::kTooBig);
  EXPECT_NE(third.status().message().find("(agent option --graph-max-instances)"), std::string::npos);
  c.value().reset();  // released: its slot and memory come back
  auto again = off_->instantiate(remote, b, soon());
  for (int i = 0; i < 100 && !again.ok(); ++i) {  // the release is a one-way message: it may still be on its way
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    again = off_->instantiate(remote, b, soon());
  }
  EXPECT_TRUE(again.ok()) << again.status().to_string();
}

// Each session is a process of its own: a tenant's quota holds across them.
TEST_F(GraphOffloadTest, ATenantsConnectionsShareItsInstanceQuotaAndHoldBackNoOtherTenant) {
  if (isolation_ != Isolation::kProcess) GTEST_SKIP() << "tenants' quotas hold across session processes";
  stop_agent();
  off_.reset();
  namespace fs = std::filesystem;
  const fs::path keys = fs::temp_directory_path() / ("outboard_graph_tenants_" + std::to_string(::getpid()));
  fs::remove_all(keys);
  ASSERT_TRUE(init_keys(keys.string(), "agent").ok());
  for (const char* t : {"tenant1", "tenant2"}) ASSERT_TRUE(issue_keys(keys.string(), t, false).ok());
  auto as = [&](const std::string& who) {
    ChannelConfig c;
    c.secure = {.mode = SecureConfig::Mode::kAlways, .cert = (keys / (who + ".pem")).string(),
                .key = (keys / (who + ".key")).string(), .ca = (keys / "ca.pem").string()};
    return c;
  };
  AgentConfig config = testing::test_config();
  config.channel.secure = as("agent").secure;
  config.max_client_graph_instances = 2;
  start_agent(config);
  auto connect = [&](const char* who) {
    ChannelConfig c = as(who);
    c.session = "new";
    return Offload::connect(agent_->address(), soon(), c).value();
  };
  auto first = connect("tenant1"), second = connect("tenant1"), other = connect("tenant2");
  fs::remove_all(keys);
  auto g = Graph::create("g");
  (void)g->add_engine("dma", copy_engine()).value();
  ASSERT_TRUE(g->freeze().ok());
  std::vector<Buffers> b{{Ref::agent(0, 8), Ref::agent(8, 8)}};
  auto on = [&](Offload& off) { return off.instantiate(off.ship(g, 16, soon()).value(), b, soon()); };

  auto a = on(*first);
  auto c = on(*second);  // another session of the tenant's: the quota is the tenant's
  ASSERT_TRUE(a.ok() && c.ok());
  auto third = on(*second);
  EXPECT_EQ(third.status().code(), Code::kAgain);
  EXPECT_NE(third.status().message().find("this client's connections hold 2 graph instances of its quota of 2 "
                                          "(agent option --max-client-graph-instances)"),
            std::string::npos)
      << third.status().to_string();
  auto others = on(*other);
  EXPECT_TRUE(others.ok()) << others.status().to_string();
  auto ran = std::move(others).value();
  ASSERT_TRUE(other->submit(*ran).ok());
  EXPECT_TRUE(other->wait(*ran, soon()).ok());

  // Its quota comes back (soon: both are one-way) when an instance is released, and when a
  // connection that holds one closes.
  auto soon_on = [&](Offload& off) {
    auto inst = on(off);
    for (int i = 0; i < 200 && !inst.ok(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      inst = on(off);
    }
    return inst;
  };
  a.value().reset();
  auto again = soon_on(*second);
  EXPECT_TRUE(again.ok()) << again.status().to_string();
  c.value().reset();
  a = soon_on(*first);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(on(*second).status().code(), Code::kAgain);
  first->connection().close();
  c = soon_on(*second);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  a.value().reset();  // before its Offload
}

TEST_P(GraphOffloadThreads, AClientLeavingMidRunOrSendingGarbageHarmsNoOtherClient) {
  host_memory(1);
  auto g = Graph::create("g");
  NodeId copy = g->add_engine("copy", copy_engine()).value();
  NodeId host = g->add_host("host", [](void*) { return Status(); }).value();
  ASSERT_TRUE(g->add_dependency(copy, host).ok());
  ASSERT_TRUE(g->freeze().ok());
  std::vector<Buffers> b(2);
  b[copy] = {Ref::agent(0, 64), Ref::agent(64, 64)};

  {  // A leaves while its host node waits for it, and while another instance of it was dropped mid-run.
    auto leaver = Offload::connect(agent_->address(), soon()).value();
    auto remote = leaver->ship(g, 128, soon()).value();
    auto waiting = leaver->instantiate(remote, b, soon()).value();
    auto dropped = leaver->instantiate(remote, b, soon()).value();
    ASSERT_TRUE(leaver->submit(*waiting).ok());
    ASSERT_TRUE(leaver->submit(*dropped).ok());
    leaver->progress();
    dropped.reset();
  }
  {  // B sends malformed requests.
    auto raw = connect();
    const std::vector<std::vector<uint8_t>> garbage = {{}, {'Z'}, {'G', 1, 2}, {'S', 5, 0, 0, 0, 1}, {'I', 0, 0, 0, 0}};
    for (const auto& bytes : garbage) {
      auto answer = raw->request("graph", bytes, soon());
      EXPECT_FALSE(answer.ok());
      EXPECT_TRUE(answer.status().code() == Code::kInvalidArgument || answer.status().code() == Code::kNotFound)
          << answer.status().to_string();
    }
  }
  // C is served as before.
  auto remote = off_->ship(g, 128, soon()).value();
  auto inst = off_->instantiate(remote, b, soon()).value();
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(off_->submit(*inst).ok());
    Status st = off_->wait(*inst, soon());
    ASSERT_TRUE(st.ok()) << st.to_string();
  }
}

TEST_F(GraphOffloadTest, AnAgentThatGoesAwayFailsTheRunsInFlight) {
  // The host node stops the agent, so the run is surely mid-way on the agent
  // (it waits for the host result before `after`) when the agent goes.
  auto g = Graph::create("g");
  NodeId before = g->add_engine("before", copy_engine()).value();
  NodeId host = g->add_host("host", [this](void*) {
                   stop_agent();
                   return Status();
                 }).value();
  NodeId after = g->add_engine("after", copy_engine()).value();
  ASSERT_TRUE(g->add_dependency(before, host).ok());
  ASSERT_TRUE(g->add_dependency(host, after).ok());
  ASSERT_TRUE(g->freeze().ok());
  auto remote = off_->ship(g, 128, soon()).value();
  std::vector<Buffers> b(3);
  b[before] = {Ref::agent(0, 64), Ref::agent(64, 64)};
  b[after] = {Ref::agent(64, 64), Ref::agent(0, 64)};
  auto inst = off_->instantiate(remote, b, soon()).value();
  ASSERT_TRUE(off_->submit(*inst).ok());
  Status st = off_->wait(*inst, soon());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.code(), Code::kTimedOut) << st.to_string();
  EXPECT_EQ(off_->in_flight(), 0u);
}

INSTANTIATE_TEST_SUITE_P(GraphThreads, GraphOffloadThreads, ::testing::Values(0u, 2u));

}  // namespace
}  // namespace outboard::graph
