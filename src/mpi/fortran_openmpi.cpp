// Open MPI's Fortran entry points (mpif.h, `use mpi` and `use mpi_f08`, gfortran's names): its
// Fortran library calls PMPI_ directly, so the C wrappers never see these calls. The collectives
// convert their handles and call their C twins (which route, count and offload); init, finalize
// and the completion calls do what their C twins do around the Fortran PMPI entry point that
// follows this library in load order (dlsym RTLD_NEXT: Open MPI's libmpi_mpifh, or another tool
// stacked after us), which converts statuses. MPICH's are in fortran_mpich.cpp.

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "mpi/interpose.h"
#include "mpi/offload.h"
#include "mpi/persistent.h"

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

// A send or receive that sets a request (Isend and its forms, Irecv, the persistent inits): its C
// twin `call`, given the Fortran arguments converted, its request returned as the Fortran handle.
template <typename Call>
void with_request(Call call, void* buf, Fint* count, Fint* type, Fint* peer, Fint* tag, Fint* comm, Fint* request,
                  Fint* ierr) {
  as_fortran([&](MPI_Request* r) {
    return call(buf, *count, PMPI_Type_f2c(*type), *peer, *tag, PMPI_Comm_f2c(*comm), r);
  }, request, ierr);
}

// Runs `call` (a Fortran completion call over `count` requests, given the array to use) with
// every started persistent stand-in seen through (persistent.h), as the C calls do.
template <typename Call>
void seen_through(Fint* requests, Fint count, Call call) {
  std::vector<MPI_Request> c = c_requests(requests, count);
  SeeThrough through(c);
  const std::span<MPI_Request> swapped = through.requests();
  if (swapped.data() == c.data()) return call(requests);  // no stand-in started: MPI's own array
  std::vector<Fint> f(swapped.size());
  for (size_t i = 0; i < f.size(); ++i) f[i] = PMPI_Request_c2f(swapped[i]);
  call(f.data());
  for (size_t i = 0; i < f.size(); ++i) swapped[i] = PMPI_Request_f2c(f[i]);
  through.finish();
  for (size_t i = 0; i < c.size(); ++i) requests[i] = PMPI_Request_c2f(c[i]);
}

// Messages MPI_Improbe claimed on an offloaded communicator have C handles MPI never made, which
// its Fortran conversion cannot take: they get Fortran handles of their own here, negative, as
// Open MPI's (indices into its table) never are.
struct FortranClaims {
  std::mutex mu;
  std::unordered_map<Fint, MPI_Message> c;
  Fint next = -2;
};

FortranClaims& fortran_claims() {
  static FortranClaims claims;
  return claims;
}

Fint fortran_message(MPI_Message m) {
  if (!p2p_claimed(m)) return PMPI_Message_c2f(m);
  FortranClaims& claims = fortran_claims();
  std::lock_guard lock(claims.mu);
  claims.c.emplace(claims.next, m);
  return claims.next--;
}

// The C handle of Fortran message `f`; a claimed one leaves the table (it is received now).
MPI_Message c_message(Fint f) {
  FortranClaims& claims = fortran_claims();
  std::lock_guard lock(claims.mu);
  auto it = claims.c.find(f);
  if (it == claims.c.end()) return PMPI_Message_f2c(f);
  const MPI_Message m = it->second;
  claims.c.erase(it);
  return m;
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

// ---- point-to-point, through their C twins (which go to the agent with OUTBOARD_MPI_P2P=1 or
// =all, else to MPI's C functions)

OB_MPI_EXPORT void mpi_isend_(void* buf, Fint* count, Fint* type, Fint* dest, Fint* tag, Fint* comm, Fint* request,
                              Fint* ierr) {
  with_request(MPI_Isend, buf, count, type, dest, tag, comm, request, ierr);
}

OB_MPI_EXPORT void mpi_issend_(void* buf, Fint* count, Fint* type, Fint* dest, Fint* tag, Fint* comm, Fint* request,
                               Fint* ierr) {
  with_request(MPI_Issend, buf, count, type, dest, tag, comm, request, ierr);
}

OB_MPI_EXPORT void mpi_ibsend_(void* buf, Fint* count, Fint* type, Fint* dest, Fint* tag, Fint* comm, Fint* request,
                               Fint* ierr) {
  with_request(MPI_Ibsend, buf, count, type, dest, tag, comm, request, ierr);
}

OB_MPI_EXPORT void mpi_irsend_(void* buf, Fint* count, Fint* type, Fint* dest, Fint* tag, Fint* comm, Fint* request,
                               Fint* ierr) {
  with_request(MPI_Irsend, buf, count, type, dest, tag, comm, request, ierr);
}

// Persistent requests: their C twins make the stand-in where the agent serves point-to-point.
OB_MPI_EXPORT void mpi_send_init_(void* buf, Fint* count, Fint* type, Fint* dest, Fint* tag, Fint* comm, Fint* request,
                                  Fint* ierr) {
  with_request(MPI_Send_init, buf, count, type, dest, tag, comm, request, ierr);
}

OB_MPI_EXPORT void mpi_recv_init_(void* buf, Fint* count, Fint* type, Fint* source, Fint* tag, Fint* comm,
                                  Fint* request, Fint* ierr) {
  with_request(MPI_Recv_init, buf, count, type, source, tag, comm, request, ierr);
}

OB_MPI_EXPORT void mpi_ssend_init_(void* buf, Fint* count, Fint* type, Fint* dest, Fint* tag, Fint* comm, Fint* request,
                                   Fint* ierr) {
  with_request(MPI_Ssend_init, buf, count, type, dest, tag, comm, request, ierr);
}

OB_MPI_EXPORT void mpi_bsend_init_(void* buf, Fint* count, Fint* type, Fint* dest, Fint* tag, Fint* comm, Fint* request,
                                   Fint* ierr) {
  with_request(MPI_Bsend_init, buf, count, type, dest, tag, comm, request, ierr);
}

OB_MPI_EXPORT void mpi_rsend_init_(void* buf, Fint* count, Fint* type, Fint* dest, Fint* tag, Fint* comm, Fint* request,
                                   Fint* ierr) {
  with_request(MPI_Rsend_init, buf, count, type, dest, tag, comm, request, ierr);
}

// A stand-in's start, free and cancel are ours; every other request's go to Open MPI's Fortran.
OB_MPI_EXPORT void mpi_start_(Fint* request, Fint* ierr) {
  MPI_Request r = PMPI_Request_f2c(*request);
  if (persistent(r)) {
    *ierr = MPI_Start(&r);
    return;
  }
  OB_NEXT(pmpi_start_, Fint*, Fint*)(request, ierr);
}

OB_MPI_EXPORT void mpi_startall_(Fint* count, Fint* requests, Fint* ierr) {
  *ierr = MPI_SUCCESS;
  for (Fint i = 0; i < *count && *ierr == MPI_SUCCESS; ++i) mpi_start_(&requests[i], ierr);
}

OB_MPI_EXPORT void mpi_request_free_(Fint* request, Fint* ierr) {
  MPI_Request r = PMPI_Request_f2c(*request);
  if (!persistent(r)) {
    OB_NEXT(pmpi_request_free_, Fint*, Fint*)(request, ierr);
    return;
  }
  *ierr = MPI_Request_free(&r);
  *request = PMPI_Request_c2f(r);
}

OB_MPI_EXPORT void mpi_cancel_(Fint* request, Fint* ierr) {
  MPI_Request r = PMPI_Request_f2c(*request);
  if (persistent(r)) {
    *ierr = MPI_Cancel(&r);
    return;
  }
  OB_NEXT(pmpi_cancel_, Fint*, Fint*)(request, ierr);
}

OB_MPI_EXPORT void mpi_irecv_(void* buf, Fint* count, Fint* type, Fint* source, Fint* tag, Fint* comm, Fint* request,
                              Fint* ierr) {
  with_request(MPI_Irecv, buf, count, type, source, tag, comm, request, ierr);
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

// Matched probes, through their C twins, with the message handles converted here.
OB_MPI_EXPORT void mpi_improbe_(Fint* source, Fint* tag, Fint* comm, Fint* flag, Fint* message, Fint* status,
                                Fint* ierr) {
  int found = 0;
  MPI_Message m = MPI_MESSAGE_NULL;
  with_status([&](MPI_Status* st) { return MPI_Improbe(*source, *tag, PMPI_Comm_f2c(*comm), &found, &m, st); },
              status, ierr);
  *flag = found;
  if (found) *message = fortran_message(m);
}

OB_MPI_EXPORT void mpi_mprobe_(Fint* source, Fint* tag, Fint* comm, Fint* message, Fint* status, Fint* ierr) {
  MPI_Message m = MPI_MESSAGE_NULL;
  with_status([&](MPI_Status* st) { return MPI_Mprobe(*source, *tag, PMPI_Comm_f2c(*comm), &m, st); }, status, ierr);
  if (*ierr == MPI_SUCCESS) *message = fortran_message(m);
}

OB_MPI_EXPORT void mpi_mrecv_(void* buf, Fint* count, Fint* type, Fint* message, Fint* status, Fint* ierr) {
  MPI_Message m = c_message(*message);
  with_status([&](MPI_Status* st) { return MPI_Mrecv(buf, *count, PMPI_Type_f2c(*type), &m, st); }, status, ierr);
  *message = PMPI_Message_c2f(m);
}

OB_MPI_EXPORT void mpi_imrecv_(void* buf, Fint* count, Fint* type, Fint* message, Fint* request, Fint* ierr) {
  MPI_Message m = c_message(*message);
  as_fortran([&](MPI_Request* r) { return MPI_Imrecv(buf, *count, PMPI_Type_f2c(*type), &m, r); }, request, ierr);
  *message = PMPI_Message_c2f(m);
}

// ---- completion calls: as the C ones, around Open MPI's Fortran versions

OB_MPI_EXPORT void mpi_wait_(Fint* request, Fint* status, Fint* ierr) {
  seen_through(request, 1, [&](Fint* rs) {
    const MPI_Request r = PMPI_Request_f2c(*rs);
    while (offload_running({&r, 1})) offload_nap();
    OB_NEXT(pmpi_wait_, Fint*, Fint*, Fint*)(rs, status, ierr);
  });
}

OB_MPI_EXPORT void mpi_waitall_(Fint* count, Fint* requests, Fint* statuses, Fint* ierr) {
  seen_through(requests, *count, [&](Fint* rs) {
    const auto c = c_requests(rs, *count);
    while (offload_running(c)) offload_nap();
    OB_NEXT(pmpi_waitall_, Fint*, Fint*, Fint*, Fint*)(count, rs, statuses, ierr);
  });
}

OB_MPI_EXPORT void mpi_waitany_(Fint* count, Fint* requests, Fint* index, Fint* status, Fint* ierr) {
  seen_through(requests, *count, [&](Fint* rs) {
    wait_some([&] { return offload_running(c_requests(rs, *count)); },
              [&] {
                Fint flag = 0;
                OB_NEXT(pmpi_testany_, Fint*, Fint*, Fint*, Fint*, Fint*, Fint*)(count, rs, index, &flag, status,
                                                                              ierr);
                return *ierr != MPI_SUCCESS || flag;
              },
              [&] { OB_NEXT(pmpi_waitany_, Fint*, Fint*, Fint*, Fint*, Fint*)(count, rs, index, status, ierr); });
  });
}

OB_MPI_EXPORT void mpi_waitsome_(Fint* incount, Fint* requests, Fint* outcount, Fint* indices, Fint* statuses,
                                 Fint* ierr) {
  seen_through(requests, *incount, [&](Fint* rs) {
    wait_some([&] { return offload_running(c_requests(rs, *incount)); },
              [&] {
                OB_NEXT(pmpi_testsome_, Fint*, Fint*, Fint*, Fint*, Fint*, Fint*)(incount, rs, outcount, indices,
                                                                               statuses, ierr);
                return *ierr != MPI_SUCCESS || *outcount != 0;
              },
              [&] {
                OB_NEXT(pmpi_waitsome_, Fint*, Fint*, Fint*, Fint*, Fint*, Fint*)(incount, rs, outcount, indices,
                                                                               statuses, ierr);
              });
  });
}

OB_MPI_EXPORT void mpi_test_(Fint* request, Fint* flag, Fint* status, Fint* ierr) {
  offload_sweep();
  seen_through(request, 1, [&](Fint* rs) { OB_NEXT(pmpi_test_, Fint*, Fint*, Fint*, Fint*)(rs, flag, status, ierr); });
}

OB_MPI_EXPORT void mpi_testall_(Fint* count, Fint* requests, Fint* flag, Fint* statuses, Fint* ierr) {
  offload_sweep();
  seen_through(requests, *count, [&](Fint* rs) {
    OB_NEXT(pmpi_testall_, Fint*, Fint*, Fint*, Fint*, Fint*)(count, rs, flag, statuses, ierr);
  });
}

OB_MPI_EXPORT void mpi_testany_(Fint* count, Fint* requests, Fint* index, Fint* flag, Fint* status, Fint* ierr) {
  offload_sweep();
  seen_through(requests, *count, [&](Fint* rs) {
    OB_NEXT(pmpi_testany_, Fint*, Fint*, Fint*, Fint*, Fint*, Fint*)(count, rs, index, flag, status, ierr);
  });
}

OB_MPI_EXPORT void mpi_testsome_(Fint* incount, Fint* requests, Fint* outcount, Fint* indices, Fint* statuses,
                                 Fint* ierr) {
  offload_sweep();
  seen_through(requests, *incount, [&](Fint* rs) {
    OB_NEXT(pmpi_testsome_, Fint*, Fint*, Fint*, Fint*, Fint*, Fint*)(incount, rs, outcount, indices, statuses, ierr);
  });
}

OB_MPI_EXPORT void mpi_request_get_status_(Fint* request, Fint* flag, Fint* status, Fint* ierr) {
  offload_sweep();
  seen_through(request, 1, [&](Fint* rs) {
    OB_NEXT(pmpi_request_get_status_, Fint*, Fint*, Fint*, Fint*)(rs, flag, status, ierr);
  });
}

// Open MPI's `use mpi_f08` library calls most bindings by their internal names (the weak
// mpi_<name>_ above are its aliases of ompi_<name>_f, with the same arguments): the wrappers
// answer there too. Its PMPI_ entry points call pompi_<name>_f, which stay MPI's own.
#define OB_F08(name) \
  OB_MPI_EXPORT decltype(mpi_##name##_) ompi_##name##_f __attribute__((alias("mpi_" #name "_")));
OB_F08(init) OB_F08(init_thread) OB_F08(finalize) OB_F08(abort) OB_F08(comm_dup) OB_F08(comm_split)
OB_F08(ialltoall) OB_F08(ialltoallv) OB_F08(iallgather) OB_F08(ibcast) OB_F08(iallreduce) OB_F08(isend)
OB_F08(issend) OB_F08(ibsend) OB_F08(irsend) OB_F08(send_init) OB_F08(recv_init) OB_F08(ssend_init)
OB_F08(bsend_init) OB_F08(rsend_init) OB_F08(start) OB_F08(startall) OB_F08(request_free) OB_F08(cancel)
OB_F08(irecv) OB_F08(send) OB_F08(ssend) OB_F08(bsend) OB_F08(rsend) OB_F08(recv)
OB_F08(sendrecv) OB_F08(sendrecv_replace) OB_F08(probe) OB_F08(mprobe) OB_F08(mrecv) OB_F08(imrecv)
OB_F08(wait) OB_F08(waitall) OB_F08(waitany) OB_F08(waitsome)
#undef OB_F08

// The calls with LOGICAL arguments it sends to the Fortran PMPI_ entry points instead, so their f08
// subroutines are wrapped themselves; their ierror is OPTIONAL (absent: a null pointer).
namespace {
// Calls the mpif.h wrapper with the f08 arguments, its ierror ours when the caller passed none.
template <typename Wrapper, typename... Args>
void f08(Wrapper wrapper, Fint* ierr, Args... args) {
  Fint code = MPI_SUCCESS;
  wrapper(args..., &code);
  if (ierr) *ierr = code;
}
}  // namespace

OB_MPI_EXPORT void mpi_cart_create_f08_(Fint* comm, Fint* ndims, Fint* dims, Fint* periods, Fint* reorder, Fint* cart,
                                        Fint* ierr) {
  f08(mpi_cart_create_, ierr, comm, ndims, dims, periods, reorder, cart);
}
OB_MPI_EXPORT void mpi_cart_sub_f08_(Fint* comm, Fint* remain_dims, Fint* newcomm, Fint* ierr) {
  f08(mpi_cart_sub_, ierr, comm, remain_dims, newcomm);
}
OB_MPI_EXPORT void mpi_iprobe_f08_(Fint* source, Fint* tag, Fint* comm, Fint* flag, Fint* status, Fint* ierr) {
  f08(mpi_iprobe_, ierr, source, tag, comm, flag, status);
}
OB_MPI_EXPORT void mpi_improbe_f08_(Fint* source, Fint* tag, Fint* comm, Fint* flag, Fint* message, Fint* status,
                                    Fint* ierr) {
  f08(mpi_improbe_, ierr, source, tag, comm, flag, message, status);
}
OB_MPI_EXPORT void mpi_test_f08_(Fint* request, Fint* flag, Fint* status, Fint* ierr) {
  f08(mpi_test_, ierr, request, flag, status);
}
OB_MPI_EXPORT void mpi_testall_f08_(Fint* count, Fint* requests, Fint* flag, Fint* statuses, Fint* ierr) {
  f08(mpi_testall_, ierr, count, requests, flag, statuses);
}
OB_MPI_EXPORT void mpi_testany_f08_(Fint* count, Fint* requests, Fint* index, Fint* flag, Fint* status, Fint* ierr) {
  f08(mpi_testany_, ierr, count, requests, index, flag, status);
}
OB_MPI_EXPORT void mpi_testsome_f08_(Fint* incount, Fint* requests, Fint* outcount, Fint* indices, Fint* statuses,
                                     Fint* ierr) {
  f08(mpi_testsome_, ierr, incount, requests, outcount, indices, statuses);
}
OB_MPI_EXPORT void mpi_request_get_status_f08_(Fint* request, Fint* flag, Fint* status, Fint* ierr) {
  f08(mpi_request_get_status_, ierr, request, flag, status);
}
