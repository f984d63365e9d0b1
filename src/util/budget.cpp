#include "util/budget.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>

namespace outboard {

namespace {
size_t bytes_for(uint32_t slots) { return sizeof(std::atomic<uint64_t>) * (2 * size_t{slots} + 1); }

Result<std::atomic<uint64_t>*> map(int fd, uint32_t slots) {
  void* p = ::mmap(nullptr, bytes_for(slots), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status(Code::kIoError, std::string("mmap of the memory budget: ") + std::strerror(errno));
  return static_cast<std::atomic<uint64_t>*>(p);
}

// Adds `bytes` to `word` unless that passes `cap`; what it held before, or nothing.
std::optional<uint64_t> take(std::atomic<uint64_t>& word, uint64_t bytes, uint64_t cap) {
  const uint64_t before = word.fetch_add(bytes, std::memory_order_relaxed);
  if (before + bytes <= cap && before + bytes >= before) return std::nullopt;
  word.fetch_sub(bytes, std::memory_order_relaxed);
  return before;
}
}  // namespace

Result<std::shared_ptr<MemoryBudget>> MemoryBudget::create(uint64_t limit, Quotas quotas, uint32_t slots) {
  const int fd = ::memfd_create("outboard-memory-budget", MFD_CLOEXEC);
  if (fd < 0) return Status(Code::kIoError, std::string("memfd_create: ") + std::strerror(errno));
  if (::ftruncate(fd, static_cast<off_t>(bytes_for(slots))) != 0) {
    Status st(Code::kIoError, std::string("ftruncate of the memory budget: ") + std::strerror(errno));
    ::close(fd);
    return st;
  }
  auto words = map(fd, slots);
  if (!words.ok()) {
    ::close(fd);
    return words.status();
  }
  return std::shared_ptr<MemoryBudget>(new MemoryBudget(fd, words.value(), slots, limit, quotas, 0, kNoGroup));
}

Result<std::shared_ptr<MemoryBudget>> MemoryBudget::attach(int fd, uint64_t limit, Quotas quotas, uint32_t slots,
                                                           uint32_t slot, uint32_t group) {
  if (slot >= slots || (group != kNoGroup && group >= slots))
    return Status(Code::kInvalidArgument, "memory budget slot " + std::to_string(slot) + " or group " +
                                              std::to_string(group) + " of " + std::to_string(slots));
  OB_ASSIGN_OR_RETURN(auto* words, map(fd, slots));
  return std::shared_ptr<MemoryBudget>(new MemoryBudget(fd, words, slots, limit, quotas, slot, group));
}

MemoryBudget::~MemoryBudget() {
  ::munmap(words_, bytes_for(slots_));
  ::close(fd_);
}

Status MemoryBudget::reserve(uint64_t bytes, std::string_view what) {
  const std::string use = std::string(what) + " of " + std::to_string(bytes) + " B: ";
  if (auto held = take(words_[1 + slot_], bytes, quotas_.session))
    return {Code::kNoMemory, use + "this session holds " + std::to_string(*held) + " B of its quota of " +
                                 std::to_string(quotas_.session) + " B (agent option --max-session-memory)"};
  if (group_ != kNoGroup) {
    if (auto held = take(group_word(group_), bytes, quotas_.group)) {
      words_[1 + slot_].fetch_sub(bytes, std::memory_order_relaxed);
      return {Code::kNoMemory, use + "this client's sessions hold " + std::to_string(*held) + " B of its quota of " +
                                   std::to_string(quotas_.group) + " B (agent option --max-client-memory)"};
    }
  }
  if (auto held = take(words_[0], bytes, limit_)) {
    words_[1 + slot_].fetch_sub(bytes, std::memory_order_relaxed);
    if (group_ != kNoGroup) group_word(group_).fetch_sub(bytes, std::memory_order_relaxed);
    return {Code::kNoMemory, use + "the agent holds " + std::to_string(*held) + " B of its " + std::to_string(limit_) +
                                 " B for clients (agent option --max-memory)"};
  }
  return {};
}

void MemoryBudget::release(uint64_t bytes) {
  words_[1 + slot_].fetch_sub(bytes, std::memory_order_relaxed);
  if (group_ != kNoGroup) group_word(group_).fetch_sub(bytes, std::memory_order_relaxed);
  words_[0].fetch_sub(bytes, std::memory_order_relaxed);
}

void MemoryBudget::release_slot(uint32_t slot, uint32_t group) {
  if (slot >= slots_) return;
  const uint64_t held = words_[1 + slot].exchange(0, std::memory_order_relaxed);
  if (group < slots_) group_word(group).fetch_sub(held, std::memory_order_relaxed);
  words_[0].fetch_sub(held, std::memory_order_relaxed);
}

}  // namespace outboard
