#include "mpi/offload.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "outboard/channel.h"

namespace outboard::mpi {
namespace {

using services::mpi_wire::Post;

constexpr uint64_t kAlign = 64;
// Between two looks at MPI's own progress while a wait has offloaded requests to wait for.
constexpr int64_t kNapMs = 1;

// First-fit offsets in the staging region; collectives finish roughly in order, so the free
// list stays short.
class Arena {
 public:
  void reset(uint64_t size) { free_ = {{0, size}}; }
  std::optional<uint64_t> take(uint64_t bytes) {
    bytes = (bytes + kAlign - 1) / kAlign * kAlign;
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < bytes) continue;
      const uint64_t at = it->first, left = it->second - bytes;
      free_.erase(it);
      if (left) free_[at + bytes] = left;
      return at;
    }
    return std::nullopt;
  }
  void give(uint64_t at, uint64_t bytes) {
    bytes = (bytes + kAlign - 1) / kAlign * kAlign;
    auto next = free_.lower_bound(at);
    if (next != free_.end() && at + bytes == next->first) bytes += next->second, next = free_.erase(next);
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == at) {
        prev->second += bytes;
        return;
      }
    }
    free_[at] = bytes;
  }

 private:
  std::map<uint64_t, uint64_t> free_;  // offset -> bytes
};

struct CommName {
  uint64_t key = 0;  // (number << 32) | the lowest world rank of its members: unique in the job
  uint64_t next_seq = 0;
};

// One offloaded collective, from its post until MPI frees its request and its answer came.
struct Handoff {
  MPI_Request request = MPI_REQUEST_NULL;
  uint64_t staged_at = 0, staged_bytes = 0, output_at = 0, output_bytes = 0;
  void* output = nullptr;
  services::mpi_wire::Coll coll{};  // named in the message when it fails
  uint64_t seq = 0, comm = 0;
  // Written once by the answer's callback, which runs inside the channel's progress (under its
  // lock, not ours: a thread holding ours may be waiting for that one), then `answered` is set.
  std::optional<Status> answer;
  std::atomic<bool> answered{false};
  bool completed = false;        // PMPI_Grequest_complete called
  bool freed = false;            // MPI called free_fn
};

struct Offload {
  std::unique_ptr<Connection> conn;
  Region staging;
  uint8_t* base = nullptr;
  std::vector<uint8_t> descriptor;
  Arena arena;
  uint64_t capacity = 0;
  int keyval = MPI_KEYVAL_INVALID;
  uint64_t next_name = 1;  // 0 is MPI_COMM_WORLD's
  int world_rank = 0;
  int64_t timeout_s = kDefaultCollectiveTimeoutS;
  std::recursive_mutex mu;  // MPI_THREAD_MULTIPLE programs reach us from several threads
  std::unordered_map<Handoff*, std::unique_ptr<Handoff>> ops;
  std::unordered_map<MPI_Request, Handoff*> running;  // posted, not yet completed in MPI
  std::atomic<uint64_t> answers{0};                  // answers come so far: what a nap waits to change
};

Offload* g_offload = nullptr;  // kept after offload_stop: MPI may still free requests
bool g_on = false;

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (*end) {
    std::fprintf(stderr, "outboard-mpi: %s=%s is not a number; using %llu\n", name, v,
                 static_cast<unsigned long long>(fallback));
    return fallback;
  }
  return n;
}

int delete_name(MPI_Comm, int, void* value, void*) {
  delete static_cast<CommName*>(value);
  return MPI_SUCCESS;
}

CommName* name_of(MPI_Comm comm) {
  void* value = nullptr;
  int found = 0;
  if (PMPI_Comm_get_attr(comm, g_offload->keyval, &value, &found) != MPI_SUCCESS || !found) return nullptr;
  return static_cast<CommName*>(value);
}

void release(Handoff& op) {
  if (op.staged_bytes) g_offload->arena.give(op.staged_at, op.staged_bytes);
  if (op.output_bytes) g_offload->arena.give(op.output_at, op.output_bytes);
  op.staged_bytes = op.output_bytes = 0;
}

void forget_if_done(Handoff* op) {
  if (op->completed && op->freed) g_offload->ops.erase(op);
}

int query(void* state, MPI_Status* status) {
  auto* op = static_cast<Handoff*>(state);
  PMPI_Status_set_elements(status, MPI_BYTE, 0);
  PMPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_UNDEFINED;
  status->MPI_TAG = MPI_UNDEFINED;
  return op->answer->ok() ? MPI_SUCCESS : MPI_ERR_OTHER;  // MPI queries completed requests only
}

int free_op(void* state) {
  std::lock_guard lock(g_offload->mu);
  auto* op = static_cast<Handoff*>(state);
  op->freed = true;
  forget_if_done(op);
  return MPI_SUCCESS;
}

int cancel_op(void*, int) { return MPI_SUCCESS; }  // a collective cannot be cancelled

// The answered ops: results copied out, staging given back, MPI told.
void finish_answered() {
  std::vector<Handoff*> done;
  for (auto& [request, op] : g_offload->running)
    if (op->answered.load(std::memory_order_acquire)) done.push_back(op);
  for (Handoff* op : done) {
    g_offload->running.erase(op->request);
    if (op->answer->ok()) std::memcpy(op->output, g_offload->base + op->output_at, op->output_bytes);
    else
      std::fprintf(stderr, "outboard-mpi: MPI_I%s #%llu on communicator %llu failed: %s\n",
                   std::string(services::mpi_wire::coll_name(op->coll)).c_str(),
                   static_cast<unsigned long long>(op->seq), static_cast<unsigned long long>(op->comm),
                   op->answer->to_string().c_str());
    release(*op);
    op->completed = true;
    PMPI_Grequest_complete(op->request);
    forget_if_done(op);
  }
}

}  // namespace

std::string offload_start() {
  const char* agent = std::getenv("OUTBOARD_MPI_AGENT");
  if (!agent || !*agent) return "no agent serves this job (OUTBOARD_MPI_AGENT is unset)";
  // A rank's waits sleep at once: its core is the program's, and a polling rank keeps the agent
  // off it where they share cores (64 KiB alltoall, 2 ranks + agent on 2 cores: 230 -> 80-160 µs).
  ChannelConfig config;
  config.spin_us = 0;
  auto conn = Connection::connect(agent, config);
  if (!conn.ok()) return "no agent: " + conn.status().to_string();
  auto o = std::make_unique<Offload>();
  o->conn = std::move(conn).value();
  const uint64_t bytes = env_u64("OUTBOARD_MPI_STAGING_BYTES", kDefaultStagingBytes);
  auto staging = o->conn->allocate_memory(bytes);
  if (!staging.ok()) return "no agent: staging memory of " + std::to_string(bytes) + " B: " + staging.status().to_string();
  o->staging = std::move(staging).value();
  o->base = o->staging.data();
  o->descriptor.assign(o->staging.descriptor().begin(), o->staging.descriptor().end());
  o->arena.reset(bytes);
  o->capacity = bytes;
  o->timeout_s = static_cast<int64_t>(env_u64("OUTBOARD_MPI_TIMEOUT_S", kDefaultCollectiveTimeoutS));
  PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_name, &o->keyval, nullptr);
  PMPI_Comm_rank(MPI_COMM_WORLD, &o->world_rank);
  g_offload = o.release();
  g_on = true;
  PMPI_Comm_set_attr(MPI_COMM_WORLD, g_offload->keyval, new CommName{0, 0});
  return "";
}

bool offload_on() { return g_on; }

void offload_stop() {
  if (!g_on) return;
  for (;;) {
    {
      std::lock_guard lock(g_offload->mu);
      finish_answered();
      if (g_offload->running.empty()) break;
    }
    offload_nap();
  }
  PMPI_Comm_delete_attr(MPI_COMM_WORLD, g_offload->keyval);
  PMPI_Comm_free_keyval(&g_offload->keyval);
  g_offload->conn->close();
  g_on = false;
  // Requests the program never freed still point at their ops: the state stays, as MPI's does.
}

void offload_abort() {
  if (!g_on) return;
  g_on = false;
  g_offload->conn->close();
}

void name_communicator(MPI_Comm comm) {
  if (!g_on || comm == MPI_COMM_NULL) return;
  int inter = 0;
  PMPI_Comm_test_inter(comm, &inter);
  if (inter) return;
  // The largest next number of the members, and (negated, under MAX) the lowest world rank.
  long vals[2] = {static_cast<long>(g_offload->next_name), -static_cast<long>(g_offload->world_rank)};
  PMPI_Allreduce(MPI_IN_PLACE, vals, 2, MPI_LONG, MPI_MAX, comm);
  g_offload->next_name = static_cast<uint64_t>(vals[0]) + 1;
  PMPI_Comm_set_attr(comm, g_offload->keyval,
                     new CommName{(static_cast<uint64_t>(vals[0]) << 32) | static_cast<uint64_t>(-vals[1]), 0});
}

Route offload_route(MPI_Comm comm, uint64_t staging_bytes) {
  if (!g_on) return Route::kNoAgent;
  if (!name_of(comm)) return Route::kUnknownComm;
  // Against the whole area, not what is free now: every rank of a collective must decide alike,
  // and what is free depends on timing. A call that fits (with its two blocks' alignment) waits
  // for room when posted.
  if (staging_bytes + 2 * kAlign > g_offload->capacity) return Route::kTooBig;
  return Route::kOffloaded;
}

int offload_post(Post post, MPI_Comm comm, std::span<const uint8_t> input, void* output, uint64_t output_bytes,
                 MPI_Request* request) {
  // The input gets its own staging unless it is the output buffer (in place: the agent reads
  // the whole output area before writing any of it).
  const bool own_input = post.coll != services::mpi_wire::Coll::kBcast && !post.in_place;
  const uint64_t in_bytes = own_input ? input.size() : 0;
  std::optional<uint64_t> in_at, out_at;
  for (;;) {  // room comes as earlier collectives finish (offload_route checked that it can)
    {
      std::lock_guard lock(g_offload->mu);
      in_at = in_bytes ? g_offload->arena.take(in_bytes) : 0;
      out_at = output_bytes ? g_offload->arena.take(output_bytes) : 0;
      if (in_at && out_at) break;
      if (in_at && in_bytes) g_offload->arena.give(*in_at, in_bytes);
      if (out_at && output_bytes) g_offload->arena.give(*out_at, output_bytes);
    }
    offload_sweep();
    offload_nap();
  }
  std::lock_guard lock(g_offload->mu);
  CommName* name = name_of(comm);
  int size = 0, rank = 0;
  PMPI_Comm_size(comm, &size);
  PMPI_Comm_rank(comm, &rank);
  auto op = std::make_unique<Handoff>();
  op->staged_at = *in_at, op->staged_bytes = in_bytes;
  op->output_at = *out_at, op->output_bytes = output_bytes, op->output = output;
  if (own_input) std::memcpy(g_offload->base + *in_at, input.data(), input.size());
  else if (!input.empty()) std::memcpy(g_offload->base + *out_at, input.data(), input.size());
  post.comm = name->key;
  post.seq = name->next_seq++;
  post.size = static_cast<uint32_t>(size);
  post.rank = static_cast<uint32_t>(rank);
  if (own_input && !input.empty()) post.send_region = g_offload->descriptor, post.send_offset = *in_at;
  if (output_bytes) post.recv_region = g_offload->descriptor, post.recv_offset = *out_at;
  post.keep = true;  // the staging region lives until the connection closes
  op->coll = post.coll, op->seq = post.seq, op->comm = post.comm;
  Handoff* raw = op.get();
  int rc = PMPI_Grequest_start(query, free_op, cancel_op, raw, request);
  if (rc != MPI_SUCCESS) {
    release(*raw);
    return rc;
  }
  raw->request = *request;
  g_offload->ops.emplace(raw, std::move(op));
  g_offload->running.emplace(*request, raw);
  const Status st = g_offload->conn->submit(
      "mpi", Buffer::copy_of(services::mpi_wire::encode(post)), Deadline::after_ms(g_offload->timeout_s * 1000),
      [raw](Result<Buffer> answer) {
        raw->answer = answer.status();
        raw->answered.store(true, std::memory_order_release);
        g_offload->answers.fetch_add(1, std::memory_order_release);
      },
      Connection::Credit::kWait);
  if (!st.ok()) {  // completes as failed at the next completion call
    raw->answer = st;
    raw->answered.store(true, std::memory_order_release);
  }
  return MPI_SUCCESS;
}

void offload_sweep() {
  if (!g_on) return;
  std::lock_guard lock(g_offload->mu);
  g_offload->conn->progress();
  finish_answered();
}

bool offload_running(std::span<const MPI_Request> requests) {
  if (!g_on) return false;
  offload_sweep();
  std::lock_guard lock(g_offload->mu);
  for (MPI_Request r : requests)
    if (r != MPI_REQUEST_NULL && g_offload->running.count(r)) return true;
  return false;
}

void offload_nap() {
  // Keep MPI's own traffic moving (a peer may need it to reach this collective), then sleep
  // until an answer comes or the nap ends.
  const uint64_t seen = g_offload->answers.load(std::memory_order_acquire);
  int flag = 0;
  PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
  (void)g_offload->conn->wait_until(Deadline::after_ms(kNapMs), [seen] {
    return g_offload->answers.load(std::memory_order_acquire) != seen;
  });
}

}  // namespace outboard::mpi
