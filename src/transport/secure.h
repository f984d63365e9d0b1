// The secure channel: a TLS 1.3 handshake (OpenSSL 3, mutual certificates
// or an external PSK) on the bootstrap socket, driven over memory BIOs so the
// agent's listener can run it from its poll loop, and keys exported from it
// that seal every later frame with the AEAD of the suite TLS agreed on
// (AES-256-GCM, or ChaCha20-Poly1305 where the peers chose it: CPUs without
// AES instructions). AES-256-GCM is Intel's ipsec-mb where the build found it
// (x86_64: its VAES/AVX-512 code seals 64 KiB 4x as fast as OpenSSL 3.0's
// here, 24.8 against 6.0 GB/s), else OpenSSL's; ChaCha20-Poly1305 is
// OpenSSL's (libsodium's ran 3.6x slower on 64 KiB here).
//
// TLS itself carries only the handshake and the client's Hello: the session
// process that answers is not the listener that ran the handshake, and
// OpenSSL's state does not cross a process. What crosses is 64 B exported
// from the handshake (RFC 8446 §7.5): a key per direction, from which the
// Welcome and each UCX frame are sealed with their sequence number as nonce.
// So a frame replayed, reordered past the channel's window, cut or changed is
// refused by the receiver: kAuthentication, and the connection ends.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "outboard/secure_config.h"
#include "outboard/status.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;
typedef struct ssl_session_st SSL_SESSION;

namespace outboard::secure {

/// The AEAD tag of every sealed message: after a socket message's bytes, in
/// a frame's header.
inline constexpr size_t kTagBytes = 16;
/// TLS sessions a client keeps to resume (one per agent), and an agent
/// remembers (one per client connection, until their lifetime ends).
inline constexpr size_t kMaxTlsSessions = 1024;
/// Bytes a peer may send before its handshake completes (a ClientHello with
/// a certificate chain is a few KiB).
inline constexpr size_t kMaxHandshakeBytes = 64 << 10;
/// The exporter label both sides derive the frame keys with.
inline constexpr char kExporterLabel[] = "EXPORTER-outboard-channel-v1";
/// The first byte of a TLS handshake record: how the listener tells a TLS
/// client from a plaintext Hello (whose first byte is 'O' of "OBB1").
inline constexpr uint8_t kTlsHandshakeRecord = 0x16;

/// Which keys a SecureConfig names; none: no TLS at all.
[[nodiscard]] bool has_keys(const SecureConfig& config);
/// Whether a link to or from `host` (numeric IPv4) must be secure under `config`.
[[nodiscard]] bool wants_tls(const SecureConfig& config, const std::string& host);

enum class Role : uint8_t { kClient, kAgent };

/// An SSL_CTX made from a SecureConfig. Thread mode: shared (immutable once made).
class Context {
 public:
  /// kBadConfig naming the option and file for keys that do not load, and
  /// for a key or PSK file that others than its owner may read.
  static Result<std::shared_ptr<Context>> create(const SecureConfig& config, Role role);
  /// As create(), made once per process for the same files as they are on
  /// disk (a client connects often; making an SSL_CTX takes milliseconds).
  static Result<std::shared_ptr<Context>> cached(const SecureConfig& config, Role role);
  ~Context();
  [[nodiscard]] const SecureConfig& config() const { return config_; }
  /// Whether a file it was made from changed on disk since (a CRL that
  /// revokes more, a certificate replaced): the agent then makes a new one.
  [[nodiscard]] bool changed_on_disk() const;
  /// Whether a client's certificate (DER, Tls::peer_certificate()) would
  /// pass a handshake with this context now: chain, dates and CRL.
  [[nodiscard]] bool accepts_client(const std::string& certificate) const;
  [[nodiscard]] Role role() const { return role_; }
  [[nodiscard]] SSL_CTX* get() const { return ctx_; }
  /// PSK mode: the identity and the key (empty in certificate mode).
  [[nodiscard]] const std::string& psk_identity() const { return psk_identity_; }
  [[nodiscard]] std::span<const uint8_t> psk() const { return psk_; }
  /// A client's session with the agent at `peer`, to resume: taken, since
  /// each is used once (the agent gives a new one). Null: none.
  SSL_SESSION* take_session(const std::string& peer);
  /// Keeps a session (owned from now) for take_session(peer).
  void keep_session(const std::string& peer, SSL_SESSION* session);

 private:
  Context(SSL_CTX* ctx, const SecureConfig& config, Role role) : ctx_(ctx), config_(config), role_(role) {}
  SSL_CTX* ctx_;
  SecureConfig config_;
  std::string files_;  // the files' stat when they were read: changed_on_disk()
  Role role_;
  std::string psk_identity_;
  std::vector<uint8_t> psk_;
  std::mutex sessions_mu_;
  std::map<std::string, SSL_SESSION*> sessions_;
};

/// The AEAD frames are sealed with: that of the TLS suite both peers chose
/// (AES-256-GCM for either AES suite: the same instructions, a wider key).
enum class Aead : uint8_t { kAes256Gcm = 1, kChaCha20Poly1305 = 2 };

/// The code that seals with `aead` in this build on this CPU, as
/// "library (its instruction set)": "ipsec-mb 1.3.0 (AVX-512)", or OpenSSL's version.
[[nodiscard]] std::string aead_engine(Aead aead);

/// The 64 B exported from a completed handshake: a key for each direction.
struct Keys {
  std::array<uint8_t, 32> client_to_agent{};
  std::array<uint8_t, 32> agent_to_client{};
  Aead aead = Aead::kAes256Gcm;
};

/// One TLS connection over memory BIOs: the caller moves bytes between the
/// socket and feed()/take_output(). Thread mode: single.
class Tls {
 public:
  /// `peer`: a client's name for the agent ("host:port"), under which its
  /// session is kept and resumed (none: a full handshake, nothing kept).
  /// A certificate client checks that the agent's certificate lists the
  /// config's agent_host, or else peer's host; kBadConfig without either.
  static Result<std::unique_ptr<Tls>> create(std::shared_ptr<Context> context, std::string peer = {});
  ~Tls();

  /// Bytes from the peer; kTooBig past kMaxHandshakeBytes before the handshake completes.
  Status feed(std::span<const uint8_t> bytes);
  /// Advances the handshake: true once complete. kAuthentication (its
  /// reason: the alert, the certificate check) when it failed; the alert for
  /// the peer is then in take_output().
  Result<bool> handshake();
  /// Bytes to send to the peer (handshake flights, alerts, records).
  [[nodiscard]] std::vector<uint8_t> take_output();
  /// Encrypts application data into the output.
  Status write(std::span<const uint8_t> plain);
  /// Decrypts what arrived; an empty vector: a record is still incomplete.
  Result<std::vector<uint8_t>> read();
  /// The frame keys (after the handshake).
  [[nodiscard]] Result<Keys> keys() const;
  /// The (EC)DHE group the keys came from ("X25519"): the handshake's forward secrecy.
  [[nodiscard]] std::string key_exchange() const;
  /// Who the peer authenticated as: its certificate's subject or "psk:<identity>".
  [[nodiscard]] std::string peer_identity() const;
  /// The peer's certificate (DER); empty with a PSK.
  [[nodiscard]] std::string peer_certificate() const;
  /// Whether the peer's certificate is made for agents (TLS servers: `keys init`'s
  /// agent.pem, `keys issue --agent`), not for clients alone.
  [[nodiscard]] bool peer_is_agent() const;
  /// Whether the handshake resumed an earlier session (certificates not sent again).
  [[nodiscard]] bool resumed() const;

 private:
  friend struct Callbacks;  // OpenSSL's callbacks (secure.cpp)
  Tls(std::shared_ptr<Context> context, SSL* ssl, std::string peer)
      : context_(std::move(context)), ssl_(ssl), peer_(std::move(peer)) {}
  Status failure(const char* what) const;
  std::shared_ptr<Context> context_;
  SSL* ssl_;
  std::string peer_;
  size_t fed_ = 0;
  bool done_ = false;
  std::string host_;  // a certificate client's: the name the agent's certificate must list
  std::string note_;  // what a callback learnt of a failure (an unknown PSK identity, a certificate refused)
};

/// Seals and opens one direction's messages with its key. The nonce is the
/// message's number in its stream (frames: their sequence number; socket
/// messages: a stream of their own), so no two messages share one.
class Sealer {
 public:
  enum class Stream : uint32_t { kFrames = 0, kSocket = 1 };
  Sealer(const std::array<uint8_t, 32>& key, Aead aead);
  ~Sealer();
  Sealer(const Sealer&) = delete;
  Sealer& operator=(const Sealer&) = delete;
  /// Replaces the key by one derived from it (the old one is erased: what
  /// it sealed stays safe if a later key leaks).
  void rekey();
  /// Keys replaced so far.
  [[nodiscard]] uint64_t epoch() const { return epoch_; }
  /// `plain` sealed with `ad` authenticated: plain.size() bytes into `out`,
  /// the tag's kTagBytes into `tag`.
  void seal(Stream stream, uint64_t number, std::span<const uint8_t> ad, std::span<const uint8_t> plain,
            uint8_t* out, uint8_t* tag);
  /// seal() with the tag after the sealed bytes: plain.size() + kTagBytes into `out`.
  void seal(Stream stream, uint64_t number, std::span<const uint8_t> ad, std::span<const uint8_t> plain,
            uint8_t* out) {
    seal(stream, number, ad, plain, out, out + plain.size());
  }
  /// Opens `sealed` with its `tag` (kTagBytes) into `out` (sealed.size()
  /// bytes; may be sealed.data() itself). kAuthentication when it was not
  /// sealed so (changed, replayed under another number, or another key's);
  /// `out` then holds bytes to drop.
  Status open(Stream stream, uint64_t number, std::span<const uint8_t> ad, std::span<const uint8_t> sealed,
              const uint8_t* tag, uint8_t* out);
  /// open() in place of `sealed` with the tag at its end: the plaintext is
  /// its first size() - kTagBytes bytes.
  Status open(Stream stream, uint64_t number, std::span<const uint8_t> ad, std::span<uint8_t> sealed);

  /// The AEAD's code, keyed once, a nonce per message (secure.cpp: OpenSSL's or ipsec-mb's).
  struct Cipher;

 private:
  std::array<uint8_t, 32> key_;
  uint64_t epoch_ = 0;
  std::unique_ptr<Cipher> cipher_;
};

/// Both directions of one connection, as seen from `role`'s side. The
/// sender moves to its next key after `rekey_bytes` (SecureConfig) and says
/// so in the frame it first seals with it; the receiver follows in order.
struct FrameSeal {
  FrameSeal(const Keys& keys, Role role, uint64_t rekey_bytes)
      : out(role == Role::kClient ? keys.client_to_agent : keys.agent_to_client, keys.aead),
        in(role == Role::kClient ? keys.agent_to_client : keys.client_to_agent, keys.aead),
        rekey_bytes(rekey_bytes) {}
  /// Counts `bytes` about to be sealed; true when they go under a new key (rekeyed here).
  bool count(uint64_t bytes) {
    if ((sealed += bytes) < rekey_bytes) return false;
    sealed = 0;
    out.rekey();
    return true;
  }
  Sealer out;
  Sealer in;
  uint64_t rekey_bytes;
  uint64_t sealed = 0;  // since the last key change
};

/// The names an agent certificate lists when none are given: loopback
/// (localhost, 127.0.0.1, ::1), this host's name and its IPv4 addresses.
std::vector<std::string> default_agent_hosts();

/// `outboard-agent --keys-init DIR`: a small CA and an agent and a client
/// certificate signed by it (Ed25519; the agent's for TLS servers, listing
/// `agent_hosts` or default_agent_hosts(); the client's for clients), an
/// empty CRL (crl.pem) and a PSK file; keys readable by their owner only.
/// Refuses a DIR that already holds any of the files.
Status init_keys(const std::string& dir, const std::string& agent_name, const std::vector<std::string>& agent_hosts = {});

/// `--keys-issue`: DIR/NAME.pem and NAME.key, a certificate signed by DIR's
/// CA for a client named NAME, or for an agent (`agent_hosts` as above).
/// Never overwrites a file.
Status issue_keys(const std::string& dir, const std::string& name, Role role,
                  const std::vector<std::string>& agent_hosts = {});

/// `--keys-revoke`: adds the certificate in `cert_file` (issued by DIR's CA)
/// to DIR/crl.pem, written anew (signed, replaced atomically). Agents given
/// --crl DIR/crl.pem refuse it from their next handshake on.
Status revoke(const std::string& dir, const std::string& cert_file);

}  // namespace outboard::secure
