// Pre-token cache: piece bytes -> ids, for the pieces a tokenizer had to
// merge (whole-token pieces are one vocabulary lookup already). Words recur
// in text, so a serving agent meets the same pieces request after request.
//
// Bounded: three fixed tables, two-way set-associative by the piece's hash,
// for what a piece's bytes and ids (4 B each) take:
//  - line sets: one cache line holds two pieces of up to 24 bytes each, and
//    a lookup reads that line alone (56 % of the merged pieces of the bench
//    corpus);
//  - medium (128 B) and wide (256 B) slots for pieces of up to 120 and 248
//    bytes (Cyrillic and CJK words, mostly, whose merges cost the most).
// Measured on 200 chunks of 8 KB of the bench corpus (GPT-2, 16 MiB), a warm
// pass merges 1.3 k of its 154 k multi-token pieces, where direct-mapped
// 128-byte slots merged 8.7 k (conflicts, and every piece over 120 bytes).
//
// Shared by every thread that encodes with one tokenizer, lock-free on the
// hit path: each line set and each medium or wide slot is a seqlock. A
// reader copies what it needs and keeps it only if the sequence did not
// change meanwhile; a writer that finds it being written skips its insert
// rather than wait. Every access is atomic (std::atomic_ref), so a torn
// read is detected, never a data race.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace outboard::tokenize {

class PieceCache {
 public:
  static constexpr size_t kLineBytes = 64, kSlotWays = 2;
  /// Slot sizes past a line: pieces of up to 120 bytes of bytes and ids, then up to 248.
  static constexpr size_t kMediumBytes = 128, kWideBytes = 256;
  /// Piece bytes and ids (4 B each) a slot holds together, at most.
  static constexpr size_t kMaxPayloadBytes = kWideBytes - 8;
  /// The least a cache takes: a set of each table.
  static constexpr size_t kMinBytes = kLineBytes + kSlotWays * (kMediumBytes + kWideBytes);
  static_assert(kMinBytes == 832, "Tokenizer::with_piece_cache's and tokenizer.py's docs name it");

  /// A cache of at most `max_bytes`: half of it medium slots, a quarter
  /// each line sets and wide slots; null under kMinBytes or if its memory
  /// cannot be mapped (encoding goes on without one).
  static std::shared_ptr<const PieceCache> create(size_t max_bytes);
  ~PieceCache();
  PieceCache(const PieceCache&) = delete;
  PieceCache& operator=(const PieceCache&) = delete;

  /// Starts loading the sets a piece of `n` bytes may be in: callers that
  /// hash a batch of pieces first overlap the cache misses of their lookups.
  void prefetch(uint64_t hash, size_t n) const {
    if (n <= kMaxLinePiece) __builtin_prefetch(line_set(hash));
    if (n >= kMinMediumPiece) __builtin_prefetch(medium_.set(hash));
    if (n >= kMinWidePiece) __builtin_prefetch(wide_.set(hash));
  }
  /// Appends the cached ids of the piece to `out`; false on a miss.
  bool find(const uint8_t* p, size_t n, uint64_t hash, std::vector<int32_t>& out) const {
    return (n <= kMaxLinePiece && find_line(p, n, hash, out)) ||
           (n >= kMinMediumPiece && medium_.find(p, n, hash, out)) || (n >= kMinWidePiece && wide_.find(p, n, hash, out));
  }
  /// Remembers the piece's ids; pieces too large for a slot are not kept.
  void insert(const uint8_t* p, size_t n, uint64_t hash, const int32_t* ids, size_t count) const;
  /// Would a piece of `n` bytes with `count` ids fit in a slot?
  static bool fits(size_t n, size_t count) { return n <= 255 && count <= 255 && n + count * 4 <= kMaxPayloadBytes; }

  /// The memory the cache may use (its slots), in bytes.
  [[nodiscard]] size_t capacity_bytes() const { return map_bytes_; }

 private:
  static constexpr size_t kLinePayload = 24;  // each of a line set's two ways, after its two header words
  // Which tables a piece of n bytes may be in: it has one id at least, and
  // at most n, so n + 4 <= payload <= 5n.
  static constexpr size_t kMaxLinePiece = kLinePayload - 4, kMinMediumPiece = kLinePayload / 5 + 1,
                          kMinWidePiece = (kMediumBytes - 8) / 5 + 1;

  // The set: the hash remixed (pieces' hashes differ little in their upper
  // bits when only their last bytes do), its top 32 bits scaled to the
  // number of sets by a multiply (any number, no division).
  static size_t pick(uint64_t hash, size_t sets) { return ((hash * 0x9e3779b97f4a7c15ull) >> 32) * sets >> 32; }

  // Slots of one size, kSlotWays to a set, each its own seqlock.
  class Slots {
   public:
    Slots(uint64_t* words, size_t sets, size_t slot_bytes) : words_(words), sets_(sets), slot_words_(slot_bytes / 8) {}
    uint64_t* set(uint64_t hash) const { return words_ + pick(hash, sets_) * kSlotWays * slot_words_; }
    uint64_t* payload(uint64_t* set, size_t way) const { return set + kSlotWays + way * (slot_words_ - 1); }
    bool find(const uint8_t* p, size_t n, uint64_t hash, std::vector<int32_t>& out) const;
    void insert(const uint8_t* p, size_t n, uint64_t hash, const int32_t* ids, size_t count) const;
    size_t bytes() const { return sets_ * kSlotWays * slot_words_ * 8; }

   private:
    uint64_t* const words_;
    const size_t sets_, slot_words_;
  };

  PieceCache(uint64_t* words, size_t line_sets, Slots medium, Slots wide, size_t map_bytes)
      : words_(words), line_sets_(line_sets), medium_(medium), wide_(wide), map_bytes_(map_bytes) {}
  uint64_t* line_set(uint64_t hash) const { return words_ + pick(hash, line_sets_) * (kLineBytes / 8); }
  bool find_line(const uint8_t* p, size_t n, uint64_t hash, std::vector<int32_t>& out) const;
  void insert_line(const uint8_t* p, size_t n, uint64_t hash, const int32_t* ids, size_t count) const;

  uint64_t* const words_;  // the line sets, then the medium and the wide slots; mmap'd
  const size_t line_sets_;
  const Slots medium_, wide_;
  const size_t map_bytes_;
};

}  // namespace outboard::tokenize
