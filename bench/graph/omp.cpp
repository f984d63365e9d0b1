// OpenMP tasks with depend clauses: each instance's DAG is spawned node by
// node in topological order; the runtime orders them by their dependences.
#include <omp.h>

#include <stdexcept>

#include "bench/graph/workload.h"

namespace outboard::bench::graph {
namespace {

void spawn(Workload& w, InstanceData& d) {
  const Dag& dag = w.dag();
  [[maybe_unused]] uint32_t* s = d.stamps.data();  // named in the depend clauses
  for (uint32_t i = 0; i < dag.size(); ++i) {
    const auto& p = dag.preds[i];
    switch (p.size()) {
      case 0:
#pragma omp task depend(out : s[i]) firstprivate(i) shared(w, d)
        w.task(d, i);
        break;
      case 1:
#pragma omp task depend(in : s[p[0]]) depend(out : s[i]) firstprivate(i) shared(w, d)
        w.task(d, i);
        break;
      case 2:
#pragma omp task depend(in : s[p[0]], s[p[1]]) depend(out : s[i]) firstprivate(i) shared(w, d)
        w.task(d, i);
        break;
      case 3:
#pragma omp task depend(in : s[p[0]], s[p[1]], s[p[2]]) depend(out : s[i]) firstprivate(i) shared(w, d)
        w.task(d, i);
        break;
      case 4:
#pragma omp task depend(in : s[p[0]], s[p[1]], s[p[2]], s[p[3]]) depend(out : s[i]) firstprivate(i) shared(w, d)
        w.task(d, i);
        break;
      default:
        throw std::invalid_argument("omp runner: more than 4 predecessors");
    }
  }
}

class OmpRunner final : public Runner {
 public:
  explicit OmpRunner(unsigned threads) : threads_(static_cast<int>(threads)) {}
  std::string name() const override { return "omp"; }
  std::string version() const override { return "libgomp OpenMP " + std::to_string(_OPENMP); }

  Measure run(Workload& w, const Cell& cell) override {
    Measure m;
    const uint32_t K = cell.instances;
    const bool all_at_once = cell.mode == "M3";
    const uint32_t copies = all_at_once ? K : cell.mode == "M4" ? std::min(cell.window, K) : 1;
    std::vector<std::unique_ptr<InstanceData>> data;
    Stopwatch t0;
    for (uint32_t i = 0; i < copies; ++i) data.push_back(w.make_instance(i));
    m.create_ns = t0.wall_ns();
    t0 = Stopwatch();
    // No build step: M1, M2 and sync are the same thing here.
#pragma omp parallel num_threads(threads_)
#pragma omp single
    {
      for (uint32_t k = 0; k < K; k += copies) {
        for (uint32_t i = 0; i < copies && k + i < K; ++i) {
          data[i]->run = k / copies + 1;
          spawn(w, *data[i]);
        }
#pragma omp taskwait
      }
    }
    m.wall_ns = t0.wall_ns(), m.cpu_ns = t0.cpu_ns();
    return m;
  }

 private:
  int threads_;
};

}  // namespace

std::unique_ptr<Runner> make_omp(unsigned threads) { return std::make_unique<OmpRunner>(threads); }

}  // namespace outboard::bench::graph
