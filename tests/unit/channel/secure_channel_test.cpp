// The secure channel end to end: a real agent with keys, clients that come
// through TLS and seal every frame, and the ones it must refuse.
#include <unistd.h>

#include <filesystem>

#include "../agent_fixture.h"
#include "channel/access.h"
#include "channel/connection_impl.h"
#include "outboard/checksum.h"
#include "../transport/test_certificates.h"

namespace outboard {
namespace {

namespace fs = std::filesystem;
using channel::detail::Access;

Deadline soon() { return Deadline::after_ms(10000); }

class SecureChannelTest : public testing::AgentFixture {
 protected:
  static void SetUpTestSuite() {
    keys_ = fs::temp_directory_path() / ("outboard_channel_keys_" + std::to_string(::getpid()));
    fs::remove_all(keys_);
    fs::create_directories(keys_);
    ASSERT_TRUE(init_keys((keys_ / "a").string(), "agent a").ok());
    ASSERT_TRUE(init_keys((keys_ / "b").string(), "agent b").ok());
  }
  static void TearDownTestSuite() { fs::remove_all(keys_); }
  static SecureConfig keys(const char* deployment, const char* who) {
    const std::string d = (keys_ / deployment).string();
    return {.mode = SecureConfig::Mode::kAlways, .cert = d + "/" + who + ".pem", .key = d + "/" + who + ".key",
            .ca = d + "/ca.pem"};
  }
  void SetUp() override {
    AgentConfig config = testing::test_config();
    config.channel.secure = keys("a", "agent");
    start_agent(config);
  }
  Result<std::unique_ptr<Connection>> connect_with(SecureConfig secure) {
    ChannelConfig c;
    c.secure = std::move(secure);
    c.connect_timeout_ms = 5000;
    return Connection::connect(agent_->address(), c);
  }
  static inline fs::path keys_;
};

TEST_F(SecureChannelTest, EchoesEverySizeThroughSealedFrames) {
  auto c = connect_with(keys("a", "client"));
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_TRUE(Access::impl(**c).seal);
  for (size_t size : {0ul, 1ul, 100ul, 8192ul, 65536ul, 1ul << 20, 4ul << 20}) {
    std::vector<uint8_t> msg(size);
    fill_pattern(msg, size + 1);
    auto r = (*c)->request("echo", msg, soon());
    ASSERT_TRUE(r.ok()) << size << ": " << r.status().to_string();
    EXPECT_EQ(checksum(r.value().span()), checksum(msg)) << size;
  }
}

TEST_F(SecureChannelTest, BothSidesMoveToNewKeysAfterTheirRekeyBytes) {
  stop_agent();
  AgentConfig config = testing::test_config();
  config.channel.secure = keys("a", "agent");
  config.channel.secure.rekey_bytes = 10000;
  start_agent(config);
  SecureConfig client = keys("a", "client");
  client.rekey_bytes = 3000;
  auto c = connect_with(client);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  // Eager and rendezvous frames in flight together, so some arrive out of order.
  std::vector<std::vector<uint8_t>> sent;
  std::vector<Status> answers;
  std::vector<uint64_t> sums;
  int done = 0;
  for (size_t i = 0; i < 60; ++i) {
    sent.emplace_back(i % 7 == 0 ? 300000 : 100 + 97 * i);
    fill_pattern(sent.back(), i);
  }
  answers.resize(sent.size(), Status(Code::kNotConnected, "no answer"));
  sums.resize(sent.size());
  for (size_t i = 0; i < sent.size(); ++i)
    ASSERT_TRUE((*c)->submit("echo", Buffer::copy_of(sent[i]), soon(), [&, i](Result<Buffer> r) {
                     answers[i] = r.status();
                     if (r.ok()) sums[i] = checksum(r->span());
                     ++done;
                   }).ok());
  ASSERT_TRUE((*c)->wait_until(soon(), [&] { return done == static_cast<int>(sent.size()); }));
  for (size_t i = 0; i < sent.size(); ++i) {
    ASSERT_TRUE(answers[i].ok()) << i << ": " << answers[i].to_string();
    EXPECT_EQ(sums[i], checksum(sent[i])) << i;
  }
  const secure::FrameSeal& seal = *Access::impl(**c).seal;
  // A key per 3000 B sent and per 10000 B echoed, at most one per frame: 42 and 19 here.
  EXPECT_GT(seal.out.epoch(), 20u);
  EXPECT_GT(seal.in.epoch(), 10u);
}

TEST_F(SecureChannelTest, AFrameSealedWithOtherKeysOrNotAtAllEndsItsConnectionOnly) {
  auto honest = connect_with(keys("a", "client"));
  ASSERT_TRUE(honest.ok()) << honest.status().to_string();
  for (const bool sealed : {true, false}) {
    auto forger = connect_with(keys("a", "client"));
    ASSERT_TRUE(forger.ok()) << forger.status().to_string();
    {
      channel::Lock lock(Access::impl(**forger).hub->mutex());
      secure::Keys other;
      other.client_to_agent.fill(7);
      if (sealed) Access::impl(**forger).seal = std::make_unique<secure::FrameSeal>(other, secure::Role::kClient, 1 << 30);
      else Access::impl(**forger).seal.reset();  // a plaintext frame on a secure connection
    }
    auto r = (*forger)->request("echo", bytes("forged"), soon());
    EXPECT_FALSE(r.ok()) << sealed;
    EXPECT_TRUE((*forger)->wait_until(soon(), [&] { return !(*forger)->is_open(); })) << sealed;
    auto ok = (*honest)->request("echo", bytes("still served"), soon());
    ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  }
}

TEST_F(SecureChannelTest, ClientsWithoutTheDeploymentsKeysAreRefused) {
  auto plain = Connection::connect(agent_->address(), ChannelConfig{});
  EXPECT_EQ(plain.status().code(), Code::kAuthentication);
  EXPECT_NE(plain.status().message().find("through TLS only"), std::string::npos) << plain.status().to_string();
  auto stranger = connect_with(keys("b", "client"));
  EXPECT_EQ(stranger.status().code(), Code::kAuthentication);
  auto fooled = connect_with(SecureConfig{keys("b", "client").mode, keys("b", "client").cert,
                                          keys("b", "client").key, keys("a", "agent").ca});
  EXPECT_EQ(fooled.status().code(), Code::kAuthentication) << fooled.status().to_string();
  EXPECT_NE(fooled.status().message().find("alert unknown ca"), std::string::npos) << fooled.status().to_string();
  auto served = connect_with(keys("a", "client"));
  EXPECT_TRUE(served.ok()) << served.status().to_string();
}

TEST_F(SecureChannelTest, AnExpiredClientCertificateIsRefusedAndOthersServedMeanwhile) {
  const std::string a = (keys_ / "a").string();
  ASSERT_TRUE(testing::issue_certificate(a, a + "/expired", "expired client", "clientAuth", -2 * 86400, -86400));
  auto served = connect_with(keys("a", "client"));
  ASSERT_TRUE(served.ok()) << served.status().to_string();
  auto expired = connect_with(keys("a", "expired"));
  EXPECT_EQ(expired.status().code(), Code::kAuthentication);
  EXPECT_NE(expired.status().message().find("certificate expired"), std::string::npos) << expired.status().to_string();
  auto answer = (*served)->request("echo", bytes("still here"), soon());
  EXPECT_TRUE(answer.ok()) << answer.status().to_string();
}

TEST_F(SecureChannelTest, ALaterConnectResumesItsTlsSession) {
  auto first = connect_with(keys("a", "client"));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ((*first)->security(), "TLS 1.3 over X25519, agent /O=outboard/CN=agent a");
  auto again = connect_with(keys("a", "client"));
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ((*again)->security(), "TLS 1.3 over X25519, agent /O=outboard/CN=agent a, resumed");
  auto r = (*again)->request("echo", bytes("resumed"), soon());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(std::string(r->span().begin(), r->span().end()), "resumed");
  SecureConfig full = keys("a", "client");
  full.session_lifetime_s = 0;
  auto never = connect_with(full);
  ASSERT_TRUE(never.ok()) << never.status().to_string();
  EXPECT_EQ((*never)->security().find("resumed"), std::string::npos) << (*never)->security();
}

TEST_F(SecureChannelTest, OneSidedAccessIsRefusedRatherThanSentInClear) {
  auto c = connect_with(keys("a", "client"));
  ASSERT_TRUE(c.ok());
  std::vector<uint8_t> memory(4096);
  auto region = (*c)->register_memory(memory.data(), memory.size());
  ASSERT_TRUE(region.ok()) << region.status().to_string();
  auto imported = (*c)->import_region(region->descriptor());
  EXPECT_EQ(imported.status().code(), Code::kUnsupported);
  EXPECT_NE(imported.status().message().find("would bypass its encryption"), std::string::npos);
}

}  // namespace
}  // namespace outboard
