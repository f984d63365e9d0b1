#include "tokenize/gpt2_split.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "split_windows.h"

namespace outboard::tokenize {
namespace {

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  split_gpt2(text, [&](size_t b, size_t e) { out.emplace_back(text.substr(b, e - b)); });
  return out;
}

using V = std::vector<std::string>;

// The reference table (tokenizers.md §1) and more: known answers of the
// GPT-2 pattern.
TEST(Gpt2SplitTest, KnownPieces) {
  EXPECT_EQ(pieces("DON'T don't"), (V{"DON", "'", "T", " don", "'t"}));
  EXPECT_EQ(pieces("\t'modified"), (V{"\t", "'m", "odified"}));
  EXPECT_EQ(pieces("a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(pieces("x\n\n  y"), (V{"x", "\n\n ", " y"}));
  EXPECT_EQ(pieces("\t\tx"), (V{"\t", "\t", "x"}));
  EXPECT_EQ(pieces("12345"), (V{"12345"}));
  EXPECT_EQ(pieces("cafe\u0301!"), (V{"cafe", "\u0301!"}));
  EXPECT_EQ(pieces("we'll've're"), (V{"we", "'ll", "'ve", "'re"}));
  EXPECT_EQ(pieces(" 's"), (V{" '", "s"}));
  EXPECT_EQ(pieces("trailing  "), (V{"trailing", "  "}));
  EXPECT_EQ(pieces(" "), (V{" "}));
  EXPECT_EQ(pieces("a\u00a0b"), (V{"a", "\u00a0", "b"}));
  EXPECT_EQ(pieces("x2y"), (V{"x", "2", "y"}));
  EXPECT_EQ(pieces("!!! ?"), (V{"!!!", " ?"}));
  EXPECT_EQ(pieces(""), V{});
}

// Runs longer than the eight bytes the scanner checks at once, ending at
// each position of a word, with ASCII and other letters and digits mixed.
TEST(Gpt2SplitTest, LongRunsEndWhereTheyShould) {
  EXPECT_EQ(pieces("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ!"),
            (V{"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "!"}));
  EXPECT_EQ(pieces(" 0123456789012345678x"), (V{" 0123456789012345678", "x"}));
  EXPECT_EQ(pieces("abcdefgh\u00e9ijklmnop[q"), (V{"abcdefgh\u00e9ijklmnop", "[", "q"}));
  EXPECT_EQ(pieces("abcdefgh\u00a0ijk"), (V{"abcdefgh", "\u00a0", "ijk"}));
  for (size_t len = 1; len < 20; ++len)
    for (const char* end : {"@", "[", "`", "{", "/", ":", " ", "\t", "\u00e9", "\u00b2", "'"}) {
      const std::string word(len, 'z'), digits(len, '9');
      const auto w = pieces(word + end + "Z");
      ASSERT_FALSE(w.empty());
      EXPECT_EQ(w[0], std::string(end) == "\u00e9" ? word + end + "Z" : word) << len << " " << end;
      const auto d = pieces(digits + end);
      ASSERT_FALSE(d.empty());
      EXPECT_EQ(d[0], std::string(end) == "\u00b2" ? digits + end : digits) << len << " " << end;
    }
}

TEST(Gpt2SplitTest, WindowsAgreeWithTheScanner) {
  testing::expect_windows_agree([](std::string_view t, auto&& emit) { split_gpt2(t, emit); },
                                [](std::string_view t, auto&& emit) { split_gpt2_scanner(t, emit); });
}

}  // namespace
}  // namespace outboard::tokenize
