#include "agent/listener.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
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
// How often an idle listener looks at its key files (a TLS handshake also does).
constexpr int kKeysCheckMs = 1000;
constexpr unsigned kAcceptsPerWake = 64;
}  // namespace

Result<std::unique_ptr<Listener>> Listener::create(const net::HostPort& where, const ListenerLimits& limits,
                                                   net::Poller& poller, SessionDispatch& dispatch,
                                                   std::shared_ptr<secure::Context> tls, SecureConfig::Mode mode) {
  std::unique_ptr<Listener> l(new Listener(poller, dispatch, limits));
  l->tls_ = std::move(tls);
  l->mode_ = mode;
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
    const std::string from = net::peer_address(fd);
    const bool local = net::is_loopback(from.substr(0, from.rfind(':')));
    pending_.emplace(fd, Pending{std::move(client), {}, Deadline::after_ms(limits_.handshake_timeout_ms), local});
  }
}

void Listener::on_readable(int fd) {
  auto it = pending_.find(fd);
  if (it == pending_.end()) return;
  Pending& p = it->second;
  if (p.tls) return on_tls(fd, p);
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
    if (!p.decided) {
      if (!decide(fd, p, chunk[0])) return;
      if (p.tls) {
        // Its first bytes were the TLS handshake's.
        if (Status st = p.tls->feed({chunk, static_cast<size_t>(n)}); !st.ok()) return fail_tls(fd, st);
        return on_tls(fd, p);
      }
    }
    if (Status st = p.reader.feed({chunk, static_cast<size_t>(n)}); !st.ok()) {
      ++counters_.refused_hello;
      return drop(fd, {st.code(), st.message()});
    }
    if (p.reader.done()) return finish(fd);
  }
}

namespace {
bool of_this_host(int fd) {
  const std::string from = net::peer_address(fd);
  const std::vector<std::string> here = net::ipv4_addresses();
  return std::find(here.begin(), here.end(), from.substr(0, from.rfind(':'))) != here.end() &&
         net::local_peer(fd).ok();
}
}  // namespace

bool Listener::decide(int fd, Pending& p, uint8_t first) {
  p.decided = true;
  if (first == secure::kTlsHandshakeRecord) {
    if (!tls_) {
      ++counters_.refused_tls;
      drop(fd, {Code::kUnsupported, "this agent has no keys and speaks no TLS (start it with --cert, --key and "
                                    "--ca, or --psk-file)"});
      return false;
    }
    if (Status keys = reload_keys(); !keys.ok()) {
      ++counters_.refused_tls;
      drop(fd, {keys.code(), keys.message()});
      return false;
    }
    auto tls = secure::Tls::create(tls_);
    if (!tls.ok()) {
      drop(fd, {tls.status().code(), tls.status().message()});
      return false;
    }
    p.tls = std::move(tls).value();
    return true;
  }
  // A plaintext client of this host that dialed one of its other addresses (an MPI job's ranks,
  // dialing the address their agent is known by to other hosts' agents) stays on this host as a
  // loopback one does: it comes from one of this host's addresses, and the kernel says its socket
  // is one of this host's (local_peer). Other hosts' clients are refused without the scan.
  if (tls_ && (mode_ == SecureConfig::Mode::kAlways || !(p.local || of_this_host(fd)))) {
    ++counters_.refused_tls;
    drop(fd, {Code::kAuthentication, std::string("this agent serves clients ") +
                                         (mode_ == SecureConfig::Mode::kAlways ? "" : "of other hosts ") +
                                         "through TLS only: connect with --cert, --key and --ca, or --psk-file"});
    return false;
  }
  return true;
}

Status Listener::reload_keys() {
  // A stat of each file per TLS client and once a second: a revocation or
  // a replaced certificate counts from the next handshake, a new context
  // starts with no TLS sessions to resume, and the sessions serving a
  // certificate it refuses end.
  if (!tls_->changed_on_disk()) return {};
  auto fresh = secure::Context::create(tls_->config(), secure::Role::kAgent);
  if (!fresh.ok()) {
    // Refuse rather than go on with keys that may revoke less.
    const Status why(fresh.status().code(), "the agent's keys changed on disk and do not load: " +
                                                fresh.status().message());
    if (why.message() != keys_error_) OB_LOG_ERR("%s; refusing TLS clients until they do", why.message().c_str());
    keys_error_ = why.message();
    return why;
  }
  tls_ = std::move(fresh).value();
  keys_error_.clear();
  ++counters_.keys_reloaded;
  // Connections already open: the sessions of a certificate now refused end.
  const size_t ended = dispatch_.end_refused([&](const std::string& cert) { return !tls_->accepts_client(cert); });
  OB_LOG_INFO("keys read again: --cert, --key, --ca, --crl or --psk-file changed on disk; %zu sessions ended", ended);
  return {};
}

void Listener::fail_tls(int fd, const Status& why) {
  ++counters_.refused_tls;
  OB_LOG_WARN("%s: %s", net::peer_address(fd).c_str(), why.to_string().c_str());
  poller_.remove(fd);
  pending_.erase(fd);  // closes it, after the alert if one was due
}

void Listener::on_tls(int fd, Pending& p) {
  // Our flight, a session ticket, or the alert that tells the client why
  // not: a few KiB that a fresh socket always has room for.
  auto flush = [&] {
    const std::vector<uint8_t> out = p.tls->take_output();
    return out.empty() ||
           ::send(fd, out.data(), out.size(), MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(out.size());
  };
  const Status deaf(Code::kIoError, "TLS handshake: the client does not read");
  uint8_t chunk[4096];
  for (;;) {
    Result<bool> done = p.tls->handshake();
    const bool sent = flush();
    if (!done.ok()) return fail_tls(fd, done.status());
    if (!sent) return fail_tls(fd, deaf);
    if (*done) {
      auto plain = p.tls->read();
      if (!plain.ok()) return fail_tls(fd, plain.status());
      if (!flush()) return fail_tls(fd, deaf);
      std::span<const uint8_t> rest(*plain);
      if (Status st = p.reader.feed_until_done(rest); !st.ok()) {
        ++counters_.refused_hello;
        return drop(fd, {st.code(), st.message()});
      }
      if (!rest.empty()) {
        ++counters_.refused_hello;
        return drop(fd, {Code::kInvalidArgument, std::to_string(rest.size()) + " B after the hello"});
      }
      if (p.reader.done()) return finish(fd);
    }
    const ssize_t n = ::recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      poller_.remove(fd);
      pending_.erase(fd);
      return;
    }
    if (n < 0) return;  // the rest later
    if (Status st = p.tls->feed({chunk, static_cast<size_t>(n)}); !st.ok()) return fail_tls(fd, st);
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
  channel::PeerInfo peer;
  if (p.tls) {
    // Memory of a TLS client is never mapped (its frames are sealed, one-sided access refused):
    // no need to ask the kernel who it is.
    auto keys = p.tls->keys();
    if (!keys.ok()) return channel::refuse(fd, {keys.status().code(), keys.status().message()});
    peer.keys = *keys;
    peer.identity = p.tls->peer_identity();
    peer.certificate = p.tls->peer_certificate();
    peer.agent = p.tls->peer_is_agent();
    const bool resumed = p.tls->resumed();
    peer.name = net::peer_address(fd) + " pid " + std::to_string(hello->pid) + " (TLS: " + peer.identity +
                (resumed ? ", resumed" : "") + ")";
    counters_.resumed_tls += resumed;
  } else {
    peer = describe(fd, hello.value());
  }
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
  // A revocation also ends the sessions of clients already connected, without waiting for a new one.
  if (tls_ && keys_checked_.expired_at(now)) {
    keys_checked_ = Deadline::after_ms(kKeysCheckMs);
    (void)reload_keys();
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
