/* The CG proxy of `outboard bench mpi-apps` (issue C2; PETSc's KSPPIPECG pattern): conjugate
 * gradients on the 7-point 3D Laplacian (zero outside the global grid), decomposed over the ranks
 * (MPI_Cart_create, not periodic: the faces on the grid's edge have MPI_PROC_NULL neighbours),
 * each rank a cube of N^3 points. Pipelined CG (Ghysels and Vanroose): each iteration's two dot
 * products go in one MPI_Iallreduce, overlapped with the next matrix-vector product, whose halo
 * exchange (Irecv/Isend with 6 neighbours) is overlapped with its interior points.
 *
 * Usage: cg N ITERATIONS WARMUP. Runs WARMUP + ITERATIONS iterations (no early stop: every run
 * times the same work) from x = 0 for b = A x*, then the classic CG with blocking allreduces on
 * the same system. Prints one JSON line on rank 0: p50/p90 µs per iteration (the slowest rank's,
 * after warm-up), the ranks' CPU µs per iteration, where an iteration's time goes (the ranks'
 * mean µs: the product with its halo exchange, the wait for the dot products, the vector
 * updates), both solvers' relative residuals ||b - Ax|| / ||b||, recomputed, and "check": "ok"
 * when the pipelined one's is within 10x of the classic one's (or both below 1e-10). */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grid.h"

static int n, peer[6];
static MPI_Comm cart;
static double *send_faces, *recv_faces;

static double laplacian(const double* x, int i, int j, int k) {
  return 6 * AT(x, n, i, j, k) - AT(x, n, i - 1, j, k) - AT(x, n, i + 1, j, k) - AT(x, n, i, j - 1, k) -
         AT(x, n, i, j + 1, k) - AT(x, n, i, j, k - 1) - AT(x, n, i, j, k + 1);
}

/* y = A x over this rank's points, as PETSc's MatMult does it: the halo exchange travels while
 * the points that need no halo are computed, then the boundary layer once the halos are in. */
static void multiply(double* x, double* y) {
  const size_t points = (size_t)n * n;
  MPI_Request req[12];
  for (int d = 0; d < 6; d++) {
    face(x, n, d, send_faces + d * points, 1, 0);
    MPI_Irecv(recv_faces + d * points, (int)points, MPI_DOUBLE, peer[d], d ^ 1, cart, &req[d]);
  }
  for (int d = 0; d < 6; d++) MPI_Isend(send_faces + d * points, (int)points, MPI_DOUBLE, peer[d], d, cart, &req[6 + d]);
  for (int i = 2; i < n; i++)
    for (int j = 2; j < n; j++)
      for (int k = 2; k < n; k++) AT(y, n, i, j, k) = laplacian(x, i, j, k);
  MPI_Status st[12];
  MPI_Waitall(12, req, st);
  for (int d = 0; d < 6; d++)
    if (peer[d] != MPI_PROC_NULL) face(x, n, d, recv_faces + d * points, 0, 1);
  for (int i = 1; i <= n; i++)
    for (int j = 1; j <= n; j++)
      for (int k = 1; k <= n; k++)
        if (i == 1 || i == n || j == 1 || j == n || k == 1 || k == n) AT(y, n, i, j, k) = laplacian(x, i, j, k);
}

static double dot(const double* a, const double* b) {
  double s = 0;
  for (int i = 1; i <= n; i++)
    for (int j = 1; j <= n; j++)
      for (int k = 1; k <= n; k++) s += AT(a, n, i, j, k) * AT(b, n, i, j, k);
  return s;
}

/* ||b - A x|| / ||b||, recomputed. */
static double residual(double* x, const double* b, double* scratch) {
  multiply(x, scratch);
  double local[2] = {0, dot(b, b)}, global[2];
  for (int i = 1; i <= n; i++)
    for (int j = 1; j <= n; j++)
      for (int k = 1; k <= n; k++) {
        const double d = AT(b, n, i, j, k) - AT(scratch, n, i, j, k);
        local[0] += d * d;
      }
  MPI_Allreduce(local, global, 2, MPI_DOUBLE, MPI_SUM, cart);
  return sqrt(global[0] / global[1]);
}

/* a = b + s c over the interior (halos stay zero: the grid's edge reads them). */
static void axpy(double* a, const double* b, double s, const double* c) {
  for (int i = 1; i <= n; i++)
    for (int j = 1; j <= n; j++)
      for (int k = 1; k <= n; k++) AT(a, n, i, j, k) = AT(b, n, i, j, k) + s * AT(c, n, i, j, k);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int iterations, warmup;
  proxy_arguments(argc, argv, &n, &iterations, &warmup);
  const int all = iterations + warmup;
  int dims[3] = {0, 0, 0}, periods[3] = {0, 0, 0}, coords[3];
  MPI_Dims_create(size, 3, dims);
  MPI_Cart_create(MPI_COMM_WORLD, 3, dims, periods, 0, &cart);
  MPI_Comm_rank(cart, &rank);
  MPI_Cart_coords(cart, rank, 3, coords);
  for (int axis = 0; axis < 3; axis++) MPI_Cart_shift(cart, axis, 1, &peer[2 * axis], &peer[2 * axis + 1]);

  const size_t points = (size_t)(n + 2) * (n + 2) * (n + 2);
  double* v[10];
  for (int i = 0; i < 10; i++) v[i] = calloc(points, sizeof(double));
  double *x = v[0], *b = v[1], *r = v[2], *w = v[3], *z = v[4], *s = v[5], *p = v[6], *q = v[7], *tmp = v[8];
  send_faces = malloc(6 * (size_t)n * n * sizeof(double));
  recv_faces = malloc(6 * (size_t)n * n * sizeof(double));
  double* times = malloc(all * sizeof(double));
  /* b = A x*, x* a smooth field over the global grid. */
  for (int i = 1; i <= n; i++)
    for (int j = 1; j <= n; j++)
      for (int k = 1; k <= n; k++) {
        const int gi = coords[0] * n + i, gj = coords[1] * n + j, gk = coords[2] * n + k;
        AT(tmp, n, i, j, k) = sin(0.3 * gi) * cos(0.2 * gj) + 0.01 * gk;
      }
  multiply(tmp, b);

  /* Pipelined CG from x = 0: r = b, w = A r. */
  memcpy(r, b, points * sizeof(double));
  multiply(r, w);
  double gamma_old = 1, alpha_old = 1, phase[3] = {0, 0, 0};
  struct rusage r0, r1;
  for (int it = 0; it < all; it++) {
    if (it == warmup) timing_starts(cart, &r0);
    const double t0 = MPI_Wtime();
    double local[2] = {dot(r, r), dot(w, r)}, global[2];
    MPI_Request req;
    MPI_Iallreduce(local, global, 2, MPI_DOUBLE, MPI_SUM, cart, &req);
    multiply(w, q);  /* n = A w, while the dot products travel */
    const double t1 = MPI_Wtime();
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    const double t2 = MPI_Wtime();
    const double gamma = global[0], delta = global[1];
    const double beta = it ? gamma / gamma_old : 0;
    const double alpha = it ? gamma / (delta - beta * gamma / alpha_old) : gamma / delta;
    axpy(z, q, beta, z);
    axpy(s, w, beta, s);
    axpy(p, r, beta, p);
    axpy(x, x, alpha, p);
    axpy(r, r, -alpha, s);
    axpy(w, w, -alpha, z);
    gamma_old = gamma, alpha_old = alpha;
    times[it] = MPI_Wtime() - t0;
    if (it >= warmup) {
      phase[0] += t1 - t0, phase[1] += t2 - t1, phase[2] += t0 + times[it] - t2;
    }
  }
  getrusage(RUSAGE_SELF, &r1);
  const double pipelined = residual(x, b, tmp);

  /* The classic CG with blocking allreduces, as many iterations, on the same system. */
  memset(x, 0, points * sizeof(double));
  memcpy(r, b, points * sizeof(double));
  memcpy(p, b, points * sizeof(double));
  double rr_local = dot(r, r), rr;
  MPI_Allreduce(&rr_local, &rr, 1, MPI_DOUBLE, MPI_SUM, cart);
  for (int it = 0; it < all && rr > 0; it++) {
    multiply(p, q);
    double pq_local = dot(p, q), pq;
    MPI_Allreduce(&pq_local, &pq, 1, MPI_DOUBLE, MPI_SUM, cart);
    const double alpha = rr / pq;
    axpy(x, x, alpha, p);
    axpy(r, r, -alpha, q);
    rr_local = dot(r, r);
    double rr_new;
    MPI_Allreduce(&rr_local, &rr_new, 1, MPI_DOUBLE, MPI_SUM, cart);
    axpy(p, r, rr_new / rr, p);
    rr = rr_new;
  }
  const double classic = residual(x, b, tmp);

  const struct summary sum = summarize(cart, times, warmup, iterations, cpu_seconds(&r0, &r1), phase, 3);
  if (rank == 0) {
    const int ok = !isnan(pipelined) && (pipelined <= 10 * classic || (pipelined < 1e-10 && classic < 1e-10));
    char check[128];
    if (ok) snprintf(check, sizeof check, "ok");
    else snprintf(check, sizeof check, "pipelined CG's residual %.3g, the classic one's %.3g", pipelined, classic);
    printf("{\"proxy\": \"cg\", \"n\": %d, \"np\": %d, \"dims\": [%d, %d, %d], \"iterations\": %d, \"p50_us\": %.3f, "
           "\"p90_us\": %.3f, \"rank_cpu_us\": %.3f, \"multiply_us\": %.3f, \"wait_us\": %.3f, \"update_us\": %.3f, "
           "\"residual\": %.3g, \"classic_residual\": %.3g, \"halo_bytes\": %zu, \"check\": \"%s\"}\n",
           n, size, dims[0], dims[1], dims[2], iterations, sum.p50_us, sum.p90_us, sum.cpu_us, phase[0], phase[1],
           phase[2], pipelined, classic, 6 * (size_t)n * n * sizeof(double), check);
  }
  for (int i = 0; i < 10; i++) free(v[i]);
  free(send_faces), free(recv_faces), free(times);
  MPI_Comm_free(&cart);
  MPI_Finalize();
  return 0;
}
