// GPT-2's byte-level BPE as data-parallel steps, one function per thread's
// work. The same code is compiled by nvcc for the GPU (gpu_tokenizer.cu)
// and by the host compiler for a CPU run of every step (the tests, under the
// sanitizers too), so the ids the GPU gives are checked against the CPU
// tokenizer's without a GPU.
//
// A batch is its texts back to back. Pre-tokenization (r50k's pattern, the
// scanner of src/tokenize/gpt2_split.h) runs in chunks of kChunkBytes: a
// piece must end where a letter meets a non-letter, a digit a non-digit, or
// another character whitespace, so each chunk starts at the first such place
// in it and scans to the next chunk's start, marking where pieces begin.
// Then every piece is merged by its own thread (tiktoken's scan, on the
// pair table of src/tokenize/bpe.h), and two prefix sums place the ids.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define OB_HD __host__ __device__
#else
#define OB_HD
#endif

namespace outboard::gpu {

/// Bytes of text each pre-tokenizing thread starts in.
inline constexpr uint32_t kChunkBytes = 32;
/// Kinds of character, as tokenize::Kind (src/tokenize/char_kind.h): 2 bits per code point.
inline constexpr uint8_t kLetter = 0, kNumber = 1, kSpace = 2, kOther = 3;
inline constexpr uint32_t kCodePoints = 0x110000;
inline constexpr uint64_t kEmptyKey = UINT64_MAX;
inline constexpr uint32_t kNoPriority = UINT32_MAX;

/// What a merge of two parts makes (src/tokenize/bpe.h's pair table).
struct PairSlot {
  uint64_t key;  ///< left id << 32 | right id; kEmptyKey: a free slot
  uint32_t priority;
  int32_t merged;
};

/// A token BPE does not make from its own bytes: found whole, as tiktoken looks a piece up first.
struct WholeSlot {
  uint64_t hash;  ///< whole_hash() of its bytes; 0: a free slot
  uint32_t offset, length;  ///< its bytes in BpeTables::whole_bytes
  int32_t id;
};

/// The vocabulary, where the threads read it (device memory, or host memory on a CPU run).
struct BpeTables {
  const uint8_t* kinds;  ///< kCodePoints / 4 bytes
  const int32_t* byte_ids;  ///< 256
  const PairSlot* pairs;
  uint64_t pair_mask;
  int pair_shift;
  const WholeSlot* wholes;  ///< whole_mask + 1 slots
  uint64_t whole_mask;
  const uint8_t* whole_bytes;
  uint32_t whole_min, whole_max;  ///< lengths of the shortest and longest (whole_max 0: none)
};

/// One batch's memory. `bytes` and the per-byte arrays hold one entry more than the text.
struct BpeBatch {
  const uint8_t* text;
  uint32_t bytes;
  const uint32_t* text_offsets;  ///< texts + 1, text k is [text_offsets[k], text_offsets[k + 1])
  uint32_t texts;
  uint32_t* starts;     ///< bytes + 1, zeroed: 1 where a piece begins
  uint32_t* piece_of;   ///< bytes + 1: exclusive sum of starts (a piece's index at its first byte)
  int32_t* parts;       ///< bytes: a piece's parts (then ids) at the piece's own offset
  uint32_t* ranks;      ///< bytes: the priority of merging part i with the next
  uint32_t* links;      ///< 2 x bytes: a long piece's next and previous parts (MergeScratch)
  uint64_t* heap;       ///< 3 x bytes: a long piece's merge queue
  uint32_t* counts;     ///< bytes + 1, zeroed: ids of each piece
  uint32_t* id_offsets; ///< bytes + 1: exclusive sum of counts
  int32_t* ids;         ///< the output: capacity ids
  uint32_t capacity;
  uint32_t* text_ids;   ///< texts + 1: where text k's ids begin in `ids`
};

OB_HD inline uint32_t decode_utf8(const uint8_t* p, int& len) {  // valid UTF-8
  const uint32_t b = p[0];
  if (b < 0x80) {
    len = 1;
    return b;
  }
  if (b < 0xE0) {
    len = 2;
    return (b & 0x1F) << 6 | (p[1] & 0x3F);
  }
  if (b < 0xF0) {
    len = 3;
    return (b & 0x0F) << 12 | (p[1] & 0x3F) << 6 | (p[2] & 0x3F);
  }
  len = 4;
  return (b & 0x07) << 18 | (p[1] & 0x3F) << 12 | (p[2] & 0x3F) << 6 | (p[3] & 0x3F);
}

OB_HD inline uint8_t kind_at(const BpeTables& t, const uint8_t* s, uint32_t i, int& len) {
  const uint32_t cp = decode_utf8(s + i, len);
  return (t.kinds[cp >> 2] >> ((cp & 3) * 2)) & 3;
}

OB_HD inline uint32_t run_of(const BpeTables& t, const uint8_t* s, uint32_t n, uint32_t i, uint8_t kind) {
  int len;
  while (i < n && kind_at(t, s, i, len) == kind) i += len;
  return i;
}

/// End of the piece that starts at s[i] (gpt2_piece in src/tokenize/gpt2_split.h); n: its text's end.
OB_HD inline uint32_t piece_end(const BpeTables& t, const uint8_t* s, uint32_t n, uint32_t i) {
  if (s[i] == '\'' && i + 1 < n) {  // 's 't 'd 'm, 'll 've 're
    const uint8_t a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
    if (a == 's' || a == 'd' || a == 'm' || a == 't') return i + 2;
    if ((a == 'l' && b == 'l') || (a == 'v' && b == 'e') || (a == 'r' && b == 'e')) return i + 3;
  }
  int len;
  const uint8_t kind = kind_at(t, s, i, len);
  if (s[i] == ' ' && i + 1 < n) {
    const uint8_t next = kind_at(t, s, i + 1, len);
    if (next != kSpace) return run_of(t, s, n, i + 1, next);  // " ?X+": the space joins the run after it
  }
  if (kind != kSpace) return run_of(t, s, n, i, kind);
  // \s+(?!\S): a run of whitespace before something else leaves its last character to that.
  uint32_t end = i, last = i;
  while (end < n && kind_at(t, s, end, len) == kSpace) {
    last = end;
    end += len;
  }
  return end < n && last > i ? last : end;
}

/// The text that holds byte `at` (< bytes): the last k with text_offsets[k] <= at.
OB_HD inline uint32_t text_of(const BpeBatch& b, uint32_t at) {
  uint32_t lo = 0, hi = b.texts;  // text_offsets[lo] <= at < text_offsets[hi]
  while (hi - lo > 1) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (b.text_offsets[mid] <= at) lo = mid;
    else hi = mid;
  }
  return lo;
}

/// Where chunk `c`'s thread starts: a text's start, or the first place at or after c * kChunkBytes
/// where a piece must end whatever came before.
OB_HD inline uint32_t chunk_start(const BpeTables& t, const BpeBatch& b, uint32_t c) {
  const uint64_t from = uint64_t{c} * kChunkBytes;
  if (from >= b.bytes) return b.bytes;
  const uint32_t k = text_of(b, static_cast<uint32_t>(from));
  const uint32_t begin = b.text_offsets[k], end = b.text_offsets[k + 1];
  const uint8_t* s = b.text;
  uint32_t p = static_cast<uint32_t>(from);
  if (p == begin) return p;
  while (p < end && (s[p] & 0xC0) == 0x80) ++p;
  if (p >= end) return end;
  uint32_t q = p - 1;  // the character before p (begin < p)
  while ((s[q] & 0xC0) == 0x80) --q;
  int len;
  uint8_t before = kind_at(t, s, q, len);
  while (p < end) {
    const uint8_t kind = kind_at(t, s, p, len);
    if ((before == kLetter && kind != kLetter) || (before == kNumber && kind != kNumber) ||
        (before == kOther && kind == kSpace))
      return p;
    before = kind;
    p += len;
  }
  return end;
}

/// Step 1, a thread per chunk: marks where each piece of the chunk begins.
OB_HD inline void split_chunk(const BpeTables& t, const BpeBatch& b, uint32_t c) {
  uint32_t i = chunk_start(t, b, c);
  const uint32_t stop = chunk_start(t, b, c + 1);
  if (i >= stop) return;
  uint32_t k = text_of(b, i);
  while (i < stop) {
    while (b.text_offsets[k + 1] <= i) ++k;  // the next text (empty ones skipped)
    b.starts[i] = 1;
    i = piece_end(t, b.text, b.text_offsets[k + 1], i);
  }
}

OB_HD inline uint64_t whole_hash(const uint8_t* p, uint32_t n) {  // FNV-1a, never 0
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint32_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h | 1;
}

/// The id of a token BPE does not make from its bytes, if p[0, n) is one; else -1.
OB_HD inline int32_t whole_token(const BpeTables& t, const uint8_t* p, uint32_t n) {
  if (n < t.whole_min || n > t.whole_max) return -1;
  const uint64_t h = whole_hash(p, n);
  for (uint64_t i = h & t.whole_mask;; i = (i + 1) & t.whole_mask) {
    const WholeSlot& w = t.wholes[i];
    if (w.hash == 0) return -1;
    if (w.hash != h || w.length != n) continue;
    uint32_t k = 0;
    while (k < n && t.whole_bytes[w.offset + k] == p[k]) ++k;
    if (k == n) return w.id;
  }
}

OB_HD inline const PairSlot* find_pair(const BpeTables& t, int32_t left, int32_t right) {
  const uint64_t key = uint64_t(uint32_t(left)) << 32 | uint32_t(right);
  for (uint64_t i = (key * 0x9e3779b97f4a7c15ull) >> t.pair_shift;; i = (i + 1) & t.pair_mask) {
    if (t.pairs[i].key == key) return &t.pairs[i];
    if (t.pairs[i].key == kEmptyKey) return nullptr;
  }
}

OB_HD inline uint32_t pair_priority(const BpeTables& t, int32_t left, int32_t right) {
  const PairSlot* m = find_pair(t, left, right);
  return m ? m->priority : kNoPriority;
}

/// Where a piece of n bytes is merged: parts and ranks hold n entries, next and prev n, heap 3n.
struct MergeScratch {
  int32_t* parts;
  uint32_t* ranks;
  uint32_t* next;
  uint32_t* prev;
  uint64_t* heap;
};

/// Pieces longer than this merge through a queue (n log n); shorter ones by tiktoken's scan (n^2,
/// and faster when short). CJK and Thai text make pieces of hundreds of bytes.
inline constexpr uint32_t kQueuedPiece = 32;

/// tiktoken's merge of the bytes p[0, n) (BpeVocab::small_merge's loop): the lowest-priority
/// pair merges first, leftmost on ties. Works in parts[0, n) and ranks[0, n); returns how many ids
/// it left in parts.
OB_HD inline uint32_t scan_merge(const BpeTables& t, const uint8_t* p, uint32_t n, int32_t* parts, uint32_t* ranks) {
  if (n == 0) return 0;
  for (uint32_t i = 0; i < n; ++i) parts[i] = t.byte_ids[p[i]];
  for (uint32_t i = 0; i + 1 < n; ++i) ranks[i] = pair_priority(t, parts[i], parts[i + 1]);
  ranks[n - 1] = kNoPriority;  // no part after the last
  uint32_t m = n;
  while (m > 1) {
    uint32_t best = 0;
    for (uint32_t i = 1; i + 1 < m; ++i)
      if (ranks[i] < ranks[best]) best = i;
    if (ranks[best] == kNoPriority) break;
    parts[best] = find_pair(t, parts[best], parts[best + 1])->merged;
    for (uint32_t i = best + 1; i + 1 < m; ++i) {
      parts[i] = parts[i + 1];
      ranks[i] = ranks[i + 1];
    }
    --m;
    if (best + 1 < m) ranks[best] = pair_priority(t, parts[best], parts[best + 1]);
    if (best > 0) ranks[best - 1] = pair_priority(t, parts[best - 1], parts[best]);
  }
  return m;
}

// A binary min-heap of (priority << 32 | position): the lowest priority first, leftmost on ties.
OB_HD inline void heap_push(uint64_t* heap, uint32_t& size, uint64_t v) {
  uint32_t i = size++;
  while (i > 0 && heap[(i - 1) / 2] > v) {
    heap[i] = heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  heap[i] = v;
}

OB_HD inline uint64_t heap_pop(uint64_t* heap, uint32_t& size) {
  const uint64_t top = heap[0], last = heap[--size];
  uint32_t i = 0;
  for (uint32_t child; (child = 2 * i + 1) < size; i = child) {
    if (child + 1 < size && heap[child + 1] < heap[child]) ++child;
    if (heap[child] >= last) break;
    heap[i] = heap[child];
  }
  heap[i] = last;
  return top;
}

/// scan_merge's result by a queue of the pairs: parts linked by position (a part keeps the position
/// of its first byte), each pair queued with its priority when it forms; an entry whose pair has
/// changed since is skipped (its position's rank no longer matches: a merge's new pairs always
/// rank otherwise, as a priority names one merge). Leaves the ids at s.parts[0, count).
OB_HD inline uint32_t queue_merge(const BpeTables& t, const uint8_t* p, uint32_t n, const MergeScratch& s) {
  uint32_t size = 0;
  for (uint32_t i = 0; i < n; ++i) {
    s.parts[i] = t.byte_ids[p[i]];
    s.next[i] = i + 1;
    s.prev[i] = i - 1;  // wraps for the first: never read
  }
  for (uint32_t i = 0; i + 1 < n; ++i) {
    s.ranks[i] = pair_priority(t, s.parts[i], s.parts[i + 1]);
    if (s.ranks[i] != kNoPriority) heap_push(s.heap, size, uint64_t{s.ranks[i]} << 32 | i);
  }
  s.ranks[n - 1] = kNoPriority;
  while (size > 0) {
    const uint64_t top = heap_pop(s.heap, size);
    const auto at = static_cast<uint32_t>(top), rank = static_cast<uint32_t>(top >> 32);
    if (s.parts[at] < 0 || s.ranks[at] != rank) continue;  // merged away, or its pair changed
    const uint32_t right = s.next[at];
    s.parts[at] = find_pair(t, s.parts[at], s.parts[right])->merged;
    s.parts[right] = -1;
    s.next[at] = s.next[right];
    if (s.next[at] < n) s.prev[s.next[at]] = at;
    s.ranks[at] = s.next[at] < n ? pair_priority(t, s.parts[at], s.parts[s.next[at]]) : kNoPriority;
    if (s.ranks[at] != kNoPriority) heap_push(s.heap, size, uint64_t{s.ranks[at]} << 32 | at);
    if (at > 0) {
      const uint32_t left = s.prev[at];
      s.ranks[left] = pair_priority(t, s.parts[left], s.parts[at]);
      if (s.ranks[left] != kNoPriority) heap_push(s.heap, size, uint64_t{s.ranks[left]} << 32 | left);
    }
  }
  uint32_t count = 0;
  for (uint32_t i = 0; i < n; i = s.next[i]) s.parts[count++] = s.parts[i];  // count <= i: in place
  return count;
}

/// A piece's merge, by the scan or the queue as its length says.
OB_HD inline uint32_t merge_bytes(const BpeTables& t, const uint8_t* p, uint32_t n, const MergeScratch& s) {
  return n > kQueuedPiece ? queue_merge(t, p, n, s) : scan_merge(t, p, n, s.parts, s.ranks);
}

/// Step 2, a thread per byte: the thread of a piece's first byte encodes the piece in place.
OB_HD inline void encode_piece(const BpeTables& t, const BpeBatch& b, uint32_t i) {
  if (!b.starts[i]) return;
  uint32_t end = i + 1;
  while (end < b.bytes && !b.starts[end]) ++end;
  const uint8_t* p = b.text + i;
  const int32_t whole = whole_token(t, p, end - i);
  uint32_t count = 1;
  if (whole >= 0) {
    b.parts[i] = whole;
  } else {
    const uint32_t n = end - i;
    const size_t at = i;
    count = merge_bytes(t, p, n, {b.parts + at, b.ranks + at, b.links + 2 * at, b.links + 2 * at + n, b.heap + 3 * at});
  }
  b.counts[b.piece_of[i]] = count;
}

/// Step 3, a thread per byte: a piece's ids to their place in the output, if they fit.
OB_HD inline void place_piece(const BpeBatch& b, uint32_t i) {
  if (!b.starts[i]) return;
  const uint32_t piece = b.piece_of[i], at = b.id_offsets[piece], count = b.counts[piece];
  if (uint64_t{at} + count > b.capacity) return;  // the caller sees the total and fails the batch
  for (uint32_t k = 0; k < count; ++k) b.ids[at + k] = b.parts[i + k];
}

/// Step 4, a thread per text (and one past the last): where its ids begin.
OB_HD inline void text_ids(const BpeBatch& b, uint32_t k) {
  b.text_ids[k] = b.id_offsets[b.piece_of[b.text_offsets[k]]];
}

/// The steps in order, for an executor that runs `each(n, f)` as f(0) ... f(n - 1) in parallel
/// and `exclusive_sum(in, out, n)`, each step after the last one ended.
template <typename Exec>
void encode_batch(Exec& exec, const BpeTables& t, const BpeBatch& b) {
  exec.each((b.bytes + kChunkBytes - 1) / kChunkBytes, [=] OB_HD(uint32_t c) { split_chunk(t, b, c); });
  exec.exclusive_sum(b.starts, b.piece_of, b.bytes + 1);
  exec.each(b.bytes, [=] OB_HD(uint32_t i) { encode_piece(t, b, i); });
  exec.exclusive_sum(b.counts, b.id_offsets, b.bytes + 1);
  exec.each(b.bytes, [=] OB_HD(uint32_t i) { place_piece(b, i); });
  exec.each(b.texts + 1, [=] OB_HD(uint32_t k) { text_ids(b, k); });
}

}  // namespace outboard::gpu
