#include "tokenize/piece_cache.h"

#include <sys/mman.h>

#include <atomic>
#include <bit>
#include <cstring>

#include "tokenize/small_load.h"

namespace outboard::tokenize {
namespace {

// Word 0 of a slot: sequence (low 32 bits; odd while written), piece
// length, id count, and 16 bits of the hash that a lookup checks before
// reading the key.
constexpr uint64_t header(uint32_t seq, size_t n, size_t count, uint64_t hash) {
  return seq | uint64_t(n) << 32 | uint64_t(count) << 40 | (hash & 0xffff) << 48;
}
constexpr uint32_t seq_of(uint64_t h) { return static_cast<uint32_t>(h); }
constexpr size_t length_of(uint64_t h) { return (h >> 32) & 0xff; }
constexpr size_t count_of(uint64_t h) { return (h >> 40) & 0xff; }
constexpr uint64_t tag_of(uint64_t h) { return h >> 48; }

using Word = std::atomic_ref<uint64_t>;
constexpr size_t kHugePage = size_t{2} << 20;

}  // namespace

std::shared_ptr<const PieceCache> PieceCache::create(size_t max_bytes) {
  const size_t slots = std::bit_floor(std::max<size_t>(max_bytes / kSlotBytes, 1));
  // Anonymous pages are zero: every slot starts empty. Huge pages where the
  // kernel gives them (random slots on 4 KiB pages cost a TLB miss per
  // lookup), touched here: a huge page's first fault may compact memory for
  // milliseconds (250 ms measured for 64 MiB), which belongs to loading a
  // tokenizer, not to its first requests.
  const size_t bytes = slots * kSlotBytes;
  const size_t align = bytes >= kHugePage ? kHugePage : 0;
  void* p = mmap(nullptr, bytes + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  auto* base = static_cast<uint8_t*>(p);
  if (align) {
    uint8_t* aligned = base + (-reinterpret_cast<uintptr_t>(base) & (align - 1));
    if (aligned > base) munmap(base, aligned - base);
    if (aligned + bytes < base + bytes + align) munmap(aligned + bytes, base + bytes + align - (aligned + bytes));
    madvise(aligned, bytes, MADV_HUGEPAGE);  // advice: without it, or refused, 4 KiB pages do
    base = aligned;
  }
  for (size_t at = 0; at < bytes; at += 4096) base[at] = 0;
  return std::shared_ptr<const PieceCache>(new PieceCache(reinterpret_cast<uint64_t*>(base), slots));
}

PieceCache::~PieceCache() { munmap(words_, capacity_bytes()); }

bool PieceCache::find(const uint8_t* p, size_t n, uint64_t hash, std::vector<int32_t>& out) const {
  uint64_t* s = slot(hash);
  const uint64_t h = Word(s[0]).load(std::memory_order_acquire);
  if ((seq_of(h) & 1) || length_of(h) != n || tag_of(h) != (hash & 0xffff) || count_of(h) == 0) return false;
  const size_t count = count_of(h);
  uint64_t copy[kWords - 1];
  const size_t words = (n + count * 4 + 7) / 8;
  for (size_t i = 0; i < words; ++i) copy[i] = Word(s[1 + i]).load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (Word(s[0]).load(std::memory_order_relaxed) != h) return false;  // written meanwhile
  size_t i = 0;  // compare a word at a time; the last word holds ids after the piece's bytes
  for (; i + 8 <= n; i += 8)
    if (copy[i / 8] != load8(p + i)) return false;
  if (const size_t rest = n - i; rest && (copy[i / 8] & ((uint64_t{1} << rest * 8) - 1)) != load_upto8(p + i, rest))
    return false;
  const auto* ids = reinterpret_cast<const uint8_t*>(copy) + n;
  const size_t at = out.size();
  out.resize(at + count);
  for (size_t k = 0; k < count; ++k) std::memcpy(&out[at + k], ids + 4 * k, 4);
  return true;
}

void PieceCache::insert(const uint8_t* p, size_t n, uint64_t hash, const int32_t* ids, size_t count) const {
  if (count == 0 || !fits(n, count)) return;
  uint64_t* s = slot(hash);
  uint64_t h = Word(s[0]).load(std::memory_order_relaxed);
  if (seq_of(h) & 1) return;  // another thread is writing it: skip rather than wait
  const uint64_t busy = header(seq_of(h) + 1, length_of(h), count_of(h), tag_of(h));
  if (!Word(s[0]).compare_exchange_strong(h, busy, std::memory_order_acquire, std::memory_order_relaxed)) return;
  // Readers that see `busy` (or a changed word 0 after their copy) discard
  // what they read; the release fence orders it before the payload.
  std::atomic_thread_fence(std::memory_order_release);
  uint64_t copy[kWords - 1] = {};
  auto* bytes = reinterpret_cast<uint8_t*>(copy);
  std::memcpy(bytes, p, n);
  std::memcpy(bytes + n, ids, count * 4);
  const size_t words = (n + count * 4 + 7) / 8;
  for (size_t i = 0; i < words; ++i) Word(s[1 + i]).store(copy[i], std::memory_order_relaxed);
  Word(s[0]).store(header(seq_of(busy) + 1, n, count, hash), std::memory_order_release);
}

}  // namespace outboard::tokenize
