/* The 3D stencil proxy of `outboard bench mpi-apps` (issue C2): a 7-point Jacobi stencil on a
 * periodic 3D grid decomposed over the ranks (MPI_Dims_create, MPI_Cart_create), each rank a cube
 * of N^3 points. Every iteration packs its 6 faces, posts Irecv/Isend with its 6 neighbours,
 * updates the interior while the halos travel, waits, unpacks and updates the boundary layer:
 * the overlap an offloaded Isend/Irecv should buy.
 *
 * Usage: stencil N ITERATIONS WARMUP. Prints one JSON line on rank 0: p50/p90 µs per iteration
 * (the slowest rank's, over the timed iterations), the ranks' CPU µs per iteration (mean), where
 * an iteration's time goes (the ranks' mean µs: packing and posting, the interior update, the wait
 * for the halos, unpacking and the boundary update), the halo bytes a rank sends per iteration,
 * and "check": "ok" when the final field equals a
 * single-process run of the same iterations from the same start (gathered to rank 0), else what
 * differed. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grid.h"

static double start_value(int gi, int gj, int gk) {
  return sin(0.37 * gi) + cos(0.21 * gj) + 0.5 * sin(0.13 * gk + 0.7 * gi);
}

static double update(const double* u, int n, int i, int j, int k) {
  return (AT(u, n, i, j, k) + AT(u, n, i - 1, j, k) + AT(u, n, i + 1, j, k) + AT(u, n, i, j - 1, k) +
          AT(u, n, i, j + 1, k) + AT(u, n, i, j, k - 1) + AT(u, n, i, j, k + 1)) /
         7.0;
}

/* The same iterations in one process over the whole periodic grid (dims[d] * n points a side). */
static double* serial(int n, const int dims[3], int iterations) {
  const int g[3] = {dims[0] * n, dims[1] * n, dims[2] * n};
  const size_t total = (size_t)g[0] * g[1] * g[2];
  double *u = malloc(total * sizeof(double)), *v = malloc(total * sizeof(double));
#define G(w, i, j, k) (w)[((size_t)(((i) + g[0]) % g[0]) * g[1] + ((j) + g[1]) % g[1]) * g[2] + ((k) + g[2]) % g[2]]
  for (int i = 0; i < g[0]; i++)
    for (int j = 0; j < g[1]; j++)
      for (int k = 0; k < g[2]; k++) G(u, i, j, k) = start_value(i, j, k);
  for (int it = 0; it < iterations; it++) {
    for (int i = 0; i < g[0]; i++)
      for (int j = 0; j < g[1]; j++)
        for (int k = 0; k < g[2]; k++)
          G(v, i, j, k) = (G(u, i, j, k) + G(u, i - 1, j, k) + G(u, i + 1, j, k) + G(u, i, j - 1, k) +
                           G(u, i, j + 1, k) + G(u, i, j, k - 1) + G(u, i, j, k + 1)) /
                          7.0;
    double* t = u;
    u = v, v = t;
  }
#undef G
  free(v);
  return u;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int n, iterations, warmup;
  proxy_arguments(argc, argv, &n, &iterations, &warmup);
  const int all = iterations + warmup;
  int dims[3] = {0, 0, 0}, periods[3] = {1, 1, 1}, coords[3];
  MPI_Dims_create(size, 3, dims);
  MPI_Comm cart;
  MPI_Cart_create(MPI_COMM_WORLD, 3, dims, periods, 0, &cart);
  MPI_Comm_rank(cart, &rank);
  MPI_Cart_coords(cart, rank, 3, coords);
  int peer[6];  /* the neighbour in direction d */
  for (int axis = 0; axis < 3; axis++) MPI_Cart_shift(cart, axis, 1, &peer[2 * axis], &peer[2 * axis + 1]);

  const size_t points = (size_t)(n + 2) * (n + 2) * (n + 2), face_points = (size_t)n * n;
  double *u = calloc(points, sizeof(double)), *v = calloc(points, sizeof(double));
  double *out = malloc(6 * face_points * sizeof(double)), *in = malloc(6 * face_points * sizeof(double));
  double* times = malloc(all * sizeof(double));
  for (int i = 1; i <= n; i++)
    for (int j = 1; j <= n; j++)
      for (int k = 1; k <= n; k++)
        AT(u, n, i, j, k) = start_value(coords[0] * n + i - 1, coords[1] * n + j - 1, coords[2] * n + k - 1);

  struct rusage r0, r1;
  double phase[4] = {0, 0, 0, 0};  /* post, interior, wait, boundary: seconds over the timed iterations */
  for (int it = 0; it < all; it++) {
    if (it == warmup) timing_starts(cart, &r0);
    const double t0 = MPI_Wtime();
    MPI_Request req[12];
    for (int d = 0; d < 6; d++) {
      face(u, n, d, out + d * face_points, 1, 0);
      /* What arrives into halo d came from neighbour d, which sent it as its face d ^ 1. */
      MPI_Irecv(in + d * face_points, (int)face_points, MPI_DOUBLE, peer[d], d ^ 1, cart, &req[d]);
    }
    for (int d = 0; d < 6; d++) MPI_Isend(out + d * face_points, (int)face_points, MPI_DOUBLE, peer[d], d, cart, &req[6 + d]);
    const double t1 = MPI_Wtime();
    for (int i = 2; i < n; i++)
      for (int j = 2; j < n; j++)
        for (int k = 2; k < n; k++) AT(v, n, i, j, k) = update(u, n, i, j, k);
    const double t2 = MPI_Wtime();
    MPI_Status st[12];
    MPI_Waitall(12, req, st);
    const double t3 = MPI_Wtime();
    for (int d = 0; d < 6; d++) face(u, n, d, in + d * face_points, 0, 1);
    for (int i = 1; i <= n; i++)
      for (int j = 1; j <= n; j++)
        for (int k = 1; k <= n; k++)
          if (i == 1 || i == n || j == 1 || j == n || k == 1 || k == n) AT(v, n, i, j, k) = update(u, n, i, j, k);
    double* t = u;
    u = v, v = t;
    times[it] = MPI_Wtime() - t0;
    if (it >= warmup) {
      const double t[5] = {t0, t1, t2, t3, t0 + times[it]};
      for (int p = 0; p < 4; p++) phase[p] += t[p + 1] - t[p];
    }
  }
  getrusage(RUSAGE_SELF, &r1);
  const struct summary sum = summarize(cart, times, warmup, iterations, cpu_seconds(&r0, &r1), phase, 4);

  /* The check: every rank's interior to rank 0, against one process's run over the whole grid. */
  double* mine = malloc((size_t)n * n * n * sizeof(double));
  size_t m = 0;
  for (int i = 1; i <= n; i++)
    for (int j = 1; j <= n; j++)
      for (int k = 1; k <= n; k++) mine[m++] = AT(u, n, i, j, k);
  double* gathered = rank == 0 ? malloc((size_t)size * n * n * n * sizeof(double)) : NULL;
  int* all_coords = rank == 0 ? malloc(3 * size * sizeof(int)) : NULL;
  MPI_Gather(mine, n * n * n, MPI_DOUBLE, gathered, n * n * n, MPI_DOUBLE, 0, cart);
  MPI_Gather(coords, 3, MPI_INT, all_coords, 3, MPI_INT, 0, cart);
  if (rank == 0) {
    double* want = serial(n, dims, all);
    double worst = 0;
    for (int r = 0; r < size; r++) {
      const int* c = all_coords + 3 * r;
      size_t at = (size_t)r * n * n * n;
      for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
          for (int k = 0; k < n; k++) {
            const size_t g = ((size_t)(c[0] * n + i) * dims[1] * n + c[1] * n + j) * dims[2] * n + c[2] * n + k;
            worst = fmax(worst, fabs(gathered[at++] - want[g]));
          }
    }
    char check[96];
    if (worst <= 1e-12) snprintf(check, sizeof check, "ok");
    else snprintf(check, sizeof check, "field differs from one process's by up to %.3g", worst);
    printf("{\"proxy\": \"stencil\", \"n\": %d, \"np\": %d, \"dims\": [%d, %d, %d], \"iterations\": %d, "
           "\"p50_us\": %.3f, \"p90_us\": %.3f, \"rank_cpu_us\": %.3f, \"post_us\": %.3f, \"interior_us\": %.3f, "
           "\"wait_us\": %.3f, \"boundary_us\": %.3f, \"halo_bytes\": %zu, \"check\": \"%s\"}\n",
           n, size, dims[0], dims[1], dims[2], iterations, sum.p50_us, sum.p90_us, sum.cpu_us, phase[0], phase[1],
           phase[2], phase[3], 6 * face_points * sizeof(double), check);
    free(want);
  }
  free(u), free(v), free(out), free(in), free(times), free(mine), free(gathered), free(all_coords);
  MPI_Comm_free(&cart);
  MPI_Finalize();
  return 0;
}
