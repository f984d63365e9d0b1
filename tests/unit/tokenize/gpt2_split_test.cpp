#include "tokenize/gpt2_split.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

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

// The 64-byte windows agree with the scanner piece for piece, on texts drawn from what makes their
// rules differ: contractions and their look-alikes, runs of each kind of whitespace, letters,
// digits and other ASCII, characters of each UTF-8 length, at every length and offset around a
// window's edge.
TEST(Gpt2SplitTest, WindowsAgreeWithTheScanner) {
  const std::vector<std::string> parts = {"'", "s", "t", "re", "ve", "m", "ll", "d", "l", "v", "r", "e", "S", "LL",
                                          " ", "  ", "\t", "\n", "\r\n", "\x0b", "\f", "a", "Zq", "word", "7",
                                          "123", "!", "?!", ".", "@", "[", "`", "{", "\x01", "\u00e9", "\u00a0",
                                          "\u00b2", "\u4e2d", "\U0001F600", "\u0301", "\u2028"};
  std::mt19937 rng(2026);
  auto scanner = [](std::string_view text) {
    std::vector<std::pair<size_t, size_t>> out;
    split_gpt2_scanner(text, [&](size_t b, size_t e) { out.emplace_back(b, e); });
    return out;
  };
  auto windows = [](std::string_view text) {
    std::vector<std::pair<size_t, size_t>> out;
    split_gpt2(text, [&](size_t b, size_t e) { out.emplace_back(b, e); });
    return out;
  };
  for (int round = 0; round < 20000; ++round) {
    std::string text;
    const size_t want = rng() % 200;
    const bool ascii = round % 2 == 0;  // half the texts ASCII only, where the windows run throughout
    while (text.size() < want) {
      const std::string& part = parts[rng() % parts.size()];
      if (ascii && static_cast<unsigned char>(part[0]) >= 0x80) continue;
      text += part;
    }
    ASSERT_EQ(windows(text), scanner(text)) << "text of " << text.size() << " B: " << testing::PrintToString(text);
  }
}

}  // namespace
}  // namespace outboard::tokenize
