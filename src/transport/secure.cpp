#include "transport/secure.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sodium.h>
#if OUTBOARD_HAVE_IPSEC_MB
#include <intel-ipsec-mb.h>
#endif
#include <arpa/inet.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <utility>

#include "util/net.h"

namespace outboard::secure {
namespace {

// An OpenSSL object, freed with it.
template <class T, void (*Free)(T*)>
struct Owned {
  T* p = nullptr;
  Owned() = default;
  explicit Owned(T* q) : p(q) {}
  Owned(Owned&& o) noexcept : p(std::exchange(o.p, nullptr)) {}
  Owned& operator=(Owned&&) = delete;
  ~Owned() { Free(p); }
};

// A PSK identity longer than this is refused (TLS allows 64 KiB).
constexpr size_t kMaxPskIdentity = 128;
constexpr size_t kPskBytes = 32;
// TLS_AES_128_GCM_SHA256: the cipher a PSK is bound to (its hash must be the handshake's).
constexpr unsigned char kPskCipher[] = {0x13, 0x01};
constexpr int kCertificateDays = 365;
// A CRL names its next update; OpenSSL refuses every certificate after it.
// `keys revoke` writes one that lasts as long as the certificates it covers.
constexpr int kCrlDays = kCertificateDays;
// A name an agent certificate lists (a DNS name is at most 253 characters).
constexpr size_t kMaxHostName = 253;
// A name `keys issue` takes: a file name in the keys directory, and the certificate's CN.
constexpr size_t kMaxCertificateName = 64;

// OpenSSL's error queue as one line, emptied.
std::string openssl_errors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    const char* reason = ERR_reason_error_string(e);
    char buf[256];
    if (!reason) ERR_error_string_n(e, buf, sizeof buf), reason = buf;
    if (!out.empty()) out += "; ";
    out += reason;
  }
  return out.empty() ? "no reason given by OpenSSL" : out;
}

Status bad_key(const char* option, const std::string& file, const std::string& why) {
  return {Code::kBadConfig, std::string(option) + " " + file + ": " + why};
}

// A private key or PSK that others may read is refused, as ssh refuses one.
Status check_private(const char* option, const std::string& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return bad_key(option, file, std::strerror(errno));
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%03o", static_cast<unsigned>(st.st_mode & 0777));
    return bad_key(option, file, std::string("mode ") + mode + " lets others than its owner read it (chmod 600)");
  }
  return {};
}

Status read_psk(const std::string& file, std::string& identity, std::vector<uint8_t>& key) {
  OB_RETURN_IF_ERROR(check_private("--psk-file", file));
  std::ifstream in(file);
  std::string line;
  if (!in || !std::getline(in, line)) return bad_key("--psk-file", file, "cannot be read");
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  const size_t colon = line.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return bad_key("--psk-file", file,
                   "expected one line \"identity:" + std::to_string(2 * kPskBytes) + " hex digits\"");
  identity = line.substr(0, colon);
  if (identity.size() > kMaxPskIdentity)
    return bad_key("--psk-file", file, "identity of " + std::to_string(identity.size()) + " B exceeds its limit of " +
                                           std::to_string(kMaxPskIdentity) + " B");
  const std::string hex = line.substr(colon + 1);
  key.resize(kPskBytes);
  size_t n = 0;
  if (hex.size() != 2 * kPskBytes ||
      sodium_hex2bin(key.data(), key.size(), hex.data(), hex.size(), nullptr, &n, nullptr) != 0 || n != kPskBytes)
    return bad_key("--psk-file", file, "the key is " + std::to_string(hex.size()) + " characters, expected " +
                                           std::to_string(2 * kPskBytes) + " hex digits");
  return {};
}

Context& context_of(SSL* ssl) { return *static_cast<Context*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl))); }

bool is_ip(const std::string& host) {
  uint8_t addr[16];
  return ::inet_pton(AF_INET, host.c_str(), addr) == 1 || ::inet_pton(AF_INET6, host.c_str(), addr) == 1;
}

// Letters, digits, '-' and '.', as a certificate's DNS name (no wildcard of ours).
bool is_dns_name(const std::string& host) {
  return !host.empty() && host.size() <= kMaxHostName && host.front() != '-' && host.front() != '.' &&
         std::all_of(host.begin(), host.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.'; });
}

// "/O=outboard/CN=…": who a certificate names.
std::string subject_of(X509* cert) {
  char name[256];
  X509_NAME_oneline(X509_get_subject_name(cert), name, sizeof name);
  return name;
}

// The certificate's subject and serial, for errors and logs.
std::string describe(X509* cert) {
  std::string out = "certificate " + subject_of(cert);
  if (BIGNUM* serial = ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), nullptr)) {
    if (char* hex = BN_bn2hex(serial)) out += std::string(" (serial ") + hex + ")", OPENSSL_free(hex);
    BN_free(serial);
  }
  return out;
}

// The DNS names and IP addresses a certificate lists, as "DNS:a, IP:b".
std::string names_of(X509* cert) {
  auto* names = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  std::string out;
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    std::string one;
    if (n->type == GEN_DNS) {
      one = "DNS:" + std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(n->d.dNSName)),
                                 static_cast<size_t>(ASN1_STRING_length(n->d.dNSName)));
    } else if (n->type == GEN_IPADD) {
      char text[INET6_ADDRSTRLEN] = "?";
      const int len = ASN1_STRING_length(n->d.iPAddress);
      ::inet_ntop(len == 16 ? AF_INET6 : AF_INET, ASN1_STRING_get0_data(n->d.iPAddress), text, sizeof text);
      one = std::string("IP:") + text;
    }
    if (!one.empty()) out += (out.empty() ? "" : ", ") + one;
  }
  GENERAL_NAMES_free(names);
  return out.empty() ? "no DNS name or IP address" : out;
}

// Every PEM object of `type` in `file`, read with `read`; empty when the
// file does not open or an object in it does not parse (then `why` says so).
template <class T, T* (*Read)(BIO*, T**, pem_password_cb*, void*), void (*Free)(T*)>
std::vector<Owned<T, Free>> read_pems(const std::string& file, std::string& why) {
  std::vector<Owned<T, Free>> out;
  BIO* in = BIO_new_file(file.c_str(), "r");
  if (!in) {
    why = openssl_errors();
    return out;
  }
  ERR_clear_error();
  while (T* item = Read(in, nullptr, nullptr, nullptr)) out.emplace_back(item);
  BIO_free(in);
  // The loop ends at the file's end (no start line), or at an object that does not parse.
  const unsigned long e = ERR_peek_last_error();
  if (e && ERR_GET_REASON(e) != PEM_R_NO_START_LINE) why = openssl_errors();
  ERR_clear_error();
  return out;
}

// Loads --crl into the context's store: every certificate a peer shows is
// then checked against it (a one-level CA, so the peer's own). Each CRL
// must be signed by a CA of --ca, else every handshake would fail later
// with "unable to get certificate CRL".
Status load_crl(SSL_CTX* ctx, const SecureConfig& config) {
  std::string why;
  auto crls = read_pems<X509_CRL, PEM_read_bio_X509_CRL, X509_CRL_free>(config.crl, why);
  auto cas = read_pems<X509, PEM_read_bio_X509, X509_free>(config.ca, why);
  Status st;
  if (!why.empty()) st = bad_key("--crl", config.crl, why);
  else if (crls.empty()) st = bad_key("--crl", config.crl, "holds no CRL (PEM \"X509 CRL\")");
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  for (size_t i = 0; st.ok() && i < crls.size(); ++i) {
    X509_CRL* crl = crls[i].p;
    const bool signed_by_ca = std::any_of(cas.begin(), cas.end(), [&](const auto& ca) {
      return X509_NAME_cmp(X509_CRL_get_issuer(crl), X509_get_subject_name(ca.p)) == 0 &&
             X509_CRL_verify(crl, X509_get0_pubkey(ca.p)) == 1;
    });
    if (!signed_by_ca) st = bad_key("--crl", config.crl, "CRL " + std::to_string(i) + " is not signed by a CA of --ca " +
                                                            config.ca);
    else if (X509_STORE_add_crl(store, crl) != 1) st = bad_key("--crl", config.crl, openssl_errors());
  }
  ERR_clear_error();
  if (st.ok()) X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK);
  return st;
}

// The files a context is made from as they are on disk now.
std::string files_of(const SecureConfig& config) {
  std::string id;
  for (const std::string* file : {&config.cert, &config.key, &config.ca, &config.psk_file, &config.crl}) {
    struct stat st {};
    id += "|" + *file;
    if (!file->empty() && ::stat(file->c_str(), &st) == 0)
      id += ":" + std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ":" +
            std::to_string(st.st_size) + ":" + std::to_string(st.st_mode) + ":" + std::to_string(st.st_ino);
  }
  return id;
}
}  // namespace

// OpenSSL's callbacks that reach into a Tls (its SSL's app data).
struct Callbacks {
  static Tls& tls_of(SSL* ssl) { return *static_cast<Tls*>(SSL_get_app_data(ssl)); }
  // What a callback learnt of a failure, for the error the handshake returns.
  static void note(SSL* ssl, std::string why) { tls_of(ssl).note_ = std::move(why); }
  // Names the certificate that failed verification, and why, for both sides' errors.
  static int verify(int ok, X509_STORE_CTX* store) {
    if (ok) return ok;
    auto* ssl = static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
    X509* cert = X509_STORE_CTX_get_current_cert(store);
    if (!ssl || !cert || !tls_of(ssl).note_.empty()) return ok;
    const int error = X509_STORE_CTX_get_error(store);
    std::string why = "the peer's " + describe(cert);
    if (error == X509_V_ERR_HOSTNAME_MISMATCH || error == X509_V_ERR_IP_ADDRESS_MISMATCH) {
      const std::string& host = tls_of(ssl).host_;
      why += " lists " + names_of(cert) + ", not " + host + ": make the agent's certificate with --agent-host " +
             host + ", or connect with agent_host set to a name it lists";
    } else if (error == X509_V_ERR_CERT_REVOKED) {
      why += " is revoked by --crl " + context_of(ssl).config().crl;
    }
    note(ssl, std::move(why));
    return ok;
  }
  // A client got a session to resume (TLS 1.3: after the handshake).
  static int new_session(SSL* ssl, SSL_SESSION* session) {
    Tls& t = tls_of(ssl);
    if (t.peer_.empty()) return 0;
    context_of(ssl).keep_session(t.peer_, session);
    return 1;  // ours now
  }
};

namespace {

SSL_SESSION* psk_session(SSL* ssl, const Context& c) {
  const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, kPskCipher);
  SSL_SESSION* s = cipher ? SSL_SESSION_new() : nullptr;
  if (s && SSL_SESSION_set1_master_key(s, c.psk().data(), c.psk().size()) && SSL_SESSION_set_cipher(s, cipher) &&
      SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION))
    return s;
  SSL_SESSION_free(s);
  return nullptr;
}

int use_psk(SSL* ssl, const EVP_MD* md, const unsigned char** id, size_t* idlen, SSL_SESSION** sess) {
  const Context& c = context_of(ssl);
  *sess = psk_session(ssl, c);
  if (!*sess) return 0;
  if (md && md != SSL_CIPHER_get_handshake_digest(SSL_SESSION_get0_cipher(*sess))) {
    // A second call after the agent chose a cipher of another hash: no PSK for it.
    SSL_SESSION_free(*sess);
    *sess = nullptr;
    return 1;
  }
  *id = reinterpret_cast<const unsigned char*>(c.psk_identity().data());
  *idlen = c.psk_identity().size();
  return 1;
}

int find_psk(SSL* ssl, const unsigned char* id, size_t idlen, SSL_SESSION** sess) {
  const Context& c = context_of(ssl);
  *sess = nullptr;
  if (idlen != c.psk_identity().size() || CRYPTO_memcmp(id, c.psk_identity().data(), idlen) != 0) {
    // Unknown identity: no PSK, and without a certificate the handshake fails.
    Callbacks::note(ssl, "unknown PSK identity \"" +
                             std::string(reinterpret_cast<const char*>(id), std::min<size_t>(idlen, kMaxPskIdentity)) +
                             "\"");
    return 1;
  }
  *sess = psk_session(ssl, c);
  return *sess ? 1 : 0;
}

}  // namespace

bool has_keys(const SecureConfig& config) {
  return !config.cert.empty() || !config.key.empty() || !config.ca.empty() || !config.psk_file.empty() ||
         !config.crl.empty();
}

bool wants_tls(const SecureConfig& config, const std::string& host) {
  return has_keys(config) && (config.mode == SecureConfig::Mode::kAlways || !net::is_loopback(host));
}

Result<std::shared_ptr<Context>> Context::create(const SecureConfig& config, Role role) {
  const bool certs = !config.cert.empty() || !config.key.empty() || !config.ca.empty();
  const bool psk = !config.psk_file.empty();
  if (certs && psk)
    return Status(Code::kBadConfig, "--psk-file excludes --cert, --key and --ca: give one or the other");
  if (psk && !config.crl.empty())
    return Status(Code::kBadConfig, "--crl revokes certificates: it goes with --cert, --key and --ca, not --psk-file");
  if (!certs && !psk) return Status(Code::kBadConfig, "no keys: give --cert, --key and --ca, or --psk-file");
  if (certs && (config.cert.empty() || config.key.empty() || config.ca.empty()))
    return Status(Code::kBadConfig, std::string("--cert, --key and --ca go together; missing: ") +
                                        (config.cert.empty() ? "--cert" : config.key.empty() ? "--key" : "--ca"));
  SSL_CTX* raw = SSL_CTX_new(role == Role::kAgent ? TLS_server_method() : TLS_client_method());
  if (!raw) return Status(Code::kNoMemory, "SSL_CTX_new: " + openssl_errors());
  std::shared_ptr<Context> c(new Context(raw, config, role));
  c->files_ = files_of(config);  // before reading them: a change while we do is seen later
  SSL_CTX_set_app_data(raw, c.get());
  SSL_CTX_set_min_proto_version(raw, TLS1_3_VERSION);
  // Nothing follows the handshake in TLS records but the Hello, and with
  // certificates a ticket to resume by (below); never 0-RTT, which replays.
  SSL_CTX_set_num_tickets(raw, 0);
  SSL_CTX_set_options(raw, SSL_OP_NO_TICKET);  // with TLS 1.3: stateful tickets, if any
  SSL_CTX_set_session_cache_mode(raw, SSL_SESS_CACHE_OFF);
  if (psk) {
    OB_RETURN_IF_ERROR(read_psk(config.psk_file, c->psk_identity_, c->psk_));
    // Only suites of the PSK's hash (SHA-256): an agent preferring AES-256 (SHA-384) could use no PSK.
    SSL_CTX_set_ciphersuites(raw, "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256");
    if (role == Role::kClient) {
      SSL_CTX_set_psk_use_session_callback(raw, use_psk);
      // An agent that ignores our PSK and shows a certificate instead fails: we trust no CA.
      SSL_CTX_set_verify(raw, SSL_VERIFY_PEER, nullptr);
    } else {
      SSL_CTX_set_psk_find_session_callback(raw, find_psk);
    }
    return c;
  }
  OB_RETURN_IF_ERROR(check_private("--key", config.key));
  if (SSL_CTX_use_certificate_chain_file(raw, config.cert.c_str()) != 1)
    return bad_key("--cert", config.cert, openssl_errors());
  if (SSL_CTX_use_PrivateKey_file(raw, config.key.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(raw) != 1)
    return bad_key("--key", config.key, openssl_errors() + " (with --cert " + config.cert + ")");
  if (SSL_CTX_load_verify_locations(raw, config.ca.c_str(), nullptr) != 1)
    return bad_key("--ca", config.ca, openssl_errors());
  if (!config.crl.empty()) OB_RETURN_IF_ERROR(load_crl(raw, config));
  SSL_CTX_set_verify(raw, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, Callbacks::verify);
  // The peer's certificate must be made for its side: a client's cannot stand in for an agent's.
  SSL_CTX_set_purpose(raw, role == Role::kAgent ? X509_PURPOSE_SSL_CLIENT : X509_PURPOSE_SSL_SERVER);
  if (config.session_lifetime_s > 0) {
    // Resumption: a new X25519 exchange under a PSK from the last session,
    // without certificates. The agent keeps its sessions in memory (a
    // stateful ticket is only their name) and offers no 0-RTT.
    SSL_CTX_set_timeout(raw, config.session_lifetime_s);
    if (role == Role::kAgent) {
      static constexpr unsigned char kSessionContext[] = "outboard-agent";
      SSL_CTX_set_session_id_context(raw, kSessionContext, sizeof kSessionContext - 1);
      SSL_CTX_set_session_cache_mode(raw, SSL_SESS_CACHE_SERVER);
      SSL_CTX_sess_set_cache_size(raw, kMaxTlsSessions);
      SSL_CTX_set_num_tickets(raw, 1);
    } else {
      SSL_CTX_set_session_cache_mode(raw, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
      SSL_CTX_sess_set_new_cb(raw, Callbacks::new_session);
    }
  }
  return c;
}

Context::~Context() {
  for (auto& [peer, session] : sessions_) SSL_SESSION_free(session);
  SSL_CTX_free(ctx_);
}

SSL_SESSION* Context::take_session(const std::string& peer) {
  std::lock_guard lock(sessions_mu_);
  auto it = sessions_.find(peer);
  if (it == sessions_.end()) return nullptr;
  SSL_SESSION* s = it->second;
  sessions_.erase(it);
  return s;
}

void Context::keep_session(const std::string& peer, SSL_SESSION* session) {
  std::lock_guard lock(sessions_mu_);
  if (sessions_.size() >= kMaxTlsSessions && !sessions_.count(peer)) {
    SSL_SESSION_free(sessions_.begin()->second);
    sessions_.erase(sessions_.begin());
  }
  SSL_SESSION*& slot = sessions_[peer];
  SSL_SESSION_free(slot);  // an older one for the same agent
  slot = session;
}

bool Context::changed_on_disk() const { return files_of(config_) != files_; }

bool Context::accepts_client(const std::string& certificate) const {
  const auto* der = reinterpret_cast<const unsigned char*>(certificate.data());
  Owned<X509, X509_free> cert{d2i_X509(nullptr, &der, static_cast<long>(certificate.size()))};
  Owned<X509_STORE_CTX, X509_STORE_CTX_free> check{X509_STORE_CTX_new()};
  // The store's flags come along: CRL checks where --crl is given.
  const bool ok = cert.p && check.p && X509_STORE_CTX_init(check.p, SSL_CTX_get_cert_store(ctx_), cert.p, nullptr) == 1 &&
                  X509_STORE_CTX_set_purpose(check.p, X509_PURPOSE_SSL_CLIENT) == 1 && X509_verify_cert(check.p) == 1;
  ERR_clear_error();
  return ok;
}

Result<std::shared_ptr<Context>> Context::cached(const SecureConfig& config, Role role) {
  // The files as they are now: keys replaced on disk make a new context.
  const std::string id = std::to_string(static_cast<int>(role)) + "|" + std::to_string(config.session_lifetime_s) +
                         "|" + config.agent_host + files_of(config);
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<Context>> made;
  constexpr size_t kMaxCached = 16;
  {
    std::lock_guard lock(mu);
    if (auto it = made.find(id); it != made.end()) return it->second;
  }
  OB_ASSIGN_OR_RETURN(auto context, create(config, role));
  std::lock_guard lock(mu);
  if (made.size() >= kMaxCached) made.clear();
  made.emplace(id, context);
  return context;
}

Result<std::unique_ptr<Tls>> Tls::create(std::shared_ptr<Context> context, std::string peer) {
  SSL* ssl = SSL_new(context->get());
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  if (!ssl || !in || !out) {
    SSL_free(ssl), BIO_free(in), BIO_free(out);
    return Status(Code::kNoMemory, "a TLS connection: " + openssl_errors());
  }
  SSL_set_bio(ssl, in, out);
  if (context->role() == Role::kAgent) SSL_set_accept_state(ssl);
  else SSL_set_connect_state(ssl);
  std::unique_ptr<Tls> t(new Tls(context, ssl, peer));
  SSL_set_app_data(ssl, t.get());
  if (context->role() == Role::kClient && context->psk().empty()) {
    // The agent's certificate must list the host we meant, as a browser's
    // must: a certificate of the same CA made for another agent is refused.
    t->host_ = context->config().agent_host;
    if (t->host_.empty() && !peer.empty()) {
      if (auto where = net::parse_host_port(peer); where.ok()) t->host_ = where->host;
    }
    if (t->host_.empty())
      return Status(Code::kBadConfig, "a TLS client with certificates needs the agent's host (agent_host) to check "
                                      "its certificate against");
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS | X509_CHECK_FLAG_NEVER_CHECK_SUBJECT);
    if ((is_ip(t->host_) ? X509_VERIFY_PARAM_set1_ip_asc(param, t->host_.c_str())
                         : X509_VERIFY_PARAM_set1_host(param, t->host_.c_str(), t->host_.size())) != 1)
      return Status(Code::kBadConfig, "agent host '" + t->host_ + "': " + openssl_errors());
  }
  if (!peer.empty() && context->role() == Role::kClient) {
    if (SSL_SESSION* s = context->take_session(peer)) {
      SSL_set_session(ssl, s);  // its own reference
      SSL_SESSION_free(s);
    }
  }
  return t;
}

Tls::~Tls() {
  // Our TLS stream ends after the Hello by design, without close_notify:
  // OpenSSL would take that for a failed connection and spoil its session.
  if (done_) SSL_set_shutdown(ssl_, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
  SSL_free(ssl_);
}

Status Tls::feed(std::span<const uint8_t> bytes) {
  if (!done_ && (fed_ += bytes.size()) > kMaxHandshakeBytes)
    return {Code::kTooBig, "TLS handshake of more than " + std::to_string(kMaxHandshakeBytes) +
                               " B (its limit, kMaxHandshakeBytes)"};
  if (BIO_write(SSL_get_rbio(ssl_), bytes.data(), static_cast<int>(bytes.size())) != static_cast<int>(bytes.size()))
    return {Code::kNoMemory, "TLS input: " + openssl_errors()};
  return {};
}

Status Tls::failure(const char* what) const {
  std::string why;
  const long verify = SSL_get_verify_result(ssl_);
  if (verify != X509_V_OK) why = std::string("certificate verify failed: ") + X509_verify_cert_error_string(verify);
  else why = openssl_errors();
  if (!note_.empty()) why = note_ + " (" + why + ")";
  ERR_clear_error();
  return {Code::kAuthentication, std::string(what) + " failed: " + why};
}

Result<bool> Tls::handshake() {
  if (done_) return true;
  ERR_clear_error();
  const int r = SSL_do_handshake(ssl_);
  if (r == 1) {
    // With a PSK, only a handshake that used it authenticated the peer.
    if (!context_->psk().empty() && !SSL_session_reused(ssl_))
      return Status(Code::kAuthentication, "TLS handshake failed: the peer did not use the PSK");
    return done_ = true;
  }
  if (SSL_get_error(ssl_, r) == SSL_ERROR_WANT_READ) return false;
  return failure("TLS handshake");
}

std::vector<uint8_t> Tls::take_output() {
  BIO* out = SSL_get_wbio(ssl_);
  std::vector<uint8_t> bytes(BIO_ctrl_pending(out));
  if (!bytes.empty())
    bytes.resize(static_cast<size_t>(std::max(0, BIO_read(out, bytes.data(), static_cast<int>(bytes.size())))));
  return bytes;
}

Status Tls::write(std::span<const uint8_t> plain) {
  ERR_clear_error();
  if (SSL_write(ssl_, plain.data(), static_cast<int>(plain.size())) != static_cast<int>(plain.size()))
    return failure("TLS write");
  return {};
}

Result<std::vector<uint8_t>> Tls::read() {
  std::vector<uint8_t> out;
  uint8_t buf[4096];
  for (;;) {
    ERR_clear_error();
    const int n = SSL_read(ssl_, buf, sizeof buf);
    if (n > 0) {
      out.insert(out.end(), buf, buf + n);
      continue;
    }
    const int e = SSL_get_error(ssl_, n);
    if (e == SSL_ERROR_WANT_READ) return out;
    if (e == SSL_ERROR_ZERO_RETURN) return Status(Code::kConnectionReset, "the peer ended its TLS stream");
    return failure("TLS");
  }
}

Result<Keys> Tls::keys() const {
  uint8_t raw[64];
  if (!done_ || SSL_export_keying_material(ssl_, raw, sizeof raw, kExporterLabel, sizeof kExporterLabel - 1, nullptr,
                                           0, 0) != 1)
    return Status(Code::kAuthentication, "no keys from the TLS handshake: " + openssl_errors());
  Keys k;
  k.aead = SSL_CIPHER_get_id(SSL_get_current_cipher(ssl_)) == TLS1_3_CK_CHACHA20_POLY1305_SHA256
               ? Aead::kChaCha20Poly1305
               : Aead::kAes256Gcm;
  std::memcpy(k.client_to_agent.data(), raw, 32);
  std::memcpy(k.agent_to_client.data(), raw + 32, 32);
  sodium_memzero(raw, sizeof raw);
  return k;
}

std::string Tls::key_exchange() const {
  const int group = SSL_get_negotiated_group(ssl_);
  const char* name = group ? OBJ_nid2sn(group) : nullptr;
  return name ? name : "none";
}

// An external PSK also counts as "reused" to OpenSSL: only certificates' sessions resume.
bool Tls::resumed() const { return context_->psk().empty() && SSL_session_reused(ssl_) == 1; }

std::string Tls::peer_certificate() const {
  X509* cert = SSL_get0_peer_certificate(ssl_);
  unsigned char* der = nullptr;
  const int n = cert ? i2d_X509(cert, &der) : 0;
  std::string out = n > 0 ? std::string(reinterpret_cast<const char*>(der), static_cast<size_t>(n)) : std::string();
  OPENSSL_free(der);
  return out;
}

bool Tls::peer_is_agent() const {
  X509* cert = SSL_get0_peer_certificate(ssl_);
  return cert && (X509_get_extended_key_usage(cert) & XKU_SSL_SERVER) != 0;
}

std::string Tls::peer_identity() const {
  X509* cert = SSL_get0_peer_certificate(ssl_);
  return cert ? subject_of(cert) : "psk:" + context_->psk_identity();
}

namespace {
void nonce_of(Sealer::Stream stream, uint64_t number, uint8_t nonce[12]) {
  const uint32_t s = static_cast<uint32_t>(stream);
  std::memcpy(nonce, &s, 4);
  std::memcpy(nonce + 4, &number, 8);
}
}  // namespace

// Both AEADs take a 12 B nonce and give a 16 B tag.
struct Sealer::Cipher {
  virtual ~Cipher() = default;
  virtual void key(const std::array<uint8_t, 32>& key) = 0;
  virtual bool seal(const uint8_t* nonce, std::span<const uint8_t> ad, std::span<const uint8_t> plain, uint8_t* out,
                    uint8_t* tag) = 0;
  /// False unless `tag` authenticates; `out` (which may be sealed.data()) then holds bytes to drop.
  virtual bool open(const uint8_t* nonce, std::span<const uint8_t> ad, std::span<const uint8_t> sealed,
                    const uint8_t* tag, uint8_t* out) = 0;
};

namespace {

// An environment variable that makes AES-256-GCM OpenSSL's where ipsec-mb is
// built in: the benchmark's side-by-side peer (the same AEAD, the same bytes).
constexpr char kAeadEngineVariable[] = "OUTBOARD_AEAD_ENGINE";

class EvpCipher final : public Sealer::Cipher {
 public:
  explicit EvpCipher(Aead aead) : ctx_(EVP_CIPHER_CTX_new()), cipher_(aead == Aead::kChaCha20Poly1305
                                                                          ? EVP_chacha20_poly1305()
                                                                          : EVP_aes_256_gcm()) {
    OB_CHECK(ctx_ && EVP_CipherInit_ex(ctx_, cipher_, nullptr, nullptr, nullptr, 1) == 1,
             std::string(EVP_CIPHER_get0_name(cipher_)) + ": " + openssl_errors());
  }
  ~EvpCipher() override { EVP_CIPHER_CTX_free(ctx_); }  // clears its key schedule
  void key(const std::array<uint8_t, 32>& key) override {
    OB_CHECK(EVP_CipherInit_ex(ctx_, nullptr, nullptr, key.data(), nullptr, -1) == 1, "key: " + openssl_errors());
  }
  bool seal(const uint8_t* nonce, std::span<const uint8_t> ad, std::span<const uint8_t> plain, uint8_t* out,
            uint8_t* tag) override {
    int len = 0;
    return EVP_CipherInit_ex(ctx_, nullptr, nullptr, nullptr, nonce, 1) == 1 && update(ad, plain, out) &&
           EVP_CipherFinal_ex(ctx_, out, &len) == 1 &&
           EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_AEAD_GET_TAG, kTagBytes, tag) == 1;
  }
  bool open(const uint8_t* nonce, std::span<const uint8_t> ad, std::span<const uint8_t> sealed, const uint8_t* tag,
            uint8_t* out) override {
    int len = 0;
    // SET_TAG copies the tag, so `out` may be `sealed` itself.
    if (EVP_CipherInit_ex(ctx_, nullptr, nullptr, nullptr, nonce, 0) == 1 &&
        EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_AEAD_SET_TAG, kTagBytes, const_cast<uint8_t*>(tag)) == 1 &&
        update(ad, sealed, out) && EVP_CipherFinal_ex(ctx_, out + sealed.size(), &len) == 1)
      return true;
    ERR_clear_error();
    return false;
  }

 private:
  // EVP takes int lengths: a message is fed in pieces of at most this.
  static constexpr size_t kPiece = size_t{1} << 30;
  bool update(std::span<const uint8_t> ad, std::span<const uint8_t> in, uint8_t* out) {
    int len = 0;
    if (!ad.empty() && EVP_CipherUpdate(ctx_, nullptr, &len, ad.data(), static_cast<int>(ad.size())) != 1) return false;
    for (size_t done = 0; done < in.size(); done += kPiece) {
      const int piece = static_cast<int>(std::min(kPiece, in.size() - done));
      if (EVP_CipherUpdate(ctx_, out + done, &len, in.data() + done, piece) != 1) return false;
    }
    return true;
  }
  EVP_CIPHER_CTX* ctx_;
  const EVP_CIPHER* cipher_;
};

#if OUTBOARD_HAVE_IPSEC_MB
// ipsec-mb's table of functions for the best instruction set this CPU has,
// made once and only read after; none where the CPU has no AES instructions
// (ipsec-mb's code without them is no faster than OpenSSL's).
struct Imb {
  const IMB_MGR* mgr = nullptr;
  IMB_ARCH arch = IMB_ARCH_NONE;
};
const Imb& imb() {
  static const Imb made = [] {
    Imb out;
    IMB_MGR* m = alloc_mb_mgr(0);
    if (m == nullptr) return out;
    init_mb_mgr_auto(m, &out.arch);
    if (imb_get_errno(m) == 0 && out.arch >= IMB_ARCH_SSE) {
      out.mgr = m;
    } else {
      free_mb_mgr(m);
    }
    return out;
  }();
  return made;
}

class ImbGcm final : public Sealer::Cipher {
 public:
  explicit ImbGcm(const IMB_MGR* mgr) : mgr_(mgr) {}
  ~ImbGcm() override { sodium_memzero(&key_, sizeof key_); }
  void key(const std::array<uint8_t, 32>& key) override { IMB_AES256_GCM_PRE(mgr_, key.data(), &key_); }
  bool seal(const uint8_t* nonce, std::span<const uint8_t> ad, std::span<const uint8_t> plain, uint8_t* out,
            uint8_t* tag) override {
    Context ctx;
    IMB_AES256_GCM_ENC(mgr_, &key_, &ctx.data, out, in(plain), plain.size(), nonce, in(ad), ad.size(), tag, kTagBytes);
    return true;
  }
  bool open(const uint8_t* nonce, std::span<const uint8_t> ad, std::span<const uint8_t> sealed, const uint8_t* tag,
            uint8_t* out) override {
    Context ctx;
    uint8_t computed[kTagBytes];
    IMB_AES256_GCM_DEC(mgr_, &key_, &ctx.data, out, in(sealed), sealed.size(), nonce, in(ad), ad.size(), computed,
                       kTagBytes);
    return sodium_memcmp(computed, tag, kTagBytes) == 0;  // in constant time
  }

 private:
  // One message's counter and hash state, erased after it as OpenSSL's are.
  struct Context {
    gcm_context_data data;
    ~Context() { sodium_memzero(&data, sizeof data); }
  };
  // ipsec-mb refuses a null pointer even for no bytes.
  static const uint8_t* in(std::span<const uint8_t> s) {
    static const uint8_t none = 0;
    return s.empty() ? &none : s.data();
  }
  const IMB_MGR* mgr_;
  alignas(64) gcm_key_data key_;  // the key schedule and GHASH's powers of H
};

const char* arch_name(IMB_ARCH arch) {
  switch (arch) {
    case IMB_ARCH_AVX512: return "AVX-512";
    case IMB_ARCH_AVX2: return "AVX2";
    case IMB_ARCH_AVX: return "AVX";
    default: return "SSE";
  }
}
#endif

bool openssl_asked() {
  const char* v = std::getenv(kAeadEngineVariable);
  return v != nullptr && std::string_view(v) == "openssl";
}

std::unique_ptr<Sealer::Cipher> make_cipher(Aead aead) {
#if OUTBOARD_HAVE_IPSEC_MB
  if (aead == Aead::kAes256Gcm && !openssl_asked() && imb().mgr) return std::make_unique<ImbGcm>(imb().mgr);
#endif
  return std::make_unique<EvpCipher>(aead);
}

}  // namespace

std::string aead_engine(Aead aead) {
#if OUTBOARD_HAVE_IPSEC_MB
  if (aead == Aead::kAes256Gcm && !openssl_asked() && imb().mgr)
    return std::string("ipsec-mb ") + imb_get_version_str() + " (" + arch_name(imb().arch) + ")";
#endif
  (void)aead;
  return OpenSSL_version(OPENSSL_VERSION);
}

Sealer::Sealer(const std::array<uint8_t, 32>& key, Aead aead) : key_(key), cipher_(make_cipher(aead)) {
  [[maybe_unused]] static const int ready = sodium_init();
  cipher_->key(key_);
}

Sealer::~Sealer() { sodium_memzero(key_.data(), key_.size()); }

void Sealer::rekey() {
  std::array<uint8_t, 32> next;
  crypto_kdf_derive_from_key(next.data(), next.size(), ++epoch_, "obrekey_", key_.data());
  key_ = next;
  sodium_memzero(next.data(), next.size());
  cipher_->key(key_);
}

void Sealer::seal(Stream stream, uint64_t number, std::span<const uint8_t> ad, std::span<const uint8_t> plain,
                  uint8_t* out, uint8_t* tag) {
  uint8_t nonce[12];
  nonce_of(stream, number, nonce);
  OB_CHECK(cipher_->seal(nonce, ad, plain, out, tag), "seal: " + openssl_errors());
}

Status Sealer::open(Stream stream, uint64_t number, std::span<const uint8_t> ad, std::span<const uint8_t> sealed,
                    const uint8_t* tag, uint8_t* out) {
  uint8_t nonce[12];
  nonce_of(stream, number, nonce);
  // The caller drops all of `out` if the tag does not match.
  if (!cipher_->open(nonce, ad, sealed, tag, out))
    return {Code::kAuthentication, "message " + std::to_string(number) + " failed authentication (changed, replayed "
                                                                          "or sealed with another key)"};
  return {};
}

Status Sealer::open(Stream stream, uint64_t number, std::span<const uint8_t> ad, std::span<uint8_t> sealed) {
  if (sealed.size() < kTagBytes)
    return {Code::kAuthentication, "sealed message " + std::to_string(number) + " of " + std::to_string(sealed.size()) +
                                       " B is shorter than its " + std::to_string(kTagBytes) + " B tag"};
  const size_t n = sealed.size() - kTagBytes;
  return open(stream, number, ad, sealed.first(n), sealed.data() + n, sealed.data());
}

// ---- outboard-agent --keys-init, --keys-issue, --keys-revoke

namespace {
using OwnedKey = Owned<EVP_PKEY, EVP_PKEY_free>;
using OwnedCert = Owned<X509, X509_free>;
using OwnedCrl = Owned<X509_CRL, X509_CRL_free>;

bool add_extension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, issuer ? issuer : cert, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &v3, nid, value.c_str());
  const bool ok = ext && X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

// A certificate for `key` named `cn`, signed by `issuer` (self-signed when
// null), for `usage` (extended key usage) and listing `names` (subjectAltName).
X509* make_certificate(EVP_PKEY* key, const std::string& cn, X509* issuer, EVP_PKEY* issuer_key, const char* usage,
                       const std::string& names = {}) {
  X509* cert = X509_new();
  uint64_t serial = 0;
  randombytes_buf(&serial, sizeof serial);
  bool ok = cert && X509_set_version(cert, 2) && ASN1_INTEGER_set_uint64(X509_get_serialNumber(cert), serial >> 1) &&
            X509_gmtime_adj(X509_getm_notBefore(cert), -300) &&
            X509_gmtime_adj(X509_getm_notAfter(cert), 86400L * kCertificateDays) && X509_set_pubkey(cert, key);
  X509_NAME* name = cert ? X509_get_subject_name(cert) : nullptr;
  auto text = [](const char* s) { return reinterpret_cast<const unsigned char*>(s); };
  ok = ok && X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, text("outboard"), -1, -1, 0) &&
       X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, text(cn.c_str()), -1, -1, 0) &&
       X509_set_issuer_name(cert, issuer ? X509_get_subject_name(issuer) : name) &&
       add_extension(cert, issuer, NID_basic_constraints, issuer ? "critical,CA:FALSE" : "critical,CA:TRUE") &&
       add_extension(cert, issuer, NID_key_usage,
                     issuer ? "critical,digitalSignature" : "critical,keyCertSign,cRLSign") &&
       add_extension(cert, issuer, NID_subject_key_identifier, "hash") &&
       (!usage || add_extension(cert, issuer, NID_ext_key_usage, usage)) &&
       (names.empty() || add_extension(cert, issuer, NID_subject_alt_name, names)) &&
       X509_sign(cert, issuer_key ? issuer_key : key, nullptr) > 0;
  if (!ok) X509_free(cert), cert = nullptr;
  return cert;
}

// Creates `path` (never over an existing file) with `mode` and writes it.
template <class Write>
Status write_new(const std::string& path, mode_t mode, Write&& write) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return {Code::kIoError, path + ": " + std::strerror(errno)};
  FILE* f = ::fdopen(fd, "w");
  if (!f) {
    ::close(fd);
    return {Code::kIoError, path + ": " + std::strerror(errno)};
  }
  const bool ok = write(f);
  if (std::fclose(f) != 0 || !ok) return {Code::kIoError, path + ": not written (" + openssl_errors() + ")"};
  return {};
}

Status refuse_existing(const std::string& dir, std::initializer_list<std::string> files) {
  for (const std::string& f : files)
    if (::access((dir + "/" + f).c_str(), F_OK) == 0)
      return {Code::kBadConfig, dir + "/" + f + " exists: keys are never overwritten (use another name or directory)"};
  return {};
}

// "DNS:a,IP:b" for an agent certificate's subjectAltName; kBadConfig naming
// a host that is neither an IP address nor a DNS name.
Result<std::string> alt_names(const std::vector<std::string>& hosts) {
  std::string out;
  for (const std::string& h : hosts.empty() ? default_agent_hosts() : hosts) {
    if (!is_ip(h) && !is_dns_name(h))
      return Status(Code::kBadConfig, "--agent-host '" + h + "' is neither an IP address nor a DNS name");
    out += (out.empty() ? "" : ",") + std::string(is_ip(h) ? "IP:" : "DNS:") + h;
  }
  return out;
}

struct Ca {
  OwnedCert cert;
  OwnedKey key;
};

Result<Ca> load_ca(const std::string& dir) {
  std::string why;
  auto certs = read_pems<X509, PEM_read_bio_X509, X509_free>(dir + "/ca.pem", why);
  auto keys = read_pems<EVP_PKEY, PEM_read_bio_PrivateKey, EVP_PKEY_free>(dir + "/ca.key", why);
  if (certs.empty() || keys.empty() || X509_check_private_key(certs[0].p, keys[0].p) != 1)
    return Status(Code::kBadConfig, dir + " holds no CA made by keys init (ca.pem and its ca.key): " +
                                        (why.empty() ? openssl_errors() : why));
  return Ca{std::move(certs[0]), std::move(keys[0])};
}

// Writes DIR/crl.pem anew: `revoked` (taken over) and the CRL number
// `number`, signed by the CA, replacing the old file only once written.
Status write_crl(const std::string& dir, const Ca& ca, std::vector<X509_REVOKED*> revoked, uint64_t number) {
  OwnedCrl crl{X509_CRL_new()};
  Owned<ASN1_TIME, ASN1_TIME_free> now{X509_gmtime_adj(nullptr, 0)};
  Owned<ASN1_TIME, ASN1_TIME_free> next{X509_gmtime_adj(nullptr, 86400L * kCrlDays)};
  Owned<ASN1_INTEGER, ASN1_INTEGER_free> n{ASN1_INTEGER_new()};
  bool ok = crl.p && now.p && next.p && n.p && X509_CRL_set_version(crl.p, 1) &&
            X509_CRL_set_issuer_name(crl.p, X509_get_subject_name(ca.cert.p)) &&
            X509_CRL_set1_lastUpdate(crl.p, now.p) && X509_CRL_set1_nextUpdate(crl.p, next.p) &&
            ASN1_INTEGER_set_uint64(n.p, number) && X509_CRL_add1_ext_i2d(crl.p, NID_crl_number, n.p, 0, 0) == 1;
  for (X509_REVOKED* r : revoked) {
    if (ok && X509_CRL_add0_revoked(crl.p, r) == 1) continue;
    X509_REVOKED_free(r);
    ok = false;
  }
  ok = ok && X509_CRL_sort(crl.p) && X509_CRL_sign(crl.p, ca.key.p, nullptr) > 0;
  if (!ok) return {Code::kIoError, "a CRL: " + openssl_errors()};
  const std::string path = dir + "/crl.pem", tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  OB_RETURN_IF_ERROR(write_new(tmp, 0644, [&](FILE* f) { return PEM_write_X509_CRL(f, crl.p) == 1; }));
  // rename: an agent reading it (--crl) sees the old list or the new, never half.
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return {Code::kIoError, path + ": " + std::strerror(errno)};
  return {};
}

Status write_keys(const std::string& dir, const std::string& stem, EVP_PKEY* key, X509* cert) {
  OB_RETURN_IF_ERROR(write_new(dir + "/" + stem + ".key", 0600, [&](FILE* f) {
    return PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
  }));
  return write_new(dir + "/" + stem + ".pem", 0644, [&](FILE* f) { return PEM_write_X509(f, cert) == 1; });
}

// DIR/STEM.pem and .key: a certificate named `cn` signed by `ca`, for `role`.
Status issue(const std::string& dir, const std::string& stem, const std::string& cn, Role role,
             const std::vector<std::string>& agent_hosts, const Ca& ca) {
  std::string names;
  if (role == Role::kAgent) {
    OB_ASSIGN_OR_RETURN(names, alt_names(agent_hosts));
  }
  OwnedKey key{EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519")};
  // An agent also dials other hosts' agents (the mpi service): its certificate serves both sides.
  OwnedCert cert{key.p ? make_certificate(key.p, cn, ca.cert.p, ca.key.p,
                                          role == Role::kAgent ? "serverAuth,clientAuth" : "clientAuth", names)
                       : nullptr};
  if (!cert.p) return {Code::kIoError, "a certificate: " + openssl_errors()};
  return write_keys(dir, stem, key.p, cert.p);
}
}  // namespace

std::vector<std::string> default_agent_hosts() {
  std::vector<std::string> hosts = {"localhost", "127.0.0.1", "::1"};
  char name[kMaxHostName + 1] = {};
  // A host name no DNS name can spell (an underscore, say) is left out.
  if (::gethostname(name, sizeof name - 1) == 0 && is_dns_name(name) && std::string(name) != "localhost")
    hosts.push_back(name);
  for (const std::string& ip : net::ipv4_addresses())
    if (!net::is_loopback(ip)) hosts.push_back(ip);
  return hosts;
}

Status init_keys(const std::string& dir, const std::string& agent_name, const std::vector<std::string>& agent_hosts) {
  OB_RETURN_IF_ERROR(alt_names(agent_hosts).status());
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return {Code::kIoError, dir + ": " + std::strerror(errno)};
  OB_RETURN_IF_ERROR(refuse_existing(
      dir, {"ca.pem", "ca.key", "crl.pem", "agent.pem", "agent.key", "client.pem", "client.key", "psk.txt"}));
  Ca ca;
  ca.key.p = EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
  if (!ca.key.p) return {Code::kNoMemory, "Ed25519 keys: " + openssl_errors()};
  // A CA name of its own: a certificate of another deployment's CA is then "unknown ca", not a bad signature.
  uint8_t tag[4];
  randombytes_buf(tag, sizeof tag);
  char hex[2 * sizeof tag + 1];
  sodium_bin2hex(hex, sizeof hex, tag, sizeof tag);
  ca.cert.p = make_certificate(ca.key.p, std::string("outboard CA ") + hex, nullptr, nullptr, nullptr);
  if (!ca.cert.p) return {Code::kIoError, "certificates: " + openssl_errors()};
  OB_RETURN_IF_ERROR(write_keys(dir, "ca", ca.key.p, ca.cert.p));
  OB_RETURN_IF_ERROR(write_crl(dir, ca, {}, 1));
  OB_RETURN_IF_ERROR(issue(dir, "agent", agent_name, Role::kAgent, agent_hosts, ca));
  OB_RETURN_IF_ERROR(issue(dir, "client", "outboard client", Role::kClient, {}, ca));
  uint8_t psk[kPskBytes];
  randombytes_buf(psk, sizeof psk);
  char psk_hex[2 * kPskBytes + 1];
  sodium_bin2hex(psk_hex, sizeof psk_hex, psk, sizeof psk);
  sodium_memzero(psk, sizeof psk);
  Status st = write_new(dir + "/psk.txt", 0600, [&](FILE* f) { return std::fprintf(f, "outboard:%s\n", psk_hex) > 0; });
  sodium_memzero(psk_hex, sizeof psk_hex);
  return st;
}

Status issue_keys(const std::string& dir, const std::string& name, Role role,
                  const std::vector<std::string>& agent_hosts) {
  const bool plain = !name.empty() && name.size() <= kMaxCertificateName && name != "ca" && name != "crl" &&
                     std::all_of(name.begin(), name.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
                     }) && name.front() != '.';
  if (!plain)
    return {Code::kBadConfig, "certificate name '" + name + "': expected 1-" + std::to_string(kMaxCertificateName) +
                                  " letters, digits, '-', '_' or '.' (not starting with '.'; not ca or crl)"};
  OB_ASSIGN_OR_RETURN(Ca ca, load_ca(dir));
  OB_RETURN_IF_ERROR(refuse_existing(dir, {name + ".pem", name + ".key"}));
  return issue(dir, name, name, role, agent_hosts, ca);
}

Status revoke(const std::string& dir, const std::string& cert_file) {
  OB_ASSIGN_OR_RETURN(Ca ca, load_ca(dir));
  std::string why;
  auto certs = read_pems<X509, PEM_read_bio_X509, X509_free>(cert_file, why);
  if (certs.empty()) return {Code::kBadConfig, cert_file + ": no certificate (" + (why.empty() ? "no PEM" : why) + ")"};
  X509* cert = certs[0].p;
  if (X509_check_issued(ca.cert.p, cert) != X509_V_OK || X509_verify(cert, X509_get0_pubkey(ca.cert.p)) != 1) {
    ERR_clear_error();
    return {Code::kBadConfig, cert_file + ": not issued by the CA of " + dir + "/ca.pem"};
  }
  // What the old list revoked stays revoked; its number goes up by one (RFC 5280 §5.2.3).
  std::vector<X509_REVOKED*> revoked;
  uint64_t number = 1;
  const std::string path = dir + "/crl.pem";
  if (::access(path.c_str(), F_OK) == 0) {
    auto old = read_pems<X509_CRL, PEM_read_bio_X509_CRL, X509_CRL_free>(path, why);
    if (old.empty() || X509_CRL_verify(old[0].p, X509_get0_pubkey(ca.cert.p)) != 1) {
      ERR_clear_error();
      return {Code::kBadConfig, path + ": not a CRL signed by the CA of " + dir + "/ca.pem; move it away first"};
    }
    X509_CRL* crl = old[0].p;
    X509_REVOKED* listed = nullptr;
    if (X509_CRL_get0_by_serial(crl, &listed, X509_get0_serialNumber(cert)) == 1) return {};  // already revoked
    STACK_OF(X509_REVOKED)* entries = X509_CRL_get_REVOKED(crl);
    for (int i = 0; i < sk_X509_REVOKED_num(entries); ++i)
      revoked.push_back(X509_REVOKED_dup(sk_X509_REVOKED_value(entries, i)));
    auto* n = static_cast<ASN1_INTEGER*>(X509_CRL_get_ext_d2i(crl, NID_crl_number, nullptr, nullptr));
    if (n && ASN1_INTEGER_get_uint64(&number, n) == 1) ++number;
    ASN1_INTEGER_free(n);
  }
  X509_REVOKED* entry = X509_REVOKED_new();
  Owned<ASN1_TIME, ASN1_TIME_free> now{X509_gmtime_adj(nullptr, 0)};
  if (!entry || !now.p || X509_REVOKED_set_serialNumber(entry, X509_get_serialNumber(cert)) != 1 ||
      X509_REVOKED_set_revocationDate(entry, now.p) != 1) {
    X509_REVOKED_free(entry);
    for (X509_REVOKED* kept : revoked) X509_REVOKED_free(kept);
    return {Code::kNoMemory, "a CRL entry: " + openssl_errors()};
  }
  revoked.push_back(entry);
  return write_crl(dir, ca, std::move(revoked), number);
}

}  // namespace outboard::secure
