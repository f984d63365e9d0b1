// How a connection is protected (the secure channel): plain configuration,
// shared by the channel, its transport (src/transport/secure.h) and the agent.
#pragma once

#include <cstdint>
#include <string>

namespace outboard {

/// The longest a TLS 1.3 session may be resumed (RFC 8446 §4.6.1: 7 days).
inline constexpr uint32_t kMaxTlsSessionLifetimeS = 7 * 86400;

/// How a connection is authenticated and encrypted: a TLS 1.3 handshake on
/// the bootstrap socket, mutual (certificates or a PSK), then every frame
/// sealed with keys exported from it. Without keys: plaintext.
struct SecureConfig {
  enum class Mode : uint8_t {
    kAuto,    ///< links that leave the host (a peer not on loopback)
    kAlways,  ///< every link, loopback too
  };
  Mode mode = Mode::kAuto;  ///< --secure auto|always
  std::string cert;         ///< --cert: this side's certificate chain (PEM)
  std::string key;          ///< --key: its private key (PEM), readable by its owner only
  std::string ca;           ///< --ca: the CA the peer's certificate must chain to (PEM)
  /// --psk-file: "identity:64 hex digits", a TLS 1.3 external PSK (with
  /// (EC)DHE: forward secret) instead of certificates.
  std::string psk_file;
  /// --rekey-bytes: bytes a side seals under one key before it moves to the next.
  uint64_t rekey_bytes = 1ull << 30;
  /// --tls-session-lifetime-s: certificates only. For this long a client may
  /// resume its TLS session with an agent: a new (EC)DHE exchange, without
  /// the certificates (OpenSSL 3.0 spends ~1.5 ms per side decoding and
  /// checking them). A certificate that expires or is replaced is noticed
  /// at the next full handshake, at most this much later. 0: every
  /// connection makes a full handshake.
  uint32_t session_lifetime_s = 600;
  /// --crl: certificates revoked by the CA (PEM, `outboard keys revoke`);
  /// a peer showing one is refused. The agent reads it again when it changes.
  std::string crl;
  /// --agent-host (clients): the DNS name or IP address the agent's
  /// certificate must list (subjectAltName); default: the host dialed.
  std::string agent_host;
};

}  // namespace outboard
