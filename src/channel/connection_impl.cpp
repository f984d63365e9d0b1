// Connection::Impl: the protocol of one connection (receiving in order,
// credits, sending), shared by the client's Connection and the agent's Server.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "channel/connection_impl.h"
#include "outboard/log.h"
#include "util/text.h"

OB_LOG_MODULE("channel");

namespace outboard {

using channel::FrameHeader;
using channel::FrameType;
using channel::Lock;
using channel::spin_of;

namespace {
// Rounds of progress that deliver what a peer sent before its socket closed
// (its close frame, a shutdown's answers), before the close is taken for a loss.
constexpr unsigned kDrainRounds = 256;
// Frames a peer may send ahead of the next one expected beyond its credits
// and outstanding requests (its credit returns): more is a broken peer.
constexpr uint64_t kReorderSlack = 64;
// Of a peer's close reason, what is kept.
constexpr size_t kMaxCloseReason = 256;

}  // namespace

Connection::Impl::Impl(std::shared_ptr<channel::Hub> h, const ChannelConfig& c)
    : hub(std::move(h)), config(c) {
  config.recv_window_bytes = std::max(config.recv_window_bytes, config.max_msg_size);
  config.recv_window_msgs = std::max<uint32_t>(config.recv_window_msgs, 1);
  if (config.network_only) config.ring_slots = 0;  // a ring is shared memory
  local_id = hub->add(this);
}

Connection::Impl::~Impl() {
  // The last owner may drop it on any thread, without the lock.
  Lock lock(hub->mutex());
  open_requests.for_each([this](uint64_t, uint64_t bytes) { release_request(bytes); });
  release_messages();
  hub->remove(local_id);
  hub->remove_ring(this);
  rx_ring.reset();
  tx_ring.reset();
  if (socket.valid()) hub->unwatch(socket.get());
  data_ep.close(true);
}

Status Connection::Impl::check_open() const {
  if (state == State::kOpen) return {};
  if (state == State::kConnecting) return {Code::kNotConnected, "connection not established"};
  return reason;
}

void Connection::Impl::start_data_endpoint(std::span<const uint8_t> peer_worker_address) {
  auto ep = hub->worker().connect_to(peer_worker_address);
  if (!ep.ok()) return fail(ep.status().with_context("data endpoint to " + peer_address));
  data_ep = std::move(ep).value();
  if (log::enabled(log::Level::kDebug))
    OB_LOG_DBG("connection %u -> %s data endpoint:\n%s", local_id, peer_address.c_str(),
               data_ep.lanes().c_str());
}

Status Connection::Impl::watch_socket(net::Fd fd) {
  socket = std::move(fd);
  std::weak_ptr<Impl> weak = weak_from_this();
  return hub->watch(socket.get(), [weak]() OB_HUB_LOCKED {
    if (auto self = weak.lock()) self->on_socket_ready();
  });
}

void Connection::Impl::on_socket_ready() {
  uint8_t byte = 0;
  const ssize_t n = ::recv(socket.get(), &byte, 1, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  auto keep = shared_from_this();
  const Status why(Code::kConnectionReset,
                   n > 0 ? "peer " + peer_address + " sent bytes on its bootstrap socket after the handshake"
                         : "peer " + peer_address + " lost: its connection closed" +
                               (n < 0 ? std::string(" (") + std::strerror(errno) + ")" : std::string()));
  hub->unwatch(socket.get());  // the end stays readable
  // A peer that closes flushed what it sent before (a close, a shutdown's
  // answers): deliver that first, so its reason wins over the loss.
  hub->progress_until_idle(kDrainRounds);
  fail(why);
}

Result<std::vector<uint8_t>> Connection::Impl::open_ring() {
  if (config.ring_slots == 0) return std::vector<uint8_t>{};
  OB_ASSIGN_OR_RETURN(rx_ring, channel::RxRing::create(hub->worker(), config.ring_slots));
  hub->add_ring(this);
  return rx_ring->descriptor();
}

Result<transport::RemoteKey> Connection::Impl::import(std::span<const uint8_t> descriptor, bool map) {
  // One-sided transfers bypass the frame seal (UCX moves the bytes as they are): off on secure links.
  if (seal)
    return Status(Code::kUnsupported, "one-sided access over the secure connection to " + peer_address +
                                          " would bypass its encryption: use messages, or connect without "
                                          "--secure always on one host (remote links are always secure with keys)");
  return data_ep.import_region(descriptor, map && !peer_in_process, peer_policy ? &*peer_policy : nullptr);
}

void Connection::Impl::bind_peer_ring(uint32_t slots, std::span<const uint8_t> descriptor) {
  // Either side may opt out; a peer in this process gets none (peer_in_process).
  if (slots == 0 || config.ring_slots == 0 || state == State::kClosed || peer_in_process) return;
  auto key = import(descriptor, /*map=*/true);
  if (!key.ok()) {
    OB_LOG_WARN("connection %u: ring of %s not imported: %s", local_id, peer_address.c_str(),
                key.status().to_string().c_str());
    return;
  }
  tx_ring = channel::TxRing::bind(std::move(key).value(), slots);
  OB_LOG_DBG("connection %u: small frames to %s %s", local_id, peer_address.c_str(),
             tx_ring ? "go into its ring" : "go through UCX (its ring is not mapped here)");
}

void Connection::Impl::take_peer_bell(uint32_t bell_fd, pid_t pid, const net::Fd& process) {
  if (!tx_ring || bell_fd == channel::kNoBell) return;
  auto bell = net::open_peer_pipe(process, pid, static_cast<int>(bell_fd));
  if (!bell.ok()) {
    OB_LOG_DBG("connection %u: doorbell of %s through UCX: %s", local_id, peer_address.c_str(),
               bell.status().to_string().c_str());
    return;
  }
  peer_bell = std::move(bell).value();
}

uint32_t Connection::Impl::offered_bell() {
  return rx_ring ? static_cast<uint32_t>(hub->offer_bell()) : channel::kNoBell;
}

void Connection::Impl::fail(const Status& why) {
  if (state == State::kClosed) return;
  auto keep = shared_from_this();
  OB_LOG_DBG("connection %u closed: %s", local_id, why.to_string().c_str());
  state = State::kClosed;
  reason = why;
  hub->remove(local_id);
  hub->remove_ring(this);
  tx_ring.reset();
  peer_bell = net::Fd();
  data_ep.close(why.code() != Code::kNotConnected);
  if (socket.valid()) {
    hub->unwatch(socket.get());
    socket.reset();
  }
  reorder.clear();
  open_requests.for_each([this](uint64_t, uint64_t bytes) { release_request(bytes); });
  open_requests.clear();
  release_messages();
  open_messages.clear();
  credit_waiters.clear();
  auto failed = std::move(pending);
  deadlines.clear();
  failed.for_each([&why](uint64_t, Pending& p) { p.fn(why); });
  if (counters) ++counters->disconnects;
  if (on_closed) on_closed(local_id);
  if (Impl* peer = peer_in_process ? hub->find(peer_id) : nullptr; peer && peer->peer_id == local_id)
    peer->fail(Status(why.code(), "peer " + peer->peer_address + " in this process closed: " + why.message()));
}

void Connection::Impl::tick(Clock::time_point now) {
  while (!deadlines.empty() && deadlines.begin()->first <= now) {
    uint64_t id = deadlines.begin()->second;
    deadlines.erase(deadlines.begin());
    if (auto p = pending.take(id)) p->fn(response_timeout(id));
  }
}

Status Connection::Impl::response_timeout(uint64_t id) const {
  return {Code::kTimedOut, "request " + std::to_string(id) + " to " + peer_address + " got no response before its deadline"};
}

// ---- receiving

bool Connection::Impl::hold_credit(uint64_t bytes) {
  ++held_msgs;
  held_bytes += bytes;
  if (held_msgs <= config.recv_window_msgs && held_bytes <= config.recv_window_bytes) return true;
  const Status st(Code::kConnectionReset,
                  "peer " + peer_address + " sent past its window: " + std::to_string(held_msgs) + " messages, " +
                      std::to_string(held_bytes) + " B unanswered against the " +
                      std::to_string(config.recv_window_msgs) + " messages, " +
                      std::to_string(config.recv_window_bytes) + " B granted");
  cut_off(st);
  return false;
}

void Connection::Impl::cut_off(const Status& why) {
  OB_LOG_WARN("connection %u: %s", local_id, why.message().c_str());
  if (counters) ++counters->errors;
  broken = true;  // nothing more of it is handled, here or in a ring
  auto self = shared_from_this();
  hub->defer([self, why]() OB_HUB_LOCKED { self->fail(why); });
}

void Connection::Impl::on_frame(FrameHeader& h, transport::IncomingAm& am) {
  if (state == State::kClosed || broken) return;
  h.seq = channel::extend_seq(next_rx_seq, h.seq);
  if (h.seq < next_rx_seq || h.seq - next_rx_seq >= config.recv_window_msgs + config.max_outstanding_requests +
                                                         kReorderSlack)
    return cut_off(Status(Code::kConnectionReset, "peer " + peer_address + " sent frame " + std::to_string(h.seq) +
                                                      " where " + std::to_string(next_rx_seq) + " was next"));
  // A secure connection's frames are all sealed, a plaintext one's none.
  if (static_cast<bool>(h.flags & channel::kFlagSealed) != static_cast<bool>(seal))
    return cut_off(Status(seal ? Code::kAuthentication : Code::kConnectionReset,
                          "peer " + peer_address + " sent frame " + std::to_string(h.seq) +
                              (seal ? " unsealed on a secure connection" : " sealed on a plaintext connection")));
  const size_t length = am.length;
  const bool credited = h.type == FrameType::kMessage || h.type == FrameType::kRequest;
  const bool oversized = credited && length > config.max_msg_size;
  // Its credit comes back as consumed: 0 B for a refused message.
  if ((credited || h.type == FrameType::kNotify) && !hold_credit(credited && !oversized ? length : 0)) return;
  if (h.seq == next_rx_seq && !am.rendezvous && reorder.empty()) {
    Status error;
    if (oversized)
      error = Status(Code::kTooBig, "message of " + std::to_string(length) + " B exceeds max_msg_size " +
                                        std::to_string(config.max_msg_size) + " B");
    Buffer data;
    if (error.ok() && seal) {
      data = Buffer(length);  // opened straight out of UCX's buffer: one pass over the bytes
      if (Status st = unseal(h, am.header, {am.data, length}, data.data()); !st.ok()) return cut_off(st);
    } else if (error.ok()) {
      data = Buffer::copy_of({am.data, length});
    }
    ++next_rx_seq;
    if (deliverable_inline(h)) return deliver(h, std::move(data), error);
    defer_deliver(h, std::move(data), error);
    return;
  }
  if (reorder.count(h.seq) != 0)
    return cut_off(Status(Code::kConnectionReset, "peer " + peer_address + " sent frame " + std::to_string(h.seq) + " twice"));
  RxFrame& f = reorder[h.seq];
  f.h = h;
  if (seal) f.wire.assign(am.header.begin(), am.header.end());  // opened in order, by drain()
  if (oversized) {
    // A peer that ignored our advertised limit: reject without fetching.
    f.error = Status(Code::kTooBig, "message of " + std::to_string(length) + " B exceeds max_msg_size " +
                                        std::to_string(config.max_msg_size) + " B");
    f.ready = true;
  } else if (!am.rendezvous) {
    f.data = Buffer::copy_of({am.data, am.length});
    f.ready = true;
  } else {
    f.data = Buffer(am.length);
    std::weak_ptr<Impl> weak = weak_from_this();
    uint64_t seq = h.seq;
    hub->worker().receive_rendezvous(am, f.data.span(), [weak, seq](Status st) OB_HUB_LOCKED {
      auto self = weak.lock();
      if (!self || self->state == State::kClosed) return;
      if (!st.ok()) return self->fail(st.with_context("receive of frame " + std::to_string(seq)));
      auto it = self->reorder.find(seq);
      if (it == self->reorder.end()) return;
      it->second.ready = true;
      self->drain();
    });
  }
  drain();
}

void Connection::Impl::drain() {
  auto keep = shared_from_this();
  while (state != State::kClosed && !reorder.empty() && reorder.begin()->first == next_rx_seq &&
         reorder.begin()->second.ready) {
    RxFrame f = std::move(reorder.begin()->second);
    reorder.erase(reorder.begin());
    if (seal && f.error.ok())
      if (Status st = unseal(f.h, f.wire, f.data.span(), f.data.data()); !st.ok()) return cut_off(st);
    ++next_rx_seq;
    defer_deliver(f.h, std::move(f.data), f.error);
  }
}

// Inside UCX's callback nothing may block or progress. A frame is handed on
// there (a queued delivery and a second pass less: ~25 ns of a 64 B round
// trip's ~300 ns one way on each side, measured) only when nothing of this
// connection is queued ahead of it, and when it is the answer to a blocking
// request() (whose callback only records it) or is for a service whose
// handle() never blocks.
bool Connection::Impl::deliverable_inline(const FrameHeader& h) const {
  if (deferred_deliveries != 0) return false;
  switch (h.type) {
    case FrameType::kResponse: {
      const Pending* p = pending.find(h.id);
      return p && p->blocking;
    }
    case FrameType::kRequest:
    case FrameType::kMessage:
      return on_service && h.service < inline_services.size() && inline_services[h.service];
    default:
      return false;
  }
}

void Connection::Impl::defer_deliver(const FrameHeader& h, Buffer data, Status error) {
  ++deferred_deliveries;
  hub->defer_delivery(shared_from_this(), h, std::move(data), std::move(error));
}

void Connection::Impl::deliver_deferred(const FrameHeader& h, Buffer data, const Status& error) {
  --deferred_deliveries;
  if (state != State::kClosed) deliver(h, std::move(data), error);
}

// A frame in order: its credits first, then what its type asks for.
void Connection::Impl::deliver(const FrameHeader& h, Buffer data, const Status& error) {
  take_credits(h);
  switch (h.type) {
    case FrameType::kMessage:
    case FrameType::kRequest:
      return deliver_message(h, std::move(data), error);
    case FrameType::kNotify:
      return deliver_notify(h, std::move(data));
    case FrameType::kResponse:
      if (h.status == 0) return complete_request(h.id, std::move(data));
      return complete_request(
          h.id, Status(known_code(h.status) ? static_cast<Code>(h.status) : Code::kIoError,
                       std::string(reinterpret_cast<const char*>(data.data()), data.size())));
    case FrameType::kCredit:
      if (h.flags & channel::kFlagWantCredit) {
        peer_starved = true;
        maybe_return_credits();
      }
      return;
    case FrameType::kClose:
      return deliver_close(h, data);
    case FrameType::kDoorbell:  // the hub drops them: never delivered
      return;
  }
}

// Credits the peer returned; senders waiting for them run from progress().
void Connection::Impl::take_credits(const FrameHeader& h) {
  send_msgs += h.credit_msgs;
  send_bytes += h.credit_bytes;
  if (h.credit_msgs) {
    want_sent = false;
    auto waiters = std::move(credit_waiters);
    credit_waiters.clear();
    for (auto& fn : waiters) hub->defer(std::move(fn));
  }
}

// A message or request: refused (a frame that failed to arrive whole), handed
// to the service it names, or queued for receive().
void Connection::Impl::deliver_message(const FrameHeader& h, Buffer data, const Status& error) {
  if (counters) {
    ++counters->messages_in;
    counters->bytes_in += data.size();
  }
  if (!error.ok()) {
    if (counters) ++counters->errors;
    OB_LOG_WARN("connection %u: %s", local_id, error.to_string().c_str());
    if (h.type == FrameType::kRequest) {
      answer(h.id, 0, error);
    } else {
      consumed(0);
    }
    return;
  }
  if (on_service) {
    if (h.type == FrameType::kRequest) {
      if (!admit_request(h.id, data.size())) return;
    } else if (h.service == channel::kNoService) {
      if (counters) ++counters->errors;
      OB_LOG_WARN("connection %u: one-way message names no service; dropped", local_id);
      return consumed(data.size());
    } else {
      if (budgeted(data.size()))
        if (Status st = budget->reserve(data.size(), "one-way message"); !st.ok()) {
          // It has no answer to carry the refusal: the connection ends, saying why.
          OB_LOG_WARN("connection %u: %s; closing it", local_id, st.message().c_str());
          shut_down(st);
          broken = true;
          return;
        }
      open_messages.emplace(h.seq, data.size());
    }
    return on_service(*this, h, std::move(data));
  }
  if (h.type == FrameType::kRequest) {
    return answer(h.id, data.size(), Status(Code::kUnsupported, "this side serves no requests"));
  }
  inbox.push_back(Incoming{Incoming::Kind::kMessage, std::move(data)});
}

// A one-sided write's notification: to the service it names, or receive()'s.
void Connection::Impl::deliver_notify(const FrameHeader& h, Buffer data) {
  if (on_service && h.service != channel::kNoService) {
    open_messages.emplace(h.seq, 0);
    return on_service(*this, h, std::move(data));
  }
  // The payload is the notified length (8 bytes).
  inbox.push_back(Incoming{Incoming::Kind::kNotify, {}, h.id, h.arg, 0});
  if (data.size() == 8) std::memcpy(&inbox.back().length, data.data(), 8);
}

void Connection::Impl::deliver_close(const FrameHeader& h, const Buffer& data) {
  // The peer's words, escaped: they reach logs and the other side's errors.
  const std::string msg = printable({reinterpret_cast<const char*>(data.data()), data.size()}, kMaxCloseReason);
  const Code code = h.status == 0 || !known_code(h.status) ? Code::kNotConnected : static_cast<Code>(h.status);
  fail(Status(code, "peer " + peer_address + " closed the connection" + (msg.empty() ? "" : ": " + msg)));
}

bool Connection::Impl::admit_request(uint64_t id, uint64_t bytes) {
  if (open_requests.find(id)) {
    cut_off(Status(Code::kConnectionReset, "peer " + peer_address + " reused request id " + std::to_string(id) +
                                               " while it was open"));
    return false;
  }
  const size_t open = open_requests.size();
  if (open >= config.max_outstanding_requests) {
    // A well-behaved client never gets here: it counts its own.
    answer(id, bytes,
           Status(Code::kAgain, std::to_string(open) + " requests outstanding reach max_outstanding_requests " +
                                    std::to_string(config.max_outstanding_requests) +
                                    " (agent option --max-outstanding-requests)"));
    return false;
  }
  if (Status st = hold_request(bytes); !st.ok()) {
    answer(id, bytes, std::move(st));
    return false;
  }
  open_requests.emplace(id, bytes);
  return true;
}

Status Connection::Impl::hold_request(uint64_t bytes) {
  if (!budget) return {};
  OB_RETURN_IF_ERROR(budget->hold(SessionBudget::Held::kRequests));
  if (!budgeted(bytes)) return {};
  Status st = budget->reserve(bytes, "request");
  if (!st.ok()) budget->drop(SessionBudget::Held::kRequests);
  return st;
}

void Connection::Impl::release_request(uint64_t bytes) {
  if (!budget) return;
  budget->drop(SessionBudget::Held::kRequests);
  if (budgeted(bytes)) budget->release(bytes);
}

void Connection::Impl::release_messages() {
  open_messages.for_each([this](uint64_t, uint64_t bytes) {
    if (budgeted(bytes)) budget->release(bytes);
  });
}

void Connection::Impl::complete_request(uint64_t id, Result<Buffer> result) {
  auto p = pending.take(id);
  if (!p) {
    OB_LOG_DBG("connection %u: late response to request %lu dropped", local_id, static_cast<unsigned long>(id));
    return;
  }
  if (!p->blocking) deadlines.erase({p->deadline, id});
  p->fn(std::move(result));
}

// ---- credits

void Connection::Impl::consumed(uint64_t bytes) {
  ++return_msgs;
  return_bytes += bytes;
  maybe_return_credits();
}

void Connection::Impl::maybe_return_credits() {
  if (state != State::kOpen || return_msgs == 0) return;
  if (!peer_starved && return_msgs < config.recv_window_msgs / 4 + 1 &&
      return_bytes < config.recv_window_bytes / 4)
    return;
  peer_starved = false;
  FrameHeader h;
  h.type = FrameType::kCredit;
  post(h, {}, nullptr);
}

Status Connection::Impl::acquire(uint64_t bytes, Deadline deadline, bool wait) {
  if (bytes > peer_max_msg)
    return {Code::kTooBig, "message of " + std::to_string(bytes) + " B exceeds max_msg_size " +
                               std::to_string(peer_max_msg) + " B (agent option --max-msg-size)"};
  auto has_credit = [&]() OB_HUB_LOCKED { return state != State::kOpen || (send_msgs > 0 && send_bytes >= bytes); };
  while (!has_credit()) {
    if (!want_sent) {
      // Ask once per stall: the peer returns consumed credits at once.
      want_sent = true;
      FrameHeader h;
      h.type = FrameType::kCredit;
      h.flags = channel::kFlagWantCredit;
      post(h, {}, nullptr);
    }
    if (!wait)
      return {Code::kAgain, "no send credit (" + std::to_string(send_msgs) + " messages, " +
                                std::to_string(send_bytes) + " B free; need 1 message, " +
                                std::to_string(bytes) + " B): progress and retry"};
    if (!hub->wait_until(deadline, spin_of(config), has_credit))
      return {Code::kTimedOut, "no send credit from " + peer_address + " before the deadline"};
  }
  OB_RETURN_IF_ERROR(check_open());
  --send_msgs;
  send_bytes -= bytes;
  return {};
}

// ---- sending

void Connection::Impl::stamp(FrameHeader& h, size_t bytes) {
  h.dst = peer_id;
  h.seq = next_tx_seq++;
  h.credit_msgs = return_msgs;
  h.credit_bytes = return_bytes;
  held_msgs -= return_msgs;
  held_bytes -= return_bytes;
  return_msgs = 0;
  return_bytes = 0;
  if (counters && (h.type == FrameType::kMessage || h.type == FrameType::kResponse)) {
    ++counters->messages_out;
    counters->bytes_out += bytes;
  }
}

bool Connection::Impl::post_to_ring(const channel::WireHeader& w, std::span<const uint8_t> data) {
  bool doorbell = false;
  if (!tx_ring || !tx_ring->write(w.span(), data, doorbell)) return false;
  if (counters) {
    ++counters->ring_frames_out;
    counters->doorbells_out += doorbell;
  }
  if (doorbell && peer_bell.valid()) {
    const uint8_t ring = 1;
    // EAGAIN: the pipe is full, so readable anyway (our end never blocks).
    if (::write(peer_bell.get(), &ring, 1) == 1 || errno == EAGAIN) {
      if (counters) ++counters->doorbells_by_pipe;
      return true;
    }
    OB_LOG_WARN("connection %u: doorbell of %s: %s; through UCX from now on", local_id, peer_address.c_str(),
                std::strerror(errno));
    peer_bell = net::Fd();
  }
  if (doorbell) {
    FrameHeader bell;
    bell.type = FrameType::kDoorbell;
    bell.dst = peer_id;
    data_ep.send_copy(channel::encode(bell).span(), {});
  }
  return true;
}

// Secure connections send the payload sealed, its header authenticated with
// it and its sequence number as the nonce; UCX carries ciphertext only.
void Connection::Impl::send_sealed(FrameHeader& h, std::span<const uint8_t> data) {
  h.flags |= channel::kFlagSealed;
  if (seal->count(data.size())) h.flags |= channel::kFlagRekey;
  channel::WireHeader w = channel::encode(h);
  const std::span<const uint8_t> ad = w.span().first(w.size - channel::kWireTagBytes);
  Buffer out(data.size());
  seal->out.seal(secure::Sealer::Stream::kFrames, h.seq, ad, data, out.data(), w.bytes + ad.size());
  data_ep.send(w.span(), std::move(out));
}

// In sequence order: a frame flagged kFlagRekey is the first under the peer's next key.
Status Connection::Impl::unseal(const FrameHeader& h, std::span<const uint8_t> header, std::span<const uint8_t> sealed,
                                uint8_t* out) const {
  static_assert(channel::kWireTagBytes == secure::kTagBytes);
  if (h.flags & channel::kFlagRekey) seal->in.rekey();
  // decode() checked that a sealed frame's header ends in its tag.
  const std::span<const uint8_t> ad = header.first(header.size() - channel::kWireTagBytes);
  if (Status st = seal->in.open(secure::Sealer::Stream::kFrames, h.seq, ad, sealed, ad.data() + ad.size(), out);
      !st.ok())
    return st.with_context("peer " + peer_address + " frame " + std::to_string(h.seq));
  return {};
}

void Connection::Impl::post(FrameHeader& h, std::span<const uint8_t> data, transport::DoneFn done) {
  stamp(h, data.size());
  if (seal) {
    send_sealed(h, data);
  } else {
    const channel::WireHeader w = channel::encode(h);
    if (!post_to_ring(w, data)) return data_ep.send(w.span(), data, std::move(done));
  }
  if (done) done(Status());
}

void Connection::Impl::post(FrameHeader& h, Buffer data) {
  stamp(h, data.size());
  if (seal) return send_sealed(h, data.span());
  const channel::WireHeader w = channel::encode(h);
  if (!post_to_ring(w, data.span())) data_ep.send(w.span(), std::move(data));
}

void Connection::Impl::post_copy(FrameHeader& h, std::span<const uint8_t> data) {
  stamp(h, data.size());
  if (seal) return send_sealed(h, data);
  const channel::WireHeader w = channel::encode(h);
  if (!post_to_ring(w, data)) data_ep.send_copy(w.span(), data);
}

Status Connection::Impl::wait_done(Deadline deadline, const CompletionPtr& op, const char* what) {
  if (!hub->wait_until(deadline, spin_of(config), [&] { return op->done; })) {
    // UCX may still read or write the caller's buffer: only closing the
    // endpoint makes returning safe.
    Status st(Code::kTimedOut, std::string(what) + " to " + peer_address +
                                   " did not complete before the deadline; connection closed");
    fail(st);
    return st;
  }
  return op->result;
}

Status Connection::Impl::wait_polled(Deadline deadline, const transport::PolledOp& op, const char* what) {
  if (!op.done() && !hub->wait_until(deadline, spin_of(config), [&] { return op.done(); })) {
    // As wait_done: closing the endpoint is what makes returning safe.
    Status st(Code::kTimedOut, std::string(what) + " to " + peer_address +
                                   " did not complete before the deadline; connection closed");
    fail(st);
    return st;
  }
  return op.status(what);
}

void Connection::Impl::respond(uint64_t id, Result<Buffer> result) {
  auto request_bytes = open_requests.take(id);
  if (!request_bytes) return;
  release_request(*request_bytes);
  answer(id, *request_bytes, std::move(result));
}

void Connection::Impl::answer(uint64_t id, uint64_t bytes, Result<Buffer> result) {
  consumed(bytes);
  if (state != State::kOpen) return;
  FrameHeader h;
  h.type = FrameType::kResponse;
  h.id = id;
  if (result.ok() && result.value().size() > peer_max_msg)
    result = Status(Code::kTooBig, "response of " + std::to_string(result.value().size()) +
                                       " B exceeds the client's max_msg_size " + std::to_string(peer_max_msg) + " B");
  Buffer body;
  if (result.ok()) {
    body = std::move(result).value();
  } else {
    Status st = result.status();
    h.status = static_cast<int8_t>(st.code());
    body = Buffer::copy_of(st.message());
    if (counters) ++counters->errors;
  }
  post(h, std::move(body));
}

void Connection::Impl::acknowledge(uint64_t seq) {
  auto bytes = open_messages.take(seq);
  if (!bytes) return;
  if (budgeted(*bytes)) budget->release(*bytes);
  consumed(*bytes);
}

void Connection::Impl::shut_down(const Status& why) {
  if (state != State::kOpen) return;
  std::vector<uint64_t> open;
  open_requests.for_each([&open](uint64_t id, uint64_t) { open.push_back(id); });
  for (uint64_t id : open) respond(id, why);
  FrameHeader h;
  h.type = FrameType::kClose;
  h.status = static_cast<int8_t>(why.code());
  post(h, Buffer::copy_of(why.message()));
}

}  // namespace outboard
