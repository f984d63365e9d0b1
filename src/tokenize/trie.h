// A byte trie over a vocabulary: the longest token starting at a position in
// one walk, without hashing every candidate substring. Shared by WordPiece
// (longest match) and BPE (the backtracking encoder's candidates).
//
// Frozen as a double array (Aoe 1989): the child of node s on byte c sits at
// base[s] + c and is valid if its check is s — one array read per byte, and
// the children of a node share cache lines, where a hash table of edges
// misses the cache on nearly every step.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace outboard::tokenize {

class Trie {
 public:
  static constexpr uint32_t kFree = UINT32_MAX;
  static constexpr uint32_t kRoot = UINT32_MAX - 1;  // the root's check: no byte leads back to it

  Trie();
  void insert(std::string_view bytes, int32_t id);
  /// Freezes the trie into the double array; call after the last insert().
  void finalize();
  /// A cell of the frozen double array: the child of the node at cell s on byte c is cell
  /// base[s] + c, valid if its check is s.
  struct Cell {
    uint32_t base = 0;      // children at base + byte
    uint32_t check = kFree;  // parent cell, kFree if unused
    int32_t id = -1;         // token ending here, -1 if none
  };
  /// The frozen array (after finalize()), for a copy that another device walks as longest() does.
  [[nodiscard]] const std::vector<Cell>& cells() const { return cells_; }

  /// Longest token starting at p (bytes up to end); returns its length, 0 if none.
  size_t longest(const uint8_t* p, const uint8_t* end, int32_t& id) const {
    uint32_t node = 0;
    size_t best = 0;
    for (const uint8_t* q = p; q < end; ++q) {
      const uint32_t next = cells_[node].base + *q;
      if (cells_[next].check != node) break;
      node = next;
      if (cells_[node].id >= 0) {
        best = static_cast<size_t>(q + 1 - p);
        id = cells_[node].id;
      }
    }
    return best;
  }

 private:
  // While building: nodes with their children by byte.
  struct Node {
    int32_t id = -1;
    std::vector<std::pair<uint8_t, uint32_t>> children;
  };
  std::vector<Node> building_;
  std::vector<Cell> cells_;  // cell 0 is the root; 256 spare cells at the end so base + byte never overruns
};

}  // namespace outboard::tokenize
