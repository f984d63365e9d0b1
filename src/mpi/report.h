#pragma once
// What the MPI interposer did with each operation it intercepts: offloaded, or passed through to
// the MPI library and why. Counted per rank and summed over MPI_COMM_WORLD at MPI_Finalize
// (OUTBOARD_MPI_REPORT=1). Independent of the MPI ABI, so it is built and tested once.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace outboard::mpi {

// Point-to-point (the last seven) only where the job offloads it (OUTBOARD_MPI_P2P=1): each row
// counts a family of calls (MPI_Isend: its synchronous, buffered and ready forms too; MPI_Probe:
// Iprobe and the matched probes, whose MPI_Mrecv receives what they claimed; MPI_Start:
// each start of an offloaded persistent send or receive, by MPI_Start or MPI_Startall).
enum class Op : uint8_t {
  kIalltoall, kIalltoallv, kIallgather, kIbcast, kIallreduce,
  kIsend, kIrecv, kSend, kRecv, kSendrecv, kProbe, kStart,
};
inline constexpr size_t kOps = 12;

// The first route an operation fails decides; kOffloaded only when it fails none.
enum class Route : uint8_t {
  kOffloaded,
  kIntercomm,       // an intercommunicator
  kNonContiguous,   // a datatype whose bytes have gaps (a derived vector, struct, resized type)
  kReduceType,      // a reduction on a type other than int, long, float, double (or Fortran integer, real, double precision)
  kReduceOp,        // a reduction other than sum, min, max, prod (user-defined ops included)
  kUnknownComm,     // a communicator made by a call the interposer does not follow (world, dup, split, cart_create, cart_sub)
  kTypeMismatch,    // send and receive sizes differ (an erroneous call: MPI reports it)
  kTooBig,          // larger than the rank's whole staging memory
  kNoAgent,         // no agent serves this job
  kProcNull,        // point-to-point with MPI_PROC_NULL (MPI completes it at once)
  kOneAgent,        // point-to-point on a communicator one agent serves (OUTBOARD_MPI_P2P=1, not =all)
};
inline constexpr size_t kRoutes = 11;

std::string_view op_name(Op op);
std::string_view route_reason(Route route);

using Counts = std::array<std::array<uint64_t, kRoutes>, kOps>;

// Counters any thread of the program may bump (MPI_THREAD_MULTIPLE programs call from several).
class Tally {
 public:
  void add(Op op, Route route) {
    counts_[static_cast<size_t>(op)][static_cast<size_t>(route)].fetch_add(1, std::memory_order_relaxed);
  }
  Counts snapshot() const;

 private:
  std::array<std::array<std::atomic<uint64_t>, kRoutes>, kOps> counts_{};
};

// The report rank 0 prints: one line per operation the job called, with the reasons it passed
// through, e.g. "MPI_Ialltoall    0 offloaded   12 passed through (no agent: 10, intercommunicator: 2)".
std::string render_report(const Counts& totals, int ranks, std::string_view library);

}  // namespace outboard::mpi
