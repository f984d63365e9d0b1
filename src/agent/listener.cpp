#include "agent/listener.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "outboard/log.h"

OB_LOG_MODULE("listener");

namespace outboard::agent {

namespace {
constexpr int kBacklog = 1024;
// Out of descriptors: accepting again at once would find none either, and
// a listener woken by the same pending connection would spin.
constexpr int64_t kAcceptBackoffMs = 100;
constexpr int kMaxTickMs = 100;
constexpr unsigned kAcceptsPerWake = 64;
}  // namespace

Result<std::unique_ptr<Listener>> Listener::create(const net::HostPort& where, const ListenerLimits& limits,
                                                   net::Poller& poller, SessionDispatch& dispatch) {
  std::unique_ptr<Listener> l(new Listener(poller, dispatch, limits));
  OB_ASSIGN_OR_RETURN(l->socket_, net::listen_tcp(where, kBacklog));
  l->address_ = net::local_address(l->socket_.get());
  Listener* self = l.get();
  OB_RETURN_IF_ERROR(poller.add(l->socket_.get(), [self] { self->on_accept(); }));
  OB_LOG_INFO("listening on %s", l->address_.c_str());
  return l;
}

Listener::~Listener() {
  for (auto& [fd, p] : pending_) poller_.remove(fd);
  if (accepting_) poller_.remove(socket_.get());
}

void Listener::on_accept() {
  for (unsigned i = 0; i < kAcceptsPerWake; ++i) {
    const int fd = ::accept4(socket_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      ++counters_.accept_errors;
      OB_LOG_WARN("accept on %s: %s; accepting again in %ld ms", address_.c_str(), std::strerror(errno),
                  static_cast<long>(kAcceptBackoffMs));
      poller_.remove(socket_.get());
      accepting_ = false;
      resume_ = Deadline::after_ms(kAcceptBackoffMs);
      return;
    }
    net::Fd client(fd);
    ++counters_.accepted;
    if (pending_.size() >= limits_.max_handshakes) {
      ++counters_.refused_limits;
      channel::refuse(fd, {Code::kAgain, std::to_string(pending_.size()) + " connections in their handshake reach " +
                                        std::to_string(limits_.max_handshakes) + " (agent option --max-handshakes)"});
      continue;
    }
    if (connections() >= limits_.max_connections) {
      ++counters_.refused_limits;
      channel::refuse(fd, {Code::kAgain, std::to_string(connections()) + " connections reach " +
                                        std::to_string(limits_.max_connections) + " (agent option --max-connections)"});
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (Status st = poller_.add(fd, [this, fd] { on_readable(fd); }); !st.ok()) {
      OB_LOG_WARN("%s", st.to_string().c_str());
      continue;
    }
    pending_.emplace(fd, Pending{std::move(client), {}, Deadline::after_ms(limits_.handshake_timeout_ms)});
  }
}

void Listener::on_readable(int fd) {
  auto it = pending_.find(fd);
  if (it == pending_.end()) return;
  Pending& p = it->second;
  uint8_t chunk[4096];
  for (;;) {
    const size_t want = std::min(sizeof chunk, p.reader.want());
    const ssize_t n = ::recv(fd, chunk, want, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      poller_.remove(fd);  // gone before its hello: nobody to tell
      pending_.erase(it);
      return;
    }
    if (n < 0) return;  // the rest later
    if (Status st = p.reader.feed({chunk, static_cast<size_t>(n)}); !st.ok()) {
      ++counters_.refused_hello;
      return drop(fd, {st.code(), st.message()});
    }
    if (p.reader.done()) return finish(fd);
  }
}

void Listener::finish(int fd) {
  auto node = pending_.extract(fd);
  poller_.remove(fd);
  Pending& p = node.mapped();
  Result<channel::Hello> hello = p.reader.kind() == channel::BootKind::kHello
                                     ? channel::decode_hello(p.reader.payload())
                                     : Result<channel::Hello>(Code::kInvalidArgument, "expected a hello");
  if (!hello.ok()) {
    ++counters_.refused_hello;
    OB_LOG_DBG("%s: %s", net::peer_address(fd).c_str(), hello.status().to_string().c_str());
    return channel::refuse(fd, {hello.status().code(), hello.status().message()});
  }
  const channel::PeerInfo peer = describe(fd, hello.value());
  auto payload = p.reader.payload();
  live_.fetch_add(1, std::memory_order_relaxed);
  ++counters_.handed_off;
  dispatch_.hand_off(std::move(p.socket), hello.value(), std::vector<uint8_t>(payload.begin(), payload.end()), peer);
}

void Listener::drop(int fd, const channel::Refusal& why) {
  OB_LOG_DBG("%s refused: %s", net::peer_address(fd).c_str(), why.message.c_str());
  channel::refuse(fd, why);
  poller_.remove(fd);
  pending_.erase(fd);
}

int Listener::tick() {
  const auto now = Clock::now();
  auto next = now + std::chrono::milliseconds(kMaxTickMs);
  std::vector<int> expired;
  for (auto& [fd, p] : pending_) {
    if (p.deadline.expired_at(now)) expired.push_back(fd);
    else next = std::min(next, p.deadline.at());
  }
  for (int fd : expired) {
    ++counters_.handshake_timeouts;
    drop(fd, {Code::kTimedOut, "no hello within " + std::to_string(limits_.handshake_timeout_ms) +
                                   " ms (agent option --handshake-timeout-ms)"});
  }
  if (!accepting_ && resume_.expired_at(now)) {
    if (poller_.add(socket_.get(), [this] { on_accept(); }).ok()) accepting_ = true;
  }
  if (!accepting_) next = std::min(next, resume_.at());
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(std::max(next - now, Clock::duration::zero()))
                              .count());
}

channel::PeerInfo Listener::describe(int fd, const channel::Hello& hello) const {
  channel::PeerInfo peer;
  peer.name = net::peer_address(fd) + " pid " + std::to_string(hello.pid);
  // Shared memory only for a client of this host and user whose process
  // holds this very socket: the kernel's word, not the hello's.
  if (!(hello.flags & channel::kHelloSharedMemory)) return peer;
  auto local = net::local_peer(fd);
  if (local.ok() && local->uid == ::geteuid() &&
      net::process_holds_socket(static_cast<pid_t>(hello.pid), local->inode)) {
    peer.policy.shared_memory = true;
    peer.policy.owner = static_cast<pid_t>(hello.pid);
  }
  return peer;
}

}  // namespace outboard::agent
