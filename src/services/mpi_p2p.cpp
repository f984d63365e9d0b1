#include "services/mpi_p2p.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace outboard::services {
namespace {

using namespace mpi_wire;

// A message between two buffers neither of which is mapped here goes through the agent's memory
// in pieces of at most this.
constexpr uint64_t kBounceBytes = 1 << 20;

std::string who(int32_t rank) { return rank == kAny ? std::string("any rank") : "rank " + std::to_string(rank); }

std::string where(const P2p& m) {
  const bool sends = m.kind == Kind::kSend;
  return "mpi: " + std::string(p2p_name(m.kind)) + " of rank " + std::to_string(m.rank) + (sends ? " to " : " from ") +
         who(m.peer) + ", tag " + (m.tag == kAny ? std::string("any") : std::to_string(m.tag)) +
         ", on communicator " + std::to_string(m.comm);
}

// Whether receive (or probe) `r` takes send `s`, both of the same communicator and receiver.
bool matches(const P2p& r, const P2p& s) {
  return (r.peer == kAny || static_cast<uint32_t>(r.peer) == s.rank) && (r.tag == kAny || r.tag == s.tag);
}

Buffer envelope(const Envelope& e) { return Buffer::copy_of(encode(e)); }

// The forward of send `m` (a rank's), header only.
Forward forward_head(const P2p& m, uint64_t id) {
  Forward f;
  f.comm = m.comm, f.size = m.size, f.source = m.rank, f.dest = static_cast<uint32_t>(m.peer), f.tag = m.tag;
  f.sync = m.sync, f.bytes = m.bytes, f.id = id;
  return f;
}

}  // namespace

MpiPointToPoint::~MpiPointToPoint() {
  uint64_t forwarding = following_bytes_;
  for (auto& [address, o] : outboxes_) forwarding += o.in_flight;
  host_.release_memory(buffered_bytes_ + held_remote_bytes_ + forwarding);
}

void MpiPointToPoint::handle(ServiceRequest r, P2p m) {
  const uint32_t conn = r.peer->id();
  auto& members = ranks_[m.comm];
  if (auto known = members.find(m.rank); known != members.end() && known->second != conn)
    return r.responder.fail({Code::kInvalidArgument, where(m) + ": rank " + std::to_string(m.rank) +
                                                         " of this communicator is another connection"});
  members[m.rank] = conn;
  if (m.kind == Kind::kProbe) return probe(r, m);
  if (m.kind == Kind::kCancel) return cancel(r, m);
  if (held_[conn] >= config_.max_messages)
    return r.responder.fail({Code::kTooBig, where(m) + ": this rank already has " + std::to_string(held_[conn]) +
                                                " sends and receives unmatched (limit " +
                                                std::to_string(config_.max_messages) +
                                                ", agent option --mpi-max-messages)"});
  auto op = std::make_shared<Op>(Op{std::move(m), std::move(r.responder), std::move(r.peer), {}});
  if (op->message.kind != Kind::kSend) {
    if (!op->message.agent.empty()) watch(op->message);
    return receive(std::move(op));
  }
  if (op->message.agent.empty()) return send(std::move(op));
  ++held_[conn];
  const std::string address = op->message.agent;
  outboxes_[address].queue.push_back(std::move(op));
  pump(address);
}

void MpiPointToPoint::forwarded(ServiceRequest r, Forward f) {
  if (f.follows) return data_came(std::move(r), f);
  P2p m;
  m.kind = Kind::kSend, m.comm = f.comm, m.size = f.size, m.rank = f.source;
  m.peer = static_cast<int32_t>(f.dest), m.tag = f.tag, m.sync = f.sync, m.bytes = f.bytes;
  if (auto members = ranks_.find(f.comm); members != ranks_.end() && members->second.count(f.source))
    return r.responder.fail({Code::kInvalidArgument, where(m) + ", forwarded by another agent: rank " +
                                                         std::to_string(f.source) + " is served here"});
  auto op = std::make_shared<Op>(Op{std::move(m), std::move(r.responder), r.peer, {}});
  op->remote = true, op->later = f.later, op->id = f.id;
  if (!f.later) {
    if (!hold(*op, Hold::kOver))
      return op->responder.fail({Code::kTooBig, where(op->message) + ", forwarded by another agent: the agent's "
                                                                     "memory is full (--max-memory)"});
    op->data.assign(f.data.begin(), f.data.end());
  }
  remote_[r.peer->id()].insert({f.comm, f.source});
  send(std::move(op));
}

// Counts forwarded send `s`'s bytes as held here (`where`), if the agent's memory has room.
bool MpiPointToPoint::hold(Op& s, Hold where) {
  const uint64_t n = s.message.bytes;
  if (!host_.reserve_memory(n, "mpi forwarded send").ok()) return false;
  (where == Hold::kBudget ? buffered_bytes_ : held_remote_bytes_) += n;
  s.hold = where;
  return true;
}

// What an op's bytes held here goes back to the agent.
void MpiPointToPoint::release(Op& s) {
  if (s.hold == Hold::kNone) return;
  (s.hold == Hold::kBudget ? buffered_bytes_ : held_remote_bytes_) -= s.message.bytes;
  host_.release_memory(s.message.bytes);
  s.hold = Hold::kNone;
  s.data = {};
}

// Forwards the sends queued for another agent in the order sent: with their data while the
// window has room, else their envelopes alone (a message sent later may be received first, so it
// must not wait behind them). Reading a send progresses the connections, so sends queued
// meanwhile wait for this loop.
void MpiPointToPoint::pump(const std::string& address) {
  Outbox& o = outboxes_[address];
  if (o.pumping) {
    o.again = true;
    return;
  }
  o.pumping = true;
  do {
    o.again = false;
    while (!o.queue.empty()) {
      OpPtr s = o.queue.front();
      o.queue.pop_front();
      if (s->taken) continue;  // its rank left
      const uint64_t id = o.next_id++;
      const uint64_t n = s->message.bytes;
      if (n > kMaxForwardPiece || (o.in_flight && o.in_flight + n > config_.forward_window_bytes))
        send_later(address, s, id);
      else
        forward(address, s, id);
    }
  } while (o.again);
  o.pumping = false;
}

// The forward of send `s` with `n` bytes of its data from `head.offset`, read from its rank's
// buffer (`head` says the rest).
Result<Buffer> MpiPointToPoint::read_forward(const OpPtr& s, const Forward& head, uint64_t n) {
  const P2p& m = s->message;
  const std::vector<uint8_t> header = encode(head);
  Buffer message(header.size() + n);
  std::copy(header.begin(), header.end(), message.data());
  if (n) {
    s->reading = true;
    auto region = s->peer->import_region(m.region);
    const Status st = region.ok() ? s->peer->get(*region, head.offset, {message.data() + header.size(), n},
                                                 Deadline::after_ms(kMpiTransferTimeoutMs))
                                  : region.status();
    s->reading = false;
    if (!st.ok()) return st.with_context(where(m) + ": reading rank " + std::to_string(m.rank) + "'s buffer");
  }
  return message;
}

// A forward's answer completes the rank's send `op`.
void MpiPointToPoint::forward_answered(OpPtr op, const Result<Buffer>& answer) {
  if (!op->taken) take(op);
  if (answer.ok()) op->responder.respond({});
  else op->responder.fail(answer.status().with_context(where(op->message)));
}

// Send `s` to the receiver's agent with its data; the answer completes it.
void MpiPointToPoint::forward(const std::string& address, OpPtr s, uint64_t id) {
  const uint64_t n = s->message.bytes;
  if (!host_.reserve_memory(n, "mpi forwarded send").ok()) return send_later(address, s, id);
  auto message = read_forward(s, forward_head(s->message, id), n);
  if (!message.ok() || s->taken) {  // taken: its rank left meanwhile
    host_.release_memory(n);
    if (s->taken) return;
    take(s);
    return s->responder.fail(message.status());
  }
  outboxes_[address].in_flight += n;
  auto answered = [this, s, address, n](Result<Buffer> answer) {
    outboxes_[address].in_flight -= n;
    host_.release_memory(n);
    forward_answered(s, answer);
    pump(address);  // the window has room again
  };
  to_agent_(address, s->message.token, std::move(message).value(), std::move(answered), true);
}

// Send `s`'s envelope alone to the receiver's agent. Its answer asks for the data, which then
// follows (send_data).
void MpiPointToPoint::send_later(const std::string& address, const OpPtr& s, uint64_t id) {
  Forward head = forward_head(s->message, id);
  head.later = true;
  auto asked = [this, s, address, id](Result<Buffer> answer) {
    if (!answer.ok()) return forward_answered(s, answer);
    send_data_soon(address, s, id, 0);
  };
  to_agent_(address, s->message.token, Buffer::copy_of(encode(head)), std::move(asked), true);
}

// send_data, from a connection's callback: reading the rank's memory progresses the connections,
// so not inside one.
void MpiPointToPoint::send_data_soon(const std::string& address, OpPtr s, uint64_t id, uint64_t offset) {
  host_.post([this, s = std::move(s), address, id, offset, alive = std::weak_ptr<bool>(alive_)] {
    if (!alive.expired()) send_data(address, s, id, offset);
  });
}

// The piece of later send `s`'s data from `offset` (at most kMaxForwardPiece), read from its
// rank's buffer now (kGone where that fails, so that what waits for it there fails too). Its
// answer sends the next piece; the last one's completes the send.
void MpiPointToPoint::send_data(const std::string& address, OpPtr s, uint64_t id, uint64_t offset) {
  Forward head = forward_head(s->message, id);
  head.follows = true, head.offset = offset;
  const uint64_t n = std::min(s->message.bytes - offset, kMaxForwardPiece);
  const bool last = offset + n == s->message.bytes;
  const bool room = host_.reserve_memory(n, "mpi forwarded send").ok();
  auto message = room ? read_forward(s, head, n)
                      : Result<Buffer>(Status{Code::kTooBig, where(s->message) +
                                                                 ": the agent's memory is full (--max-memory)"});
  if (!message.ok()) {
    if (room) host_.release_memory(n);
    if (!s->taken) take(s);
    s->responder.fail(message.status());  // it names the send already
    head.gone = true, head.offset = 0;
    return to_agent_(address, s->message.token, Buffer::copy_of(encode(head)), [](Result<Buffer>) {}, true);
  }
  following_bytes_ += n;
  auto answered = [this, s, address, id, offset, n, last](Result<Buffer> answer) {
    following_bytes_ -= n;
    host_.release_memory(n);
    if (answer.ok() && !last) return send_data_soon(address, s, id, offset + n);
    forward_answered(s, answer);
  };
  to_agent_(address, s->message.token, std::move(message).value(), std::move(answered), true);
}

// Asks the sending agent for later send `s`'s data: for receive `r`, or (none) to buffer it
// within the budget. The forward's answer is the asking.
void MpiPointToPoint::fetch(const OpPtr& s, OpPtr r) {
  if (!hold(*s, r ? Hold::kOver : Hold::kBudget)) {
    if (!r) return;  // the agent is full: it stays an envelope
    r->responder.fail({Code::kTooBig, where(r->message) + ": the agent's memory is full (--max-memory) for the " +
                                          std::to_string(s->message.bytes) + " B message it matched"});
    return s->responder.fail({Code::kTooBig, where(s->message) + ": the receiver's agent's memory is full"});
  }
  s->fetching = true;
  s->matched = std::move(r);
  awaiting_[{s->peer->id(), s->id}] = s;
  s->responder.respond({});
}

// A piece of the data of a later send this agent asked for (or kGone: its sender left). The
// pieces come in order into the send's buffer (held since the fetch); the last one goes on.
void MpiPointToPoint::data_came(ServiceRequest r, const Forward& f) {
  auto it = awaiting_.find({r.peer->id(), f.id});
  if (it == awaiting_.end() || it->second->message.bytes != f.bytes)
    return r.responder.fail({Code::kInvalidArgument, "mpi: data of forwarded send " + std::to_string(f.id) +
                                                         " (" + std::to_string(f.bytes) + " B), which no send awaits"});
  if (!f.gone) {
    Op& piece_of = *it->second;
    if (f.offset != piece_of.came)
      return r.responder.fail({Code::kInvalidArgument, "mpi: data of forwarded send " + std::to_string(f.id) +
                                                           " at offset " + std::to_string(f.offset) + ", where " +
                                                           std::to_string(piece_of.came) + " was due"});
    if (piece_of.data.size() != f.bytes) piece_of.data.resize(f.bytes);
    std::copy(f.data.begin(), f.data.end(), piece_of.data.begin() + static_cast<std::ptrdiff_t>(f.offset));
    piece_of.came += f.data.size();
    if (piece_of.came < f.bytes) return r.responder.respond({});  // more follows
  }
  OpPtr s = std::move(it->second);
  awaiting_.erase(it);
  s->fetching = s->later = false;
  s->responder = std::move(r.responder);
  OpPtr matched = std::move(s->matched);
  if (f.gone) {  // nothing comes: what waited for it fails
    release(*s);
    s->responder.respond({});
    if (!s->taken) {
      auto& q = queues_[{s->message.comm, static_cast<uint32_t>(s->message.peer)}].unexpected;
      q.erase(std::find(q.begin(), q.end(), s));
      take(s);
    }
    if (matched) matched->responder.fail({Code::kConnectionReset, where(matched->message) + ": the sender of the " +
                                                                      std::to_string(f.bytes) + " B message it matched left"});
    return refill();
  }
  if (s->taken && !matched) {  // dropped meanwhile: its receiver left
    release(*s);
    const uint32_t to = static_cast<uint32_t>(s->message.peer);
    auto gone = left_.find(s->message.comm);
    return s->responder.fail(gone != left_.end() && gone->second.count(to)
                                 ? departed(s->message, to)
                                 : Status{Code::kConnectionReset, where(s->message) + ": dropped"});
  }
  if (!matched) {  // buffered: the sender may go on
    s->buffered = true;
    return s->responder.respond({});
  }
  deliver(*s, *matched);
}

// Send `s` into receive `r`: at once where its data is here, else once it came.
void MpiPointToPoint::complete(const OpPtr& s, OpPtr r) {
  if (s->fetching) {  // asked for to be buffered: delivered when it comes
    s->matched = std::move(r);
    return;
  }
  if (s->later) return fetch(s, std::move(r));
  deliver(*s, *r);
}

// Receive `m` waits for a rank another agent serves: that agent is watched (once), so that its
// end fails the receive instead of leaving it waiting.
void MpiPointToPoint::watch(const P2p& m) {
  auto [w, first] = watched_.try_emplace(m.agent);
  w->second.insert({m.comm, static_cast<uint32_t>(m.peer)});
  if (!first) return;
  Buffer message = Buffer::copy_of(encode_watch());
  to_agent_(m.agent, m.token, std::move(message), [this, address = m.agent](Result<Buffer>) { agent_gone(address); },
            false);
}

// A watched agent ended (or its link closed): the ranks waited for there have left.
void MpiPointToPoint::agent_gone(const std::string& address) {
  auto w = watched_.find(address);
  if (w == watched_.end()) return;
  const auto ranks = std::move(w->second);
  watched_.erase(w);
  for (auto [comm, rank] : ranks) rank_left(comm, rank, std::nullopt, "its agent " + address + " ended");
  refill();
}

Status MpiPointToPoint::departed(const P2p& m, uint32_t rank) const {
  return {Code::kConnectionReset,
          where(m) + ": rank " + std::to_string(rank) + " left (" + left_.at(m.comm).at(rank) + ")"};
}

// An op leaves its queue (the caller erases it there).
void MpiPointToPoint::take(OpPtr& op) {
  op->taken = true;
  if (auto n = held_.find(op->peer->id()); n != held_.end() && n->second) --n->second;
}

void MpiPointToPoint::send(OpPtr s) {
  const P2p& m = s->message;
  const uint32_t to = static_cast<uint32_t>(m.peer);
  if (auto gone = left_.find(m.comm); gone != left_.end() && gone->second.count(to)) {
    release(*s);
    return s->responder.fail(departed(m, to));
  }
  Queues& q = queues_[{m.comm, to}];
  auto r = std::find_if(q.posted.begin(), q.posted.end(), [&](const OpPtr& r) { return matches(r->message, m); });
  if (r != q.posted.end()) {
    OpPtr matched = std::move(*r);
    q.posted.erase(r);
    take(matched);
    return complete(s, std::move(matched));
  }
  ++held_[s->peer->id()];
  q.unexpected.push_back(std::move(s));
  refill();
}

// Reads an unexpected send into the agent's memory and answers its sender, when the budget has
// room for it (else it stays waiting, which is not an error).
void MpiPointToPoint::buffer(const OpPtr& s) {
  const P2p& m = s->message;
  if (buffered_bytes_ + m.bytes > config_.unexpected_bytes) return;
  if (s->later) return fetch(s, nullptr);
  if (s->remote) {  // here already, in memory the agent reserved when it came
    held_remote_bytes_ -= m.bytes;
    buffered_bytes_ += m.bytes;
    s->hold = Hold::kBudget;
    s->buffered = true;
    return s->responder.respond({});
  }
  if (!host_.reserve_memory(m.bytes, "mpi unexpected message").ok()) return;  // the agent is full: held
  buffered_bytes_ += m.bytes;
  std::vector<uint8_t> data(m.bytes);
  Status st;
  if (m.bytes) {
    s->reading = true;
    auto region = s->peer->import_region(m.region);
    st = region.ok() ? s->peer->get(*region, 0, data, Deadline::after_ms(kMpiTransferTimeoutMs)) : region.status();
    s->reading = false;
  }
  if (!st.ok() || s->taken) {  // a receive that matched it meanwhile read it from the sender itself
    buffered_bytes_ -= m.bytes;
    host_.release_memory(m.bytes);
    if (st.ok() || s->taken) return;
    s->responder.fail(st.with_context(where(m) + ": reading rank " + std::to_string(m.rank) + "'s buffer"));
    auto& q = queues_[{m.comm, static_cast<uint32_t>(m.peer)}].unexpected;
    q.erase(std::find(q.begin(), q.end(), s));
    OpPtr gone = s;
    take(gone);
    return;
  }
  s->data = std::move(data);
  s->hold = Hold::kBudget;
  s->buffered = true;
  s->responder.respond({});
}

// Buffers the unexpected sends still waiting, oldest first, while the budget has room. Reads
// progress the connections, so what waits is listed first and checked again before each, and a
// send that arrives meanwhile has the list made again.
void MpiPointToPoint::refill() {
  if (refilling_) {
    refill_again_ = true;
    return;
  }
  refilling_ = true;
  do {
    refill_again_ = false;
    if (buffered_bytes_ >= config_.unexpected_bytes) break;
    std::vector<OpPtr> waiting;
    for (auto& [key, q] : queues_)
      for (const OpPtr& s : q.unexpected)
        if (!s->buffered && !s->reading && !s->fetching && !s->message.sync) waiting.push_back(s);
    for (const OpPtr& s : waiting) {
      if (s->taken) continue;
      if (buffered_bytes_ + s->message.bytes > config_.unexpected_bytes) break;
      buffer(s);
    }
  } while (refill_again_);
  refilling_ = false;
}

void MpiPointToPoint::receive(OpPtr r) {
  const P2p& m = r->message;
  Queues& q = queues_[{m.comm, m.rank}];
  auto s = std::find_if(q.unexpected.begin(), q.unexpected.end(),
                        [&](const OpPtr& s) { return matches(m, s->message); });
  if (s != q.unexpected.end()) {
    OpPtr matched = std::move(*s);
    q.unexpected.erase(s);
    take(matched);
    return complete(matched, std::move(r));
  }
  if (m.peer != kAny)
    if (auto gone = left_.find(m.comm); gone != left_.end() && gone->second.count(static_cast<uint32_t>(m.peer)))
      return r->responder.fail(departed(m, static_cast<uint32_t>(m.peer)));
  ++held_[r->peer->id()];
  q.posted.push_back(std::move(r));
}

// `n` bytes of send `s` into receive `r`'s buffer: straight in where it is mapped here, else in
// pieces of at most kBounceBytes (the ranks' word for the sizes bounds nothing of the agent's).
Status MpiPointToPoint::transfer(const Op& s, const Op& r, uint64_t n) {
  auto failed = [&](const Status& why, const Op& whose, const char* doing) {
    return why.with_context(where(s.message) + ": " + doing + " rank " + std::to_string(whose.message.rank) +
                            "'s buffer");
  };
  const Deadline deadline = Deadline::after_ms(kMpiTransferTimeoutMs);
  auto to = r.peer->import_region(r.message.region);
  if (!to.ok()) return failed(to.status(), r, "writing");
  const bool here = s.buffered || s.remote;
  auto from = here ? Result<RemoteRegion>(Status()) : s.peer->import_region(s.message.region);
  if (!here && !from.ok()) return failed(from.status(), s, "reading");
  if (to->mapped()) {
    auto out = to->mapped_span(0, n);
    if (!out.ok()) return failed(out.status(), r, "writing");
    if (here) {
      std::memcpy(out->data(), s.data.data(), n);
      return {};
    }
    const Status read = s.peer->get(*from, 0, *out, deadline);
    return read.ok() ? read : failed(read, s, "reading");
  }
  std::vector<uint8_t> bounce;
  for (uint64_t at = 0; at < n;) {
    const uint64_t piece = std::min(n - at, kBounceBytes);
    std::span<const uint8_t> chunk;
    if (here) {
      chunk = std::span<const uint8_t>(s.data).subspan(at, piece);
    } else {
      bounce.resize(piece);
      if (Status read = s.peer->get(*from, at, bounce, deadline); !read.ok()) return failed(read, s, "reading");
      chunk = bounce;
    }
    if (Status wrote = r.peer->put(*to, at, chunk, deadline); !wrote.ok()) return failed(wrote, r, "writing");
    at += piece;
  }
  // The answer may overtake a write UCX carries; the kernel's copies are done by now.
  if (!to->in_call())
    if (Status flushed = r.peer->flush(deadline); !flushed.ok()) return failed(flushed, r, "writing");
  return {};
}

// Send `s` into receive `r`, at most the receive's capacity (the receiver hears the message's
// whole size and names the truncation), then both answered.
void MpiPointToPoint::deliver(Op& s, Op& r) {
  const uint64_t n = std::min(s.message.bytes, r.message.bytes);
  const Status st = n ? transfer(s, r, n) : Status();
  if (st.ok())
    r.responder.respond(envelope({s.message.rank, s.message.tag, s.message.bytes, true, false}));
  else
    r.responder.fail(st);
  const bool budget = s.hold == Hold::kBudget;
  release(s);
  if (!s.buffered)  // being read into a buffer, maybe: that read sees it taken and drops its copy
    st.ok() ? s.responder.respond({}) : s.responder.fail(st);
  if (s.buffered || budget) refill();
}

void MpiPointToPoint::probe(const ServiceRequest& r, const P2p& m) {
  auto q = queues_.find({m.comm, m.rank});
  if (q != queues_.end())
    for (const OpPtr& s : q->second.unexpected)
      if (matches(m, s->message))
        return r.responder.respond(envelope({s->message.rank, s->message.tag, s->message.bytes, true, false}));
  r.responder.respond(envelope({}));
}

void MpiPointToPoint::cancel(const ServiceRequest& r, const P2p& m) {
  const uint32_t conn = r.peer->id();
  if (auto q = queues_.find({m.comm, m.rank}); q != queues_.end()) {
    auto& posted = q->second.posted;
    auto it = std::find_if(posted.begin(), posted.end(),
                           [&](const OpPtr& op) { return op->message.id == m.id && op->peer->id() == conn; });
    if (it != posted.end()) {
      OpPtr cancelled = std::move(*it);
      posted.erase(it);
      take(cancelled);
      cancelled->responder.respond(envelope({0, 0, 0, false, true}));
    }
  }
  r.responder.respond({});  // too late (matched already): the receive completes as received
}

void MpiPointToPoint::on_disconnect(uint32_t conn) {
  held_.erase(conn);
  for (auto comm = ranks_.begin(); comm != ranks_.end();) {
    auto& members = comm->second;
    auto rank = std::find_if(members.begin(), members.end(), [&](auto& m) { return m.second == conn; });
    if (rank == members.end()) {
      ++comm;
      continue;
    }
    const uint32_t gone = rank->first;
    members.erase(rank);
    rank_left(comm->first, gone, conn, "its connection closed");
    comm = members.empty() ? ranks_.erase(comm) : std::next(comm);
  }
  // Its sends not yet forwarded go with it (their data did).
  for (auto& [address, o] : outboxes_)
    for (OpPtr& op : o.queue)
      if (op->peer->id() == conn && !op->taken) take(op);
  // Another agent: the sends whose data it was to send fail their receives, and the ranks it
  // forwarded for leave with it.
  for (auto it = awaiting_.begin(); it != awaiting_.end();) {
    if (it->first.first != conn) {
      ++it;
      continue;
    }
    OpPtr s = std::move(it->second);
    it = awaiting_.erase(it);
    release(*s);
    if (s->matched)
      s->matched->responder.fail({Code::kConnectionReset, where(s->matched->message) + ": the link to the agent of "
                                                          "the sender of the message it matched closed"});
  }
  if (auto forwarded = remote_.find(conn); forwarded != remote_.end()) {
    for (auto [comm, rank] : forwarded->second) rank_left(comm, rank, conn, "its agent's link to this one closed");
    remote_.erase(forwarded);
  }
  refill();
}

// Rank `gone` of `comm`, which came over connection `conn` (its own, or its agent's; none: its
// watched agent ended), left.
void MpiPointToPoint::rank_left(uint64_t comm, uint32_t gone, std::optional<uint32_t> conn, std::string why) {
  left_[comm].emplace(gone, std::move(why));
  for (auto q = queues_.lower_bound({comm, 0}); q != queues_.end() && q->first.first == comm;) {
    auto& [unexpected, posted] = q->second;
    const bool its_own = q->first.second == gone;
    // Messages to the rank that left go with it, and sends that came over its connection not
    // buffered (their senders are gone too); a buffered one stays deliverable. Another rank's
    // send to it fails.
    for (auto s = unexpected.begin(); s != unexpected.end();) {
      OpPtr& op = *s;
      const bool from_it = conn && op->peer->id() == *conn;
      if (!its_own && !(from_it && !op->buffered)) {
        ++s;
        continue;
      }
      if (!from_it && !op->buffered) op->responder.fail(departed(op->message, gone));
      release(*op);
      take(op);
      s = unexpected.erase(s);
    }
    // Receives posted by the rank that left, and others' receives from it alone.
    for (auto r = posted.begin(); r != posted.end();) {
      OpPtr& op = *r;
      const bool from_it = conn && op->peer->id() == *conn;
      if (!from_it && op->message.peer != static_cast<int32_t>(gone)) {
        ++r;
        continue;
      }
      if (!from_it) op->responder.fail(departed(op->message, gone));
      take(op);
      r = posted.erase(r);
    }
    q = unexpected.empty() && posted.empty() ? queues_.erase(q) : std::next(q);
  }
}

}  // namespace outboard::services
