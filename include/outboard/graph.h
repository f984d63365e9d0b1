// Task graphs in DOCA Graph's model: a Graph is built once and frozen; each
// Instance carries only per-run state (a join counter per node with two or
// more predecessors, a data pointer per node), so one graph runs any number of
// instances at once; an Executor runs them on a work-stealing pool or inside
// the caller's progress()/wait() calls.
//
//   auto g = graph::Graph::create("seed");
//   auto sha = g->add_engine("sha", graph::sha256_engine()).value();
//   auto dma = g->add_engine("dma", graph::copy_engine()).value();
//   auto check = g->add_user("check", [](void* d) { return verify(d); }).value();
//   g->add_dependency(sha, check); g->add_dependency(dma, check); g->freeze();
//   auto ex = graph::Executor::create({.threads = 2}).value();
//   auto inst = graph::Instance::create(g).value();
//   inst->set_data(sha, &sha_task); ...; ex->submit(*inst); ex->wait(*inst, deadline);
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "outboard/clock.h"
#include "outboard/status.h"

namespace outboard::graph {

namespace detail {
struct GraphLayout;
struct InstanceRun;
struct ExecutorCore;
}  // namespace detail

using NodeId = uint32_t;

/// A user node's body. `data` is what the instance set for this node (or
/// null). An error fails the instance. Runs on a worker or a helping caller.
using UserFn = std::function<Status(void* data)>;

/// Finishes a started async node (Graph::add_async). Copyable; finish() must
/// be called exactly once per start, from any thread (inside the body too),
/// and return before the executor is destroyed.
class NodeDone {
 public:
  /// An error fails the node's instance, as a user node's would.
  void finish(const Status& status) const;
  [[nodiscard]] NodeId node() const { return node_; }

 private:
  friend struct detail::ExecutorCore;
  NodeDone(detail::ExecutorCore* core, detail::InstanceRun* run, NodeId node) : core_(core), run_(run), node_(node) {}
  detail::ExecutorCore* core_;
  detail::InstanceRun* run_;
  NodeId node_;
};

/// An async node's body: starts work that completes elsewhere (a message
/// from a peer, a transfer's completion) and returns; the node finishes when
/// `done.finish()` is called. An error returned fails the node at once, and
/// `done` must then not be used. The instance stays in flight meanwhile.
using AsyncFn = std::function<Status(void* data, NodeDone done)>;

/// Runs one kind of task (a hardware engine on a DPU; a CPU routine here) on
/// the task an instance gives its node. Thread mode: multi (run() is const).
class Engine {
 public:
  virtual ~Engine() = default;
  [[nodiscard]] virtual std::string_view name() const = 0;
  [[nodiscard]] virtual Status run(void* task) const = 0;
  /// Roughly how long run(task) takes, or kUnknownCost. The executor keeps a
  /// task that costs less than handing it to another core (kHandOffNs) on the
  /// thread that has it, where its buffers are.
  [[nodiscard]] virtual uint64_t estimated_ns(const void* task) const;
};

/// Engine::estimated_ns() of a task it cannot size.
inline constexpr uint64_t kUnknownCost = UINT64_MAX;
/// What handing a task to another core costs: the steal, then its buffers'
/// cache lines moving to that core and back to whoever reads them next
/// (about 60 ns a line between the cores of a 2-vCPU VM).
inline constexpr uint64_t kHandOffNs = 1000;

/// sha256_engine()'s task: the digest of src[0, len) is written to digest.
struct Sha256Task {
  const void* src = nullptr;
  size_t len = 0;
  uint8_t* digest = nullptr;  ///< 32 bytes
};
/// copy_engine()'s task (DOCA's DMA memcpy): dst[0, len) = src[0, len).
struct CopyTask {
  const void* src = nullptr;
  void* dst = nullptr;
  size_t len = 0;
};
/// SHA-256 (libsodium).
const Engine& sha256_engine();
/// memcpy standing in for a DMA engine.
const Engine& copy_engine();

enum class NodeKind : uint8_t { kUser, kEngine, kSubgraph, kAsync };

/// Graph limits; exceeding one is an error naming the value and the limit.
inline constexpr uint32_t kMaxNodes = 1u << 24;
inline constexpr size_t kMaxNameBytes = 256;

/// A DAG of nodes. Built by one thread; after freeze() it is immutable and
/// shared by every Instance made from it (thread mode: multi once frozen).
class Graph {
 public:
  static std::shared_ptr<Graph> create(std::string name = "graph");
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  /// kBadState once frozen; kInvalidArgument for a name over kMaxNameBytes;
  /// kTooBig past kMaxNodes.
  [[nodiscard]] Result<NodeId> add_user(std::string name, UserFn body);
  /// A user node that must run in this process when the graph is offloaded
  /// (graph_offload.h); locally it is a user node.
  [[nodiscard]] Result<NodeId> add_host(std::string name, UserFn body);
  /// A node that finishes when its NodeDone does (see AsyncFn).
  [[nodiscard]] Result<NodeId> add_async(std::string name, AsyncFn start);
  /// `engine` must outlive the graph (built-ins are static).
  [[nodiscard]] Result<NodeId> add_engine(std::string name, const Engine& engine);
  /// Runs a sub-instance of `sub` (frozen) as one node; each Instance of this
  /// graph owns a sub-instance, reached with Instance::sub().
  [[nodiscard]] Result<NodeId> add_subgraph(std::string name, std::shared_ptr<const Graph> sub);
  /// `to` starts after `from` finishes. kInvalidArgument for an unknown node,
  /// a self-edge, a repeated edge, or an edge that would close a cycle (the
  /// message names both nodes); kBadState once frozen.
  [[nodiscard]] Status add_dependency(NodeId from, NodeId to);
  /// Validates and fixes the topology. kInvalidArgument for an empty graph.
  [[nodiscard]] Status freeze();

  [[nodiscard]] bool frozen() const;
  [[nodiscard]] const std::string& name() const;
  [[nodiscard]] size_t size() const;
  [[nodiscard]] size_t edges() const;
  [[nodiscard]] const std::string& node_name(NodeId node) const;
  [[nodiscard]] NodeKind node_kind(NodeId node) const;
  [[nodiscard]] bool is_host(NodeId node) const;
  /// The engine of an engine node, the body of a user node (null otherwise).
  [[nodiscard]] const Engine* node_engine(NodeId node) const;
  [[nodiscard]] const UserFn* node_body(NodeId node) const;
  [[nodiscard]] std::span<const NodeId> successors(NodeId node) const;
  /// Bytes of run state each Instance needs (counters and flags, not data).
  [[nodiscard]] size_t instance_state_bytes() const;

  /// Internal: the frozen layout executors run.
  const detail::GraphLayout& layout() const { return *layout_; }

 private:
  explicit Graph(std::string name);
  std::unique_ptr<detail::GraphLayout> layout_;
};

/// Start and end (now_ns()) of one node in the last run, when timing is on.
struct NodeTiming {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
};

/// Called once per run when an instance completes: `status` is OK or the
/// failing node's error, its message prefixed with the node's name.
using CompletionFn = std::function<void(class Instance&, const Status& status)>;

/// One run's state of a frozen graph. Reusable: submit it again after it
/// completed (no allocation). Thread mode: serialized; setters fail with
/// kBadState while it is in flight. Destroying one in flight aborts.
class Instance {
 public:
  /// kBadState unless `graph` is frozen.
  [[nodiscard]] static Result<std::unique_ptr<Instance>> create(std::shared_ptr<const Graph> graph);
  ~Instance();
  Instance(const Instance&) = delete;
  Instance& operator=(const Instance&) = delete;

  /// Per-node data: the user body's argument, the engine's task.
  [[nodiscard]] Status set_data(NodeId node, void* data);
  [[nodiscard]] void* data(NodeId node) const;
  /// The sub-instance a sub-graph node runs (null for other kinds).
  [[nodiscard]] Instance* sub(NodeId node) const;
  [[nodiscard]] Status set_callback(CompletionFn on_complete);
  /// Records NodeTiming per node on the following runs.
  [[nodiscard]] Status enable_timing(bool on);
  [[nodiscard]] std::span<const NodeTiming> timing() const;

  [[nodiscard]] bool in_flight() const;
  /// Result of the last completed run.
  [[nodiscard]] Status status() const;
  [[nodiscard]] const Graph& graph() const;
  /// Opaque pointer for the caller (e.g. a request this instance serves).
  void* user_data = nullptr;

  /// Internal: the run state executors work on.
  detail::InstanceRun& run() { return *run_; }

 private:
  explicit Instance(std::unique_ptr<detail::InstanceRun> run);
  std::unique_ptr<detail::InstanceRun> run_;
};

enum class CompletionMode : uint8_t {
  kInline,  ///< callbacks run on the thread that finishes the instance
  kQueued,  ///< callbacks run inside progress(); event_fd() signals them
};

struct ExecutorConfig {
  /// Worker threads; 0 runs every task inside the caller's progress()/wait().
  unsigned threads = 0;
  /// Threads that run engine nodes only (emulated hardware engines); 0 runs
  /// them on the workers like any node.
  unsigned engine_threads = 0;
  /// Instances submitted and not yet complete; submit() past it is kAgain.
  uint32_t max_in_flight = 1u << 20;
  /// How long an idle worker looks for work before it sleeps. Waking a
  /// sleeping one costs tens of µs on a VM, longer than a burst of small
  /// instances takes: 50 µs left a worker asleep between such bursts.
  uint32_t spin_us = 200;
  CompletionMode completion = CompletionMode::kInline;
  /// Callers of wait()/progress() execute ready tasks (no hand-off to a
  /// sleeping worker). A body they run delays their return past the deadline;
  /// turn it off (with threads > 0) when waits must return on time.
  bool callers_execute = true;
  /// Cores to pin workers to, in order (empty: no pinning).
  std::vector<int> cores;
};

/// Runs instances. Thread mode: multi (submit/wait/progress from any thread).
/// The destructor waits for instances in flight.
class Executor {
 public:
  /// kBadConfig for a config it cannot run (e.g. more threads than kMaxThreads).
  [[nodiscard]] static Result<std::unique_ptr<Executor>> create(const ExecutorConfig& config);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  static constexpr unsigned kMaxThreads = 256;

  /// Starts a run of `instance` (its roots become ready). kBadState if it is
  /// in flight already; kAgain at max_in_flight.
  [[nodiscard]] Status submit(Instance& instance);
  /// Waits for the run of `instance` to complete, executing tasks meanwhile;
  /// returns the run's status, or kTimedOut (the run goes on).
  [[nodiscard]] Status wait(Instance& instance, Deadline deadline);
  /// Executes ready tasks and delivers queued completions; returns how much
  /// work it did (0 when idle).
  unsigned progress();
  /// Readable while queued completions wait for progress() (kQueued only;
  /// kBadState otherwise). Owned by the executor.
  [[nodiscard]] Result<int> event_fd();
  /// Waits until nothing is in flight; kTimedOut otherwise.
  [[nodiscard]] Status drain(Deadline deadline);
  [[nodiscard]] uint32_t in_flight() const;
  [[nodiscard]] const ExecutorConfig& config() const;


 private:
  explicit Executor(std::unique_ptr<detail::ExecutorCore> core);
  std::unique_ptr<detail::ExecutorCore> core_;
};

}  // namespace outboard::graph
