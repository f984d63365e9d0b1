// The graph benchmark's workloads, shared by every runtime compared: DAG
// patterns (reference protocol, task-graphs.md §6), task bodies, per-instance
// data, and the correctness checks run on every timed instance.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace outboard::bench::graph {

/// Nodes are numbered in a topological order.
struct Dag {
  std::string pattern;
  std::vector<std::vector<uint32_t>> preds;
  std::vector<std::vector<uint32_t>> levels;  // for thread-per-task by level
  size_t edges = 0;
  uint32_t size() const { return static_cast<uint32_t>(preds.size()); }
};

/// chain, independent, tree (fan-out), fanin (reduction), random (1-4
/// predecessors from the previous 64 nodes, mt19937(42)), seed (2 roots -> sink).
/// Unknown patterns throw std::invalid_argument.
Dag make_dag(const std::string& pattern, uint32_t n);

/// The seed graph's per-instance buffers (SHA-256 of 1 KiB, 1 KiB copy).
struct SeedBuffers {
  uint8_t src[1024];
  uint8_t dst[1024];
  uint8_t digest[32];
  uint8_t expected[32];
};

struct InstanceData {
  std::vector<uint32_t> stamps;  // run number each node last completed
  uint32_t run = 1;
  SeedBuffers* seed = nullptr;  // in seed_storage, or in memory the caller registered
  std::unique_ptr<SeedBuffers> seed_storage;
};

enum class Body { kEmpty, kSpin1us, kSpin10us, kSeed };
Body parse_body(const std::string& name);  // throws std::invalid_argument

/// ns per iteration of the calibrated spin, measured in this process.
double calibrate_spin();

class Workload {
 public:
  /// Spin bodies use `ns_per_iteration` when given (a suite passes one figure
  /// to every process, so all runtimes run the same bodies), else calibrate.
  Workload(Dag dag, Body body, double ns_per_iteration = 0);
  const Dag& dag() const { return dag_; }
  Body body() const { return body_; }
  /// Calibrated duration of one body, ns (0 for empty).
  double body_ns() const { return body_ns_; }

  /// A fresh instance's data (distinct seed payload per `index`), its seed
  /// buffers at `seed_at` when given.
  std::unique_ptr<InstanceData> make_instance(uint64_t index, SeedBuffers* seed_at = nullptr) const;
  /// Task `node` of one instance: checks that its predecessors ran in this
  /// run, does the body, stamps itself, counts.
  void task(InstanceData& d, uint32_t node);
  /// The seed graph's three steps, also used as separate engine tasks.
  void seed_sha(InstanceData& d);
  void seed_copy(InstanceData& d);
  void seed_check(InstanceData& d, uint32_t node);

  uint64_t executed() const { return executed_.load(); }
  uint64_t errors() const { return errors_.load(); }
  void reset_counts() { executed_ = 0, errors_ = 0; }

 private:
  Dag dag_;
  Body body_;
  uint64_t spin_iterations_ = 0;
  double body_ns_ = 0;
  alignas(64) std::atomic<uint64_t> executed_{0};
  alignas(64) std::atomic<uint64_t> errors_{0};
};

struct Cell {
  std::string mode;  // M1 M2 M3 M4 sync
  uint32_t instances = 1;
  unsigned threads = 1;  // threads executing tasks, the caller included
  unsigned window = 8;   // M4
  unsigned engine_threads = 0;
  bool record_timeline = false;  // outboard: per-node start and end of the run, in Measure::timeline
};

/// Wall and process CPU time since construction.
class Stopwatch {
 public:
  Stopwatch();
  [[nodiscard]] uint64_t wall_ns() const;
  [[nodiscard]] uint64_t cpu_ns() const;

 private:
  uint64_t wall0_, cpu0_;
};

/// When one node of one instance ran (now_ns()).
struct Span {
  uint32_t instance, node;
  uint64_t start_ns, end_ns;
};

/// One timed repetition.
struct Measure {
  uint64_t wall_ns = 0;    // executing the K instances (M1: building too)
  std::vector<uint64_t> latency_ns;  // submit to completion per instance, where measured
  uint64_t cpu_ns = 0;     // process CPU time over wall_ns (all threads)
  uint64_t build_ns = 0;   // building the graph(s), outside wall_ns except M1
  uint64_t create_ns = 0;  // creating instances / copies, outside wall_ns
  size_t state_bytes = 0;  // per-instance run state, where the runtime exposes it
  std::vector<Span> timeline;  // with Cell::record_timeline
};

/// A runtime under test. Thread mode: single.
class Runner {
 public:
  virtual ~Runner() = default;
  virtual std::string name() const = 0;
  virtual std::string version() const = 0;
  /// Pool start-up (once per process), ns.
  virtual uint64_t startup_ns() const { return 0; }
  virtual Measure run(Workload& w, const Cell& cell) = 0;
};

std::unique_ptr<Runner> make_outboard(unsigned threads, unsigned engine_threads);
std::unique_ptr<Runner> make_tbb(unsigned threads);
std::unique_ptr<Runner> make_omp(unsigned threads);
std::unique_ptr<Runner> make_pthread();
std::unique_ptr<Runner> make_sequential();
/// The seed graph offloaded to the agent at `address` (graph_offload.h).
std::unique_ptr<Runner> make_offload(const std::string& address);

}  // namespace outboard::bench::graph
