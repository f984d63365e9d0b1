// Open MPI's Fortran entry points (mpif.h and `use mpi`, gfortran's names): its Fortran library
// calls PMPI_ directly, so the C wrappers never see these calls. Each wrapper routes and counts as
// its C twin does, then calls the Fortran PMPI entry point that follows this library in load order
// (dlsym RTLD_NEXT: Open MPI's libmpi_mpifh, or another tool stacked after us). MPICH's Fortran
// library calls the C MPI_ functions, which interpose.cpp already defines.

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

#include "mpi/interpose.h"
#include "mpi/offload.h"

// Open MPI's MPI_IN_PLACE for Fortran: the address of this common block (libmpi.so).
extern "C" int mpi_fortran_in_place_;

namespace outboard::mpi {
namespace {

using Fint = MPI_Fint;

// The next definition of a Fortran PMPI symbol; exits naming it when there is none (a Fortran
// program always loads Open MPI's Fortran library, so this is a broken install).
template <typename Fn>
Fn next_symbol(const char* name) {
  void* fn = dlsym(RTLD_NEXT, name);
  if (!fn) {
    std::fprintf(stderr, "outboard-mpi: %s not found after the interposer: is Open MPI's Fortran library loaded?\n",
                 name);
    std::_Exit(2);
  }
  return reinterpret_cast<Fn>(fn);
}

#define OB_NEXT(name, ...)                                                    \
  static const auto next = next_symbol<void (*)(__VA_ARGS__)>(#name); \
  next

bool in_place(const void* buf) { return buf == &mpi_fortran_in_place_; }

// Fortran calls pass through for now (their requests are Fortran handles): why, for the report.
Route fortran(Route rules) { return rules != Route::kOffloaded ? rules : offload_on() ? Route::kFortran : Route::kNoAgent; }

}  // namespace
}  // namespace outboard::mpi

using namespace outboard::mpi;

OB_MPI_EXPORT void mpi_init_(Fint* ierr) {
  check_library();
  OB_NEXT(pmpi_init_, Fint*)(ierr);
  if (*ierr == MPI_SUCCESS) started();
}

OB_MPI_EXPORT void mpi_init_thread_(Fint* required, Fint* provided, Fint* ierr) {
  check_library();
  OB_NEXT(pmpi_init_thread_, Fint*, Fint*, Fint*)(required, provided, ierr);
  if (*ierr == MPI_SUCCESS) started();
}

OB_MPI_EXPORT void mpi_finalize_(Fint* ierr) {
  finishing();
  OB_NEXT(pmpi_finalize_, Fint*)(ierr);
}

OB_MPI_EXPORT void mpi_ialltoall_(void* sendbuf, Fint* sendcount, Fint* sendtype, void* recvbuf, Fint* recvcount,
                                  Fint* recvtype, Fint* comm, Fint* request, Fint* ierr) {
  const MPI_Datatype recv = PMPI_Type_f2c(*recvtype);
  note(Op::kIalltoall, fortran(data_route(PMPI_Comm_f2c(*comm), in_place(sendbuf) ? recv : PMPI_Type_f2c(*sendtype), recv)));
  OB_NEXT(pmpi_ialltoall_, void*, Fint*, Fint*, void*, Fint*, Fint*, Fint*, Fint*, Fint*)
  (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request, ierr);
}

OB_MPI_EXPORT void mpi_ialltoallv_(void* sendbuf, Fint* sendcounts, Fint* sdispls, Fint* sendtype, void* recvbuf,
                                   Fint* recvcounts, Fint* rdispls, Fint* recvtype, Fint* comm, Fint* request,
                                   Fint* ierr) {
  const MPI_Datatype recv = PMPI_Type_f2c(*recvtype);
  note(Op::kIalltoallv, fortran(data_route(PMPI_Comm_f2c(*comm), in_place(sendbuf) ? recv : PMPI_Type_f2c(*sendtype), recv)));
  OB_NEXT(pmpi_ialltoallv_, void*, Fint*, Fint*, Fint*, void*, Fint*, Fint*, Fint*, Fint*, Fint*, Fint*)
  (sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, request, ierr);
}

OB_MPI_EXPORT void mpi_iallgather_(void* sendbuf, Fint* sendcount, Fint* sendtype, void* recvbuf, Fint* recvcount,
                                   Fint* recvtype, Fint* comm, Fint* request, Fint* ierr) {
  const MPI_Datatype recv = PMPI_Type_f2c(*recvtype);
  note(Op::kIallgather, fortran(data_route(PMPI_Comm_f2c(*comm), in_place(sendbuf) ? recv : PMPI_Type_f2c(*sendtype), recv)));
  OB_NEXT(pmpi_iallgather_, void*, Fint*, Fint*, void*, Fint*, Fint*, Fint*, Fint*, Fint*)
  (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request, ierr);
}

OB_MPI_EXPORT void mpi_ibcast_(void* buffer, Fint* count, Fint* datatype, Fint* root, Fint* comm, Fint* request,
                               Fint* ierr) {
  const MPI_Datatype type = PMPI_Type_f2c(*datatype);
  note(Op::kIbcast, fortran(data_route(PMPI_Comm_f2c(*comm), type, type)));
  OB_NEXT(pmpi_ibcast_, void*, Fint*, Fint*, Fint*, Fint*, Fint*, Fint*)(buffer, count, datatype, root, comm, request, ierr);
}

OB_MPI_EXPORT void mpi_iallreduce_(void* sendbuf, void* recvbuf, Fint* count, Fint* datatype, Fint* op, Fint* comm,
                                   Fint* request, Fint* ierr) {
  note(Op::kIallreduce, fortran(reduce_route(PMPI_Comm_f2c(*comm), PMPI_Type_f2c(*datatype), PMPI_Op_f2c(*op))));
  OB_NEXT(pmpi_iallreduce_, void*, void*, Fint*, Fint*, Fint*, Fint*, Fint*, Fint*)
  (sendbuf, recvbuf, count, datatype, op, comm, request, ierr);
}
