#include "tokenize/bpe.h"

#include <gtest/gtest.h>

#include <climits>
#include <map>
#include <random>

namespace outboard::tokenize {
namespace {

// A fake byte-level vocabulary (unit test only): the 256 bytes plus merges
// learned greedily over a tiny alphabet, with priorities in creation order.
// "a b" and "cab a" are tokens BPE never forms (it stops at three parts):
// the backtracking encoder must never pick them.
struct FakeVocab {
  BpeVocab vocab;
  std::map<std::string, uint32_t> priority;
  FakeVocab() {
    for (int b = 0; b < 256; ++b) EXPECT_TRUE(vocab.add(std::string(1, static_cast<char>(b)), b, UINT32_MAX).ok());
    const char* merges[] = {"ab", "ba", "aa", "abab", "bb", "aab", "abb", "bab", "aaaa", "ababab", "c ", " ab", "ca", "a b", "cab", "cab a"};
    int32_t id = 256;
    for (const char* m : merges) {
      priority[m] = static_cast<uint32_t>(id);
      EXPECT_TRUE(vocab.add(m, id, static_cast<uint32_t>(id)).ok());
      ++id;
    }
    EXPECT_TRUE(vocab.finalize().ok());
  }
  // The slow reference: merge the leftmost lowest-priority pair until none.
  std::vector<int32_t> reference(const std::string& s) const {
    std::vector<std::string> parts;
    for (char c : s) parts.emplace_back(1, c);
    while (true) {
      size_t best = SIZE_MAX;
      uint32_t best_p = UINT32_MAX;
      for (size_t i = 0; i + 1 < parts.size(); ++i) {
        auto it = priority.find(parts[i] + parts[i + 1]);
        if (it != priority.end() && it->second < best_p) best_p = it->second, best = i;
      }
      if (best == SIZE_MAX) break;
      parts[best] += parts[best + 1];
      parts.erase(parts.begin() + static_cast<long>(best) + 1);
    }
    std::vector<int32_t> ids;
    for (const auto& p : parts) {
      int32_t id;
      uint32_t pr;
      EXPECT_TRUE(vocab.find(reinterpret_cast<const uint8_t*>(p.data()), p.size(), id, pr));
      ids.push_back(id);
    }
    return ids;
  }
};

TEST(BpeTest, ShortAndLongPiecesMatchTheSlowReference) {
  FakeVocab v;
  std::mt19937 rng(3);
  for (int trial = 0; trial < 400; ++trial) {
    size_t len = 1 + rng() % (trial < 300 ? 60 : 1000);  // both merge paths (backtracking from 64 bytes)
    std::string s;
    for (size_t i = 0; i < len; ++i) s.push_back("abc "[rng() % 4]);
    std::vector<int32_t> ids;
    ASSERT_TRUE(v.vocab.encode_piece(reinterpret_cast<const uint8_t*>(s.data()), s.size(), ids).ok());
    ASSERT_EQ(ids, v.reference(s)) << s;
  }
}

TEST(BpeTest, DuplicatesAreRejected) {
  BpeVocab v;
  ASSERT_TRUE(v.add("ab", 1, 1).ok());
  EXPECT_EQ(v.add("ab", 2, 2).code(), Code::kInvalidArgument);
  EXPECT_EQ(v.add("cd", 1, 3).code(), Code::kInvalidArgument);
  EXPECT_EQ(v.add("", 4, 4).code(), Code::kInvalidArgument);
  EXPECT_EQ(v.bytes_of(1), "ab");
  EXPECT_EQ(v.bytes_of(7), "");
}

}  // namespace
}  // namespace outboard::tokenize
