#include "tokenize/trie.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>

namespace outboard::tokenize {
namespace {

size_t brute_longest(const std::map<std::string, int32_t>& words, const std::string& text, size_t from, int32_t& id) {
  size_t best = 0;
  for (const auto& [w, i] : words)
    if (w.size() > best && text.compare(from, w.size(), w) == 0) best = w.size(), id = i;
  return best;
}

TEST(TrieTest, LongestMatchEqualsBruteForceOverAllByteValues) {
  std::mt19937 rng(7);
  for (int alphabet : {2, 5, 256}) {  // dense and sparse children, bytes 0x00 and 0xFF included
    Trie trie;
    std::map<std::string, int32_t> words;
    for (int32_t id = 0; id < 3000; ++id) {
      std::string w(1 + rng() % 9, '\0');
      for (char& c : w) c = static_cast<char>(alphabet == 256 ? rng() % 256 : 0xFD + rng() % alphabet);
      if (words.emplace(w, id).second) trie.insert(w, id);
    }
    trie.finalize();
    std::string text(5000, '\0');
    for (char& c : text) c = static_cast<char>(alphabet == 256 ? rng() % 256 : 0xFD + rng() % alphabet);
    for (size_t i = 0; i < text.size(); ++i) {
      int32_t got = -1, want = -1;
      const auto* p = reinterpret_cast<const uint8_t*>(text.data());
      ASSERT_EQ(trie.longest(p + i, p + text.size(), got), brute_longest(words, text, i, want)) << alphabet << " at " << i;
      ASSERT_EQ(got, want);
    }
  }
}

TEST(TrieTest, EmptyTrieMatchesNothingAndFirstIdWins) {
  Trie empty;
  empty.finalize();
  const uint8_t zeros[4] = {0, 0, 0, 0};
  int32_t id = -1;
  EXPECT_EQ(empty.longest(zeros, zeros + 4, id), 0u);

  Trie trie;
  trie.insert("ab", 1);
  trie.insert("ab", 2);
  trie.insert("a", 3);
  trie.finalize();
  const auto* t = reinterpret_cast<const uint8_t*>("abc");
  EXPECT_EQ(trie.longest(t, t + 3, id), 2u);
  EXPECT_EQ(id, 1);
  EXPECT_EQ(trie.longest(t, t + 1, id), 1u);  // the end bounds the walk
  EXPECT_EQ(id, 3);
}

}  // namespace
}  // namespace outboard::tokenize
