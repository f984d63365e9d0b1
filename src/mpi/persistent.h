#pragma once
// Persistent sends and receives (MPI_Send_init, MPI_Recv_init and their forms) on a communicator
// whose point-to-point the agent serves (compiled per MPI ABI). MPI cannot run them: each start
// must post a new message to the agent. So the program's handle is a stand-in MPI knows, an
// inactive persistent send to MPI_PROC_NULL on MPI_COMM_SELF: valid until MPI_Request_free, and
// inactive (ignored) in any completion call. Each MPI_Start posts the operation as an offloaded
// request of its own, the stand-in's "current" one. Completion calls see through the stand-in:
// while a start runs, its slot holds the current request (which completes it and gives the
// status), and the stand-in goes back into the slot, inactive again, once that one completed.

#include <mpi.h>

#include <span>
#include <vector>

#include "services/mpi_wire.h"

namespace outboard::mpi {

/// What each start of a persistent request posts: `message` has kind, peer, tag and sync in the
/// wire's terms; the rest is the program's call. The communicator must outlive the request.
struct PersistentOp {
  services::mpi_wire::P2p message;
  MPI_Comm comm = MPI_COMM_NULL;
  const void* buf = nullptr;
  int count = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  bool contiguous = true;
};

/// Makes the stand-in for `op` (whose route the caller found offloaded). An MPI error code.
int persistent_init(PersistentOp op, MPI_Request* request);
/// Whether `request` is a stand-in: then MPI_Start, MPI_Request_free and MPI_Cancel are ours.
bool persistent(MPI_Request request);
/// Posts the stand-in's operation; starting one whose last start still runs is an error.
int persistent_start(MPI_Request request);
/// Frees the stand-in (a start still running completes on its own) and sets MPI_REQUEST_NULL.
int persistent_free(MPI_Request* request);
/// Cancels the running start (a receive the agent has not matched yet), else lets MPI answer.
int persistent_cancel(MPI_Request* request);

/// The array a completion call passes to MPI instead of the program's: a copy where each started
/// stand-in is its current request, or the program's own array where no stand-in is in it.
/// finish() writes back what MPI left: the program's own requests as MPI changed them, each
/// stand-in kept, and made inactive where its current request completed.
class SeeThrough {
 public:
  explicit SeeThrough(std::span<MPI_Request> requests);
  std::span<MPI_Request> requests() { return swapped_.empty() ? program_ : std::span<MPI_Request>(copy_); }
  void finish();

 private:
  std::span<MPI_Request> program_;
  std::vector<MPI_Request> copy_;
  std::vector<size_t> swapped_;  // where a stand-in's current request stands in the copy
};

}  // namespace outboard::mpi
