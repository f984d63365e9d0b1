// The PMPI interposer an unmodified MPI program loads (LD_PRELOAD, or linked before the MPI
// library): it defines the MPI_ entry points Outboard may offload, decides for each call whether
// it can go to the agent, and otherwise calls the PMPI_ entry point unchanged. MPI handles differ
// between ABIs (ints in MPICH, pointers in Open MPI), so CMake builds this file once per MPI found:
// liboutboard_mpi_<abi>.so, with OUTBOARD_MPI_FAMILY the name that MPI's version string starts with.
//
// Today every call passes through: the agent's MPI service is not built yet, so each offloadable
// call is counted as "no agent". The eligibility rules below are the ones offload will use.

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "mpi/interpose.h"

namespace outboard::mpi {
namespace {

struct State {
  Tally tally;
  std::string library;  // the first line of MPI_Get_library_version
  bool report = false;  // OUTBOARD_MPI_REPORT=1: rank 0 prints the report at MPI_Finalize
};

State& state() {
  static State s;
  return s;
}

// MPI_MAX_LIBRARY_VERSION_STRING differs between ABIs (256 in Open MPI, 8192 in MPICH) and, when
// the wrong interposer is loaded, the other MPI fills the buffer: size it for the larger.
constexpr int kVersionBytes = 16384;

bool intercomm(MPI_Comm comm) {
  int flag = 0;
  return PMPI_Comm_test_inter(comm, &flag) == MPI_SUCCESS && flag;
}

// Contiguous: the count's bytes are one dense run, as a predefined type's are (true lower bound 0,
// size == extent), so the agent may move them as bytes.
bool contiguous(MPI_Datatype type) {
  int size = 0;
  MPI_Aint lb = 0, extent = 0, true_lb = 0, true_extent = 0;
  if (PMPI_Type_size(type, &size) != MPI_SUCCESS || PMPI_Type_get_extent(type, &lb, &extent) != MPI_SUCCESS ||
      PMPI_Type_get_true_extent(type, &true_lb, &true_extent) != MPI_SUCCESS)
    return false;
  return lb == 0 && true_lb == 0 && extent == size && true_extent == size;
}

}  // namespace

// Refuses to run under another MPI than the one this library was built for: its handles would be
// misread. The version call is allowed before MPI_Init.
void check_library() {
  static char version[kVersionBytes];
  int len = 0;
  PMPI_Get_library_version(version, &len);
  std::string_view text(version, static_cast<size_t>(len > 0 && len < kVersionBytes ? len : 0));
  text = text.substr(0, text.find_first_of("\n,"));
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  if (!text.starts_with(OUTBOARD_MPI_FAMILY)) {
    std::fprintf(stderr,
                 "outboard-mpi: liboutboard_mpi_" OUTBOARD_MPI_ABI ".so is built for " OUTBOARD_MPI_FAMILY
                 " but this program runs on '%.*s': preload the library built for that MPI "
                 "(outboard mpirun --mpi picks it)\n",
                 static_cast<int>(text.size()), text.data());
    std::_Exit(2);
  }
  std::string& library = state().library;  // whitespace runs as one space ("MPICH Version:\t4.0.2")
  for (char c : text) {
    if (c != ' ' && c != '\t') library += c;
    else if (!library.empty() && library.back() != ' ') library += ' ';
  }
}

void started() {
  State& s = state();
  const char* report = std::getenv("OUTBOARD_MPI_REPORT");
  s.report = report && std::strcmp(report, "1") == 0;
  int rank = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    std::fprintf(stderr, "outboard-mpi: no agent serves this job: every operation passes through to %s\n",
                 s.library.c_str());
}

Route data_route(MPI_Comm comm, MPI_Datatype send, MPI_Datatype recv) {
  if (intercomm(comm)) return Route::kIntercomm;
  if (!contiguous(send) || !contiguous(recv)) return Route::kNonContiguous;
  return Route::kNoAgent;
}

Route reduce_route(MPI_Comm comm, MPI_Datatype type, MPI_Op op) {
  if (intercomm(comm)) return Route::kIntercomm;
  // Fortran's INTEGER, REAL and DOUBLE PRECISION are distinct handles with C's representations.
  const bool reducible = type == MPI_INT || type == MPI_LONG || type == MPI_FLOAT || type == MPI_DOUBLE ||
                         type == MPI_INTEGER || type == MPI_REAL || type == MPI_DOUBLE_PRECISION;
  if (!reducible) return Route::kReduceType;
  if (op != MPI_SUM && op != MPI_MIN && op != MPI_MAX && op != MPI_PROD) return Route::kReduceOp;
  return Route::kNoAgent;
}

void note(Op op, Route route) { state().tally.add(op, route); }

// The report is a reduction over MPI_COMM_WORLD, so every rank must see the same
// OUTBOARD_MPI_REPORT (mpirun -x / -genv, or `outboard mpirun`, pass it to all).
void finishing() {
  State& s = state();
  if (!s.report) return;
  const Counts mine = s.tally.snapshot();
  Counts sum{};
  int rank = 0, ranks = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (PMPI_Reduce(mine.data(), sum.data(), static_cast<int>(kOps * kRoutes), MPI_UINT64_T, MPI_SUM, 0,
                  MPI_COMM_WORLD) == MPI_SUCCESS &&
      rank == 0)
    std::fputs(render_report(sum, ranks, s.library).c_str(), stderr);
}

}  // namespace outboard::mpi

using namespace outboard::mpi;

OB_MPI_EXPORT int MPI_Init(int* argc, char*** argv) {
  check_library();
  const int rc = PMPI_Init(argc, argv);
  if (rc == MPI_SUCCESS) started();
  return rc;
}

OB_MPI_EXPORT int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  check_library();
  const int rc = PMPI_Init_thread(argc, argv, required, provided);
  if (rc == MPI_SUCCESS) started();
  return rc;
}

OB_MPI_EXPORT int MPI_Finalize() {
  finishing();
  return PMPI_Finalize();
}

OB_MPI_EXPORT int MPI_Ialltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  note(Op::kIalltoall, data_route(comm, sendbuf == MPI_IN_PLACE ? recvtype : sendtype, recvtype));
  return PMPI_Ialltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request);
}

OB_MPI_EXPORT int MPI_Ialltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[],
                                 MPI_Datatype sendtype, void* recvbuf, const int recvcounts[], const int rdispls[],
                                 MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  note(Op::kIalltoallv, data_route(comm, sendbuf == MPI_IN_PLACE ? recvtype : sendtype, recvtype));
  return PMPI_Ialltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm,
                         request);
}

OB_MPI_EXPORT int MPI_Iallgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  note(Op::kIallgather, data_route(comm, sendbuf == MPI_IN_PLACE ? recvtype : sendtype, recvtype));
  return PMPI_Iallgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request);
}

OB_MPI_EXPORT int MPI_Ibcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm,
                             MPI_Request* request) {
  note(Op::kIbcast, data_route(comm, datatype, datatype));
  return PMPI_Ibcast(buffer, count, datatype, root, comm, request);
}

OB_MPI_EXPORT int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                                 MPI_Comm comm, MPI_Request* request) {
  note(Op::kIallreduce, reduce_route(comm, datatype, op));
  return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
}
