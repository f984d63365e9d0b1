#include "services/mpi_wire.h"

#include <string>

#include "util/codec.h"

namespace outboard::services::mpi_wire {

std::string_view coll_name(Coll c) {
  switch (c) {
    case Coll::kAlltoall: return "alltoall";
    case Coll::kAlltoallv: return "alltoallv";
    case Coll::kAllgather: return "allgather";
    case Coll::kBcast: return "bcast";
    case Coll::kAllreduce: return "allreduce";
  }
  return "?";
}

size_t elem_size(Elem e) {
  switch (e) {
    case Elem::kBytes: return 1;
    case Elem::kI32: case Elem::kF32: return 4;
    case Elem::kI64: case Elem::kF64: return 8;
  }
  return 1;
}

std::string_view p2p_name(Kind kind) {
  switch (kind) {
    case Kind::kSend: return "send";
    case Kind::kRecv: return "receive";
    case Kind::kProbe: return "probe";
    case Kind::kCancel: return "cancel";
    case Kind::kForward: return "forwarded send";
    case Kind::kWatch: return "watch";
    default: return "?";
  }
}

namespace {

std::string_view kind_name(Kind k) {
  switch (k) {
    case Kind::kPost: return "post";
    case Kind::kShare: return "share";
    case Kind::kSharePiece: return "share piece";
    case Kind::kReach: return "reach";
    case Kind::kSend: case Kind::kRecv: case Kind::kProbe: case Kind::kCancel: case Kind::kForward:
    case Kind::kWatch:
      return p2p_name(k);
  }
  return "?";
}

void put_array(codec::Writer& w, const std::vector<uint64_t>& a) {
  w.put(static_cast<uint32_t>(a.size()));
  for (uint64_t v : a) w.put(v);
}

void put_descriptor(codec::Writer& w, const std::vector<uint8_t>& d) {
  w.put(static_cast<uint32_t>(d.size()));
  w.put_bytes(d);
}

Status bad(const std::string& what) { return {Code::kInvalidArgument, "mpi: " + what}; }

bool get_array(codec::Reader& r, uint32_t size, std::vector<uint64_t>& out) {
  uint32_t n = 0;
  if (!r.get(n) || n != size || r.in.size() / 8 < n) return false;
  out.resize(n);
  for (uint64_t& v : out) r.get(v);
  return true;
}

Result<std::vector<uint8_t>> get_descriptor(codec::Reader& r, const char* which) {
  uint32_t n = 0;
  std::span<const uint8_t> bytes;
  if (!r.get(n)) return bad(std::string(which) + " region: truncated");
  if (n > kMaxDescriptorBytes)
    return bad(std::string(which) + " region descriptor of " + std::to_string(n) + " B exceeds " +
               std::to_string(kMaxDescriptorBytes) + " B");
  if (!r.take(n, bytes)) return bad(std::string(which) + " region: truncated");
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

// The collective's kinds, known and consistent: only allreduce, and it always, names an element
// and an op, and reduces whole elements.
Status shape(uint8_t coll, uint8_t elem, uint8_t reduce, uint64_t bytes, Coll& c, Elem& e, Reduce& op) {
  if (coll >= kColls || elem >= kElems || reduce >= kReduces)
    return bad("unknown collective " + std::to_string(coll) + ", element " + std::to_string(elem) + " or op " +
               std::to_string(reduce));
  c = static_cast<Coll>(coll), e = static_cast<Elem>(elem), op = static_cast<Reduce>(reduce);
  const bool reduces = c == Coll::kAllreduce;
  if (reduces != (op != Reduce::kNone) || reduces != (e != Elem::kBytes))
    return bad(std::string(coll_name(c)) + " with element " + std::to_string(elem) + " and op " +
               std::to_string(reduce) + " (only allreduce, and it always, names both)");
  if (reduces && bytes % elem_size(e))
    return bad("allreduce of " + std::to_string(bytes) + " B is not a whole number of " +
               std::to_string(elem_size(e)) + " B elements");
  return {};
}

Status get_token(codec::Reader& r, std::string& token) {
  std::span<const uint8_t> text;
  if (!r.take(kTokenHexDigits, text)) return bad("truncated session token");
  token.assign(text.begin(), text.end());
  if (token.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
    return bad("session token is not " + std::to_string(kTokenHexDigits) + " hex digits");
  return {};
}

bool valid_address(const std::string& address) { return !address.empty() && address.size() <= kMaxAddressBytes; }

Status get_spans(codec::Reader& r, Post& p) {
  OB_RETURN_IF_ERROR(get_token(r, p.token));
  uint32_t agents = 0;
  if (!r.get(agents) || agents < 2 || agents > p.size)
    return bad(std::to_string(agents) + " agents for a communicator of " + std::to_string(p.size) +
               " ranks (2 to one per rank)");
  p.agents.resize(agents);
  for (uint32_t i = 0; i < agents; ++i)
    if (!r.get_string(p.agents[i]) || !valid_address(p.agents[i]))
      return bad("agent " + std::to_string(i) + "'s address: truncated, empty or over " +
                 std::to_string(kMaxAddressBytes) + " B");
  uint32_t n = 0;
  if (!r.get(n) || n != p.size || r.in.size() / 4 < n)
    return bad("agent_of needs " + std::to_string(p.size) + " values");
  p.agent_of.resize(n);
  for (uint32_t& a : p.agent_of) {
    r.get(a);
    if (a >= agents) return bad("agent_of names agent " + std::to_string(a) + " of " + std::to_string(agents));
  }
  return {};
}

// What both messages start with: kVersion, the kind, comm, seq, size, the sender (a rank or an
// agent) and the collective's kinds.
template <typename Message>
void put_head(codec::Writer& w, Kind kind, const Message& m, uint32_t sender) {
  w.put(kVersion);
  w.put(static_cast<uint8_t>(kind));
  w.put(m.comm);
  w.put(m.seq);
  w.put(m.size);
  w.put(sender);
  w.put(static_cast<uint8_t>(m.coll));
  w.put(static_cast<uint8_t>(m.elem));
  w.put(static_cast<uint8_t>(m.reduce));
}

}  // namespace

std::vector<uint8_t> encode(const Post& p) {
  codec::Writer w;
  put_head(w, Kind::kPost, p, p.rank);
  w.put(static_cast<uint8_t>((p.in_place ? kInPlace : 0) | (p.keep ? kKeep : 0) | (p.agents.empty() ? 0 : kSpans) |
                             (p.own_block ? kOwnBlock : 0) | (p.failure.empty() ? 0 : kFailed) |
                             (p.freed.empty() ? 0 : kFreed)));
  w.put(p.root);
  w.put(p.bytes);
  w.put(p.send_offset);
  w.put(p.recv_offset);
  if (p.coll == Coll::kAlltoallv)
    for (const auto* a : {&p.send_counts, &p.send_displs, &p.recv_counts, &p.recv_displs}) put_array(w, *a);
  put_descriptor(w, p.send_region);
  put_descriptor(w, p.recv_region);
  if (!p.freed.empty()) {
    w.put(static_cast<uint32_t>(p.freed.size()));
    for (const auto& d : p.freed) put_descriptor(w, d);
  }
  if (!p.agents.empty()) {
    w.put_bytes(p.token);
    w.put(static_cast<uint32_t>(p.agents.size()));
    for (const auto& a : p.agents) w.put_string(a);
    w.put(static_cast<uint32_t>(p.agent_of.size()));
    for (uint32_t a : p.agent_of) w.put(a);
  }
  if (!p.failure.empty()) w.put_string(std::string_view(p.failure).substr(0, kMaxFailureBytes));
  return std::move(w.bytes);
}

std::vector<uint8_t> encode(const Share& s) {
  codec::Writer w;
  put_head(w, Kind::kShare, s, s.from);
  w.put(s.root);
  w.put(s.bytes);
  w.put(static_cast<uint8_t>(s.first_piece ? kFirstPiece : 0));
  put_array(w, s.lengths);
  w.put_bytes(s.data);
  return std::move(w.bytes);
}

std::vector<uint8_t> encode(const Reach& reach) {
  codec::Writer w;
  w.put(kVersion);
  w.put(static_cast<uint8_t>(Kind::kReach));
  w.put(reach.value);
  put_descriptor(w, reach.region);
  return std::move(w.bytes);
}

Result<Kind> kind_of(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return bad("empty request");
  if (bytes[0] != kVersion)
    return bad("wire version " + std::to_string(bytes[0]) + " (this agent speaks " + std::to_string(kVersion) + ")");
  if (bytes.size() < 2 || bytes[1] >= kKinds)
    return bad("unknown message kind" + (bytes.size() < 2 ? std::string() : " " + std::to_string(bytes[1])));
  return static_cast<Kind>(bytes[1]);
}

Result<Post> decode(std::span<const uint8_t> bytes) {
  OB_ASSIGN_OR_RETURN(Kind kind, kind_of(bytes));
  if (kind != Kind::kPost) return bad("a " + std::string(kind_name(kind)) + " where a post was expected");
  codec::Reader r{bytes.subspan(2)};
  Post p;
  uint8_t coll = 0, elem = 0, reduce = 0, flags = 0;
  if (!r.get(p.comm) || !r.get(p.seq) || !r.get(p.size) || !r.get(p.rank) || !r.get(coll) || !r.get(elem) ||
      !r.get(reduce) || !r.get(flags) || !r.get(p.root) || !r.get(p.bytes) ||
      !r.get(p.send_offset) || !r.get(p.recv_offset))
    return bad("truncated collective header");
  if (p.size == 0 || p.size > kMaxRanks)
    return bad("communicator of " + std::to_string(p.size) + " ranks (1 to " + std::to_string(kMaxRanks) + ")");
  if (p.rank >= p.size) return bad("rank " + std::to_string(p.rank) + " of " + std::to_string(p.size) + " ranks");
  if (flags & ~(kInPlace | kKeep | kSpans | kOwnBlock | kFailed | kFreed))
    return bad("unknown flags " + std::to_string(flags));
  OB_RETURN_IF_ERROR(shape(coll, elem, reduce, p.bytes, p.coll, p.elem, p.reduce));
  p.in_place = flags & kInPlace;
  p.keep = flags & kKeep;
  p.own_block = flags & kOwnBlock;
  if (p.coll == Coll::kBcast && (p.root >= p.size || p.in_place))
    return bad("bcast from root " + std::to_string(p.root) + " of " + std::to_string(p.size) + " ranks" +
               (p.in_place ? ", in place" : ""));
  if (p.own_block && (p.in_place || p.coll == Coll::kBcast || p.coll == Coll::kAllreduce))
    return bad(std::string(coll_name(p.coll)) + (p.in_place ? " in place" : "") +
               " with its own block copied (only alltoall(v) and allgather, not in place)");
  if (p.coll == Coll::kAlltoallv)
    for (auto* a : {&p.send_counts, &p.send_displs, &p.recv_counts, &p.recv_displs})
      if (!get_array(r, p.size, *a)) return bad("alltoallv needs four arrays of " + std::to_string(p.size) + " values");
  OB_ASSIGN_OR_RETURN(p.send_region, get_descriptor(r, "send"));
  OB_ASSIGN_OR_RETURN(p.recv_region, get_descriptor(r, "receive"));
  // A region is needed where this rank has bytes to give or take (zero counts need none).
  uint64_t sends = p.bytes, receives = p.bytes;
  if (p.coll == Coll::kAlltoallv) {
    sends = receives = 0;
    for (uint32_t i = 0; i < p.size; ++i) sends |= p.send_counts[i], receives |= p.recv_counts[i];
  }
  const bool needs_send = !p.in_place && p.coll != Coll::kBcast && sends;
  const bool failed = flags & kFailed;  // a rank that does not take part gives no regions
  if (!failed && ((needs_send && p.send_region.empty()) || (receives && p.recv_region.empty())))
    return bad(std::string(coll_name(p.coll)) + (p.in_place ? " in place" : "") + " without its " +
               (needs_send && p.send_region.empty() ? "send" : "receive") + " region");
  if (flags & kFreed) {
    uint32_t n = 0;
    if (!r.get(n)) return bad("freed regions: truncated");
    if (n == 0 || n > kMaxFreed)
      return bad("a post that names " + std::to_string(n) + " freed regions (1 to " + std::to_string(kMaxFreed) + ")");
    p.freed.resize(n);
    for (auto& d : p.freed) {
      OB_ASSIGN_OR_RETURN(d, get_descriptor(r, "freed"));
      if (d.empty()) return bad("a freed region without its descriptor");
    }
  }
  if (flags & kSpans) OB_RETURN_IF_ERROR(get_spans(r, p));
  if (failed) {
    if (!r.get_string(p.failure)) return bad("truncated reason for not taking part");
    if (p.failure.empty() || p.failure.size() > kMaxFailureBytes)
      return bad("a reason for not taking part of " + std::to_string(p.failure.size()) + " B (1 to " +
                 std::to_string(kMaxFailureBytes) + ")");
  }
  if (!r.in.empty()) return bad(std::to_string(r.in.size()) + " B after the request");
  return p;
}

Result<Reach> decode_reach(std::span<const uint8_t> bytes) {
  OB_ASSIGN_OR_RETURN(Kind kind, kind_of(bytes));
  if (kind != Kind::kReach) return bad("a " + std::string(kind_name(kind)) + " where a reach was expected");
  codec::Reader r{bytes.subspan(2)};
  Reach reach;
  if (!r.get(reach.value)) return bad("truncated reach");
  OB_ASSIGN_OR_RETURN(reach.region, get_descriptor(r, "reached"));
  if (reach.region.empty()) return bad("reach without a region");
  if (!r.in.empty()) return bad(std::to_string(r.in.size()) + " B after the reach");
  return reach;
}

Result<Share> decode_share(std::span<const uint8_t> bytes) {
  OB_ASSIGN_OR_RETURN(Kind kind, kind_of(bytes));
  if (kind != Kind::kShare) return bad("a " + std::string(kind_name(kind)) + " where a share was expected");
  codec::Reader r{bytes.subspan(2)};
  Share s;
  uint8_t coll = 0, elem = 0, reduce = 0, flags = 0;
  uint32_t blocks = 0;
  if (!r.get(s.comm) || !r.get(s.seq) || !r.get(s.size) || !r.get(s.from) || !r.get(coll) || !r.get(elem) ||
      !r.get(reduce) || !r.get(s.root) || !r.get(s.bytes) || !r.get(flags) || !r.get(blocks))
    return bad("truncated share header");
  if (flags & ~kFirstPiece) return bad("unknown share flags " + std::to_string(flags));
  s.first_piece = flags & kFirstPiece;
  if (s.size == 0 || s.size > kMaxRanks || s.from >= s.size)
    return bad("share from agent " + std::to_string(s.from) + " for a communicator of " + std::to_string(s.size) +
               " ranks (1 to " + std::to_string(kMaxRanks) + ", at most one agent each)");
  OB_RETURN_IF_ERROR(shape(coll, elem, reduce, s.bytes, s.coll, s.elem, s.reduce));
  // At most one block per pair of ranks.
  if (blocks > uint64_t{s.size} * s.size || r.in.size() / 8 < blocks)
    return bad("share of " + std::to_string(blocks) + " blocks for " + std::to_string(s.size) + " ranks");
  s.lengths.resize(blocks);
  uint64_t total = 0;
  for (uint64_t& n : s.lengths) {
    r.get(n);
    if (s.first_piece ? total + n < total : n > r.in.size() || total + n > r.in.size())
      return bad("share's blocks add up to more than " +
                 (s.first_piece ? std::string("2^64") : "the " + std::to_string(r.in.size())) + " B it carries");
    total += n;
  }
  if (s.first_piece && (r.in.empty() || r.in.size() > kMaxSharePiece || r.in.size() >= total))
    return bad("share's first piece of " + std::to_string(r.in.size()) + " B (1 to " +
               std::to_string(kMaxSharePiece) + ", less than its blocks' " + std::to_string(total) + ")");
  if (!s.first_piece && total != r.in.size())
    return bad("share's blocks add up to " + std::to_string(total) + " B, it carries " + std::to_string(r.in.size()));
  s.data = r.in;
  return s;
}

std::vector<uint8_t> encode(const SharePiece& p) {
  codec::Writer w;
  w.put(kVersion);
  w.put(static_cast<uint8_t>(Kind::kSharePiece));
  w.put(p.comm);
  w.put(p.seq);
  w.put(p.from);
  w.put(p.offset);
  w.put_bytes(p.data);
  return std::move(w.bytes);
}

Result<SharePiece> decode_share_piece(std::span<const uint8_t> bytes) {
  OB_ASSIGN_OR_RETURN(Kind kind, kind_of(bytes));
  if (kind != Kind::kSharePiece) return bad("a " + std::string(kind_name(kind)) + " where a share's piece was expected");
  codec::Reader r{bytes.subspan(2)};
  SharePiece p;
  if (!r.get(p.comm) || !r.get(p.seq) || !r.get(p.from) || !r.get(p.offset)) return bad("truncated share piece");
  if (r.in.empty() || r.in.size() > kMaxSharePiece || p.offset + r.in.size() < p.offset)
    return bad("share piece of " + std::to_string(r.in.size()) + " B at " + std::to_string(p.offset) + " (1 to " +
               std::to_string(kMaxSharePiece) + ", ending within 2^64)");
  p.data = r.in;
  return p;
}

std::vector<uint8_t> encode(const P2p& p) {
  codec::Writer w;
  w.put(kVersion);
  w.put(static_cast<uint8_t>(p.kind));
  w.put(p.comm);
  w.put(p.size);
  w.put(p.rank);
  w.put(p.peer);
  w.put(p.tag);
  const bool remote = !p.agent.empty();
  w.put(static_cast<uint8_t>((p.sync ? kSync : 0) | (remote ? kRemote : 0)));
  w.put(p.bytes);
  w.put(p.id);
  put_descriptor(w, p.region);
  if (remote) {
    w.put_bytes(p.token);
    w.put_string(p.agent);
  }
  return std::move(w.bytes);
}

Result<P2p> decode_p2p(std::span<const uint8_t> bytes) {
  OB_ASSIGN_OR_RETURN(Kind kind, kind_of(bytes));
  if (kind < Kind::kSend || kind > Kind::kCancel)
    return bad("a " + std::string(kind_name(kind)) + " where a point-to-point message was expected");
  codec::Reader r{bytes.subspan(2)};
  P2p p;
  p.kind = kind;
  uint8_t flags = 0;
  if (!r.get(p.comm) || !r.get(p.size) || !r.get(p.rank) || !r.get(p.peer) || !r.get(p.tag) || !r.get(flags) ||
      !r.get(p.bytes) || !r.get(p.id))
    return bad("truncated " + std::string(p2p_name(kind)) + " header");
  const std::string what(p2p_name(kind));
  if (p.size == 0 || p.size > kMaxRanks)
    return bad(what + " on a communicator of " + std::to_string(p.size) + " ranks (1 to " + std::to_string(kMaxRanks) +
               ")");
  if (p.rank >= p.size) return bad(what + " by rank " + std::to_string(p.rank) + " of " + std::to_string(p.size));
  const bool sends = kind == Kind::kSend, any = kind == Kind::kRecv || kind == Kind::kProbe;
  if (flags & ~(kSync | kRemote) || (flags & kSync && !sends) ||
      (flags & kRemote && !sends && !(kind == Kind::kRecv && p.peer != kAny)))
    return bad(what + " with flags " + std::to_string(flags));
  p.sync = flags & kSync;
  if (sends || any) {
    if ((p.peer < 0 || static_cast<uint32_t>(p.peer) >= p.size) && !(any && p.peer == kAny))
      return bad(what + (sends ? " to rank " : " from rank ") + std::to_string(p.peer) + " of " +
                 std::to_string(p.size));
    if (p.tag < 0 && !(any && p.tag == kAny)) return bad(what + " with tag " + std::to_string(p.tag));
  }
  OB_ASSIGN_OR_RETURN(p.region, get_descriptor(r, what.c_str()));
  const bool needs_region = (sends || kind == Kind::kRecv) && p.bytes;
  if (needs_region != !p.region.empty())
    return bad(what + " of " + std::to_string(p.bytes) + " B " + (needs_region ? "without" : "with") + " a region");
  if (flags & kRemote) {
    OB_RETURN_IF_ERROR(get_token(r, p.token));
    if (!r.get_string(p.agent) || !valid_address(p.agent))
      return bad(what + "'s agent address: truncated, empty or over " + std::to_string(kMaxAddressBytes) + " B");
  }
  if (!r.in.empty()) return bad(std::to_string(r.in.size()) + " B after the " + what);
  return p;
}

std::vector<uint8_t> encode(const Forward& f) {
  codec::Writer w;
  w.put(kVersion);
  w.put(static_cast<uint8_t>(Kind::kForward));
  w.put(f.comm);
  w.put(f.size);
  w.put(f.source);
  w.put(f.dest);
  w.put(f.tag);
  w.put(static_cast<uint8_t>((f.sync ? kSync : 0) | (f.later ? kLater : 0) | (f.follows ? kFollows : 0) |
                             (f.gone ? kGone : 0)));
  w.put(f.bytes);
  w.put(f.id);
  w.put(f.offset);
  w.put_bytes(f.data);
  return std::move(w.bytes);
}

std::vector<uint8_t> encode_watch() { return {kVersion, static_cast<uint8_t>(Kind::kWatch)}; }

Status decode_watch(std::span<const uint8_t> bytes) {
  OB_ASSIGN_OR_RETURN(Kind kind, kind_of(bytes));
  if (kind != Kind::kWatch) return bad("a " + std::string(kind_name(kind)) + " where a watch was expected");
  if (bytes.size() != 2) return bad(std::to_string(bytes.size() - 2) + " B after the watch");
  return {};
}

Result<Forward> decode_forward(std::span<const uint8_t> bytes) {
  OB_ASSIGN_OR_RETURN(Kind kind, kind_of(bytes));
  if (kind != Kind::kForward) return bad("a " + std::string(kind_name(kind)) + " where a forwarded send was expected");
  codec::Reader r{bytes.subspan(2)};
  Forward f;
  uint8_t flags = 0;
  if (!r.get(f.comm) || !r.get(f.size) || !r.get(f.source) || !r.get(f.dest) || !r.get(f.tag) || !r.get(flags) ||
      !r.get(f.bytes) || !r.get(f.id) || !r.get(f.offset))
    return bad("truncated forwarded send header");
  if (f.size == 0 || f.size > kMaxRanks || f.source >= f.size || f.dest >= f.size)
    return bad("forwarded send from rank " + std::to_string(f.source) + " to rank " + std::to_string(f.dest) + " of " +
               std::to_string(f.size) + " (1 to " + std::to_string(kMaxRanks) + " ranks)");
  if (f.tag < 0) return bad("forwarded send with tag " + std::to_string(f.tag));
  f.sync = flags & kSync, f.later = flags & kLater, f.follows = flags & kFollows, f.gone = flags & kGone;
  if (flags & ~(kSync | kLater | kFollows | kGone) || (f.later && f.follows) || (f.gone && !f.follows))
    return bad("forwarded send with flags " + std::to_string(flags));
  const uint64_t carried = r.in.size();
  const bool piece = f.follows && !f.gone;
  if (piece ? f.offset > f.bytes || carried > f.bytes - f.offset || carried > kMaxForwardPiece ||
                  (carried == 0 && f.offset != f.bytes)
            : f.offset != 0 || carried != (f.later || f.gone ? 0 : f.bytes))
    return bad("forwarded send of " + std::to_string(f.bytes) + " B carrying " + std::to_string(carried) +
               " B at offset " + std::to_string(f.offset));
  f.data = r.in;
  return f;
}

std::vector<uint8_t> encode(const Envelope& e) {
  codec::Writer w;
  w.put(e.source);
  w.put(e.tag);
  w.put(e.bytes);
  w.put(static_cast<uint8_t>((e.found ? kFound : 0) | (e.cancelled ? kCancelled : 0)));
  return std::move(w.bytes);
}

Result<Envelope> decode_envelope(std::span<const uint8_t> bytes) {
  codec::Reader r{bytes};
  Envelope e;
  uint8_t flags = 0;
  if (!r.get(e.source) || !r.get(e.tag) || !r.get(e.bytes) || !r.get(flags) || !r.in.empty() ||
      flags & ~(kFound | kCancelled))
    return bad("malformed envelope of " + std::to_string(bytes.size()) + " B");
  e.found = flags & kFound, e.cancelled = flags & kCancelled;
  return e;
}

}  // namespace outboard::services::mpi_wire
