/* Point-to-point as an unmodified MPI program uses it, each result checked: a ring of
 * Isend/Irecv, MPI_ANY_SOURCE from every other rank (every message exactly once, each sender's in
 * the order sent), MPI_ANY_TAG with the status's tag and MPI_Get_count, blocking sends both ways
 * before either receive (buffered by the library, or here by the agent), Ssend, Sendrecv and
 * Sendrecv_replace around the ring, Probe then a receive of the probed size, a non-contiguous
 * datatype, MPI_PROC_NULL, a cancelled receive, point-to-point beside a collective in one
 * Waitall, persistent requests (started round after round, completed by every completion call,
 * cancelled and started again, freed), matched probes (a claimed message is the one its
 * MPI_Mrecv gets, whatever receive comes between), and a flood of messages sent before their receives are
 * posted.
 *
 * Usage: p2p [flood_messages] (default 64; each 64 KiB). Prints "ok p2p" on rank 0.
 * p2p slow: rank 0 waits for a message rank 1 sends only after 20 s (the test kills the agent
 * meanwhile); errors return, so rank 0 says what MPI_Wait returned and exits 3.
 * p2p unmatched: rank 0 posts a receive nobody sends to and calls MPI_Finalize (an erroneous
 * program: it must end, saying so, not hang). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(cond, ...)                                  \
  do {                                                    \
    if (!(cond)) {                                        \
      fprintf(stderr, "rank %d: check failed: ", rank);  \
      fprintf(stderr, __VA_ARGS__);                       \
      fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);  \
      MPI_Abort(MPI_COMM_WORLD, 1);                       \
    }                                                     \
  } while (0)

static int rank, size;

static int value(int from, int to, int seq, int i) { return from * 1000003 + to * 1009 + seq * 31 + i; }

static void ring(MPI_Comm comm) {
  int me, n;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_size(comm, &n);
  const int right = (me + 1) % n, left = (me + n - 1) % n, count = 1000;
  int* out = malloc(sizeof(int) * count);
  int* in = malloc(sizeof(int) * count);
  for (int round = 0; round < 5; round++) {
    for (int i = 0; i < count; i++) out[i] = value(me, right, round, i), in[i] = -1;
    MPI_Request req[2];
    MPI_Irecv(in, count, MPI_INT, left, round, comm, &req[0]);
    MPI_Isend(out, count, MPI_INT, right, round, comm, &req[1]);
    MPI_Status st[2];
    MPI_Waitall(2, req, st);
    int got = 0;
    MPI_Get_count(&st[0], MPI_INT, &got);
    CHECK(st[0].MPI_SOURCE == left && st[0].MPI_TAG == round && got == count, "ring status %d %d %d",
          st[0].MPI_SOURCE, st[0].MPI_TAG, got);
    for (int i = 0; i < count; i++) CHECK(in[i] == value(left, me, round, i), "ring data at %d", i);
  }
  free(out);
  free(in);
}

/* Every other rank sends rank 0 `k` messages; rank 0 takes them with MPI_ANY_SOURCE. */
static void any_source(void) {
  const int k = 20;
  if (rank != 0) {
    for (int s = 0; s < k; s++) {
      int msg[2] = {rank, s};
      MPI_Send(msg, 2, MPI_INT, 0, 11, MPI_COMM_WORLD);
    }
    return;
  }
  int* next = calloc(size, sizeof(int));
  for (int m = 0; m < k * (size - 1); m++) {
    int msg[2];
    MPI_Status st;
    MPI_Recv(msg, 2, MPI_INT, MPI_ANY_SOURCE, 11, MPI_COMM_WORLD, &st);
    CHECK(st.MPI_SOURCE == msg[0] && msg[0] > 0 && msg[0] < size, "any source %d says %d", st.MPI_SOURCE, msg[0]);
    CHECK(msg[1] == next[msg[0]], "rank %d's message %d came where %d was due", msg[0], msg[1], next[msg[0]]);
    next[msg[0]]++;
  }
  for (int r = 1; r < size; r++) CHECK(next[r] == k, "rank %d: %d messages", r, next[r]);
  free(next);
}

static void any_tag_and_count(void) {
  const int peer = rank ^ 1;
  if (peer >= size) return;
  double out[7] = {1, 2, 3, 4, 5, 6, 7}, in[16];
  MPI_Request r;
  MPI_Isend(out, 3 + rank, MPI_DOUBLE, peer, 40 + rank, MPI_COMM_WORLD, &r);
  MPI_Status st;
  MPI_Recv(in, 16, MPI_DOUBLE, peer, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
  int got = 0;
  MPI_Get_count(&st, MPI_DOUBLE, &got);
  CHECK(st.MPI_TAG == 40 + peer && got == 3 + peer && in[got - 1] == got, "any tag: tag %d, count %d", st.MPI_TAG, got);
  MPI_Wait(&r, MPI_STATUS_IGNORE);
}

/* Both send first, then receive: small messages complete before their receive is posted. */
static void head_to_head(void) {
  const int peer = rank ^ 1;
  if (peer >= size) return;
  int out[64], in[64];
  for (int i = 0; i < 64; i++) out[i] = value(rank, peer, 0, i);
  MPI_Send(out, 64, MPI_INT, peer, 5, MPI_COMM_WORLD);
  MPI_Recv(in, 64, MPI_INT, peer, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  for (int i = 0; i < 64; i++) CHECK(in[i] == value(peer, rank, 0, i), "head to head at %d", i);
  /* Ssend waits for its receive: the even rank sends first. */
  if (rank % 2 == 0) {
    MPI_Ssend(out, 64, MPI_INT, peer, 6, MPI_COMM_WORLD);
    MPI_Recv(in, 64, MPI_INT, peer, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  } else {
    MPI_Recv(in, 64, MPI_INT, peer, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Ssend(out, 64, MPI_INT, peer, 6, MPI_COMM_WORLD);
  }
  for (int i = 0; i < 64; i++) CHECK(in[i] == value(peer, rank, 0, i), "ssend at %d", i);
}

static void sendrecv(void) {
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  long out[100], in[100];
  for (int i = 0; i < 100; i++) out[i] = value(rank, right, 9, i);
  MPI_Status st;
  MPI_Sendrecv(out, 100, MPI_LONG, right, 9, in, 100, MPI_LONG, left, 9, MPI_COMM_WORLD, &st);
  CHECK(st.MPI_SOURCE == left, "sendrecv source %d", st.MPI_SOURCE);
  for (int i = 0; i < 100; i++) CHECK(in[i] == value(left, rank, 9, i), "sendrecv at %d", i);
  MPI_Sendrecv_replace(out, 100, MPI_LONG, right, 10, left, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  for (int i = 0; i < 100; i++) CHECK(out[i] == value(left, rank, 9, i), "sendrecv_replace at %d", i);
}

static void probe(void) {
  if (rank == 1) {
    char text[300];
    for (int i = 0; i < 300; i++) text[i] = (char)('a' + i % 26);
    MPI_Send(text, 257, MPI_CHAR, 0, 77, MPI_COMM_WORLD);
  } else if (rank == 0) {
    MPI_Status st;
    MPI_Probe(MPI_ANY_SOURCE, 77, MPI_COMM_WORLD, &st);
    int n = 0;
    MPI_Get_count(&st, MPI_CHAR, &n);
    CHECK(st.MPI_SOURCE == 1 && n == 257, "probe: source %d, %d chars", st.MPI_SOURCE, n);
    char* text = malloc(n);
    MPI_Recv(text, n, MPI_CHAR, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int i = 0; i < n; i++) CHECK(text[i] == (char)('a' + i % 26), "probed message at %d", i);
    free(text);
    int flag = 1;
    MPI_Iprobe(1, 77, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    CHECK(!flag, "iprobe found a message already received");
  }
}

/* Every other element of a 2 x 10 array goes as a vector type and arrives packed. */
static void noncontiguous(void) {
  const int peer = rank ^ 1;
  if (peer >= size) return;
  MPI_Datatype every_other;
  MPI_Type_vector(10, 1, 2, MPI_INT, &every_other);
  MPI_Type_commit(&every_other);
  int out[20], in[10], back[20];
  for (int i = 0; i < 20; i++) out[i] = value(rank, peer, 3, i), back[i] = -1;
  MPI_Request r[2];
  MPI_Irecv(in, 10, MPI_INT, peer, 3, MPI_COMM_WORLD, &r[0]);
  MPI_Isend(out, 1, every_other, peer, 3, MPI_COMM_WORLD, &r[1]);
  MPI_Status st[2];
  MPI_Waitall(2, r, st);
  for (int i = 0; i < 10; i++) CHECK(in[i] == value(peer, rank, 3, 2 * i), "vector send at %d", i);
  /* and back into the vector's slots */
  MPI_Irecv(back, 1, every_other, peer, 4, MPI_COMM_WORLD, &r[0]);
  MPI_Isend(in, 10, MPI_INT, peer, 4, MPI_COMM_WORLD, &r[1]);
  MPI_Waitall(2, r, st);
  int elements = 0;
  MPI_Get_elements(&st[0], MPI_INT, &elements);
  CHECK(elements == 10, "vector receive: %d elements", elements);
  for (int i = 0; i < 20; i++)
    CHECK(back[i] == (i % 2 ? -1 : value(rank, peer, 3, i)), "vector receive at %d: %d", i, back[i]);
  MPI_Type_free(&every_other);
}

static void proc_null_and_cancel(void) {
  int x = 1;
  MPI_Status st;
  MPI_Send(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD);
  MPI_Recv(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st);
  CHECK(st.MPI_SOURCE == MPI_PROC_NULL, "proc null source %d", st.MPI_SOURCE);
  MPI_Request r;
  MPI_Irecv(&x, 1, MPI_INT, MPI_ANY_SOURCE, 999, MPI_COMM_WORLD, &r);
  MPI_Cancel(&r);
  MPI_Wait(&r, &st);
  int cancelled = 0;
  MPI_Test_cancelled(&st, &cancelled);
  CHECK(cancelled, "an unmatched receive was not cancelled");
}

/* Point-to-point and a collective complete in one Waitall. */
static void mixed(void) {
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  int* a2a_out = malloc(sizeof(int) * size);
  int* a2a_in = malloc(sizeof(int) * size);
  for (int i = 0; i < size; i++) a2a_out[i] = value(rank, i, 1, 0);
  int out = value(rank, right, 2, 0), in = -1;
  MPI_Request r[3];
  MPI_Irecv(&in, 1, MPI_INT, left, 2, MPI_COMM_WORLD, &r[0]);
  MPI_Ialltoall(a2a_out, 1, MPI_INT, a2a_in, 1, MPI_INT, MPI_COMM_WORLD, &r[1]);
  MPI_Isend(&out, 1, MPI_INT, right, 2, MPI_COMM_WORLD, &r[2]);
  MPI_Status st[3];
  MPI_Waitall(3, r, st);
  CHECK(in == value(left, rank, 2, 0), "mixed point-to-point");
  for (int i = 0; i < size; i++) CHECK(a2a_in[i] == value(i, rank, 1, 0), "mixed alltoall from %d", i);
  free(a2a_out);
  free(a2a_in);
}

/* A ring of persistent requests, as a halo exchange sets them up once: each round's send carries
 * what the buffer holds at its start, each round completes by another completion call, a request
 * never started sits inactive in the arrays, and a vector datatype freed after the init still
 * shapes every start. Then a persistent receive is cancelled, started again and matched, and one
 * MPI keeps (from MPI_PROC_NULL) goes through the same calls. */
static void persistent(void) {
  const int right = (rank + 1) % size, left = (rank + size - 1) % size, count = 300, rounds = 6;
  int out[300], in[300], idle_buf = 0;
  MPI_Datatype every_third;
  MPI_Type_vector(count / 3, 1, 3, MPI_INT, &every_third);
  MPI_Type_commit(&every_third);
  MPI_Request r[4];
  MPI_Recv_init(in, count, MPI_INT, MPI_ANY_SOURCE, 21, MPI_COMM_WORLD, &r[0]);
  MPI_Send_init(out, count, MPI_INT, right, 21, MPI_COMM_WORLD, &r[1]);
  MPI_Recv_init(&idle_buf, 1, MPI_INT, left, 22, MPI_COMM_WORLD, &r[2]); /* never started */
  MPI_Send_init(out, 1, every_third, right, 23, MPI_COMM_WORLD, &r[3]);
  MPI_Type_free(&every_third);
  const MPI_Request handles[4] = {r[0], r[1], r[2], r[3]};
  for (int round = 0; round < rounds; round++) {
    for (int i = 0; i < count; i++) out[i] = value(rank, right, round, i), in[i] = -1;
    MPI_Startall(2, r);
    MPI_Status st[3], some[3];
    int flag = 0, index = -1, done = 0, indices[3];
    switch (round % 5) {
      case 0: MPI_Waitall(3, r, st); break;
      case 1:
        MPI_Wait(&r[1], MPI_STATUS_IGNORE);
        MPI_Wait(&r[0], &st[0]);
        break;
      case 2:
        while (!flag) MPI_Testall(2, r, &flag, st);
        break;
      case 3:
        for (int k = 0; k < 2; k++) {
          MPI_Waitany(3, r, &index, &st[2]);
          CHECK(index == 0 || index == 1, "waitany index %d", index);
          if (index == 0) st[0] = st[2];
        }
        MPI_Waitany(3, r, &index, &st[2]);
        CHECK(index == MPI_UNDEFINED, "waitany over inactive requests: index %d", index);
        break;
      case 4:
        while (done < 2) {
          int n = 0;
          MPI_Testsome(3, r, &n, indices, some);
          for (int k = 0; k < n; k++)
            if (indices[k] == 0) st[0] = some[k];
          done += n;
        }
        break;
    }
    for (int k = 0; k < 4; k++) CHECK(r[k] == handles[k], "round %d: persistent request %d changed handle", round, k);
    int got = 0;
    MPI_Get_count(&st[0], MPI_INT, &got);
    CHECK(st[0].MPI_SOURCE == left && st[0].MPI_TAG == 21 && got == count, "round %d: status %d %d %d", round,
          st[0].MPI_SOURCE, st[0].MPI_TAG, got);
    for (int i = 0; i < count; i++) CHECK(in[i] == value(left, rank, round, i), "round %d: data at %d", round, i);
  }
  /* the vector send: every third element of what `out` holds at the start */
  for (int i = 0; i < count; i++) out[i] = value(rank, right, 99, i);
  MPI_Start(&r[3]);
  MPI_Recv(in, count / 3, MPI_INT, left, 23, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  MPI_Wait(&r[3], MPI_STATUS_IGNORE);
  for (int i = 0; i < count / 3; i++) CHECK(in[i] == value(left, rank, 99, 3 * i), "vector start at %d", i);
  /* cancelled while nobody sends, then started again and matched */
  MPI_Status st;
  MPI_Start(&r[2]);
  MPI_Cancel(&r[2]);
  MPI_Wait(&r[2], &st);
  int cancelled = 0;
  MPI_Test_cancelled(&st, &cancelled);
  CHECK(cancelled, "a started persistent receive was not cancelled");
  MPI_Barrier(MPI_COMM_WORLD); /* no rank sends before every cancel is done */
  MPI_Start(&r[2]);
  const int token = value(rank, right, 7, 7);
  MPI_Send(&token, 1, MPI_INT, right, 22, MPI_COMM_WORLD);
  MPI_Wait(&r[2], &st);
  CHECK(idle_buf == value(left, rank, 7, 7) && st.MPI_SOURCE == left, "restarted receive got %d", idle_buf);
  for (int k = 0; k < 4; k++) {
    MPI_Request_free(&r[k]);
    CHECK(r[k] == MPI_REQUEST_NULL, "freed persistent request %d not null", k);
  }
  /* MPI's own persistent request (MPI_PROC_NULL stays with MPI) through the same calls */
  MPI_Request own;
  MPI_Recv_init(in, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &own);
  MPI_Start(&own);
  MPI_Wait(&own, MPI_STATUS_IGNORE); /* (MPICH 4.0's status does not say MPI_PROC_NULL) */
  CHECK(own != MPI_REQUEST_NULL, "persistent MPI_PROC_NULL receive freed by its wait");
  MPI_Request_free(&own);
}

/* Every other rank sends rank 0 three messages of its own size (tag 31), which rank 0 takes by
 * MPI_Mprobe + MPI_Mrecv from any source; then rank 1 sends A and B (tag 32): rank 0 claims A by
 * MPI_Improbe, receives B with an ordinary receive posted after the claim, and only then A. */
static void matched_probe(void) {
  if (rank != 0) {
    int msg[64];
    for (int k = 0; k < 3; k++) {
      for (int i = 0; i < 64; i++) msg[i] = value(rank, 0, k, i);
      MPI_Send(msg, 10 * rank + k, MPI_INT, 0, 31, MPI_COMM_WORLD);
    }
    if (rank == 1) {
      int a = value(1, 0, 5, 0), b = value(1, 0, 6, 0);
      MPI_Send(&a, 1, MPI_INT, 0, 32, MPI_COMM_WORLD);
      MPI_Send(&b, 1, MPI_INT, 0, 32, MPI_COMM_WORLD);
    }
    return;
  }
  int* next = calloc(size, sizeof(int));
  for (int m = 0; m < 3 * (size - 1); m++) {
    MPI_Message message;
    MPI_Status st;
    MPI_Mprobe(MPI_ANY_SOURCE, 31, MPI_COMM_WORLD, &message, &st);
    int n = 0, got = 0;
    MPI_Get_count(&st, MPI_INT, &n);
    const int from = st.MPI_SOURCE, k = next[from]++;
    CHECK(from > 0 && from < size && n == 10 * from + k, "mprobe: %d ints from %d (its message %d)", n, from, k);
    int* in = malloc(sizeof(int) * (n + 1));
    MPI_Mrecv(in, n + 1, MPI_INT, &message, &st);
    MPI_Get_count(&st, MPI_INT, &got);
    CHECK(message == MPI_MESSAGE_NULL && st.MPI_SOURCE == from && st.MPI_TAG == 31 && got == n,
          "mrecv status: source %d, tag %d, %d ints", st.MPI_SOURCE, st.MPI_TAG, got);
    for (int i = 0; i < n; i++) CHECK(in[i] == value(from, 0, k, i), "mrecv from %d at %d", from, i);
    free(in);
  }
  free(next);
  if (size < 2) return;
  MPI_Message a_message;
  MPI_Status st;
  int flag = 0, a = -1, b = -1;
  while (!flag) MPI_Improbe(1, 32, MPI_COMM_WORLD, &flag, &a_message, &st);
  MPI_Recv(&b, 1, MPI_INT, 1, 32, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  MPI_Request r;
  MPI_Imrecv(&a, 1, MPI_INT, &a_message, &r);
  MPI_Wait(&r, &st);
  CHECK(a == value(1, 0, 5, 0) && b == value(1, 0, 6, 0), "claimed message: a %d, b %d", a, b);
}

/* Rank 1 sends rank 0 `n` messages of 64 KiB before rank 0 posts a receive: more than the agent
 * may buffer when the test says so; every one must come, in order. */
static void flood(int n) {
  if (size < 2 || rank > 1) return;
  const int count = 16384;
  int* data = malloc(sizeof(int) * count * n);
  MPI_Request* r = malloc(sizeof(MPI_Request) * n);
  MPI_Status* st = malloc(sizeof(MPI_Status) * n);
  if (rank == 1) {
    for (int m = 0; m < n; m++) {
      for (int i = 0; i < count; i++) data[m * count + i] = value(1, 0, m, i);
      MPI_Isend(data + m * count, count, MPI_INT, 0, 8, MPI_COMM_WORLD, &r[m]);
    }
    MPI_Send(&n, 1, MPI_INT, 0, 9, MPI_COMM_WORLD);  /* all posted */
    MPI_Waitall(n, r, st);
  } else {
    int posted = 0;
    MPI_Recv(&posted, 1, MPI_INT, 1, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int m = 0; m < n; m++) {
      MPI_Recv(data, count, MPI_INT, 1, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      for (int i = 0; i < count; i++) CHECK(data[i] == value(1, 0, m, i), "flood message %d at %d", m, i);
    }
  }
  free(data);
  free(r);
  free(st);
}

static int slow(void) {
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  int x = 0;
  if (rank == 1) {
    printf("rank 1: sending in 20 s\n");
    fflush(stdout);
    sleep(20);
    MPI_Send(&x, 1, MPI_INT, 0, 0, MPI_COMM_WORLD);
  } else if (rank == 0) {
    MPI_Request r;
    MPI_Irecv(&x, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, &r);
    printf("rank 0: waiting\n");
    fflush(stdout);
    if (MPI_Wait(&r, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      printf("rank 0: MPI_Wait failed\n");
      fflush(stdout);
      _exit(3);
    }
  }
  MPI_Finalize();
  return 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc > 1 && strcmp(argv[1], "slow") == 0) return slow();
  if (argc > 1 && strcmp(argv[1], "unmatched") == 0) {
    int x = 0;
    MPI_Request r;
    if (rank == 0) MPI_Irecv(&x, 1, MPI_INT, MPI_ANY_SOURCE, 123, MPI_COMM_WORLD, &r);
    MPI_Finalize();
    return 0;
  }
  const int flood_messages = argc > 1 ? atoi(argv[1]) : 64;
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  ring(MPI_COMM_WORLD);
  ring(dup);
  any_source();
  any_tag_and_count();
  head_to_head();
  sendrecv();
  probe();
  noncontiguous();
  proc_null_and_cancel();
  mixed();
  persistent();
  matched_probe();
  flood(flood_messages);
  MPI_Comm_free(&dup);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) printf("ok p2p\n");
  MPI_Finalize();
  return 0;
}
