#include "tokenize/cl100k_split.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "split_windows.h"

namespace outboard::tokenize {
namespace {

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  split_cl100k(text, [&](size_t b, size_t e) { out.emplace_back(text.substr(b, e - b)); });
  return out;
}

using V = std::vector<std::string>;

// Known answers of tiktoken's cl100k pattern (from Python's `regex` on the
// same pattern); the exactness gate compares ids with tiktoken itself.
TEST(Cl100kSplitTest, KnownPieces) {
  EXPECT_EQ(pieces("DON'T don't"), (V{"DON", "'T", " don", "'t"}));
  EXPECT_EQ(pieces("it'S 'LL 'Ve 're"), (V{"it", "'S", " '", "LL", " '", "Ve", " '", "re"}));
  EXPECT_EQ(pieces("'\u017fx"), (V{"'\u017f", "x"}));  // (?i)s matches LONG S
  EXPECT_EQ(pieces("\t'modified"), (V{"\t", "'m", "odified"}));
  EXPECT_EQ(pieces("\tword \u00a0word"), (V{"\tword", " ", "\u00a0word"}));
  EXPECT_EQ(pieces("(foo) 'bar"), (V{"(foo", ")", " '", "bar"}));
  EXPECT_EQ(pieces("12345 678 9"), (V{"123", "45", " ", "678", " ", "9"}));
  EXPECT_EQ(pieces("a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(pieces("x\n\n  y"), (V{"x", "\n\n", " ", " y"}));
  EXPECT_EQ(pieces("trailing \n  "), (V{"trailing", " \n  "}));
  EXPECT_EQ(pieces("  \n  x"), (V{"  \n", " ", " x"}));
  EXPECT_EQ(pieces("!!!\n\nfoo"), (V{"!!!\n\n", "foo"}));
  EXPECT_EQ(pieces(" !?\r\n"), (V{" !?\r\n"}));
  EXPECT_EQ(pieces("hello\r\nworld"), (V{"hello", "\r\n", "world"}));
  EXPECT_EQ(pieces("a \t b"), (V{"a", " \t", " b"}));
  EXPECT_EQ(pieces("\t\t1"), (V{"\t", "\t", "1"}));
  EXPECT_EQ(pieces("x \u0301y"), (V{"x", " \u0301", "y"}));
  EXPECT_EQ(pieces("\u00b2\u00b3\u00bc5x"), (V{"\u00b2\u00b3\u00bc", "5", "x"}));
  EXPECT_EQ(pieces("'"), (V{"'"}));
  EXPECT_EQ(pieces(""), V{});
}

// Digits go in threes however long the run, and pieces tile the text.
TEST(Cl100kSplitTest, DigitRunsInThreesAndPiecesTileTheText) {
  for (size_t len = 1; len < 20; ++len) {
    const auto d = pieces(std::string(len, '7') + "x");
    ASSERT_EQ(d.size(), (len + 2) / 3 + 1) << len;
    EXPECT_EQ(d.back(), "x");
    for (size_t k = 0; k + 1 < d.size(); ++k) EXPECT_EQ(d[k].size(), k + 2 < d.size() ? 3u : len - 3 * k) << len;
  }
  const std::string mixed = "Ünïcode\u00a0 words,\r\n\t  12345 \u4e2d\u6587 'Twas \u0301!! \n";
  std::string joined;
  for (const auto& p : pieces(mixed)) joined += p;
  EXPECT_EQ(joined, mixed);
}

TEST(Cl100kSplitTest, WindowsAgreeWithTheScanner) {
  testing::expect_windows_agree([](std::string_view t, auto&& emit) { split_cl100k(t, emit); },
                                [](std::string_view t, auto&& emit) { split_cl100k_scanner(t, emit); });
}

}  // namespace
}  // namespace outboard::tokenize
