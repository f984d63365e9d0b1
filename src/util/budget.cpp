#include "util/budget.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace outboard {

namespace {
size_t bytes_for(uint32_t slots) { return sizeof(std::atomic<uint64_t>) * (size_t{slots} + 1); }

Result<std::atomic<uint64_t>*> map(int fd, uint32_t slots) {
  void* p = ::mmap(nullptr, bytes_for(slots), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status(Code::kIoError, std::string("mmap of the memory budget: ") + std::strerror(errno));
  return static_cast<std::atomic<uint64_t>*>(p);
}
}  // namespace

Result<std::shared_ptr<MemoryBudget>> MemoryBudget::create(uint64_t limit, uint64_t quota, uint32_t slots) {
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
  return std::shared_ptr<MemoryBudget>(new MemoryBudget(fd, words.value(), slots, limit, quota, 0));
}

Result<std::shared_ptr<MemoryBudget>> MemoryBudget::attach(int fd, uint64_t limit, uint64_t quota, uint32_t slots,
                                                           uint32_t slot) {
  if (slot >= slots) return Status(Code::kInvalidArgument, "memory budget slot " + std::to_string(slot) + " of " + std::to_string(slots));
  OB_ASSIGN_OR_RETURN(auto* words, map(fd, slots));
  return std::shared_ptr<MemoryBudget>(new MemoryBudget(fd, words, slots, limit, quota, slot));
}

MemoryBudget::~MemoryBudget() {
  ::munmap(words_, bytes_for(slots_));
  ::close(fd_);
}

Status MemoryBudget::reserve(uint64_t bytes, std::string_view what) {
  const uint64_t mine = words_[1 + slot_].fetch_add(bytes, std::memory_order_relaxed);
  if (mine + bytes > quota_ || mine + bytes < mine) {
    words_[1 + slot_].fetch_sub(bytes, std::memory_order_relaxed);
    return {Code::kNoMemory, std::string(what) + " of " + std::to_string(bytes) + " B: this session holds " +
                                 std::to_string(mine) + " B of its quota of " + std::to_string(quota_) +
                                 " B (agent option --max-session-memory)"};
  }
  const uint64_t before = words_[0].fetch_add(bytes, std::memory_order_relaxed);
  if (before + bytes > limit_ || before + bytes < before) {
    words_[0].fetch_sub(bytes, std::memory_order_relaxed);
    words_[1 + slot_].fetch_sub(bytes, std::memory_order_relaxed);
    return {Code::kNoMemory, std::string(what) + " of " + std::to_string(bytes) + " B: the agent holds " +
                                 std::to_string(before) + " B of its " + std::to_string(limit_) +
                                 " B for clients (agent option --max-memory)"};
  }
  return {};
}

void MemoryBudget::release(uint64_t bytes) {
  words_[1 + slot_].fetch_sub(bytes, std::memory_order_relaxed);
  words_[0].fetch_sub(bytes, std::memory_order_relaxed);
}

void MemoryBudget::release_slot(uint32_t slot) {
  if (slot >= slots_) return;
  words_[0].fetch_sub(words_[1 + slot].exchange(0, std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace outboard
