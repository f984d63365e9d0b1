#include "tokenize/bpe.h"

#include <algorithm>
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
  if ((count_ + 1) * 2 > slots_.size()) grow();
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  int32_t existing;
  uint32_t unused;
  if (find(p, bytes.size(), existing, unused))
    return {Code::kInvalidArgument, "token " + std::to_string(id) + " repeats the bytes of token " +
                                        std::to_string(existing)};
  if (static_cast<size_t>(id) < by_id_.size() && by_id_[id] != 0)
    return {Code::kInvalidArgument, "token id " + std::to_string(id) + " appears twice"};
  Slot s;
  s.hash = hash_bytes(p, bytes.size());
  s.offset = static_cast<uint32_t>(arena_.size());
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

bool BpeVocab::find(const uint8_t* p, size_t n, int32_t& id, uint32_t& priority) const {
  if (slots_.empty()) return false;
  uint64_t h = hash_bytes(p, n);
  size_t mask = slots_.size() - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.id < 0) return false;
    if (s.hash == h && s.length == n && std::memcmp(arena_.data() + s.offset, p, n) == 0) {
      id = s.id;
      priority = s.priority;
      return true;
    }
  }
}

uint32_t BpeVocab::priority_of(const uint8_t* p, size_t n) const {
  int32_t id;
  uint32_t priority;
  return find(p, n, id, priority) ? priority : kNoPriority;
}

std::string_view BpeVocab::bytes_of(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= by_id_.size() || by_id_[id] == 0) return {};
  const Slot& s = slots_[by_id_[id] - 1];
  return {arena_.data() + s.offset, s.length};
}

Status BpeVocab::emit(const uint8_t* p, size_t n, std::vector<int32_t>& out) const {
  int32_t id;
  uint32_t priority;
  if (!find(p, n, id, priority))
    return {Code::kNotFound, "no token for a " + std::to_string(n) + "-byte part: the vocabulary lacks byte-level base tokens"};
  out.push_back(id);
  return {};
}

Status BpeVocab::encode_piece(const uint8_t* p, size_t n, std::vector<int32_t>& out) const {
  int32_t id;
  uint32_t priority;
  if (find(p, n, id, priority)) {  // whole-piece lookup first: most pieces are one token
    out.push_back(id);
    return {};
  }
  return n < kSmallPiece ? small_merge(p, n, out) : heap_merge(p, n, out);
}

// tiktoken's byte_pair_merge: parts[i] is a boundary, ranks[i] the priority
// of merging the parts starting at boundary i and i+1.
Status BpeVocab::small_merge(const uint8_t* p, size_t n, std::vector<int32_t>& out) const {
  uint32_t start[kSmallPiece + 1], rank[kSmallPiece + 1];
  size_t m = n + 1;
  for (size_t i = 0; i <= n; ++i) start[i] = static_cast<uint32_t>(i);
  auto pair_rank = [&](size_t i) {
    return i + 2 < m ? priority_of(p + start[i], start[i + 2] - start[i]) : kNoPriority;
  };
  for (size_t i = 0; i < m; ++i) rank[i] = pair_rank(i);
  while (m > 2) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < m; ++i)
      if (rank[i] < rank[best]) best = i;
    if (rank[best] == kNoPriority) break;
    std::memmove(start + best + 1, start + best + 2, (m - best - 2) * sizeof(uint32_t));
    std::memmove(rank + best + 1, rank + best + 2, (m - best - 2) * sizeof(uint32_t));
    --m;
    rank[best] = pair_rank(best);
    if (best > 0) rank[best - 1] = pair_rank(best - 1);
  }
  for (size_t i = 0; i + 1 < m; ++i) OB_RETURN_IF_ERROR(emit(p + start[i], start[i + 1] - start[i], out));
  return {};
}

// The same merge order in O(n log n): a heap of candidate pairs ordered by
// (priority, position) over a linked list of parts; stale candidates are
// recognised by the parts' versions.
Status BpeVocab::heap_merge(const uint8_t* p, size_t n, std::vector<int32_t>& out) const {
  struct Part {
    uint32_t start, end;
    int32_t prev, next;
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
    parts[i] = {i, i + 1, static_cast<int32_t>(i) - 1, i + 1 < n ? static_cast<int32_t>(i + 1) : -1, 0};
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t left) {
    if (left < 0 || parts[left].next < 0) return;
    const Part& a = parts[left];
    const Part& b = parts[a.next];
    uint32_t pr = priority_of(p + a.start, b.end - a.start);
    if (pr != kNoPriority) heap.push({pr, static_cast<uint32_t>(left), a.version, b.version});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(n); ++i) push(i);
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Part& a = parts[c.left];
    if (a.version != c.left_version || a.next < 0 || parts[a.next].version != c.right_version) continue;
    Part& b = parts[a.next];
    a.end = b.end;
    a.next = b.next;
    if (b.next >= 0) parts[b.next].prev = static_cast<int32_t>(c.left);
    b.version = UINT32_MAX;  // dead
    ++a.version;
    push(a.prev);
    push(static_cast<int32_t>(c.left));
  }
  for (int32_t i = 0; i >= 0; i = parts[i].next)
    OB_RETURN_IF_ERROR(emit(p + parts[i].start, parts[i].end - parts[i].start, out));
  return {};
}

}  // namespace outboard::tokenize
