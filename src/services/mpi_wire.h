#pragma once
// The `mpi` service's wire format (little-endian, util/codec.h). A rank posts each collective it
// hands to its agent as one request; the agent answers every rank's request once all ranks of the
// communicator have posted it and every result is in their memory (or fails them all, naming why).
// Where the communicator's ranks are served by several agents, each agent sends every other one a
// share: what that agent's ranks need from its own ranks, answered once the receiver ran the
// collective (so a sender hears of a receiver that failed or died).
//
// Every message: u8 kVersion, u8 Kind.
// Post: u64 comm, u64 seq, u32 size, u32 rank, u8 Coll, u8 Elem, u8 Reduce, u8 flags (kInPlace,
// kKeep, kSpans, kOwnBlock, kFailed), u32 root, u64 bytes, u64 send_offset, u64 recv_offset, then for kAlltoallv four
// u32-counted u64 arrays (send counts, send displacements, receive counts, receive displacements,
// in bytes, `size` each), then the send region's descriptor (u32 length + bytes; empty in place and
// for kBcast) and the receive region's (for kBcast: the buffer, read at the root and written
// elsewhere); with kSpans: the job's session token (64 hex digits), u32-counted agent addresses
// (u32 length + bytes each) and u32-counted agent_of (u32 each, `size` of them); with kFailed,
// last, why the rank could not take part (u32 length + 1 to kMaxFailureBytes bytes; no region
// needed then).
// Share: u64 comm, u64 seq, u32 size, u32 from, u8 Coll, u8 Elem, u8 Reduce, u32 root, u64 bytes,
// u8 flags (kFirstPiece), u32-counted u64 block lengths, then the blocks back to back (their
// lengths' sum, nothing after; with kFirstPiece, their first 1 to kMaxSharePiece bytes).
// SharePiece: u64 comm, u64 seq, u32 from, u64 offset, then 1 to kMaxSharePiece bytes of the
// share's blocks from `offset`.
// Reach: u64 value, then a region's descriptor (u32 length + bytes) whose first 8 bytes hold it.
// Send, Recv, Probe, Cancel (point-to-point, one message each): u64 comm, u32 size, u32 rank,
// i32 peer, i32 tag, u8 flags (kSync, kRemote), u64 bytes, u64 id, then the buffer's region
// descriptor (u32 length + bytes; present exactly where a send or receive has bytes), then with
// kRemote the job's session token (64 hex digits) and the other rank's agent's address (u32
// length + bytes). A receive's or probe's answer is an Envelope: u32 source, i32 tag, u64 bytes, u8
// flags (kFound, kCancelled).
// Forward (agent to agent: a send whose receiver another agent serves): u64 comm, u32 size,
// u32 source, u32 dest, i32 tag, u8 flags (kSync, kLater, kFollows, kGone), u64 bytes, u64 id,
// u64 offset, then the message's bytes (`bytes` of them; none with kLater or kGone; with kFollows
// a piece of them, at `offset`).
// Watch (agent to agent): nothing more. Never answered while the agent that holds it lives: its
// failure tells the watcher that agent is gone.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "outboard/status.h"

namespace outboard::services::mpi_wire {

inline constexpr uint8_t kVersion = 5;
/// Ranks of one communicator the agent takes a collective from.
inline constexpr uint32_t kMaxRanks = 1024;
/// Bytes of a region descriptor (UCX's packed key and address run to a few hundred).
inline constexpr uint32_t kMaxDescriptorBytes = 4096;
/// Bytes of an agent's address ("host:port").
inline constexpr uint32_t kMaxAddressBytes = 256;
/// Hex digits of a session token.
inline constexpr uint32_t kTokenHexDigits = 64;

enum class Kind : uint8_t { kPost, kShare, kReach, kSend, kRecv, kProbe, kCancel, kForward, kWatch, kSharePiece };
inline constexpr uint8_t kKinds = 10;

enum class Coll : uint8_t { kAlltoall, kAlltoallv, kAllgather, kBcast, kAllreduce };
inline constexpr uint8_t kColls = 5;
enum class Elem : uint8_t { kBytes, kI32, kI64, kF32, kF64 };
inline constexpr uint8_t kElems = 5;
enum class Reduce : uint8_t { kNone, kSum, kMin, kMax, kProd };
inline constexpr uint8_t kReduces = 5;
inline constexpr uint8_t kInPlace = 1;
/// The rank keeps this post's regions registered, unchanged, for as long as its connection or
/// until a later post names them freed (kFreed): the agent may keep their imports and find them
/// again by their descriptor's bytes. (Without it a descriptor's bytes do not name one region: a
/// freed shared-memory segment's file descriptor and address come back for the next one.)
inline constexpr uint8_t kKeep = 2;
/// The communicator's ranks are served by several agents: the post names them (Spans).
inline constexpr uint8_t kSpans = 4;
/// Alltoall(v) or allgather, not in place: the rank copied what it gives itself into its output,
/// and the agent leaves that block alone (a copy the rank makes once in its own memory, where the
/// agent would make two through the kernel).
inline constexpr uint8_t kOwnBlock = 8;
/// The rank could not take part (it could not stage its buffers) and says why: the agent fails
/// the collective for every rank with that, where the others would wait for it until their timeout.
inline constexpr uint8_t kFailed = 16;
/// Bytes of a rank's reason for not taking part.
inline constexpr uint32_t kMaxFailureBytes = 1024;
/// The rank freed regions it had posted with kKeep (Post::freed): the agent drops their imports
/// as the post comes, before any import of its own, since a freed region's descriptor bytes may
/// name the next region the rank posts.
inline constexpr uint8_t kFreed = 32;
/// Freed regions one post names at most.
inline constexpr uint32_t kMaxFreed = 16;

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
  bool own_block = false;  // kOwnBlock
  uint32_t root = 0;  // kBcast
  // kAlltoall, kAllgather: bytes to or from each rank; kBcast, kAllreduce: bytes of the buffer.
  uint64_t bytes = 0;
  std::vector<uint64_t> send_counts, send_displs, recv_counts, recv_displs;  // kAlltoallv, in bytes
  std::vector<uint8_t> send_region, recv_region;                          // descriptors
  std::vector<std::vector<uint8_t>> freed;  // kFreed: descriptors, at most kMaxFreed
  uint64_t send_offset = 0, recv_offset = 0;  // where in its region each buffer starts
  // kSpans (agents not empty): the agents serving the job, the same list on every rank, and which
  // of them serves each rank of the communicator; `token` is the job's session, which the agents
  // join on each other.
  std::string token;
  std::vector<std::string> agents;
  std::vector<uint32_t> agent_of;
  std::string failure;  // kFailed: why this rank could not take part (encode() keeps kMaxFailureBytes)
};

/// What agent `from` sends each other agent serving a collective: the blocks its ranks give the
/// receiver's ranks, in rank order (for alltoall(v): by sending rank, then receiving rank; else one
/// block per sending rank: its input, empty for bcast ranks other than the root). The header
/// repeats the collective's shape, so agents whose ranks disagree say so.
struct Share {
  uint64_t comm = 0, seq = 0;
  uint32_t size = 0, from = 0;
  Coll coll = Coll::kAlltoall;
  Elem elem = Elem::kBytes;
  Reduce reduce = Reduce::kNone;
  uint32_t root = 0;
  uint64_t bytes = 0;
  bool first_piece = false;  // kFirstPiece: `data` is the first piece of the blocks, SharePieces follow
  std::vector<uint64_t> lengths;
  std::span<const uint8_t> data;  // encode(): the blocks (none: the header alone); decode(): a view
};

/// A share whose blocks exceed kMaxSharePiece goes in pieces, so that no message nears a
/// connection's limit whatever the collective's size: the Share carries the first piece
/// (kFirstPiece), SharePieces the rest, in order on the one connection between the two agents.
/// Each is answered once stored, the last one as a whole share is (once the receiver ran the
/// collective); the receiver holds the whole share in memory it reserves at the first piece.
struct SharePiece {
  uint64_t comm = 0, seq = 0;
  uint32_t from = 0;
  uint64_t offset = 0;  // where `data` starts in the share's blocks
  std::span<const uint8_t> data;  // encode(): the piece (none: the header alone); decode(): a view
};
inline constexpr uint64_t kMaxSharePiece = 4ull << 20;
inline constexpr uint8_t kFirstPiece = 1;

/// A rank asks whether its agent reaches its memory through a region of this kind (exposed
/// memory: the kernel may forbid it) before it hands it its buffers that way: the agent reads the
/// region's first 8 bytes and answers whether they hold `value`.
struct Reach {
  uint64_t value = 0;
  std::vector<uint8_t> region;  // descriptor
};

/// A receive's or probe's source or tag that matches any (MPI_ANY_SOURCE, MPI_ANY_TAG: their
/// values differ between MPI ABIs, so the interposer translates them).
inline constexpr int32_t kAny = -1;
/// A send answered only once a receive matched it (MPI_Ssend, MPI_Issend).
inline constexpr uint8_t kSync = 1;
/// A send whose receiver, or a receive whose source, another agent serves: the message names that
/// agent (P2p::agent).
inline constexpr uint8_t kRemote = 2;

/// One point-to-point operation of a rank. The agent matches sends and receives of a communicator
/// as MPI does: a receive takes the first message, in arrival order, from its source (or any)
/// with its tag (or any); a rank's messages arrive in the order it sent them, over its one
/// connection, so two messages of one source, tag and communicator never overtake each other.
struct P2p {
  Kind kind = Kind::kSend;  // kSend, kRecv, kProbe or kCancel
  uint64_t comm = 0;        // the job's name for the communicator
  uint32_t size = 0, rank = 0;  // the communicator's size and the posting rank in it
  int32_t peer = 0;  // kSend: the destination; kRecv, kProbe: the source or kAny
  int32_t tag = 0;   // kSend: >= 0; kRecv, kProbe: >= 0 or kAny
  bool sync = false;  // kSync
  uint64_t bytes = 0;  // kSend: the message's; kRecv: the receive buffer's capacity
  uint64_t id = 0;     // the rank's number for a receive; kCancel names the receive to cancel by it
  std::vector<uint8_t> region;  // descriptor of the buffer (kSend, kRecv with bytes)
  // kRemote (agent not empty): the other rank's agent, which this agent joins in session `token`
  // (the job's): to forward a send to it, or to hear of its end while a receive waits for its rank.
  std::string token, agent;
};

/// A send forwarded by the sender's agent to the receiver's, which matches it as its own ranks'
/// sends, in the order they came on the one connection between the two: the sender's messages
/// keep their order. With its data, it is answered once the receiver's agent holds the message
/// within its budget (or, for a synchronous send or over the budget, once a receive took it): the
/// sender's send then completes. Beyond the sender's agent's window only the envelope goes
/// (kLater), answered when the receiver's agent wants the data (a receive matched it, or its
/// budget has room); the data follows in forwards of its own (kFollows, the same id), piece after
/// piece in order, each answered once stored and the last as above, or kGone where the sender
/// left meanwhile. A message over kMaxForwardPiece always goes so: no forward nears a
/// connection's message limit, whatever the message's size.
struct Forward {
  uint64_t comm = 0;
  uint32_t size = 0, source = 0, dest = 0;
  int32_t tag = 0;
  bool sync = false, later = false, follows = false, gone = false;
  uint64_t bytes = 0;
  uint64_t id = 0;  // the sending agent's number for it (one sequence per receiving agent)
  uint64_t offset = 0;  // kFollows: where `data` starts in the message
  std::span<const uint8_t> data;  // encode(): the message or piece (none: the header alone); decode(): a view
};
/// The most data one forward carries.
inline constexpr uint64_t kMaxForwardPiece = 4ull << 20;
inline constexpr uint8_t kLater = 2;
inline constexpr uint8_t kFollows = 4;
inline constexpr uint8_t kGone = 8;

/// The answer to a receive (what it got: a message's source, tag and whole size, of which the
/// receive took at most its capacity; or kCancelled) or a probe (kFound and the first matching
/// message's envelope, or not found).
struct Envelope {
  uint32_t source = 0;
  int32_t tag = 0;
  uint64_t bytes = 0;
  bool found = false, cancelled = false;
};
inline constexpr uint8_t kFound = 1;
inline constexpr uint8_t kCancelled = 2;

std::string_view p2p_name(Kind kind);  // "send", "receive", "probe", "cancel"

std::vector<uint8_t> encode(const Post& post);
std::vector<uint8_t> encode(const Share& share);
std::vector<uint8_t> encode(const Reach& reach);
/// The message's kind, or an error for a version or kind this agent does not speak.
Result<Kind> kind_of(std::span<const uint8_t> bytes);
/// Every field checked: kVersion, rank < size <= kMaxRanks, known kinds, a reduction's element and
/// op (and bytes a multiple of the element), alltoallv's arrays `size` long, the descriptors
/// present where needed and within kMaxDescriptorBytes, with kSpans a token of kTokenHexDigits,
/// 2 to `size` addresses within kMaxAddressBytes and every agent_of naming one, nothing left over.
Result<Post> decode(std::span<const uint8_t> bytes);
/// A reach: a descriptor within kMaxDescriptorBytes, nothing after it.
Result<Reach> decode_reach(std::span<const uint8_t> bytes);
/// A share: size <= kMaxRanks, known kinds and flags, the lengths adding up to the data that
/// follows (with kFirstPiece: to more than it, within 64 bits, the data 1 to kMaxSharePiece B).
Result<Share> decode_share(std::span<const uint8_t> bytes);
std::vector<uint8_t> encode(const SharePiece& piece);
/// A share's piece: 1 to kMaxSharePiece B of data, ending within 64 bits.
Result<SharePiece> decode_share_piece(std::span<const uint8_t> bytes);
std::vector<uint8_t> encode(const P2p& p2p);
/// A point-to-point message: rank < size <= kMaxRanks; a send's peer a rank of the communicator
/// and its tag >= 0; a receive's or probe's peer such a rank or kAny and its tag >= 0 or kAny;
/// the region present exactly where a send or receive has bytes, within kMaxDescriptorBytes; only
/// sends sync; only sends and receives from one rank remote, with a token of kTokenHexDigits and
/// an address of 1 to kMaxAddressBytes; nothing left over.
Result<P2p> decode_p2p(std::span<const uint8_t> bytes);
/// A forward: source and dest < size <= kMaxRanks, tag >= 0, kLater and kFollows not both, kGone
/// only with kFollows; the data `bytes` long where it carries the message, a piece of at most
/// kMaxForwardPiece within it with kFollows (offset 0 elsewhere), none with kLater or kGone.
Result<Forward> decode_forward(std::span<const uint8_t> bytes);
std::vector<uint8_t> encode(const Forward& forward);
/// A watch: the kind's two bytes alone.
std::vector<uint8_t> encode_watch();
Status decode_watch(std::span<const uint8_t> bytes);
std::vector<uint8_t> encode(const Envelope& envelope);
Result<Envelope> decode_envelope(std::span<const uint8_t> bytes);

}  // namespace outboard::services::mpi_wire
