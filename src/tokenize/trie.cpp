#include "tokenize/trie.h"

#include <algorithm>

namespace outboard::tokenize {

Trie::Trie() : building_(1), cells_(257) { cells_[0].check = kRoot; }

void Trie::insert(std::string_view bytes, int32_t id) {
  uint32_t node = 0;
  for (uint8_t b : bytes) {
    auto& kids = building_[node].children;
    auto it = std::find_if(kids.begin(), kids.end(), [b](const auto& k) { return k.first == b; });
    if (it != kids.end()) {
      node = it->second;
      continue;
    }
    const auto child = static_cast<uint32_t>(building_.size());
    kids.emplace_back(b, child);
    building_.emplace_back();  // invalidates `kids`
    node = child;
  }
  if (building_[node].id < 0) building_[node].id = id;  // first (lowest) id wins, as HF's vocab map
}

void Trie::finalize() {
  // Breadth first: each node's children get the first base (in cell order)
  // whose cells are all free. Free cells are kept in an ordered list; one
  // that has failed as a first child's cell kMaxMisses times is dropped from
  // the search, so crowded regions are not rescanned for every node.
  constexpr uint32_t kNone = UINT32_MAX;
  constexpr uint8_t kMaxMisses = 16;
  std::vector<uint32_t> next, prev;
  std::vector<uint8_t> misses, linked;
  uint32_t head = kNone, tail = kNone;
  auto unlink = [&](uint32_t i) {
    if (!linked[i]) return;
    linked[i] = 0;
    (prev[i] == kNone ? head : next[prev[i]]) = next[i];
    (next[i] == kNone ? tail : prev[next[i]]) = prev[i];
  };
  auto ensure = [&](size_t size) {
    while (cells_.size() < size) {
      const auto i = static_cast<uint32_t>(cells_.size());
      cells_.emplace_back();
      next.push_back(kNone);
      prev.push_back(tail);
      misses.push_back(0);
      linked.push_back(1);
      (tail == kNone ? head : next[tail]) = i;
      tail = i;
    }
  };
  cells_.clear();
  ensure(257);
  unlink(0);
  cells_[0].check = kRoot;
  cells_[0].id = building_[0].id;
  std::vector<std::pair<uint32_t, uint32_t>> queue = {{0, 0}};  // (node, cell)
  uint32_t last_cell = 0;
  for (size_t q = 0; q < queue.size(); ++q) {
    auto [node, cell] = queue[q];
    auto& kids = building_[node].children;
    if (kids.empty()) continue;
    std::sort(kids.begin(), kids.end());
    const uint32_t first = kids[0].first;
    uint32_t base = 0;
    for (uint32_t f = head; base == 0;) {
      if (f == kNone) {  // past every free cell: fresh cells at the end
        base = std::max<uint32_t>(static_cast<uint32_t>(cells_.size()), first + 1) - first;
        ensure(base + 257);
        break;
      }
      const uint32_t after = next[f];
      if (f > first) {
        ensure(f - first + 257);
        if (std::all_of(kids.begin(), kids.end(), [&](const auto& k) { return cells_[f - first + k.first].check == kFree; })) {
          base = f - first;
          break;
        }
        if (++misses[f] >= kMaxMisses) unlink(f);
      }
      f = after;
    }
    cells_[cell].base = base;
    for (auto [byte, child] : kids) {
      const uint32_t at = base + byte;
      unlink(at);
      cells_[at].check = cell;
      cells_[at].id = building_[child].id;
      queue.emplace_back(child, at);
      last_cell = std::max(last_cell, at);
    }
  }
  cells_.resize(last_cell + 257);
  cells_.shrink_to_fit();
  building_.clear();
  building_.shrink_to_fit();
}

}  // namespace outboard::tokenize
