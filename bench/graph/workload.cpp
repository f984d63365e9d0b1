#include "bench/graph/workload.h"

#include <sodium.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <stdexcept>

#include "outboard/clock.h"

namespace outboard::bench::graph {

namespace {
constexpr auto kCalibrationWarmup = std::chrono::milliseconds(200);

void spin_iterations(uint64_t iterations) {
  uint64_t x = 0;
  for (uint64_t i = 0; i < iterations; ++i) asm volatile("" : "+r"(x) : "r"(i));
}
}  // namespace

Stopwatch::Stopwatch() : wall0_(now_ns()), cpu0_(process_cpu_ns()) {}
uint64_t Stopwatch::wall_ns() const { return now_ns() - wall0_; }
uint64_t Stopwatch::cpu_ns() const { return process_cpu_ns() - cpu0_; }

Dag make_dag(const std::string& pattern, uint32_t n) {
  Dag d;
  d.pattern = pattern;
  if (pattern == "seed") n = 3;
  if (n == 0) throw std::invalid_argument("n must be at least 1");
  d.preds.resize(n);
  std::mt19937 rng(42);
  for (uint32_t i = 0; i < n; ++i) {
    auto& p = d.preds[i];
    if (pattern == "chain") {
      if (i) p = {i - 1};
    } else if (pattern == "tree") {
      if (i) p = {(i - 1) / 2};
    } else if (pattern == "random") {
      if (i) {
        uint32_t k = 1 + rng() % 4;
        for (uint32_t j = 0; j < k; ++j) {
          uint32_t q = i - 1 - static_cast<uint32_t>(rng() % std::min<uint32_t>(i, 64));
          if (std::find(p.begin(), p.end(), q) == p.end()) p.push_back(q);
        }
      }
    } else if (pattern == "seed") {
      if (i == 2) p = {0, 1};
    } else if (pattern != "independent" && pattern != "fanin") {
      throw std::invalid_argument("unknown pattern '" + pattern + "'");
    }
  }
  if (pattern == "fanin")  // the tree reversed: leaves first, the root last
    for (uint32_t i = 1; i < n; ++i) d.preds[n - 1 - (i - 1) / 2].push_back(n - 1 - i);
  std::vector<uint32_t> level(n, 0);
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t q : d.preds[i]) level[i] = std::max(level[i], level[q] + 1);
    if (level[i] >= d.levels.size()) d.levels.resize(level[i] + 1);
    d.levels[level[i]].push_back(i);
    d.edges += d.preds[i].size();
  }
  return d;
}

Body parse_body(const std::string& name) {
  if (name == "empty") return Body::kEmpty;
  if (name == "1us") return Body::kSpin1us;
  if (name == "10us") return Body::kSpin10us;
  if (name == "seed") return Body::kSeed;
  throw std::invalid_argument("unknown body '" + name + "' (empty, 1us, 10us, seed)");
}

double calibrate_spin() {
  // After kCalibrationWarmup of spinning (a fresh process runs slow at first
  // here, which gave bodies ±15% apart from one process to the next), the
  // fastest of 15 timings of 200k iterations.
  using Clock = std::chrono::steady_clock;
  for (auto end = Clock::now() + kCalibrationWarmup; Clock::now() < end;) spin_iterations(100000);
  double ns_per_iter = 1e9;
  for (int i = 0; i < 15; ++i) {
    auto t0 = Clock::now();
    spin_iterations(200000);
    ns_per_iter = std::min(ns_per_iter, std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / 2e5);
  }
  return ns_per_iter;
}

Workload::Workload(Dag dag, Body body, double ns_per_iteration) : dag_(std::move(dag)), body_(body) {
  if (body_ == Body::kSeed && dag_.pattern != "seed") throw std::invalid_argument("body 'seed' needs pattern 'seed'");
  if (sodium_init() < 0) throw std::runtime_error("libsodium failed to initialise");
  if (body_ == Body::kSpin1us || body_ == Body::kSpin10us) {
    double target = body_ == Body::kSpin1us ? 1000 : 10000;
    if (ns_per_iteration <= 0) ns_per_iteration = calibrate_spin();
    spin_iterations_ = static_cast<uint64_t>(target / ns_per_iteration);
    body_ns_ = double(spin_iterations_) * ns_per_iteration;
  }
}

std::unique_ptr<InstanceData> Workload::make_instance(uint64_t index, SeedBuffers* seed_at) const {
  auto d = std::make_unique<InstanceData>();
  d->stamps.assign(dag_.size(), 0);
  if (body_ == Body::kSeed) {
    if (!seed_at) seed_at = (d->seed_storage = std::make_unique<SeedBuffers>()).get();
    d->seed = seed_at;
    uint64_t x = index * 0x9e3779b97f4a7c15ull + 1;  // a distinct payload per instance
    for (auto& b : d->seed->src) x ^= x << 13, x ^= x >> 7, x ^= x << 17, b = static_cast<uint8_t>(x);
    crypto_hash_sha256(d->seed->expected, d->seed->src, sizeof d->seed->src);
  }
  return d;
}

void Workload::seed_sha(InstanceData& d) {
  crypto_hash_sha256(d.seed->digest, d.seed->src, sizeof d.seed->src);
}
void Workload::seed_copy(InstanceData& d) { std::memcpy(d.seed->dst, d.seed->src, sizeof d.seed->src); }

void Workload::seed_check(InstanceData& d, uint32_t node) {
  bool ok = std::memcmp(d.seed->dst, d.seed->src, sizeof d.seed->src) == 0 &&
            std::memcmp(d.seed->digest, d.seed->expected, 32) == 0;
  if (!ok) errors_.fetch_add(1, std::memory_order_relaxed);
  // Clear the outputs so the next run must produce them again.
  std::memset(d.seed->dst, 0, sizeof d.seed->dst);
  std::memset(d.seed->digest, 0, sizeof d.seed->digest);
  d.stamps[node] = d.run;
  executed_.fetch_add(3, std::memory_order_relaxed);  // the check vouches for all three nodes
}

void Workload::task(InstanceData& d, uint32_t node) {
  if (body_ == Body::kSeed) {
    if (node == 0) seed_sha(d);
    else if (node == 1) seed_copy(d);
    else seed_check(d, node);
    return;
  }
  for (uint32_t q : dag_.preds[node])
    if (d.stamps[q] != d.run) errors_.fetch_add(1, std::memory_order_relaxed);
  if (body_ != Body::kEmpty) spin_iterations(spin_iterations_);
  d.stamps[node] = d.run;
  executed_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace outboard::bench::graph
