// The process's channel hub: owns the UCX worker, routes incoming frames to
// connections by id, polls the connections' small-frame rings (ring.h),
// watches their bootstrap sockets (whose end is the peer's end), and runs
// the wait loops. Thread mode: multi, all state guarded by the worker's
// (recursive) mutex.
//
// Data endpoints (worker addresses: shared memory on one host) live on the
// worker, polled on every progress() (every 4th while rings carry the
// traffic). The watched sockets are polled every kWatchIntervalNs while
// busy: an epoll_wait is a syscall, and one on every spin of the
// shared-memory hot path cost the 64 B round trip 1.8 -> 1.1 us when the
// bootstrap was a second UCX worker polled there.
#pragma once

#include <unistd.h>

#include <algorithm>
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
#include "util/mutex.h"
#include "util/poller.h"

namespace outboard::channel {

using Lock = RecursiveLock;

/// Declares what the hub's lock (the process's UCX lock) guards, and which
/// functions run with it held.
#define OB_HUB_GUARDED OB_GUARDED_BY(::outboard::transport::process_mutex)
#define OB_HUB_LOCKED OB_REQUIRES(::outboard::transport::process_mutex)

/// How a wait polls before it sleeps (ChannelConfig::spin_us, adaptive_spin).
struct Spin {
  uint32_t us = 0;
  bool adaptive = false;
  [[nodiscard]] uint64_t window_ns() const { return uint64_t{us} * 1000; }
};
inline Spin spin_of(const ChannelConfig& c) { return {c.spin_us, c.adaptive_spin}; }

/// Adaptive spinning's memory, one per waiting thread: an average (weight
/// 1/2^kShift) of how long its waits stayed idle before something arrived,
/// each gap counted up to kCapSpins spin windows so that one late answer
/// does not stop the polling for long. A wait polls while the average is
/// within its spin window.
class IdleGaps {
 public:
  static constexpr unsigned kShift = 2;
  static constexpr uint64_t kCapSpins = 2;
  void learn(uint64_t gap_ns, Spin spin) {
    const uint64_t gap = std::min(gap_ns, kCapSpins * spin.window_ns());
    average_ns_ = average_ns_ + (gap >> kShift) - (average_ns_ >> kShift);
  }
  /// How long a wait that just went idle polls before it sleeps.
  [[nodiscard]] uint64_t spin_ns(Spin spin) const {
    return !spin.adaptive || average_ns_ <= spin.window_ns() ? spin.window_ns() : 0;
  }
  [[nodiscard]] uint64_t average_ns() const { return average_ns_; }

 private:
  uint64_t average_ns_ = 0;
};

class Hub {
 public:
  /// The process's hub, created on first use (`transport` sets up its UCX
  /// context then; later calls share it, whatever they pass).
  static Result<std::shared_ptr<Hub>> get(const transport::TransportConfig& transport = {});

  /// Data endpoints, regions, fences.
  transport::Worker& worker() { return *worker_; }
  RecursiveMutex& mutex() OB_RETURN_CAPABILITY(transport::process_mutex) { return transport::process_mutex; }
  /// Readable when the worker or a watched fd has events (after arm()).
  [[nodiscard]] int event_fd() const { return epoll_fd_.get(); }
  /// The pipe a peer process on this host rings (a write of a byte) when it
  /// publishes into our sleeping ring, for a hello or welcome to offer: its
  /// own write end (net::open_peer_pipe) wakes us at a futex's cost, where a
  /// kDoorbell frame through UCX also costs both sides UCX's signal socket.
  /// From then on every arm() empties it. Lock held.
  int offer_bell() OB_HUB_LOCKED {
    bell_offered_ = true;
    return bell_.read.get();
  }
  /// Arms the worker (and resets the bell, which may have rung for an earlier
  /// sleep or woken whoever polls event_fd()); kAgain when events are
  /// pending. Lock held.
  Status arm() OB_HUB_LOCKED;

  uint32_t add(Connection::Impl* conn) OB_HUB_LOCKED;
  void remove(uint32_t id) OB_HUB_LOCKED;
  /// The connection of this process with local id `id`, if any. Lock held.
  [[nodiscard]] Connection::Impl* find(uint32_t id) const OB_HUB_LOCKED {
    auto it = conns_.find(id);
    return it == conns_.end() ? nullptr : it->second;
  }
  /// Polls `conn`'s rx_ring on every progress() round until removed.
  void add_ring(Connection::Impl* conn) OB_HUB_LOCKED { rings_.push_back(conn); }
  void remove_ring(Connection::Impl* conn) OB_HUB_LOCKED { std::erase(rings_, conn); }
  /// Calls `on_ready` from progress() (lock held) while `fd` is readable or
  /// hung up, until unwatch(fd): sockets whose end means a peer's end, and
  /// the agent's control socket. Lock held.
  Status watch(int fd, std::function<void()> on_ready) OB_HUB_LOCKED;
  void unwatch(int fd) OB_HUB_LOCKED;

  /// Runs `fn` after the current ucp_worker_progress returns: UCX forbids
  /// progress (so any blocking call) inside its callbacks, and user code
  /// (services, response callbacks) may block.
  void defer(std::function<void()> fn) OB_HUB_LOCKED { deferred_.push_back(Deferred{std::move(fn), {}, {}, {}, {}}); }
  /// Deferred delivery of a received frame to `conn` (the hot path: no
  /// closure to allocate), in order with the other deferred work.
  void defer_delivery(std::shared_ptr<Connection::Impl> conn, const FrameHeader& h, Buffer data, Status error)
      OB_HUB_LOCKED {
    deferred_.push_back(Deferred{{}, std::move(conn), h, std::move(data), std::move(error)});
  }

  /// Runs `poll` on every progress() round (lock held) until it returns
  /// false. Memory written by a peer's one-sided put raises no event, so
  /// while any poller is registered wait_until() busy-polls, never sleeps.
  /// Pollers do not run inside a progress() nested in one of them.
  void add_poller(std::function<bool()> poll) OB_HUB_LOCKED { (in_pollers_ ? added_ : pollers_).push_back(std::move(poll)); }

  /// Worker progress, deferred work, pollers, request-deadline checks. Lock held.
  unsigned progress() OB_HUB_LOCKED;
  /// progress() until a stretch of rounds long enough to include UCX finds
  /// nothing, or `max_rounds`. Lock held.
  unsigned progress_until_idle(unsigned max_rounds) OB_HUB_LOCKED;
  /// True while UCX runs our handler of an incoming frame, where nothing
  /// may block or progress. Lock held.
  [[nodiscard]] bool in_ucx_callback() const OB_HUB_LOCKED { return in_ucx_; }
  /// Wakes a thread asleep in wait_until() to re-check its condition.
  /// Async-signal-safe (an atomic store and an eventfd write).
  void wake() {
    has_posted_.store(true, std::memory_order_release);  // so that progress() reads the eventfd back
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t r = ::write(wake_fd_.get(), &one, sizeof one);
  }
  /// Runs `fn` on whichever thread next progresses the hub. Thread mode:
  /// any thread, without the hub's lock (a busy progress thread barely
  /// releases it); wakes a thread sleeping in wait_until().
  void post(std::function<void()> fn);

  /// Progresses until `done()` or the deadline: busy-polls for `spin.us`
  /// (adaptive: only while this thread's recent idle gaps were that short),
  /// then sleeps on the event fd with the lock released. Returns done().
  bool wait_until(Deadline deadline, Spin spin, const std::function<bool()>& done)
      OB_REQUIRES(transport::process_mutex);

 private:
  struct Bell {
    net::Fd read;   // in epoll_fd_
    net::Fd write;  // never written here: held so that the read end never hangs up
  };
  Hub(std::shared_ptr<transport::Worker> worker, net::Fd epoll_fd, net::Poller watched, net::Fd wake_fd, Bell bell);
  unsigned run_posted() OB_HUB_LOCKED;
  void on_am(transport::IncomingAm& am) OB_HUB_LOCKED;
  /// `ring_owner`: the connection whose ring held the frame, which it must name.
  void handle_am(transport::IncomingAm& am, Connection::Impl* ring_owner = nullptr) OB_HUB_LOCKED;
  unsigned poll_rings() OB_HUB_LOCKED;
  /// Closes `owner`, whose peer wrote `what` into its ring.
  void fail_ring_owner(Connection::Impl& owner, const std::string& what) OB_HUB_LOCKED;
  /// Marks every ring asleep; false, none marked, if one holds a frame.
  bool sleep_rings() OB_HUB_LOCKED;
  void wake_rings() OB_HUB_LOCKED;
  /// Runs the handlers of watched fds that are ready.
  unsigned poll_watched() OB_HUB_LOCKED;
  /// Whether a connection waits for a request's deadline.
  [[nodiscard]] bool deadlines_pending() const OB_HUB_LOCKED;
  /// Sleeps until an event or `timeout_ms`, the lock released meanwhile.
  void sleep(int timeout_ms) OB_REQUIRES(transport::process_mutex);

  std::shared_ptr<transport::Worker> worker_;
  net::Fd epoll_fd_;
  net::Poller watched_;  // its own epoll, itself in epoll_fd_
  net::Fd wake_fd_;      // eventfd in epoll_fd_, written by wake()
  Bell bell_;            // written by peers (offer_bell()), emptied by arm()
  bool bell_offered_ OB_HUB_GUARDED = false;
  bool watch_due_ OB_HUB_GUARDED = false;  // a sleep ended: poll the watched fds on the next round
  Mutex posted_mu_;
  std::vector<std::function<void()>> posted_ OB_GUARDED_BY(posted_mu_);
  std::atomic<bool> has_posted_{false};
  uint64_t next_watch_ns_ = 0;
  std::unordered_map<uint32_t, Connection::Impl*> conns_ OB_HUB_GUARDED;
  uint32_t next_id_ OB_HUB_GUARDED = 1;
  std::vector<Connection::Impl*> rings_ OB_HUB_GUARDED;  // connections with an rx_ring
  bool rings_asleep_ OB_HUB_GUARDED = false;
  bool ucx_every_round_ = true;  // false while rings carry the traffic
  struct Deferred {
    std::function<void()> fn;  // empty: a delivery
    std::shared_ptr<Connection::Impl> conn;
    FrameHeader h;
    Buffer data;
    Status error;
  };
  void run(Deferred& d) OB_HUB_LOCKED;
  std::vector<Deferred> deferred_ OB_HUB_GUARDED;  // run from deferred_head_ on, in order
  size_t deferred_head_ OB_HUB_GUARDED = 0;
  void run_pollers() OB_HUB_LOCKED;
  std::vector<std::function<bool()>> pollers_ OB_HUB_GUARDED;
  std::vector<std::function<bool()>> added_ OB_HUB_GUARDED;  // by pollers while they run: pollers_ must not grow under them
  bool in_pollers_ OB_HUB_GUARDED = false;
  bool in_ucx_ OB_HUB_GUARDED = false;
  unsigned polls_ = 0;
  uint64_t clock_ns_ = 0;  // now_ns() at progress()'s last clock read (every 16th round)
  uint64_t next_tick_ns_ = 0;
};

}  // namespace outboard::channel
