#pragma once
// The rank's half of collective offload (compiled per MPI ABI, with interpose.cpp): the connection
// to the agent's `mpi` service, communicator names, staging memory, and the generalized requests
// the program waits on. Active only when OUTBOARD_MPI_AGENT names an agent at MPI_Init.
//
// Data path, two ways; either way the agent needs no progress call from the rank.
// - Staged: each collective's input is copied into a staging area the agent maps (UCX memory on
//   this host), and its result out of it when the request completes. Staging bounds a call and
//   what may be in flight (OUTBOARD_MPI_STAGING_BYTES); a call over it passes through.
// - In place: the agent reads the input from the program's own buffers and writes the result into
//   them through the kernel (Connection::expose_memory: process_vm_readv/writev). The rank copies
//   and registers nothing, so freed and reused memory needs no registration cache to invalidate:
//   each copy finds the pages mapped at that moment (gone: that collective fails, naming them).
// MPI_Init asks the agent whether it reaches this process so (the kernel may forbid it: another
// user, ptrace rules). Then communicators several agents serve go in place (the wire hides the
// agent's copies); single-agent ones stage, where memcpy beats the kernel's copies.
// OUTBOARD_MPI_EXPOSE=1 puts every communicator in place, =0 none.

#include <mpi.h>

#include <cstdint>
#include <span>
#include <string>

#include "mpi/report.h"
#include "services/mpi_wire.h"

namespace outboard::mpi {

/// Staging memory of one rank when OUTBOARD_MPI_STAGING_BYTES does not say.
inline constexpr uint64_t kDefaultStagingBytes = 16ull << 20;
/// The most staging of its own one call may take (its buffers' bytes) when
/// OUTBOARD_MPI_OWN_STAGING_BYTES does not say: an Ialltoallv too large for staging (where the
/// agent reaches the rank's memory, a larger one goes in place).
inline constexpr uint64_t kDefaultOwnStagingBytes = 4ull << 30;
/// The largest staging of its own a rank keeps after its call, for the next that fits in it,
/// when OUTBOARD_MPI_SPARE_STAGING_BYTES does not say (a larger one is freed with its call).
inline constexpr uint64_t kDefaultSpareStagingBytes = 256ull << 20;
/// How long a rank waits for its communicator's other ranks to post a collective, when
/// OUTBOARD_MPI_TIMEOUT_S does not say (an agent that dies fails it at once).
inline constexpr int64_t kDefaultCollectiveTimeoutS = 3600;
/// How long MPI_Init waits for the agent to say whether it reaches this rank's memory.
inline constexpr int64_t kReachTimeoutS = 10;

/// After PMPI_Init: connects to $OUTBOARD_MPI_AGENT (one session per job: $OUTBOARD_SESSION_TOKEN),
/// or, where it lists several agents (a,b,...), to the one at this world rank modulo their count.
/// Returns what to say when offload is off ("" when on).
std::string offload_start();
/// After offload_start() succeeded on every rank (collective over MPI_COMM_WORLD): learns which
/// agent serves each rank. Where several do, every post names them and the job's session token,
/// so the agents exchange their ranks' data (agent to agent). Returns what to say when it cannot.
std::string offload_agents();
bool offload_on();
/// Collectives this rank posted in place and staged, and why the agent cannot reach its buffers
/// in place ("" where it can).
struct BufferCounts {
  uint64_t exposed = 0, staged = 0;
  uint64_t own = 0, own_allocated = 0;  // of `staged`: through staging of their own, and its regions had
  std::string unreachable;
};
BufferCounts offload_buffers();
/// Before PMPI_Finalize: waits for every offloaded collective, then closes the connection.
void offload_stop();
/// Before PMPI_Abort: closes the connection at once, so the agent fails this job's waiting
/// collectives on the other ranks instead of holding them.
void offload_abort();

/// A communicator created by MPI_Comm_dup or MPI_Comm_split gets a job-wide name (collective over
/// `comm`: called inside those blocking calls, on every member).
void name_communicator(MPI_Comm comm);

/// Where a collective that passed every rule goes: kOffloaded, kUnknownComm, kTooBig (more than
/// the whole staging memory: `staging_bytes` is what it would stage, input and output) or kNoAgent.
/// An `uneven` call (its sizes differ by rank: alltoallv's) is never kTooBig: every rank must
/// decide alike, so offload_post puts it in place, or in staging of its own for this call.
Route offload_route(MPI_Comm comm, uint64_t staging_bytes, bool uneven);

/// Posts a collective the route said to offload. `post` has coll, elem, reduce, root, bytes and the
/// alltoallv arrays; `input` is the bytes the agent reads (staged now), `output` where the result
/// goes when the request completes (`output_bytes` of it). Waits for staging room when earlier
/// collectives hold it. Returns an MPI error code.
int offload_post(services::mpi_wire::Post post, MPI_Comm comm, std::span<const uint8_t> input, void* output,
                 uint64_t output_bytes, MPI_Request* request);

/// Completion calls: finish the offloaded requests whose answers came, so PMPI sees them
/// complete (the agent's answers arrive through our connection, which only we progress).
void offload_sweep();
/// offload_sweep(), then whether any of `requests` is an offloaded collective still running.
bool offload_running(std::span<const MPI_Request> requests);
/// While waiting for offloaded requests: pokes MPI's progress (a peer may need it to reach the
/// collective), then sleeps until an answer comes or kNapMs pass.
void offload_nap();

/// Point-to-point offload (OUTBOARD_MPI_P2P=1 or =all). The agent matches sends and receives and
/// copies each message from the sender's buffer into the receiver's through the kernel (exposed
/// memory), so a job offloads it only where every rank's agent reaches its memory, all or nothing:
/// a message between an offloaded and a passed-through rank would never be matched. Decided at
/// MPI_Init: p2p_asked() on every rank, p2p_blocker() "" on every rank, then p2p_enable().
/// Per communicator, all of whose ranks decide alike: =1 offloads the communicators several agents
/// serve (across nodes, or --agents rank), where the agents move messages while the ranks compute;
/// one agent's stay with MPI, whose shared memory needs no one woken (measured: the stencil proxy
/// 1.29-1.51x stock through one agent). =all offloads every communicator.
bool p2p_asked();
std::string p2p_blocker();
void p2p_enable();
bool p2p_on();
/// Where an operation with `peer` (a destination or source, maybe MPI_ANY_SOURCE) on `comm` goes:
/// kOffloaded, kProcNull, kIntercomm, kUnknownComm or kOneAgent. Alike on every rank of `comm`.
Route p2p_route(MPI_Comm comm, int peer);
/// Posts a send or receive (`m`: kind, peer, tag and sync in the wire's terms) the route said to
/// offload; its request completes when the agent answers (a receive's status: source, tag, count).
/// A non-contiguous datatype travels packed. Returns an MPI error code.
int p2p_post(services::mpi_wire::P2p m, MPI_Comm comm, const void* buf, int count, MPI_Datatype type,
             bool contiguous, MPI_Request* request);
/// Asks the agent whether a message matching `m` (peer, tag) waits for this rank.
int p2p_iprobe(services::mpi_wire::P2p m, MPI_Comm comm, int* flag, MPI_Status* status);

/// MPI_Improbe: asks the agent, as p2p_iprobe, and where a message waits, claims it for `message`
/// (a handle MPI never made): a receive of exactly its source and tag goes to the agent at once,
/// into a buffer of its size. MPI's order makes it that message, and this process posts no other
/// receive in between (the same lock). The message's bytes wait there for MPI_Imrecv.
int p2p_mprobe(services::mpi_wire::P2p m, MPI_Comm comm, int* flag, MPI_Message* message, MPI_Status* status);
/// Whether `message` is one p2p_mprobe claimed.
bool p2p_claimed(MPI_Message message);
/// MPI_Imrecv of a claimed message: *request is its receive, which delivers into `buf` (`count`
/// of `type`: less than came is MPI_ERR_TRUNCATE) when it completes; *message becomes
/// MPI_MESSAGE_NULL.
int p2p_imrecv(void* buf, int count, MPI_Datatype type, MPI_Message* message, MPI_Request* request);

/// The wait of MPI's Waitany and Waitsome (C or Fortran): while `running()` (offload_running over
/// the call's requests) holds, `poll()` (the call's Test form; true once it finished a request or
/// failed) between naps; then `wait()`, the MPI's own call, for the rest.
template <typename Running, typename Poll, typename Wait>
void wait_some(Running running, Poll poll, Wait wait) {
  while (running()) {
    if (poll()) return;
    offload_nap();
  }
  wait();
}

}  // namespace outboard::mpi
