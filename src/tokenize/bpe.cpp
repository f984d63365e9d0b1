#include "tokenize/bpe.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace outboard::tokenize {
namespace {

constexpr size_t kSmallPiece = 64;  // below: tiktoken's scan (measured: backtracking wins only on CJK there); above: backtracking

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
  s.hash = static_cast<uint32_t>(hash(p, bytes.size()));
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

bool BpeVocab::find(const uint8_t* p, size_t n, int32_t& id, uint32_t& priority) const {
  return find_hashed(p, n, hash(p, n), id, priority);
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
  // tiktoken's semantics: every split of every token into two tokens is a
  // pair that merges into it. derive_splits reasons with that table, then
  // shrinks it to each token's last merge (see there).
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
  derive_splits();
  return {};
}

std::vector<BpeVocab::PairMerge> BpeVocab::pair_merges() const {
  std::vector<PairMerge> merges;
  for (size_t id = 0; id < split_.size(); ++id)
    if (split_[id].first >= 0)
      merges.push_back({split_[id].first, split_[id].second, rank_[id] - 1, static_cast<int32_t>(id)});
  return merges;
}

Status BpeVocab::merge_piece(const uint8_t* p, size_t n, uint64_t h, std::vector<int32_t>& out,
                             const PieceCache* cache) const {
  if (cache && cache->find(p, n, h, out)) return {};
  const size_t before = out.size();
  OB_RETURN_IF_ERROR(n < kSmallPiece ? small_merge(p, n, out) : backtrack(p, n, out));
  if (cache) cache->insert(p, n, h, out.data() + before, out.size() - before);
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

bool BpeVocab::valid_pair(int32_t left, int32_t right, uint32_t ceiling) const {
  uint32_t limit = ceiling;
  while (true) {
    // A merge across the boundary that BPE would make before `limit`.
    if (const Merge* m = pairs_.find(pair_key(left, right)); m && rank_[m->merged] < limit) return false;
    if (rank_[left] > rank_[right]) {
      limit = rank_[left];  // the left token formed last: a crossing merge must lose to it
      left = split_[left].second;
    } else {
      if (rank_[right] == 0) return true;  // both are bytes
      limit = rank_[right] + 1;  // a crossing merge at the same rank is further left: it would win
      right = split_[right].first;
    }
  }
}

// In rank order, each token's last merge is the one split into two reachable
// tokens that BPE leaves side by side using only lower ranks; a token
// without one is never formed. A token formed anywhere is formed by the
// merges of its own bytes alone (merges never cross its span), so other
// splits, and splits into unreachable tokens, never merge: the pair table
// keeps only last merges, less than half the entries, so fewer cache misses.
void BpeVocab::derive_splits() {
  const size_t ids = by_id_.size();
  rank_.assign(ids, kUnreachable);
  split_.assign(ids, {-1, -1});
  shorter_.assign(ids, -1);
  length_.assign(ids, 0);
  std::vector<int32_t> order;
  for (size_t id = 0; id < ids; ++id) {
    if (by_id_[id] == 0) continue;
    const Slot& s = slots_[by_id_[id] - 1];
    length_[id] = s.length;
    if (s.length == 1) rank_[id] = 0;
    else if (s.priority != kNoPriority) order.push_back(static_cast<int32_t>(id));
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return slots_[by_id_[a] - 1].priority < slots_[by_id_[b] - 1].priority;
  });
  for (int32_t id : order) {
    const std::string_view t = bytes_of(id);
    const auto* b = reinterpret_cast<const uint8_t*>(t.data());
    const uint32_t rank = slots_[by_id_[id] - 1].priority + 1;
    for (size_t k = t.size() - 1; k >= 1; --k) {
      int32_t left, right;
      uint32_t unused;
      if (!find(b, k, left, unused) || !find(b + k, t.size() - k, right, unused)) continue;
      if (rank_[left] >= rank || rank_[right] >= rank || !valid_pair(left, right, rank)) continue;
      rank_[id] = rank;
      split_[id] = {left, right};
      break;
    }
  }
  for (size_t id = 0; id < ids; ++id)
    if (rank_[id] != kUnreachable) reachable_.insert(bytes_of(static_cast<int32_t>(id)), static_cast<int32_t>(id));
  reachable_.finalize();
  for (size_t id = 0; id < ids; ++id) {
    if (rank_[id] == kUnreachable || length_[id] < 2) continue;
    const auto* b = reinterpret_cast<const uint8_t*>(bytes_of(static_cast<int32_t>(id)).data());
    reachable_.longest(b, b + length_[id] - 1, shorter_[id]);
  }
  std::vector<std::pair<uint64_t, Merge>> last_merges;
  for (const PairMerge& m : pair_merges()) last_merges.push_back({pair_key(m.left, m.right), Merge{m.priority, m.merged}});
  pairs_.build(last_merges);
}

// Longest reachable token first; on a pair BPE would not leave, the next
// shorter prefix token; when none fits, the previous token is retracted and
// its end marked a dead end, so no position is tried twice from the same end.
Status BpeVocab::backtrack(const uint8_t* p, size_t n, std::vector<int32_t>& out) const {
  const size_t base = out.size();
  std::vector<uint64_t> alive((n + 64) / 64, ~uint64_t{0});
  auto is_alive = [&](size_t pos) { return (alive[pos / 64] >> (pos % 64)) & 1; };
  size_t pos = 0;
  int32_t next = -1;
  reachable_.longest(p, p + n, next);
  while (pos < n) {
    int32_t token = next;
    while (true) {
      const size_t end = pos + length_[token];
      if (is_alive(end) && (out.size() == base || valid_pair(out.back(), token, kUnreachable))) {
        out.push_back(token);
        pos = end;
        if (pos < n) reachable_.longest(p + pos, p + n, next);
        break;
      }
      if (shorter_[token] >= 0) {
        token = shorter_[token];
        continue;
      }
      if (out.size() == base)  // cannot happen for a vocabulary with every byte; never loop on a bad one
        return {Code::kInvalidArgument, "BPE found no valid tokenization of a " + std::to_string(n) + "-byte piece"};
      alive[pos / 64] &= ~(uint64_t{1} << (pos % 64));
      next = out.back();
      out.pop_back();
      pos -= length_[next];
      break;
    }
  }
  return {};
}

}  // namespace outboard::tokenize
