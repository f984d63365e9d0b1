// Byte-level BPE: a vocabulary of byte strings with merge priorities, and
// the merge itself. Priorities follow tiktoken: the adjacent pair whose
// concatenation has the lowest priority merges first, leftmost on ties.
// Every part is a token, so the merge runs on ids: a pair table maps each
// (left id, right id) whose concatenation is a token to that token — the
// bytes semantics of tiktoken with integer keys instead of hashing bytes.
//
// Long pieces use the backtracking encoder of github/rust-gems `bpe`
// (van Antwerpen & Neubeck): BPE's output is the one tokenization whose
// every adjacent pair is one BPE itself would leave unmerged, so a greedy
// longest match that backs off on an invalid pair finds it; a bitfield of
// dead-end positions keeps it linear in practice, where a merge queue is
// n log n and misses the cache on every step.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "outboard/status.h"
#include "tokenize/int_table.h"
#include "tokenize/piece_cache.h"
#include "tokenize/small_load.h"
#include "tokenize/trie.h"

namespace outboard::tokenize {

class BpeVocab {
 public:
  static constexpr uint32_t kNoPriority = UINT32_MAX;

  /// Adds a token; kInvalidArgument on a duplicate (bytes or id).
  Status add(std::string_view bytes, int32_t id, uint32_t priority);
  /// Id and priority of `bytes`, or false.
  bool find(const uint8_t* p, size_t n, int32_t& id, uint32_t& priority) const;
  /// Bytes of token `id` (empty view if unknown).
  [[nodiscard]] std::string_view bytes_of(int32_t id) const;
  [[nodiscard]] size_t size() const { return count_; }
  [[nodiscard]] int32_t max_id() const { return static_cast<int32_t>(by_id_.size()) - 1; }

  /// Builds the pair table; call once after the last add().
  Status finalize();
  /// Hash of a piece, and a prefetch of its slot: callers hash a batch of
  /// pieces first so the table's cache misses overlap instead of queueing.
  static uint64_t hash(const uint8_t* p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull ^ (n * 0x9e3779b97f4a7c15ull);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      h = (h ^ load8(p + i)) * 0x100000001b3ull;
      h ^= h >> 29;
    }
    h = (h ^ load_upto8(p + i, n - i)) * 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 32);
  }
  void prefetch(uint64_t hash) const { __builtin_prefetch(&slots_[hash & (slots_.size() - 1)]); }
  /// Appends the ids of one pre-tokenized piece (with its hash) to `out`,
  /// through `cache` when there is one. Inline: most pieces are one token,
  /// found by one lookup.
  Status encode_piece(const uint8_t* p, size_t n, uint64_t hash, std::vector<int32_t>& out,
                      const PieceCache* cache) const {
    int32_t id;
    uint32_t priority;
    if (find_hashed(p, n, hash, id, priority)) {
      out.push_back(id);
      return {};
    }
    return merge_piece(p, n, hash, out, cache);
  }
  Status encode_piece(const uint8_t* p, size_t n, std::vector<int32_t>& out) const {
    return encode_piece(p, n, hash(p, n), out, nullptr);
  }

  /// A merge BPE can make: parts `left` and `right` become `merged`, lowest `priority` first.
  struct PairMerge {
    int32_t left, right;
    uint32_t priority;
    int32_t merged;
  };
  /// Every entry of the pair table the merge loop reads (for tables of another device's).
  [[nodiscard]] std::vector<PairMerge> pair_merges() const;
  /// The token of byte `b`.
  [[nodiscard]] int32_t byte_id(uint8_t b) const { return byte_id_[b]; }

 private:
  // Keys of up to 16 bytes live in the slot itself (most tokens): one
  // cache line read per lookup, no trip to the arena.
  static constexpr size_t kInlineKey = 16;
  struct Slot {
    uint64_t key[2] = {0, 0};  // the bytes if length <= kInlineKey, else key[0] = arena offset
    uint32_t hash = 0;
    uint32_t length = 0;
    int32_t id = -1;
    uint32_t priority = kNoPriority;
  };
  static_assert(sizeof(Slot) == 32);
  struct Merge {
    uint32_t priority;
    int32_t merged;
  };
  static constexpr Merge kNoMerge{UINT32_MAX, -1};

  void grow();
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  }
  static void load_key(const uint8_t* p, size_t n, uint64_t key[2]) {  // n <= kInlineKey
    key[0] = n > 8 ? load8(p) : load_upto8(p, n);
    key[1] = n > 8 ? load_upto8(p + 8, n - 8) : 0;
  }
  bool find_hashed(const uint8_t* p, size_t n, uint64_t full_hash, int32_t& id, uint32_t& priority) const {
    if (slots_.empty()) return false;
    const auto h = static_cast<uint32_t>(full_hash);
    const size_t mask = slots_.size() - 1;
    uint64_t key[2] = {0, 0};
    const bool inline_key = n <= kInlineKey;
    if (inline_key) load_key(p, n, key);
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.id < 0) return false;
      if (s.hash != h || s.length != n) continue;
      if (inline_key ? (s.key[0] == key[0] && s.key[1] == key[1])
                     : std::memcmp(arena_.data() + s.key[0], p, n) == 0) {
        id = s.id;
        priority = s.priority;
        return true;
      }
    }
  }
  /// The pieces that are not one token: through the cache, else merged.
  Status merge_piece(const uint8_t* p, size_t n, uint64_t hash, std::vector<int32_t>& out,
                     const PieceCache* cache) const;
  /// The merge of two adjacent parts, or kNoMerge.
  const Merge& pair(int32_t left, int32_t right) const {
    const Merge* m = pairs_.find(pair_key(left, right));
    return m ? *m : kNoMerge;
  }
  Status small_merge(const uint8_t* p, size_t n, std::vector<int32_t>& out) const;
  Status backtrack(const uint8_t* p, size_t n, std::vector<int32_t>& out) const;
  /// Would BPE leave `left` and `right` side by side, using only merges
  /// below `ceiling` (a rank)? Undoes the later of the two tokens' merges
  /// until both are bytes, checking the pair across the boundary each time.
  bool valid_pair(int32_t left, int32_t right, uint32_t ceiling) const;
  void derive_splits();

  std::string arena_;
  std::vector<Slot> slots_;          // open addressing, power-of-two size
  std::vector<uint32_t> by_id_;      // id -> slot index + 1 (0: none)
  size_t count_ = 0;
  int32_t byte_id_[256];             // single-byte tokens
  IntTable<Merge> pairs_;  // (left id, right id) -> merge
  // Per id. rank: 0 for bytes, priority + 1 for tokens BPE can produce,
  // kUnreachable for the rest (BPE never forms them, so they never match).
  static constexpr uint32_t kUnreachable = UINT32_MAX;
  std::vector<uint32_t> rank_;
  std::vector<std::pair<int32_t, int32_t>> split_;  // the last merge that forms the token
  std::vector<int32_t> shorter_;  // longest reachable proper prefix, -1 if none
  std::vector<uint32_t> length_;
  Trie reachable_;  // reachable tokens, for the longest match
};

// Pieces go through in small batches: hashing and prefetching a batch's
// table slots first lets their cache misses overlap.
template <typename Split>
Status encode_split(const BpeVocab& vocab, std::string_view text, Split split, std::vector<int32_t>& out,
                    const PieceCache* cache) {
  constexpr size_t kBatch = 16;
  struct Piece {
    size_t begin, end;
    uint64_t hash;
  } batch[kBatch];
  size_t k = 0;
  Status st;
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  auto flush = [&] {
    for (size_t i = 0; i < k && st.ok(); ++i)  // assigned only on error: a Status's string costs per piece
      if (Status r = vocab.encode_piece(s + batch[i].begin, batch[i].end - batch[i].begin, batch[i].hash, out, cache);
          !r.ok())
        st = std::move(r);
    k = 0;
  };
  split(text, [&](size_t b, size_t e) {
    uint64_t h = BpeVocab::hash(s + b, e - b);
    vocab.prefetch(h);
    if (cache) cache->prefetch(h, e - b);
    batch[k++] = {b, e, h};
    if (k == kBatch) flush();
  });
  flush();
  return st;
}

}  // namespace outboard::tokenize
