// Connection: the public face of a channel connection (connect, messages,
// requests, progress, close); the protocol is Connection::Impl's
// (connection_impl.cpp), the one-sided path region.cpp's.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <functional>

#include "channel/access.h"
#include "channel/connection_impl.h"
#include "outboard/log.h"

OB_LOG_MODULE("channel");

namespace outboard {

using channel::FrameHeader;
using channel::FrameType;
using channel::Lock;
using channel::spin_of;

namespace {
// A graceful close's whole budget: the last messages flushed, the endpoint closed.
constexpr int64_t kCloseTimeoutMs = 1000;

// UCX pairs the endpoints two workers open to each other by the order each side opens them (its
// connection sequence numbers), and reassembles a message of several fragments on the endpoint it
// paired. Crossed, closing one connection dropped the half-received messages of another of this
// process's connections to that agent: so they are set up one at a time, socket to endpoint, and the
// agent, which opens its endpoint for each as it adopts it, opens them in the same order.
Mutex& setup_order(const std::string& address) {
  static std::array<Mutex, 16> stripes;  // one per agent address, but for collisions
  return stripes[std::hash<std::string>{}(address) % stripes.size()];
}
}  // namespace

std::string transport_version() { return "UCX " + transport::ucx_version(); }

bool transport_carries_gpu_memory() { return transport::ucx_carries_cuda_memory(); }

std::string seal_engine() { return secure::aead_engine(secure::Aead::kAes256Gcm); }

Connection::Connection(std::shared_ptr<Impl> impl, bool owner) : impl_(std::move(impl)), owner_(owner) {}

std::unique_ptr<Connection> channel::detail::Access::connection(std::shared_ptr<Connection::Impl> impl, bool owner) {
  return std::unique_ptr<Connection>(new Connection(std::move(impl), owner));
}

Connection::~Connection() {
  if (impl_ && owner_) close();
}

uint32_t Connection::id() const { return impl_->local_id; }

Result<std::unique_ptr<Connection>> Connection::connect(const std::string& address,
                                                        const ChannelConfig& config) {
  OB_ASSIGN_OR_RETURN(auto where, net::parse_host_port(address));
  MutexLock order(setup_order(address));
  OB_ASSIGN_OR_RETURN(auto token, channel::session_token(config.session));
  OB_ASSIGN_OR_RETURN(auto hub, channel::Hub::get());
  // A link that leaves the host (or any, with --secure always) is TLS's, where we have keys.
  std::shared_ptr<secure::Context> tls_context;
  if (secure::wants_tls(config.secure, where.host)) {
    OB_ASSIGN_OR_RETURN(tls_context, secure::Context::cached(config.secure, secure::Role::kClient));
  }
  const Deadline deadline = Deadline::after_ms(config.connect_timeout_ms);
  // The socket exchange runs without the hub's lock: an agent in this
  // process answers from its progress thread.
  OB_ASSIGN_OR_RETURN(net::Fd sock, net::connect_tcp(where, deadline));
  // In a session process (an agent's service dialing another agent), that
  // agent's sessions may connect back to our UCX listeners: admit its host.
  OB_RETURN_IF_ERROR(net::admit_peer(sock.get()));
  const int keepalive_s = static_cast<int>(std::max<uint64_t>(1, (config.keepalive_ms + 999) / 1000));
  net::set_keepalive(sock.get(), keepalive_s, keepalive_s, 3);
  std::shared_ptr<Impl> impl;
  channel::Hello hello;
  {
    Lock lock(hub->mutex());
    impl = std::make_shared<Impl>(hub, config);
    impl->peer_address = address;
    if (tls_context) impl->config.ring_slots = 0;  // a ring would bypass the frame seal
    OB_ASSIGN_OR_RETURN(hello.ring_descriptor, impl->open_ring());
    hello.connection_id = impl->local_id;
    hello.pid = static_cast<uint32_t>(::getpid());
    // A session for this client gets shared memory only if our UCX may use it too.
    if (transport::narrow_transports("posix", std::getenv("UCX_TLS")).ok()) hello.flags |= channel::kHelloSharedMemory;
    hello.token = token;
    hello.max_msg_size = impl->config.max_msg_size;
    hello.window_msgs = impl->config.recv_window_msgs;
    hello.window_bytes = impl->config.recv_window_bytes;
    hello.worker_address = config.network_only ? hub->worker().net_address() : hub->worker().address();
    if (config.network_only) hello.flags |= channel::kHelloNetworkOnly;
    hello.ring_slots = impl->rx_ring ? impl->config.ring_slots : 0;
    hello.bell_fd = impl->offered_bell();
  }
  auto fail = [&](Status st) {
    Lock lock(hub->mutex());
    impl->fail(st);
    return st;
  };
  const std::string what = "handshake with the agent at " + address;
  Result<channel::BootMessage> answer = Status(Code::kNotConnected, what);
  if (tls_context) {
    // The Hello goes through TLS; the answer comes sealed with keys from its handshake.
    auto tls = channel::tls_connect(sock.get(), tls_context, address, deadline, what);
    if (!tls.ok()) return fail(tls.status());
    auto keys = (*tls)->keys();
    if (!keys.ok()) return fail(keys.status());
    Status st = (*tls)->write(channel::encode(hello));
    if (st.ok()) st = net::send_all(sock.get(), (*tls)->take_output(), deadline, what);
    if (!st.ok()) return fail(st);
    impl->security = "TLS 1.3 over " + (*tls)->key_exchange() + ", agent " + (*tls)->peer_identity() +
                     ((*tls)->resumed() ? ", resumed" : "");
    {
      Lock lock(hub->mutex());
      impl->seal = std::make_unique<secure::FrameSeal>(*keys, secure::Role::kClient, config.secure.rekey_bytes);
    }
    answer = channel::read_secure_answer(sock.get(), **tls, impl->seal->in, deadline, what);
  } else {
    if (Status st = net::send_all(sock.get(), channel::encode(hello), deadline, what); !st.ok()) return fail(st);
    answer = channel::read_boot_message(sock.get(), deadline, what);
  }
  if (!answer.ok()) {
    Status st = answer.status();
    if (st.code() == Code::kTimedOut)
      st = Status(Code::kTimedOut, "no answer from the agent at " + address + " within " +
                                       std::to_string(config.connect_timeout_ms) + " ms");
    return fail(st);
  }
  if (answer->kind == channel::BootKind::kRefusal) {
    auto refusal = channel::decode_refusal(answer->payload);
    if (!refusal.ok()) return fail(refusal.status().with_context(what));
    return fail(Status(refusal->code, "the agent at " + address + " refused the connection: " + refusal->message));
  }
  if (answer->kind != channel::BootKind::kWelcome)
    return fail(Status(Code::kIoError, what + ": the agent answered with a hello"));
  auto welcome = channel::decode_welcome(answer->payload);
  if (!welcome.ok()) return fail(welcome.status().with_context(what));
  // The agent's session process, confirmed as the holder of the socket's other end, for its bell:
  // found outside the hub's lock (it reads /proc/net/tcp and the session's descriptors).
  Result<net::Fd> agent_process = Status(Code::kUnsupported, "no bell offered or no ring of ours");
  if (hello.ring_slots != 0 && welcome->bell_fd != channel::kNoBell)
    agent_process = net::open_peer_process(sock.get(), static_cast<pid_t>(welcome->pid));
  Lock lock(hub->mutex());
  impl->peer_id = welcome->connection_id;
  impl->peer_in_process = welcome->pid == static_cast<uint32_t>(::getpid());
  impl->peer_pid = static_cast<pid_t>(welcome->pid);
  impl->peer_max_msg = welcome->max_msg_size;
  impl->send_msgs = welcome->window_msgs;
  impl->send_bytes = welcome->window_bytes;
  impl->peer_services = std::move(welcome->services);
  impl->agent_info = std::move(welcome->facts);
  impl->start_data_endpoint(welcome->worker_address);
  impl->bind_peer_ring(welcome->ring_slots, welcome->ring_descriptor);
  if (agent_process.ok()) impl->take_peer_bell(welcome->bell_fd, impl->peer_pid, *agent_process);
  if (impl->state != Impl::State::kClosed) {
    if (Status st = impl->watch_socket(std::move(sock)); !st.ok()) impl->fail(st);
  }
  if (impl->state != Impl::State::kClosed) impl->state = Impl::State::kOpen;
  OB_RETURN_IF_ERROR(impl->check_open());
  OB_LOG_INFO("connected to %s (connection %u, peer max_msg_size %lu B, %s)", address.c_str(), impl->local_id,
              static_cast<unsigned long>(impl->peer_max_msg), impl->security.c_str());
  return channel::detail::Access::connection(std::move(impl), /*owner=*/true);
}

Status Connection::send(std::span<const uint8_t> payload, Deadline deadline, std::string_view service) {
  Lock lock(impl_->hub->mutex());
  OB_RETURN_IF_ERROR(impl_->check_open());
  OB_ASSIGN_OR_RETURN(uint32_t index, impl_->service_index(service));
  OB_RETURN_IF_ERROR(impl_->acquire(payload.size(), deadline, true));
  auto op = std::make_shared<Completion>();
  FrameHeader h;
  h.type = FrameType::kMessage;
  h.service = index;
  impl_->post(h, payload, completer(op));
  return impl_->wait_done(deadline, op, "send");
}

Status Connection::post(std::span<const uint8_t> payload, Deadline deadline, std::string_view service,
                        std::function<void(Status)> done) {
  Lock lock(impl_->hub->mutex());
  OB_RETURN_IF_ERROR(impl_->check_open());
  OB_ASSIGN_OR_RETURN(uint32_t index, impl_->service_index(service));
  OB_RETURN_IF_ERROR(impl_->acquire(payload.size(), deadline, true));
  FrameHeader h;
  h.type = FrameType::kMessage;
  h.service = index;
  // UCX completes inside its progress: the caller's code runs after it returns.
  channel::Hub* hub = impl_->hub.get();
  impl_->post(h, payload, [hub, done = std::move(done)](Status st) OB_HUB_LOCKED mutable {
    if (done) hub->defer([done = std::move(done), st = std::move(st)] { done(st); });
  });
  return {};
}

Status Connection::try_send(std::span<const uint8_t> payload, std::string_view service) {
  Lock lock(impl_->hub->mutex());
  OB_RETURN_IF_ERROR(impl_->check_open());
  OB_ASSIGN_OR_RETURN(uint32_t index, impl_->service_index(service));
  OB_RETURN_IF_ERROR(impl_->acquire(payload.size(), Deadline::now(), false));
  FrameHeader h;
  h.type = FrameType::kMessage;
  h.service = index;
  impl_->post(h, Buffer::copy_of(payload));
  return {};
}

Result<Incoming> Connection::receive(Deadline deadline) {
  Lock lock(impl_->hub->mutex());
  if (!impl_->hub->wait_until(deadline, spin_of(impl_->config), [&]() OB_HUB_LOCKED {
        return !impl_->inbox.empty() || impl_->state == Impl::State::kClosed;
      })) {
    return Status(Code::kTimedOut, "no message from " + impl_->peer_address + " before the deadline");
  }
  if (impl_->inbox.empty()) return impl_->check_open();
  Incoming in = std::move(impl_->inbox.front());
  impl_->inbox.pop_front();
  impl_->consumed(in.data.size());
  return in;
}

Result<uint32_t> Connection::Impl::service_index(std::string_view service) const {
  if (service.empty()) return channel::kNoService;
  auto it = std::find(peer_services.begin(), peer_services.end(), service);
  if (it != peer_services.end()) return static_cast<uint32_t>(it - peer_services.begin());
  std::string known;
  for (const auto& s : peer_services) known += (known.empty() ? "" : ", ") + s;
  return Status(Code::kNotFound, "service '" + std::string(service) + "' is not offered by " + peer_address +
                                     " (offered: " + (known.empty() ? "none" : known) + ")");
}

Result<uint64_t> Connection::Impl::open_request(std::string_view service, size_t bytes, Deadline deadline,
                                                ResponseFn fn, bool wait, bool blocking, FrameHeader& h) {
  OB_RETURN_IF_ERROR(check_open());
  if (service.empty()) return Status(Code::kInvalidArgument, "request without a service name");
  OB_ASSIGN_OR_RETURN(uint32_t index, service_index(service));
  if (pending.size() >= config.max_outstanding_requests)
    return Status(Code::kAgain, std::to_string(pending.size()) +
                                    " requests outstanding reach max_outstanding_requests " +
                                    std::to_string(config.max_outstanding_requests));
  OB_RETURN_IF_ERROR(acquire(bytes, deadline, wait));
  uint64_t id = next_request_id++;
  pending.emplace(id, {std::move(fn), deadline.at(), blocking});
  if (!blocking) deadlines.insert({deadline.at(), id});
  h.type = FrameType::kRequest;
  h.id = id;
  h.service = index;
  return id;
}

void Connection::Impl::forget_request(uint64_t id) {
  auto p = pending.take(id);
  if (p && !p->blocking) deadlines.erase({p->deadline, id});
}

Status Connection::submit(std::string_view service, Buffer payload, Deadline deadline, ResponseFn on_response,
                          Credit credit) {
  Lock lock(impl_->hub->mutex());
  FrameHeader h;
  OB_RETURN_IF_ERROR(impl_->open_request(service, payload.size(), deadline, std::move(on_response),
                                         credit == Credit::kWait, /*blocking=*/false, h)
                         .status());
  impl_->post(h, std::move(payload));
  return {};
}

Result<Buffer> Connection::request(std::string_view service, std::span<const uint8_t> payload,
                                   Deadline deadline) {
  Lock lock(impl_->hub->mutex());
  // On this stack: the callback is forgotten below if it has not run, so a
  // pointer fits std::function's inline storage and nothing is allocated.
  struct Answer {
    bool done = false;
    Result<Buffer> result = Buffer();
  } answer;
  FrameHeader h;
  OB_ASSIGN_OR_RETURN(uint64_t id, impl_->open_request(service, payload.size(), deadline,
                                                       [a = &answer](Result<Buffer> r) {
                                                         a->result = std::move(r);
                                                         a->done = true;
                                                       },
                                                       true, /*blocking=*/true, h));
  impl_->post_copy(h, payload);
  // The last progress before the deadline may still have completed it.
  impl_->hub->wait_until(deadline, spin_of(impl_->config), [&] { return answer.done; });
  if (!answer.done) {
    impl_->forget_request(id);
    return impl_->response_timeout(id);
  }
  return std::move(answer.result);
}

unsigned Connection::progress() {
  Lock lock(impl_->hub->mutex());
  return impl_->hub->progress();
}

unsigned Connection::progress_until_idle(unsigned max_rounds) {
  Lock lock(impl_->hub->mutex());
  return impl_->hub->progress_until_idle(max_rounds);
}

int Connection::event_fd() const { return impl_->hub->event_fd(); }

Status Connection::arm() {
  Lock lock(impl_->hub->mutex());
  if (impl_->hub->progress() != 0) return {Code::kAgain, "events pending: progress first"};
  return impl_->hub->arm();
}

void Connection::wait(Deadline deadline) {
  Lock lock(impl_->hub->mutex());
  impl_->hub->wait_until(deadline, spin_of(impl_->config),
                         [&]() OB_HUB_LOCKED { return !impl_->inbox.empty() || impl_->state != Impl::State::kOpen; });
}

bool Connection::wait_until(Deadline deadline, const std::function<bool()>& done) {
  Lock lock(impl_->hub->mutex());
  return impl_->hub->wait_until(deadline, spin_of(impl_->config), done);
}

void Connection::wake() {
  impl_->hub->post([] {});
}

void Connection::close() {
  Lock lock(impl_->hub->mutex());
  if (impl_->state != Impl::State::kOpen) return impl_->fail(Status(Code::kNotConnected, "connection closed"));
  FrameHeader h;
  h.type = FrameType::kClose;
  impl_->post(h, {}, nullptr);
  const Deadline deadline = Deadline::after_ms(kCloseTimeoutMs);
  auto op = std::make_shared<Completion>();
  impl_->data_ep.flush(completer(op));
  impl_->hub->wait_until(deadline, {}, [&] { return op->done; });
  // The endpoint's close finishes here, while the peer is there to answer.
  // Left to a later progress (the last connection's destructor, say), a
  // TCP close whose peer had since exited tripped an assertion in UCX 1.13.
  auto open = std::make_shared<int>(1);  // outlives this call if the deadline passes
  impl_->data_ep.close(false, [open](Status) { --*open; });
  impl_->fail(Status(Code::kNotConnected, "connection closed by this side"));
  impl_->hub->wait_until(deadline, {}, [&] { return *open == 0; });
}

bool Connection::is_open() const {
  Lock lock(impl_->hub->mutex());
  return impl_->state == Impl::State::kOpen;
}
Status Connection::close_reason() const {
  Lock lock(impl_->hub->mutex());
  return impl_->check_open();
}
uint64_t Connection::peer_max_msg_size() const { return impl_->peer_max_msg; }
std::vector<std::string> Connection::peer_services() const { return impl_->peer_services; }
std::vector<std::pair<std::string, uint64_t>> Connection::agent_info() const { return impl_->agent_info; }
const std::string& Connection::security() const { return impl_->security; }
bool Connection::sealed() const { return impl_->seal != nullptr; }
const std::string& Connection::peer_identity() const { return impl_->peer_identity; }
uint32_t Connection::send_credits() const {
  Lock lock(impl_->hub->mutex());
  return impl_->send_msgs;
}
void Connection::on_credit(std::function<void()> fn) {
  Lock lock(impl_->hub->mutex());
  if (impl_->state == Impl::State::kOpen) impl_->credit_waiters.push_back(std::move(fn));
}

std::string Connection::lanes() const {
  Lock lock(impl_->hub->mutex());
  return impl_->data_ep.lanes();
}

}  // namespace outboard
