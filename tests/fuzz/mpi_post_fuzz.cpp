// libFuzzer: a message to the agent's `mpi` service (services/mpi_wire.h) — a rank's collective
// post, another agent's share (whole, or its first piece and the pieces after), forwarded send or watch, a rank's reach or point-to-point message —
// decoded before anything else reads it, and the envelope a rank decodes from the agent's answer. What decodes encodes back
// to the same bytes, and its counts, ranks and agents are within the bounds the service indexes by.
#include <cstdlib>
#include <cstring>

#include "services/mpi_wire.h"

using namespace outboard::services::mpi_wire;

namespace {

int share(const uint8_t* data, size_t size) {
  auto s = decode_share({data, size});
  if (!s.ok()) return 0;
  uint64_t total = 0;
  for (uint64_t n : s->lengths) {
    if (total + n < total) __builtin_trap();
    total += n;
  }
  const bool carried = s->first_piece ? !s->data.empty() && s->data.size() <= kMaxSharePiece && s->data.size() < total
                                      : total == s->data.size();
  if (s->from >= s->size || !carried || s->lengths.size() > uint64_t{s->size} * s->size) __builtin_trap();
  const auto again = encode(s.value());
  if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  return 0;
}

int share_piece(const uint8_t* data, size_t size) {
  auto p = decode_share_piece({data, size});
  if (!p.ok()) return 0;
  if (p->data.empty() || p->data.size() > kMaxSharePiece || p->offset + p->data.size() < p->offset) __builtin_trap();
  const auto again = encode(p.value());
  if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  return 0;
}

int reach(const uint8_t* data, size_t size) {
  auto r = decode_reach({data, size});
  if (!r.ok()) return 0;
  if (r->region.empty() || r->region.size() > kMaxDescriptorBytes) __builtin_trap();
  const auto again = encode(r.value());
  if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  return 0;
}

int p2p(const uint8_t* data, size_t size) {
  auto m = decode_p2p({data, size});
  if (!m.ok()) return 0;
  const bool any = m->kind == Kind::kRecv || m->kind == Kind::kProbe;
  if (m->rank >= m->size || m->size > kMaxRanks || m->region.size() > kMaxDescriptorBytes) __builtin_trap();
  if ((m->kind == Kind::kSend || any) && !(m->peer == kAny && any) &&
      (m->peer < 0 || static_cast<uint32_t>(m->peer) >= m->size))
    __builtin_trap();
  if (!m->agent.empty() && (m->token.size() != kTokenHexDigits || m->agent.size() > kMaxAddressBytes ||
                            m->peer == kAny || (m->kind != Kind::kSend && m->kind != Kind::kRecv)))
    __builtin_trap();
  const auto again = encode(m.value());
  if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  return 0;
}

int forward(const uint8_t* data, size_t size) {
  auto f = decode_forward({data, size});
  if (!f.ok()) return 0;
  // A piece that follows lies within its message; anything else carries the message or nothing.
  const bool piece = f->follows && !f->gone;
  const bool carried = piece ? f->offset <= f->bytes && f->data.size() <= f->bytes - f->offset &&
                                   f->data.size() <= kMaxForwardPiece
                             : f->offset == 0 && f->data.size() == (f->later || f->gone ? 0 : f->bytes);
  if (f->source >= f->size || f->dest >= f->size || f->size > kMaxRanks || f->tag < 0 || !carried)
    __builtin_trap();
  const auto again = encode(f.value());
  if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  return 0;
}

int watch(const uint8_t* data, size_t size) {
  if (decode_watch({data, size}).ok() && size != encode_watch().size()) __builtin_trap();
  return 0;
}

void envelope(const uint8_t* data, size_t size) {
  auto e = decode_envelope({data, size});
  if (!e.ok()) return;
  const auto again = encode(e.value());
  if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  envelope(data, size);
  auto kind = kind_of({data, size});
  if (kind.ok() && *kind == Kind::kWatch) return watch(data, size);
  if (kind.ok() && *kind == Kind::kForward) return forward(data, size);
  if (kind.ok() && *kind == Kind::kSharePiece) return share_piece(data, size);
  if (kind.ok() && *kind >= Kind::kSend) return p2p(data, size);
  if (kind.ok() && *kind == Kind::kShare) return share(data, size);
  if (kind.ok() && *kind == Kind::kReach) return reach(data, size);
  auto post = decode({data, size});
  if (!post.ok()) return 0;
  const Post& p = post.value();
  if (p.rank >= p.size || p.size > kMaxRanks) __builtin_trap();
  if (p.coll == Coll::kAlltoallv &&
      (p.send_counts.size() != p.size || p.send_displs.size() != p.size || p.recv_counts.size() != p.size ||
       p.recv_displs.size() != p.size))
    __builtin_trap();
  if (!p.agents.empty() && (p.agent_of.size() != p.size || p.agents.size() > p.size))
    __builtin_trap();
  for (uint32_t a : p.agent_of)
    if (a >= p.agents.size()) __builtin_trap();
  if (p.failure.size() > kMaxFailureBytes || p.freed.size() > kMaxFreed) __builtin_trap();
  for (const auto& d : p.freed)
    if (d.empty() || d.size() > kMaxDescriptorBytes) __builtin_trap();
  const auto again = encode(p);
  if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  return 0;
}
