// What the agent's listener process and its session processes say on the
// control socket between them (AF_UNIX SOCK_SEQPACKET: one message per
// send, a client's socket passed alongside an adopt). Both ends are ours;
// the hello inside an adopt is a client's, and the session decodes it again.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "channel/server.h"
#include "outboard/status.h"

namespace outboard::agent {

enum class ControlKind : uint8_t {
  kConfig = 1,  ///< listener -> session, first: JSON {"options": {...}, "transports": "...", "net_devices": "..."}
  kAdopt = 2,   ///< listener -> session, with the client's socket: PeerInfo, then the hello's payload
  kClosed = 3,  ///< session -> listener: one of its clients left
  kEnd = 4,     ///< listener -> session: tell your clients the agent is shutting down, and exit
  kRevoked = 5,  ///< listener -> session: a certificate of your clients is no longer accepted: end them, and exit
};

/// Largest control message (a config, or an adopt carrying a hello).
inline constexpr size_t kMaxControlMessage = 64 << 10;

std::vector<uint8_t> encode_config(const std::string& json);
std::vector<uint8_t> encode_adopt(const channel::PeerInfo& peer, std::span<const uint8_t> hello);
std::vector<uint8_t> encode_closed();
std::vector<uint8_t> encode_end();
std::vector<uint8_t> encode_revoked();

struct Adopt {
  channel::PeerInfo peer;
  std::span<const uint8_t> hello;  ///< into the decoded message
};
Result<Adopt> decode_adopt(std::span<const uint8_t> body);

}  // namespace outboard::agent
