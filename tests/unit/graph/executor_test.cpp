// Running instances: every pattern in every thread mode, many instances in
// flight, reuse, failures, sub-graphs, engines, deadlines, completions.
#include <algorithm>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <poll.h>
#include <sodium.h>

#include <gtest/gtest.h>

#include <atomic>
#include <climits>
#include <condition_variable>
#include <mutex>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <thread>

#include "graph/steal.h"
#include "outboard/graph.h"

namespace outboard::graph {
namespace {

Deadline soon() { return Deadline::after(std::chrono::seconds(20)); }



// Per-instance data of a checked graph: each node stamps its slot with the
// run number after checking that all its predecessors stamped theirs.
struct Run {
  explicit Run(size_t n) : stamps(n) {}
  std::vector<std::atomic<uint32_t>> stamps;
  uint32_t run = 0;
  std::atomic<uint64_t> executed{0};
};

struct Checked {
  std::shared_ptr<Graph> graph;
  std::vector<std::vector<NodeId>> preds;
};

enum class Pattern { kChain, kIndependent, kTree, kFanIn, kRandom };

Checked build(Pattern p, uint32_t n) {
  Checked c{Graph::create("pattern"), std::vector<std::vector<NodeId>>(n)};
  std::mt19937 rng(42);
  for (uint32_t i = 0; i < n; ++i) {
    switch (p) {
      case Pattern::kChain: if (i) c.preds[i] = {i - 1}; break;
      case Pattern::kIndependent: break;
      case Pattern::kTree: if (i) c.preds[i] = {(i - 1) / 2}; break;
      case Pattern::kFanIn: break;  // edges below
      case Pattern::kRandom:
        if (i) {
          uint32_t k = 1 + rng() % 4;
          for (uint32_t j = 0; j < k; ++j) {
            NodeId q = i - 1 - rng() % std::min<uint32_t>(i, 64);
            if (std::find(c.preds[i].begin(), c.preds[i].end(), q) == c.preds[i].end()) c.preds[i].push_back(q);
          }
        }
        break;
    }
  }
  if (p == Pattern::kFanIn)  // reversed tree: leaves first, root last
    for (uint32_t i = 1; i < n; ++i) c.preds[n - 1 - (i - 1) / 2].push_back(n - 1 - i);
  for (uint32_t i = 0; i < n; ++i) {
    auto preds = c.preds[i];
    NodeId id = c.graph->add_user("n" + std::to_string(i), [i, preds](void* d) {
      auto* r = static_cast<Run*>(d);
      for (NodeId q : preds)
        if (r->stamps[q].load(std::memory_order_relaxed) != r->run)
          return Status(Code::kFailed, "predecessor " + std::to_string(q) + " has not run");
      r->stamps[i].store(r->run, std::memory_order_relaxed);
      r->executed.fetch_add(1, std::memory_order_relaxed);
      return Status();
    }).value();
    EXPECT_EQ(id, i);
  }
  for (uint32_t i = 0; i < n; ++i)
    for (NodeId q : c.preds[i]) EXPECT_TRUE(c.graph->add_dependency(q, i).ok());
  EXPECT_TRUE(c.graph->freeze().ok());
  return c;
}

struct Bound {
  std::unique_ptr<Instance> instance;
  std::unique_ptr<Run> data;
};

Bound bind(const Checked& c) {
  Bound b{Instance::create(c.graph).value(), std::make_unique<Run>(c.graph->size())};
  for (NodeId n = 0; n < c.graph->size(); ++n) EXPECT_TRUE(b.instance->set_data(n, b.data.get()).ok());
  return b;
}

class Patterns : public ::testing::TestWithParam<std::tuple<Pattern, unsigned>> {};

TEST_P(Patterns, ManyInstancesInFlightAndReusedRunEveryNodeAfterItsPredecessors) {
  auto [pattern, threads] = GetParam();
  Checked c = build(pattern, 1000);
  auto ex = Executor::create({.threads = threads, .spin_us = 5}).value();
  std::vector<Bound> runs;
  for (int i = 0; i < 16; ++i) runs.push_back(bind(c));
  for (uint32_t round = 1; round <= 3; ++round) {
    for (auto& b : runs) {
      b.data->run = round;
      ASSERT_TRUE(ex->submit(*b.instance).ok());
    }
    for (auto& b : runs) {
      Status st = ex->wait(*b.instance, soon());
      ASSERT_TRUE(st.ok()) << st.to_string();
      ASSERT_EQ(b.data->executed.load(), 1000u * round);
    }
  }
  EXPECT_EQ(ex->in_flight(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Graph, Patterns,
                         ::testing::Combine(::testing::Values(Pattern::kChain, Pattern::kIndependent, Pattern::kTree,
                                                              Pattern::kFanIn, Pattern::kRandom),
                                            ::testing::Values(0u, 1u, 2u)));

TEST(Executor, SubmittingTwiceIsRefusedAndTheCapHolds) {
  Checked c = build(Pattern::kChain, 4);
  auto ex = Executor::create({.threads = 0, .max_in_flight = 2}).value();
  Bound a = bind(c), b = bind(c), d = bind(c);
  ASSERT_TRUE(ex->submit(*a.instance).ok());
  Status twice = ex->submit(*a.instance);
  EXPECT_EQ(twice.code(), Code::kBadState);
  EXPECT_EQ(twice.message(), "instance of graph 'pattern' is already in flight");
  EXPECT_EQ(a.instance->set_data(0, nullptr).code(), Code::kBadState);
  ASSERT_TRUE(ex->submit(*b.instance).ok());
  Status full = ex->submit(*d.instance);
  EXPECT_EQ(full.code(), Code::kAgain);
  EXPECT_EQ(full.message(), "2 instances in flight reach max_in_flight 2");
  EXPECT_FALSE(d.instance->in_flight());
  ASSERT_TRUE(ex->drain(soon()).ok());
  EXPECT_EQ(a.data->executed.load(), 4u);
  EXPECT_EQ(b.data->executed.load(), 4u);
  EXPECT_EQ(d.data->executed.load(), 0u);
}

// A failing node: later nodes of its instance never start, the instance
// completes once, naming the node; other instances are untouched.
TEST(Executor, AFailingNodeFailsOnlyItsInstance) {
  for (unsigned threads : {0u, 2u}) {
    auto g = Graph::create("fails");
    std::atomic<int> after{0};
    NodeId a = g->add_user("a", [](void* d) {
      if (d) return Status(Code::kIoError, "disk on fire");
      return Status();
    }).value();
    NodeId t = g->add_user("throws", [](void* d) -> Status {
      if (d) throw std::runtime_error("boom");
      return Status();
    }).value();
    NodeId z = g->add_user("after", [&](void*) {
      after.fetch_add(1);
      return Status();
    }).value();
    ASSERT_TRUE(g->add_dependency(a, z).ok());
    ASSERT_TRUE(g->add_dependency(t, z).ok());
    ASSERT_TRUE(g->freeze().ok());
    auto ex = Executor::create({.threads = threads}).value();
    auto bad = Instance::create(g).value(), thrower = Instance::create(g).value(), good = Instance::create(g).value();
    int flag = 1;
    ASSERT_TRUE(bad->set_data(a, &flag).ok());
    ASSERT_TRUE(thrower->set_data(t, &flag).ok());
    std::atomic<int> callbacks{0};
    Status seen;
    ASSERT_TRUE(bad->set_callback([&](Instance&, const Status& st) {
      seen = st;
      callbacks.fetch_add(1);
    }).ok());
    ASSERT_TRUE(ex->submit(*bad).ok());
    ASSERT_TRUE(ex->submit(*thrower).ok());
    ASSERT_TRUE(ex->submit(*good).ok());
    Status st = ex->wait(*bad, soon());
    EXPECT_EQ(st.code(), Code::kIoError);
    EXPECT_EQ(st.message(), "a: disk on fire");
    Status ts = ex->wait(*thrower, soon());
    EXPECT_EQ(ts.code(), Code::kFailed);
    EXPECT_EQ(ts.message(), "throws: threw: boom");
    EXPECT_TRUE(ex->wait(*good, soon()).ok());
    EXPECT_EQ(after.load(), 1);  // only the good instance reached the join
    EXPECT_EQ(callbacks.load(), 1);
    EXPECT_EQ(seen.message(), "a: disk on fire");
    // The failed instance runs again cleanly once its data is fixed.
    ASSERT_TRUE(bad->set_data(a, nullptr).ok());
    ASSERT_TRUE(ex->submit(*bad).ok());
    EXPECT_TRUE(ex->wait(*bad, soon()).ok());
    EXPECT_EQ(after.load(), 2);
  }
}

TEST(Executor, ABlockingNodeHitsTheDeadlineAndTheRunGoesOn) {
  // a -> {b, c}, both blocking: the worker runs one, the other waits in its
  // queue, work that the waiting thread may not take.
  auto g = Graph::create("blocks");
  std::atomic<bool> release{false};
  auto block = [&](void*) {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return Status();
  };
  NodeId a = g->add_user("a", [](void*) { return Status(); }).value();
  NodeId b = g->add_user("b", block).value(), c = g->add_user("c", block).value();
  ASSERT_TRUE(g->add_dependency(a, b).ok());
  ASSERT_TRUE(g->add_dependency(a, c).ok());
  ASSERT_TRUE(g->freeze().ok());
  // The waiting thread must not pick up the blocking body itself.
  auto ex = Executor::create({.threads = 1, .callers_execute = false}).value();
  auto inst = Instance::create(g).value();
  ASSERT_TRUE(ex->submit(*inst).ok());
  auto t0 = Clock::now();
  uint64_t cpu0 = thread_cpu_ns();
  Status st = ex->wait(*inst, Deadline::after_ms(200));
  EXPECT_EQ(st.code(), Code::kTimedOut);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
  // The waiter slept instead of spinning on the busy worker's queue.
  EXPECT_LT(thread_cpu_ns() - cpu0, 50'000'000u);
  EXPECT_TRUE(inst->in_flight());
  release = true;
  EXPECT_TRUE(ex->wait(*inst, soon()).ok());
  EXPECT_EQ(ex->drain(Deadline::now()).code(), Code::kOk);
}

TEST(Executor, AWaitingCallerIsHandedHalfOfTheRootsAWorkerIsRunning) {
  // Independent 2 ms nodes. The worker takes the root range while the caller
  // is elsewhere; once the caller waits (asleep after a 5 µs spin), the
  // worker hands it half of the roots left, as it would to an idle worker.
  constexpr uint32_t kNodes = 32;
  const auto caller = std::this_thread::get_id();
  std::atomic<uint32_t> by_caller{0}, by_worker{0};
  auto g = Graph::create("roots");
  for (uint32_t i = 0; i < kNodes; ++i)
    ASSERT_TRUE(g->add_user("n" + std::to_string(i), [&](void*) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      (std::this_thread::get_id() == caller ? by_caller : by_worker).fetch_add(1);
      return Status();
    }).ok());
  ASSERT_TRUE(g->freeze().ok());
  auto ex = Executor::create({.threads = 1, .spin_us = 5}).value();
  auto inst = Instance::create(g).value();
  ASSERT_TRUE(ex->submit(*inst).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(ex->wait(*inst, soon()).ok());
  EXPECT_EQ(by_caller + by_worker, kNodes);
  EXPECT_GE(by_caller, kNodes / 8) << "the waiting caller ran " << by_caller << " of " << kNodes;
  EXPECT_GE(by_worker, kNodes / 8);
}

// An engine that records the thread that ran it, spins a while, and says
// what it costs.
class RecordingEngine final : public Engine {
 public:
  RecordingEngine(std::chrono::microseconds spin, uint64_t estimate) : spin_(spin), estimate_(estimate) {}
  std::string_view name() const override { return "recording"; }
  Status run(void* task) const override {
    *static_cast<std::thread::id*>(task) = std::this_thread::get_id();
    for (auto end = std::chrono::steady_clock::now() + spin_; std::chrono::steady_clock::now() < end;) {
    }
    return Status();
  }
  uint64_t estimated_ns(const void*) const override { return estimate_; }

 private:
  std::chrono::microseconds spin_;
  uint64_t estimate_;
};

// Two roots, a long engine task of unknown cost beside a short one that says
// it costs `estimate`, run `runs` times with a worker spinning: how many runs
// ran the short one on another thread than the long one (counting stops at
// `enough`).
int handed_off_runs(uint64_t estimate, int runs, int enough = INT_MAX) {
  RecordingEngine slow(std::chrono::microseconds(500), kUnknownCost), quick(std::chrono::microseconds(0), estimate);
  auto g = Graph::create("two roots");
  NodeId a = g->add_engine("slow", slow).value();
  NodeId b = g->add_engine("quick", quick).value();
  EXPECT_TRUE(g->freeze().ok());
  auto ex = Executor::create({.threads = 1}).value();
  auto inst = Instance::create(g).value();
  std::thread::id ran_on[2];
  EXPECT_TRUE(inst->set_data(a, &ran_on[0]).ok());
  EXPECT_TRUE(inst->set_data(b, &ran_on[1]).ok());
  int apart = 0;
  for (int i = 0; i < runs && apart < enough; ++i) {
    EXPECT_TRUE(ex->submit(*inst).ok());
    EXPECT_TRUE(ex->wait(*inst, soon()).ok());
    apart += ran_on[0] != ran_on[1];
  }
  return apart;
}

TEST(Executor, EngineTasksCheaperThanAHandOffStayWithTheirSiblings) {
  // Taken by the idle worker, the short task's buffers would cross the cores
  // twice for a gain of its few ns.
  EXPECT_EQ(handed_off_runs(kHandOffNs / 10, 20), 0);
  // One that costs more than the move is handed to the idle worker (in some
  // run: on a loaded machine the worker may not be scheduled in time).
  EXPECT_EQ(handed_off_runs(kHandOffNs * 10, 400, 1), 1);
}

// A root that fans out to user nodes spinning `body` each, run `runs` times
// on a worker and the waiting caller: in how many of the runs after the
// first `warmup` some child ran on another thread than the root (counting
// stops at `enough`).
int runs_with_stolen_children(std::chrono::nanoseconds body, int runs, int warmup, int enough = INT_MAX) {
  constexpr int kChildren = 32;  // below the backlog that is stolen at once
  std::thread::id ran_on[kChildren + 1];
  auto g = Graph::create("fan-out");
  auto record = [&](int i) {
    return [&ran_on, i, body](void*) {
      ran_on[i] = std::this_thread::get_id();
      for (auto end = std::chrono::steady_clock::now() + body; std::chrono::steady_clock::now() < end;) {
      }
      return Status();
    };
  };
  NodeId root = g->add_user("root", record(0)).value();
  for (int i = 1; i <= kChildren; ++i) {
    NodeId c = g->add_user("c" + std::to_string(i), record(i)).value();
    EXPECT_TRUE(g->add_dependency(root, c).ok());
  }
  EXPECT_TRUE(g->freeze().ok());
  auto ex = Executor::create({.threads = 1}).value();
  auto inst = Instance::create(g).value();
  int apart = 0;
  for (int r = 0; r < runs && apart < enough; ++r) {
    EXPECT_TRUE(ex->submit(*inst).ok());
    EXPECT_TRUE(ex->wait(*inst, soon()).ok());
    if (r >= warmup) apart += std::any_of(ran_on + 1, ran_on + kChildren + 1, [&](auto id) { return id != ran_on[0]; });
  }
  return apart;
}

// Whether a thief takes a crumb in a given run depends on how the threads
// are scheduled (on 16 cores a bound on such runs failed 6 runs in 10): the
// rules that keep thieves off crumbs are checked as the functions they are.
TEST(StealPolicy, AThiefWaitsItsPatienceForTheSameOldestItemUnlessThereIsABacklog) {
  detail::Seen seen;
  EXPECT_FALSE(detail::patient_enough(0, 5, 1000, seen, 300));  // nothing there
  EXPECT_FALSE(detail::patient_enough(3, 5, 1000, seen, 300));  // first sight of item 5
  EXPECT_FALSE(detail::patient_enough(3, 5, 1299, seen, 300));
  EXPECT_TRUE(detail::patient_enough(3, 5, 1300, seen, 300));
  EXPECT_FALSE(detail::patient_enough(3, 6, 1400, seen, 300));  // the owner took 5: 6 waits from now
  EXPECT_FALSE(detail::patient_enough(3, 6, 1699, seen, 300));
  EXPECT_TRUE(detail::patient_enough(3, 6, 1700, seen, 300));
  detail::Seen fresh;
  EXPECT_TRUE(detail::patient_enough(detail::kStealBacklogItems + 1, 9, 0, fresh, 4000));  // a backlog at once
}

TEST(StealPolicy, CrumbsDoubleAThiefsPatienceAndRealWorkHalvesIt) {
  // 32 empty children at ~30 ns each bring less than a hand-off.
  uint64_t patience = detail::kStealPatienceNs;
  for (int i = 0; i < 10; ++i) patience = detail::adapted_patience(patience, 32, 30.0);
  EXPECT_EQ(patience, detail::kMaxStealPatienceNs);
  // 20 µs children bring real work.
  for (int i = 0; i < 10; ++i) patience = detail::adapted_patience(patience, 1, 20'000.0);
  EXPECT_EQ(patience, detail::kMinStealPatienceNs);
  EXPECT_EQ(detail::adapted_patience(1000, 1, static_cast<double>(kHandOffNs)), 500u);  // exactly a hand-off: worth it
}

TEST(Executor, AnIdleThreadTakesRealWork) {
  // 20 µs children: the idle thread takes some in some run (on a loaded
  // machine it may not be scheduled in time for every one).
  EXPECT_EQ(runs_with_stolen_children(std::chrono::microseconds(20), 400, 10, 1), 1);
}

TEST(Executor, GraphDroppedByItsOwnerLivesWhileInstancesDo) {
  std::atomic<int> ran{0};
  std::unique_ptr<Instance> inst;
  {
    auto g = Graph::create("dropped");
    ASSERT_TRUE(g->add_user("x", [&](void*) {
      ran.fetch_add(1);
      return Status();
    }).ok());
    ASSERT_TRUE(g->freeze().ok());
    inst = Instance::create(g).value();
  }
  auto ex = Executor::create({.threads = 2}).value();
  ASSERT_TRUE(ex->submit(*inst).ok());
  EXPECT_TRUE(ex->wait(*inst, soon()).ok());
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(inst->graph().name(), "dropped");
}

// The seed graph: SHA-256 of 1 KiB and a 1 KiB copy, then a host check.
struct SeedData {
  uint8_t src[1024], dst[1024], digest[32], expected[32];
  Sha256Task sha{src, sizeof src, digest};
  CopyTask copy{src, dst, sizeof src};
};

std::shared_ptr<Graph> seed_graph() {
  auto g = Graph::create("seed");
  NodeId sha = g->add_engine("sha", sha256_engine()).value();
  NodeId dma = g->add_engine("dma", copy_engine()).value();
  NodeId check = g->add_user("check", [](void* d) {
    auto* s = static_cast<SeedData*>(d);
    if (std::memcmp(s->src, s->dst, sizeof s->src) != 0) return Status(Code::kFailed, "copy differs");
    if (std::memcmp(s->digest, s->expected, 32) != 0) return Status(Code::kFailed, "digest differs");
    return Status();
  }).value();
  EXPECT_TRUE(g->add_dependency(sha, check).ok());
  EXPECT_TRUE(g->add_dependency(dma, check).ok());
  EXPECT_TRUE(g->freeze().ok());
  return g;
}

TEST(Executor, SeedGraphOnEngineThreadsAndOnWorkers) {
  auto g = seed_graph();
  for (unsigned engines : {0u, 2u}) {
    auto ex = Executor::create({.threads = 1, .engine_threads = engines}).value();
    std::vector<std::unique_ptr<SeedData>> data;
    std::vector<std::unique_ptr<Instance>> insts;
    for (int i = 0; i < 300; ++i) {
      auto d = std::make_unique<SeedData>();
      std::memset(d->src, i + 1, sizeof d->src);
      crypto_hash_sha256(d->expected, d->src, sizeof d->src);
      auto inst = Instance::create(g).value();
      ASSERT_TRUE(inst->set_data(0, &d->sha).ok());
      ASSERT_TRUE(inst->set_data(1, &d->copy).ok());
      ASSERT_TRUE(inst->set_data(2, d.get()).ok());
      ASSERT_TRUE(ex->submit(*inst).ok());
      data.push_back(std::move(d));
      insts.push_back(std::move(inst));
    }
    for (auto& inst : insts) ASSERT_TRUE(ex->wait(*inst, soon()).ok());
    // A wrong expectation is caught by the check node.
    data[0]->expected[0] ^= 1;
    ASSERT_TRUE(ex->submit(*insts[0]).ok());
    EXPECT_EQ(ex->wait(*insts[0], soon()).message(), "check: digest differs");
  }
}

TEST(Executor, SubgraphRunsAsOneNodeAndReportsInnerFailures) {
  auto inner = Graph::create("inner");
  NodeId i0 = inner->add_user("i0", [](void* d) {
    if (d && *static_cast<int*>(d) < 0) return Status(Code::kInvalidArgument, "negative");
    if (d) ++*static_cast<int*>(d);
    return Status();
  }).value();
  NodeId i1 = inner->add_user("i1", [](void* d) {
    if (d) *static_cast<int*>(d) *= 10;
    return Status();
  }).value();
  ASSERT_TRUE(inner->add_dependency(i0, i1).ok());
  ASSERT_TRUE(inner->freeze().ok());
  auto outer = Graph::create("outer");
  NodeId s = outer->add_subgraph("sub", inner).value();
  NodeId last = outer->add_user("last", [](void* d) {
    *static_cast<int*>(d) += 5;
    return Status();
  }).value();
  ASSERT_TRUE(outer->add_dependency(s, last).ok());
  ASSERT_TRUE(outer->freeze().ok());
  for (unsigned threads : {0u, 2u}) {
    auto ex = Executor::create({.threads = threads}).value();
    auto inst = Instance::create(outer).value();
    int value = 1;
    ASSERT_NE(inst->sub(s), nullptr);
    EXPECT_EQ(inst->sub(last), nullptr);
    ASSERT_TRUE(inst->sub(s)->set_data(i0, &value).ok());
    ASSERT_TRUE(inst->sub(s)->set_data(i1, &value).ok());
    ASSERT_TRUE(inst->set_data(last, &value).ok());
    EXPECT_EQ(ex->submit(*inst->sub(s)).code(), Code::kInvalidArgument);
    ASSERT_TRUE(ex->submit(*inst).ok());
    ASSERT_TRUE(ex->wait(*inst, soon()).ok());
    EXPECT_EQ(value, (1 + 1) * 10 + 5);
    value = -3;
    ASSERT_TRUE(ex->submit(*inst).ok());
    Status st = ex->wait(*inst, soon());
    EXPECT_EQ(st.code(), Code::kInvalidArgument);
    EXPECT_EQ(st.message(), "sub: i0: negative");
    EXPECT_EQ(value, -3);  // neither i1 nor last ran
  }
}

TEST(Executor, QueuedCompletionsSignalTheEventFd) {
  Checked c = build(Pattern::kTree, 63);
  auto ex = Executor::create({.threads = 2, .completion = CompletionMode::kQueued}).value();
  int fd = ex->event_fd().value();
  std::vector<Bound> runs;
  std::atomic<int> delivered{0};
  std::thread::id progress_thread = std::this_thread::get_id();
  bool on_progress_thread = true;
  for (int i = 0; i < 20; ++i) {
    runs.push_back(bind(c));
    runs.back().data->run = 1;
    ASSERT_TRUE(runs.back().instance->set_callback([&](Instance&, const Status& st) {
      EXPECT_TRUE(st.ok());
      on_progress_thread &= std::this_thread::get_id() == progress_thread;
      delivered.fetch_add(1);
    }).ok());
    ASSERT_TRUE(ex->submit(*runs.back().instance).ok());
  }
  auto deadline = soon();
  while (delivered.load() < 20 && !deadline.expired()) {
    pollfd p{fd, POLLIN, 0};
    ASSERT_GE(::poll(&p, 1, 1000), 0);
    ex->progress();
  }
  EXPECT_EQ(delivered.load(), 20);
  EXPECT_TRUE(on_progress_thread);
  pollfd p{fd, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0);  // nothing left to deliver: not readable
  auto inline_ex = Executor::create({.threads = 0}).value();
  EXPECT_EQ(inline_ex->event_fd().status().code(), Code::kBadState);
  EXPECT_EQ(Executor::create({.threads = 0, .callers_execute = false}).status().code(), Code::kBadConfig);
}

TEST(Executor, ResubmittingFromTheCallbackAndThreadsSubmittingAtOnce) {
  Checked c = build(Pattern::kRandom, 200);
  auto ex = Executor::create({.threads = 2, .spin_us = 5}).value();
  std::vector<std::thread> submitters;
  std::atomic<int> failures{0};
  for (int t = 0; t < 3; ++t)
    submitters.emplace_back([&] {
      Bound b = bind(c);
      std::atomic<uint32_t> left{50};
      ASSERT_TRUE(b.instance->set_callback([&](Instance& inst, const Status& st) {
        if (!st.ok()) failures.fetch_add(1);
        if (left.fetch_sub(1) > 1) {
          b.data->run++;
          if (!ex->submit(inst).ok()) failures.fetch_add(1);
        }
      }).ok());
      b.data->run = 1;
      ASSERT_TRUE(ex->submit(*b.instance).ok());
      auto deadline = soon();
      while (left.load() != 0 && !deadline.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ASSERT_TRUE(ex->wait(*b.instance, soon()).ok());
      EXPECT_EQ(b.data->executed.load(), 50u * 200u);
    });
  for (auto& t : submitters) t.join();
  EXPECT_EQ(failures.load(), 0);
}

// Async nodes finished from a foreign thread (as a message handler would),
// inline in their body, and with errors, under every thread mode.
class AsyncNodes : public ::testing::TestWithParam<unsigned> {};

TEST_P(AsyncNodes, FinishLaterInlineOrWithAnErrorAndSuccessorsWaitForThem) {
  // a (async, finished by the completer thread) -> b (async, inline) -> c (user)
  struct Data {
    std::atomic<int> step{0};
    bool fail_late = false;
    bool fail_early = false;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<NodeDone> queue;
  std::vector<std::thread> failers;  // joined before the executor goes: finish() may still be inside it
  bool stop = false;
  std::thread completer([&] {
    std::unique_lock lock(mu);
    while (true) {
      cv.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;
      auto batch = std::move(queue);
      queue.clear();
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // the peer takes a while
      for (auto& done : batch) done.finish({});
      lock.lock();
    }
  });
  auto g = Graph::create("async");
  NodeId a = g->add_async("a", [&](void* d, NodeDone done) {
                 auto* data = static_cast<Data*>(d);
                 EXPECT_EQ(data->step.exchange(1), 0);
                 if (data->fail_early) return Status(Code::kIoError, "refused");
                 if (data->fail_late) {
                   std::lock_guard lock(mu);
                   failers.emplace_back([done] { done.finish({Code::kConnectionReset, "peer left"}); });
                   return Status();
                 }
                 std::lock_guard lock(mu);
                 queue.push_back(done);
                 cv.notify_one();
                 return Status();
               }).value();
  NodeId b = g->add_async("b", [](void* d, NodeDone done) {
                 EXPECT_EQ(static_cast<Data*>(d)->step.exchange(2), 1);  // a finished before b started
                 done.finish({});
                 return Status();
               }).value();
  NodeId c = g->add_user("c", [](void* d) {
                 EXPECT_EQ(static_cast<Data*>(d)->step.exchange(3), 2);
                 return Status();
               }).value();
  ASSERT_TRUE(g->add_dependency(a, b).ok());
  ASSERT_TRUE(g->add_dependency(b, c).ok());
  ASSERT_TRUE(g->freeze().ok());
  auto ex = Executor::create({.threads = GetParam()}).value();

  constexpr int kInstances = 64;
  std::vector<std::unique_ptr<Instance>> insts;
  std::vector<Data> data(kInstances);
  for (int round = 0; round < 3; ++round) {
    insts.clear();
    for (int i = 0; i < kInstances; ++i) {
      data[i].step = 0;
      data[i].fail_late = round == 1 && i % 4 == 1;
      data[i].fail_early = round == 2 && i % 4 == 2;
      insts.push_back(Instance::create(g).value());
      for (NodeId n : {a, b, c}) ASSERT_TRUE(insts.back()->set_data(n, &data[i]).ok());
      ASSERT_TRUE(insts.back()->enable_timing(true).ok());
      ASSERT_TRUE(ex->submit(*insts.back()).ok());
    }
    for (int i = 0; i < kInstances; ++i) {
      Status st = ex->wait(*insts[i], soon());
      if (data[i].fail_late) {
        EXPECT_EQ(st.code(), Code::kConnectionReset);
        EXPECT_EQ(st.message(), "a: peer left");
        EXPECT_EQ(data[i].step, 1);  // nothing after a started
      } else if (data[i].fail_early) {
        EXPECT_EQ(st.message(), "a: refused");
        EXPECT_EQ(data[i].step, 1);
      } else {
        ASSERT_TRUE(st.ok()) << st.to_string();
        EXPECT_EQ(data[i].step, 3);
        auto t = insts[i]->timing();
        EXPECT_GE(t[a].end_ns - t[a].start_ns, 200'000u) << "a ends when the completer finishes it";
        EXPECT_LE(t[a].end_ns, t[b].start_ns);
        EXPECT_LE(t[b].end_ns, t[c].start_ns);
      }
    }
  }
  EXPECT_EQ(ex->in_flight(), 0u);
  {
    std::lock_guard lock(mu);
    stop = true;
  }
  for (auto& t : failers) t.join();
  cv.notify_one();
  completer.join();
}

INSTANTIATE_TEST_SUITE_P(Threads, AsyncNodes, ::testing::Values(0u, 1u, 2u));

TEST(Executor, TimingRecordsEveryNodeInOrder) {
  Checked c = build(Pattern::kChain, 10);
  auto ex = Executor::create({.threads = 1}).value();
  Bound b = bind(c);
  ASSERT_TRUE(b.instance->enable_timing(true).ok());
  b.data->run = 1;
  ASSERT_TRUE(ex->submit(*b.instance).ok());
  ASSERT_TRUE(ex->wait(*b.instance, soon()).ok());
  auto t = b.instance->timing();
  ASSERT_EQ(t.size(), 10u);
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_LE(t[i].start_ns, t[i].end_ns);
    if (i) {
      EXPECT_LE(t[i - 1].end_ns, t[i].start_ns);
    }
  }
}

long rss_kb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

TEST(Executor, AMillionRunsBackToBackDoNotGrowMemory) {
  auto g = Graph::create("tiny");
  std::atomic<uint64_t> count{0};
  auto body = [&](void*) {
    count.fetch_add(1, std::memory_order_relaxed);
    return Status();
  };
  NodeId a = g->add_user("a", body).value(), b = g->add_user("b", body).value(), j = g->add_user("j", body).value();
  ASSERT_TRUE(g->add_dependency(a, j).ok());
  ASSERT_TRUE(g->add_dependency(b, j).ok());
  ASSERT_TRUE(g->freeze().ok());
  auto ex = Executor::create({.threads = 0}).value();
  std::vector<std::unique_ptr<Instance>> window;
  for (int i = 0; i < 8; ++i) window.push_back(Instance::create(g).value());
  constexpr int kRuns = 1000000;
  long before = 0;
  for (int i = 0; i < kRuns / 8; ++i) {
    for (auto& inst : window) ASSERT_TRUE(ex->submit(*inst).ok());
    for (auto& inst : window) ASSERT_TRUE(ex->wait(*inst, soon()).ok());
    if (i == kRuns / 80) before = rss_kb();  // after warm-up
  }
  EXPECT_EQ(count.load(), 3ull * kRuns);
  EXPECT_LE(rss_kb() - before, 64) << "RSS grew from " << before << " kB";
}

}  // namespace
}  // namespace outboard::graph
