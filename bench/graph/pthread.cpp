// The seed's baselines without their per-thread device set-up: a thread per
// task (created, then joined, level by level), and plain sequential order.
#include <gnu/libc-version.h>
#include <pthread.h>

#include <stdexcept>

#include "bench/graph/workload.h"

namespace outboard::bench::graph {
namespace {

struct TaskArg {
  Workload* w;
  InstanceData* d;
  uint32_t node;
};

void* run_task(void* p) {
  auto* a = static_cast<TaskArg*>(p);
  a->w->task(*a->d, a->node);
  return nullptr;
}

class ThreadPerTask final : public Runner {
 public:
  std::string name() const override { return "pthread"; }
  std::string version() const override { return std::string("glibc ") + gnu_get_libc_version(); }
  Measure run(Workload& w, const Cell& cell) override {
    Measure m;
    auto d = w.make_instance(0);
    std::vector<pthread_t> threads;
    std::vector<TaskArg> args;
    Stopwatch t0;
    for (uint32_t k = 0; k < cell.instances; ++k) {
      d->run = k + 1;
      for (const auto& level : w.dag().levels) {
        threads.resize(level.size());
        args.resize(level.size());
        for (size_t i = 0; i < level.size(); ++i) {
          args[i] = {&w, d.get(), level[i]};
          if (pthread_create(&threads[i], nullptr, run_task, &args[i]) != 0)
            throw std::runtime_error("pthread_create failed");
        }
        for (pthread_t t : threads) pthread_join(t, nullptr);
      }
    }
    m.wall_ns = t0.wall_ns(), m.cpu_ns = t0.cpu_ns();
    return m;
  }
};

class Sequential final : public Runner {
 public:
  std::string name() const override { return "sequential"; }
  std::string version() const override { return "-"; }
  Measure run(Workload& w, const Cell& cell) override {
    Measure m;
    auto d = w.make_instance(0);
    const uint32_t n = w.dag().size();
    Stopwatch t0;
    for (uint32_t k = 0; k < cell.instances; ++k) {
      d->run = k + 1;
      for (uint32_t i = 0; i < n; ++i) w.task(*d, i);
    }
    m.wall_ns = t0.wall_ns(), m.cpu_ns = t0.cpu_ns();
    return m;
  }
};

}  // namespace

std::unique_ptr<Runner> make_pthread() { return std::make_unique<ThreadPerTask>(); }
std::unique_ptr<Runner> make_sequential() { return std::make_unique<Sequential>(); }

}  // namespace outboard::bench::graph
