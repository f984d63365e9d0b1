#include "tokenize/piece_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "tokenize/small_load.h"

namespace outboard::tokenize {
namespace {

using Word = std::atomic_ref<uint64_t>;
constexpr size_t kHugePage = size_t{2} << 20;
constexpr uint32_t seq_of(uint64_t h) { return static_cast<uint32_t>(h); }
constexpr uint64_t with_seq(uint64_t h, uint32_t seq) { return (h & ~uint64_t{UINT32_MAX}) | seq; }
constexpr uint64_t tag_of(uint64_t hash) { return hash & 0xffff; }

// A line set: word 0 holds the sequence (low 32 bits; odd while written)
// and 16 bits of each way's hash, word 1 each way's piece length and id
// count (0: empty), words 2-4 way 0's bytes and ids, 5-7 way 1's.
struct Way {
  size_t n, count;
  uint64_t tag;
};
constexpr Way way_of(uint64_t w0, uint64_t w1, size_t way) {
  return {(w1 >> (16 * way)) & 0xff, (w1 >> (16 * way + 8)) & 0xff, (w0 >> (32 + 16 * way)) & 0xffff};
}

// A medium or wide set: both ways' headers in its first words (a miss
// reads one line), then their bytes and ids. A header holds the sequence,
// the piece's length, its id count (0: empty) and 16 bits of its hash.
constexpr uint64_t slot_header(uint32_t seq, size_t n, size_t count, uint64_t hash) {
  return seq | uint64_t(n) << 32 | uint64_t(count) << 40 | tag_of(hash) << 48;
}
constexpr size_t slot_length(uint64_t h) { return (h >> 32) & 0xff; }
constexpr size_t slot_count(uint64_t h) { return (h >> 40) & 0xff; }

constexpr size_t words_for(size_t n, size_t count) { return (n + count * 4 + 7) / 8; }

/// Appends the ids after the piece's bytes in `payload` if those bytes are p[0, n).
bool take(const uint64_t* payload, const uint8_t* p, size_t n, size_t count, std::vector<int32_t>& out) {
  size_t i = 0;  // a word at a time; the last word holds ids after the piece's bytes
  for (; i + 8 <= n; i += 8)
    if (payload[i / 8] != load8(p + i)) return false;
  if (const size_t rest = n - i; rest && (payload[i / 8] & ((uint64_t{1} << rest * 8) - 1)) != load_upto8(p + i, rest))
    return false;
  const auto* ids = reinterpret_cast<const uint8_t*>(payload) + n;
  for (size_t k = 0; k < count; ++k) {  // a few ids: no resize (a call) or rep movs
    int32_t id;
    std::memcpy(&id, ids + 4 * k, 4);
    out.push_back(id);
  }
  return true;
}

/// Locks a seqlock's word 0 by making its sequence odd: the word as locked,
/// or 0 where another thread holds it (the caller skips its insert rather
/// than wait).
uint64_t lock(uint64_t& word) {
  uint64_t h = Word(word).load(std::memory_order_relaxed);
  const uint64_t locked = with_seq(h, seq_of(h) + 1);
  if ((seq_of(h) & 1) || !Word(word).compare_exchange_strong(h, locked, std::memory_order_acquire,
                                                             std::memory_order_relaxed))
    return 0;
  // Readers that see the odd sequence (or a changed word after their copy)
  // discard what they read; the fence orders it before the payload's stores.
  std::atomic_thread_fence(std::memory_order_release);
  return locked;
}

/// Copies `words` words from `from`, in a seqlocked block whose word 0
/// held `h` (loaded with acquire); false if it was written meanwhile.
bool copy_stable(uint64_t* block, uint64_t h, uint64_t* copy, uint64_t* from, size_t words) {
  for (size_t i = 0; i < words; ++i) copy[i] = Word(from[i]).load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  return Word(block[0]).load(std::memory_order_relaxed) == h;
}

void store_payload(uint64_t* to, const uint8_t* p, size_t n, const int32_t* ids, size_t count) {
  uint64_t copy[PieceCache::kMaxPayloadBytes / 8] = {};
  auto* bytes = reinterpret_cast<uint8_t*>(copy);
  std::memcpy(bytes, p, n);
  std::memcpy(bytes + n, ids, count * 4);
  for (size_t i = 0; i < words_for(n, count); ++i) Word(to[i]).store(copy[i], std::memory_order_relaxed);
}

// Each thread alternates its victims where a set is full: a third piece
// evicts one of the two at random rather than always the same one.
size_t victim() {
  thread_local unsigned next = 0;
  return ++next & 1;
}

}  // namespace

std::shared_ptr<const PieceCache> PieceCache::create(size_t max_bytes) {
  if (max_bytes < kMinBytes) return nullptr;
  const size_t rest = max_bytes - kLineBytes;  // a line set at least
  const size_t medium_sets = std::max<size_t>(rest / 2 / (kSlotWays * kMediumBytes), 1);
  const size_t wide_sets = std::max<size_t>(rest / 4 / (kSlotWays * kWideBytes), 1);
  const size_t slot_bytes = kSlotWays * (medium_sets * kMediumBytes + wide_sets * kWideBytes);
  const size_t line_sets = (max_bytes - slot_bytes) / kLineBytes;
  const size_t bytes = line_sets * kLineBytes + slot_bytes;
  // Anonymous pages are zero: every slot starts empty. Huge pages where the
  // kernel gives them (random slots on 4 KiB pages cost a TLB miss per
  // lookup), touched here: a huge page's first fault may compact memory for
  // milliseconds (250 ms measured for 64 MiB), which belongs to loading a
  // tokenizer, not to its first requests.
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
  auto* words = reinterpret_cast<uint64_t*>(base);
  const Slots medium(words + line_sets * (kLineBytes / 8), medium_sets, kMediumBytes);
  const Slots wide(words + (line_sets * kLineBytes + medium.bytes()) / 8, wide_sets, kWideBytes);
  return std::shared_ptr<const PieceCache>(new PieceCache(words, line_sets, medium, wide, bytes));
}

PieceCache::~PieceCache() { munmap(words_, map_bytes_); }

bool PieceCache::find_line(const uint8_t* p, size_t n, uint64_t hash, std::vector<int32_t>& out) const {
  uint64_t* s = line_set(hash);
  const uint64_t h = Word(s[0]).load(std::memory_order_acquire);
  if (seq_of(h) & 1) return false;
  const uint64_t meta = Word(s[1]).load(std::memory_order_relaxed);
  for (size_t way = 0; way < 2; ++way) {
    const Way w = way_of(h, meta, way);
    if (w.count == 0 || w.n != n || w.tag != tag_of(hash)) continue;
    uint64_t copy[kLinePayload / 8];
    if (copy_stable(s, h, copy, s + 2 + 3 * way, words_for(n, w.count)) && take(copy, p, n, w.count, out)) return true;
  }
  return false;
}

bool PieceCache::Slots::find(const uint8_t* p, size_t n, uint64_t hash, std::vector<int32_t>& out) const {
  uint64_t* ways = set(hash);
  for (size_t way = 0; way < kSlotWays; ++way) {
    const uint64_t h = Word(ways[way]).load(std::memory_order_acquire);
    const size_t count = slot_count(h);
    if ((seq_of(h) & 1) || slot_length(h) != n || (h >> 48) != tag_of(hash) || count == 0) continue;
    uint64_t copy[kMaxPayloadBytes / 8];
    if (copy_stable(ways + way, h, copy, payload(ways, way), words_for(n, count)) && take(copy, p, n, count, out))
      return true;
  }
  return false;
}

void PieceCache::insert(const uint8_t* p, size_t n, uint64_t hash, const int32_t* ids, size_t count) const {
  if (count == 0 || !fits(n, count)) return;
  const size_t payload = n + count * 4;
  if (payload <= kLinePayload)
    insert_line(p, n, hash, ids, count);
  else
    (payload <= kMediumBytes - 8 ? medium_ : wide_).insert(p, n, hash, ids, count);
}

void PieceCache::insert_line(const uint8_t* p, size_t n, uint64_t hash, const int32_t* ids, size_t count) const {
  uint64_t* s = line_set(hash);
  const uint64_t locked = lock(s[0]);
  if (!locked) return;
  const uint64_t meta = Word(s[1]).load(std::memory_order_relaxed);
  const size_t way = way_of(locked, meta, 0).count == 0 ? 0 : way_of(locked, meta, 1).count == 0 ? 1 : victim();
  store_payload(s + 2 + 3 * way, p, n, ids, count);
  const unsigned shift = 16 * way;
  Word(s[1]).store((meta & ~(uint64_t{0xffff} << shift)) | (uint64_t(n) | uint64_t(count) << 8) << shift,
                   std::memory_order_relaxed);
  const uint64_t tags = (locked & ~(uint64_t{0xffff} << (32 + shift))) | tag_of(hash) << (32 + shift);
  Word(s[0]).store(with_seq(tags, seq_of(locked) + 1), std::memory_order_release);
}

void PieceCache::Slots::insert(const uint8_t* p, size_t n, uint64_t hash, const int32_t* ids, size_t count) const {
  uint64_t* ways = set(hash);
  size_t way = victim();
  for (size_t w = 0; w < kSlotWays; ++w)
    if (slot_count(Word(ways[w]).load(std::memory_order_relaxed)) == 0) {
      way = w;
      break;
    }
  const uint64_t locked = lock(ways[way]);
  if (!locked) return;
  store_payload(payload(ways, way), p, n, ids, count);
  Word(ways[way]).store(slot_header(seq_of(locked) + 1, n, count, hash), std::memory_order_release);
}

}  // namespace outboard::tokenize
