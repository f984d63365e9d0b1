// The process's channel hub: owns the UCX worker, routes incoming frames to
// connections by id, and runs the wait loops. Thread mode: multi, all state
// guarded by the worker's (recursive) mutex.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

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

  transport::Worker& worker() { return *worker_; }
  std::recursive_mutex& mutex() { return worker_->mutex(); }

  uint32_t add(Connection::Impl* conn);
  void remove(uint32_t id);
  void set_hello_handler(HelloFn fn) { hello_ = std::move(fn); }

  /// Runs `fn` after the current ucp_worker_progress returns: UCX forbids
  /// progress (so any blocking call) inside its callbacks, and user code
  /// (services, response callbacks) may block.
  void defer(std::function<void()> fn) { deferred_.push_back(std::move(fn)); }

  /// Worker progress, deferred work, request-deadline checks. Lock held.
  unsigned progress();
  /// Progresses until `done()` or the deadline: busy-polls for `spin_us`,
  /// then sleeps on the event fd with the lock released. Returns done().
  bool wait_until(Lock& lock, Deadline deadline, uint32_t spin_us, const std::function<bool()>& done);

 private:
  explicit Hub(std::shared_ptr<transport::Worker> worker);
  void on_am(transport::IncomingAm& am);

  std::shared_ptr<transport::Worker> worker_;
  std::unordered_map<uint32_t, Connection::Impl*> conns_;
  uint32_t next_id_ = 1;
  HelloFn hello_;
  std::deque<std::function<void()>> deferred_;
  uint64_t next_tick_ns_ = 0;
};

}  // namespace outboard::channel
