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

namespace {

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

}  // namespace

std::vector<uint8_t> encode(const Post& p) {
  codec::Writer w;
  w.put(kVersion);
  w.put(p.comm);
  w.put(p.seq);
  w.put(p.size);
  w.put(p.rank);
  w.put(static_cast<uint8_t>(p.coll));
  w.put(static_cast<uint8_t>(p.elem));
  w.put(static_cast<uint8_t>(p.reduce));
  w.put(static_cast<uint8_t>((p.in_place ? kInPlace : 0) | (p.keep ? kKeep : 0)));
  w.put(p.root);
  w.put(p.bytes);
  w.put(p.send_offset);
  w.put(p.recv_offset);
  if (p.coll == Coll::kAlltoallv)
    for (const auto* a : {&p.send_counts, &p.send_displs, &p.recv_counts, &p.recv_displs}) put_array(w, *a);
  put_descriptor(w, p.send_region);
  put_descriptor(w, p.recv_region);
  return std::move(w.bytes);
}

Result<Post> decode(std::span<const uint8_t> bytes) {
  codec::Reader r{bytes};
  Post p;
  uint8_t version = 0, coll = 0, elem = 0, reduce = 0, flags = 0;
  if (!r.get(version)) return bad("empty request");
  if (version != kVersion)
    return bad("wire version " + std::to_string(version) + " (this agent speaks " + std::to_string(kVersion) + ")");
  if (!r.get(p.comm) || !r.get(p.seq) || !r.get(p.size) || !r.get(p.rank) || !r.get(coll) || !r.get(elem) ||
      !r.get(reduce) || !r.get(flags) || !r.get(p.root) || !r.get(p.bytes) ||
      !r.get(p.send_offset) || !r.get(p.recv_offset))
    return bad("truncated collective header");
  if (p.size == 0 || p.size > kMaxRanks)
    return bad("communicator of " + std::to_string(p.size) + " ranks (1 to " + std::to_string(kMaxRanks) + ")");
  if (p.rank >= p.size) return bad("rank " + std::to_string(p.rank) + " of " + std::to_string(p.size) + " ranks");
  if (coll >= kColls || elem >= kElems || reduce >= kReduces || (flags & ~(kInPlace | kKeep)))
    return bad("unknown collective " + std::to_string(coll) + ", element " + std::to_string(elem) + ", op " +
               std::to_string(reduce) + " or flags " + std::to_string(flags));
  p.coll = static_cast<Coll>(coll), p.elem = static_cast<Elem>(elem), p.reduce = static_cast<Reduce>(reduce);
  p.in_place = flags & kInPlace;
  p.keep = flags & kKeep;
  const bool reduces = p.coll == Coll::kAllreduce;
  if (reduces != (p.reduce != Reduce::kNone) || reduces != (p.elem != Elem::kBytes))
    return bad(std::string(coll_name(p.coll)) + " with element " + std::to_string(elem) + " and op " +
               std::to_string(reduce) + " (only allreduce, and it always, names both)");
  if (reduces && p.bytes % elem_size(p.elem))
    return bad("allreduce of " + std::to_string(p.bytes) + " B is not a whole number of " +
               std::to_string(elem_size(p.elem)) + " B elements");
  if (p.coll == Coll::kBcast && (p.root >= p.size || p.in_place))
    return bad("bcast from root " + std::to_string(p.root) + " of " + std::to_string(p.size) + " ranks" +
               (p.in_place ? ", in place" : ""));
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
  if ((needs_send && p.send_region.empty()) || (receives && p.recv_region.empty()))
    return bad(std::string(coll_name(p.coll)) + (p.in_place ? " in place" : "") + " without its " +
               (needs_send && p.send_region.empty() ? "send" : "receive") + " region");
  if (!r.in.empty()) return bad(std::to_string(r.in.size()) + " B after the request");
  return p;
}

}  // namespace outboard::services::mpi_wire
