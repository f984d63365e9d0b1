#pragma once
// What the interposer's entry points share (compiled per MPI ABI, with <mpi.h> of that MPI):
// the C ones in interpose.cpp, the Fortran ones in fortran_openmpi.cpp and fortran_mpich.cpp.

#include <mpi.h>

#include "mpi/report.h"

#define OB_MPI_EXPORT extern "C" __attribute__((visibility("default")))

namespace outboard::mpi {

// Before MPI_Init: exits, naming the library to load, when the program runs on another MPI.
void check_library();
// After a successful MPI_Init: reads OUTBOARD_MPI_REPORT, and rank 0 warns when no agent serves.
void started();
// Before MPI_Finalize: the report (a reduction over MPI_COMM_WORLD) when asked for.
void finishing();

// The first rule a call fails, else kOffloaded (then offload_route() decides). `send` is the send
// datatype, or the receive one for MPI_IN_PLACE (whose send type MPI ignores).
Route data_route(MPI_Comm comm, MPI_Datatype send, MPI_Datatype recv);
Route reduce_route(MPI_Comm comm, MPI_Datatype type, MPI_Op op);
void note(Op op, Route route);

}  // namespace outboard::mpi
