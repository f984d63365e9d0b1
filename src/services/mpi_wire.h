#pragma once
// The `mpi` service's wire format (little-endian, util/codec.h). A rank posts each collective it
// hands to the agent as one request; the agent answers every rank's request once all ranks of the
// communicator have posted it and every result is in their memory (or fails them all, naming why).
//
// Request: u8 kVersion, u64 comm, u64 seq, u32 size, u32 rank, u8 Coll, u8 Elem, u8 Reduce,
// u8 flags (kInPlace, kKeep), u32 root, u64 bytes, u64 send_offset, u64 recv_offset, then for kAlltoallv four u32-counted u64 arrays (send
// counts, send displacements, receive counts, receive displacements, in bytes, `size` each), then
// the send region's descriptor (u32 length + bytes; empty in place and for kBcast) and the receive
// region's (for kBcast: the buffer, read at the root and written elsewhere).

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "outboard/status.h"

namespace outboard::services::mpi_wire {

inline constexpr uint8_t kVersion = 1;
/// Ranks of one communicator the agent takes a collective from.
inline constexpr uint32_t kMaxRanks = 1024;
/// Bytes of a region descriptor (UCX's packed key and address run to a few hundred).
inline constexpr uint32_t kMaxDescriptorBytes = 4096;

enum class Coll : uint8_t { kAlltoall, kAlltoallv, kAllgather, kBcast, kAllreduce };
inline constexpr uint8_t kColls = 5;
enum class Elem : uint8_t { kBytes, kI32, kI64, kF32, kF64 };
inline constexpr uint8_t kElems = 5;
enum class Reduce : uint8_t { kNone, kSum, kMin, kMax, kProd };
inline constexpr uint8_t kReduces = 5;
inline constexpr uint8_t kInPlace = 1;
/// The rank keeps this post's regions registered, unchanged, for as long as its connection: the
/// agent may keep their imports and find them again by their descriptor's bytes. (Without it a
/// descriptor's bytes do not name one region: a freed shared-memory segment's file descriptor
/// and address come back for the next one.)
inline constexpr uint8_t kKeep = 2;

std::string_view coll_name(Coll c);
size_t elem_size(Elem e);  // 1 for kBytes

struct Post {
  uint64_t comm = 0;  // the job's name for the communicator, the same on every rank
  uint64_t seq = 0;   // its offloaded collectives, numbered from 0 in the order posted
  uint32_t size = 0, rank = 0;
  Coll coll = Coll::kAlltoall;
  Elem elem = Elem::kBytes;
  Reduce reduce = Reduce::kNone;
  bool in_place = false;
  bool keep = false;  // kKeep
  uint32_t root = 0;  // kBcast
  // kAlltoall, kAllgather: bytes to or from each rank; kBcast, kAllreduce: bytes of the buffer.
  uint64_t bytes = 0;
  std::vector<uint64_t> send_counts, send_displs, recv_counts, recv_displs;  // kAlltoallv, in bytes
  std::vector<uint8_t> send_region, recv_region;                          // descriptors
  uint64_t send_offset = 0, recv_offset = 0;  // where in its region each buffer starts
};

std::vector<uint8_t> encode(const Post& post);
/// Every field checked: kVersion, rank < size <= kMaxRanks, known kinds, a reduction's element and
/// op (and bytes a multiple of the element), alltoallv's arrays `size` long, the descriptors
/// present where needed and within kMaxDescriptorBytes, nothing left over.
Result<Post> decode(std::span<const uint8_t> bytes);

}  // namespace outboard::services::mpi_wire
