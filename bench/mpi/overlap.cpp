// outboard-mpi-bench-<abi>: the OSU non-blocking collective method in one run of one collective
// and size (collectives.md §1), for `outboard bench mpi`. Built once per MPI ABI, like the
// interposer; run stock, with the MPI's own progress thread, or with the interposer preloaded.
//
//   outboard-mpi-bench-openmpi OP BYTES ITERATIONS WARMUP [FIXED_COMPUTE_US]
//
// OP: alltoall | alltoallv | allgather | bcast | allreduce; BYTES: per rank (alltoall, alltoallv,
// allgather) or of the buffer (bcast, allreduce: ints, SUM). Rank 0 prints one JSON object:
// pure_us (I<op> + Wait), overall_us, compute_us, overlap_pct (OSU's formula, compute calibrated to
// each rank's own pure latency), the same with compute fixed at FIXED_COMPUTE_US (fixed_*), init_us,
// wait_us, rank_cpu_us (CPU of the rank per overlapped iteration, compute included), ops (every
// collective this run posted) and check ("ok" or what differed from the blocking collective, on
// distinct data: every iteration's input differs).
#include <mpi.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int rank = 0, ranks = 1;

double cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

volatile double sink;

// OSU's dummy compute: busy until `seconds` of wall time have passed.
void compute(double seconds) {
  const double end = MPI_Wtime() + seconds;
  double x = 1.0;
  while (MPI_Wtime() < end)
    for (int i = 0; i < 64; ++i) x = x * 1.0000001 + 1e-9;
  sink = x;
}

struct Coll {
  std::string op;
  size_t bytes = 0;
  std::vector<char> send, recv, want;
  std::vector<int> counts, displs;

  void fill(int salt) {
    for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<char>(i * 131 + salt * 7 + rank * 17);
  }
  void start(MPI_Request* r) {
    const int b = static_cast<int>(bytes);
    if (op == "alltoall") MPI_Ialltoall(send.data(), b, MPI_CHAR, recv.data(), b, MPI_CHAR, MPI_COMM_WORLD, r);
    else if (op == "alltoallv")
      MPI_Ialltoallv(send.data(), counts.data(), displs.data(), MPI_CHAR, recv.data(), counts.data(), displs.data(),
                     MPI_CHAR, MPI_COMM_WORLD, r);
    else if (op == "allgather") MPI_Iallgather(send.data(), b, MPI_CHAR, recv.data(), b, MPI_CHAR, MPI_COMM_WORLD, r);
    else if (op == "bcast") {
      if (rank == 0) std::memcpy(recv.data(), send.data(), bytes);
      MPI_Ibcast(recv.data(), b, MPI_CHAR, 0, MPI_COMM_WORLD, r);
    } else MPI_Iallreduce(send.data(), recv.data(), b / 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD, r);
  }
  void blocking() {
    const int b = static_cast<int>(bytes);
    if (op == "alltoall") MPI_Alltoall(send.data(), b, MPI_CHAR, want.data(), b, MPI_CHAR, MPI_COMM_WORLD);
    else if (op == "alltoallv")
      MPI_Alltoallv(send.data(), counts.data(), displs.data(), MPI_CHAR, want.data(), counts.data(), displs.data(),
                    MPI_CHAR, MPI_COMM_WORLD);
    else if (op == "allgather") MPI_Allgather(send.data(), b, MPI_CHAR, want.data(), b, MPI_CHAR, MPI_COMM_WORLD);
    else if (op == "bcast") {
      if (rank == 0) std::memcpy(want.data(), send.data(), bytes);
      MPI_Bcast(want.data(), b, MPI_CHAR, 0, MPI_COMM_WORLD);
    } else MPI_Allreduce(send.data(), want.data(), b / 4, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  }
};

double average(double mine) {
  double sum = 0;
  MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return sum / ranks;
}

struct Overlapped {
  double overall = 0, compute = 0, init = 0, wait = 0, cpu = 0;
};

Overlapped overlapped(Coll& c, int iterations, double compute_s, int& salt) {
  Overlapped o;
  MPI_Barrier(MPI_COMM_WORLD);
  const double cpu0 = cpu_s();
  for (int i = 0; i < iterations; ++i) {
    c.fill(++salt);
    MPI_Request r;
    const double t0 = MPI_Wtime();
    c.start(&r);
    const double t1 = MPI_Wtime();
    compute(compute_s);
    const double t2 = MPI_Wtime();
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    const double t3 = MPI_Wtime();
    o.overall += t3 - t0, o.init += t1 - t0, o.compute += t2 - t1, o.wait += t3 - t2;
    MPI_Barrier(MPI_COMM_WORLD);
  }
  o.cpu = (cpu_s() - cpu0) / iterations;
  o.overall /= iterations, o.init /= iterations, o.compute /= iterations, o.wait /= iterations;
  return o;
}

double overlap_pct(double overall, double compute, double pure) {
  return std::max(0.0, 100.0 - 100.0 * (overall - compute) / pure);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (argc < 5) {
    if (rank == 0) std::fprintf(stderr, "usage: %s OP BYTES ITERATIONS WARMUP [FIXED_COMPUTE_US]\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  Coll c;
  c.op = argv[1];
  c.bytes = std::strtoull(argv[2], nullptr, 10);
  const int iterations = std::atoi(argv[3]), warmup = std::atoi(argv[4]);
  const double fixed_us = argc > 5 ? std::atof(argv[5]) : 0;
  if (c.op == "allreduce") c.bytes = std::max<size_t>(4, c.bytes / 4 * 4);
  const bool per_rank = c.op == "alltoall" || c.op == "alltoallv" || c.op == "allgather";
  c.send.resize(per_rank && c.op != "allgather" ? c.bytes * ranks : c.bytes);
  c.recv.resize(per_rank ? c.bytes * ranks : c.bytes);
  c.want.resize(c.recv.size());
  for (int i = 0; i < ranks; ++i) c.counts.push_back(static_cast<int>(c.bytes)), c.displs.push_back(i * c.bytes);

  int salt = 0, ops = 0;
  for (int i = 0; i < warmup; ++i, ++ops) {
    MPI_Request r;
    c.start(&r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double t = MPI_Wtime();
  for (int i = 0; i < iterations; ++i, ++ops) {
    MPI_Request r;
    c.start(&r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
  }
  const double pure_mine = (MPI_Wtime() - t) / iterations;
  const Overlapped own = overlapped(c, iterations, pure_mine, salt);
  ops += iterations;
  Overlapped fixed;
  if (fixed_us > 0) {
    fixed = overlapped(c, iterations, fixed_us * 1e-6, salt);
    ops += iterations;
  }
  // The check: one more run on fresh data against the blocking collective.
  c.fill(++salt);
  MPI_Request r;
  c.start(&r);
  MPI_Wait(&r, MPI_STATUS_IGNORE);
  ++ops;
  c.blocking();
  int bad = std::memcmp(c.recv.data(), c.want.data(), c.recv.size()) != 0, any_bad = 0;
  MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);

  const double pure = average(pure_mine), overall = average(own.overall), comp = average(own.compute);
  const double init = average(own.init), wait = average(own.wait), cpu = average(own.cpu);
  const double f_overall = average(fixed.overall), f_compute = average(fixed.compute);
  if (rank == 0) {
    std::printf("{\"pure_us\": %.3f, \"overall_us\": %.3f, \"compute_us\": %.3f, \"overlap_pct\": %.2f, "
                "\"init_us\": %.3f, \"wait_us\": %.3f, \"rank_cpu_us\": %.3f, ",
                pure * 1e6, overall * 1e6, comp * 1e6, overlap_pct(overall, comp, pure), init * 1e6, wait * 1e6,
                cpu * 1e6);
    if (fixed_us > 0)
      std::printf("\"fixed_overall_us\": %.3f, \"fixed_compute_us\": %.3f, \"fixed_overlap_pct\": %.2f, ",
                  f_overall * 1e6, f_compute * 1e6, overlap_pct(f_overall, f_compute, pure));
    std::printf("\"ops\": %d, \"check\": \"%s\"}\n", ops,
                any_bad ? (std::to_string(any_bad) + " ranks differ from the blocking collective").c_str() : "ok");
  }
  MPI_Finalize();
  return 0;
}
