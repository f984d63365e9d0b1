/* The distributed 3D FFT proxy of `outboard bench mpi-apps` (issue C2; P3DFFT's pattern): a
 * forward complex 3D FFT of an N^3 grid in pencils over a P1 x P2 grid of ranks (MPI_Dims_create,
 * MPI_Cart_create, MPI_Cart_sub), FFTW on the local pencils. Each iteration:
 *   x-pencils: FFT along x, a batch of z-planes at a time, each batch's transpose to y-pencils
 *     (MPI_Ialltoall among the P1 ranks of a row) posted as soon as it is packed, so it travels
 *     while the next batch's FFTs run;
 *   y-pencils: FFT along y, a batch of x-planes at a time, each batch's transpose to z-pencils
 *     (MPI_Ialltoall among the P2 ranks of a column) posted likewise; then, batch by batch as
 *     they arrive, FFT along z.
 * The input stays (the first FFTs are out of place), so every iteration does the same work.
 *
 * Usage: fft N ITERATIONS WARMUP, N the global grid's side, a multiple of P1 and P2. Prints one
 * JSON line on rank 0: p50/p90 µs per iteration (the slowest rank's, after warm-up), the ranks'
 * CPU µs per iteration, where an iteration's time goes (the ranks' mean µs: FFTs with packing
 * and unpacking, posting the transposes, waiting for them), the bytes a rank sends per
 * iteration, and "check": "ok" when the last iteration's spectrum equals one process's FFTW 3D
 * transform of the same grid (largest difference within 1e-9 of the largest magnitude). */
#include <complex.h> /* before fftw3.h: fftw_complex is then C99's double complex */
#include <fftw3.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "grid.h"

typedef double complex cplx;

/* The grid's value at (x, y, z): pseudo-random, so that a misplaced block shows in the spectrum. */
static cplx start_value(int x, int y, int z) {
  uint64_t h = ((uint64_t)x * 73856093u) ^ ((uint64_t)y * 19349663u) ^ ((uint64_t)z * 83492791u);
  h ^= h >> 33, h *= 0xff51afd7ed558ccdull, h ^= h >> 33;
  return (double)(h & 0xffff) / 65536.0 - 0.5 + I * ((double)((h >> 16) & 0xffff) / 65536.0 - 0.5);
}

/* The most batches (at most 4) that split `m` planes evenly. */
static int batches_of(int m) {
  int b = 4;
  while (m % b) b--;
  return b;
}

/* `howmany` contiguous transforms of length n, from `in` to `out` (in place when equal). */
static fftw_plan plan_lines(int n, int howmany, cplx* in, cplx* out) {
  return fftw_plan_many_dft(1, &n, howmany, in, NULL, 1, n, out, NULL, 1, n, FFTW_FORWARD, FFTW_ESTIMATE);
}

/* A transpose's send side: for each of `parts` ranks in turn, its block (the part'th of g / parts
 * points) of each of `rows` rows of g points. */
static void pack(const cplx* from, int rows, int g, int parts, cplx* to) {
  const int width = g / parts;
  for (int j = 0; j < parts; j++)
    for (int r = 0; r < rows; r++)
      for (int e = 0; e < width; e++) *to++ = from[(size_t)r * g + j * width + e];
}

/* A transpose's receive side: each of `parts` ranks' block, [na][nb][nc], into `to` at
 * a * sa + c * sc + i * nb + b for rank i: the nb points of every rank side by side, contiguous. */
static void unpack(const cplx* from, int parts, int na, int nb, int nc, size_t sa, size_t sc, cplx* to) {
  for (int i = 0; i < parts; i++)
    for (int a = 0; a < na; a++)
      for (int b = 0; b < nb; b++)
        for (int c = 0; c < nc; c++) to[a * sa + c * sc + (size_t)i * nb + b] = *from++;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int g, iterations, warmup;
  proxy_arguments(argc, argv, &g, &iterations, &warmup);
  const int all = iterations + warmup;
  int dims[2] = {0, 0}, periods[2] = {0, 0}, coords[2];
  MPI_Dims_create(size, 2, dims);
  if (g % dims[0] || g % dims[1]) {
    char why[128];
    snprintf(why, sizeof why, "fft: N=%d must be a multiple of the rank grid's sides %d and %d", g, dims[0], dims[1]);
    proxy_exit(why);
  }
  MPI_Comm cart, row, col;
  MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
  MPI_Comm_rank(cart, &rank);
  MPI_Cart_coords(cart, rank, 2, coords);
  MPI_Cart_sub(cart, (int[]){1, 0}, &row); /* the P1 ranks that share this rank's z-block */
  MPI_Cart_sub(cart, (int[]){0, 1}, &col); /* the P2 ranks that share its x-block, after the first transpose */
  const int p1 = dims[0], p2 = dims[1];
  /* x-pencils: [z: nz][y: ny][x: g]; y-pencils: [x: ny][z: nz][y: g]; z-pencils: [x: ny][y: my][z: g]. */
  const int ny = g / p1, nz = g / p2, my = g / p2;
  const size_t local = (size_t)g * ny * nz;
  cplx *in = fftw_malloc(local * sizeof(cplx)), *a = fftw_malloc(local * sizeof(cplx));
  cplx *ypen = fftw_malloc(local * sizeof(cplx)), *zpen = fftw_malloc(local * sizeof(cplx));
  cplx *send = fftw_malloc(local * sizeof(cplx)), *recv = fftw_malloc(local * sizeof(cplx));
  for (int z = 0; z < nz; z++)
    for (int y = 0; y < ny; y++)
      for (int x = 0; x < g; x++) in[((size_t)z * ny + y) * g + x] = start_value(x, coords[0] * ny + y, coords[1] * nz + z);

  const int b1 = batches_of(nz), zb = nz / b1, b2 = batches_of(ny), xb = ny / b2;
  const size_t chunk1 = (size_t)zb * ny * g, chunk2 = (size_t)xb * nz * g; /* a batch's points */
  fftw_plan* px = malloc(b1 * sizeof(fftw_plan));
  fftw_plan *py = malloc(b2 * sizeof(fftw_plan)), *pz = malloc(b2 * sizeof(fftw_plan));
  for (int b = 0; b < b1; b++) px[b] = plan_lines(g, zb * ny, in + b * chunk1, a + b * chunk1);
  for (int b = 0; b < b2; b++) {
    py[b] = plan_lines(g, xb * nz, ypen + b * chunk2, ypen + b * chunk2);
    pz[b] = plan_lines(g, xb * my, zpen + b * chunk2, zpen + b * chunk2);
  }
  MPI_Request* req = malloc((b1 > b2 ? b1 : b2) * sizeof(MPI_Request));
  double* times = malloc(all * sizeof(double));
  double phase[3] = {0, 0, 0}; /* FFTs and packing, posting, waiting: seconds over the timed iterations */
  struct rusage r0, r1;
  for (int it = 0; it < all; it++) {
    if (it == warmup) timing_starts(cart, &r0);
    const double t0 = MPI_Wtime();
    double post = 0, wait = 0, t;
    /* x-pencils to y-pencils: rows of x are [z][y]; what arrives from row rank i holds its y-block. */
    const int block1 = zb * ny * ny;
    for (int b = 0; b < b1; b++) {
      fftw_execute(px[b]);
      pack(a + b * chunk1, zb * ny, g, p1, send + b * chunk1);
      t = MPI_Wtime();
      MPI_Ialltoall(send + b * chunk1, 2 * block1, MPI_DOUBLE, recv + b * chunk1, 2 * block1, MPI_DOUBLE, row, &req[b]);
      post += MPI_Wtime() - t;
    }
    for (int b = 0; b < b1; b++) {
      t = MPI_Wtime();
      MPI_Wait(&req[b], MPI_STATUS_IGNORE);
      wait += MPI_Wtime() - t;
      /* [z][y][x] blocks into [x][z][y]: z at stride g, x at stride nz * g */
      unpack(recv + b * chunk1, p1, zb, ny, ny, g, (size_t)nz * g, ypen + (size_t)b * zb * g);
    }
    /* y-pencils to z-pencils: rows of y are [x][z]; what arrives from column rank i holds its z-block. */
    const int block2 = xb * nz * my;
    for (int b = 0; b < b2; b++) {
      fftw_execute(py[b]);
      pack(ypen + b * chunk2, xb * nz, g, p2, send + b * chunk2);
      t = MPI_Wtime();
      MPI_Ialltoall(send + b * chunk2, 2 * block2, MPI_DOUBLE, recv + b * chunk2, 2 * block2, MPI_DOUBLE, col, &req[b]);
      post += MPI_Wtime() - t;
    }
    for (int b = 0; b < b2; b++) {
      t = MPI_Wtime();
      MPI_Wait(&req[b], MPI_STATUS_IGNORE);
      wait += MPI_Wtime() - t;
      /* [x][z][y] blocks into [x][y][z]: x at stride my * g, y at stride g */
      unpack(recv + b * chunk2, p2, xb, nz, my, (size_t)my * g, g, zpen + b * chunk2);
      fftw_execute(pz[b]);
    }
    times[it] = MPI_Wtime() - t0;
    if (it >= warmup) phase[0] += times[it] - post - wait, phase[1] += post, phase[2] += wait;
  }
  getrusage(RUSAGE_SELF, &r1);
  const struct summary sum = summarize(cart, times, warmup, iterations, cpu_seconds(&r0, &r1), phase, 3);

  /* The check: one process's 3D FFT of the whole grid ([z][y][x]), against this rank's z-pencils. */
  const size_t whole = (size_t)g * g * g;
  cplx* want = fftw_malloc(whole * sizeof(cplx));
  fftw_plan p3 = fftw_plan_dft_3d(g, g, g, want, want, FFTW_FORWARD, FFTW_ESTIMATE);
  for (int z = 0; z < g; z++)
    for (int y = 0; y < g; y++)
      for (int x = 0; x < g; x++) want[((size_t)z * g + y) * g + x] = start_value(x, y, z);
  fftw_execute(p3);
  double worst[2] = {0, 0}; /* the largest difference, the largest magnitude */
  for (int x = 0; x < ny; x++)
    for (int y = 0; y < my; y++)
      for (int z = 0; z < g; z++) {
        const cplx w = want[((size_t)z * g + coords[1] * my + y) * g + coords[0] * ny + x];
        worst[0] = fmax(worst[0], cabs(zpen[((size_t)x * my + y) * g + z] - w));
        worst[1] = fmax(worst[1], cabs(w));
      }
  MPI_Allreduce(MPI_IN_PLACE, worst, 2, MPI_DOUBLE, MPI_MAX, cart);
  if (rank == 0) {
    char check[96];
    if (worst[0] <= 1e-9 * worst[1]) snprintf(check, sizeof check, "ok");
    else snprintf(check, sizeof check, "spectrum differs from one process's by up to %.3g of %.3g", worst[0], worst[1]);
    printf("{\"proxy\": \"fft\", \"n\": %d, \"np\": %d, \"dims\": [%d, %d], \"batches\": [%d, %d], \"iterations\": %d, "
           "\"p50_us\": %.3f, \"p90_us\": %.3f, \"rank_cpu_us\": %.3f, \"fft_us\": %.3f, \"ialltoall_us\": %.3f, "
           "\"wait_us\": %.3f, \"transpose_bytes\": %zu, \"check\": \"%s\"}\n",
           g, size, p1, p2, b1, b2, iterations, sum.p50_us, sum.p90_us, sum.cpu_us, phase[0], phase[1], phase[2],
           2 * local * sizeof(cplx), check);
  }
  for (int b = 0; b < b1; b++) fftw_destroy_plan(px[b]);
  for (int b = 0; b < b2; b++) fftw_destroy_plan(py[b]), fftw_destroy_plan(pz[b]);
  fftw_destroy_plan(p3);
  fftw_free(in), fftw_free(a), fftw_free(ypen), fftw_free(zpen), fftw_free(send), fftw_free(recv), fftw_free(want);
  free(px), free(py), free(pz), free(req), free(times);
  MPI_Comm_free(&row), MPI_Comm_free(&col), MPI_Comm_free(&cart);
  MPI_Finalize();
  return 0;
}
