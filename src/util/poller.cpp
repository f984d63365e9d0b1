#include "util/poller.h"

#include <sys/epoll.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace outboard::net {

Result<Poller> Poller::create() {
  Fd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll.valid()) return Status(Code::kIoError, std::string("epoll_create1: ") + std::strerror(errno));
  return Poller(std::move(epoll));
}

Status Poller::add(int fd, std::function<void()> on_ready) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
    return {Code::kIoError, "epoll_ctl add fd " + std::to_string(fd) + ": " + std::strerror(errno)};
  handlers_[fd] = std::make_shared<std::function<void()>>(std::move(on_ready));
  return {};
}

void Poller::remove(int fd) {
  if (handlers_.erase(fd) != 0) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
}

unsigned Poller::wait(int timeout_ms) {
  epoll_event events[kMaxEvents];
  const int n = ::epoll_wait(epoll_.get(), events, kMaxEvents, timeout_ms);
  unsigned ran = 0;
  for (int i = 0; i < n; ++i) {
    // Per event: an earlier handler may have removed (and closed) this fd.
    auto it = handlers_.find(events[i].data.fd);
    if (it == handlers_.end()) continue;
    auto handler = it->second;
    (*handler)();
    ++ran;
  }
  return ran;
}

}  // namespace outboard::net
