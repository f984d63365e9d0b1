// MPICH's `use mpi_f08` subroutines that take no choice buffer call PMPI_ directly, so the C
// wrappers never see these calls: init, finalize, the communicators the interposer names, the
// probes, the persistent starts and the completion calls. They are wrapped here (gfortran's
// names) and call their C twins in interpose.cpp. Those with a choice buffer reach the C MPI_
// functions already, as all of MPICH's mpif.h and `use mpi` bindings do.
//
// MPICH's Fortran handles are its C handles, and its f08 status is C's MPI_Status field for
// field (mpi.h's MPI_F08_status), so arrays pass as they are. Every ierror is OPTIONAL (absent:
// a null pointer); a LOGICAL is INTEGER-sized, gfortran's .TRUE. is 1; indices are 1-based.

#include <cstddef>
#include <type_traits>

#include "mpi/interpose.h"

namespace {

using Fint = MPI_Fint;

static_assert(std::is_same_v<MPI_Request, Fint> && std::is_same_v<MPI_Comm, Fint> &&
              std::is_same_v<MPI_Message, Fint>, "MPICH's Fortran handles are its C handles");
static_assert(sizeof(MPI_F08_status) == sizeof(MPI_Status) &&
              offsetof(MPI_F08_status, MPI_SOURCE) == offsetof(MPI_Status, MPI_SOURCE) &&
              offsetof(MPI_F08_status, MPI_TAG) == offsetof(MPI_Status, MPI_TAG) &&
              offsetof(MPI_F08_status, MPI_ERROR) == offsetof(MPI_Status, MPI_ERROR),
              "MPICH's f08 status is its C status");

MPI_Status* c_status(MPI_F08_status* s) {
  return s == MPI_F08_STATUS_IGNORE ? MPI_STATUS_IGNORE : reinterpret_cast<MPI_Status*>(s);
}

MPI_Status* c_statuses(MPI_F08_status* s) {
  return s == MPI_F08_STATUSES_IGNORE ? MPI_STATUSES_IGNORE : reinterpret_cast<MPI_Status*>(s);
}

void answer(Fint* ierr, int rc) {
  if (ierr) *ierr = rc;
}

// The C call's flag as a LOGICAL.
void answer(Fint* ierr, int rc, Fint* flag, int c_flag) {
  *flag = c_flag != 0;
  answer(ierr, rc);
}

// A C index (0-based, or MPI_UNDEFINED) as Fortran's.
Fint fortran_index(int index) { return index == MPI_UNDEFINED ? index : index + 1; }

// Waitsome's and Testsome's indices as Fortran's, where the call set them.
void fortran_indices(int rc, const Fint* outcount, Fint* indices) {
  if ((rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) || *outcount == MPI_UNDEFINED) return;
  for (Fint i = 0; i < *outcount; ++i) indices[i] += 1;
}

}  // namespace

OB_MPI_EXPORT void mpi_init_f08_(Fint* ierr) { answer(ierr, MPI_Init(nullptr, nullptr)); }

OB_MPI_EXPORT void mpi_init_thread_f08_(Fint* required, Fint* provided, Fint* ierr) {
  answer(ierr, MPI_Init_thread(nullptr, nullptr, *required, provided));
}

OB_MPI_EXPORT void mpi_finalize_f08_(Fint* ierr) { answer(ierr, MPI_Finalize()); }

OB_MPI_EXPORT void mpi_abort_f08_(Fint* comm, Fint* errorcode, Fint* ierr) {
  answer(ierr, MPI_Abort(*comm, *errorcode));
}

OB_MPI_EXPORT void mpi_comm_dup_f08_(Fint* comm, Fint* newcomm, Fint* ierr) {
  answer(ierr, MPI_Comm_dup(*comm, newcomm));
}

OB_MPI_EXPORT void mpi_comm_split_f08_(Fint* comm, Fint* color, Fint* key, Fint* newcomm, Fint* ierr) {
  answer(ierr, MPI_Comm_split(*comm, *color, *key, newcomm));
}

OB_MPI_EXPORT void mpi_cart_create_f08_(Fint* comm, Fint* ndims, Fint* dims, Fint* periods, Fint* reorder,
                                        Fint* cart, Fint* ierr) {
  answer(ierr, MPI_Cart_create(*comm, *ndims, dims, periods, *reorder != 0, cart));
}

OB_MPI_EXPORT void mpi_cart_sub_f08_(Fint* comm, Fint* remain_dims, Fint* newcomm, Fint* ierr) {
  answer(ierr, MPI_Cart_sub(*comm, remain_dims, newcomm));
}

// ---- probes

OB_MPI_EXPORT void mpi_probe_f08_(Fint* source, Fint* tag, Fint* comm, MPI_F08_status* status, Fint* ierr) {
  answer(ierr, MPI_Probe(*source, *tag, *comm, c_status(status)));
}

OB_MPI_EXPORT void mpi_iprobe_f08_(Fint* source, Fint* tag, Fint* comm, Fint* flag, MPI_F08_status* status,
                                   Fint* ierr) {
  int found = 0;
  const int rc = MPI_Iprobe(*source, *tag, *comm, &found, c_status(status));
  answer(ierr, rc, flag, found);
}

OB_MPI_EXPORT void mpi_mprobe_f08_(Fint* source, Fint* tag, Fint* comm, Fint* message, MPI_F08_status* status,
                                   Fint* ierr) {
  answer(ierr, MPI_Mprobe(*source, *tag, *comm, message, c_status(status)));
}

OB_MPI_EXPORT void mpi_improbe_f08_(Fint* source, Fint* tag, Fint* comm, Fint* flag, Fint* message,
                                    MPI_F08_status* status, Fint* ierr) {
  int found = 0;
  const int rc = MPI_Improbe(*source, *tag, *comm, &found, message, c_status(status));
  answer(ierr, rc, flag, found);
}

// ---- persistent requests and their ends

OB_MPI_EXPORT void mpi_start_f08_(Fint* request, Fint* ierr) { answer(ierr, MPI_Start(request)); }

OB_MPI_EXPORT void mpi_startall_f08_(Fint* count, Fint* requests, Fint* ierr) {
  answer(ierr, MPI_Startall(*count, requests));
}

OB_MPI_EXPORT void mpi_request_free_f08_(Fint* request, Fint* ierr) { answer(ierr, MPI_Request_free(request)); }

OB_MPI_EXPORT void mpi_cancel_f08_(Fint* request, Fint* ierr) { answer(ierr, MPI_Cancel(request)); }

// ---- completion calls

OB_MPI_EXPORT void mpi_wait_f08_(Fint* request, MPI_F08_status* status, Fint* ierr) {
  answer(ierr, MPI_Wait(request, c_status(status)));
}

OB_MPI_EXPORT void mpi_waitall_f08_(Fint* count, Fint* requests, MPI_F08_status* statuses, Fint* ierr) {
  answer(ierr, MPI_Waitall(*count, requests, c_statuses(statuses)));
}

OB_MPI_EXPORT void mpi_waitany_f08_(Fint* count, Fint* requests, Fint* index, MPI_F08_status* status, Fint* ierr) {
  const int rc = MPI_Waitany(*count, requests, index, c_status(status));
  *index = fortran_index(*index);
  answer(ierr, rc);
}

OB_MPI_EXPORT void mpi_waitsome_f08_(Fint* incount, Fint* requests, Fint* outcount, Fint* indices,
                                     MPI_F08_status* statuses, Fint* ierr) {
  const int rc = MPI_Waitsome(*incount, requests, outcount, indices, c_statuses(statuses));
  fortran_indices(rc, outcount, indices);
  answer(ierr, rc);
}

OB_MPI_EXPORT void mpi_test_f08_(Fint* request, Fint* flag, MPI_F08_status* status, Fint* ierr) {
  int done = 0;
  const int rc = MPI_Test(request, &done, c_status(status));
  answer(ierr, rc, flag, done);
}

OB_MPI_EXPORT void mpi_testall_f08_(Fint* count, Fint* requests, Fint* flag, MPI_F08_status* statuses, Fint* ierr) {
  int done = 0;
  const int rc = MPI_Testall(*count, requests, &done, c_statuses(statuses));
  answer(ierr, rc, flag, done);
}

OB_MPI_EXPORT void mpi_testany_f08_(Fint* count, Fint* requests, Fint* index, Fint* flag, MPI_F08_status* status,
                                    Fint* ierr) {
  int done = 0;
  const int rc = MPI_Testany(*count, requests, index, &done, c_status(status));
  *index = fortran_index(*index);
  answer(ierr, rc, flag, done);
}

OB_MPI_EXPORT void mpi_testsome_f08_(Fint* incount, Fint* requests, Fint* outcount, Fint* indices,
                                     MPI_F08_status* statuses, Fint* ierr) {
  const int rc = MPI_Testsome(*incount, requests, outcount, indices, c_statuses(statuses));
  fortran_indices(rc, outcount, indices);
  answer(ierr, rc);
}

OB_MPI_EXPORT void mpi_request_get_status_f08_(Fint* request, Fint* flag, MPI_F08_status* status, Fint* ierr) {
  int done = 0;
  const int rc = MPI_Request_get_status(*request, &done, c_status(status));
  answer(ierr, rc, flag, done);
}
