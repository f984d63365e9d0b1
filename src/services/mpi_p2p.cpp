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

}  // namespace

MpiPointToPoint::~MpiPointToPoint() { host_.release_memory(buffered_bytes_); }

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
  if (op->message.kind == Kind::kSend) return send(std::move(op));
  receive(std::move(op));
}

Status MpiPointToPoint::departed(const P2p& m, uint32_t rank) const {
  return {Code::kConnectionReset, where(m) + ": rank " + std::to_string(rank) + " left (its connection closed)"};
}

// An op leaves its queue (the caller erases it there).
void MpiPointToPoint::take(OpPtr& op) {
  op->taken = true;
  if (auto n = held_.find(op->peer->id()); n != held_.end() && n->second) --n->second;
}

void MpiPointToPoint::send(OpPtr s) {
  const P2p& m = s->message;
  const uint32_t to = static_cast<uint32_t>(m.peer);
  if (auto gone = left_.find(m.comm); gone != left_.end() && gone->second.count(to))
    return s->responder.fail(departed(m, to));
  Queues& q = queues_[{m.comm, to}];
  auto r = std::find_if(q.posted.begin(), q.posted.end(), [&](const OpPtr& r) { return matches(r->message, m); });
  if (r != q.posted.end()) {
    OpPtr matched = std::move(*r);
    q.posted.erase(r);
    take(matched);
    return deliver(*s, *matched);
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
        if (!s->buffered && !s->reading && !s->message.sync) waiting.push_back(s);
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
    return deliver(*matched, *r);
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
  auto from = s.buffered ? Result<RemoteRegion>(Status()) : s.peer->import_region(s.message.region);
  if (!s.buffered && !from.ok()) return failed(from.status(), s, "reading");
  if (to->mapped()) {
    auto out = to->mapped_span(0, n);
    if (!out.ok()) return failed(out.status(), r, "writing");
    if (s.buffered) {
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
    if (s.buffered) {
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
  if (!s.buffered) {  // being read into a buffer, maybe: that read sees it taken and drops its copy
    st.ok() ? s.responder.respond({}) : s.responder.fail(st);
    return;
  }
  buffered_bytes_ -= s.message.bytes;
  host_.release_memory(s.message.bytes);
  s.data = {};
  refill();
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
    left_[comm->first].insert(gone);
    for (auto q = queues_.lower_bound({comm->first, 0}); q != queues_.end() && q->first.first == comm->first;) {
      auto& [unexpected, posted] = q->second;
      const bool its_own = q->first.second == gone;
      // Messages to the rank that left go with it, and its own sends not buffered (their data
      // went with it too); a buffered one stays deliverable. Another rank's send to it fails.
      for (auto s = unexpected.begin(); s != unexpected.end();) {
        OpPtr& op = *s;
        const bool from_it = op->peer->id() == conn;
        if (!its_own && !(from_it && !op->buffered)) {
          ++s;
          continue;
        }
        if (!from_it && !op->buffered) op->responder.fail(departed(op->message, gone));
        if (op->buffered) {
          buffered_bytes_ -= op->message.bytes;
          host_.release_memory(op->message.bytes);
        }
        take(op);
        s = unexpected.erase(s);
      }
      // Receives posted by the rank that left, and others' receives from it alone.
      for (auto r = posted.begin(); r != posted.end();) {
        OpPtr& op = *r;
        const bool from_it = op->peer->id() == conn;
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
    comm = members.empty() ? ranks_.erase(comm) : std::next(comm);
  }
  refill();
}

}  // namespace outboard::services
