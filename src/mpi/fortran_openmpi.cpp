// Open MPI's Fortran entry points (mpif.h and `use mpi`, gfortran's names): its Fortran library
// calls PMPI_ directly, so the C wrappers never see these calls. The collectives convert their
// handles and call their C twins (which route, count and offload); init, finalize and the
// completion calls do what their C twins do around the Fortran PMPI entry point that follows this
// library in load order (dlsym RTLD_NEXT: Open MPI's libmpi_mpifh, or another tool stacked after
// us), which converts statuses. MPICH's Fortran library calls the C MPI_ functions, which
// interpose.cpp already defines.

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "mpi/interpose.h"
#include "mpi/offload.h"

// Open MPI's MPI_IN_PLACE and MPI_STATUS_IGNORE for Fortran: the addresses of these common
// blocks (libmpi.so).
extern "C" int mpi_fortran_in_place_;
extern "C" int mpi_fortran_status_ignore_;

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

static_assert(sizeof(Fint) == sizeof(int), "Fortran INTEGER counts are passed as C int arrays");

// Fortran's MPI_IN_PLACE as C's.
const void* c_buffer(const void* buf) { return buf == &mpi_fortran_in_place_ ? MPI_IN_PLACE : buf; }

std::vector<MPI_Request> c_requests(const Fint* requests, Fint count) {
  std::vector<MPI_Request> out(static_cast<size_t>(std::max(count, 0)));
  for (size_t i = 0; i < out.size(); ++i) out[i] = PMPI_Request_f2c(requests[i]);
  return out;
}

// Runs `call` (a C collective that sets the request it is given), returning its request as the
// Fortran handle.
template <typename Call>
void as_fortran(Call call, Fint* request, Fint* ierr) {
  MPI_Request r = MPI_REQUEST_NULL;
  *ierr = call(&r);
  if (*ierr == MPI_SUCCESS) *request = PMPI_Request_c2f(r);
}

// Runs `call` (a C call that fills the status it is given) and gives the Fortran caller the
// status, unless it passed MPI_STATUS_IGNORE.
template <typename Call>
void with_status(Call call, Fint* status, Fint* ierr) {
  MPI_Status c{};
  *ierr = call(&c);
  if (status != &mpi_fortran_status_ignore_) PMPI_Status_c2f(&c, status);
}

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

OB_MPI_EXPORT void mpi_abort_(Fint* comm, Fint* errorcode, Fint* ierr) {
  offload_abort();
  OB_NEXT(pmpi_abort_, Fint*, Fint*, Fint*)(comm, errorcode, ierr);
}

OB_MPI_EXPORT void mpi_comm_dup_(Fint* comm, Fint* newcomm, Fint* ierr) {
  MPI_Comm c = MPI_COMM_NULL;
  *ierr = MPI_Comm_dup(PMPI_Comm_f2c(*comm), &c);
  if (*ierr == MPI_SUCCESS) *newcomm = PMPI_Comm_c2f(c);
}

OB_MPI_EXPORT void mpi_comm_split_(Fint* comm, Fint* color, Fint* key, Fint* newcomm, Fint* ierr) {
  MPI_Comm c = MPI_COMM_NULL;
  *ierr = MPI_Comm_split(PMPI_Comm_f2c(*comm), *color, *key, &c);
  if (*ierr == MPI_SUCCESS) *newcomm = PMPI_Comm_c2f(c);
}

// LOGICAL arrays are INTEGER-sized (gfortran's .TRUE. is 1; C reads any nonzero as true).
OB_MPI_EXPORT void mpi_cart_create_(Fint* comm, Fint* ndims, Fint* dims, Fint* periods, Fint* reorder, Fint* cart,
                                    Fint* ierr) {
  MPI_Comm c = MPI_COMM_NULL;
  *ierr = MPI_Cart_create(PMPI_Comm_f2c(*comm), *ndims, dims, periods, *reorder != 0, &c);
  if (*ierr == MPI_SUCCESS) *cart = PMPI_Comm_c2f(c);
}

OB_MPI_EXPORT void mpi_cart_sub_(Fint* comm, Fint* remain_dims, Fint* newcomm, Fint* ierr) {
  MPI_Comm c = MPI_COMM_NULL;
  *ierr = MPI_Cart_sub(PMPI_Comm_f2c(*comm), remain_dims, &c);
  if (*ierr == MPI_SUCCESS) *newcomm = PMPI_Comm_c2f(c);
}

// ---- the collectives, through their C twins

OB_MPI_EXPORT void mpi_ialltoall_(void* sendbuf, Fint* sendcount, Fint* sendtype, void* recvbuf, Fint* recvcount,
                                  Fint* recvtype, Fint* comm, Fint* request, Fint* ierr) {
  as_fortran([&](MPI_Request* r) {
    return MPI_Ialltoall(c_buffer(sendbuf), *sendcount, PMPI_Type_f2c(*sendtype), recvbuf, *recvcount,
                         PMPI_Type_f2c(*recvtype), PMPI_Comm_f2c(*comm), r);
  }, request, ierr);
}

OB_MPI_EXPORT void mpi_ialltoallv_(void* sendbuf, Fint* sendcounts, Fint* sdispls, Fint* sendtype, void* recvbuf,
                                   Fint* recvcounts, Fint* rdispls, Fint* recvtype, Fint* comm, Fint* request,
                                   Fint* ierr) {
  as_fortran([&](MPI_Request* r) {
    return MPI_Ialltoallv(c_buffer(sendbuf), sendcounts, sdispls, PMPI_Type_f2c(*sendtype), recvbuf, recvcounts,
                          rdispls, PMPI_Type_f2c(*recvtype), PMPI_Comm_f2c(*comm), r);
  }, request, ierr);
}

OB_MPI_EXPORT void mpi_iallgather_(void* sendbuf, Fint* sendcount, Fint* sendtype, void* recvbuf, Fint* recvcount,
                                   Fint* recvtype, Fint* comm, Fint* request, Fint* ierr) {
  as_fortran([&](MPI_Request* r) {
    return MPI_Iallgather(c_buffer(sendbuf), *sendcount, PMPI_Type_f2c(*sendtype), recvbuf, *recvcount,
                          PMPI_Type_f2c(*recvtype), PMPI_Comm_f2c(*comm), r);
  }, request, ierr);
}

OB_MPI_EXPORT void mpi_ibcast_(void* buffer, Fint* count, Fint* datatype, Fint* root, Fint* comm, Fint* request,
                               Fint* ierr) {
  as_fortran([&](MPI_Request* r) {
    return MPI_Ibcast(buffer, *count, PMPI_Type_f2c(*datatype), *root, PMPI_Comm_f2c(*comm), r);
  }, request, ierr);
}

OB_MPI_EXPORT void mpi_iallreduce_(void* sendbuf, void* recvbuf, Fint* count, Fint* datatype, Fint* op, Fint* comm,
                                   Fint* request, Fint* ierr) {
  as_fortran([&](MPI_Request* r) {
    return MPI_Iallreduce(c_buffer(sendbuf), recvbuf, *count, PMPI_Type_f2c(*datatype), PMPI_Op_f2c(*op),
                          PMPI_Comm_f2c(*comm), r);
  }, request, ierr);
}

// ---- point-to-point, through their C twins (which go to the agent with OUTBOARD_MPI_P2P=1, else
// to MPI's C functions)

OB_MPI_EXPORT void mpi_isend_(void* buf, Fint* count, Fint* type, Fint* dest, Fint* tag, Fint* comm, Fint* request,
                              Fint* ierr) {
  as_fortran([&](MPI_Request* r) {
    return MPI_Isend(buf, *count, PMPI_Type_f2c(*type), *dest, *tag, PMPI_Comm_f2c(*comm), r);
  }, request, ierr);
}

OB_MPI_EXPORT void mpi_issend_(void* buf, Fint* count, Fint* type, Fint* dest, Fint* tag, Fint* comm, Fint* request,
                               Fint* ierr) {
  as_fortran([&](MPI_Request* r) {
    return MPI_Issend(buf, *count, PMPI_Type_f2c(*type), *dest, *tag, PMPI_Comm_f2c(*comm), r);
  }, request, ierr);
}

OB_MPI_EXPORT void mpi_ibsend_(void* buf, Fint* count, Fint* type, Fint* dest, Fint* tag, Fint* comm, Fint* request,
                               Fint* ierr) {
  as_fortran([&](MPI_Request* r) {
    return MPI_Ibsend(buf, *count, PMPI_Type_f2c(*type), *dest, *tag, PMPI_Comm_f2c(*comm), r);
  }, request, ierr);
}

OB_MPI_EXPORT void mpi_irsend_(void* buf, Fint* count, Fint* type, Fint* dest, Fint* tag, Fint* comm, Fint* request,
                               Fint* ierr) {
  as_fortran([&](MPI_Request* r) {
    return MPI_Irsend(buf, *count, PMPI_Type_f2c(*type), *dest, *tag, PMPI_Comm_f2c(*comm), r);
  }, request, ierr);
}

// Persistent requests are not offloaded: their C twins end the job where point-to-point is.
OB_MPI_EXPORT void mpi_send_init_(void* buf, Fint* count, Fint* type, Fint* dest, Fint* tag, Fint* comm,
                                  Fint* request, Fint* ierr) {
  as_fortran([&](MPI_Request* r) {
    return MPI_Send_init(buf, *count, PMPI_Type_f2c(*type), *dest, *tag, PMPI_Comm_f2c(*comm), r);
  }, request, ierr);
}

OB_MPI_EXPORT void mpi_recv_init_(void* buf, Fint* count, Fint* type, Fint* source, Fint* tag, Fint* comm,
                                  Fint* request, Fint* ierr) {
  as_fortran([&](MPI_Request* r) {
    return MPI_Recv_init(buf, *count, PMPI_Type_f2c(*type), *source, *tag, PMPI_Comm_f2c(*comm), r);
  }, request, ierr);
}

OB_MPI_EXPORT void mpi_irecv_(void* buf, Fint* count, Fint* type, Fint* source, Fint* tag, Fint* comm, Fint* request,
                              Fint* ierr) {
  as_fortran([&](MPI_Request* r) {
    return MPI_Irecv(buf, *count, PMPI_Type_f2c(*type), *source, *tag, PMPI_Comm_f2c(*comm), r);
  }, request, ierr);
}

OB_MPI_EXPORT void mpi_send_(void* buf, Fint* count, Fint* type, Fint* dest, Fint* tag, Fint* comm, Fint* ierr) {
  *ierr = MPI_Send(buf, *count, PMPI_Type_f2c(*type), *dest, *tag, PMPI_Comm_f2c(*comm));
}

OB_MPI_EXPORT void mpi_ssend_(void* buf, Fint* count, Fint* type, Fint* dest, Fint* tag, Fint* comm, Fint* ierr) {
  *ierr = MPI_Ssend(buf, *count, PMPI_Type_f2c(*type), *dest, *tag, PMPI_Comm_f2c(*comm));
}

OB_MPI_EXPORT void mpi_bsend_(void* buf, Fint* count, Fint* type, Fint* dest, Fint* tag, Fint* comm, Fint* ierr) {
  *ierr = MPI_Bsend(buf, *count, PMPI_Type_f2c(*type), *dest, *tag, PMPI_Comm_f2c(*comm));
}

OB_MPI_EXPORT void mpi_rsend_(void* buf, Fint* count, Fint* type, Fint* dest, Fint* tag, Fint* comm, Fint* ierr) {
  *ierr = MPI_Rsend(buf, *count, PMPI_Type_f2c(*type), *dest, *tag, PMPI_Comm_f2c(*comm));
}

OB_MPI_EXPORT void mpi_recv_(void* buf, Fint* count, Fint* type, Fint* source, Fint* tag, Fint* comm, Fint* status,
                             Fint* ierr) {
  with_status([&](MPI_Status* st) {
    return MPI_Recv(buf, *count, PMPI_Type_f2c(*type), *source, *tag, PMPI_Comm_f2c(*comm), st);
  }, status, ierr);
}

OB_MPI_EXPORT void mpi_sendrecv_(void* sendbuf, Fint* sendcount, Fint* sendtype, Fint* dest, Fint* sendtag,
                                 void* recvbuf, Fint* recvcount, Fint* recvtype, Fint* source, Fint* recvtag,
                                 Fint* comm, Fint* status, Fint* ierr) {
  with_status([&](MPI_Status* st) {
    return MPI_Sendrecv(sendbuf, *sendcount, PMPI_Type_f2c(*sendtype), *dest, *sendtag, recvbuf, *recvcount,
                        PMPI_Type_f2c(*recvtype), *source, *recvtag, PMPI_Comm_f2c(*comm), st);
  }, status, ierr);
}

OB_MPI_EXPORT void mpi_sendrecv_replace_(void* buf, Fint* count, Fint* type, Fint* dest, Fint* sendtag, Fint* source,
                                         Fint* recvtag, Fint* comm, Fint* status, Fint* ierr) {
  with_status([&](MPI_Status* st) {
    return MPI_Sendrecv_replace(buf, *count, PMPI_Type_f2c(*type), *dest, *sendtag, *source, *recvtag,
                                PMPI_Comm_f2c(*comm), st);
  }, status, ierr);
}

OB_MPI_EXPORT void mpi_probe_(Fint* source, Fint* tag, Fint* comm, Fint* status, Fint* ierr) {
  with_status([&](MPI_Status* st) { return MPI_Probe(*source, *tag, PMPI_Comm_f2c(*comm), st); }, status, ierr);
}

OB_MPI_EXPORT void mpi_iprobe_(Fint* source, Fint* tag, Fint* comm, Fint* flag, Fint* status, Fint* ierr) {
  int found = 0;
  with_status([&](MPI_Status* st) { return MPI_Iprobe(*source, *tag, PMPI_Comm_f2c(*comm), &found, st); }, status,
              ierr);
  *flag = found;  // gfortran's .true. is 1
}

// ---- completion calls: as the C ones, around Open MPI's Fortran versions

OB_MPI_EXPORT void mpi_wait_(Fint* request, Fint* status, Fint* ierr) {
  const MPI_Request r = PMPI_Request_f2c(*request);
  while (offload_running({&r, 1})) offload_nap();
  OB_NEXT(pmpi_wait_, Fint*, Fint*, Fint*)(request, status, ierr);
}

OB_MPI_EXPORT void mpi_waitall_(Fint* count, Fint* requests, Fint* statuses, Fint* ierr) {
  const auto rs = c_requests(requests, *count);
  while (offload_running(rs)) offload_nap();
  OB_NEXT(pmpi_waitall_, Fint*, Fint*, Fint*, Fint*)(count, requests, statuses, ierr);
}

OB_MPI_EXPORT void mpi_waitany_(Fint* count, Fint* requests, Fint* index, Fint* status, Fint* ierr) {
  wait_some([&] { return offload_running(c_requests(requests, *count)); },
            [&] {
              Fint flag = 0;
              OB_NEXT(pmpi_testany_, Fint*, Fint*, Fint*, Fint*, Fint*, Fint*)(count, requests, index, &flag, status,
                                                                            ierr);
              return *ierr != MPI_SUCCESS || flag;
            },
            [&] { OB_NEXT(pmpi_waitany_, Fint*, Fint*, Fint*, Fint*, Fint*)(count, requests, index, status, ierr); });
}

OB_MPI_EXPORT void mpi_waitsome_(Fint* incount, Fint* requests, Fint* outcount, Fint* indices, Fint* statuses,
                                 Fint* ierr) {
  wait_some([&] { return offload_running(c_requests(requests, *incount)); },
            [&] {
              OB_NEXT(pmpi_testsome_, Fint*, Fint*, Fint*, Fint*, Fint*, Fint*)(incount, requests, outcount, indices,
                                                                             statuses, ierr);
              return *ierr != MPI_SUCCESS || *outcount != 0;
            },
            [&] {
              OB_NEXT(pmpi_waitsome_, Fint*, Fint*, Fint*, Fint*, Fint*, Fint*)(incount, requests, outcount, indices,
                                                                             statuses, ierr);
            });
}

OB_MPI_EXPORT void mpi_test_(Fint* request, Fint* flag, Fint* status, Fint* ierr) {
  offload_sweep();
  OB_NEXT(pmpi_test_, Fint*, Fint*, Fint*, Fint*)(request, flag, status, ierr);
}

OB_MPI_EXPORT void mpi_testall_(Fint* count, Fint* requests, Fint* flag, Fint* statuses, Fint* ierr) {
  offload_sweep();
  OB_NEXT(pmpi_testall_, Fint*, Fint*, Fint*, Fint*, Fint*)(count, requests, flag, statuses, ierr);
}

OB_MPI_EXPORT void mpi_testany_(Fint* count, Fint* requests, Fint* index, Fint* flag, Fint* status, Fint* ierr) {
  offload_sweep();
  OB_NEXT(pmpi_testany_, Fint*, Fint*, Fint*, Fint*, Fint*, Fint*)(count, requests, index, flag, status, ierr);
}

OB_MPI_EXPORT void mpi_testsome_(Fint* incount, Fint* requests, Fint* outcount, Fint* indices, Fint* statuses,
                                 Fint* ierr) {
  offload_sweep();
  OB_NEXT(pmpi_testsome_, Fint*, Fint*, Fint*, Fint*, Fint*, Fint*)(incount, requests, outcount, indices, statuses,
                                                                 ierr);
}

OB_MPI_EXPORT void mpi_request_get_status_(Fint* request, Fint* flag, Fint* status, Fint* ierr) {
  offload_sweep();
  OB_NEXT(pmpi_request_get_status_, Fint*, Fint*, Fint*, Fint*)(request, flag, status, ierr);
}
