// The process's channel hub: owns the UCX workers, routes incoming frames to
// connections by id, polls the connections' small-frame rings (ring.h), and
// runs the wait loops. Thread mode: multi, all state guarded by the workers'
// (recursive) mutex.
//
// Two workers: data endpoints (worker addresses: shared memory on one host)
// live on the data worker, polled on every progress() (every 4th while rings
// carry the traffic); bootstrap and liveness endpoints (sockaddr, always TCP
// in UCX 1.13) and the agent's listener live on the control worker, polled
// every kControlIntervalNs. Polling a TCP interface is an epoll_wait
// syscall, so sharing one worker put a syscall on every spin of the
// shared-memory hot path (64 B round trip 1.8 -> 1.1 us measured without it).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "channel/frame.h"
#include "outboard/channel.h"
#include "transport/transport.h"

namespace outboard::channel {

using Lock = std::unique_lock<std::recursive_mutex>;
/// Handles a kHello arriving on a bootstrap endpoint (the agent's listener).
using HelloFn = std::function<void(const FrameHeader&, transport::IncomingAm&)>;

class Hub {
 public:
  static Result<std::shared_ptr<Hub>> get(const ChannelConfig& config);
  ~Hub();

  /// Data endpoints, regions, fences.
  transport::Worker& worker() { return *worker_; }
  /// Bootstrap endpoints and listeners.
  transport::Worker& control() { return *control_; }
  std::recursive_mutex& mutex() { return worker_->mutex(); }
  /// Readable when either worker has events (after arm()).
  [[nodiscard]] int event_fd() const { return epoll_fd_; }
  /// Arms both workers; kAgain when events are pending. Lock held.
  Status arm();

  uint32_t add(Connection::Impl* conn);
  void remove(uint32_t id);
  /// Polls `conn`'s rx_ring on every progress() round until removed.
  void add_ring(Connection::Impl* conn) { rings_.push_back(conn); }
  void remove_ring(Connection::Impl* conn) { std::erase(rings_, conn); }
  void set_hello_handler(HelloFn fn) { hello_ = std::move(fn); }

  /// Runs `fn` after the current ucp_worker_progress returns: UCX forbids
  /// progress (so any blocking call) inside its callbacks, and user code
  /// (services, response callbacks) may block.
  void defer(std::function<void()> fn) { deferred_.push_back(Deferred{std::move(fn), {}, {}, {}, {}}); }
  /// Deferred delivery of a received frame to `conn` (the hot path: no
  /// closure to allocate), in order with the other deferred work.
  void defer_delivery(std::shared_ptr<Connection::Impl> conn, const FrameHeader& h, Buffer data, Status error) {
    deferred_.push_back(Deferred{{}, std::move(conn), h, std::move(data), std::move(error)});
  }

  /// Runs `poll` on every progress() round (lock held) until it returns
  /// false. Memory written by a peer's one-sided put raises no event, so
  /// while any poller is registered wait_until() busy-polls, never sleeps.
  /// Pollers do not run inside a progress() nested in one of them.
  void add_poller(std::function<bool()> poll) { (in_pollers_ ? added_ : pollers_).push_back(std::move(poll)); }

  /// Worker progress, deferred work, pollers, request-deadline checks. Lock held.
  unsigned progress();
  /// progress() until a stretch of rounds long enough to include UCX finds
  /// nothing, or `max_rounds`. Lock held.
  unsigned progress_until_idle(unsigned max_rounds);
  /// True while UCX runs our handler of an incoming frame, where nothing
  /// may block or progress. Lock held.
  [[nodiscard]] bool in_ucx_callback() const { return in_ucx_; }
  /// Runs `fn` on whichever thread next progresses the hub. Thread mode:
  /// any thread, without the hub's lock (a busy progress thread barely
  /// releases it); wakes a thread sleeping in wait_until().
  void post(std::function<void()> fn);

  /// Progresses until `done()` or the deadline: busy-polls for `spin_us`,
  /// then sleeps on the event fd with the lock released. Returns done().
  bool wait_until(Lock& lock, Deadline deadline, uint32_t spin_us, const std::function<bool()>& done);

 private:
  Hub(std::shared_ptr<transport::Worker> worker, std::shared_ptr<transport::Worker> control, int epoll_fd,
      int wake_fd);
  unsigned run_posted();
  void on_am(transport::IncomingAm& am);
  /// `ring_owner`: the connection whose ring held the frame, which it must name.
  void handle_am(transport::IncomingAm& am, Connection::Impl* ring_owner = nullptr);
  unsigned poll_rings();
  /// Closes `owner`, whose peer wrote `what` into its ring.
  void fail_ring_owner(Connection::Impl& owner, const std::string& what);
  /// Marks every ring asleep; false, none marked, if one holds a frame.
  bool sleep_rings();
  void wake_rings();
  /// Sleeps until an event or `timeout_ms`, the lock released meanwhile.
  void sleep(Lock& lock, int timeout_ms);

  std::shared_ptr<transport::Worker> worker_;
  std::shared_ptr<transport::Worker> control_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd in epoll_fd_, written by post()
  std::mutex posted_mu_;
  std::vector<std::function<void()>> posted_;
  std::atomic<bool> has_posted_{false};
  uint64_t next_control_ns_ = 0;
  std::unordered_map<uint32_t, Connection::Impl*> conns_;
  uint32_t next_id_ = 1;
  HelloFn hello_;
  std::vector<Connection::Impl*> rings_;  // connections with an rx_ring
  bool rings_asleep_ = false;
  bool ucx_every_round_ = true;  // false while rings carry the traffic
  struct Deferred {
    std::function<void()> fn;  // empty: a delivery
    std::shared_ptr<Connection::Impl> conn;
    FrameHeader h;
    Buffer data;
    Status error;
  };
  void run(Deferred& d);
  std::vector<Deferred> deferred_;
  void run_pollers();
  std::vector<std::function<bool()>> pollers_;
  std::vector<std::function<bool()>> added_;  // by pollers while they run: pollers_ must not grow under them
  bool in_pollers_ = false;
  bool in_ucx_ = false;
  unsigned polls_ = 0;
  uint64_t clock_ns_ = 0;  // now_ns() at progress()'s last clock read (every 16th round)
  uint64_t next_tick_ns_ = 0;
};

}  // namespace outboard::channel
