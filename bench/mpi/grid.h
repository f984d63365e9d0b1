/* What the application proxies (bench/mpi/\*.c) share: their arguments, a rank's cube of N^3
 * points with a one-point halo on every side, packing and unpacking its 6 faces, CPU time and
 * sorting times. */
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

/* After MPI_Init: the proxy's arguments N ITERATIONS WARMUP, or the job ends saying its usage. */
static inline void proxy_arguments(int argc, char** argv, int* n, int* iterations, int* warmup) {
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (argc != 4) {
    if (rank == 0) fprintf(stderr, "usage: %s N ITERATIONS WARMUP\n", argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
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

#endif
