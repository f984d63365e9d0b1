// Internal state of a Connection, shared by the client (connect) and the
// agent side (channel::Server). Its methods run under the hub's lock
// (OB_HUB_LOCKED); the protocol state they change says so (OB_HUB_GUARDED).
// What is set before the connection is shared (ids, config, services) is not
// marked; `state` is atomic for the lock-free mapped one-sided path.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <optional>
#include <set>

#include "channel/bootstrap.h"
#include "channel/hub.h"
#include "channel/ring.h"
#include "transport/secure.h"
#include "util/budget.h"
#include "util/id_map.h"
#include "util/net.h"

namespace outboard::channel {
/// The agent's traffic counts (its `stats`), kept by its connections and the hub.
struct Counters {
  uint64_t messages_in = 0;
  uint64_t bytes_in = 0;
  uint64_t messages_out = 0;
  uint64_t bytes_out = 0;
  uint64_t errors = 0;
  uint64_t connects = 0;
  uint64_t disconnects = 0;
  uint64_t ring_frames_in = 0;   // frames clients wrote into the agent's rings
  uint64_t ring_frames_out = 0;  // frames the agent wrote into clients' rings
  uint64_t doorbells_out = 0;    // of those, how many woke a sleeping client
  uint64_t doorbells_by_pipe = 0;  // of those, how many through the client's bell pipe (not UCX)
};
}

namespace outboard {

/// Agent side: an open request or unacknowledged one-way message of at least
/// this many bytes counts in its session's memory quotas (--max-session-memory,
/// --max-client-memory, --max-memory) until answered, as a slow service (a
/// tokenize queue) holds it. A plaintext client's smaller ones are bounded by
/// their number (--max-outstanding-requests, the receive window's messages)
/// and stay off the shared counters; a TLS client's count whatever their size,
/// so a tenant holds no more than its --max-client-memory however many
/// connections it opens.
inline constexpr uint64_t kBudgetedRequestBytes = 64 << 10;

/// Completion of one operation that a blocking call waits for. Shared with
/// the UCX callback so a call that gives up never leaves it dangling.
struct Completion {
  bool done = false;
  Status result;
};
using CompletionPtr = std::shared_ptr<Completion>;
inline transport::DoneFn completer(const CompletionPtr& c) {
  return [c](Status st) {
    c->result = std::move(st);
    c->done = true;
  };
}

struct Connection::Impl : std::enable_shared_from_this<Connection::Impl> {
  enum class State { kConnecting, kOpen, kClosed };
  /// Agent side: a request or a one-way message for a service.
  using ServiceFn = std::function<void(Impl&, const channel::FrameHeader&, Buffer)>;

  Impl(std::shared_ptr<channel::Hub> hub, const ChannelConfig& config);
  ~Impl();

  // Incoming frames, from the hub (lock held). `h` is taken by reference,
  // here and in post(): a copy of the struct, read in 16 B moves just after
  // its fields were stored one by one, stalls on store forwarding (~5 ns a
  // copy, several per round trip, measured).
  void on_frame(channel::FrameHeader& h, transport::IncomingAm& am) OB_HUB_LOCKED;
  // Marks the connection closed for `why`, fails everything pending.
  void fail(const Status& why) OB_HUB_LOCKED;
  /// Takes the bootstrap socket, whose end is the peer's end: watched by the
  /// hub from now on. Lock held.
  Status watch_socket(net::Fd fd) OB_HUB_LOCKED;
  // Expires request deadlines.
  void tick(Clock::time_point now) OB_HUB_LOCKED;
  Status response_timeout(uint64_t id) const OB_HUB_LOCKED;

  // Sending (lock held). Credited frames must first acquire(); post()
  // stamps `h` with its sequence number and the credits it returns.
  Status acquire(uint64_t bytes, Deadline deadline, bool wait) OB_HUB_LOCKED;
  void post(channel::FrameHeader& h, std::span<const uint8_t> data, transport::DoneFn done) OB_HUB_LOCKED;
  /// As post(), the endpoint keeping `data` until UCX is done with it.
  void post(channel::FrameHeader& h, Buffer data) OB_HUB_LOCKED;
  /// As post(); `data` is copied only if UCX cannot send it at once.
  void post_copy(channel::FrameHeader& h, std::span<const uint8_t> data) OB_HUB_LOCKED;
  Status wait_done(Deadline deadline, const CompletionPtr& op, const char* what) OB_HUB_LOCKED;
  Status wait_polled(Deadline deadline, const transport::PolledOp& op, const char* what) OB_HUB_LOCKED;
  /// Index of `service` in the peer's list; kNoService for "" (kNotFound if unknown).
  Result<uint32_t> service_index(std::string_view service) const OB_HUB_LOCKED;
  /// Registers a request of `bytes` and fills the header that sends it;
  /// its id, by which forget_request() drops its callback.
  /// `blocking`: the caller waits for it on this thread and watches the
  /// deadline itself; `fn` only records the result (it never blocks or calls
  /// back in), so the response may complete it inside UCX's callback.
  Result<uint64_t> open_request(std::string_view service, size_t bytes, Deadline deadline, ResponseFn fn, bool wait,
                                bool blocking, channel::FrameHeader& h) OB_HUB_LOCKED;
  void forget_request(uint64_t id) OB_HUB_LOCKED;
  /// Agent side: answers request `id` (once; later answers are ignored).
  void respond(uint64_t id, Result<Buffer> result) OB_HUB_LOCKED;
  /// Agent side: one-way message `seq` handled; returns its credit once.
  void acknowledge(uint64_t seq) OB_HUB_LOCKED;
  /// Agent side: fails open requests with `why` and sends kClose.
  void shut_down(const Status& why) OB_HUB_LOCKED;
  /// Receiver consumed a credited frame of `bytes`.
  void consumed(uint64_t bytes) OB_HUB_LOCKED;
  Status check_open() const OB_HUB_LOCKED;
  void start_data_endpoint(std::span<const uint8_t> peer_worker_address) OB_HUB_LOCKED;
  /// Our ring (config.ring_slots, none if 0), polled by the hub; its
  /// descriptor (empty without one) goes to the peer's bind_peer_ring().
  Result<std::vector<uint8_t>> open_ring() OB_HUB_LOCKED;
  /// Small frames go into the peer's ring where it is mapped here (after
  /// start_data_endpoint); a peer without one or out of reach is no error.
  void bind_peer_ring(uint32_t slots, std::span<const uint8_t> descriptor) OB_HUB_LOCKED;
  /// Once its ring is bound: the peer's doorbell is its pipe `bell_fd` (its
  /// Hub::offer_bell) where this process may open it through /proc (`pid`,
  /// held as `process`), else a kDoorbell frame through UCX as before.
  void take_peer_bell(uint32_t bell_fd, pid_t pid, const net::Fd& process) OB_HUB_LOCKED;
  /// What our hello or welcome offers as bell_fd: ours where we have a ring.
  uint32_t offered_bell() OB_HUB_LOCKED;
  /// A region descriptor from the peer, checked against peer_policy first
  /// when the peer is not trusted.
  Result<transport::RemoteKey> import(std::span<const uint8_t> descriptor, bool map) OB_HUB_LOCKED;

  std::shared_ptr<channel::Hub> hub;
  ChannelConfig config;
  uint32_t local_id = 0;
  uint32_t peer_id = 0;
  // Atomic for the lock-free mapped one-sided path (region.cpp), which
  // reads it without the hub's lock.
  std::atomic<State> state{State::kConnecting};
  Status reason OB_HUB_GUARDED;
  std::string peer_address;
  net::Fd socket;               // the bootstrap socket: its end is the peer's end
  transport::Endpoint data_ep;  // worker-address endpoint: shm on one host
  /// Agent side: what the client's region descriptors may name (it is not
  /// trusted). Unset on the client side, which trusts its agent.
  std::optional<transport::DescriptorPolicy> peer_policy;
  /// The peer is in this process (an agent with Isolation::kNone and its
  /// client): UCX may hand either side a raw pointer into the other's
  /// memory (its self transport in 1.22), which the other frees when it
  /// goes. So nothing of the peer is mapped here (no ring, no mapped
  /// regions: everything through UCX, under the hub's lock), and the two
  /// close together.
  bool peer_in_process = false;
  /// Client side: the agent's process serving this connection (its welcome),
  /// which expose_memory() lets read this process's memory.
  pid_t peer_pid = 0;
  bool ptracer_set = false;
  /// Secure connections: the keys every frame is sealed and opened with (no
  /// ring then: every frame goes through UCX, sealed).
  std::unique_ptr<secure::FrameSeal> seal;
  std::unique_ptr<channel::RxRing> rx_ring;
  std::unique_ptr<channel::TxRing> tx_ring;
  net::Fd peer_bell;  // our write end of the peer's bell (take_peer_bell), rung instead of a kDoorbell frame

  uint64_t peer_max_msg = 0;
  std::vector<std::string> peer_services;
  channel::Facts agent_info;  // what the agent announced (client side)
  std::string security = "plaintext";  // Connection::security()
  std::string peer_identity;           // agent side: the client's TLS identity ("" plaintext)
  std::vector<std::string> local_services;  // agent side: advertised in the welcome

  // Credits.
  uint32_t send_msgs OB_HUB_GUARDED = 0;
  uint64_t send_bytes OB_HUB_GUARDED = 0;
  uint32_t return_msgs OB_HUB_GUARDED = 0;
  uint64_t return_bytes OB_HUB_GUARDED = 0;
  // Credited frames received whose credit has not gone back: a peer that
  // sends past the window it was granted is cut off, not buffered for.
  uint64_t held_msgs OB_HUB_GUARDED = 0;
  uint64_t held_bytes OB_HUB_GUARDED = 0;
  bool peer_starved OB_HUB_GUARDED = false;
  bool want_sent OB_HUB_GUARDED = false;

  // Ordering: frames held until all earlier ones are delivered.
  struct RxFrame {
    channel::FrameHeader h;
    Buffer data;
    bool ready = false;
    Status error;
    std::vector<uint8_t> wire;  // a sealed frame's header as sent (its associated data)
  };
  uint64_t next_tx_seq OB_HUB_GUARDED = 0;
  uint64_t next_rx_seq OB_HUB_GUARDED = 0;
  std::map<uint64_t, RxFrame> reorder OB_HUB_GUARDED;  // bounded: frames beyond the window close the connection

  std::deque<Incoming> inbox OB_HUB_GUARDED;
  ServiceFn on_service;               // agent side
  std::function<void(uint32_t)> on_closed;  // agent side: release per-connection state
  channel::Counters* counters = nullptr;  // agent side

  struct Pending {
    ResponseFn fn;
    Clock::time_point deadline;
    bool blocking = false;  // open_request()'s: no entry in `deadlines`
  };
  /// Deliveries of this connection queued in the hub: while any is, a frame
  /// must queue behind it, whatever its kind.
  uint32_t deferred_deliveries OB_HUB_GUARDED = 0;
  /// Agent side, by service index: its frames may be handled inside UCX's callback.
  std::vector<bool> inline_services;
  /// Whether frame `h`, next in order, may be delivered inside UCX's callback.
  [[nodiscard]] bool deliverable_inline(const channel::FrameHeader& h) const OB_HUB_LOCKED;
  uint64_t next_request_id OB_HUB_GUARDED = 1;
  IdMap<Pending> pending OB_HUB_GUARDED;
  std::set<std::pair<Clock::time_point, uint64_t>> deadlines OB_HUB_GUARDED;
  // Agent side, id -> payload bytes (the credit returned with the answer):
  IdMap<uint64_t> open_requests OB_HUB_GUARDED;  // not yet answered
  /// Agent side: the session's budget, in which open requests count (a TLS
  /// client's in its identity's --max-client-requests), and what open
  /// requests and one-way messages hold (budgeted()).
  std::shared_ptr<SessionBudget> budget;
  IdMap<uint64_t> open_messages OB_HUB_GUARDED;  // one-way by seq, not yet acknowledged
  std::vector<std::function<void()>> credit_waiters OB_HUB_GUARDED;

  /// The hub runs a deferred delivery (dropped if the connection closed meanwhile).
  void deliver_deferred(const channel::FrameHeader& h, Buffer data, const Status& error) OB_HUB_LOCKED;

 private:
  void send_sealed(channel::FrameHeader& h, std::span<const uint8_t> data) OB_HUB_LOCKED;
  /// Opens frame `h`, the next in order, into `out` (kAuthentication if it does not authenticate).
  Status unseal(const channel::FrameHeader& h, std::span<const uint8_t> header, std::span<const uint8_t> sealed,
                uint8_t* out) const OB_HUB_LOCKED;
  void defer_deliver(const channel::FrameHeader& h, Buffer data, Status error) OB_HUB_LOCKED;
  void deliver(const channel::FrameHeader& h, Buffer data, const Status& error) OB_HUB_LOCKED;
  // deliver()'s phases, by frame type.
  void take_credits(const channel::FrameHeader& h) OB_HUB_LOCKED;
  void deliver_message(const channel::FrameHeader& h, Buffer data, const Status& error) OB_HUB_LOCKED;
  void deliver_notify(const channel::FrameHeader& h, Buffer data) OB_HUB_LOCKED;
  void deliver_close(const channel::FrameHeader& h, const Buffer& data) OB_HUB_LOCKED;
  void drain() OB_HUB_LOCKED;
  void complete_request(uint64_t id, Result<Buffer> result) OB_HUB_LOCKED;
  /// Agent side: opens request `id` of `bytes` for a service; false when it
  /// was answered (over --max-outstanding-requests or --max-client-requests)
  /// or the peer cut off.
  bool admit_request(uint64_t id, uint64_t bytes) OB_HUB_LOCKED;
  /// Returns the credit of a request of `bytes` and sends its answer.
  void answer(uint64_t id, uint64_t bytes, Result<Buffer> result) OB_HUB_LOCKED;
  /// Takes what an open request of `bytes` holds of the budget (a request of
  /// its tenant's, and its bytes where budgeted()); release_request() gives it back.
  Status hold_request(uint64_t bytes);
  void release_request(uint64_t bytes);
  /// Whether a held request or message of `bytes` counts in the memory quotas (kBudgetedRequestBytes).
  [[nodiscard]] bool budgeted(uint64_t bytes) const {
    return budget && bytes != 0 && (bytes >= kBudgetedRequestBytes || budget->grouped());
  }
  /// Gives back what the unacknowledged one-way messages hold.
  void release_messages() OB_HUB_LOCKED;
  /// Sequence number and returned credits on an outgoing frame.
  void stamp(channel::FrameHeader& h, size_t bytes) OB_HUB_LOCKED;
  /// Puts a stamped frame into the peer's ring; false: send it through UCX.
  bool post_to_ring(const channel::WireHeader& w, std::span<const uint8_t> data) OB_HUB_LOCKED;
  void maybe_return_credits() OB_HUB_LOCKED;
  /// Counts a credited frame against the window granted to the peer;
  /// false (and the connection failed) when it is over.
  bool hold_credit(uint64_t bytes) OB_HUB_LOCKED;
  /// Stops handling the peer's frames and fails the connection once out of
  /// UCX's callback: the peer broke the protocol.
  void cut_off(const Status& why) OB_HUB_LOCKED;
  bool broken OB_HUB_GUARDED = false;
  void on_socket_ready() OB_HUB_LOCKED;
};

}  // namespace outboard
