#include "channel/hub.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "channel/connection_impl.h"
#include "util/net.h"
#include "outboard/log.h"
#include "util/cpu_relax.h"

OB_LOG_MODULE("channel");

namespace outboard::channel {

constexpr uint64_t kTickIntervalNs = 1'000'000;  // request-deadline resolution
constexpr uint64_t kWatchIntervalNs = 50'000;   // liveness (watched sockets) polling while busy
constexpr int kMaxSleepMs = 10;                  // bounds a missed wake-up, and a request deadline's lateness
// With no request deadline to watch a sleep is longer: an idle agent session
// (a process per client) wakes once a second, not 100 times.
constexpr int kIdleSleepMs = 1000;
constexpr unsigned kRingFramesPerRound = 16;     // per ring: one busy peer does not starve the others
constexpr unsigned kUcxRoundsWhileRingsBusy = 4;  // UCX is progressed every this many rounds then

thread_local IdleGaps t_idle_gaps;  // this thread's waits (adaptive spinning)

Result<std::shared_ptr<Hub>> Hub::get(const transport::TransportConfig& transport) {
  static std::mutex mu;
  static std::weak_ptr<Hub> current;
  std::lock_guard lock(mu);
  if (auto hub = current.lock()) return hub;
  OB_ASSIGN_OR_RETURN(auto worker, transport::Worker::process_worker(transport));
  OB_ASSIGN_OR_RETURN(net::Poller watched, net::Poller::create());
  net::Fd epoll_fd(epoll_create1(EPOLL_CLOEXEC));
  net::Fd wake_fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0)
    return Status(Code::kIoError, std::string("pipe2: ") + std::strerror(errno));
  Bell bell{net::Fd(pipe_fds[0]), net::Fd(pipe_fds[1])};
  if (!epoll_fd.valid() || !wake_fd.valid())
    return Status(Code::kIoError, std::string("epoll/eventfd: ") + std::strerror(errno));
  for (int fd : {worker->event_fd(), watched.fd(), wake_fd.get(), bell.read.get()}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
      return Status(Code::kIoError, std::string("epoll_ctl: ") + std::strerror(errno));
  }
  std::shared_ptr<Hub> hub(
      new Hub(std::move(worker), std::move(epoll_fd), std::move(watched), std::move(wake_fd), std::move(bell)));
  current = hub;
  return hub;
}

Hub::Hub(std::shared_ptr<transport::Worker> worker, net::Fd epoll_fd, net::Poller watched, net::Fd wake_fd, Bell bell)
    : worker_(std::move(worker)),
      epoll_fd_(std::move(epoll_fd)),
      watched_(std::move(watched)),
      wake_fd_(std::move(wake_fd)),
      bell_(std::move(bell)) {
  worker_->set_am_handler([this](transport::IncomingAm& am) OB_HUB_LOCKED { on_am(am); });
}

Status Hub::watch(int fd, std::function<void()> on_ready) {
  OB_RETURN_IF_ERROR(watched_.add(fd, std::move(on_ready)));
  watch_due_ = true;  // it may be ready already
  return {};
}

void Hub::unwatch(int fd) { watched_.remove(fd); }

unsigned Hub::poll_watched() {
  watch_due_ = false;
  if (watched_.empty()) return 0;
  const unsigned n = watched_.wait(0);
  if (n == net::Poller::kMaxEvents) watch_due_ = true;  // more may be ready
  return n;
}

Status Hub::arm() {
  if (bell_offered_) {  // else epoll_fd_ stays readable: a sleep here or an event loop polling it would spin
    uint8_t rings[256];  // one byte per ring; a peer that writes more only wakes us more often
    [[maybe_unused]] ssize_t r = ::read(bell_.read.get(), rings, sizeof rings);
  }
  if (has_posted_.load(std::memory_order_acquire)) return {Code::kAgain, "posted work pending"};
  if (!sleep_rings()) return {Code::kAgain, "a frame waits in a ring"};
  Status st = worker_->arm();
  if (!st.ok()) wake_rings();
  return st;
}

bool Hub::sleep_rings() {
  for (Connection::Impl* conn : rings_) {
    if (conn->rx_ring->sleep()) continue;
    wake_rings();  // none stays marked
    return false;
  }
  rings_asleep_ = !rings_.empty();
  return true;
}

void Hub::wake_rings() {
  for (Connection::Impl* conn : rings_) conn->rx_ring->wake();
  rings_asleep_ = false;
}

// Called right after a progress() that found nothing, under the same lock:
// another round here would only repeat its syscalls (UCX polls each TCP
// interface's epoll set per round); arm() refuses if anything arrived since.
void Hub::sleep(int timeout_ms) {
  if (!arm().ok()) return;
  transport::process_mutex.unlock();
  epoll_event events[4];
  const int n = ::epoll_wait(epoll_fd_.get(), events, 4, timeout_ms);
  transport::process_mutex.lock();
  // The watched fds are polled when epoll says one is ready (or it failed),
  // not on every wake-up: an epoll_wait each, twice per answer that woke us.
  for (int i = 0; i < n; ++i) watch_due_ |= events[i].data.fd == watched_.fd();
  if (n < 0) watch_due_ = true;
  next_watch_ns_ = now_ns() + kWatchIntervalNs;
}

void Hub::post(std::function<void()> fn) {
  {
    MutexLock lock(posted_mu_);
    posted_.push_back(std::move(fn));
  }
  wake();
}

unsigned Hub::run_posted() {
  std::vector<std::function<void()>> batch;
  {
    MutexLock lock(posted_mu_);
    batch.swap(posted_);
    has_posted_.store(false, std::memory_order_relaxed);
    uint64_t count;  // reset the eventfd, or the epoll fd stays readable
    [[maybe_unused]] ssize_t r = ::read(wake_fd_.get(), &count, sizeof count);
  }
  for (auto& fn : batch) fn();
  return static_cast<unsigned>(batch.size());
}

uint32_t Hub::add(Connection::Impl* conn) {
  uint32_t id = next_id_++;
  if (id == 0) id = next_id_++;
  conns_[id] = conn;
  return id;
}

void Hub::remove(uint32_t id) { conns_.erase(id); }

void Hub::on_am(transport::IncomingAm& am) {
  // Inside UCX's callback: from ucp_worker_progress, or from a send on the
  // `self` transport (an agent in this process), which delivers at once.
  const bool outer = std::exchange(in_ucx_, true);
  handle_am(am);
  in_ucx_ = outer;
}

unsigned Hub::poll_rings() {
  unsigned n = 0;
  RingFrame frame;
  for (size_t i = 0; i < rings_.size(); ++i) {
    // rings_[i] is read again per frame: handling one may close connections.
    for (unsigned k = 0; k < kRingFramesPerRound && i < rings_.size(); ++k) {
      Connection::Impl* conn = rings_[i];
      const RxRing::Take took = conn->rx_ring->take(frame);
      if (took == RxRing::Take::kNone) break;
      ++n;
      if (conn->counters) ++conn->counters->ring_frames_in;
      if (took == RxRing::Take::kMalformed) {
        fail_ring_owner(*conn, "a frame longer than its ring slot");
        continue;
      }
      transport::IncomingAm am;
      am.header = frame.header();
      am.data = frame.data();
      am.length = frame.data_bytes;
      // As inside UCX's callback: the frame is handled by the same code.
      const bool outer = std::exchange(in_ucx_, true);
      handle_am(am, conn);
      in_ucx_ = outer;
    }
  }
  return n;
}

void Hub::fail_ring_owner(Connection::Impl& owner, const std::string& what) {
  auto conn = owner.shared_from_this();
  OB_LOG_WARN("connection %u: peer wrote %s into its ring", owner.local_id, what.c_str());
  defer([conn, what]() OB_HUB_LOCKED {
    conn->fail(Status(Code::kIoError, "peer " + conn->peer_address + " wrote " + what + " into its ring"));
  });
}

void Hub::handle_am(transport::IncomingAm& am, Connection::Impl* ring_owner) {
  FrameHeader h;
  switch (decode(am.header, h)) {
    case DecodeError::kNone:
      break;
    case DecodeError::kVersion:
      OB_LOG_WARN("dropped a frame of wire version %u (this side speaks %u)", am.header[0], kWireVersion);
      return;
    case DecodeError::kMalformed:
      OB_LOG_WARN("dropped a frame with a malformed %zu B header", am.header.size());
      return;
  }
  if (ring_owner) {
    if (h.dst == ring_owner->local_id && h.type != FrameType::kDoorbell) return ring_owner->on_frame(h, am);
    return fail_ring_owner(*ring_owner, "a frame for connection " + std::to_string(h.dst));
  }
  if (h.type == FrameType::kDoorbell) return;  // its arrival woke us: the rings are polled next
  auto it = conns_.find(h.dst);
  if (it == conns_.end()) {
    OB_LOG_DBG("dropped a frame for unknown connection %u", h.dst);
    return;
  }
  it->second->on_frame(h, am);
}

void Hub::run(Deferred& d) {
  if (d.fn) return d.fn();
  d.conn->deliver_deferred(d.h, std::move(d.data), d.error);
}

unsigned Hub::progress() {
  if (rings_asleep_) wake_rings();
  unsigned n = poll_rings();
  // While rings carry the traffic, UCX (~20 ns a round when idle) only every
  // kUcxRoundsWhileRingsBusy rounds: a shorter round sees the next ring frame
  // sooner, and nothing through UCX waits longer. A frame through UCX makes it
  // every round again.
  if (n != 0) ucx_every_round_ = false;
  if (ucx_every_round_ || polls_ % kUcxRoundsWhileRingsBusy == 0) {
    const unsigned from_ucx = worker_->progress();
    if (from_ucx != 0) ucx_every_round_ = true;
    n += from_ucx;
  }
  if (has_posted_.load(std::memory_order_acquire)) n += run_posted();
  // One at a time from the front: a deferred call may block and progress again, and the nested
  // round goes on with the next ones, so nothing deferred later overtakes them (a connection's
  // frames reach its services in order).
  while (deferred_head_ < deferred_.size()) {
    Deferred d = std::move(deferred_[deferred_head_++]);
    ++n;
    run(d);
  }
  if (!deferred_.empty()) {  // all ran: keep the capacity, no allocation per round
    deferred_.clear();
    deferred_head_ = 0;
  }
  if (!pollers_.empty() && !in_pollers_) run_pollers();
  // The clock is read every 16th round: timers here are tens of
  // microseconds and coarser, and a round that finds nothing is ~50 ns.
  if ((++polls_ & 15) != 0) return n;
  const uint64_t now = clock_ns_ = now_ns();
  if (watch_due_ || now >= next_watch_ns_) {  // by time only: an idle spin must not make a syscall each round
    next_watch_ns_ = now + kWatchIntervalNs;
    n += poll_watched();
  }
  if (now >= next_tick_ns_) {
    next_tick_ns_ = now + kTickIntervalNs;
    auto t = Clock::now();
    std::vector<std::shared_ptr<Connection::Impl>> live;
    for (auto& [id, c] : conns_)
      if (!c->deadlines.empty()) live.push_back(c->shared_from_this());
    for (auto& c : live) c->tick(t);
  }
  return n;
}

bool Hub::deadlines_pending() const {
  for (const auto& [id, c] : conns_)
    if (!c->deadlines.empty()) return true;
  return false;
}

unsigned Hub::progress_until_idle(unsigned max_rounds) {
  unsigned n = 0;
  for (unsigned round = 0, idle = 0; round < max_rounds && idle < kUcxRoundsWhileRingsBusy; ++round) {
    const unsigned got = progress();
    n += got;
    idle = got == 0 ? idle + 1 : 0;
  }
  return n;
}

void Hub::run_pollers() {
  // In place (a poller moves only when one before it has ended): this runs
  // on every round while a peer's puts are awaited, and each round is
  // latency for the next put to be seen.
  in_pollers_ = true;
  size_t kept = 0;
  for (size_t i = 0; i < pollers_.size(); ++i) {
    if (!pollers_[i]()) continue;
    if (kept != i) pollers_[kept] = std::move(pollers_[i]);
    ++kept;
  }
  pollers_.erase(pollers_.begin() + static_cast<ptrdiff_t>(kept), pollers_.end());
  for (auto& poll : added_) pollers_.push_back(std::move(poll));
  added_.clear();
  in_pollers_ = false;
}

bool Hub::wait_until(Deadline deadline, Spin spin, const std::function<bool()>& done) {
  uint64_t spin_end = 0;
  uint64_t idle_since = 0;  // when this wait last went idle; 0: busy since
  bool busy = true;  // so the first clock check starts the spin (no clock read here)
  for (unsigned idle = 0;; ++idle) {
    if (done()) return true;
    if (progress() != 0) {
      if (spin.adaptive && idle_since != 0) t_idle_gaps.learn(now_ns() - idle_since, spin);
      idle_since = 0;
      busy = true;
      idle = 0;
      continue;
    }
    // Every 16th idle round only: the clock, and letting other threads of
    // this process in. Each costs about a round, and a longer round is
    // latency for the next arrival. The clock is the one progress() read
    // within the last 16 rounds.
    if ((idle & 15) != 15) continue;
    const uint64_t now = clock_ns_;
    if (deadline.expired_at(Clock::time_point(std::chrono::nanoseconds(now)))) return false;
    if (busy) {  // busy again: keep polling before sleeping
      spin_end = now + t_idle_gaps.spin_ns(spin);
      idle_since = now;
    }
    busy = false;
    if (now >= spin_end && pollers_.empty()) {
      sleep(std::min(deadline.remaining_ms(), deadlines_pending() ? kMaxSleepMs : kIdleSleepMs));
      continue;
    }
    transport::process_mutex.unlock();
    cpu_relax();
    transport::process_mutex.lock();
  }
}

}  // namespace outboard::channel
