#include "tokenize/gpt2_split.h"

#include <gtest/gtest.h>

#include <string>
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

}  // namespace
}  // namespace outboard::tokenize
