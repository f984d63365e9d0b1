// The host<->agent channel: ordered, reliable, credit-flow-controlled
// messages and requests over UCX active messages, plus a one-sided data path
// (registered regions, put/get, write-with-notify).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outboard/buffer.h"
#include "outboard/clock.h"
#include "outboard/memory_kind.h"
#include "outboard/secure_config.h"
#include "outboard/status.h"

namespace outboard {

/// Limits and timing of one side of a channel. Each is a command-line option
/// of the agent and a key of its --json file (names in the comments).
struct ChannelConfig {
  uint64_t max_msg_size = 64ull << 20;       ///< --max-msg-size: largest message we accept
  uint32_t recv_window_msgs = 256;           ///< --recv-window-msgs: credits granted to the peer
  uint64_t recv_window_bytes = 128ull << 20; ///< --recv-window-bytes (raised to max_msg_size)
  uint32_t max_outstanding_requests = 4096;  ///< --max-outstanding-requests per connection
  int64_t connect_timeout_ms = 5000;         ///< --connect-timeout-ms
  /// --keepalive-ms: TCP keepalive of the bootstrap socket, whose end is the
  /// peer's end (rounded up to whole seconds; a peer process that dies closes it at once).
  uint64_t keepalive_ms = 200;
  /// --spin-us: the most a wait busy-polls before it sleeps on the event fd. A
  /// small request's round trip (~20 µs) fits; an answer due later costs a
  /// poll of its whole gap against ~10-20 µs for a sleep and its wake-up, and
  /// a loaded collector's answers (~100-300 µs apart) would keep a 200 µs
  /// window polling (README, "Waiting"). An agent polls kAgentSpinUs.
  uint32_t spin_us = 50;
  /// --adaptive-spin: a wait polls only while this thread's recent answers
  /// came within spin_us of it going idle (a small request's round trip: ~10 µs
  /// saved per answer), and sleeps at once when they came later (an 8 KB
  /// tokenization: polling would only burn the CPU offload frees). false:
  /// always poll spin_us.
  bool adaptive_spin = true;
  /// --map-peer-regions: reach a peer's region that UCX maps into this
  /// process (shared memory, one host) by CPU copies; false: through UCX.
  bool map_peer_regions = true;
  /// Data crosses the network even to an agent on this host: both sides exchange worker
  /// addresses without shared-memory transports, and no ring (agent to agent, where a host's
  /// agents stand in for nodes' and their link is what is measured). Needs a network transport
  /// in both UCX contexts (an agent's same-host sessions have TCP when its UCX_TLS names it).
  bool network_only = false;
  /// --ring-slots (a power of two): slots of the ring in which a peer that maps this side's
  /// memory writes small frames (up to ~240 B), and this side into the
  /// peer's; 0 on either side: every frame through UCX.
  uint32_t ring_slots = 64;
  /// Which agent session a connection joins: connections that present the
  /// same token share one session (one process of the agent's, trusting
  /// each other); a session never serves two tokens. Empty: this process's
  /// token ($OUTBOARD_SESSION_TOKEN, 64 hex digits, else random, made once
  /// per process); "new": a session of its own; else 64 hex digits.
  std::string session;
  SecureConfig secure;
};

/// A one-way message or a write-with-notify completion delivered to receive().
struct Incoming {
  enum class Kind : uint8_t { kMessage, kNotify };
  Kind kind = Kind::kMessage;
  Buffer data;          ///< kMessage: the payload
  uint64_t cookie = 0;  ///< kNotify: the writer's cookie
  uint64_t offset = 0;  ///< kNotify: where the data landed in our region
  uint64_t length = 0;  ///< kNotify: how many bytes
};

/// Local memory registered for one-sided access by the peer. Move-only.
namespace channel::detail {
/// The library's way into these classes (src/channel/access.h): their
/// constructors from an Impl and their Impl. Nothing else is a friend.
struct Access;
}  // namespace channel::detail

class Region {
 public:
  Region();
  Region(Region&&) noexcept;
  Region& operator=(Region&&) noexcept;
  ~Region();
  /// A device pointer for MemoryKind::kCuda: not for the CPU.
  [[nodiscard]] uint8_t* data() const;
  [[nodiscard]] size_t size() const;
  [[nodiscard]] MemoryKind kind() const;
  /// Bytes to send to the peer, which imports them with import_region().
  [[nodiscard]] std::span<const uint8_t> descriptor() const;

  struct Impl;

 private:
  friend struct channel::detail::Access;
  explicit Region(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// A peer's region imported on one connection. Every access is checked
/// against its length on this side before anything is sent.
class RemoteRegion {
 public:
  RemoteRegion();
  RemoteRegion(RemoteRegion&&) noexcept;
  RemoteRegion& operator=(RemoteRegion&&) noexcept;
  ~RemoteRegion();
  [[nodiscard]] uint64_t size() const;
  /// True when the peer's region is mapped into this process (shared memory
  /// on one host): puts and gets are CPU copies made in the call, and
  /// put_signal's signal is a release store. Else UCX carries them.
  [[nodiscard]] bool mapped() const;
  /// Bytes [offset, offset + length) of a mapped region, for a copy straight from one peer's
  /// region into another's (one copy instead of a get and a put). Valid while this object lives.
  /// kOutOfRange outside it (naming the range and the size), kInvalidArgument when not mapped.
  [[nodiscard]] Result<std::span<uint8_t>> mapped_span(uint64_t offset, uint64_t length) const;
  /// True when puts and gets are complete when they return, with nothing to
  /// flush: a mapped region, or a peer's exposed memory (the kernel copies it).
  [[nodiscard]] bool in_call() const;

  struct Impl;

 private:
  friend struct channel::detail::Access;
  explicit RemoteRegion(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

using ResponseFn = std::function<void(Result<Buffer>)>;

/// Version of the transport library (UCX) carrying the channel.
std::string transport_version();
/// Whether that UCX carries GPU memory (MemoryKind::kCuda): built with CUDA,
/// with the CUDA driver present. Regions of that kind are refused elsewhere.
bool transport_carries_gpu_memory();
/// The code that seals a secure connection's AES-256-GCM frames in this build on this CPU:
/// "ipsec-mb 1.3.0 (AVX-512)", or OpenSSL's version.
std::string seal_engine();

/// One end of a channel between a client and an agent.
///
/// Thread mode: multi. Calls from several threads are serialised on the
/// process's UCX worker; a thread blocked in a wait does not hold it.
/// Callbacks (ResponseFn) run inside progress() or a blocking call.
class Connection {
 public:
  /// Connects to an agent at "host:port"; fails with kTimedOut after
  /// config.connect_timeout_ms, kConnectionReset if nobody answers.
  [[nodiscard]] static Result<std::unique_ptr<Connection>> connect(const std::string& address,
                                                                   const ChannelConfig& config = {});
  ~Connection();

  // ---- two-sided
  /// One-way message to the peer's receive() queue, or to a named service
  /// of the agent. Blocks until a send credit is free and the payload has
  /// left `payload` (kTimedOut at the deadline). kTooBig (nothing sent,
  /// connection still usable) when over the peer's max_msg_size.
  [[nodiscard]] Status send(std::span<const uint8_t> payload, Deadline deadline, std::string_view service = {});
  /// As send(), but never waits for a credit: kAgain when none is free.
  [[nodiscard]] Status try_send(std::span<const uint8_t> payload, std::string_view service = {});
  /// As send(), but returns once the message is posted (waiting only for a
  /// credit, to the deadline), so many can be in flight: what streaming
  /// needs, since a large message leaves only when the peer fetches it.
  /// `payload` must stay valid until `done` runs (from progress(), wait()
  /// or any blocking call of this connection) with the local completion.
  [[nodiscard]] Status post(std::span<const uint8_t> payload, Deadline deadline, std::string_view service,
                            std::function<void(Status)> done);
  /// Next one-way message or notification; kTimedOut at the deadline.
  [[nodiscard]] Result<Incoming> receive(Deadline deadline);
  /// Request to a named service on the peer; waits for its response.
  [[nodiscard]] Result<Buffer> request(std::string_view service, std::span<const uint8_t> payload,
                                       Deadline deadline);
  /// Asynchronous request: `on_response` runs exactly once (response, error,
  /// or kTimedOut at the deadline). kAgain when no credit is free, unless
  /// `credit` is kWait: then it progresses until some is (or the deadline).
  enum class Credit { kFail, kWait };
  [[nodiscard]] Status submit(std::string_view service, Buffer payload, Deadline deadline,
                              ResponseFn on_response, Credit credit = Credit::kFail);

  // ---- progress and waiting
  /// Drives the connection (and the process's worker); events handled.
  unsigned progress();
  /// progress() until nothing is left to handle (rings and UCX both found
  /// empty), or `max_rounds` rounds: for a loop that polls now and then.
  unsigned progress_until_idle(unsigned max_rounds);
  /// Readable when progress() may have work (for epoll loops): call arm()
  /// first; kAgain from arm() means work is pending, so progress() instead.
  [[nodiscard]] int event_fd() const;
  [[nodiscard]] Status arm();
  /// Waits until progress() has done some work, or the deadline.
  void wait(Deadline deadline);
  /// Progresses until `done()` (checked between rounds, under the
  /// connection's lock: it must be quick and must not call back in) is true;
  /// false at the deadline.
  [[nodiscard]] bool wait_until(Deadline deadline, const std::function<bool()>& done);
  /// Makes threads sleeping in wait_until() re-check their condition: for a
  /// condition another thread's progress made true. Safe from callbacks.
  void wake();

  // ---- one-sided
  /// This process's memory, for peers to reach. kCuda: device memory of
  /// the current (else the first) CUDA device, a cudaMalloc's or a torch
  /// tensor's; kUnsupported, naming why, where UCX has no CUDA support.
  [[nodiscard]] Result<Region> register_memory(void* data, size_t size, MemoryKind kind = MemoryKind::kHost);
  /// Memory allocated by UCX (on one host, peers map it and reach it with CPU
  /// copies). kCuda: kUnsupported, naming why, where UCX has no CUDA support.
  [[nodiscard]] Result<Region> allocate_memory(size_t size, MemoryKind kind = MemoryKind::kHost);
  /// `data` for the agent to copy through the kernel (process_vm_readv and
  /// writev, Linux CMA): no registration and no copy on this side. The agent
  /// accepts it only from a client it checked to be a process of its host and
  /// user (the kernel's word), and reaches no memory but that client's.
  /// Where Yama restricts ptrace, this process lets the agent's process that
  /// serves this connection read and write it (PR_SET_PTRACER: one per
  /// process, the last connection to expose memory).
  [[nodiscard]] Result<Region> expose_memory(void* data, size_t size);
  [[nodiscard]] Result<RemoteRegion> import_region(std::span<const uint8_t> descriptor);
  /// Write/read at `offset` of the peer's region; kOutOfRange when outside it.
  /// Return when the local buffer may be reused (put) or holds the data (get).
  [[nodiscard]] Status put(const RemoteRegion& region, uint64_t offset,
                           std::span<const uint8_t> src, Deadline deadline);
  [[nodiscard]] Status get(const RemoteRegion& region, uint64_t offset, std::span<uint8_t> dst,
                           Deadline deadline);
  /// All earlier puts are complete in the peer's memory.
  [[nodiscard]] Status flush(Deadline deadline);
  /// Orders one-sided operations: those issued after it complete at the
  /// peer after those issued before it (cheaper than flush; no waiting).
  [[nodiscard]] Status fence();
  /// Put `src` at `offset`, then the 8-byte `signal` at `signal_offset`
  /// (a multiple of 8), ordered so that a peer that sees the signal sees the
  /// data (OpenSHMEM's put_signal): the peer polls memory, no message. Both
  /// ranges are checked before anything is sent. Returns as put() does.
  [[nodiscard]] Status put_signal(const RemoteRegion& region, uint64_t offset, std::span<const uint8_t> src,
                                  uint64_t signal_offset, uint64_t signal, Deadline deadline);
  /// Until the 8-byte word at `offset` (a multiple of 8) of our `region`
  /// holds at least `at_least`, as a peer's put_signal() leaves it. Busy-polls
  /// (a peer's put raises no event), progressing the connection as it goes;
  /// kTimedOut at the deadline, naming the word's value.
  [[nodiscard]] Status wait_signal(const Region& region, uint64_t offset, uint64_t at_least, Deadline deadline);
  /// Put, then a notification (kNotify with `cookie`) that the peer receives
  /// only after the data is visible in its region: in its receive() queue, or
  /// handed to the named service of an agent.
  [[nodiscard]] Status put_notify(const RemoteRegion& region, uint64_t offset,
                                  std::span<const uint8_t> src, uint64_t cookie, Deadline deadline,
                                  std::string_view service = {});

  // ---- state
  /// Graceful close: tells the peer, fails local requests with kNotConnected.
  void close();
  [[nodiscard]] bool is_open() const;
  /// Why the connection is not open (ok while open).
  [[nodiscard]] Status close_reason() const;
  [[nodiscard]] uint64_t peer_max_msg_size() const;
  [[nodiscard]] std::vector<std::string> peer_services() const;
  /// What the agent announced about itself when it welcomed this connection
  /// ("tokenize_threads", "graph_threads"); empty on the agent's side.
  [[nodiscard]] std::vector<std::pair<std::string, uint64_t>> agent_info() const;
  /// How this connection is protected, client side: "plaintext", or "TLS 1.3
  /// over X25519, agent <its certificate's subject or psk:identity>", with
  /// ", resumed" when the handshake resumed an earlier session.
  [[nodiscard]] const std::string& security() const;
  /// Every frame is sealed (a secure connection): one-sided access to either
  /// side's memory is refused, so services carry their data in messages.
  [[nodiscard]] bool sealed() const;
  /// Agent side: who the client authenticated as through TLS (its
  /// certificate's subject, or psk:identity); empty for a plaintext client.
  [[nodiscard]] const std::string& peer_identity() const;
  /// Send credits currently free (messages).
  [[nodiscard]] uint32_t send_credits() const;
  /// Runs `fn` once, from progress(), when the peer next returns credits
  /// (for senders that got kAgain and must not block).
  void on_credit(std::function<void()> fn);
  /// UCX lanes of the data endpoint (ucp_ep_print_info text).
  [[nodiscard]] std::string lanes() const;

  /// Identifies the connection on this side (unique while it is open).
  [[nodiscard]] uint32_t id() const;

  struct Impl;

 private:
  friend struct channel::detail::Access;
  /// `owner`: closing on destruction (false for the agent's view of a client).
  Connection(std::shared_ptr<Impl> impl, bool owner);
  std::shared_ptr<Impl> impl_;
  bool owner_ = true;
};

}  // namespace outboard
