#include "mpi/report.h"

#include <cstdio>

namespace outboard::mpi {

std::string_view op_name(Op op) {
  switch (op) {
    case Op::kIalltoall: return "MPI_Ialltoall";
    case Op::kIalltoallv: return "MPI_Ialltoallv";
    case Op::kIallgather: return "MPI_Iallgather";
    case Op::kIbcast: return "MPI_Ibcast";
    case Op::kIallreduce: return "MPI_Iallreduce";
    case Op::kIsend: return "MPI_Isend";
    case Op::kIrecv: return "MPI_Irecv";
    case Op::kSend: return "MPI_Send";
    case Op::kRecv: return "MPI_Recv";
    case Op::kSendrecv: return "MPI_Sendrecv";
    case Op::kProbe: return "MPI_Probe";
    case Op::kStart: return "MPI_Start";
  }
  return "?";
}

std::string_view route_reason(Route route) {
  switch (route) {
    case Route::kOffloaded: return "offloaded";
    case Route::kIntercomm: return "intercommunicator";
    case Route::kNonContiguous: return "non-contiguous datatype";
    case Route::kReduceType: return "datatype not int, long, float or double (C or Fortran)";
    case Route::kReduceOp: return "op not sum, min, max or prod";
    case Route::kUnknownComm: return "communicator not from world, dup, split, cart_create or cart_sub";
    case Route::kTypeMismatch: return "send and receive sizes differ";
    case Route::kTooBig: return "larger than the staging memory";
    case Route::kNoAgent: return "no agent";
    case Route::kProcNull: return "MPI_PROC_NULL";
    case Route::kOneAgent: return "one agent serves the communicator";
  }
  return "?";
}

Counts Tally::snapshot() const {
  Counts out{};
  for (size_t op = 0; op < kOps; ++op)
    for (size_t r = 0; r < kRoutes; ++r) out[op][r] = counts_[op][r].load(std::memory_order_relaxed);
  return out;
}

std::string render_report(const Counts& totals, int ranks, std::string_view library) {
  std::string out = "outboard-mpi report: " + std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks") + " on " +
                    std::string(library) + "\n";
  bool any = false;
  for (size_t op = 0; op < kOps; ++op) {
    uint64_t passed = 0;
    std::string reasons;
    for (size_t r = 1; r < kRoutes; ++r) {
      if (!totals[op][r]) continue;
      passed += totals[op][r];
      reasons += (reasons.empty() ? "" : ", ") + std::string(route_reason(static_cast<Route>(r))) + ": " +
                 std::to_string(totals[op][r]);
    }
    const uint64_t offloaded = totals[op][0];
    if (!offloaded && !passed) continue;
    any = true;
    char line[96];
    std::snprintf(line, sizeof line, "  %-15s %8llu offloaded %8llu passed through", op_name(static_cast<Op>(op)).data(),
                  static_cast<unsigned long long>(offloaded), static_cast<unsigned long long>(passed));
    out += line;
    out += reasons.empty() ? "\n" : " (" + reasons + ")\n";
  }
  if (!any) out += "  no operation it intercepts was called\n";
  return out;
}

}  // namespace outboard::mpi
