/* What the application proxies (bench/mpi/\*.c) share: their arguments, a rank's cube of N^3
 * points with a one-point halo on every side, packing and unpacking its 6 faces, CPU time and
 * the summary of the timed iterations. */
#ifndef OUTBOARD_BENCH_MPI_GRID_H
#define OUTBOARD_BENCH_MPI_GRID_H

#include <mpi.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

#define AT(u, n, i, j, k) (u)[((size_t)(i) * ((n) + 2) + (j)) * ((n) + 2) + (k)]

/* Face d (0 x-, 1 x+, 2 y-, 3 y+, 4 z-, 5 z+) of the interior, or of the halo when `halo`, into
 * `buf` (`pack`) or from it. */
static inline void face(double* u, int n, int d, double* buf, int pack, int halo) {
  const int axis = d / 2, at = d % 2 ? (halo ? n + 1 : n) : (halo ? 0 : 1);
  size_t m = 0;
  for (int a = 1; a <= n; a++)
    for (int b = 1; b <= n; b++) {
      double* p = axis == 0 ? &AT(u, n, at, a, b) : axis == 1 ? &AT(u, n, a, at, b) : &AT(u, n, a, b, at);
      if (pack) buf[m++] = *p;
      else *p = buf[m++];
    }
}

/* Ends the job (status 2), rank 0 saying `why`. The other ranks wait for its abort: one of theirs
 * could kill rank 0 before it has said anything. */
static inline void proxy_exit(const char* why) {
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) fprintf(stderr, "%s\n", why);
  else MPI_Barrier(MPI_COMM_WORLD);
  MPI_Abort(MPI_COMM_WORLD, 2);
}

/* After MPI_Init: the proxy's arguments N ITERATIONS WARMUP, or the job ends saying its usage. */
static inline void proxy_arguments(int argc, char** argv, int* n, int* iterations, int* warmup) {
  if (argc != 4) {
    char why[256];
    snprintf(why, sizeof why, "usage: %s N ITERATIONS WARMUP", argv[0]);
    proxy_exit(why);
  }
  *n = atoi(argv[1]), *iterations = atoi(argv[2]), *warmup = atoi(argv[3]);
}

/* CPU seconds (user and system) between two getrusage(RUSAGE_SELF) readings. */
static inline double cpu_seconds(const struct rusage* from, const struct rusage* to) {
  return (to->ru_utime.tv_sec - from->ru_utime.tv_sec) + (to->ru_stime.tv_sec - from->ru_stime.tv_sec) +
         1e-6 * ((to->ru_utime.tv_usec - from->ru_utime.tv_usec) + (to->ru_stime.tv_usec - from->ru_stime.tv_usec));
}

static inline int compare_doubles(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* The timed iterations start together, after the warm-up: `from` is this rank's CPU then. */
static inline void timing_starts(MPI_Comm comm, struct rusage* from) {
  MPI_Barrier(comm);
  getrusage(RUSAGE_SELF, from);
}

/* What rank 0 reports of the timed iterations (those after the warm-up). */
struct summary {
  double p50_us, p90_us; /* the slowest rank's time per iteration */
  double cpu_us;         /* the ranks' mean CPU per iteration */
};

/* Collective over `comm`: `times` holds every iteration's seconds (warm-up first), `cpu_s` this
 * rank's CPU seconds over the timed ones, `phase` its seconds in each of `phases` phases over
 * them, which become on rank 0 the ranks' mean µs per iteration. The result is rank 0's. */
static inline struct summary summarize(MPI_Comm comm, const double* times, int warmup, int iterations, double cpu_s,
                                       double* phase, int phases) {
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int all = warmup + iterations;
  double cpu_sum = 0, *slowest = malloc(all * sizeof(double)), *sums = malloc(phases * sizeof(double));
  MPI_Reduce(&cpu_s, &cpu_sum, 1, MPI_DOUBLE, MPI_SUM, 0, comm);
  MPI_Reduce(phase, sums, phases, MPI_DOUBLE, MPI_SUM, 0, comm);
  MPI_Reduce(times, slowest, all, MPI_DOUBLE, MPI_MAX, 0, comm);
  struct summary s = {0, 0, 0};
  if (rank == 0) {
    qsort(slowest + warmup, iterations, sizeof(double), compare_doubles);
    s.p50_us = 1e6 * slowest[warmup + iterations / 2];
    s.p90_us = 1e6 * slowest[warmup + (iterations * 9) / 10];
    s.cpu_us = 1e6 * cpu_sum / size / iterations;
    for (int p = 0; p < phases; p++) phase[p] = 1e6 * sums[p] / size / iterations;
  }
  free(slowest), free(sums);
  return s;
}

#endif
