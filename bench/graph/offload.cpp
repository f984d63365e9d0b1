// The seed graph offloaded: SHA-256 and the copy run on the agent (the copy
// a one-sided put into this process's memory, the digest put beside it), the
// check runs here as a host node once both have landed. Payloads are distinct
// per instance and travel with each submit.
#include <algorithm>
#include <cstddef>
#include <stdexcept>

#include "bench/graph/workload.h"
#include "outboard/graph_offload.h"

namespace outboard::bench::graph {
namespace og = outboard::graph;

namespace {

void check(const Status& st) {
  if (!st.ok()) throw std::runtime_error(st.to_string());
}

constexpr int64_t kDeadlineMs = 120000;

class OffloadRunner final : public Runner {
 public:
  explicit OffloadRunner(const std::string& address) {
    Stopwatch t0;
    off_ = og::Offload::connect(address, Deadline::after_ms(kDeadlineMs)).value();
    startup_ns_ = t0.wall_ns();
  }
  std::string name() const override { return "offload"; }
  std::string version() const override { return "0.1.0"; }
  uint64_t startup_ns() const override { return startup_ns_; }

  Measure run(Workload& w, const Cell& cell) override {
    if (w.body() != Body::kSeed) throw std::invalid_argument("runtime offload runs the seed graph with body seed");
    Measure m;
    const Deadline deadline = Deadline::after_ms(kDeadlineMs);
    const uint32_t K = cell.instances;
    const uint32_t count = cell.mode == "M3" ? K : cell.mode == "M4" ? std::min(cell.window, K) : 1;
    if (cell.mode != "M3" && cell.mode != "M4" && cell.mode != "sync")
      throw std::invalid_argument("runtime offload runs modes M3, M4 and sync");
    Stopwatch t0;
    if (!remote_) {
      remote_ = off_->ship(build(w), sizeof(SeedBuffers::src), deadline).value();
      build_ns_ = t0.wall_ns();
    }
    m.build_ns = build_ns_;
    t0 = Stopwatch();
    if (insts_.size() != count) create(w, count, deadline);
    m.create_ns = t0.wall_ns();
    m.state_bytes = 0;

    std::vector<uint64_t> submitted(K), latency;
    latency.reserve(K);
    uint32_t started = 0;
    auto submit = [&](uint32_t i) {
      submitted[started] = now_ns();
      data_[i]->run++;
      check(off_->submit(*insts_[i], {&payload_[i], 1}));
      insts_[i]->user_data = reinterpret_cast<void*>(uintptr_t{started++});
    };
    for (uint32_t i = 0; i < count; ++i)
      insts_[i]->set_callback([&, i](og::RemoteInstance& inst, const Status& st) {
        check(st);
        latency.push_back(now_ns() - submitted[reinterpret_cast<uintptr_t>(inst.user_data)]);
        if (cell.mode == "M4" && started < K) submit(i);  // keep the window full
      });
    t0 = Stopwatch();
    if (cell.mode == "sync") {
      for (uint32_t k = 0; k < K; ++k) {
        submit(0);
        check(off_->wait(*insts_[0], deadline));
      }
    } else {
      for (uint32_t i = 0; i < count; ++i) submit(i);
      check(off_->drain(deadline));
    }
    m.wall_ns = t0.wall_ns(), m.cpu_ns = t0.cpu_ns();
    if (latency.size() != K) throw std::runtime_error("completed " + std::to_string(latency.size()) + " of " + std::to_string(K));
    m.latency_ns = std::move(latency);
    return m;
  }

 private:
  std::shared_ptr<og::Graph> build(Workload& w) {
    auto g = og::Graph::create("seed");
    sha_ = g->add_engine("sha", og::sha256_engine()).value();
    dma_ = g->add_engine("dma", og::copy_engine()).value();
    check_ = g->add_host("check", [&w](void* d) {
                w.seed_check(*static_cast<InstanceData*>(d), 2);
                return Status();
              }).value();
    check(g->add_dependency(sha_, check_));
    check(g->add_dependency(dma_, check_));
    check(g->freeze());
    return g;
  }

  // `count` instances whose seed buffers lie in one registered arena.
  void create(Workload& w, uint32_t count, Deadline deadline) {
    insts_.clear();
    data_.clear();
    payload_.clear();
    arena_.assign(count, SeedBuffers{});
    region_ = off_->connection().register_memory(arena_.data(), arena_.size() * sizeof(SeedBuffers)).value();
    const uint32_t handle = off_->bind(region_, deadline).value();
    for (uint32_t i = 0; i < count; ++i) {
      data_.push_back(w.make_instance(i, &arena_[i]));
      const uint64_t base = uint64_t{i} * sizeof(SeedBuffers);
      std::vector<og::Buffers> b(3);
      b[sha_] = {og::Ref::agent(0, 1024), og::Ref::host(handle, base + offsetof(SeedBuffers, digest), 32)};
      b[dma_] = {og::Ref::agent(0, 1024), og::Ref::host(handle, base + offsetof(SeedBuffers, dst), 1024)};
      insts_.push_back(off_->instantiate(remote_, b, deadline).value());
      check(insts_.back()->set_host_data(check_, data_.back().get()));
      payload_.push_back({0, {arena_[i].src, sizeof arena_[i].src}});
    }
  }

  std::unique_ptr<og::Offload> off_;
  std::shared_ptr<const og::RemoteGraph> remote_;
  og::NodeId sha_ = 0, dma_ = 0, check_ = 0;
  std::vector<SeedBuffers> arena_;
  Region region_;
  std::vector<std::unique_ptr<InstanceData>> data_;
  std::vector<std::unique_ptr<og::RemoteInstance>> insts_;
  std::vector<og::AgentWrite> payload_;
  uint64_t startup_ns_ = 0, build_ns_ = 0;
};

}  // namespace

std::unique_ptr<Runner> make_offload(const std::string& address) { return std::make_unique<OffloadRunner>(address); }

}  // namespace outboard::bench::graph
