#include "tokenize/bpe.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <queue>

namespace outboard::tokenize {
namespace {

constexpr size_t kSmallPiece = 64;  // below: tiktoken's scan; above: a heap (n log n)

inline uint64_t hash_bytes(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull ^ (n * 0x9e3779b97f4a7c15ull);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p + i, n - i);
  h = (h ^ tail) * 0x9e3779b97f4a7c15ull;
  return h ^ (h >> 32);
}

}  // namespace

namespace {
inline void load_key(const uint8_t* p, size_t n, uint64_t key[2]) {
  key[0] = key[1] = 0;
  std::memcpy(key, p, n);
}
}  // namespace

BpeVocab::BpeVocab() {
  static std::atomic<uint64_t> next{1};
  serial_ = next.fetch_add(1);
}

void BpeVocab::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.empty() ? 1024 : old.size() * 2, Slot{});
  size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.id < 0) continue;
    size_t i = s.hash & mask;
    while (slots_[i].id >= 0) i = (i + 1) & mask;
    slots_[i] = s;
    by_id_[s.id] = static_cast<uint32_t>(i + 1);
  }
}

Status BpeVocab::add(std::string_view bytes, int32_t id, uint32_t priority) {
  if (id < 0) return {Code::kInvalidArgument, "token id " + std::to_string(id) + " is negative"};
  if (bytes.empty()) return {Code::kInvalidArgument, "token " + std::to_string(id) + " is empty"};
  if ((count_ + 1) * 2 > slots_.size()) grow();  // load <= 0.5 keeps misses (most merge lookups) short
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  int32_t existing;
  uint32_t unused;
  if (find(p, bytes.size(), existing, unused))
    return {Code::kInvalidArgument, "token " + std::to_string(id) + " repeats the bytes of token " +
                                        std::to_string(existing)};
  if (static_cast<size_t>(id) < by_id_.size() && by_id_[id] != 0)
    return {Code::kInvalidArgument, "token id " + std::to_string(id) + " appears twice"};
  Slot s;
  s.hash = static_cast<uint32_t>(hash_bytes(p, bytes.size()));
  if (bytes.size() <= kInlineKey) load_key(p, bytes.size(), s.key);
  if (bytes.size() > kInlineKey) s.key[0] = arena_.size();
  s.length = static_cast<uint32_t>(bytes.size());
  s.id = id;
  s.priority = priority;
  arena_.append(bytes);
  size_t mask = slots_.size() - 1, i = s.hash & mask;
  while (slots_[i].id >= 0) i = (i + 1) & mask;
  slots_[i] = s;
  if (static_cast<size_t>(id) >= by_id_.size()) by_id_.resize(id + 1, 0);
  by_id_[id] = static_cast<uint32_t>(i + 1);
  ++count_;
  return {};
}

uint64_t BpeVocab::hash(const uint8_t* p, size_t n) { return hash_bytes(p, n); }

bool BpeVocab::find(const uint8_t* p, size_t n, int32_t& id, uint32_t& priority) const {
  return find_hashed(p, n, hash_bytes(p, n), id, priority);
}

bool BpeVocab::find_hashed(const uint8_t* p, size_t n, uint64_t full_hash, int32_t& id, uint32_t& priority) const {
  if (slots_.empty()) return false;
  auto h = static_cast<uint32_t>(full_hash);
  size_t mask = slots_.size() - 1;
  uint64_t key[2];
  const bool inline_key = n <= kInlineKey;
  if (inline_key) load_key(p, n, key);
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.id < 0) return false;
    if (s.hash != h || s.length != n) continue;
    bool same = inline_key ? (s.key[0] == key[0] && s.key[1] == key[1])
                           : std::memcmp(arena_.data() + s.key[0], p, n) == 0;
    if (same) {
      id = s.id;
      priority = s.priority;
      return true;
    }
  }
}

std::string_view BpeVocab::bytes_of(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= by_id_.size() || by_id_[id] == 0) return {};
  const Slot& s = slots_[by_id_[id] - 1];
  if (s.length <= kInlineKey) return {reinterpret_cast<const char*>(s.key), s.length};
  return {arena_.data() + s.key[0], s.length};
}

Status BpeVocab::finalize() {
  for (int b = 0; b < 256; ++b) {
    uint8_t byte = static_cast<uint8_t>(b);
    uint32_t unused;
    if (!find(&byte, 1, byte_id_[b], unused))
      return {Code::kInvalidArgument, "the vocabulary lacks the base token for byte " + std::to_string(b)};
  }
  // Every split of every token into two tokens is a pair that merges into it.
  std::vector<std::pair<uint64_t, Merge>> entries;
  for (const Slot& s : slots_) {
    if (s.id < 0 || s.length < 2 || s.priority == kNoPriority) continue;
    const auto* t = s.length <= kInlineKey ? reinterpret_cast<const uint8_t*>(s.key)
                                           : reinterpret_cast<const uint8_t*>(arena_.data() + s.key[0]);
    for (uint32_t k = 1; k < s.length; ++k) {
      int32_t left, right;
      uint32_t unused;
      if (find(t, k, left, unused) && find(t + k, s.length - k, right, unused))
        entries.push_back({pair_key(left, right), Merge{s.priority, s.id}});
    }
  }
  pairs_.build(entries);
  return {};
}

namespace {

// Recently merged pieces, per thread (words recur in text; the merge is the
// expensive part). Direct-mapped; a slot remembers which vocabulary filled it.
struct PieceCache {
  static constexpr size_t kSlots = 4096, kMaxBytes = 24, kMaxIds = 10;
  struct Entry {
    uint64_t owner = 0;
    uint8_t length = 0, count = 0;
    uint8_t bytes[kMaxBytes];
    int32_t ids[kMaxIds];
  };
  Entry entries[kSlots];
  static Entry& slot(uint64_t owner, const uint8_t* p, size_t n) {
    thread_local PieceCache cache;
    uint64_t h = hash_bytes(p, n) ^ owner;
    return cache.entries[(h * 0x9e3779b97f4a7c15ull) >> 52];
  }
};
static_assert(PieceCache::kSlots == size_t{1} << 12);

}  // namespace

Status BpeVocab::encode_piece(const uint8_t* p, size_t n, uint64_t h, std::vector<int32_t>& out) const {
  int32_t id;
  uint32_t priority;
  if (find_hashed(p, n, h, id, priority)) {  // whole-piece lookup first: most pieces are one token
    out.push_back(id);
    return {};
  }
  if (n >= kSmallPiece) return heap_merge(p, n, out);
  if (n > PieceCache::kMaxBytes) return small_merge(p, n, out);
  PieceCache::Entry& e = PieceCache::slot(serial_, p, n);
  if (e.owner == serial_ && e.length == n && std::memcmp(e.bytes, p, n) == 0) {
    out.insert(out.end(), e.ids, e.ids + e.count);
    return {};
  }
  size_t before = out.size();
  OB_RETURN_IF_ERROR(small_merge(p, n, out));
  size_t count = out.size() - before;
  if (count <= PieceCache::kMaxIds) {
    e.owner = serial_;
    e.length = static_cast<uint8_t>(n);
    e.count = static_cast<uint8_t>(count);
    std::memcpy(e.bytes, p, n);
    std::memcpy(e.ids, out.data() + before, count * sizeof(int32_t));
  }
  return {};
}

// tiktoken's byte_pair_merge on ids: rank[i] is the priority of merging
// parts i and i+1.
Status BpeVocab::small_merge(const uint8_t* p, size_t n, std::vector<int32_t>& out) const {
  int32_t ids[kSmallPiece];
  uint32_t rank[kSmallPiece];
  size_t m = n;
  for (size_t i = 0; i < n; ++i) ids[i] = byte_id_[p[i]];
  for (size_t i = 0; i + 1 < m; ++i) pairs_.prefetch(pair_key(ids[i], ids[i + 1]));
  for (size_t i = 0; i + 1 < m; ++i) rank[i] = pair(ids[i], ids[i + 1]).priority;
  while (m > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < m; ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == kNoPriority) break;
    ids[best] = pair(ids[best], ids[best + 1]).merged;
    std::memmove(ids + best + 1, ids + best + 2, (m - best - 2) * sizeof(int32_t));
    std::memmove(rank + best + 1, rank + best + 2, (m - best - 2) * sizeof(uint32_t));
    --m;
    // Both neighbours' lookups are independent: overlap their misses.
    if (best + 1 < m) pairs_.prefetch(pair_key(ids[best], ids[best + 1]));
    if (best > 0) pairs_.prefetch(pair_key(ids[best - 1], ids[best]));
    if (best + 1 < m) rank[best] = pair(ids[best], ids[best + 1]).priority;
    if (best > 0) rank[best - 1] = pair(ids[best - 1], ids[best]).priority;
  }
  out.insert(out.end(), ids, ids + m);
  return {};
}

// The same merge order in O(n log n): a heap of candidate pairs ordered by
// (priority, position) over a linked list of parts; stale candidates are
// recognised by the parts' versions.
Status BpeVocab::heap_merge(const uint8_t* p, size_t n, std::vector<int32_t>& out) const {
  struct Part {
    int32_t id, prev, next;
    uint32_t version;
  };
  struct Candidate {
    uint32_t priority, left, left_version, right_version;
    bool operator>(const Candidate& o) const {
      return priority != o.priority ? priority > o.priority : left > o.left;
    }
  };
  std::vector<Part> parts(n);
  for (uint32_t i = 0; i < n; ++i)
    parts[i] = {byte_id_[p[i]], static_cast<int32_t>(i) - 1, i + 1 < n ? static_cast<int32_t>(i + 1) : -1, 0};
  std::vector<Candidate> storage;
  storage.reserve(n);
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap(std::greater<>(), std::move(storage));
  auto push = [&](int32_t left) {
    if (left < 0 || parts[left].next < 0) return;
    const Part& a = parts[left];
    const Part& b = parts[a.next];
    uint32_t pr = pair(a.id, b.id).priority;
    if (pr != kNoPriority) heap.push({pr, static_cast<uint32_t>(left), a.version, b.version});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(n); ++i) push(i);
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Part& a = parts[c.left];
    if (a.version != c.left_version || a.next < 0 || parts[a.next].version != c.right_version) continue;
    Part& b = parts[a.next];
    a.id = pair(a.id, b.id).merged;
    a.next = b.next;
    if (b.next >= 0) parts[b.next].prev = static_cast<int32_t>(c.left);
    b.version = UINT32_MAX;  // dead
    ++a.version;
    push(a.prev);
    push(static_cast<int32_t>(c.left));
  }
  for (int32_t i = 0; i >= 0; i = parts[i].next) out.push_back(parts[i].id);
  return {};
}

}  // namespace outboard::tokenize
