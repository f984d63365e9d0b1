/* An unmodified MPI program for the interposer's tests: every collective Outboard may offload,
 * over MPI_COMM_WORLD, a duplicate and a split, seeded random sizes, roots and types, in place and
 * with zero counts, each checked against the MPI library's blocking collective on the same data;
 * then one call of each kind that must pass through (a vector type, an intercommunicator, a
 * communicator from MPI_Comm_create, a user-defined op, a reduction on short), then every
 * completion call over arrays mixing an Ialltoall with point-to-point requests. Prints
 * "ok <rounds> rounds" on rank 0, or names what differed and exits 1.
 * Usage: collectives [rounds]  (default 4); collectives slow|mismatch|many|abort|freed|uneven|repeat:
 * the fault, load and size cases below. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int rank, failures;

static void check(int same, const char* what, const char* comm, int round) {
  if (!same) {
    fprintf(stderr, "rank %d: %s on %s, round %d, differs from the blocking collective\n", rank, what, comm, round);
    failures++;
  }
}

static unsigned next(unsigned* s) { return *s = *s * 1103515245u + 12345u; }

static void fill(void* buf, size_t bytes, int salt) {
  for (size_t i = 0; i < bytes; i++) ((unsigned char*)buf)[i] = (unsigned char)(i * 31 + salt * 7 + rank);
}

static const MPI_Datatype kTypes[] = {MPI_CHAR, MPI_INT, MPI_LONG, MPI_DOUBLE};
static const MPI_Datatype kReduceTypes[] = {MPI_INT, MPI_LONG, MPI_FLOAT, MPI_DOUBLE};
static const MPI_Op kOps[] = {MPI_SUM, MPI_MIN, MPI_MAX, MPI_PROD};

/* Small integers in every reduced type, so each order of a sum or product gives the same bits. */
static void fill_reduce(void* buf, int n, MPI_Datatype t, int salt) {
  for (int i = 0; i < n; i++) {
    int v = (i + salt + rank) % 3 + 1;
    if (t == MPI_INT) ((int*)buf)[i] = v;
    else if (t == MPI_LONG) ((long*)buf)[i] = v;
    else if (t == MPI_FLOAT) ((float*)buf)[i] = (float)v;
    else ((double*)buf)[i] = v;
  }
}

static void round_on(MPI_Comm comm, const char* name, int round, unsigned* seed) {
  int n, me;
  MPI_Comm_size(comm, &n);
  MPI_Comm_rank(comm, &me);
  MPI_Datatype t = kTypes[next(seed) % 4];
  int ts;
  MPI_Type_size(t, &ts);
  int count = round == 0 ? 0 : (int)(next(seed) % 3000); /* round 0: zero counts */
  int in_place = next(seed) % 2, root = (int)(next(seed) % n);
  size_t block = (size_t)count * ts, all = block * n;
  char *send = malloc(all + 1), *recv = malloc(all + 1), *want = malloc(all + 1);
  MPI_Request req[4];
  MPI_Status statuses[4];

  /* Ialltoall (in place every other round) */
  fill(send, all, round);
  memcpy(recv, send, all);
  MPI_Ialltoall(in_place ? MPI_IN_PLACE : send, count, t, recv, count, t, comm, &req[0]);
  MPI_Wait(&req[0], MPI_STATUS_IGNORE);
  MPI_Alltoall(send, count, t, want, count, t, comm);
  check(memcmp(recv, want, all) == 0, "MPI_Ialltoall", name, round);

  /* Ialltoallv: rank-dependent counts, packed send blocks, an element's gap before each received
   * block, which MPI leaves as it was */
  int *sc = malloc(n * sizeof(int)), *sd = malloc(n * sizeof(int)), *rc = malloc(n * sizeof(int)),
      *rd = malloc(n * sizeof(int));
  size_t vbytes = 0;
  for (int p = 0, s = 0, r = 0; p < n; p++) {
    sc[p] = count ? (count + me + p) % count : 0;
    rc[p] = count ? (count + p + me) % count : 0;
    r += count ? 1 : 0;
    sd[p] = s, rd[p] = r, s += sc[p], r += rc[p];
    vbytes = (size_t)r * ts;
  }
  fill(send, all, round + 1);
  fill(recv, all, round + 5);
  memcpy(want, recv, all);
  MPI_Ialltoallv(send, sc, sd, t, recv, rc, rd, t, comm, &req[0]);
  MPI_Alltoallv(send, sc, sd, t, want, rc, rd, t, comm);
  /* Iallgather, Ibcast and Iallreduce in flight together with it */
  char* gathered = malloc(all + 1);
  fill(gathered, all, round + 2);
  if (in_place) memcpy(gathered + me * block, send, block);
  MPI_Iallgather(in_place ? MPI_IN_PLACE : send, count, t, gathered, count, t, comm, &req[1]);
  char* bc = malloc(block + 1);
  fill(bc, block, me == root ? 99 : round);
  MPI_Ibcast(bc, count, t, root, comm, &req[2]);
  MPI_Datatype rt = kReduceTypes[next(seed) % 4];
  MPI_Op op = kOps[next(seed) % 4];
  int rs;
  MPI_Type_size(rt, &rs);
  char *rin = malloc((size_t)count * rs + 1), *rout = malloc((size_t)count * rs + 1),
       *rwant = malloc((size_t)count * rs + 1);
  fill_reduce(rin, count, rt, round);
  memcpy(rout, rin, (size_t)count * rs);
  MPI_Iallreduce(in_place ? MPI_IN_PLACE : rin, rout, count, rt, op, comm, &req[3]);
  int done = 0;
  while (!done) MPI_Testall(4, req, &done, statuses);
  check(memcmp(recv, want, vbytes) == 0, "MPI_Ialltoallv", name, round);
  MPI_Allgather(send, count, t, want, count, t, comm);
  check(memcmp(gathered, want, all) == 0, "MPI_Iallgather", name, round);
  fill(want, block, me == root ? 99 : round);
  MPI_Bcast(want, count, t, root, comm);
  check(memcmp(bc, want, block) == 0, "MPI_Ibcast", name, round);
  MPI_Allreduce(rin, rwant, count, rt, op, comm);
  check(memcmp(rout, rwant, (size_t)count * rs) == 0, "MPI_Iallreduce", name, round);
  free(send), free(recv), free(want), free(sc), free(sd), free(rc), free(rd), free(gathered), free(bc);
  free(rin), free(rout), free(rwant);
}

/* Every completion call over arrays that mix an Ialltoall with ordinary point-to-point requests
 * (a ring exchange): Waitall, Waitany, Waitsome, Testall, Testany, Testsome, Request_get_status. */
static void mixed(void) {
  int n;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const int count = 1000;
  int *send = malloc(count * n * sizeof(int)), *recv = malloc(count * n * sizeof(int)),
      *want = malloc(count * n * sizeof(int));
  for (int call = 0; call < 7; call++) {
    for (int i = 0; i < count * n; i++) send[i] = rank * 1000000 + call * 10000 + i;
    int to = (rank + 1) % n, from = (rank + n - 1) % n, out = rank * 10 + call, in = -1;
    MPI_Request req[3];
    MPI_Status st[3];
    MPI_Irecv(&in, 1, MPI_INT, from, call, MPI_COMM_WORLD, &req[0]);
    MPI_Ialltoall(send, count, MPI_INT, recv, count, MPI_INT, MPI_COMM_WORLD, &req[1]);
    MPI_Isend(&out, 1, MPI_INT, to, call, MPI_COMM_WORLD, &req[2]);
    int done = 0, flag = 0, index, outcount, indices[3];
    switch (call) {
      case 0: MPI_Waitall(3, req, st); break;
      case 1:
        while (done < 3) MPI_Waitany(3, req, &index, &st[0]), done++;
        break;
      case 2:
        while (done < 3) {
          MPI_Waitsome(3, req, &outcount, indices, st);
          if (outcount != MPI_UNDEFINED) done += outcount;
        }
        break;
      case 3:
        while (!flag) MPI_Testall(3, req, &flag, st);
        break;
      case 4:
        while (done < 3) {
          MPI_Testany(3, req, &index, &flag, &st[0]);
          if (flag && index != MPI_UNDEFINED) done++;
        }
        break;
      case 5:
        while (done < 3) {
          MPI_Testsome(3, req, &outcount, indices, st);
          if (outcount != MPI_UNDEFINED) done += outcount;
        }
        break;
      case 6:
        for (int i = 0; i < 3; i++) {
          flag = 0;
          while (!flag) MPI_Request_get_status(req[i], &flag, &st[0]);
          MPI_Wait(&req[i], &st[0]);
        }
        break;
    }
    for (int i = 0; i < 3; i++) check(req[i] == MPI_REQUEST_NULL, "a completion call (request left active)", "world", call);
    MPI_Alltoall(send, count, MPI_INT, want, count, MPI_INT, MPI_COMM_WORLD);
    check(memcmp(recv, want, count * n * sizeof(int)) == 0, "MPI_Ialltoall beside point-to-point", "world", call);
    check(in == from * 10 + call, "a point-to-point message beside MPI_Ialltoall", "world", call);
  }
  free(send), free(recv), free(want);
}

static void user_sum(void* in, void* inout, int* len, MPI_Datatype* t) {
  (void)t;
  for (int i = 0; i < *len; i++) ((int*)inout)[i] += ((int*)in)[i];
}

/* One call of each kind Outboard passes through, checked like the others. */
static void pass_through(void) {
  int n;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Request req;
  /* a vector type: every other int */
  MPI_Datatype every_other;
  MPI_Type_vector(2, 1, 2, MPI_INT, &every_other);
  MPI_Type_commit(&every_other);
  int *send = calloc(4 * n, sizeof(int)), *recv = calloc(4 * n, sizeof(int)), *want = calloc(4 * n, sizeof(int));
  for (int i = 0; i < 4 * n; i++) send[i] = rank * 100 + i;
  MPI_Ialltoall(send, 1, every_other, recv, 1, every_other, MPI_COMM_WORLD, &req);
  MPI_Wait(&req, MPI_STATUS_IGNORE);
  MPI_Alltoall(send, 1, every_other, want, 1, every_other, MPI_COMM_WORLD);
  check(memcmp(recv, want, 4 * n * sizeof(int)) == 0, "MPI_Ialltoall (vector type)", "world", 0);
  MPI_Type_free(&every_other);
  /* a user-defined op */
  MPI_Op op;
  MPI_Op_create(user_sum, 1, &op);
  int one = rank + 1, sum = 0;
  MPI_Iallreduce(&one, &sum, 1, MPI_INT, op, MPI_COMM_WORLD, &req);
  MPI_Wait(&req, MPI_STATUS_IGNORE);
  check(sum == n * (n + 1) / 2, "MPI_Iallreduce (user op)", "world", 0);
  MPI_Op_free(&op);
  /* a communicator made by MPI_Comm_create, which the interposer does not follow */
  MPI_Group group;
  MPI_Comm created;
  MPI_Comm_group(MPI_COMM_WORLD, &group);
  MPI_Comm_create(MPI_COMM_WORLD, group, &created);
  int token = rank == 0 ? 42 : 0;
  MPI_Ibcast(&token, 1, MPI_INT, 0, created, &req);
  MPI_Wait(&req, MPI_STATUS_IGNORE);
  check(token == 42, "MPI_Ibcast (created communicator)", "created", 0);
  MPI_Comm_free(&created);
  MPI_Group_free(&group);
  /* a reduction on short */
  short s = 2, smax = 0;
  MPI_Iallreduce(&s, &smax, 1, MPI_SHORT, MPI_MAX, MPI_COMM_WORLD, &req);
  MPI_Wait(&req, MPI_STATUS_IGNORE);
  check(smax == 2, "MPI_Iallreduce (short)", "world", 0);
  /* an intercommunicator between the even and the odd ranks */
  if (n >= 2) {
    MPI_Comm half, inter;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, rank % 2 ? 0 : 1, 7, &inter);
    int remote;
    MPI_Comm_remote_size(inter, &remote);
    int* got = calloc(remote, sizeof(int));
    MPI_Iallgather(&rank, 1, MPI_INT, got, 1, MPI_INT, inter, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    for (int i = 0; i < remote; i++) check(got[i] % 2 != rank % 2, "MPI_Iallgather (intercommunicator)", "inter", 0);
    free(got);
    MPI_Comm_free(&inter);
    MPI_Comm_free(&half);
  }
  free(send), free(recv), free(want);
}

/* MPI_Wait with errors returned: prints what it said and exits 3 (the job is broken: no
 * MPI_Finalize) when it failed. */
/* Waits, printing what MPI_Wait said if it failed. */
static int wait_says(MPI_Request* req) {
  int rc = MPI_Wait(req, MPI_STATUS_IGNORE);
  if (rc == MPI_SUCCESS) return rc;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  printf("rank %d: MPI_Wait failed: %s\n", rank, text);
  fflush(stdout);
  return rc;
}

static void wait_or_exit(MPI_Request* req) {
  if (wait_says(req) != MPI_SUCCESS) _exit(3);
}

static void errors_return(void) {
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
}

/* "mismatch": an Ialltoallv in which rank 1 expects one int more from rank 0 than rank 0 sends
 * (an erroneous program): every rank's wait fails, naming the two ranks and counts. */
static void mismatch(void) {
  int n;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  errors_return();
  int counts[64], recvcounts[64], displs[64], buf[256] = {0}, out[256];
  for (int i = 0; i < n && i < 64; i++) counts[i] = 2, recvcounts[i] = 2, displs[i] = 3 * i;
  if (rank == 1) recvcounts[0] = 3;
  MPI_Request req;
  MPI_Ialltoallv(buf, counts, displs, MPI_INT, out, recvcounts, displs, MPI_INT, MPI_COMM_WORLD, &req);
  /* Every rank has said so before any exits: the launcher kills the rest when one exits. */
  const int rc = wait_says(&req);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) _exit(3);
}

/* "many": 10^4 Iallreduce + Wait; rank 0 prints its resident memory after 10^3 and after 10^4. */
static long rss_kb(void) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
  if (f) fclose(f);
  return kb;
}

static void many(void) {
  long at_1000 = 0;
  for (int i = 1; i <= 10000; i++) {
    int one = 1, sum = 0;
    MPI_Request req;
    MPI_Iallreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    int n;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    check(sum == n, "MPI_Iallreduce", "world", i);
    if (i == 1000) at_1000 = rss_kb();
    if (rank == 0 && (i == 1000 || i == 10000)) {  /* the test samples the agent's memory as it reads these */
      printf("at %d\n", i);
      fflush(stdout);
    }
  }
  if (rank == 0) printf("rss after 1000: %ld kB, after 10000: %ld kB\n", at_1000, rss_kb());
  fflush(stdout);
  sleep(1); /* the agent's session lives while this rank is connected: time for the last sample */
}

/* "uneven": one Ialltoallv whose sizes differ by rank: rank 0 gives itself 1 MiB, every other block
 * is 4 bytes, so only rank 0's buffers exceed a small OUTBOARD_MPI_STAGING_BYTES. A failed wait
 * (rank 0 could not stage them) is said by every rank before any exits. */
static void uneven(void) {
  errors_return();
  int n;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  int* counts = malloc(4 * sizeof(int) * (size_t)n); /* send counts, send displs; recv the same */
  int *displs = counts + n, total = 0;
  for (int j = 0; j < n; j++) {
    counts[j] = rank == 0 && j == 0 ? 1 << 20 : 4;
    displs[j] = total;
    total += counts[j];
  }
  char *in = malloc((size_t)total), *out = malloc((size_t)total), *want = malloc((size_t)total);
  fill(in, (size_t)total, 1);
  MPI_Request req;
  MPI_Ialltoallv(in, counts, displs, MPI_CHAR, out, counts, displs, MPI_CHAR, MPI_COMM_WORLD, &req);
  const int rc = wait_says(&req);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) _exit(3);
  MPI_Alltoallv(in, counts, displs, MPI_CHAR, want, counts, displs, MPI_CHAR, MPI_COMM_WORLD);
  check(!memcmp(out, want, (size_t)total), "MPI_Ialltoallv of sizes that differ by rank", "world", 0);
  if (rank == 0 && !failures) printf("ok uneven\n");
  free(in);
  free(out);
  free(want);
  free(counts);
}

/* One call of "repeat": each rank gives the next `big` bytes and every other rank 4, filled anew. */
struct ring_call {
  int *counts, *displs; /* send counts and displacements, then receive ones */
  char *in, *out, *want;
};

static void ring_post(struct ring_call* c, int big, int salt, MPI_Request* req) {
  int n;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  c->counts = malloc(4 * sizeof(int) * (size_t)n);
  c->displs = c->counts + 2 * n;
  int sent = 0, got = 0;
  for (int j = 0; j < n; j++) {
    c->counts[j] = j == (rank + 1) % n ? big : 4;
    c->counts[n + j] = j == (rank + n - 1) % n ? big : 4;
    c->displs[j] = sent, c->displs[n + j] = got;
    sent += c->counts[j], got += c->counts[n + j];
  }
  c->in = malloc((size_t)sent), c->out = malloc((size_t)got), c->want = malloc((size_t)got);
  fill(c->in, (size_t)sent, salt);
  MPI_Ialltoallv(c->in, c->counts, c->displs, MPI_CHAR, c->out, c->counts + n, c->displs + n, MPI_CHAR,
                 MPI_COMM_WORLD, req);
}

static void ring_check(struct ring_call* c, int call) {
  int n;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Alltoallv(c->in, c->counts, c->displs, MPI_CHAR, c->want, c->counts + n, c->displs + n, MPI_CHAR,
                MPI_COMM_WORLD);
  check(!memcmp(c->out, c->want, (size_t)(c->displs[2 * n - 1] + c->counts[2 * n - 1])),
        "MPI_Ialltoallv too large for staging", "world", call);
  free(c->in), free(c->out), free(c->want), free(c->counts);
}

/* "repeat": Ialltoallvs too large for a small OUTBOARD_MPI_STAGING_BYTES, of sizes that stay, grow
 * and shrink, each filled anew (a result read from an earlier call's memory differs), then two in
 * flight at once. */
static void repeat(void) {
  static const int kKiB[] = {512, 512, 1024, 512, 1024, 1024, 256, 1024};
  const int calls = (int)(sizeof kKiB / sizeof kKiB[0]);
  struct ring_call c[2];
  MPI_Request req[2];
  for (int i = 0; i < calls; i++) {
    ring_post(&c[0], kKiB[i] << 10, i, &req[0]);
    wait_or_exit(&req[0]);
    ring_check(&c[0], i);
  }
  ring_post(&c[0], 1 << 20, calls, &req[0]);
  ring_post(&c[1], 768 << 10, calls + 1, &req[1]);
  wait_or_exit(&req[1]);
  wait_or_exit(&req[0]);
  ring_check(&c[0], calls);
  ring_check(&c[1], calls + 1);
  if (rank == 0 && !failures) printf("ok repeat\n");
}

/* "abort": rank 0 waits on an Ialltoall that rank 1 never posts: rank 1 calls MPI_Abort(7). */
static void abort_job(void) {
  int n, send[64] = {0}, recv[64];
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (rank == 1) {
    sleep(1);
    MPI_Abort(MPI_COMM_WORLD, 7);
  }
  if (rank != 0) return;
  MPI_Request req;
  MPI_Ialltoall(send, 1, MPI_INT, recv, 1, MPI_INT, MPI_COMM_WORLD, &req);
  MPI_Wait(&req, MPI_STATUS_IGNORE);
}

/* "slow": rank 0 waits on an Ialltoall the other ranks post only after 20 s (the test kills the
 * agent meanwhile); errors return, so rank 0 prints what MPI_Wait said and exits 3. */
static int slow(void) {
  int n;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  errors_return();
  int *send = calloc(n, sizeof(int)), *recv = calloc(n, sizeof(int));
  MPI_Request req;
  if (rank != 0) {
    printf("rank %d: posting in 20 s\n", rank);
    fflush(stdout);
    sleep(20);
  } else {
    printf("rank 0: waiting\n");
    fflush(stdout);
  }
  MPI_Ialltoall(send, 1, MPI_INT, recv, 1, MPI_INT, MPI_COMM_WORLD, &req);
  wait_or_exit(&req);
  free(send), free(recv);
  return 0;
}

/* "freed": the program's bug: rank 0 unmaps its receive buffer before its Ialltoall completes,
 * and only then lets the other ranks post theirs. Rank 0 dies in MPI_Wait (the agent finds the
 * pages gone, or, staged, the result has nowhere to go); the agent must not. */
static void freed(void) {
  int n, token = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const size_t bytes = (size_t)n << 16;
  char* send = calloc(1, bytes);
  void* recv = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  MPI_Request req;
  if (rank != 0) MPI_Recv(&token, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  MPI_Ialltoall(send, 1 << 16, MPI_BYTE, recv, 1 << 16, MPI_BYTE, MPI_COMM_WORLD, &req);
  if (rank == 0) {
    munmap(recv, bytes);
    for (int r = 1; r < n; r++) MPI_Send(&token, 1, MPI_INT, r, 0, MPI_COMM_WORLD);
  }
  MPI_Wait(&req, MPI_STATUS_IGNORE);
  printf("rank %d: waited\n", rank);
  free(send);
}

int main(int argc, char** argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 4;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const char* mode = argc > 1 ? argv[1] : "";
  if (!strcmp(mode, "slow") || !strcmp(mode, "mismatch") || !strcmp(mode, "many") || !strcmp(mode, "abort") ||
      !strcmp(mode, "freed") || !strcmp(mode, "uneven") || !strcmp(mode, "repeat")) {
    if (!strcmp(mode, "slow")) slow();
    else if (!strcmp(mode, "uneven")) uneven();
    else if (!strcmp(mode, "repeat")) repeat();
    else if (!strcmp(mode, "freed")) freed();
    else if (!strcmp(mode, "mismatch")) mismatch();
    else if (!strcmp(mode, "abort")) abort_job();
    else many();
    MPI_Finalize();
    return failures ? 1 : 0;
  }
  MPI_Comm dup, split;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &split);
  const MPI_Comm comms[] = {MPI_COMM_WORLD, dup, split};
  const char* names[] = {"world", "dup", "split"};
  unsigned seed = 12345; /* the same on every rank: sizes, types and roots agree */
  for (int round = 0; round < rounds; round++)
    for (int c = 0; c < 3; c++) {
      unsigned s = seed + (unsigned)(round * 3 + c) * 7919u;
      if (c == 2) s += (unsigned)(rank % 2) * 104729u; /* each half of the split draws its own */
      round_on(comms[c], names[c], round, &s);
    }
  pass_through();
  mixed();
  MPI_Comm_free(&dup);
  MPI_Comm_free(&split);
  int all_failures = 0;
  MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0 && !all_failures) printf("ok %d rounds\n", rounds);
  MPI_Finalize();
  return all_failures ? 1 : 0;
}
