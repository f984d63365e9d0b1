#include "mpi/offload.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "outboard/channel.h"

namespace outboard::mpi {
namespace {

using services::mpi_wire::Post;

constexpr uint64_t kAlign = 64;
uint64_t align_up(uint64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
// Between two looks at MPI's own progress while a wait has offloaded requests to wait for.
constexpr int64_t kNapMs = 1;

// First-fit offsets in the staging region; collectives finish roughly in order, so the free
// list stays short.
class Arena {
 public:
  void reset(uint64_t size) { free_ = {{0, size}}; }
  std::optional<uint64_t> take(uint64_t bytes) {
    bytes = align_up(bytes);
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
    bytes = align_up(bytes);
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
  // Where several agents serve its ranks: theirs (the order of their first rank) and each rank's.
  std::vector<std::string> agents;
  std::vector<uint32_t> agent_of;
};

using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;  // (offset, bytes) in a buffer

// One offloaded collective, from its post until MPI frees its request and its answer came.
struct Handoff {
  MPI_Request request = MPI_REQUEST_NULL;
  uint64_t staged_at = 0, staged_bytes = 0, output_at = 0, output_bytes = 0;
  void* output = nullptr;
  Ranges results;  // staged: the parts of `output` the agent wrote, copied out at completion
  // An uneven call too large for the staging area: staged in a region of its own, which becomes
  // the spare or is freed with the call.
  std::optional<Region> own_staging;
  services::mpi_wire::Coll coll{};  // named in the message when it fails
  uint64_t seq = 0, comm = 0;
  // Written once by the answer's callback, which runs inside the channel's progress (under its
  // lock, not ours: a thread holding ours may be waiting for that one), then `answered` is set.
  std::optional<Status> answer;
  std::atomic<bool> answered{false};
  bool completed = false;        // PMPI_Grequest_complete called
  bool freed = false;            // MPI called free_fn
  // Point-to-point: what it is (its message's envelope names it when it fails) and, for a
  // receive, the envelope the agent answered and its capacity. A non-contiguous datatype's bytes
  // travel packed in `packed`, unpacked at completion into `unpack_to` (its own copy of the type).
  std::optional<services::mpi_wire::P2p> p2p;
  services::mpi_wire::Envelope envelope;
  std::vector<uint8_t> packed;
  void* unpack_to = nullptr;
  int unpack_count = 0;
  MPI_Datatype unpack_type = MPI_DATATYPE_NULL;
};

struct Offload {
  std::unique_ptr<Connection> conn;
  // Whether the agent may read inputs from and write results into the program's own buffers (the
  // kernel copies them: Connection::expose_memory), and does so on every communicator or only on
  // those several agents serve; else `unreachable` says why. The rest goes through staging.
  bool reachable = false, expose_all = false;
  std::string unreachable;
  uint64_t exposed_ops = 0, staged_ops = 0, own_ops = 0, own_allocated = 0;
  Region staging;
  uint8_t* base = nullptr;
  std::vector<uint8_t> descriptor;
  Arena arena;
  uint64_t capacity = 0;
  uint64_t own_staging_limit = kDefaultOwnStagingBytes;
  // The largest staging of its own that ended (at most spare_limit B), taken by the next call it
  // holds: a program repeats its calls, and allocating and first touching a region of tens of
  // MiB costs more than filling it. Posted kept, so that the agent maps it once too; the
  // descriptors of those freed since are in `freed` until a post names them (mpi_wire::kFreed).
  std::optional<Region> spare;
  uint64_t spare_limit = kDefaultSpareStagingBytes;
  std::vector<std::vector<uint8_t>> freed;
  int keyval = MPI_KEYVAL_INVALID;
  uint64_t next_name = 1;  // 0 is MPI_COMM_WORLD's
  int world_rank = 0;
  std::string address;              // of this rank's agent
  std::vector<std::string> agents;  // the job's agents, where there are several
  std::string token;                // the job's session, which its agents join on each other
  uint32_t agent = 0;               // this rank's, in `agents`
  int64_t timeout_s = kDefaultCollectiveTimeoutS;
  std::recursive_mutex mu;  // MPI_THREAD_MULTIPLE programs reach us from several threads
  std::unordered_map<Handoff*, std::unique_ptr<Handoff>> ops;
  std::unordered_map<MPI_Request, Handoff*> running;  // posted, not yet completed in MPI
  std::atomic<uint64_t> answers{0};                  // answers come so far: what a nap waits to change
  bool p2p = false;        // point-to-point offloaded (the whole job decided at MPI_Init)
  bool p2p_all = false;    // on communicators one agent serves too (OUTBOARD_MPI_P2P=all)
  uint64_t next_p2p_id = 0;  // numbers this rank's receives for the agent (a cancel names one)
  // Messages MPI_Improbe claimed, by the handle it gave: their receives, waiting for MPI_Imrecv.
  std::unordered_map<MPI_Message, Handoff*> claims;
  uint32_t next_claim = 0;
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

void free_own(std::optional<Region>& region) {
  if (!region) return;
  g_offload->freed.emplace_back(region->descriptor().begin(), region->descriptor().end());
  region.reset();
}

void release(Handoff& op) {
  if (op.own_staging) {
    auto& spare = g_offload->spare;
    if (op.own_staging->size() <= g_offload->spare_limit && (!spare || spare->size() < op.own_staging->size()))
      std::swap(spare, op.own_staging);  // the smaller one, if any, goes
    free_own(op.own_staging);
  } else {
    if (op.staged_bytes) g_offload->arena.give(op.staged_at, op.staged_bytes);
    if (op.output_bytes) g_offload->arena.give(op.output_at, op.output_bytes);
  }
  op.staged_bytes = op.output_bytes = 0;
  if (op.unpack_type != MPI_DATATYPE_NULL) PMPI_Type_free(&op.unpack_type);
}

void forget_if_done(Handoff* op) {
  if (op->completed && op->freed) g_offload->ops.erase(op);
}

// A receive's status says what came: its source, tag and bytes (at most its capacity: more is
// MPI_ERR_TRUNCATE, as MPI says), or that it was cancelled.
int query(void* state, MPI_Status* status) {
  auto* op = static_cast<Handoff*>(state);
  const auto& e = op->envelope;
  const bool received = op->p2p && op->p2p->kind == services::mpi_wire::Kind::kRecv && op->answer->ok();
  const bool got = received && !e.cancelled;
  PMPI_Status_set_elements_x(status, MPI_BYTE, got ? static_cast<MPI_Count>(std::min(e.bytes, op->p2p->bytes)) : 0);
  PMPI_Status_set_cancelled(status, received && e.cancelled);
  status->MPI_SOURCE = got ? static_cast<int>(e.source) : MPI_UNDEFINED;
  status->MPI_TAG = got ? e.tag : MPI_UNDEFINED;
  if (!op->answer->ok()) return MPI_ERR_OTHER;  // MPI queries completed requests only
  return got && e.bytes > op->p2p->bytes ? MPI_ERR_TRUNCATE : MPI_SUCCESS;
}

int free_op(void* state) {
  std::lock_guard lock(g_offload->mu);
  auto* op = static_cast<Handoff*>(state);
  op->freed = true;
  forget_if_done(op);
  return MPI_SUCCESS;
}

// A collective cannot be cancelled, nor (here) a send; a receive the agent has not matched yet
// is, and completes as cancelled (else as received).
int cancel_op(void* state, int complete) {
  auto* op = static_cast<Handoff*>(state);
  if (complete || !op->p2p || op->p2p->kind != services::mpi_wire::Kind::kRecv) return MPI_SUCCESS;
  std::lock_guard lock(g_offload->mu);
  services::mpi_wire::P2p cancel = *op->p2p;
  // A cancel names the receive by id alone: no region, nor the agent a single-source one watches.
  cancel.kind = services::mpi_wire::Kind::kCancel, cancel.bytes = 0, cancel.region.clear();
  cancel.token.clear(), cancel.agent.clear();
  (void)g_offload->conn->submit("mpi", Buffer::copy_of(services::mpi_wire::encode(cancel)),
                                Deadline::after_ms(g_offload->timeout_s * 1000), [](Result<Buffer>) {},
                                Connection::Credit::kWait);
  return MPI_SUCCESS;
}

std::string describe(const services::mpi_wire::P2p& m) {
  using services::mpi_wire::kAny;
  const bool sends = m.kind == services::mpi_wire::Kind::kSend;
  auto name = [](int32_t v) { return v == kAny ? std::string("any") : std::to_string(v); };
  return std::string(sends ? "MPI_Isend to rank " : "MPI_Irecv from rank ") + name(m.peer) + ", tag " + name(m.tag) +
         ", on communicator " + std::to_string(m.comm);
}

// A receive of a non-contiguous datatype: the whole elements that came, from where they were packed.
void unpack(Handoff& op) {
  if (op.envelope.cancelled || op.packed.empty()) return;
  int size = 0, position = 0;
  PMPI_Type_size(op.unpack_type, &size);
  const uint64_t got = std::min(op.envelope.bytes, op.p2p->bytes);
  const int count = size ? static_cast<int>(std::min<uint64_t>(got / static_cast<uint64_t>(size), op.unpack_count)) : 0;
  PMPI_Unpack(op.packed.data(), static_cast<int>(op.packed.size()), &position, op.unpack_to, count, op.unpack_type,
              MPI_COMM_WORLD);
}

uint8_t* staging_of(const Handoff& op) { return op.own_staging ? op.own_staging->data() : g_offload->base; }

// The answered ops: results copied out, staging given back, MPI told.
void finish_answered() {
  std::vector<Handoff*> done;
  for (auto& [request, op] : g_offload->running)
    if (op->answered.load(std::memory_order_acquire)) done.push_back(op);
  for (Handoff* op : done) {
    g_offload->running.erase(op->request);
    if (op->answer->ok()) {
      for (auto [at, bytes] : op->results)
        std::memcpy(static_cast<uint8_t*>(op->output) + at, staging_of(*op) + op->output_at + at, bytes);
      if (op->unpack_to) unpack(*op);
    } else if (op->p2p) {
      std::fprintf(stderr, "outboard-mpi: %s failed: %s\n", describe(*op->p2p).c_str(), op->answer->to_string().c_str());
    } else {
      std::fprintf(stderr, "outboard-mpi: MPI_I%s #%llu on communicator %llu failed: %s\n",
                   std::string(services::mpi_wire::coll_name(op->coll)).c_str(),
                   static_cast<unsigned long long>(op->seq), static_cast<unsigned long long>(op->comm),
                   op->answer->to_string().c_str());
    }
    release(*op);
    op->completed = true;
    PMPI_Grequest_complete(op->request);
    forget_if_done(op);
  }
}

// Whether the agent reaches this process's memory through exposed regions ("" when it does: it
// read back a value written here), else why not. The kernel may forbid it (another user, ptrace
// rules, a seccomp filter), or the agent may not take it (a client it did not find on its host).
std::string reach_agent(Connection& conn, int64_t timeout_s) {
  uint64_t word = 0x6f7574626f617264ull ^ static_cast<uint64_t>(::getpid());
  auto region = conn.expose_memory(&word, sizeof word);
  if (!region.ok()) return region.status().to_string();
  services::mpi_wire::Reach reach{word, {region->descriptor().begin(), region->descriptor().end()}};
  auto answer = conn.request("mpi", services::mpi_wire::encode(reach), Deadline::after_ms(timeout_s * 1000));
  return answer.ok() ? "" : answer.status().to_string();
}

}  // namespace

std::string offload_start() {
  const char* list = std::getenv("OUTBOARD_MPI_AGENT");
  if (!list || !*list) return "no agent serves this job (OUTBOARD_MPI_AGENT is unset)";
  std::vector<std::string> agents;
  for (std::string_view rest = list; !rest.empty();) {
    const size_t comma = rest.find(',');
    agents.emplace_back(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  int world_rank = 0;
  PMPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const std::string agent = agents[static_cast<size_t>(world_rank) % agents.size()];
  if (agent.empty() || agent.size() > services::mpi_wire::kMaxAddressBytes)
    return "OUTBOARD_MPI_AGENT names an empty agent address or one over " +
           std::to_string(services::mpi_wire::kMaxAddressBytes) + " B";
  // A rank's waits sleep at once: its core is the program's, and a polling rank keeps the agent
  // off it where they share cores (64 KiB alltoall, 2 ranks + agent on 2 cores: 230 -> 80-160 µs).
  ChannelConfig config;
  config.spin_us = 0;
  auto conn = Connection::connect(agent, config);
  if (!conn.ok()) return "no agent: " + conn.status().to_string();
  auto o = std::make_unique<Offload>();
  o->conn = std::move(conn).value();
  o->address = agent;
  o->timeout_s = static_cast<int64_t>(env_u64("OUTBOARD_MPI_TIMEOUT_S", kDefaultCollectiveTimeoutS));
  // The same bound either way: every rank must route a call alike, whatever its buffers' path.
  const uint64_t bytes = env_u64("OUTBOARD_MPI_STAGING_BYTES", kDefaultStagingBytes);
  o->capacity = bytes;
  o->own_staging_limit = env_u64("OUTBOARD_MPI_OWN_STAGING_BYTES", kDefaultOwnStagingBytes);
  o->spare_limit = env_u64("OUTBOARD_MPI_SPARE_STAGING_BYTES", kDefaultSpareStagingBytes);
  const char* expose = std::getenv("OUTBOARD_MPI_EXPOSE");
  o->expose_all = expose && std::strcmp(expose, "1") == 0;
  o->unreachable = expose && std::strcmp(expose, "0") == 0
                       ? "OUTBOARD_MPI_EXPOSE=0"
                       : reach_agent(*o->conn, std::min<int64_t>(o->timeout_s, kReachTimeoutS));
  o->reachable = o->unreachable.empty();
  auto staging = o->conn->allocate_memory(bytes);
  if (!staging.ok()) return "no agent: staging memory of " + std::to_string(bytes) + " B: " + staging.status().to_string();
  o->staging = std::move(staging).value();
  o->base = o->staging.data();
  o->descriptor.assign(o->staging.descriptor().begin(), o->staging.descriptor().end());
  o->arena.reset(bytes);
  PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_name, &o->keyval, nullptr);
  o->world_rank = world_rank;
  g_offload = o.release();
  g_on = true;
  PMPI_Comm_set_attr(MPI_COMM_WORLD, g_offload->keyval, new CommName{0, 0, {}, {}});
  return "";
}

namespace {

// The communicator's own table of agents from the job's agent of each of its ranks: none where
// one agent serves them all (it runs their collectives alone).
void set_agents(CommName& name, const std::vector<uint32_t>& job_agent_of) {
  std::vector<uint32_t> used;
  for (uint32_t a : job_agent_of) {
    auto at = std::find(used.begin(), used.end(), a);
    name.agent_of.push_back(static_cast<uint32_t>(at - used.begin()));
    if (at == used.end()) used.push_back(a);
  }
  if (used.size() == 1) {
    name.agent_of.clear();
    return;
  }
  for (uint32_t a : used) name.agents.push_back(g_offload->agents[a]);
}

}  // namespace

std::string offload_agents() {
  constexpr size_t kEntry = services::mpi_wire::kMaxAddressBytes + MPI_MAX_PROCESSOR_NAME + 2;
  int size = 0, host_len = 0;
  PMPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<char> mine(kEntry), all(kEntry * static_cast<size_t>(size));
  std::memcpy(mine.data(), g_offload->address.data(), g_offload->address.size());
  PMPI_Get_processor_name(mine.data() + services::mpi_wire::kMaxAddressBytes + 1, &host_len);
  PMPI_Allgather(mine.data(), static_cast<int>(kEntry), MPI_CHAR, all.data(), static_cast<int>(kEntry), MPI_CHAR,
                 MPI_COMM_WORLD);
  std::vector<std::string> agents, hosts;
  std::vector<uint32_t> agent_of;
  for (int r = 0; r < size; ++r) {
    const char* entry = all.data() + kEntry * static_cast<size_t>(r);
    const std::string address(entry), host(entry + services::mpi_wire::kMaxAddressBytes + 1);
    auto known = std::find(agents.begin(), agents.end(), address);
    if (known != agents.end() && hosts[known - agents.begin()] != host)
      return "the agents of " + hosts[known - agents.begin()] + " and " + host + " both listen at " + address +
             ": agents of different hosts need addresses of their own, wider than loopback";
    if (known == agents.end()) agents.push_back(address), hosts.push_back(host);
    agent_of.push_back(static_cast<uint32_t>(std::find(agents.begin(), agents.end(), address) - agents.begin()));
  }
  if (agents.size() == 1) return "";
  const char* token = std::getenv("OUTBOARD_SESSION_TOKEN");
  if (!token || std::strlen(token) != services::mpi_wire::kTokenHexDigits ||
      std::string_view(token).find_first_not_of("0123456789abcdefABCDEF") != std::string_view::npos)
    return std::to_string(agents.size()) + " agents serve this job; they join each other's session with " +
           "OUTBOARD_SESSION_TOKEN (" + std::to_string(services::mpi_wire::kTokenHexDigits) +
           " hex digits), which is unset or malformed";
  g_offload->token = token;
  g_offload->agent = agent_of[static_cast<size_t>(g_offload->world_rank)];
  g_offload->agents = std::move(agents);
  set_agents(*name_of(MPI_COMM_WORLD), agent_of);
  return "";
}

bool offload_on() { return g_on; }

BufferCounts offload_buffers() {
  if (!g_offload) return {};
  std::lock_guard lock(g_offload->mu);
  return {g_offload->exposed_ops, g_offload->staged_ops, g_offload->own_ops, g_offload->own_allocated,
          g_offload->unreachable};
}

void offload_stop() {
  if (!g_on) return;
  // Collectives end on every rank (all ranks are here); a send or receive still open was never
  // matched (the program's error: MPI says to complete them first), and waiting would hang.
  for (;;) {
    {
      std::lock_guard lock(g_offload->mu);
      finish_answered();
      if (std::none_of(g_offload->running.begin(), g_offload->running.end(),
                       [](const auto& r) { return !r.second->p2p; }))
        break;
    }
    offload_nap();
  }
  for (const auto& [request, op] : g_offload->running)
    std::fprintf(stderr, "outboard-mpi: rank %d: %s never completed before MPI_Finalize; dropped\n",
                 g_offload->world_rank, describe(*op->p2p).c_str());
  PMPI_Comm_delete_attr(MPI_COMM_WORLD, g_offload->keyval);
  PMPI_Comm_free_keyval(&g_offload->keyval);
  g_offload->spare.reset();
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
  auto* name = new CommName{(static_cast<uint64_t>(vals[0]) << 32) | static_cast<uint64_t>(-vals[1]), 0, {}, {}};
  if (!g_offload->agents.empty()) {
    int size = 0;
    PMPI_Comm_size(comm, &size);
    std::vector<uint32_t> job_agent_of(static_cast<size_t>(size));
    PMPI_Allgather(&g_offload->agent, 1, MPI_UINT32_T, job_agent_of.data(), 1, MPI_UINT32_T, comm);
    set_agents(*name, job_agent_of);
  }
  PMPI_Comm_set_attr(comm, g_offload->keyval, name);
}

namespace {
// Against the whole area, not what is free now: every rank of a collective must decide alike,
// and what is free depends on timing. A call that fits (with its two blocks' alignment) waits
// for room when posted.
bool fits_staging(uint64_t staging_bytes) { return staging_bytes + 2 * kAlign <= g_offload->capacity; }
}  // namespace

Route offload_route(MPI_Comm comm, uint64_t staging_bytes, bool uneven) {
  if (!g_on) return Route::kNoAgent;
  if (!name_of(comm)) return Route::kUnknownComm;
  // Every rank of a collective whose sizes agree decides alike. An uneven one too large for
  // staging is offloaded all the same (offload_post says how), so that no rank passes it through
  // while the others offload it.
  if (!fits_staging(staging_bytes) && !uneven) return Route::kTooBig;
  return Route::kOffloaded;
}

namespace {

// The post's regions are the program's buffers themselves, which the agent reads and writes
// through the kernel: nothing copied here, nothing to copy out at completion.
Status expose(Post& post, bool own_input, std::span<const uint8_t> input, void* output, uint64_t output_bytes) {
  auto describe = [](void* data, uint64_t bytes, std::vector<uint8_t>& descriptor) -> Status {
    OB_ASSIGN_OR_RETURN(Region region, g_offload->conn->expose_memory(data, bytes));
    descriptor.assign(region.descriptor().begin(), region.descriptor().end());
    return {};
  };
  if (own_input && !input.empty())
    OB_RETURN_IF_ERROR(describe(const_cast<uint8_t*>(input.data()), input.size(), post.send_region));
  if (output_bytes) OB_RETURN_IF_ERROR(describe(output, output_bytes, post.recv_region));
  return {};
}

// What the rank gives itself (alltoall(v), allgather; not in place) is copied here, once in this
// process's memory, where the agent would copy it twice: through the kernel, or in and out of
// staging (kOwnBlock). Alltoallv's counts for itself must agree, or the agent names them.
void copy_own_block(Post& post, std::span<const uint8_t> input, uint8_t* output) {
  using services::mpi_wire::Coll;
  if (post.in_place || input.empty()) return;
  const uint64_t r = post.rank;
  switch (post.coll) {
    case Coll::kAlltoall: std::memcpy(output + r * post.bytes, input.data() + r * post.bytes, post.bytes); break;
    case Coll::kAllgather: std::memcpy(output + r * post.bytes, input.data(), post.bytes); break;
    case Coll::kAlltoallv:
      if (post.send_counts[r] != post.recv_counts[r]) return;
      if (post.send_counts[r])
        std::memcpy(output + post.recv_displs[r], input.data() + post.send_displs[r], post.send_counts[r]);
      break;
    default: return;
  }
  post.own_block = true;
}

// The blocks of its own input (not in place) or output buffer the agent reads or writes, merged
// where they touch: staging copies only these, so the rest of the receive buffer (alltoallv's
// gaps, the block the rank gave itself) stays as MPI says, and no byte moves twice.
Ranges blocks(const Post& p, bool output, uint64_t whole) {
  using services::mpi_wire::Coll;
  Ranges out;
  auto add = [&](uint64_t at, uint64_t bytes) {
    if (!bytes) return;
    if (!out.empty() && out.back().first + out.back().second == at)
      out.back().second += bytes;
    else
      out.emplace_back(at, bytes);
  };
  const bool per_block = p.coll == Coll::kAlltoall || p.coll == Coll::kAlltoallv ||
                         (output && p.coll == Coll::kAllgather);
  if (!per_block) {
    add(0, whole);
    return out;
  }
  for (uint64_t i = 0; i < p.size; ++i) {
    if (i == p.rank && p.own_block) continue;
    if (p.coll != Coll::kAlltoallv)
      add(i * p.bytes, p.bytes);
    else if (output)
      add(p.recv_displs[i], p.recv_counts[i]);
    else
      add(p.send_displs[i], p.send_counts[i]);
  }
  return out;
}

// Gives `op` its generalized request and posts `message` to the agent, whose answer completes it
// (a receive's answer is its envelope). Where `described` failed, or the submit does (the
// connection closed), it completes as failed at the next completion call. An MPI error code.
int hand_off(std::unique_ptr<Handoff> op, const Status& described, std::vector<uint8_t> message,
             MPI_Request* request) {
  Handoff* raw = op.get();
  const int rc = PMPI_Grequest_start(query, free_op, cancel_op, raw, request);
  if (rc != MPI_SUCCESS) {
    release(*raw);
    return rc;
  }
  raw->request = *request;
  g_offload->ops.emplace(raw, std::move(op));
  g_offload->running.emplace(*request, raw);
  const bool receives = raw->p2p && raw->p2p->kind == services::mpi_wire::Kind::kRecv;
  const Status st = !described.ok() ? described : g_offload->conn->submit(
      "mpi", Buffer::copy_of(message), Deadline::after_ms(g_offload->timeout_s * 1000),
      [raw, receives](Result<Buffer> answer) {
        Status st = answer.status();
        if (st.ok() && receives) {
          auto envelope = services::mpi_wire::decode_envelope(answer->span());
          if (envelope.ok()) raw->envelope = *envelope;
          else st = envelope.status();
        }
        raw->answer = st;
        raw->answered.store(true, std::memory_order_release);
        g_offload->answers.fetch_add(1, std::memory_order_release);
      },
      Connection::Credit::kWait);
  if (!st.ok()) {
    raw->answer = st;
    raw->answered.store(true, std::memory_order_release);
  }
  return MPI_SUCCESS;
}

}  // namespace

int offload_post(Post post, MPI_Comm comm, std::span<const uint8_t> input, void* output, uint64_t output_bytes,
                 MPI_Request* request) {
  // The input gets its own staging unless it is the output buffer (in place: the agent reads
  // the whole output area before writing any of it).
  const bool own_input = post.coll != services::mpi_wire::Coll::kBcast && !post.in_place;
  // Where one agent serves the communicator its copies are the collective's whole latency, and
  // memcpy through staging beats the kernel's copies (4x slower here: 95 against 25 µs per MiB);
  // where several do, the wire hides the agent's copies and the rank's own are saved.
  // An uneven call too large for staging (offload_route let only those through) goes through
  // staging of its own, for the same reason, where that may be kept for the next call (a spare:
  // 16 MiB on 2 ranks, 2 ms a call against 11 ms in place here), else in place; where the agent
  // cannot reach the rank's memory, through staging of its own whatever its size.
  const uint64_t need = (own_input ? input.size() : 0) + output_bytes;
  const bool fits = fits_staging(need);
  const bool in_place_pays = g_offload->reachable && (g_offload->expose_all || !name_of(comm)->agents.empty());
  const bool keepable = need + kAlign <= g_offload->spare_limit && need <= g_offload->own_staging_limit;
  bool own = !fits && !in_place_pays && (!g_offload->reachable || keepable);
  bool staged = own || (fits && !in_place_pays);
  uint64_t in_bytes = staged && own_input ? input.size() : 0, out_bytes = staged ? output_bytes : 0;
  std::optional<uint64_t> in_at = 0, out_at = 0;
  if (own) out_at = align_up(in_bytes);
  while (staged && !own) {  // room comes as earlier collectives finish (offload_route checked that it can)
    {
      std::lock_guard lock(g_offload->mu);
      in_at = in_bytes ? g_offload->arena.take(in_bytes) : 0;
      out_at = out_bytes ? g_offload->arena.take(out_bytes) : 0;
      if (in_at && out_at) break;
      if (in_at && in_bytes) g_offload->arena.give(*in_at, in_bytes);
      if (out_at && out_bytes) g_offload->arena.give(*out_at, out_bytes);
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
  // Staging of its own that cannot be had is posted all the same, saying why: the agent then fails
  // the call for every rank, where the others would wait for this one until their timeout.
  if (own && need > g_offload->own_staging_limit) {
    post.failure = "staging of its own for " + std::to_string(need) + " B exceeds OUTBOARD_MPI_OWN_STAGING_BYTES " +
                   std::to_string(g_offload->own_staging_limit);
  } else if (own && g_offload->spare && g_offload->spare->size() >= in_bytes + kAlign + out_bytes) {
    op->own_staging = std::exchange(g_offload->spare, std::nullopt);
  } else if (own) {
    free_own(g_offload->spare);  // too small for this call: gone before the larger one is had
    auto region = g_offload->conn->allocate_memory(in_bytes + kAlign + out_bytes);
    if (region.ok()) {
      op->own_staging = std::move(region).value();
      ++g_offload->own_allocated;
    } else if (g_offload->reachable) {  // in place, as where it could not be kept
      own = staged = false;
      in_bytes = out_bytes = 0;
    } else {
      post.failure = region.status().with_context("staging of its own for " + std::to_string(need) + " B").to_string();
    }
  }
  ++(staged ? g_offload->staged_ops : g_offload->exposed_ops);
  g_offload->own_ops += op->own_staging.has_value();
  const bool stages = staged && post.failure.empty();
  if (post.failure.empty()) {
    op->staged_at = *in_at, op->staged_bytes = in_bytes;
    op->output_at = *out_at, op->output_bytes = out_bytes;
  }
  op->output = output;
  post.comm = name->key;
  post.seq = name->next_seq++;
  post.size = static_cast<uint32_t>(size);
  post.rank = static_cast<uint32_t>(rank);
  copy_own_block(post, input, static_cast<uint8_t*>(output));
  // Fails only where the connection closed: then it completes as failed, as a failed submit does.
  Status described;
  if (!staged) described = expose(post, own_input, input, output, output_bytes);
  if (stages) {
    uint8_t* base = staging_of(*op);
    const std::span<const uint8_t> area = own ? op->own_staging->descriptor() : g_offload->descriptor;
    const std::vector<uint8_t> descriptor(area.begin(), area.end());
    if (own_input) {
      for (auto [at, bytes] : blocks(post, false, input.size()))
        std::memcpy(base + *in_at + at, input.data() + at, bytes);
    } else if (!input.empty()) {  // in place (all of it: alltoallv's gaps go back unchanged), or bcast's root
      std::memcpy(base + *out_at, input.data(), input.size());
    }
    if (own_input && !input.empty()) post.send_region = descriptor, post.send_offset = *in_at;
    if (output_bytes) post.recv_region = descriptor, post.recv_offset = *out_at;
    // The staging area lives until the connection closes; one of its own is kept once the agent
    // heard of every region of its own freed before (their bytes may come back for this one).
    post.keep = !own || g_offload->freed.size() <= services::mpi_wire::kMaxFreed;
    if (post.coll != services::mpi_wire::Coll::kBcast || post.rank != post.root)  // the root's stays as it is
      op->results = blocks(post, true, output_bytes);
  }
  if (!name->agents.empty()) {
    post.token = g_offload->token;
    post.agents = name->agents;
    post.agent_of = name->agent_of;
  }
  const size_t told = std::min<size_t>(g_offload->freed.size(), services::mpi_wire::kMaxFreed);
  post.freed.assign(std::make_move_iterator(g_offload->freed.begin()),
                    std::make_move_iterator(g_offload->freed.begin() + static_cast<ptrdiff_t>(told)));
  g_offload->freed.erase(g_offload->freed.begin(), g_offload->freed.begin() + static_cast<ptrdiff_t>(told));
  op->coll = post.coll, op->seq = post.seq, op->comm = post.comm;
  const int rc = hand_off(std::move(op), described, services::mpi_wire::encode(post), request);
  if (rc != MPI_SUCCESS)  // not posted: the next post names them
    g_offload->freed.insert(g_offload->freed.begin(), std::make_move_iterator(post.freed.begin()),
                            std::make_move_iterator(post.freed.end()));
  return rc;
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

// ---- point-to-point

bool p2p_asked() {
  const char* v = std::getenv("OUTBOARD_MPI_P2P");
  return v && (std::strcmp(v, "1") == 0 || std::strcmp(v, "all") == 0);
}

std::string p2p_blocker() {
  return g_offload->reachable ? "" : "its agent cannot reach its memory: " + g_offload->unreachable;
}

void p2p_enable() {
  g_offload->p2p = true;
  g_offload->p2p_all = std::strcmp(std::getenv("OUTBOARD_MPI_P2P"), "all") == 0;
}

bool p2p_on() { return g_on && g_offload->p2p; }

Route p2p_route(MPI_Comm comm, int peer) {
  if (peer == MPI_PROC_NULL) return Route::kProcNull;
  int inter = 0;
  PMPI_Comm_test_inter(comm, &inter);
  if (inter) return Route::kIntercomm;
  const CommName* name = name_of(comm);
  if (!name) return Route::kUnknownComm;
  return g_offload->p2p_all || !name->agents.empty() ? Route::kOffloaded : Route::kOneAgent;
}

int p2p_post(services::mpi_wire::P2p m, MPI_Comm comm, const void* buf, int count, MPI_Datatype type,
             bool contiguous, MPI_Request* request) {
  using services::mpi_wire::Kind;
  const bool receives = m.kind == Kind::kRecv;
  auto op = std::make_unique<Handoff>();
  int size = 0;
  PMPI_Type_size(type, &size);
  uint64_t bytes = static_cast<uint64_t>(size) * static_cast<uint64_t>(std::max(count, 0));
  void* data = const_cast<void*>(buf);
  if (!contiguous && bytes) {  // the agent moves bytes: packed here, unpacked at the receive's completion
    int packed = 0, position = 0;
    PMPI_Pack_size(count, type, MPI_COMM_WORLD, &packed);
    op->packed.resize(static_cast<size_t>(packed));
    if (receives) {
      PMPI_Type_dup(type, &op->unpack_type);
      op->unpack_to = data, op->unpack_count = count;
    } else {
      PMPI_Pack(buf, count, type, op->packed.data(), packed, &position, MPI_COMM_WORLD);
      bytes = static_cast<uint64_t>(position);
    }
    data = op->packed.data();
  }
  std::lock_guard lock(g_offload->mu);
  const CommName* name = name_of(comm);
  int comm_size = 0, rank = 0;
  PMPI_Comm_size(comm, &comm_size);
  PMPI_Comm_rank(comm, &rank);
  m.comm = name->key;
  m.size = static_cast<uint32_t>(comm_size), m.rank = static_cast<uint32_t>(rank);
  m.bytes = bytes;
  if (receives) m.id = g_offload->next_p2p_id++;
  // A send to, or a receive from, a rank another agent serves names that agent: this rank's
  // forwards the send there, or watches it while the receive waits.
  if (!name->agents.empty() && m.peer != services::mpi_wire::kAny) {
    const uint32_t theirs = name->agent_of[static_cast<size_t>(m.peer)];
    if (theirs != name->agent_of[static_cast<size_t>(rank)]) m.token = g_offload->token, m.agent = name->agents[theirs];
  }
  // The agent reads the send from, and writes the receive into, this buffer itself (the kernel
  // copies it), when the message is matched or buffered: nothing is staged or copied here.
  Status described;
  if (bytes) {
    auto region = g_offload->conn->expose_memory(data, bytes);
    if (region.ok()) m.region.assign(region->descriptor().begin(), region->descriptor().end());
    else described = region.status();
  }
  std::vector<uint8_t> message = services::mpi_wire::encode(m);
  m.region.clear();
  op->p2p = std::move(m);
  return hand_off(std::move(op), described, std::move(message), request);
}

int p2p_iprobe(services::mpi_wire::P2p m, MPI_Comm comm, int* flag, MPI_Status* status) {
  int comm_size = 0, rank = 0;
  PMPI_Comm_size(comm, &comm_size);
  PMPI_Comm_rank(comm, &rank);
  {
    std::lock_guard lock(g_offload->mu);
    m.comm = name_of(comm)->key;
  }
  m.kind = services::mpi_wire::Kind::kProbe;
  m.size = static_cast<uint32_t>(comm_size), m.rank = static_cast<uint32_t>(rank);
  auto answer = g_offload->conn->request("mpi", services::mpi_wire::encode(m),
                                         Deadline::after_ms(g_offload->timeout_s * 1000));
  auto e = answer.ok() ? services::mpi_wire::decode_envelope(answer->span())
                       : Result<services::mpi_wire::Envelope>(answer.status());
  if (!e.ok()) {
    std::fprintf(stderr, "outboard-mpi: MPI_Iprobe on communicator %llu failed: %s\n",
                 static_cast<unsigned long long>(m.comm), e.status().to_string().c_str());
    return MPI_ERR_OTHER;
  }
  *flag = e->found;
  if (e->found && status != MPI_STATUS_IGNORE) {
    PMPI_Status_set_elements_x(status, MPI_BYTE, static_cast<MPI_Count>(e->bytes));
    PMPI_Status_set_cancelled(status, 0);
    status->MPI_SOURCE = static_cast<int>(e->source);
    status->MPI_TAG = e->tag;
  }
  return MPI_SUCCESS;
}

namespace {

// A claimed message's handle, one MPI never makes: Open MPI's handles are pointers (this one
// points at our receive), MPICH's are integers whose top two bits give the kind, and 00 is the
// kind no handle has.
// (A template, so that only this ABI's branch is compiled.)
template <typename Handle = MPI_Message>
Handle claim_handle(Handoff* op) {
  if constexpr (std::is_pointer_v<Handle>) {
    return reinterpret_cast<Handle>(op);
  } else {
    constexpr uint32_t kInvalidKind = 0x01000000;
    return static_cast<Handle>(kInvalidKind | (g_offload->next_claim++ & 0x00ffffff));
  }
}

}  // namespace

int p2p_mprobe(services::mpi_wire::P2p m, MPI_Comm comm, int* flag, MPI_Message* message, MPI_Status* status) {
  std::lock_guard lock(g_offload->mu);
  MPI_Status found{};
  const int rc = p2p_iprobe(m, comm, flag, &found);
  if (rc != MPI_SUCCESS || !*flag) return rc;
  int bytes = 0;
  PMPI_Get_count(&found, MPI_BYTE, &bytes);
  m.kind = services::mpi_wire::Kind::kRecv, m.peer = found.MPI_SOURCE, m.tag = found.MPI_TAG;
  // Posted as a packed receive with nowhere to unpack yet: its bytes stay in the op's buffer.
  MPI_Request request = MPI_REQUEST_NULL;
  if (const int posted = p2p_post(m, comm, nullptr, bytes, MPI_BYTE, false, &request); posted != MPI_SUCCESS)
    return posted;
  Handoff* op = g_offload->running.at(request);
  *message = claim_handle(op);
  g_offload->claims.emplace(*message, op);
  if (status != MPI_STATUS_IGNORE) *status = found;
  return MPI_SUCCESS;
}

bool p2p_claimed(MPI_Message message) {
  if (!g_on || message == MPI_MESSAGE_NULL) return false;
  std::lock_guard lock(g_offload->mu);
  return g_offload->claims.count(message) != 0;
}

int p2p_imrecv(void* buf, int count, MPI_Datatype type, MPI_Message* message, MPI_Request* request) {
  std::lock_guard lock(g_offload->mu);
  auto claim = g_offload->claims.find(*message);
  Handoff* op = claim->second;
  g_offload->claims.erase(claim);
  *message = MPI_MESSAGE_NULL;
  *request = op->request;
  int size = 0;
  PMPI_Type_size(type, &size);
  op->p2p->bytes = static_cast<uint64_t>(size) * static_cast<uint64_t>(std::max(count, 0));
  if (op->unpack_type != MPI_DATATYPE_NULL) PMPI_Type_free(&op->unpack_type);
  PMPI_Type_dup(type, &op->unpack_type);
  op->unpack_to = buf, op->unpack_count = count;
  if (op->completed) {  // its answer came first: deliver now (release() is done with it)
    if (op->answer->ok()) unpack(*op);
    PMPI_Type_free(&op->unpack_type);
  }
  return MPI_SUCCESS;
}

}  // namespace outboard::mpi
