/* What the application proxies (bench/mpi/\*.c) share: a rank's cube of N^3 points with a
 * one-point halo on every side, packing and unpacking its 6 faces, and sorting times. */
#ifndef OUTBOARD_BENCH_MPI_GRID_H
#define OUTBOARD_BENCH_MPI_GRID_H

#include <stddef.h>

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

static inline int compare_doubles(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

#endif
