// Outboard's graph runtime: one frozen graph, instances in flight at once.
// `threads` counts every thread executing tasks: threads - 1 workers plus the
// caller, which executes while it waits (as TBB's caller does).
#include <atomic>
#include <chrono>
#include <span>

#include "bench/graph/workload.h"
#include "outboard/graph.h"

namespace outboard::bench::graph {
namespace og = outboard::graph;

namespace {

void check(const Status& st) {
  if (!st.ok()) throw std::runtime_error(st.to_string());
}

// The seed graph with a real body runs on the built-in engines.
struct EngineTasks {
  og::Sha256Task sha;
  og::CopyTask copy;
};

class OutboardRunner final : public Runner {
 public:
  OutboardRunner(unsigned threads, unsigned engine_threads) {
    Stopwatch t0;
    executor_ = og::Executor::create({.threads = threads - 1, .engine_threads = engine_threads})
                    .value();
    startup_ns_ = t0.wall_ns();
  }
  std::string name() const override { return "outboard"; }
  std::string version() const override { return "0.1.0"; }
  uint64_t startup_ns() const override { return startup_ns_; }

  Measure run(Workload& w, const Cell& cell) override {
    Measure m;
    const Deadline deadline = Deadline::after(std::chrono::seconds(120));
    const uint32_t K = cell.instances;
    Stopwatch t0;
    if (cell.mode == "M1") {
      auto data = w.make_instance(0);
      EngineTasks tasks;
      for (uint32_t k = 0; k < K; ++k) {
        auto g = build(w);
        auto inst = bind(g, w, *data, tasks);
        data->run = k + 1;
        check(executor_->submit(*inst));
        check(executor_->wait(*inst, deadline));
      }
      m.wall_ns = t0.wall_ns(), m.cpu_ns = t0.cpu_ns();
      return m;
    }
    auto g = build(w);
    m.build_ns = t0.wall_ns();
    const uint32_t count = cell.mode == "M3" ? K : cell.mode == "M4" ? std::min(cell.window, K) : 1;
    std::vector<std::unique_ptr<InstanceData>> data;
    std::vector<EngineTasks> tasks(count);
    std::vector<std::unique_ptr<og::Instance>> insts;
    t0 = Stopwatch();
    for (uint32_t i = 0; i < count; ++i) {
      data.push_back(w.make_instance(i));
      insts.push_back(bind(g, w, *data[i], tasks[i]));
    }
    m.create_ns = t0.wall_ns();
    m.state_bytes = g->instance_state_bytes();
    if (cell.record_timeline)
      for (auto& inst : insts) check(inst->enable_timing(true));

    t0 = Stopwatch();
    if (cell.mode == "M3") {
      for (auto& inst : insts) check(executor_->submit(*inst));
      for (auto& inst : insts) check(executor_->wait(*inst, deadline));
    } else if (cell.mode == "sync") {
      for (uint32_t k = 0; k < K; ++k) {
        data[0]->run = k + 1;
        check(executor_->submit(*insts[0]));
        check(executor_->wait(*insts[0], deadline));
      }
    } else if (cell.mode == "M2" || cell.mode == "M4") {
      // Each instance resubmits itself from its completion (Taskflow's
      // run_n) until K runs have started in all.
      std::atomic<uint32_t> started{count}, finished{0};
      for (uint32_t i = 0; i < count; ++i) {
        InstanceData* d = data[i].get();
        check(insts[i]->set_callback([&, d](og::Instance& inst, const Status& st) {
          check(st);
          finished.fetch_add(1, std::memory_order_relaxed);
          if (started.fetch_add(1, std::memory_order_relaxed) < K) {
            d->run++;
            check(executor_->submit(inst));
          }
        }));
      }
      for (auto& inst : insts) check(executor_->submit(*inst));
      while (finished.load(std::memory_order_acquire) < K && !deadline.expired())
        for (auto& inst : insts) (void)executor_->wait(*inst, deadline);
    } else {
      throw std::invalid_argument("unknown mode '" + cell.mode + "'");
    }
    m.wall_ns = t0.wall_ns(), m.cpu_ns = t0.cpu_ns();
    if (cell.record_timeline)
      for (uint32_t i = 0; i < count; ++i) {
        std::span<const og::NodeTiming> t = insts[i]->timing();
        for (uint32_t node = 0; node < t.size(); ++node)
          m.timeline.push_back({i, node, t[node].start_ns, t[node].end_ns});
      }
    return m;
  }

 private:
  std::shared_ptr<og::Graph> build(Workload& w) {
    auto g = og::Graph::create(w.dag().pattern);
    const Dag& dag = w.dag();
    for (uint32_t i = 0; i < dag.size(); ++i) {
      if (w.body() == Body::kSeed && i < 2) {
        check(g->add_engine(i == 0 ? "sha" : "dma", i == 0 ? og::sha256_engine() : og::copy_engine()).status());
        continue;
      }
      check(g->add_user("n" + std::to_string(i), [&w, i](void* d) {
        w.task(*static_cast<InstanceData*>(d), i);
        return Status();
      }).status());
    }
    for (uint32_t i = 0; i < dag.size(); ++i)
      for (uint32_t q : dag.preds[i]) check(g->add_dependency(q, i));
    check(g->freeze());
    return g;
  }

  std::unique_ptr<og::Instance> bind(const std::shared_ptr<og::Graph>& g, Workload& w, InstanceData& d,
                                     EngineTasks& tasks) {
    auto inst = og::Instance::create(g).value();
    for (uint32_t i = 0; i < g->size(); ++i) check(inst->set_data(i, &d));
    if (w.body() == Body::kSeed) {
      tasks.sha = {d.seed->src, sizeof d.seed->src, d.seed->digest};
      tasks.copy = {d.seed->src, d.seed->dst, sizeof d.seed->src};
      check(inst->set_data(0, &tasks.sha));
      check(inst->set_data(1, &tasks.copy));
    }
    return inst;
  }

  std::unique_ptr<og::Executor> executor_;
  uint64_t startup_ns_ = 0;
};

}  // namespace

std::unique_ptr<Runner> make_outboard(unsigned threads, unsigned engine_threads) {
  return std::make_unique<OutboardRunner>(threads, engine_threads);
}

}  // namespace outboard::bench::graph
