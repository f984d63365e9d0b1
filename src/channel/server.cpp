#include "channel/server.h"

#include <sys/socket.h>
#include <unistd.h>

#include "outboard/log.h"

OB_LOG_MODULE("server");

namespace outboard::channel {

namespace {
// A welcome is a few KiB into a fresh socket's buffer: it never waits long
// unless the client stopped reading, which only delays that client.
constexpr int64_t kWelcomeTimeoutMs = 1000;
// Of a refused client's unread bytes, what is read and dropped before the
// close: a socket closed with input pending sends a reset, which may
// overtake the refusal.
constexpr size_t kDrainOnRefusal = 64 << 10;
}  // namespace

void refuse(int socket, const Refusal& refusal) {
  const auto bytes = encode(refusal);
  [[maybe_unused]] ssize_t n = ::send(socket, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  uint8_t sink[4096];
  for (size_t drained = 0; drained < kDrainOnRefusal;) {
    const ssize_t got = ::recv(socket, sink, sizeof sink, MSG_DONTWAIT);
    if (got <= 0) break;
    drained += static_cast<size_t>(got);
  }
  ::shutdown(socket, SHUT_WR);
}

Result<std::unique_ptr<Server>> Server::create(const ChannelConfig& config, std::vector<std::string> services,
                                               std::vector<bool> inline_services, Facts facts,
                                               std::shared_ptr<SessionBudget> budget,
                                               Connection::Impl::ServiceFn on_service,
                                               std::function<void(uint32_t)> on_closed) {
  OB_ASSIGN_OR_RETURN(auto hub, Hub::get());
  std::unique_ptr<Server> s(new Server());
  s->hub_ = std::move(hub);
  s->config_ = config;
  s->services_ = std::move(services);
  s->inline_services_ = std::move(inline_services);
  s->facts_ = std::move(facts);
  s->budget_ = std::move(budget);
  s->on_service_ = std::move(on_service);
  s->on_closed_ = std::move(on_closed);
  return s;
}

Server::~Server() {
  Lock lock(hub_->mutex());
  for (auto& c : conns_) c->fail(Status(Code::kShutDown, "agent stopped"));
  conns_.clear();
}

Status Server::adopt(net::Fd socket, const Hello& hello, const PeerInfo& peer) {
  Lock lock(hub_->mutex());
  auto conn = std::make_shared<Connection::Impl>(hub_, config_);
  conn->counters = &counters_;
  conn->on_service = on_service_;
  conn->on_closed = on_closed_;
  conn->local_services = services_;
  conn->inline_services = inline_services_;
  conn->peer_id = hello.connection_id;
  conn->peer_max_msg = hello.max_msg_size;
  conn->send_msgs = hello.window_msgs;
  conn->send_bytes = hello.window_bytes;
  conn->peer_address = "client " + std::to_string(conn->local_id) + " (" + peer.name + ")";
  conn->peer_policy = peer.policy;
  conn->peer_identity = peer.identity;
  conn->budget = budget_;
  if (peer.policy.shared_memory) {
    // Its memory is reached by pid (posix segments, process keys): held as a pidfd of the very
    // process that holds this socket, copies stop once it ended, before the pid can be reused.
    auto process = net::open_peer_process(socket.get(), peer.policy.owner);
    if (process.ok()) {
      conn->peer_policy->owner_process = std::make_shared<const net::Fd>(std::move(process).value());
    } else {
      OB_LOG_WARN("%s: no shared memory: %s", conn->peer_address.c_str(), process.status().to_string().c_str());
      conn->peer_policy = transport::DescriptorPolicy{};
    }
  }
  if (peer.keys) {
    conn->seal = std::make_unique<secure::FrameSeal>(*peer.keys, secure::Role::kAgent, config_.secure.rekey_bytes);
    conn->config.ring_slots = 0;  // every frame through UCX, sealed
  }
  conn->peer_in_process = hello.pid == static_cast<uint32_t>(::getpid());
  if (hello.flags & kHelloNetworkOnly) conn->config.network_only = true, conn->config.ring_slots = 0;
  auto refused = [&](const Status& st) OB_HUB_LOCKED {
    ++counters_.errors;
    OB_LOG_WARN("%s not served: %s", conn->peer_address.c_str(), st.to_string().c_str());
    refuse(socket.get(), {st.code(), st.message()});
    conn->fail(st);
    return st;
  };
  conn->start_data_endpoint(hello.worker_address);
  conn->bind_peer_ring(hello.ring_slots, hello.ring_descriptor);
  if (conn->peer_policy && conn->peer_policy->owner_process)
    conn->take_peer_bell(hello.bell_fd, conn->peer_policy->owner, *conn->peer_policy->owner_process);
  if (conn->state == Connection::Impl::State::kClosed) return refused(conn->reason);
  auto ring = conn->open_ring();
  if (!ring.ok()) return refused(ring.status());
  Welcome welcome;
  welcome.connection_id = conn->local_id;
  welcome.pid = static_cast<uint32_t>(::getpid());
  welcome.worker_address = conn->config.network_only ? hub_->worker().net_address() : hub_->worker().address();
  welcome.max_msg_size = conn->config.max_msg_size;
  welcome.window_msgs = conn->config.recv_window_msgs;
  welcome.window_bytes = conn->config.recv_window_bytes;
  welcome.services = services_;
  welcome.ring_slots = conn->rx_ring ? conn->config.ring_slots : 0;
  welcome.ring_descriptor = std::move(ring).value();
  welcome.bell_fd = conn->offered_bell();
  welcome.facts = facts_;
  Result<std::vector<uint8_t>> answer = encode(welcome);
  if (conn->seal) answer = seal_message(conn->seal->out, 0, *answer);
  Status st = answer.ok() ? net::send_all(socket.get(), *answer, Deadline::after_ms(kWelcomeTimeoutMs),
                                          "welcome to " + conn->peer_address)
                          : answer.status();
  if (st.ok()) st = conn->watch_socket(std::move(socket));
  if (!st.ok()) {
    ++counters_.errors;
    conn->fail(st);
    return st;
  }
  conn->state = Connection::Impl::State::kOpen;
  ++counters_.connects;
  OB_LOG_INFO("accepted %s", conn->peer_address.c_str());
  prune();
  conns_.push_back(std::move(conn));
  return {};
}

void Server::prune() {
  std::erase_if(conns_, [](const auto& c) { return c->state == Connection::Impl::State::kClosed; });
}

size_t Server::connections() {
  Lock lock(hub_->mutex());
  prune();
  return conns_.size();
}

void Server::shut_down(const Status& why, Deadline deadline) {
  Lock lock(hub_->mutex());
  prune();
  auto pending = std::make_shared<size_t>(0);
  for (auto& c : conns_) {
    c->shut_down(why);
    ++*pending;
    c->data_ep.flush([pending](Status) { --*pending; });
  }
  hub_->wait_until(deadline, {}, [&] { return *pending == 0; });
  for (auto& c : conns_) c->fail(why);
  conns_.clear();
}

}  // namespace outboard::channel
