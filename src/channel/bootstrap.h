// The bootstrap: what a client and an agent say on a TCP socket of ours
// before either creates a UCX endpoint. The client sends a Hello (its UCX
// worker address, limits, ring), the agent a Welcome (its own) or a
// Refusal; then both sides create endpoints from the worker addresses, and
// the socket stays open as the connection's liveness sentinel: its end is
// the peer's end.
//
// Every message is a 12-byte header (magic, kind, version, length), then at
// most kMaxBootMessage bytes. Everything a peer sends is checked here, with
// a named limit for each field, before it goes anywhere near UCX.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "outboard/clock.h"
#include "outboard/status.h"
#include "transport/secure.h"

namespace outboard::channel {

inline constexpr uint32_t kBootMagic = 0x3142424f;  // "OBB1"
inline constexpr uint8_t kBootVersion = 3;
inline constexpr size_t kBootHeaderBytes = 12;
/// Largest bootstrap message either side accepts.
inline constexpr size_t kMaxBootMessage = 16 << 10;
/// Largest UCX worker address in a Hello or Welcome.
inline constexpr size_t kMaxWorkerAddress = 8 << 10;
/// Largest ring descriptor (a region descriptor).
inline constexpr size_t kMaxRingDescriptor = 1 << 10;
/// `bell_fd` of a side that offers no doorbell descriptor.
inline constexpr uint32_t kNoBell = UINT32_MAX;
/// Services an agent may advertise, and the longest name.
inline constexpr size_t kMaxServices = 256;
inline constexpr size_t kMaxServiceName = 64;
/// Facts an agent may announce in a Welcome, and the longest name.
inline constexpr size_t kMaxFacts = 64;
inline constexpr size_t kMaxFactName = 64;
/// Bytes of a session token: clients presenting the same token share a session.
inline constexpr size_t kSessionTokenBytes = 32;

/// kSealed: a whole message sealed with the connection's keys (the agent's
/// answer to a client that came through TLS).
enum class BootKind : uint8_t { kHello = 1, kWelcome = 2, kRefusal = 3, kSealed = 4 };

using SessionToken = std::array<uint8_t, kSessionTokenBytes>;
/// What an agent announces about itself ("tokenize_threads" -> 4), so a
/// client need not ask.
using Facts = std::vector<std::pair<std::string, uint64_t>>;

/// Hello flags.
inline constexpr uint32_t kHelloSharedMemory = 1;  ///< the client's UCX can use posix shared memory
/// Both sides give network-only worker addresses (ChannelConfig::network_only): no shared memory
/// and no ring, even on one host.
inline constexpr uint32_t kHelloNetworkOnly = 2;
inline constexpr uint32_t kHelloFlags = kHelloSharedMemory | kHelloNetworkOnly;

/// Client -> agent.
struct Hello {
  uint32_t connection_id = 0;  ///< the client's id for this connection (frames to it carry it)
  uint32_t pid = 0;            ///< the client's process, checked by the agent before it trusts it with shared memory
  uint32_t flags = 0;          ///< kHello*
  SessionToken token{};        ///< who the client is: the same token, the same session
  uint64_t max_msg_size = 0;   ///< largest message the client accepts
  uint32_t window_msgs = 0;    ///< credits it grants the agent
  uint64_t window_bytes = 0;
  std::vector<uint8_t> worker_address;
  uint32_t ring_slots = 0;     ///< 0: no ring
  std::vector<uint8_t> ring_descriptor;
  uint32_t bell_fd = kNoBell;  ///< the pipe (in `pid`) that rings this side's doorbell (Hub::offer_bell)
};

/// Agent -> client.
struct Welcome {
  uint32_t connection_id = 0;  ///< the agent's id for this connection
  uint32_t pid = 0;            ///< the process that serves it (the client's own: no memory is mapped)
  std::vector<uint8_t> worker_address;
  uint64_t max_msg_size = 0;
  uint32_t window_msgs = 0;
  uint64_t window_bytes = 0;
  std::vector<std::string> services;
  uint32_t ring_slots = 0;
  std::vector<uint8_t> ring_descriptor;
  uint32_t bell_fd = kNoBell;
  Facts facts;
};

/// Agent -> client, instead of a Welcome: why it will not serve this
/// connection (a limit reached, a malformed hello).
struct Refusal {
  Code code = Code::kAgain;
  std::string message;
};

/// The token a connection presents (ChannelConfig::session): "" this
/// process's ($OUTBOARD_SESSION_TOKEN, else random, made once), "new" a
/// fresh random one, else 64 hex digits. kBadConfig naming a bad one.
Result<SessionToken> session_token(const std::string& session);

/// Whole messages, header included.
std::vector<uint8_t> encode(const Hello& hello);
std::vector<uint8_t> encode(const Welcome& welcome);
std::vector<uint8_t> encode(const Refusal& refusal);

/// Payload decoders (after the header). kInvalidArgument naming the field,
/// its value and its limit.
Result<Hello> decode_hello(std::span<const uint8_t> payload);
Result<Welcome> decode_welcome(std::span<const uint8_t> payload);
Result<Refusal> decode_refusal(std::span<const uint8_t> payload);

/// Assembles one message from a socket read a little at a time: want()
/// says how many more bytes to read, so nothing past the message is taken.
class BootReader {
 public:
  /// Bytes still needed; 0 once a whole message is in.
  [[nodiscard]] size_t want() const;
  /// Takes `bytes` (at most want()); kInvalidArgument when the header is
  /// not ours or announces more than kMaxBootMessage.
  Status feed(std::span<const uint8_t> bytes);
  /// Feeds from `bytes` until the message is whole; what follows it stays in `bytes`.
  Status feed_until_done(std::span<const uint8_t>& bytes);
  [[nodiscard]] bool done() const { return header_ok_ && want() == 0; }
  [[nodiscard]] BootKind kind() const { return kind_; }
  [[nodiscard]] std::span<const uint8_t> payload() const {
    return std::span<const uint8_t>(buf_).subspan(kBootHeaderBytes);
  }

 private:
  std::vector<uint8_t> buf_;
  size_t length_ = 0;
  bool header_ok_ = false;
  BootKind kind_ = BootKind::kHello;
};

/// Reads one message from a non-blocking socket before the deadline.
struct BootMessage {
  BootKind kind;
  std::vector<uint8_t> payload;
};
Result<BootMessage> read_boot_message(int fd, Deadline deadline, std::string_view what);

/// `message` (whole, header included) sealed as message `number` of the
/// socket's stream, framed as a kSealed message.
Result<std::vector<uint8_t>> seal_message(secure::Sealer& sealer, uint64_t number,
                                          std::span<const uint8_t> message);
/// Opens a kSealed payload and decodes the message inside (never itself sealed).
Result<BootMessage> open_message(secure::Sealer& sealer, uint64_t number, std::vector<uint8_t> payload);

/// Client side of a secure bootstrap: the TLS handshake on `fd` before the
/// deadline, resuming the session last kept for `peer` if there is one. An
/// agent that answers it with a Refusal (one without keys): that refusal's
/// code and message.
Result<std::unique_ptr<secure::Tls>> tls_connect(int fd, std::shared_ptr<secure::Context> context, std::string peer,
                                                 Deadline deadline, std::string_view what);
/// The agent's answer to a Hello sent through `tls`: its sealed message,
/// opened with `in`; a plaintext Refusal; or kAuthentication with the TLS
/// alert it sent instead (our certificate or PSK refused).
Result<BootMessage> read_secure_answer(int fd, secure::Tls& tls, secure::Sealer& in, Deadline deadline,
                                       std::string_view what);

}  // namespace outboard::channel
