#include "util/budget.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <optional>
#include <string>

#include "util/futex.h"

namespace outboard {

namespace {
// A waiting worker looks at its stop flag this often.
constexpr auto kWorkRecheck = std::chrono::milliseconds(100);

size_t words_bytes(uint32_t slots) { return sizeof(std::atomic<uint64_t>) * (2 * size_t{slots} + 1); }
size_t workers_bytes(uint32_t slots) { return sizeof(std::atomic<uint32_t>) * 3 * size_t{slots}; }
size_t bytes_for(uint32_t slots) {
  return words_bytes(slots) + workers_bytes(slots) +
         sizeof(std::atomic<uint32_t>) * 2 * size_t{slots} * SessionBudget::kHeldKinds;
}

Result<void*> map(int fd, uint32_t slots) {
  void* p = ::mmap(nullptr, bytes_for(slots), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status(Code::kIoError, std::string("mmap of the session budget: ") + std::strerror(errno));
  return p;
}

// Adds `bytes` to `word` unless that passes `cap`; what it held before, or nothing.
std::optional<uint64_t> take(std::atomic<uint64_t>& word, uint64_t bytes, uint64_t cap) {
  const uint64_t before = word.fetch_add(bytes, std::memory_order_relaxed);
  if (before + bytes <= cap && before + bytes >= before) return std::nullopt;
  word.fetch_sub(bytes, std::memory_order_relaxed);
  return before;
}

// Takes up to `n` from `word`, never below 0: a session that crashed between
// its two counts makes the listener give back one its group never took.
void give_back(std::atomic<uint32_t>& word, uint32_t n) {
  uint32_t now = word.load(std::memory_order_relaxed);
  while (!word.compare_exchange_weak(now, now - std::min(now, n), std::memory_order_seq_cst)) {
  }
}
}  // namespace

SessionBudget::SessionBudget(int fd, void* mapped, uint32_t slots, uint64_t limit, Quotas quotas, uint32_t slot,
                             uint32_t group)
    : fd_(fd),
      words_(static_cast<std::atomic<uint64_t>*>(mapped)),
      workers_(reinterpret_cast<std::atomic<uint32_t>*>(static_cast<char*>(mapped) + words_bytes(slots))),
      counts_(workers_ + workers_bytes(slots) / sizeof(std::atomic<uint32_t>)),
      slots_(slots),
      limit_(limit),
      quotas_(quotas),
      slot_(slot),
      group_(group) {}

Result<std::shared_ptr<SessionBudget>> SessionBudget::create(uint64_t limit, Quotas quotas, uint32_t slots) {
  const int fd = ::memfd_create("outboard-session-budget", MFD_CLOEXEC);
  if (fd < 0) return Status(Code::kIoError, std::string("memfd_create: ") + std::strerror(errno));
  if (::ftruncate(fd, static_cast<off_t>(bytes_for(slots))) != 0) {
    Status st(Code::kIoError, std::string("ftruncate of the session budget: ") + std::strerror(errno));
    ::close(fd);
    return st;
  }
  auto mapped = map(fd, slots);
  if (!mapped.ok()) {
    ::close(fd);
    return mapped.status();
  }
  return std::shared_ptr<SessionBudget>(new SessionBudget(fd, mapped.value(), slots, limit, quotas, 0, kNoGroup));
}

Result<std::shared_ptr<SessionBudget>> SessionBudget::attach(int fd, uint64_t limit, Quotas quotas, uint32_t slots,
                                                             uint32_t slot, uint32_t group) {
  if (slot >= slots || (group != kNoGroup && group >= slots))
    return Status(Code::kInvalidArgument, "session budget slot " + std::to_string(slot) + " or group " +
                                              std::to_string(group) + " of " + std::to_string(slots));
  OB_ASSIGN_OR_RETURN(void* mapped, map(fd, slots));
  return std::shared_ptr<SessionBudget>(new SessionBudget(fd, mapped, slots, limit, quotas, slot, group));
}

SessionBudget::~SessionBudget() {
  ::munmap(words_, bytes_for(slots_));
  ::close(fd_);
}

Status SessionBudget::reserve(uint64_t bytes, std::string_view what) {
  auto use = [&] { return std::string(what) + " of " + std::to_string(bytes) + " B: "; };  // only to refuse
  if (auto held = take(words_[1 + slot_], bytes, quotas_.session))
    return {Code::kNoMemory, use() + "this session holds " + std::to_string(*held) + " B of its quota of " +
                                 std::to_string(quotas_.session) + " B (agent option --max-session-memory)"};
  if (group_ != kNoGroup) {
    if (auto held = take(group_word(group_), bytes, quotas_.group)) {
      words_[1 + slot_].fetch_sub(bytes, std::memory_order_relaxed);
      return {Code::kNoMemory, use() + "this client's sessions hold " + std::to_string(*held) + " B of its quota of " +
                                   std::to_string(quotas_.group) + " B (agent option --max-client-memory)"};
    }
  }
  if (auto held = take(words_[0], bytes, limit_)) {
    words_[1 + slot_].fetch_sub(bytes, std::memory_order_relaxed);
    if (group_ != kNoGroup) group_word(group_).fetch_sub(bytes, std::memory_order_relaxed);
    return {Code::kNoMemory, use() + "the agent holds " + std::to_string(*held) + " B of its " + std::to_string(limit_) +
                                 " B for clients (agent option --max-memory)"};
  }
  return {};
}

void SessionBudget::release(uint64_t bytes) {
  words_[1 + slot_].fetch_sub(bytes, std::memory_order_relaxed);
  if (group_ != kNoGroup) group_word(group_).fetch_sub(bytes, std::memory_order_relaxed);
  words_[0].fetch_sub(bytes, std::memory_order_relaxed);
}

bool SessionBudget::begin_work(const std::atomic<bool>& stop, bool& waited) {
  waited = false;
  if (group_ == kNoGroup || quotas_.group_workers == 0) return true;
  std::atomic<uint32_t>& busy = workers_[slots_ + group_];
  std::atomic<uint32_t>& waiters = workers_[2 * slots_ + group_];
  // The session's count first: a crash between the two gives back too much, never too little.
  workers_[slot_].fetch_add(1, std::memory_order_relaxed);
  for (;;) {
    uint32_t now = busy.load(std::memory_order_seq_cst);
    while (now < quotas_.group_workers)
      if (busy.compare_exchange_weak(now, now + 1, std::memory_order_seq_cst)) return true;
    if (stop.load(std::memory_order_relaxed)) {
      workers_[slot_].fetch_sub(1, std::memory_order_relaxed);
      return false;
    }
    waited = true;
    waiters.fetch_add(1, std::memory_order_seq_cst);
    // end_work() reads the waiters after its decrement: one of us sees the other.
    if ((now = busy.load(std::memory_order_seq_cst)) >= quotas_.group_workers)
      futex_wait(busy, now, Deadline::after(kWorkRecheck), FutexScope::kShared);
    waiters.fetch_sub(1, std::memory_order_relaxed);
  }
}

void SessionBudget::end_work() {
  if (group_ == kNoGroup || quotas_.group_workers == 0) return;
  std::atomic<uint32_t>& busy = workers_[slots_ + group_];
  give_back(busy, 1);
  workers_[slot_].fetch_sub(1, std::memory_order_relaxed);
  if (workers_[2 * slots_ + group_].load(std::memory_order_seq_cst) != 0) futex_wake(busy, 1, FutexScope::kShared);
}

uint32_t SessionBudget::quota(Held held) const {
  return group_ == kNoGroup ? 0 : held == Held::kRequests ? quotas_.group_requests : quotas_.group_instances;
}

Status SessionBudget::hold(Held held) {
  const uint32_t cap = quota(held);
  if (cap == 0) return {};
  // The session's count first: a crash between the two gives back too much, never too little.
  count(held, slot_).fetch_add(1, std::memory_order_relaxed);
  std::atomic<uint32_t>& group = count(held, slots_ + group_);
  uint32_t now = group.load(std::memory_order_relaxed);
  while (now < cap)
    if (group.compare_exchange_weak(now, now + 1, std::memory_order_relaxed)) return {};
  count(held, slot_).fetch_sub(1, std::memory_order_relaxed);
  const bool requests = held == Held::kRequests;
  return {Code::kAgain, "this client's connections hold " + std::to_string(now) +
                            (requests ? " outstanding requests" : " graph instances") + " of its quota of " +
                            std::to_string(cap) +
                            (requests ? " (agent option --max-client-requests)"
                                      : " (agent option --max-client-graph-instances)")};
}

void SessionBudget::drop(Held held, uint32_t n) {
  if (quota(held) == 0 || n == 0) return;
  give_back(count(held, slots_ + group_), n);
  count(held, slot_).fetch_sub(n, std::memory_order_relaxed);
}

void SessionBudget::release_slot(uint32_t slot, uint32_t group) {
  if (slot >= slots_) return;
  const uint64_t held = words_[1 + slot].exchange(0, std::memory_order_relaxed);
  if (group < slots_) group_word(group).fetch_sub(held, std::memory_order_relaxed);
  words_[0].fetch_sub(held, std::memory_order_relaxed);
  const uint32_t working = workers_[slot].exchange(0, std::memory_order_relaxed);
  if (group < slots_ && working != 0) {
    give_back(workers_[slots_ + group], working);
    futex_wake(workers_[slots_ + group], INT_MAX, FutexScope::kShared);
  }
  for (uint32_t k = 0; k < kHeldKinds; ++k) {
    const uint32_t n = count(static_cast<Held>(k), slot).exchange(0, std::memory_order_relaxed);
    if (group < slots_) give_back(count(static_cast<Held>(k), slots_ + group), n);
  }
}

}  // namespace outboard
