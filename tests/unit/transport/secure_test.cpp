// The secure channel's parts on their own: keys made by init_keys, TLS 1.3
// handshakes between a client and an agent Tls in this process (bytes moved
// by hand, as the socket would), and the frame seal.
#include "transport/secure.h"
#include "test_certificates.h"

#include <gtest/gtest.h>
#include <openssl/ssl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace outboard::secure {
namespace {

namespace fs = std::filesystem;

// Two deployments' keys, made once per test process.
class SecureTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("outboard_keys_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    ASSERT_TRUE(init_keys(dir("a"), "agent a").ok());
    ASSERT_TRUE(init_keys(dir("b"), "agent b").ok());
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }
  static std::string dir(const std::string& name) { return (root_ / name).string(); }
  static SecureConfig certs(const std::string& d, const std::string& who, const std::string& ca_of = "") {
    SecureConfig c;
    c.cert = dir(d) + "/" + who + ".pem";
    c.key = dir(d) + "/" + who + ".key";
    c.ca = dir(ca_of.empty() ? d : ca_of) + "/ca.pem";
    c.agent_host = "localhost";  // clients check the agent's certificate lists it (init_keys' default does)
    return c;
  }
  static SecureConfig psk(const std::string& file) {
    SecureConfig c;
    c.psk_file = file;
    return c;
  }

  struct Outcome {
    Status client, agent;
    Keys client_keys, agent_keys;
    std::string client_sees, agent_sees, group;
    std::string agent_got;  // the client's certificate (DER), as the agent saw it
    bool client_resumed = false, agent_resumed = false;
  };
  // Runs one handshake, moving each side's output to the other, then lets
  // the client read what the agent said after it (an alert, if it refused).
  // `client_suites`: the TLS 1.3 suites the client offers, if not OpenSSL's.
  static Outcome handshake(const SecureConfig& client, const SecureConfig& agent,
                           const char* client_suites = nullptr) {
    auto cc = Context::create(client, Role::kClient);
    auto ac = Context::create(agent, Role::kAgent);
    EXPECT_TRUE(cc.ok() && ac.ok()) << cc.status().to_string() << " / " << ac.status().to_string();
    if (!cc.ok() || !ac.ok()) return {};
    if (client_suites) {
      EXPECT_EQ(SSL_CTX_set_ciphersuites((*cc)->get(), client_suites), 1);
    }
    return handshake(*cc, *ac);
  }
  // `peer`: the client's name for the agent, under which it keeps a session to resume.
  static Outcome handshake(std::shared_ptr<Context> cc, std::shared_ptr<Context> ac, std::string peer = {}) {
    Outcome o;
    auto c = std::move(Tls::create(cc, peer)).value();
    auto a = std::move(Tls::create(ac)).value();
    bool c_done = false, a_done = false;
    for (int round = 0; round < 8; ++round) {
      if (o.client.ok() && !c_done) {
        auto r = c->handshake();
        if (r.ok()) c_done = *r;
        else o.client = r.status();
      } else if (o.client.ok()) {
        auto r = c->read();
        if (!r.ok()) o.client = r.status();
      }
      if (auto out = c->take_output(); !out.empty()) {
        EXPECT_TRUE(a->feed(out).ok());
      }
      if (o.agent.ok() && !a_done) {
        auto r = a->handshake();
        if (r.ok()) a_done = *r;
        else o.agent = r.status();
      }
      if (auto out = a->take_output(); !out.empty()) {
        EXPECT_TRUE(c->feed(out).ok());
      }
    }
    if (c_done && o.client.ok()) {
      o.client_keys = c->keys().value();
      o.client_sees = c->peer_identity();
      o.group = c->key_exchange();
      o.client_resumed = c->resumed();
    }
    if (a_done && o.agent.ok())
      o.agent_keys = a->keys().value(), o.agent_sees = a->peer_identity(), o.agent_resumed = a->resumed(),
      o.agent_got = a->peer_certificate();
    return o;
  }
  static bool same(const Keys& x, const Keys& y) {
    return x.client_to_agent == y.client_to_agent && x.agent_to_client == y.agent_to_client &&
           x.client_to_agent != y.agent_to_client && x.aead == y.aead;
  }
  static bool has(const Status& st, const std::string& text) { return st.message().find(text) != std::string::npos; }

  static inline fs::path root_;
};

TEST_F(SecureTest, KeysInitWritesKeysForTheirOwnerOnlyAndNeverOverwrites) {
  for (const char* f : {"ca.key", "agent.key", "client.key", "psk.txt"}) {
    struct stat st {};
    ASSERT_EQ(::stat((dir("a") + "/" + f).c_str(), &st), 0) << f;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << f;
  }
  Status again = init_keys(dir("a"), "agent a");
  EXPECT_EQ(again.code(), Code::kBadConfig);
  EXPECT_TRUE(has(again, "exists: keys are never overwritten")) << again.to_string();
}

TEST_F(SecureTest, CertificatesGiveBothSidesTheSameKeysOverAnEphemeralExchange) {
  Outcome o = handshake(certs("a", "client"), certs("a", "agent"));
  ASSERT_TRUE(o.client.ok()) << o.client.to_string();
  ASSERT_TRUE(o.agent.ok()) << o.agent.to_string();
  EXPECT_TRUE(same(o.client_keys, o.agent_keys));
  EXPECT_EQ(o.client_sees, "/O=outboard/CN=agent a");
  EXPECT_EQ(o.agent_sees, "/O=outboard/CN=outboard client");
  EXPECT_EQ(o.group, "X25519");  // (EC)DHE: the keys die with the connection (forward secrecy)
  EXPECT_EQ(o.client_keys.aead, Aead::kAes256Gcm);
  Outcome again = handshake(certs("a", "client"), certs("a", "agent"));
  EXPECT_NE(again.client_keys.client_to_agent, o.client_keys.client_to_agent);
}

TEST_F(SecureTest, ALaterHandshakeResumesWithoutCertificatesOverANewExchange) {
  auto cc = Context::create(certs("a", "client"), Role::kClient).value();
  auto ac = Context::create(certs("a", "agent"), Role::kAgent).value();
  Outcome first = handshake(cc, ac, "agent a");
  ASSERT_TRUE(first.client.ok() && first.agent.ok()) << first.client.to_string() << " / " << first.agent.to_string();
  EXPECT_FALSE(first.client_resumed || first.agent_resumed);
  Outcome again = handshake(cc, ac, "agent a");
  ASSERT_TRUE(again.client.ok() && again.agent.ok()) << again.client.to_string() << " / " << again.agent.to_string();
  EXPECT_TRUE(again.client_resumed && again.agent_resumed);
  EXPECT_TRUE(same(again.client_keys, again.agent_keys));
  EXPECT_NE(again.client_keys.client_to_agent, first.client_keys.client_to_agent);
  EXPECT_EQ(again.group, "X25519");  // psk_dhe_ke: still forward secret
  EXPECT_EQ(again.agent_sees, "/O=outboard/CN=outboard client");  // who it was, from the session
  EXPECT_EQ(again.client_sees, "/O=outboard/CN=agent a");
  // Sessions are kept per agent; an agent that did not make one (restarted) gets a full handshake.
  EXPECT_FALSE(handshake(cc, ac, "another agent").client_resumed);
  auto restarted = Context::create(certs("a", "agent"), Role::kAgent).value();
  Outcome fresh = handshake(cc, restarted, "agent a");
  EXPECT_TRUE(fresh.client.ok() && fresh.agent.ok()) << fresh.client.to_string() << " / " << fresh.agent.to_string();
  EXPECT_FALSE(fresh.client_resumed || fresh.agent_resumed);
  // A lifetime of 0: every handshake a full one.
  SecureConfig never = certs("a", "client");
  never.session_lifetime_s = 0;
  auto nc = Context::create(never, Role::kClient).value();
  handshake(nc, ac, "agent a");
  EXPECT_FALSE(handshake(nc, ac, "agent a").client_resumed);
}

TEST_F(SecureTest, AnAgentOfAnotherCaIsRefusedOnBothSides) {
  Outcome o = handshake(certs("a", "client"), certs("b", "agent"));
  EXPECT_EQ(o.client.code(), Code::kAuthentication);
  EXPECT_TRUE(has(o.client, "certificate verify failed")) << o.client.to_string();
  EXPECT_EQ(o.agent.code(), Code::kAuthentication);
  EXPECT_TRUE(has(o.agent, "alert unknown ca")) << o.agent.to_string();
}

TEST_F(SecureTest, AClientOfAnotherCaIsRefusedOnBothSides) {
  Outcome o = handshake(certs("b", "client", "a"), certs("a", "agent"));
  EXPECT_EQ(o.agent.code(), Code::kAuthentication);
  EXPECT_TRUE(has(o.agent, "certificate verify failed")) << o.agent.to_string();
  EXPECT_EQ(o.client.code(), Code::kAuthentication);
  EXPECT_TRUE(has(o.client, "alert unknown ca")) << o.client.to_string();
}

TEST_F(SecureTest, CertificatesOutsideTheirValidityAreRefusedOnBothSides) {
  constexpr long kDay = 86400;
  ASSERT_TRUE(testing::issue_certificate(dir("a"), dir("a") + "/expired_client", "expired client", "clientAuth",
                                         -2 * kDay, -kDay));
  ASSERT_TRUE(testing::issue_certificate(dir("a"), dir("a") + "/future_client", "future client", "clientAuth", kDay,
                                         2 * kDay));
  ASSERT_TRUE(testing::issue_certificate(dir("a"), dir("a") + "/expired_agent", "expired agent",
                                         "serverAuth,clientAuth", -2 * kDay, -kDay));
  Outcome o = handshake(certs("a", "expired_client"), certs("a", "agent"));
  EXPECT_EQ(o.agent.code(), Code::kAuthentication);
  EXPECT_TRUE(has(o.agent, "certificate has expired")) << o.agent.to_string();
  EXPECT_EQ(o.client.code(), Code::kAuthentication);
  EXPECT_TRUE(has(o.client, "alert certificate expired")) << o.client.to_string();
  o = handshake(certs("a", "future_client"), certs("a", "agent"));
  EXPECT_TRUE(has(o.agent, "certificate is not yet valid")) << o.agent.to_string();
  o = handshake(certs("a", "client"), certs("a", "expired_agent"));
  EXPECT_EQ(o.client.code(), Code::kAuthentication);
  EXPECT_TRUE(has(o.client, "certificate has expired")) << o.client.to_string();
  EXPECT_EQ(o.agent.code(), Code::kAuthentication);
}

TEST_F(SecureTest, TheAgentsCertificateMustListTheHostTheClientDialed) {
  // init_keys' default: loopback's names, which these tests dial.
  for (const char* host : {"localhost", "127.0.0.1", "::1"}) {
    SecureConfig c = certs("a", "client");
    c.agent_host = host;
    Outcome o = handshake(c, certs("a", "agent"));
    EXPECT_TRUE(o.client.ok() && o.agent.ok()) << host << ": " << o.client.to_string();
  }
  SecureConfig other = certs("a", "client");
  other.agent_host = "10.9.8.7";
  Outcome o = handshake(other, certs("a", "agent"));
  EXPECT_EQ(o.client.code(), Code::kAuthentication);
  EXPECT_TRUE(has(o.client, "lists DNS:localhost, IP:127.0.0.1, IP:::1")) << o.client.to_string();
  EXPECT_TRUE(has(o.client, "not 10.9.8.7: make the agent's certificate with --agent-host 10.9.8.7")) << o.client.to_string();
  EXPECT_TRUE(has(o.client, "IP address mismatch")) << o.client.to_string();
  other.agent_host = "elsewhere.example";
  EXPECT_TRUE(has(handshake(other, certs("a", "agent")).client, "hostname mismatch"));
  // An agent certificate issued for its own names only.
  ASSERT_TRUE(issue_keys(dir("a"), "dpu0", Role::kAgent, {"dpu0.example", "10.1.2.3"}).ok());
  for (const char* host : {"dpu0.example", "10.1.2.3"}) {
    other.agent_host = host;
    EXPECT_TRUE(handshake(other, certs("a", "dpu0")).client.ok()) << host;
  }
  other.agent_host = "localhost";
  EXPECT_TRUE(has(handshake(other, certs("a", "dpu0")).client, "lists DNS:dpu0.example, IP:10.1.2.3, not localhost"));
  // Without agent_host the host comes from the address dialed; with neither, nothing to check against.
  other.agent_host.clear();
  auto cc = std::move(Context::create(other, Role::kClient)).value();
  auto ac = std::move(Context::create(certs("a", "dpu0"), Role::kAgent)).value();
  EXPECT_TRUE(handshake(cc, ac, "10.1.2.3:7000").client.ok());
  EXPECT_TRUE(has(handshake(cc, ac, "10.1.2.4:7000").client, "not 10.1.2.4"));
  EXPECT_EQ(Tls::create(cc).status().code(), Code::kBadConfig);
  Status bad = issue_keys(dir("a"), "dpu1", Role::kAgent, {"a b"});
  EXPECT_EQ(bad.message(), "--agent-host 'a b' is neither an IP address nor a DNS name");
}

TEST_F(SecureTest, ARevokedCertificateIsRefusedOnBothSidesAndOthersAreNot) {
  ASSERT_TRUE(issue_keys(dir("b"), "tenant1", Role::kClient).ok());
  ASSERT_TRUE(issue_keys(dir("b"), "tenant2", Role::kClient).ok());
  EXPECT_TRUE(has(issue_keys(dir("b"), "tenant1", Role::kClient), "tenant1.pem exists"));
  EXPECT_TRUE(has(issue_keys(dir("b"), "../x", Role::kClient), "certificate name '../x'"));
  SecureConfig agent = certs("b", "agent");
  agent.crl = dir("b") + "/crl.pem";  // init_keys' empty one
  auto before = std::move(Context::create(agent, Role::kAgent)).value();
  const std::string tenant1 = handshake(certs("b", "tenant1"), agent).agent_got;
  ASSERT_FALSE(tenant1.empty());
  EXPECT_TRUE(before->accepts_client(tenant1));
  EXPECT_FALSE(before->changed_on_disk());

  ASSERT_TRUE(revoke(dir("b"), dir("b") + "/tenant1.pem").ok());
  ASSERT_TRUE(revoke(dir("b"), dir("b") + "/tenant1.pem").ok());  // again: no change
  EXPECT_TRUE(before->changed_on_disk());
  // What the listener asks of the clients it already serves, with the new CRL.
  auto after = std::move(Context::create(agent, Role::kAgent)).value();
  EXPECT_FALSE(after->accepts_client(tenant1));
  EXPECT_FALSE(after->accepts_client("not DER"));
  EXPECT_TRUE(after->accepts_client(handshake(certs("b", "tenant2"), agent).agent_got));
  Outcome o = handshake(certs("b", "tenant1"), agent);
  EXPECT_EQ(o.agent.code(), Code::kAuthentication);
  EXPECT_TRUE(has(o.agent, "the peer's certificate /O=outboard/CN=tenant1 (serial ")) << o.agent.to_string();
  EXPECT_TRUE(has(o.agent, "is revoked by --crl " + agent.crl + " (certificate verify failed: certificate revoked)"))
      << o.agent.to_string();
  EXPECT_TRUE(has(o.client, "alert certificate revoked")) << o.client.to_string();
  Outcome other = handshake(certs("b", "tenant2"), agent);
  EXPECT_TRUE(other.client.ok() && other.agent.ok()) << other.agent.to_string();
  EXPECT_EQ(other.agent_sees, "/O=outboard/CN=tenant2");

  // A client with the CRL refuses a revoked agent just the same.
  ASSERT_TRUE(issue_keys(dir("b"), "old-agent", Role::kAgent).ok());
  ASSERT_TRUE(revoke(dir("b"), dir("b") + "/old-agent.pem").ok());
  SecureConfig client = certs("b", "tenant2");
  client.crl = agent.crl;
  EXPECT_TRUE(has(handshake(client, certs("b", "old-agent")).client, "certificate revoked"));
  EXPECT_TRUE(handshake(client, agent).client.ok());
}

TEST_F(SecureTest, ACrlMustComeFromTheCaAndOnlyWithCertificates) {
  SecureConfig agent = certs("a", "agent");
  agent.crl = dir("b") + "/crl.pem";
  EXPECT_EQ(Context::create(agent, Role::kAgent).status().message(),
            "--crl " + agent.crl + ": CRL 0 is not signed by a CA of --ca " + agent.ca);
  agent.crl = dir("a") + "/ca.pem";
  EXPECT_EQ(Context::create(agent, Role::kAgent).status().message(),
            "--crl " + agent.crl + ": holds no CRL (PEM \"X509 CRL\")");
  SecureConfig with_psk = psk(dir("a") + "/psk.txt");
  with_psk.crl = dir("a") + "/crl.pem";
  EXPECT_TRUE(has(Context::create(with_psk, Role::kAgent).status(), "--crl revokes certificates"));
  Status foreign = revoke(dir("a"), dir("b") + "/client.pem");
  EXPECT_EQ(foreign.message(), dir("b") + "/client.pem: not issued by the CA of " + dir("a") + "/ca.pem");
}

TEST_F(SecureTest, AClientCertificateCannotServeAsAnAgents) {
  Outcome o = handshake(certs("a", "client"), certs("a", "client"));
  EXPECT_EQ(o.client.code(), Code::kAuthentication);
  EXPECT_TRUE(has(o.client, "unsuitable certificate purpose")) << o.client.to_string();
}

TEST_F(SecureTest, AClientWithoutACertificateIsRefused) {
  Outcome o = handshake(psk(dir("a") + "/psk.txt"), certs("a", "agent"));
  EXPECT_EQ(o.agent.code(), Code::kAuthentication) << o.agent.to_string();
  EXPECT_EQ(o.client.code(), Code::kAuthentication) << o.client.to_string();
}

TEST_F(SecureTest, APskGivesBothSidesTheSameKeysOverAnEphemeralExchange) {
  Outcome o = handshake(psk(dir("a") + "/psk.txt"), psk(dir("a") + "/psk.txt"));
  ASSERT_TRUE(o.client.ok()) << o.client.to_string();
  ASSERT_TRUE(o.agent.ok()) << o.agent.to_string();
  EXPECT_TRUE(same(o.client_keys, o.agent_keys));
  EXPECT_EQ(o.agent_sees, "psk:outboard");
  EXPECT_EQ(o.group, "X25519");  // psk_dhe_ke, never plain psk_ke
  EXPECT_EQ(o.client_keys.aead, Aead::kAes256Gcm);
  EXPECT_FALSE(o.client_resumed || o.agent_resumed);  // OpenSSL's "reused" PSK is no resumed session
}

TEST_F(SecureTest, FramesFollowTheSuiteTheClientChose) {
  // A client without AES instructions offers ChaCha20-Poly1305 only.
  for (const auto& [client, agent] : {std::pair{certs("a", "client"), certs("a", "agent")},
                                      std::pair{psk(dir("a") + "/psk.txt"), psk(dir("a") + "/psk.txt")}}) {
    Outcome o = handshake(client, agent, "TLS_CHACHA20_POLY1305_SHA256");
    ASSERT_TRUE(o.client.ok() && o.agent.ok()) << o.client.to_string() << " / " << o.agent.to_string();
    EXPECT_TRUE(same(o.client_keys, o.agent_keys));
    EXPECT_EQ(o.client_keys.aead, Aead::kChaCha20Poly1305);
  }
}

TEST_F(SecureTest, APskClientRefusesAnAgentThatShowsACertificateInstead) {
  // An impostor with a certificate of its own CA that asks nothing of its clients.
  auto impostor = std::move(Context::create(certs("b", "agent"), Role::kAgent)).value();
  SSL_CTX_set_verify(impostor->get(), SSL_VERIFY_NONE, nullptr);
  auto client = std::move(Context::create(psk(dir("a") + "/psk.txt"), Role::kClient)).value();
  auto c = std::move(Tls::create(client)).value();
  auto a = std::move(Tls::create(impostor)).value();
  Status failed;
  for (int round = 0; round < 6 && failed.ok(); ++round) {
    auto r = c->handshake();
    if (!r.ok()) failed = r.status();
    if (auto out = c->take_output(); !out.empty()) {
      ASSERT_TRUE(a->feed(out).ok());
    }
    (void)a->handshake();
    if (auto out = a->take_output(); !out.empty()) {
      ASSERT_TRUE(c->feed(out).ok());
    }
  }
  EXPECT_EQ(failed.code(), Code::kAuthentication);
  EXPECT_TRUE(has(failed, "certificate verify failed")) << failed.to_string();
}

TEST_F(SecureTest, AnotherPskIsRefusedAndAnUnknownIdentityNamed) {
  Outcome o = handshake(psk(dir("b") + "/psk.txt"), psk(dir("a") + "/psk.txt"));
  EXPECT_EQ(o.client.code(), Code::kAuthentication) << o.client.to_string();
  EXPECT_EQ(o.agent.code(), Code::kAuthentication) << o.agent.to_string();
  const std::string stranger = dir("stranger.psk");
  std::ofstream(stranger) << "mallory:" << std::string(64, 'a') << "\n";
  fs::permissions(stranger, fs::perms::owner_read | fs::perms::owner_write);
  Outcome u = handshake(psk(stranger), psk(dir("a") + "/psk.txt"));
  EXPECT_TRUE(has(u.agent, "unknown PSK identity \"mallory\"")) << u.agent.to_string();
}

TEST_F(SecureTest, BadKeyFilesAreNamed) {
  const std::string open_key = dir("open.key");
  fs::copy_file(dir("a") + "/agent.key", open_key, fs::copy_options::overwrite_existing);
  fs::permissions(open_key,
                  fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);
  SecureConfig c = certs("a", "agent");
  c.key = open_key;
  auto r = Context::create(c, Role::kAgent);
  EXPECT_EQ(r.status().code(), Code::kBadConfig);
  EXPECT_EQ(r.status().message(), "--key " + open_key + ": mode 644 lets others than its owner read it (chmod 600)");
  c = certs("a", "agent");
  c.key = dir("b") + "/agent.key";
  r = Context::create(c, Role::kAgent);
  EXPECT_TRUE(has(r.status(), "key values mismatch (with --cert ")) << r.status().to_string();
  c = certs("a", "agent");
  c.ca.clear();
  EXPECT_EQ(Context::create(c, Role::kAgent).status().message(), "--cert, --key and --ca go together; missing: --ca");
  c = certs("a", "agent");
  c.psk_file = dir("a") + "/psk.txt";
  EXPECT_TRUE(has(Context::create(c, Role::kAgent).status(), "--psk-file excludes"));
  const std::string short_psk = dir("short.psk");
  std::ofstream(short_psk) << "outboard:abcd\n";
  fs::permissions(short_psk, fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(Context::create(psk(short_psk), Role::kAgent).status().message(),
            "--psk-file " + short_psk + ": the key is 4 characters, expected 64 hex digits");
}

TEST_F(SecureTest, AHandshakeIsBoundedAndGarbageFailsIt) {
  auto ac = std::move(Context::create(certs("a", "agent"), Role::kAgent)).value();
  auto a = std::move(Tls::create(ac)).value();
  std::vector<uint8_t> junk(kMaxHandshakeBytes + 1, 0x16);
  EXPECT_EQ(a->feed(junk).code(), Code::kTooBig);
  auto b = std::move(Tls::create(ac)).value();
  std::vector<uint8_t> garbage(300, 0x41);
  garbage[0] = kTlsHandshakeRecord;
  ASSERT_TRUE(b->feed(garbage).ok());
  EXPECT_EQ(b->handshake().status().code(), Code::kAuthentication);
}

class SealerTest : public ::testing::TestWithParam<Aead> {};

TEST_P(SealerTest, OpensOnlyWhatWasSealedSoUnderItsNumberStreamHeaderAndKey) {
  std::array<uint8_t, 32> key{}, other{};
  key[0] = 1, other[0] = 2;
  Sealer sealer(key, GetParam());
  const std::vector<uint8_t> plain = {'f', 'r', 'a', 'm', 'e'};
  const std::vector<uint8_t> ad = {9, 9, 9};
  std::vector<uint8_t> sealed(plain.size() + kTagBytes);
  sealer.seal(Sealer::Stream::kFrames, 7, ad, plain, sealed.data());
  EXPECT_NE(std::vector<uint8_t>(sealed.begin(), sealed.begin() + 5), plain);  // no plaintext on the wire
  Sealer other_sealer(other, GetParam());
  auto open = [&](Sealer& s, Sealer::Stream stream, uint64_t n, std::vector<uint8_t> header, std::vector<uint8_t> m) {
    return s.open(stream, n, header, m);
  };
  std::vector<uint8_t> copy = sealed;
  ASSERT_TRUE(sealer.open(Sealer::Stream::kFrames, 7, ad, copy).ok());
  EXPECT_EQ(std::vector<uint8_t>(copy.begin(), copy.begin() + 5), plain);
  // Frames: the tag apart from the bytes, which are opened out of place.
  std::vector<uint8_t> out(plain.size()), tag(kTagBytes), body(plain.size());
  sealer.seal(Sealer::Stream::kFrames, 8, ad, plain, body.data(), tag.data());
  ASSERT_TRUE(sealer.open(Sealer::Stream::kFrames, 8, ad, body, tag.data(), out.data()).ok());
  EXPECT_EQ(out, plain);
  tag[0] ^= 1;
  EXPECT_EQ(sealer.open(Sealer::Stream::kFrames, 8, ad, body, tag.data(), out.data()).code(), Code::kAuthentication);
  Sealer other_aead(key, GetParam() == Aead::kAes256Gcm ? Aead::kChaCha20Poly1305 : Aead::kAes256Gcm);
  EXPECT_EQ(open(other_aead, Sealer::Stream::kFrames, 7, ad, sealed).code(), Code::kAuthentication);
  auto flipped = sealed;
  flipped[2] ^= 1;
  EXPECT_EQ(open(sealer, Sealer::Stream::kFrames, 7, ad, flipped).code(), Code::kAuthentication);
  EXPECT_EQ(open(sealer, Sealer::Stream::kFrames, 8, ad, sealed).code(), Code::kAuthentication);  // replayed as 8
  EXPECT_EQ(open(sealer, Sealer::Stream::kSocket, 7, ad, sealed).code(), Code::kAuthentication);
  EXPECT_EQ(open(sealer, Sealer::Stream::kFrames, 7, {9, 9, 8}, sealed).code(), Code::kAuthentication);
  EXPECT_EQ(open(other_sealer, Sealer::Stream::kFrames, 7, ad, sealed).code(), Code::kAuthentication);
  std::vector<uint8_t> cut(sealed.begin(), sealed.end() - 1);
  EXPECT_EQ(open(sealer, Sealer::Stream::kFrames, 7, ad, cut).code(), Code::kAuthentication);
  EXPECT_EQ(open(sealer, Sealer::Stream::kFrames, 7, ad, {1, 2}).message(),
            "sealed message 7 of 2 B is shorter than its 16 B tag");
}

// Peers of other builds (an aarch64 agent: OpenSSL's) must read each other:
// ipsec-mb's AES-256-GCM against OpenSSL's, both ways, over sizes around its
// block and vector widths, the channel's header, and a rekey.
TEST(SealerEnginesTest, IpsecMbAndOpenSslSealTheSameBytesAndOpenEachOthers) {
  const std::string fast = aead_engine(Aead::kAes256Gcm);
  ::setenv("OUTBOARD_AEAD_ENGINE", "openssl", 1);
  const std::string reference = aead_engine(Aead::kAes256Gcm);
  std::array<uint8_t, 32> key{};
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<uint8_t>(i * 7 + 1);
  Sealer openssl(key, Aead::kAes256Gcm);
  ::unsetenv("OUTBOARD_AEAD_ENGINE");
  EXPECT_NE(reference.find("OpenSSL"), std::string::npos) << reference;
  if (fast == reference) GTEST_SKIP() << "AES-256-GCM is " << fast << " in this build: no second engine to compare";
  EXPECT_EQ(fast.rfind("ipsec-mb ", 0), 0u) << fast;
  Sealer ipsec(key, Aead::kAes256Gcm);
  std::vector<uint8_t> plain((1 << 20) + 3), ad(40);
  for (size_t i = 0; i < plain.size(); ++i) plain[i] = static_cast<uint8_t>(i * 131 + (i >> 9));
  for (size_t i = 0; i < ad.size(); ++i) ad[i] = static_cast<uint8_t>(200 - i);
  uint64_t number = 0;
  for (int round = 0; round < 2; ++round) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{63}, size_t{64}, size_t{255},
                     size_t{256}, size_t{257}, size_t{4095}, size_t{65536}, size_t{65536 + 13}, plain.size()}) {
      for (size_t a : {size_t{0}, size_t{24}, ad.size()}) {
        const std::span<const uint8_t> in(plain.data(), n), header(ad.data(), a);
        std::vector<uint8_t> x(n + kTagBytes), y(n + kTagBytes);
        ++number;
        openssl.seal(Sealer::Stream::kFrames, number, header, in, x.data());
        ipsec.seal(Sealer::Stream::kFrames, number, header, in, y.data());
        ASSERT_EQ(x, y) << n << " B with " << a << " B of header, round " << round;
        ASSERT_TRUE(ipsec.open(Sealer::Stream::kFrames, number, header, x).ok()) << n;  // in place
        ASSERT_TRUE(std::equal(in.begin(), in.end(), x.begin())) << n;
        ASSERT_TRUE(openssl.open(Sealer::Stream::kFrames, number, header, y).ok()) << n;
        y[n / 2] ^= 0x20;  // a changed byte (the tag's, for no bytes)
        ASSERT_EQ(ipsec.open(Sealer::Stream::kFrames, number, header, y).code(), Code::kAuthentication) << n;
      }
    }
    openssl.rekey();
    ipsec.rekey();
  }
}

INSTANTIATE_TEST_SUITE_P(Aeads, SealerTest, ::testing::Values(Aead::kAes256Gcm, Aead::kChaCha20Poly1305),
                         [](const auto& info) { return info.param == Aead::kAes256Gcm ? "Aes256Gcm" : "ChaCha20Poly1305"; });

}  // namespace
}  // namespace outboard::secure
