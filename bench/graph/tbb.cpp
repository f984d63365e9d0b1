// oneTBB flow graph: continue_nodes and make_edge, re-triggered with try_put
// + wait_for_all (the caller joins the arena and executes). A flow graph holds
// per-run state in its nodes, so K concurrent instances need K copies.
#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/version.h>

#include <deque>

#include "bench/graph/workload.h"

namespace outboard::bench::graph {
namespace {

namespace flow = oneapi::tbb::flow;
using Node = flow::continue_node<flow::continue_msg>;

// One copy of the DAG inside a flow graph, bound to one instance's data.
struct Copy {
  flow::broadcast_node<flow::continue_msg> start;
  std::deque<Node> nodes;
  Copy(flow::graph& g, Workload& w, InstanceData& d) : start(g) {
    const Dag& dag = w.dag();
    for (uint32_t i = 0; i < dag.size(); ++i)
      nodes.emplace_back(g, [&w, &d, i](const flow::continue_msg&) { w.task(d, i); });
    for (uint32_t i = 0; i < dag.size(); ++i) {
      if (dag.preds[i].empty()) flow::make_edge(start, nodes[i]);
      for (uint32_t q : dag.preds[i]) flow::make_edge(nodes[q], nodes[i]);
    }
  }
};

class TbbRunner final : public Runner {
 public:
  explicit TbbRunner(unsigned threads)
      : control_(oneapi::tbb::global_control::max_allowed_parallelism, threads) {}
  std::string name() const override { return "tbb"; }
  std::string version() const override {
    return std::to_string(TBB_VERSION_MAJOR) + "." + std::to_string(TBB_VERSION_MINOR);
  }

  Measure run(Workload& w, const Cell& cell) override {
    Measure m;
    const uint32_t K = cell.instances;
    if (cell.mode == "M1") {
      auto data = w.make_instance(0);
      Stopwatch t0;
      for (uint32_t k = 0; k < K; ++k) {
        flow::graph g;
        Copy c(g, w, *data);
        data->run = k + 1;
        c.start.try_put(flow::continue_msg());
        g.wait_for_all();
      }
      m.wall_ns = t0.wall_ns(), m.cpu_ns = t0.cpu_ns();
      return m;
    }
    const uint32_t copies = cell.mode == "M3" ? K : cell.mode == "M4" ? std::min(cell.window, K) : 1;
    flow::graph g;
    std::vector<std::unique_ptr<InstanceData>> data;
    std::deque<Copy> graph_copies;
    Stopwatch t0;
    for (uint32_t i = 0; i < copies; ++i) {
      data.push_back(w.make_instance(i));
      graph_copies.emplace_back(g, w, *data[i]);
    }
    m.build_ns = t0.wall_ns();
    t0 = Stopwatch();
    if (cell.mode == "M3") {
      for (auto& c : graph_copies) c.start.try_put(flow::continue_msg());
      g.wait_for_all();
    } else {
      // M2 and sync alike (the caller participates); M4 in rounds of W.
      for (uint32_t k = 0; k < K; k += copies) {
        for (uint32_t i = 0; i < copies && k + i < K; ++i) {
          data[i]->run = k / copies + 1;
          graph_copies[i].start.try_put(flow::continue_msg());
        }
        g.wait_for_all();
      }
    }
    m.wall_ns = t0.wall_ns(), m.cpu_ns = t0.cpu_ns();
    return m;
  }

 private:
  oneapi::tbb::global_control control_;
};

}  // namespace

std::unique_ptr<Runner> make_tbb(unsigned threads) { return std::make_unique<TbbRunner>(threads); }

}  // namespace outboard::bench::graph
