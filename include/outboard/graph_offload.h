// Offloaded task graphs: a frozen Graph is shipped to the agent's `graph`
// service and instantiated there. Engine nodes (sha256, dma) run on the
// agent on the instance's agent memory, moving data to and from this
// process's registered memory with one-sided transfers; host nodes
// (Graph::add_host) run here, inside progress()/wait(), when their
// predecessors have finished; completion comes back over the channel.
//
//   auto off = graph::Offload::connect(address, deadline).value();
//   Region mem = off->connection().register_memory(buf, size).value();
//   uint32_t region = off->bind(mem, deadline).value();
//   auto remote = off->ship(seed_graph, /*agent_bytes=*/1024, deadline).value();
//   std::vector<graph::Buffers> b(seed_graph->size());
//   b[sha] = {graph::Ref::agent(0, 1024), graph::Ref::host(region, 0, 32)};
//   b[dma] = {graph::Ref::agent(0, 1024), graph::Ref::host(region, 32, 1024)};
//   auto inst = off->instantiate(*remote, b, deadline).value();
//   inst->set_host_data(check, &expected);
//   off->submit(*inst, {{graph::AgentWrite{0, payload}}});
//   off->wait(*inst, deadline);
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "outboard/channel.h"
#include "outboard/graph.h"

namespace outboard::graph {

/// Where an offloaded engine node reads or writes.
struct Ref {
  enum class Space : uint8_t { kAgent, kHost };
  Space space = Space::kAgent;
  uint32_t region = 0;  ///< kHost: a handle from Offload::bind()
  uint64_t offset = 0;
  uint64_t length = 0;
  static Ref agent(uint64_t offset, uint64_t length) { return {Space::kAgent, 0, offset, length}; }
  static Ref host(uint32_t region, uint64_t offset, uint64_t length) { return {Space::kHost, region, offset, length}; }
};

/// An engine node's buffers. sha256: the digest of `src` (agent memory) into
/// the 32 bytes at `dst` (agent or host). dma: `src` to `dst`, same length,
/// agent to agent (memcpy), agent to host (one-sided put) or host to agent
/// (one-sided get). Ignored for host nodes.
struct Buffers {
  Ref src;
  Ref dst;
};

/// Bytes written into the instance's agent memory before its run starts
/// (they travel with the submit).
struct AgentWrite {
  uint64_t offset = 0;
  std::span<const uint8_t> bytes;
};

/// A graph shipped to the agent. Keeps the local graph for its host nodes.
class RemoteGraph {
 public:
  /// What Offload::ship() returns: `handle` names the graph on the agent.
  RemoteGraph(std::shared_ptr<const Graph> g, uint32_t handle, uint64_t agent_bytes)
      : graph_(std::move(g)), handle_(handle), agent_bytes_(agent_bytes) {}
  [[nodiscard]] const Graph& graph() const { return *graph_; }
  [[nodiscard]] uint32_t handle() const { return handle_; }
  [[nodiscard]] uint64_t agent_bytes() const { return agent_bytes_; }

 private:
  std::shared_ptr<const Graph> graph_;
  uint32_t handle_;
  uint64_t agent_bytes_;
};

class Offload;

/// One instance of a shipped graph, living on the agent. Thread mode: that
/// of its Offload. Dropping one in flight stops its host nodes from running
/// here (they fail) and frees it on the agent once its run is over.
class RemoteInstance {
 public:
  ~RemoteInstance();
  RemoteInstance(const RemoteInstance&) = delete;
  RemoteInstance& operator=(const RemoteInstance&) = delete;

  /// A host node's argument. kBadState while in flight.
  [[nodiscard]] Status set_host_data(NodeId node, void* data);
  /// Runs (inside progress()/wait()) when a run completes.
  void set_callback(std::function<void(RemoteInstance&, const Status&)> fn) { callback_ = std::move(fn); }
  [[nodiscard]] bool in_flight() const { return in_flight_; }
  /// Result of the last completed run: ok, or the failing node's error.
  [[nodiscard]] const Status& status() const { return status_; }
  [[nodiscard]] const RemoteGraph& graph() const { return *graph_; }
  /// Opaque pointer for the caller.
  void* user_data = nullptr;

 private:
  friend class Offload;
  RemoteInstance(Offload* owner, std::shared_ptr<const RemoteGraph> graph, uint32_t id);
  Offload* owner_;
  std::shared_ptr<const RemoteGraph> graph_;
  uint32_t id_;
  std::vector<void*> host_data_;
  std::function<void(RemoteInstance&, const Status&)> callback_;
  bool in_flight_ = false;
  Status status_;
};

/// Client of the agent's `graph` service over a connection of its own (it
/// takes every one-way message the agent sends on it). Thread mode:
/// serialized (one thread at a time); host nodes and callbacks run inside
/// progress(), wait() and drain().
class Offload {
 public:
  [[nodiscard]] static Result<std::unique_ptr<Offload>> connect(const std::string& address, Deadline deadline,
                                                                const ChannelConfig& config = {});
  ~Offload();
  /// For registering memory (then bind() it) and for the peer's limits.
  [[nodiscard]] Connection& connection() { return *connection_; }

  /// Lets the agent's dma and sha256 nodes reach `region` (registered on
  /// connection()); returns the handle Ref::host() takes.
  [[nodiscard]] Result<uint32_t> bind(const Region& region, Deadline deadline);
  /// Ships a frozen graph of sha256/dma engine nodes and host nodes (other
  /// kinds are kInvalidArgument, naming the node); every instance gets
  /// `agent_bytes` of agent memory.
  [[nodiscard]] Result<std::shared_ptr<const RemoteGraph>> ship(std::shared_ptr<const Graph> graph,
                                                                uint64_t agent_bytes, Deadline deadline);
  /// Creates an instance on the agent; `buffers` has one entry per node.
  /// The agent checks every Ref against the instance's memory and the bound
  /// regions, naming the node and the sizes.
  [[nodiscard]] Result<std::unique_ptr<RemoteInstance>> instantiate(std::shared_ptr<const RemoteGraph> graph,
                                                                    std::span<const Buffers> buffers,
                                                                    Deadline deadline);
  /// Starts a run (sent with the next progress(), wait() or drain(), batched
  /// with other submits). kBadState if in flight; kOutOfRange for a write
  /// outside the agent memory.
  [[nodiscard]] Status submit(RemoteInstance& instance, std::span<const AgentWrite> writes = {});
  /// Sends what is batched, runs ready host nodes, delivers completions;
  /// returns how many events it handled.
  unsigned progress();
  /// Until the run of `instance` completes: its status, or kTimedOut.
  [[nodiscard]] Status wait(RemoteInstance& instance, Deadline deadline);
  /// Until nothing is in flight; kTimedOut otherwise.
  [[nodiscard]] Status drain(Deadline deadline);
  [[nodiscard]] uint32_t in_flight() const { return in_flight_; }

  /// Submits batched into one message at most.
  static constexpr size_t kMaxBatchBytes = 256u << 10;

 private:
  friend class RemoteInstance;
  explicit Offload(std::unique_ptr<Connection> connection);
  Status request(char op, const std::vector<uint8_t>& body, Deadline deadline, Buffer* answer);
  void send_batches(Deadline deadline);
  void handle_events(std::span<const uint8_t> message);
  void complete(RemoteInstance& instance, const Status& status);
  void fail_all();
  void forget(RemoteInstance& instance);
  unsigned poll(Deadline deadline);

  std::unique_ptr<Connection> connection_;
  std::unordered_map<uint32_t, RemoteInstance*> by_id_;  // agent instance id -> live instance
  std::vector<uint8_t> submits_;        // batched 'S' body (count patched on send)
  std::vector<uint32_t> submit_ids_;
  std::vector<uint8_t> host_results_;   // batched 'H' body
  uint32_t host_result_count_ = 0;
  uint32_t in_flight_ = 0;
  Status broken_;  // set when the connection or the agent failed us
};

}  // namespace outboard::graph
