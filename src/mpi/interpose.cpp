// The PMPI interposer an unmodified MPI program loads (LD_PRELOAD, or linked before the MPI
// library): it defines the MPI_ entry points Outboard may offload, decides for each call whether
// it can go to the agent, and otherwise calls the PMPI_ entry point unchanged. MPI handles differ
// between ABIs (ints in MPICH, pointers in Open MPI), so CMake builds this file once per MPI found:
// liboutboard_mpi_<abi>.so, with OUTBOARD_MPI_FAMILY the name that MPI's version string starts with.
//
// A call that passes every rule goes to the agent (offload.cpp) when one serves the job; every
// call is counted for the report with where it went and why.

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "mpi/interpose.h"
#include "mpi/offload.h"
#include "mpi/persistent.h"

namespace outboard::mpi {
namespace {

struct State {
  Tally tally;
  std::string library;  // the first line of MPI_Get_library_version
  bool report = false;  // OUTBOARD_MPI_REPORT=1: rank 0 prints the report at MPI_Finalize
  bool offloaded = false;  // every rank reached its agent at MPI_Init
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
  std::string why = offload_start();
  // Offload is all or nothing: a rank that offloads a collective another rank passes through
  // would wait for it forever.
  int on = why.empty() ? 1 : 0, everywhere = 0;
  PMPI_Allreduce(&on, &everywhere, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (everywhere) {  // every rank has an agent: which agents serve the job (collective)
    why = offload_agents();
    on = why.empty() ? 1 : 0;
    PMPI_Allreduce(&on, &everywhere, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  }
  if (on && !everywhere) {
    offload_stop();
    why = "a rank could not reach its agent";
  }
  s.offloaded = everywhere;
  if (rank == 0 && !everywhere)
    std::fprintf(stderr, "outboard-mpi: %s: every operation passes through to %s\n", why.c_str(), s.library.c_str());
  if (!everywhere || !p2p_asked()) return;
  // Point-to-point is all or nothing too: a message between an offloaded rank and one that
  // passes through would never be matched.
  const std::string blocker = p2p_blocker();
  int can = blocker.empty() ? 1 : 0, all = 0;
  PMPI_Allreduce(&can, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (all) p2p_enable();
  else if (!can)
    std::fprintf(stderr, "outboard-mpi: rank %d: %s: point-to-point passes through on every rank\n", rank,
                 blocker.c_str());
}

Route data_route(MPI_Comm comm, MPI_Datatype send, MPI_Datatype recv) {
  if (intercomm(comm)) return Route::kIntercomm;
  if (!contiguous(send) || !contiguous(recv)) return Route::kNonContiguous;
  return Route::kOffloaded;
}

Route reduce_route(MPI_Comm comm, MPI_Datatype type, MPI_Op op) {
  if (intercomm(comm)) return Route::kIntercomm;
  // Fortran's INTEGER, REAL and DOUBLE PRECISION are distinct handles with C's representations.
  const bool reducible = type == MPI_INT || type == MPI_LONG || type == MPI_FLOAT || type == MPI_DOUBLE ||
                         type == MPI_INTEGER || type == MPI_REAL || type == MPI_DOUBLE_PRECISION;
  if (!reducible) return Route::kReduceType;
  if (op != MPI_SUM && op != MPI_MIN && op != MPI_MAX && op != MPI_PROD) return Route::kReduceOp;
  return Route::kOffloaded;
}

void note(Op op, Route route) { state().tally.add(op, route); }

// The report is a reduction over MPI_COMM_WORLD, so every rank must see the same
// OUTBOARD_MPI_REPORT (mpirun -x / -genv, or `outboard mpirun`, pass it to all).
void finishing() {
  offload_stop();
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
  if (!s.offloaded) return;
  const BufferCounts buffers = offload_buffers();
  uint64_t counts[4] = {buffers.exposed, buffers.staged, buffers.own, buffers.own_allocated}, all[4] = {};
  if (PMPI_Reduce(counts, all, 4, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD) == MPI_SUCCESS && rank == 0) {
    std::fprintf(stderr, "  buffers: %llu collectives in place (kernel copies), %llu staged\n",
                 static_cast<unsigned long long>(all[0]), static_cast<unsigned long long>(all[1]));
    if (all[2])
      std::fprintf(stderr, "  staged in staging of their own: %llu collectives, in %llu regions allocated\n",
                   static_cast<unsigned long long>(all[2]), static_cast<unsigned long long>(all[3]));
  }
  if (!buffers.unreachable.empty())
    std::fprintf(stderr, "  rank %d stages every collective: %s\n", rank, buffers.unreachable.c_str());
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

OB_MPI_EXPORT int MPI_Abort(MPI_Comm comm, int errorcode) {
  offload_abort();
  return PMPI_Abort(comm, errorcode);
}


// ---- communicators the interposer names (collective calls: naming adds one allreduce)

OB_MPI_EXPORT int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* newcomm) {
  const int rc = PMPI_Comm_dup(comm, newcomm);
  if (rc == MPI_SUCCESS && offload_on()) name_communicator(*newcomm);
  return rc;
}

OB_MPI_EXPORT int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* newcomm) {
  const int rc = PMPI_Comm_split(comm, color, key, newcomm);
  if (rc == MPI_SUCCESS && offload_on()) name_communicator(*newcomm);
  return rc;
}

OB_MPI_EXPORT int MPI_Cart_create(MPI_Comm comm, int ndims, const int dims[], const int periods[], int reorder,
                                  MPI_Comm* cart) {
  const int rc = PMPI_Cart_create(comm, ndims, dims, periods, reorder, cart);
  if (rc == MPI_SUCCESS && offload_on()) name_communicator(*cart);
  return rc;
}

OB_MPI_EXPORT int MPI_Cart_sub(MPI_Comm comm, const int remain_dims[], MPI_Comm* newcomm) {
  const int rc = PMPI_Cart_sub(comm, remain_dims, newcomm);
  if (rc == MPI_SUCCESS && offload_on()) name_communicator(*newcomm);
  return rc;
}

// ---- the collectives

namespace {

using outboard::services::mpi_wire::Coll;
using outboard::services::mpi_wire::Elem;
using outboard::services::mpi_wire::Post;
using outboard::services::mpi_wire::Reduce;

uint64_t type_bytes(MPI_Datatype type, int count) {
  int size = 0;
  PMPI_Type_size(type, &size);
  return static_cast<uint64_t>(size) * static_cast<uint64_t>(count < 0 ? 0 : count);
}

int comm_size(MPI_Comm comm) {
  int n = 0;
  PMPI_Comm_size(comm, &n);
  return n;
}

std::span<const uint8_t> bytes_of(const void* p, uint64_t n) { return {static_cast<const uint8_t*>(p), n}; }

// The rules passed: offload it, or say why not. `staged` is what it would stage; `uneven`, whether
// its sizes differ by rank.
Route decide(Route rules, MPI_Comm comm, uint64_t staged, bool uneven = false) {
  return rules == Route::kOffloaded ? offload_route(comm, staged, uneven) : rules;
}

// Alltoall and allgather: one block to or from each of the communicator's `n` ranks.
struct Blocks {
  bool in_place;
  Route rules;  // the data rules, and the send block matching the receive block
  uint64_t block, n;
};
Blocks blocks_of(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int recvcount, MPI_Datatype recvtype,
                 MPI_Comm comm) {
  const bool in_place = sendbuf == MPI_IN_PLACE;
  Route rules = data_route(comm, in_place ? recvtype : sendtype, recvtype);
  const uint64_t block = type_bytes(recvtype, recvcount), n = rules == Route::kIntercomm ? 0 : comm_size(comm);
  if (rules == Route::kOffloaded && !in_place && type_bytes(sendtype, sendcount) != block) rules = Route::kTypeMismatch;
  return {in_place, rules, block, n};
}

}  // namespace

OB_MPI_EXPORT int MPI_Ialltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  const auto [in_place, rules, block, n] = blocks_of(sendbuf, sendcount, sendtype, recvcount, recvtype, comm);
  const Route route = decide(rules, comm, (in_place ? 1 : 2) * n * block);
  note(Op::kIalltoall, route);
  if (route != Route::kOffloaded)
    return PMPI_Ialltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request);
  Post p;
  p.coll = Coll::kAlltoall, p.bytes = block, p.in_place = in_place;
  return offload_post(p, comm, bytes_of(in_place ? recvbuf : sendbuf, n * block), recvbuf, n * block, request);
}

OB_MPI_EXPORT int MPI_Ialltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[],
                                 MPI_Datatype sendtype, void* recvbuf, const int recvcounts[], const int rdispls[],
                                 MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  const bool in_place = sendbuf == MPI_IN_PLACE;
  Route route = data_route(comm, in_place ? recvtype : sendtype, recvtype);
  Post p;
  uint64_t in_end = 0, out_end = 0;
  if (route == Route::kOffloaded) {
    const int n = comm_size(comm);
    const uint64_t ssize = type_bytes(in_place ? recvtype : sendtype, 1), rsize = type_bytes(recvtype, 1);
    const int* sc = in_place ? recvcounts : sendcounts;
    const int* sd = in_place ? rdispls : sdispls;
    for (int i = 0; i < n; ++i) {
      p.send_counts.push_back(ssize * std::max(sc[i], 0));
      p.send_displs.push_back(ssize * std::max(sd[i], 0));
      p.recv_counts.push_back(rsize * std::max(recvcounts[i], 0));
      p.recv_displs.push_back(rsize * std::max(rdispls[i], 0));
      if (p.send_counts[i]) in_end = std::max(in_end, p.send_displs[i] + p.send_counts[i]);
      if (p.recv_counts[i]) out_end = std::max(out_end, p.recv_displs[i] + p.recv_counts[i]);
    }
    if (in_place) in_end = out_end;
  }
  route = decide(route, comm, (in_place ? 0 : in_end) + out_end, /*uneven=*/true);
  note(Op::kIalltoallv, route);
  if (route != Route::kOffloaded)
    return PMPI_Ialltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm,
                           request);
  p.coll = Coll::kAlltoallv, p.in_place = in_place;
  return offload_post(p, comm, bytes_of(in_place ? recvbuf : sendbuf, in_end), recvbuf, out_end, request);
}

OB_MPI_EXPORT int MPI_Iallgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  const auto [in_place, rules, block, n] = blocks_of(sendbuf, sendcount, sendtype, recvcount, recvtype, comm);
  const Route route = decide(rules, comm, (in_place ? n : n + 1) * block);
  note(Op::kIallgather, route);
  if (route != Route::kOffloaded)
    return PMPI_Iallgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request);
  Post p;
  p.coll = Coll::kAllgather, p.bytes = block, p.in_place = in_place;
  return offload_post(p, comm, in_place ? bytes_of(recvbuf, n * block) : bytes_of(sendbuf, block), recvbuf, n * block,
                      request);
}

OB_MPI_EXPORT int MPI_Ibcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm,
                             MPI_Request* request) {
  const uint64_t bytes = type_bytes(datatype, count);
  const Route route = decide(data_route(comm, datatype, datatype), comm, bytes);
  note(Op::kIbcast, route);
  if (route != Route::kOffloaded) return PMPI_Ibcast(buffer, count, datatype, root, comm, request);
  int rank = 0;
  PMPI_Comm_rank(comm, &rank);
  Post p;
  p.coll = Coll::kBcast, p.bytes = bytes, p.root = static_cast<uint32_t>(root);
  return offload_post(p, comm, rank == root ? bytes_of(buffer, bytes) : std::span<const uint8_t>{}, buffer, bytes,
                      request);
}

OB_MPI_EXPORT int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                                 MPI_Comm comm, MPI_Request* request) {
  const bool in_place = sendbuf == MPI_IN_PLACE;
  const uint64_t bytes = type_bytes(datatype, count);
  const Route route = decide(reduce_route(comm, datatype, op), comm, (in_place ? 1 : 2) * bytes);
  note(Op::kIallreduce, route);
  if (route != Route::kOffloaded) return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
  Post p;
  p.coll = Coll::kAllreduce, p.bytes = bytes, p.in_place = in_place;
  const bool floating = datatype == MPI_FLOAT || datatype == MPI_DOUBLE || datatype == MPI_REAL ||
                        datatype == MPI_DOUBLE_PRECISION;
  const uint64_t width = type_bytes(datatype, 1);
  p.elem = floating ? (width == 4 ? Elem::kF32 : Elem::kF64) : (width == 4 ? Elem::kI32 : Elem::kI64);
  p.reduce = op == MPI_SUM ? Reduce::kSum : op == MPI_MIN ? Reduce::kMin : op == MPI_MAX ? Reduce::kMax : Reduce::kProd;
  return offload_post(p, comm, bytes_of(in_place ? recvbuf : sendbuf, bytes), recvbuf, bytes, request);
}

// ---- point-to-point (OUTBOARD_MPI_P2P=1 or =all): every call that sends or receives on a communicator the
// agent serves goes to it, blocking ones too, so none is matched out of order against another;
// with it off, each call is MPI's own and is not counted.

namespace {

using outboard::services::mpi_wire::Kind;
using outboard::services::mpi_wire::P2p;
using outboard::services::mpi_wire::kAny;

int wait_one(MPI_Request* request, MPI_Status* status) {
  while (offload_running({request, 1})) offload_nap();
  return PMPI_Wait(request, status);
}

// The route of a point-to-point call, counted under `op`.
Route p2p(Op op, MPI_Comm comm, int peer) {
  const Route route = p2p_route(comm, peer);
  note(op, route);
  return route;
}

P2p message(Kind kind, int peer, int tag, bool sync = false) {
  P2p m;
  m.kind = kind;
  m.peer = peer == MPI_ANY_SOURCE ? kAny : peer;
  m.tag = tag == MPI_ANY_TAG ? kAny : tag;
  m.sync = sync;
  return m;
}

int isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, bool sync,
          MPI_Request* request) {
  return p2p_post(message(Kind::kSend, dest, tag, sync), comm, buf, count, type, contiguous(type), request);
}

int irecv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm, MPI_Request* request) {
  return p2p_post(message(Kind::kRecv, source, tag), comm, buf, count, type, contiguous(type), request);
}

// A blocking send: posted as the non-blocking one, then waited for.
int send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, bool sync) {
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = isend(buf, count, type, dest, tag, comm, sync, &request);
  return rc != MPI_SUCCESS ? rc : wait_one(&request, MPI_STATUS_IGNORE);
}

}  // namespace

OB_MPI_EXPORT int MPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                            MPI_Request* request) {
  if (!p2p_on() || p2p(Op::kIsend, comm, dest) != Route::kOffloaded)
    return PMPI_Isend(buf, count, type, dest, tag, comm, request);
  return isend(buf, count, type, dest, tag, comm, false, request);
}

OB_MPI_EXPORT int MPI_Issend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                             MPI_Request* request) {
  if (!p2p_on() || p2p(Op::kIsend, comm, dest) != Route::kOffloaded)
    return PMPI_Issend(buf, count, type, dest, tag, comm, request);
  return isend(buf, count, type, dest, tag, comm, true, request);
}

// Buffered and ready sends are standard sends here: MPI allows both (a ready send's receive is
// posted already; a buffered one completes once the agent buffered it, or was matched).
OB_MPI_EXPORT int MPI_Ibsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                             MPI_Request* request) {
  if (!p2p_on() || p2p(Op::kIsend, comm, dest) != Route::kOffloaded)
    return PMPI_Ibsend(buf, count, type, dest, tag, comm, request);
  return isend(buf, count, type, dest, tag, comm, false, request);
}

OB_MPI_EXPORT int MPI_Irsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                             MPI_Request* request) {
  if (!p2p_on() || p2p(Op::kIsend, comm, dest) != Route::kOffloaded)
    return PMPI_Irsend(buf, count, type, dest, tag, comm, request);
  return isend(buf, count, type, dest, tag, comm, false, request);
}

OB_MPI_EXPORT int MPI_Irecv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                            MPI_Request* request) {
  if (!p2p_on() || p2p(Op::kIrecv, comm, source) != Route::kOffloaded)
    return PMPI_Irecv(buf, count, type, source, tag, comm, request);
  return irecv(buf, count, type, source, tag, comm, request);
}

OB_MPI_EXPORT int MPI_Send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  if (!p2p_on() || p2p(Op::kSend, comm, dest) != Route::kOffloaded)
    return PMPI_Send(buf, count, type, dest, tag, comm);
  return send(buf, count, type, dest, tag, comm, false);
}

OB_MPI_EXPORT int MPI_Ssend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  if (!p2p_on() || p2p(Op::kSend, comm, dest) != Route::kOffloaded)
    return PMPI_Ssend(buf, count, type, dest, tag, comm);
  return send(buf, count, type, dest, tag, comm, true);
}

OB_MPI_EXPORT int MPI_Bsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  if (!p2p_on() || p2p(Op::kSend, comm, dest) != Route::kOffloaded)
    return PMPI_Bsend(buf, count, type, dest, tag, comm);
  return send(buf, count, type, dest, tag, comm, false);
}

OB_MPI_EXPORT int MPI_Rsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  if (!p2p_on() || p2p(Op::kSend, comm, dest) != Route::kOffloaded)
    return PMPI_Rsend(buf, count, type, dest, tag, comm);
  return send(buf, count, type, dest, tag, comm, false);
}

OB_MPI_EXPORT int MPI_Recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                           MPI_Status* status) {
  if (!p2p_on() || p2p(Op::kRecv, comm, source) != Route::kOffloaded)
    return PMPI_Recv(buf, count, type, source, tag, comm, status);
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = irecv(buf, count, type, source, tag, comm, &request);
  return rc != MPI_SUCCESS ? rc : wait_one(&request, status);
}

// Either peer may be MPI_PROC_NULL: that half goes to MPI (which completes it at once), the
// other to the agent.
OB_MPI_EXPORT int MPI_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                               void* recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag,
                               MPI_Comm comm, MPI_Status* status) {
  if (!p2p_on() || (p2p_route(comm, dest) != Route::kOffloaded && p2p_route(comm, source) != Route::kOffloaded)) {
    if (p2p_on()) note(Op::kSendrecv, p2p_route(comm, dest));
    return PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag,
                         comm, status);
  }
  note(Op::kSendrecv, Route::kOffloaded);
  MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  int rc = p2p_route(comm, source) == Route::kOffloaded
               ? irecv(recvbuf, recvcount, recvtype, source, recvtag, comm, &requests[0])
               : PMPI_Irecv(recvbuf, recvcount, recvtype, source, recvtag, comm, &requests[0]);
  if (rc == MPI_SUCCESS)
    rc = p2p_route(comm, dest) == Route::kOffloaded
             ? isend(sendbuf, sendcount, sendtype, dest, sendtag, comm, false, &requests[1])
             : PMPI_Isend(sendbuf, sendcount, sendtype, dest, sendtag, comm, &requests[1]);
  if (rc != MPI_SUCCESS) return rc;
  rc = wait_one(&requests[1], MPI_STATUS_IGNORE);
  const int got = wait_one(&requests[0], status);
  return rc != MPI_SUCCESS ? rc : got;
}

OB_MPI_EXPORT int MPI_Sendrecv_replace(void* buf, int count, MPI_Datatype type, int dest, int sendtag, int source,
                                       int recvtag, MPI_Comm comm, MPI_Status* status) {
  if (!p2p_on() || (p2p_route(comm, dest) != Route::kOffloaded && p2p_route(comm, source) != Route::kOffloaded))
    return PMPI_Sendrecv_replace(buf, count, type, dest, sendtag, source, recvtag, comm, status);
  // What goes out is packed first: the receive overwrites the buffer.
  int bytes = 0, position = 0;
  PMPI_Pack_size(count, type, MPI_COMM_WORLD, &bytes);
  std::vector<uint8_t> out(static_cast<size_t>(bytes));
  PMPI_Pack(buf, count, type, out.data(), bytes, &position, MPI_COMM_WORLD);
  return MPI_Sendrecv(out.data(), position, MPI_PACKED, dest, sendtag, buf, count, type, source, recvtag, comm, status);
}

OB_MPI_EXPORT int MPI_Iprobe(int source, int tag, MPI_Comm comm, int* flag, MPI_Status* status) {
  if (!p2p_on() || p2p(Op::kProbe, comm, source) != Route::kOffloaded)
    return PMPI_Iprobe(source, tag, comm, flag, status);
  return p2p_iprobe(message(Kind::kProbe, source, tag), comm, flag, status);
}

OB_MPI_EXPORT int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status* status) {
  if (!p2p_on() || p2p(Op::kProbe, comm, source) != Route::kOffloaded)
    return PMPI_Probe(source, tag, comm, status);
  for (int flag = 0;;) {
    const int rc = p2p_iprobe(message(Kind::kProbe, source, tag), comm, &flag, status);
    if (rc != MPI_SUCCESS || flag) return rc;
    offload_nap();
  }
}

// Persistent sends and receives: where the agent serves the communicator's point-to-point, the
// program's request is a stand-in whose every start posts an offloaded send or receive.

namespace {

// The init's stand-in where the agent serves the communicator's point-to-point, else MPI's own
// (`pmpi`, the PMPI_ init).
template <typename Pmpi, typename Buf>
int persistent_or(Pmpi pmpi, Kind kind, bool sync, Buf buf, int count, MPI_Datatype type, int peer, int tag,
                  MPI_Comm comm, MPI_Request* request) {
  if (!p2p_on() || p2p_route(comm, peer) != Route::kOffloaded) return pmpi(buf, count, type, peer, tag, comm, request);
  return persistent_init({message(kind, peer, tag, sync), comm, buf, count, type, contiguous(type)}, request);
}

int start(MPI_Request* request) {
  if (!persistent(*request)) return PMPI_Start(request);
  note(Op::kStart, Route::kOffloaded);
  return persistent_start(*request);
}

}  // namespace

OB_MPI_EXPORT int MPI_Send_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                                MPI_Request* request) {
  return persistent_or(PMPI_Send_init, Kind::kSend, false, buf, count, type, dest, tag, comm, request);
}

OB_MPI_EXPORT int MPI_Ssend_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                                 MPI_Request* request) {
  return persistent_or(PMPI_Ssend_init, Kind::kSend, true, buf, count, type, dest, tag, comm, request);
}

// Buffered and ready: standard sends, as their non-persistent forms are.
OB_MPI_EXPORT int MPI_Bsend_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                                 MPI_Request* request) {
  return persistent_or(PMPI_Bsend_init, Kind::kSend, false, buf, count, type, dest, tag, comm, request);
}

OB_MPI_EXPORT int MPI_Rsend_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                                 MPI_Request* request) {
  return persistent_or(PMPI_Rsend_init, Kind::kSend, false, buf, count, type, dest, tag, comm, request);
}

OB_MPI_EXPORT int MPI_Recv_init(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                                MPI_Request* request) {
  return persistent_or(PMPI_Recv_init, Kind::kRecv, false, buf, count, type, source, tag, comm, request);
}

OB_MPI_EXPORT int MPI_Start(MPI_Request* request) { return start(request); }

OB_MPI_EXPORT int MPI_Startall(int count, MPI_Request requests[]) {
  for (int i = 0; i < count; ++i)
    if (const int rc = start(&requests[i]); rc != MPI_SUCCESS) return rc;
  return MPI_SUCCESS;
}

OB_MPI_EXPORT int MPI_Request_free(MPI_Request* request) {
  return persistent(*request) ? persistent_free(request) : PMPI_Request_free(request);
}

OB_MPI_EXPORT int MPI_Cancel(MPI_Request* request) {
  return persistent(*request) ? persistent_cancel(request) : PMPI_Cancel(request);
}

// Matched probes: the probed message is claimed at once (offload.h), for MPI_Mrecv or MPI_Imrecv.
OB_MPI_EXPORT int MPI_Improbe(int source, int tag, MPI_Comm comm, int* flag, MPI_Message* msg, MPI_Status* status) {
  if (!p2p_on() || p2p(Op::kProbe, comm, source) != Route::kOffloaded)
    return PMPI_Improbe(source, tag, comm, flag, msg, status);
  return p2p_mprobe(message(Kind::kProbe, source, tag), comm, flag, msg, status);
}

OB_MPI_EXPORT int MPI_Mprobe(int source, int tag, MPI_Comm comm, MPI_Message* msg, MPI_Status* status) {
  if (!p2p_on() || p2p(Op::kProbe, comm, source) != Route::kOffloaded)
    return PMPI_Mprobe(source, tag, comm, msg, status);
  for (int flag = 0;;) {
    const int rc = p2p_mprobe(message(Kind::kProbe, source, tag), comm, &flag, msg, status);
    if (rc != MPI_SUCCESS || flag) return rc;
    offload_nap();
  }
}

OB_MPI_EXPORT int MPI_Imrecv(void* buf, int count, MPI_Datatype type, MPI_Message* msg, MPI_Request* request) {
  if (!p2p_claimed(*msg)) return PMPI_Imrecv(buf, count, type, msg, request);
  return p2p_imrecv(buf, count, type, msg, request);
}

OB_MPI_EXPORT int MPI_Mrecv(void* buf, int count, MPI_Datatype type, MPI_Message* msg, MPI_Status* status) {
  if (!p2p_claimed(*msg)) return PMPI_Mrecv(buf, count, type, msg, status);
  MPI_Request request = MPI_REQUEST_NULL;
  const int rc = p2p_imrecv(buf, count, type, msg, &request);
  return rc != MPI_SUCCESS ? rc : wait_one(&request, status);
}

// ---- completion calls: every form a program may wait with, over arrays that mix offloaded and
// ordinary requests. Offloaded ones complete (MPI_Grequest_complete) as their answers come; a
// started persistent stand-in is seen through to its current request.

namespace {

std::span<MPI_Request> span_of(MPI_Request* requests, int count) {
  return {requests, static_cast<size_t>(std::max(count, 0))};
}

// Runs `call` (the MPI completion call) on the array with every started stand-in seen through.
template <typename Call>
int seen_through(std::span<MPI_Request> requests, Call call) {
  SeeThrough through(requests);
  const int rc = call(through.requests());
  through.finish();
  return rc;
}

}  // namespace

OB_MPI_EXPORT int MPI_Wait(MPI_Request* request, MPI_Status* status) {
  return seen_through({request, 1}, [&](std::span<MPI_Request> r) { return wait_one(r.data(), status); });
}

OB_MPI_EXPORT int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
  return seen_through(span_of(requests, count), [&](std::span<MPI_Request> r) {
    while (offload_running(r)) offload_nap();
    return PMPI_Waitall(count, r.data(), statuses);
  });
}

OB_MPI_EXPORT int MPI_Waitany(int count, MPI_Request requests[], int* index, MPI_Status* status) {
  return seen_through(span_of(requests, count), [&](std::span<MPI_Request> r) {
    int rc = MPI_SUCCESS;
    wait_some([&] { return offload_running(r); },
              [&] {
                int flag = 0;
                rc = PMPI_Testany(count, r.data(), index, &flag, status);
                return rc != MPI_SUCCESS || flag;
              },
              [&] { rc = PMPI_Waitany(count, r.data(), index, status); });
    return rc;
  });
}

OB_MPI_EXPORT int MPI_Waitsome(int incount, MPI_Request requests[], int* outcount, int indices[],
                               MPI_Status statuses[]) {
  return seen_through(span_of(requests, incount), [&](std::span<MPI_Request> r) {
    int rc = MPI_SUCCESS;
    wait_some([&] { return offload_running(r); },
              [&] {
                rc = PMPI_Testsome(incount, r.data(), outcount, indices, statuses);
                return rc != MPI_SUCCESS || *outcount != 0;
              },
              [&] { rc = PMPI_Waitsome(incount, r.data(), outcount, indices, statuses); });
    return rc;
  });
}

OB_MPI_EXPORT int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  offload_sweep();
  return seen_through({request, 1}, [&](std::span<MPI_Request> r) { return PMPI_Test(r.data(), flag, status); });
}

OB_MPI_EXPORT int MPI_Testall(int count, MPI_Request requests[], int* flag, MPI_Status statuses[]) {
  offload_sweep();
  return seen_through(span_of(requests, count),
                      [&](std::span<MPI_Request> r) { return PMPI_Testall(count, r.data(), flag, statuses); });
}

OB_MPI_EXPORT int MPI_Testany(int count, MPI_Request requests[], int* index, int* flag, MPI_Status* status) {
  offload_sweep();
  return seen_through(span_of(requests, count),
                      [&](std::span<MPI_Request> r) { return PMPI_Testany(count, r.data(), index, flag, status); });
}

OB_MPI_EXPORT int MPI_Testsome(int incount, MPI_Request requests[], int* outcount, int indices[],
                               MPI_Status statuses[]) {
  offload_sweep();
  return seen_through(span_of(requests, incount), [&](std::span<MPI_Request> r) {
    return PMPI_Testsome(incount, r.data(), outcount, indices, statuses);
  });
}

OB_MPI_EXPORT int MPI_Request_get_status(MPI_Request request, int* flag, MPI_Status* status) {
  offload_sweep();
  return seen_through({&request, 1},
                      [&](std::span<MPI_Request> r) { return PMPI_Request_get_status(r[0], flag, status); });
}
