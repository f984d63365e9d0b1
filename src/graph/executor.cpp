// The executor: per-worker Chase-Lev deques with stealing, continuation of
// the last ready successor on the same thread, join counters only on nodes
// with two or more predecessors, sink counts batched per work item, and
// callers of wait()/progress() executing tasks in a helper slot.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "graph/deque.h"
#include "util/futex.h"
#include "graph/graph_impl.h"
#include "graph/steal.h"
#include "outboard/affinity.h"
#include "outboard/log.h"
#include "util/cpu_relax.h"
#include "util/mutex.h"

OB_LOG_MODULE("graph");

namespace outboard::graph {
namespace detail {

namespace {
constexpr uint32_t kAwake = 0, kSleeping = 1, kNotified = 2;
// A sleeping waiter re-checks for work at least this often (without workers
// it is the executor, and another caller's work may have been left to it).
constexpr auto kIdleRecheck = std::chrono::milliseconds(10);
// A sleeping worker does too; wake-ups, not this, are how work reaches it.
constexpr auto kWorkerRecheck = std::chrono::milliseconds(100);
// progress() returns after this many items so completions get delivered.
constexpr unsigned kProgressBudget = 1u << 16;
// A thief leaves a victim's oldest item to its owner until it has waited its
// patience: taking it at once moves fine-grained work, its join counters and
// its data between cores for nothing (random DAG, run in sequence, 2 threads:
// 51 -> 36 ns per task at a fixed 300 ns). After a steal of roots (a whole
// instance, or half a run of roots: coarse work) the wait for the next item
// runs from that steal, so a thief back from it steals again at once.
// (kStealPatienceNs, steal.h: a thread's first.)
// A fixed patience cost 1 µs bodies ~2% there, as the thief sat out work it
// should have taken. So each thief adapts its own to what its steals bring:
// a stolen item whose chain ran for less than a hand-off (kHandOffNs) doubles
// it, a longer one halves it (empty bodies 36 -> 31.5 ns per task, 1 µs
// bodies 583 -> 570: TBB's 575). The rules are steal.h's.
// A chain's time is not its worth: stealing fine-grained work makes the
// thief's and the victim's tasks contend for the same lines, and that
// slowdown made steals look long and worth more of them (binary tree of
// 256, run in sequence, 2 threads: the median of 300 runs read 28-30 ns per
// task in 6 of 27 processes, 21-22 in the rest; 21-22 in all 27 since). So a
// stolen chain is worth its tasks at the thread's fastest recent pace per
// task, which contention cannot lower. The pace is sampled on one in
// kPaceSampleEvery of a thread's own items and on every steal; "recent" is
// this window of samples and the one before.
constexpr uint32_t kPaceSampleEvery = 256;
constexpr uint32_t kPaceWindow = 256;
// A run of at most this many roots is kept when its engine tasks together
// cost less than a hand-off (kHandOffNs); longer runs are not summed.
constexpr uint32_t kCheapRunMax = 8;
}  // namespace

struct Worker;
struct ExecutorCore;
thread_local ExecutorCore* tls_core = nullptr;
thread_local Worker* tls_worker = nullptr;

struct Worker {
  WorkDeque deque;
  alignas(64) std::atomic<uint32_t> sleep{kAwake};  // futex word
  uint64_t rng = 0;
  // Per victim: the oldest item this thread saw there (or the next one
  // after a steal of roots there), and since when.
  using Seen = detail::Seen;
  std::vector<Seen> seen;
  uint64_t patience_ns = detail::kStealPatienceNs;
  uint64_t stole_at_ns = 0;  // set by a steal of one item, until it has run
  // Fastest ns per task in this window of pace samples and in the last one.
  struct Pace {
    double window_best = 1e300;
    double last_best = 1e300;
    uint32_t samples = 0;
    uint32_t tick = 0;
    double best() const { return std::min(window_best, last_best); }
    void add(double ns_per_task) {
      window_best = std::min(window_best, ns_per_task);
      if (++samples == kPaceWindow) {
        last_best = std::exchange(window_best, 1e300);
        samples = 0;
      }
    }
  } pace;
  std::thread thread;
};

struct ExecutorCore {
  ExecutorConfig config;
  // config.threads workers, then the helper slot for callers of wait/progress.
  std::vector<std::unique_ptr<Worker>> workers;
  Worker* helper = nullptr;
  std::atomic<bool> helper_taken{false};

  Mutex inject_mu;
  ItemRing injected OB_GUARDED_BY(inject_mu);
  std::atomic<uint32_t> injected_size{0};

  alignas(64) std::atomic<uint32_t> sleeping{0};
  std::atomic<uint32_t> searching{0};
  // A caller that executes is asleep in wait() or drain(); cleared by the one
  // push that wakes it, so a stream of pushes costs one wake-up, not many.
  std::atomic<bool> caller_asleep{false};
  std::atomic<bool> stop{false};
  alignas(64) std::atomic<uint32_t> in_flight{0};
  alignas(64) std::atomic<uint32_t> completion_epoch{0};  // futex word for wait()/drain()
  std::atomic<uint32_t> waiters{0};

  Mutex engine_mu;
  std::condition_variable engine_cv;
  ItemRing engine_queue OB_GUARDED_BY(engine_mu);
  bool engine_stop OB_GUARDED_BY(engine_mu) = false;
  std::vector<std::thread> engine_threads;

  Mutex done_mu;
  std::vector<InstanceRun*> done OB_GUARDED_BY(done_mu);
  int event_fd OB_GUARDED_BY(done_mu) = -1;

  // ------------------------------------------------------------ scheduling
  void wake_one() {
    if (sleeping.load(std::memory_order_relaxed) != 0) {
      for (size_t i = 0; i < config.threads; ++i) {
        uint32_t s = kSleeping;
        if (workers[i]->sleep.compare_exchange_strong(s, kNotified)) {
          futex_wake(workers[i]->sleep, 1);
          return;
        }
      }
    }
    if (caller_asleep.load(std::memory_order_relaxed) && caller_asleep.exchange(false)) wake_waiters();
  }

  // Someone would take work handed to them: a worker or caller spinning or asleep.
  bool has_idle() const {
    return sleeping.load(std::memory_order_relaxed) + searching.load(std::memory_order_relaxed) != 0 ||
           caller_asleep.load(std::memory_order_relaxed);
  }

  void wake_waiters() {
    completion_epoch.fetch_add(1, std::memory_order_seq_cst);
    if (waiters.load(std::memory_order_seq_cst) != 0) futex_wake(completion_epoch, INT_MAX);
  }

  void push_injected(const Item& item) {
    {
      MutexLock lock(inject_mu);
      injected.push(item);
      injected_size.store(static_cast<uint32_t>(injected.size()), std::memory_order_relaxed);
    }
    std::atomic_thread_fence(std::memory_order_seq_cst);
    // Without workers, callers sleeping in wait() are the executor: wake all.
    if (config.threads == 0) wake_waiters();
    else wake_one();
  }

  void push(Worker* self, const Item& item) {
    if (self && self->deque.push(item)) {
      // A missed wake-up here costs parallelism, not progress: the pusher
      // runs its own deque dry before it sleeps.
      if (sleeping.load(std::memory_order_relaxed) != 0 || caller_asleep.load(std::memory_order_relaxed)) wake_one();
      return;
    }
    push_injected(item);
  }

  bool pop_injected(Item& out) {
    if (injected_size.load(std::memory_order_relaxed) == 0) return false;
    MutexLock lock(inject_mu);
    if (!injected.pop(out)) return false;
    injected_size.store(static_cast<uint32_t>(injected.size()), std::memory_order_relaxed);
    return true;
  }

  bool find_work(Worker* self, Item& out) {
    if (self && self->deque.pop(out)) return true;
    if (pop_injected(out)) return true;
    size_t n = workers.size();
    size_t start = 0;
    if (self) {
      self->rng ^= self->rng << 13, self->rng ^= self->rng >> 7, self->rng ^= self->rng << 17;
      start = self->rng % n;
    }
    for (size_t i = 0; i < n; ++i) {
      size_t v = (start + i) % n;
      Worker* victim = workers[v].get();
      if (victim == self || (self && !patient_enough(victim->deque, self->seen[v], self->patience_ns))) continue;
      if (victim->deque.steal(out)) {
        if (self && out.last != 0) self->seen[v] = {victim->deque.top(), now_ns()};
        else if (self) self->stole_at_ns = now_ns();
        return true;
      }
    }
    return false;
  }

  static bool patient_enough(const WorkDeque& victim, Worker::Seen& seen, uint64_t patience_ns) {
    const int64_t size = victim.size();
    return size > 0 && detail::patient_enough(size, victim.top(), now_ns(), seen, patience_ns);
  }

  bool has_work() {
    if (injected_size.load(std::memory_order_relaxed) != 0) return true;
    for (auto& w : workers)
      if (!w->deque.empty()) return true;
    return false;
  }

  // ------------------------------------------------------------- execution
  static void fail(InstanceRun* r, NodeId node, const Status& st) {
    bool expected = false;
    if (r->failed.compare_exchange_strong(expected, true, std::memory_order_acq_rel))
      r->error = Status(st.code(), r->layout->nodes[node].name + ": " + st.message());
  }

  static void run_body(InstanceRun* r, NodeId node, const HotNode& h) {
    uint64_t t0 = r->timing_on ? now_ns() : 0;
    Status st;
    try {
      st = h.kind == NodeKind::kUser ? (*h.body)(r->data[node]) : h.engine->run(r->data[node]);
    } catch (const std::exception& e) {
      st = Status(Code::kFailed, std::string("threw: ") + e.what());
    } catch (...) {
      st = Status(Code::kFailed, "threw a non-standard exception");
    }
    if (!st.ok()) fail(r, node, st);
    if (r->timing_on) r->timing[node] = {t0, now_ns()};
  }

  // Marks `node` finished; returns the successor to continue with (others
  // that became ready are pushed), or kNoNode. Sinks are counted in `sinks`.
  NodeId advance(InstanceRun* r, NodeId node, Worker* self, uint32_t& sinks) {
    const GraphLayout& g = *r->layout;
    const HotNode& h = g.hot[node];
    if (h.succ_begin == h.succ_end) {
      ++sinks;
      return kNoNode;
    }
    NodeId next = kNoNode;
    for (uint32_t k = h.succ_begin; k < h.succ_end; ++k) {
      NodeId s = g.succ[k];
      const HotNode& hs = g.hot[s];
      if (hs.counter != kNoCounter) {
        if (r->join[hs.counter].fetch_sub(1, std::memory_order_acq_rel) != 1) continue;
        // Ready: nobody touches this counter again in this run, so reset it
        // for the next one here instead of at submit.
        r->join[hs.counter].store(hs.preds, std::memory_order_relaxed);
      }
      if (next != kNoNode) push(self, {r, next, 0});
      next = s;
    }
    return next;
  }

  // Returns how many nodes it ran.
  uint32_t run_chain(InstanceRun* r, NodeId node, Worker* self, uint32_t& sinks) {
    const GraphLayout& g = *r->layout;
    for (uint32_t tasks = 1;; ++tasks) {
      const HotNode& h = g.hot[node];
      if (!r->failed.load(std::memory_order_relaxed)) {
        // Handed on, not run here.
        if (h.kind == NodeKind::kEngine && !engine_threads.empty()) {
          push_engine({r, node, 0});
          return tasks - 1;
        }
        if (h.kind == NodeKind::kSubgraph) {
          start_sub(r, node, self);
          return tasks - 1;
        }
        if (h.kind == NodeKind::kAsync) {
          if (!start_async(r, node, h)) return tasks;
        } else {
          run_body(r, node, h);
        }
      }
      node = advance(r, node, self, sinks);
      if (node == kNoNode) return tasks;
    }
  }

  // An async node finishing inside its own body is recorded here, so the
  // chain goes on in run_chain instead of recursing through finish().
  struct InlineFinish {
    InstanceRun* run;
    NodeId node;
    bool finished = false;
    Status status;
  };
  static thread_local InlineFinish* tls_inline;

  // Starts an async node; true when it already finished (failed or not).
  bool start_async(InstanceRun* r, NodeId node, const HotNode& h) {
    if (r->timing_on) r->timing[node].start_ns = now_ns();
    InlineFinish inline_finish{r, node};
    InlineFinish* saved = tls_inline;
    tls_inline = &inline_finish;
    Status st;
    try {
      st = (*h.async)(r->data[node], NodeDone(this, r, node));
    } catch (const std::exception& e) {
      st = Status(Code::kFailed, std::string("threw: ") + e.what());
    } catch (...) {
      st = Status(Code::kFailed, "threw a non-standard exception");
    }
    tls_inline = saved;
    if (st.ok() && !inline_finish.finished) return false;
    if (!st.ok() || !inline_finish.status.ok()) fail(r, node, st.ok() ? inline_finish.status : st);
    if (r->timing_on) r->timing[node].end_ns = now_ns();
    return true;
  }

  // An async node finished outside its body, on any thread: its successors
  // run here when this is one of our threads, else they are queued.
  void finish_async(InstanceRun* r, NodeId node, const Status& st) {
    if (InlineFinish* f = tls_inline; f && f->run == r && f->node == node) {
      f->finished = true;
      f->status = st;
      return;
    }
    if (!st.ok()) fail(r, node, st);
    if (r->timing_on) r->timing[node].end_ns = now_ns();
    resume_after(r, node, tls_core == this ? tls_worker : nullptr);
  }

  // `node` finished outside a chain (an async node, a sub-instance, an
  // engine thread's task): the successor it readied continues here when
  // `self` is one of our threads, else it is queued for one.
  void resume_after(InstanceRun* r, NodeId node, Worker* self) {
    uint32_t sinks = 0;
    NodeId next = advance(r, node, self, sinks);
    if (next != kNoNode) {
      if (self) run_chain(r, next, self, sinks);
      else push_injected({r, next, 0});
    }
    if (sinks != 0) finish_sinks(r, sinks, self);
  }

  // execute(), timed now and then for the thread's pace; for a stolen item,
  // the thief's patience adapted to what its chain was worth.
  void run_found(const Item& item, Worker* self) {
    if (!self) return (void)execute(item, self);
    const bool stolen = self->stole_at_ns != 0;
    if (!stolen && ++self->pace.tick % kPaceSampleEvery != 0) return (void)execute(item, self);
    uint64_t t0 = stolen ? std::exchange(self->stole_at_ns, 0) : now_ns();
    uint32_t tasks = execute(item, self);
    if (tasks != 0) self->pace.add(static_cast<double>(now_ns() - t0) / static_cast<double>(tasks));
    if (!stolen) return;
    self->patience_ns = detail::adapted_patience(self->patience_ns, tasks, self->pace.best());
  }

  // Returns how many nodes it ran.
  uint32_t execute(const Item& item, Worker* self) {
    InstanceRun* r = item.run;
    uint32_t sinks = 0;
    uint32_t tasks = 0;
    if (item.last == 0) {
      tasks = run_chain(r, item.first, self, sinks);
    } else {
      uint32_t a = item.first, b = item.last;
      const std::span<const NodeId> roots = r->layout->roots();
      while (a < b) {
        // Hand half of the remaining roots to idle threads.
        if (b - a > 1 && has_idle()) {
          uint32_t mid = a + (b - a) / 2;
          if (worth_handing_off(r, roots.subspan(mid, b - mid))) {
            push(self, {r, mid, b});
            b = mid;
          }
        }
        tasks += run_chain(r, roots[a++], self, sinks);
      }
    }
    if (sinks != 0) finish_sinks(r, sinks, self);
    return tasks;
  }

  // Whether another thread should run these roots: not when they are a few
  // engine tasks that together cost less than moving them there (the seed's
  // 1 KiB copy beside its SHA-256: taken by the other core, its destination
  // then crosses back to the check).
  static bool worth_handing_off(const InstanceRun* r, std::span<const NodeId> roots) {
    if (roots.size() > kCheapRunMax) return true;
    uint64_t ns = 0;
    for (NodeId node : roots) {
      const HotNode& h = r->layout->hot[node];
      if (h.kind != NodeKind::kEngine) return true;
      ns += std::min(h.engine->estimated_ns(r->data[node]), kHandOffNs);
      if (ns >= kHandOffNs) return true;
    }
    return false;
  }

  void finish_sinks(InstanceRun* r, uint32_t sinks, Worker* self) {
    if (r->sinks_left.fetch_sub(sinks, std::memory_order_acq_rel) == sinks) complete(r, self);
  }

  void start(InstanceRun* r, Worker* self) {
    r->failed.store(false, std::memory_order_relaxed);
    r->sinks_left.store(r->layout->sinks, std::memory_order_relaxed);
    Item roots{r, 0, r->layout->root_count};
    if (self) push(self, roots);
    else push_injected(roots);
  }

  void start_sub(InstanceRun* parent, NodeId node, Worker* self) {
    InstanceRun* sub = &parent->subs[node]->run();
    sub->in_flight.store(true, std::memory_order_relaxed);
    start(sub, self);
  }

  void complete(InstanceRun* r, Worker* self) {
    if (InstanceRun* p = r->parent) {
      NodeId node = r->parent_node;
      if (r->failed.load(std::memory_order_relaxed)) fail(p, node, r->error);
      r->in_flight.store(false, std::memory_order_release);
      return resume_after(p, node, self);
    }
    r->result = r->failed.load(std::memory_order_relaxed) ? r->error : Status();
    in_flight.fetch_sub(1, std::memory_order_relaxed);
    if (config.completion == CompletionMode::kQueued) {
      int fd = -1;
      {
        MutexLock lock(done_mu);
        if (done.empty()) fd = event_fd;
        done.push_back(r);
      }
      if (fd >= 0) {
        uint64_t one = 1;
        (void)!::write(fd, &one, sizeof one);
      }
      wake_waiters();
      return;
    }
    deliver(r);
  }

  void deliver(InstanceRun* r) {
    r->in_flight.store(false, std::memory_order_release);
    if (r->callback) {
      Status result = r->result;  // the callback may resubmit, and a new run rewrites it
      r->callback(*r->self, result);
    }
    r->completed.fetch_add(1, std::memory_order_seq_cst);  // last touch of the instance
    wake_waiters();
  }

  unsigned deliver_queued() {
    if (config.completion != CompletionMode::kQueued) return 0;
    std::vector<InstanceRun*> ready;
    {
      MutexLock lock(done_mu);
      if (done.empty()) return 0;
      // Cleared before the list is taken: a completion after this writes again.
      if (event_fd >= 0) {
        uint64_t v;
        (void)!::read(event_fd, &v, sizeof v);
      }
      ready.swap(done);
    }
    for (InstanceRun* r : ready) deliver(r);
    return static_cast<unsigned>(ready.size());
  }

  void push_engine(const Item& item) {
    {
      MutexLock lock(engine_mu);
      engine_queue.push(item);
    }
    engine_cv.notify_one();
  }

  // -------------------------------------------------------------- threads
  void worker_loop(Worker* w, size_t index);
  void engine_loop();
};

thread_local ExecutorCore::InlineFinish* ExecutorCore::tls_inline = nullptr;

void ExecutorCore::worker_loop(Worker* w, size_t index) {
  tls_core = this;
  tls_worker = w;
  w->rng = 0x9e3779b97f4a7c15ull * (index + 1);
  if (!config.cores.empty()) {
    Status st = pin_to_cores({config.cores[index % config.cores.size()]});
    if (!st.ok()) OB_LOG_WARN("worker %zu: %s", index, st.to_string().c_str());
  }
  Item item;
  bool spin_next = true;
  while (!stop.load(std::memory_order_relaxed)) {
    if (find_work(w, item)) {
      spin_next = true;
      run_found(item, w);
      continue;
    }
    searching.fetch_add(1, std::memory_order_relaxed);
    bool found = false;
    // Spin only when work was recent: after a sleep that timed out, go back
    // to sleep at once (an idle pool then costs a wake-up per kWorkerRecheck).
    uint64_t until = spin_next ? now_ns() + uint64_t{config.spin_us} * 1000 : 0;
    while (!stop.load(std::memory_order_relaxed)) {
      if ((found = find_work(w, item))) break;
      if (now_ns() >= until) break;
      for (int i = 0; i < 32; ++i) cpu_relax();
    }
    searching.fetch_sub(1, std::memory_order_relaxed);
    if (found) {
      run_found(item, w);
      continue;
    }
    w->sleep.store(kSleeping, std::memory_order_seq_cst);
    sleeping.fetch_add(1, std::memory_order_seq_cst);
    spin_next = true;
    if (has_work() || stop.load(std::memory_order_seq_cst)) {
      uint32_t s = kSleeping;
      w->sleep.compare_exchange_strong(s, kAwake);
    } else {
      futex_wait(w->sleep, kSleeping, Deadline::after(kWorkerRecheck));
      spin_next = w->sleep.load(std::memory_order_relaxed) == kNotified;
    }
    sleeping.fetch_sub(1, std::memory_order_seq_cst);
    w->sleep.store(kAwake, std::memory_order_relaxed);
  }
}

void ExecutorCore::engine_loop() {
  tls_core = this;
  tls_worker = nullptr;
  for (;;) {
    Item item;
    {
      MutexLock lock(engine_mu);
      while (!engine_stop && engine_queue.empty()) engine_cv.wait(lock.native());
      if (!engine_queue.pop(item)) return;
    }
    InstanceRun* r = item.run;
    if (!r->failed.load(std::memory_order_relaxed)) run_body(r, item.first, r->layout->hot[item.first]);
    resume_after(r, item.first, nullptr);
  }
}

}  // namespace detail

void NodeDone::finish(const Status& status) const { core_->finish_async(run_, node_, status); }

using detail::ExecutorCore;
using detail::InstanceRun;
using detail::Item;
using detail::Worker;

namespace {

// The calling thread's place while it executes tasks: its own worker slot
// when it is one of this executor's threads, else the helper slot if free,
// else none (it then pushes to the shared queue).
class HelperScope {
 public:
  explicit HelperScope(ExecutorCore& core) : core_(core), saved_core_(detail::tls_core), saved_(detail::tls_worker) {
    if (detail::tls_core == &core) {
      worker_ = detail::tls_worker;
    } else if (!core.config.callers_execute) {
      enabled_ = false;
    } else if (!core.helper_taken.exchange(true, std::memory_order_acquire)) {
      worker_ = core.helper;
      owns_ = true;
      detail::tls_core = &core;
      detail::tls_worker = worker_;
    }
  }
  ~HelperScope() {
    if (!owns_) return;
    detail::tls_core = saved_core_;
    detail::tls_worker = saved_;
    core_.helper_taken.store(false, std::memory_order_release);
    if (!worker_->deque.empty()) {
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (core_.config.threads == 0) core_.wake_waiters();
      else core_.wake_one();
    }
  }
  HelperScope(const HelperScope&) = delete;
  HelperScope& operator=(const HelperScope&) = delete;

  /// The slot this thread executes in, or null (then it pushes to the shared queue).
  Worker* worker() const { return enabled_ ? worker_ : nullptr; }

  bool run_one() {
    Item item;
    if (!enabled_) return false;
    if (!core_.find_work(worker_, item)) return false;
    core_.run_found(item, worker_);
    return true;
  }

 private:
  ExecutorCore& core_;
  ExecutorCore* saved_core_;
  Worker* saved_;
  Worker* worker_ = nullptr;
  bool owns_ = false;
  bool enabled_ = true;
};

// Sleeps until a completion (or, without workers, new work) or the deadline.
void idle_wait(ExecutorCore& core, const std::function<bool()>& done, Deadline deadline) {
  // Work is a reason to stop waiting only for a caller that executes it.
  auto wake = [&] { return done() || (core.config.callers_execute && core.has_work()); };
  // A spinning caller that executes counts as searching, so that workers
  // split their root ranges with it as they would with an idle worker.
  const bool searches = core.config.callers_execute;
  if (searches) core.searching.fetch_add(1, std::memory_order_relaxed);
  uint64_t until = now_ns() + uint64_t{core.config.spin_us} * 1000;
  bool woke = false;
  while (!woke && now_ns() < until) {
    woke = wake();
    for (int i = 0; !woke && i < 32; ++i) cpu_relax();
  }
  if (searches) core.searching.fetch_sub(1, std::memory_order_relaxed);
  if (woke) return;
  core.waiters.fetch_add(1, std::memory_order_seq_cst);
  // Set before the last look for work: a push after it wakes this caller.
  if (searches) core.caller_asleep.store(true, std::memory_order_seq_cst);
  uint32_t epoch = core.completion_epoch.load(std::memory_order_seq_cst);
  if (!wake()) {
    Deadline cap = Deadline::after(detail::kIdleRecheck);
    futex_wait(core.completion_epoch, epoch, cap.at() < deadline.at() ? cap : deadline);
  }
  core.waiters.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace

Executor::Executor(std::unique_ptr<ExecutorCore> core) : core_(std::move(core)) {}

Result<std::unique_ptr<Executor>> Executor::create(const ExecutorConfig& config) {
  if (config.threads > kMaxThreads || config.engine_threads > kMaxThreads)
    return Status(Code::kBadConfig, "threads " + std::to_string(config.threads) + " / engine_threads " +
                                        std::to_string(config.engine_threads) + " exceed kMaxThreads " +
                                        std::to_string(kMaxThreads));
  if (config.max_in_flight == 0) return Status(Code::kBadConfig, "max_in_flight must be at least 1");
  if (config.threads == 0 && !config.callers_execute)
    return Status(Code::kBadConfig, "threads 0 needs callers_execute: nothing else would run the tasks");
  auto core = std::make_unique<ExecutorCore>();
  core->config = config;
  for (unsigned i = 0; i <= config.threads; ++i) {
    core->workers.push_back(std::make_unique<Worker>());
    core->workers.back()->seen.resize(config.threads + 1);
  }
  core->helper = core->workers.back().get();
  core->helper->rng = 0x2545f4914f6cdd1dull;
  ExecutorCore* c = core.get();
  for (unsigned i = 0; i < config.threads; ++i)
    c->workers[i]->thread = std::thread([c, i] { c->worker_loop(c->workers[i].get(), i); });
  for (unsigned i = 0; i < config.engine_threads; ++i) c->engine_threads.emplace_back([c] { c->engine_loop(); });
  return std::unique_ptr<Executor>(new Executor(std::move(core)));
}

Executor::~Executor() {
  while (!drain(Deadline::after(std::chrono::seconds(10))).ok())
    OB_LOG_WARN("executor: %u instances still in flight at destruction; waiting", in_flight());
  ExecutorCore& c = *core_;
  c.stop.store(true, std::memory_order_seq_cst);
  for (size_t i = 0; i < c.config.threads; ++i) {
    c.workers[i]->sleep.store(detail::kNotified, std::memory_order_seq_cst);
    futex_wake(c.workers[i]->sleep, 1);
  }
  for (size_t i = 0; i < c.config.threads; ++i) c.workers[i]->thread.join();
  {
    MutexLock lock(c.engine_mu);
    c.engine_stop = true;
  }
  c.engine_cv.notify_all();
  for (auto& t : c.engine_threads) t.join();
  if (c.event_fd >= 0) ::close(c.event_fd);
}

Status Executor::submit(Instance& instance) {
  ExecutorCore& c = *core_;
  InstanceRun* r = &instance.run();
  if (r->parent) return {Code::kInvalidArgument, "a sub-instance runs only as its parent's node"};
  if (r->in_flight.exchange(true, std::memory_order_acq_rel))
    return {Code::kBadState, "instance of graph '" + r->layout->name + "' is already in flight"};
  uint32_t n = c.in_flight.fetch_add(1, std::memory_order_relaxed);
  if (n >= c.config.max_in_flight) {
    c.in_flight.fetch_sub(1, std::memory_order_relaxed);
    r->in_flight.store(false, std::memory_order_release);
    return {Code::kAgain, std::to_string(n) + " instances in flight reach max_in_flight " +
                              std::to_string(c.config.max_in_flight)};
  }
  r->submitted.fetch_add(1, std::memory_order_relaxed);
  // A caller that executes queues the run on its own slot, as TBB's caller
  // spawns into its own deque: it usually waits next and then runs the
  // instance where its data is, while an idle worker still steals it.
  HelperScope helper(c);
  c.start(r, helper.worker());
  return {};
}

Status Executor::wait(Instance& instance, Deadline deadline) {
  ExecutorCore& c = *core_;
  InstanceRun* r = &instance.run();
  const uint32_t target = r->submitted.load(std::memory_order_acquire);
  auto done = [&] {
    return static_cast<int32_t>(r->completed.load(std::memory_order_acquire) - target) >= 0;
  };
  for (;;) {
    {
      HelperScope helper(c);
      while (!done() && helper.run_one()) {
      }
    }
    if (done()) return r->result;
    if (c.deliver_queued() != 0) continue;
    if (deadline.expired())
      return {Code::kTimedOut, "instance of graph '" + r->layout->name + "' still running at the deadline"};
    idle_wait(c, done, deadline);
  }
}

unsigned Executor::progress() {
  ExecutorCore& c = *core_;
  unsigned work = 0;
  {
    HelperScope helper(c);
    while (work < detail::kProgressBudget && helper.run_one()) ++work;
  }
  return work + c.deliver_queued();
}

Result<int> Executor::event_fd() {
  ExecutorCore& c = *core_;
  if (c.config.completion != CompletionMode::kQueued)
    return Status(Code::kBadState, "event_fd needs completion mode kQueued");
  MutexLock lock(c.done_mu);
  if (c.event_fd < 0) {
    c.event_fd = ::eventfd(c.done.empty() ? 0 : 1, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c.event_fd < 0) return Status(Code::kIoError, std::string("eventfd: ") + strerror(errno));
  }
  return c.event_fd;
}

Status Executor::drain(Deadline deadline) {
  ExecutorCore& c = *core_;
  auto done = [&] {
    if (c.in_flight.load(std::memory_order_acquire) != 0) return false;
    MutexLock lock(c.done_mu);
    return c.done.empty();
  };
  for (;;) {
    progress();
    if (done()) return {};
    if (deadline.expired())
      return {Code::kTimedOut, std::to_string(in_flight()) + " instances still in flight at the deadline"};
    idle_wait(c, done, deadline);
  }
}

uint32_t Executor::in_flight() const { return core_->in_flight.load(std::memory_order_acquire); }
const ExecutorConfig& Executor::config() const { return core_->config; }

}  // namespace outboard::graph
