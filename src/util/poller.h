// A small epoll loop: the agent's listener process, which never touches UCX,
// waits on its sockets here. Thread mode: single.
#pragma once

#include <functional>
#include <memory>
#include <unordered_map>

#include "outboard/status.h"
#include "util/net.h"

namespace outboard::net {

class Poller {
 public:
  static Result<Poller> create();

  /// Calls `on_ready` from wait() while `fd` is readable (or hung up).
  Status add(int fd, std::function<void()> on_ready);
  void remove(int fd);
  /// Waits up to `timeout_ms` and runs the handlers of the ready fds (at
  /// most kMaxEvents); returns how many ran.
  unsigned wait(int timeout_ms);
  [[nodiscard]] bool empty() const { return handlers_.empty(); }
  /// Readable while a watched fd is: a poller can sit in another's epoll set.
  [[nodiscard]] int fd() const { return epoll_.get(); }

  static constexpr int kMaxEvents = 64;

 private:
  explicit Poller(Fd epoll) : epoll_(std::move(epoll)) {}
  Fd epoll_;
  std::unordered_map<int, std::shared_ptr<std::function<void()>>> handlers_;
};

}  // namespace outboard::net
