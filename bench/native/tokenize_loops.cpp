#include <sys/timerfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "bench/native/loops.h"
#include "bench/native/timing.h"
#include "outboard/checksum.h"
#include "outboard/clock.h"

namespace outboard::bench {
namespace {

double process_cpu_s() { return static_cast<double>(process_cpu_ns()) / 1e9; }

uint64_t ids_checksum(std::span<const int32_t> ids) {
  return checksum({reinterpret_cast<const uint8_t*>(ids.data()), ids.size_bytes()});
}

using SteadyTime = std::chrono::steady_clock::time_point;

// A moment just ahead, so the first arrivals are not already late.
SteadyTime start_soon() { return std::chrono::steady_clock::now() + std::chrono::milliseconds(10); }

// Sleeps until each arrival (as a server sleeps until a request comes in) and
// calls hand_on(i) then; returns the start, in now_ns() time.
template <typename HandOn>
uint64_t dispatch(SteadyTime start, std::span<const double> arrivals_s, HandOn&& hand_on) {
  for (size_t i = 0; i < arrivals_s.size(); ++i) {
    std::this_thread::sleep_until(start + std::chrono::nanoseconds(static_cast<int64_t>(arrivals_s[i] * 1e9)));
    hand_on(i);
  }
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count());
}

// Results recorded by whichever thread finishes request i.
struct Tally {
  explicit Tally(std::span<const double> arrivals_s) : arrivals(arrivals_s), done_ns(arrivals_s.size()) {
    out.checksums.assign(arrivals_s.size(), 0);
  }
  void finish(size_t i, std::span<const int32_t> ids) {
    done_ns[i] = now_ns();
    out.checksums[i] = ids_checksum(ids);
    count(false);
  }
  void fail() { count(true); }
  void count(bool failed) {
    std::lock_guard lock(mu);
    out.failed += failed;
    if (++finished == arrivals.size()) all_done.notify_all();
  }
  bool wait(double timeout_s) {
    std::unique_lock lock(mu);
    return all_done.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return finished == arrivals.size(); });
  }
  OpenLoop result(uint64_t start_ns, double cpu0) {
    out.cpu_s = process_cpu_s() - cpu0;
    uint64_t last = start_ns;
    for (size_t i = 0; i < arrivals.size(); ++i) {
      if (done_ns[i] == 0) continue;  // failed
      last = std::max(last, done_ns[i]);
      out.latency_us.push_back(static_cast<double>(done_ns[i] - start_ns) / 1e3 - arrivals[i] * 1e6);
    }
    out.wall_s = static_cast<double>(last - start_ns) / 1e9;
    return std::move(out);
  }

  std::span<const double> arrivals;
  std::vector<uint64_t> done_ns;  // 0: failed
  OpenLoop out;
  std::mutex mu;
  std::condition_variable all_done;
  size_t finished = 0;
};

Status never_ended(std::string_view placement, Tally& t) {
  size_t finished;
  {
    std::lock_guard lock(t.mu);  // late completions may still count
    finished = t.finished;
  }
  return {Code::kTimedOut, std::string(placement) + " open loop: " + std::to_string(t.arrivals.size() - finished) +
                               " of " + std::to_string(t.arrivals.size()) + " requests never ended"};
}

}  // namespace

OpenLoop open_loop_arrivals(std::span<const double> arrivals_s) {
  const double cpu0 = process_cpu_s();
  const uint64_t start = dispatch(start_soon(), arrivals_s, [](size_t) {});
  OpenLoop out;
  out.cpu_s = process_cpu_s() - cpu0;
  out.wall_s = static_cast<double>(now_ns() - start) / 1e9;
  return out;
}

Result<OpenLoop> open_loop_host(const Tokenizer& tokenizer, std::span<const std::string_view> texts,
                                std::span<const double> arrivals_s, unsigned threads, double timeout_s) {
  if (texts.size() != arrivals_s.size()) return Status(Code::kInvalidArgument, "one text per arrival");
  Tally tally(arrivals_s);
  std::mutex mu;
  std::condition_variable ready;
  std::deque<size_t> queue;
  bool closing = false;
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < std::max(threads, 1u); ++t) {
    pool.emplace_back([&] {
      std::vector<int32_t> ids;
      while (true) {
        size_t i;
        {
          std::unique_lock lock(mu);
          ready.wait(lock, [&] { return closing || !queue.empty(); });
          if (queue.empty()) return;
          i = queue.front();
          queue.pop_front();
        }
        ids.clear();
        if (tokenizer.encode(texts[i], ids).ok()) tally.finish(i, ids);
        else tally.fail();
      }
    });
  }
  const double cpu0 = process_cpu_s();
  const uint64_t start = dispatch(start_soon(), arrivals_s, [&](size_t i) {
    {
      std::lock_guard lock(mu);
      queue.push_back(i);
    }
    ready.notify_one();
  });
  const bool ended = tally.wait(timeout_s);
  {
    std::lock_guard lock(mu);
    closing = true;
  }
  ready.notify_all();
  for (auto& t : pool) t.join();
  if (!ended) return never_ended("host", tally);
  return tally.result(start, cpu0);
}

Result<OpenLoop> open_loop_agent(Connection& c, RemoteTokenizer& tokenizer, std::span<const std::string_view> texts,
                                 std::span<const double> arrivals_s, double timeout_s, bool time_phases) {
  if (texts.size() != arrivals_s.size()) return Status(Code::kInvalidArgument, "one text per arrival");
  // Shared with the completions: should the wait below give up, one may still
  // come (at its request's deadline) after this call has returned.
  struct State {
    explicit State(std::span<const double> arrivals) : tally(arrivals) {}
    Tally tally;
    std::atomic<size_t> completed{0};
    uint64_t completion_cpu_ns = 0;  // the collector's alone
  };
  auto state = std::make_shared<State>(arrivals_s);
  const SteadyTime begin = start_soon();
  // Every request ends by its own deadline; the second is slack for the tick that ends it.
  const Deadline end = Deadline::after(begin - std::chrono::steady_clock::now() +
                                       std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(
                                           (arrivals_s.empty() ? 0 : arrivals_s.back()) + timeout_s + 1)));
  // Completions run on the thread that progresses the connection: this one.
  uint64_t collector_cpu_ns = 0;
  std::thread collector([&c, &state, &collector_cpu_ns, n = texts.size(), end] {
    const uint64_t cpu0 = thread_cpu_ns();
    (void)c.wait_until(end, [&] { return state->completed.load(std::memory_order_relaxed) == n; });
    collector_cpu_ns = thread_cpu_ns() - cpu0;
  });
  const std::thread::id collector_thread = collector.get_id();
  const double cpu0 = process_cpu_s();
  Status submit_failed;
  uint64_t submit_cpu_ns = 0;
  const uint64_t start = dispatch(begin, arrivals_s, [&](size_t i) {
    auto done = [state, i, collector_thread, time_phases](Result<EncodedBatch> r) {
      const bool timed = time_phases && std::this_thread::get_id() == collector_thread;
      const uint64_t t0 = timed ? thread_cpu_ns() : 0;
      if (r.ok() && r.value().errors()[0].ok()) state->tally.finish(i, r.value().ids());
      else state->tally.fail();
      if (timed) state->completion_cpu_ns += thread_cpu_ns() - t0;
      state->completed.fetch_add(1, std::memory_order_relaxed);
    };
    const uint64_t t0 = time_phases ? thread_cpu_ns() : 0;
    Status st = tokenizer.submit(texts.subspan(i, 1), {}, deadline_in(timeout_s), done);
    if (time_phases) submit_cpu_ns += thread_cpu_ns() - t0;
    if (!st.ok()) {
      if (submit_failed.ok()) submit_failed = st;
      state->tally.fail();
      state->completed.fetch_add(1, std::memory_order_relaxed);
    }
  });
  c.wake();  // the last completions may have run here, in submit(): the collector re-checks
  collector.join();
  if (!submit_failed.ok()) return submit_failed;
  if (!state->tally.wait(0)) return never_ended("agent", state->tally);
  OpenLoop out = state->tally.result(start, cpu0);
  if (!time_phases) return out;
  // A completion run by the dispatcher (in its submit) counts as submit CPU.
  out.submit_cpu_s = static_cast<double>(submit_cpu_ns) / 1e9;
  out.completion_cpu_s = static_cast<double>(state->completion_cpu_ns) / 1e9;
  out.wait_cpu_s = static_cast<double>(collector_cpu_ns - std::min(collector_cpu_ns, state->completion_cpu_ns)) / 1e9;
  return out;
}

Result<ArrivalTimer> ArrivalTimer::create() {
  const int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (fd < 0) return Status(Code::kIoError, std::string("timerfd_create: ") + std::strerror(errno));
  return ArrivalTimer(fd);
}

ArrivalTimer::~ArrivalTimer() {
  if (fd_ >= 0) ::close(fd_);
}

Status ArrivalTimer::set(uint64_t monotonic_ns) {
  itimerspec when{};
  when.it_value.tv_sec = static_cast<time_t>(monotonic_ns / 1'000'000'000);
  when.it_value.tv_nsec = static_cast<long>(monotonic_ns % 1'000'000'000);
  if (when.it_value.tv_sec == 0 && when.it_value.tv_nsec == 0) when.it_value.tv_nsec = 1;  // zero would disarm it
  if (timerfd_settime(fd_, TFD_TIMER_ABSTIME, &when, nullptr) != 0)
    return Status(Code::kIoError, std::string("timerfd_settime: ") + std::strerror(errno));
  return {};
}

void ArrivalTimer::clear() {
  uint64_t expirations;
  [[maybe_unused]] ssize_t r = ::read(fd_, &expirations, sizeof expirations);
}

}  // namespace outboard::bench
