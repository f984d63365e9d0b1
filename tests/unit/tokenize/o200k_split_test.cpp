#include "tokenize/o200k_split.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "split_windows.h"

namespace outboard::tokenize {
namespace {

template <const O200kRules& kRules>
std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  split_o200k<kRules>(text, [&](size_t b, size_t e) { out.emplace_back(text.substr(b, e - b)); });
  return out;
}

using V = std::vector<std::string>;

// Known answers of tiktoken's o200k pattern and of Tekken's (from Python's
// `regex` on the same patterns); the exactness gate compares ids with
// tiktoken and mistral-common themselves.
TEST(O200kSplitTest, KnownPieces) {
  const auto o = pieces<kO200kRules>;
  EXPECT_EQ(o("HTMLParser don't DON'T"), (V{"HTMLParser", " don't", " DON'T"}));
  EXPECT_EQ(o("ABC def getHTTPResponse"), (V{"ABC", " def", " get", "HTTPResponse"}));
  EXPECT_EQ(o("A\u3042 \u3042A"), (V{"A\u3042", " \u3042", "A"}));  // Lo is upper and lower
  EXPECT_EQ(o("!\u0301x"), (V{"!\u0301x"}));                         // so is a mark
  EXPECT_EQ(o(" \u0301"), (V{" \u0301"}));
  EXPECT_EQ(o("\u01c5ungla"), (V{"\u01c5ungla"}));  // Lt
  EXPECT_EQ(o("12345"), (V{"123", "45"}));
  EXPECT_EQ(o("x'\u017fy"), (V{"x'\u017f", "y"}));
  EXPECT_EQ(o("hello\r\n/\nworld"), (V{"hello", "\r\n", "/\n", "world"}));
  EXPECT_EQ(o("  \n  x"), (V{"  \n", " ", " x"}));
  EXPECT_EQ(o("a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(o("trailing \n  "), (V{"trailing", " \n", "  "}));
  EXPECT_EQ(o("(foo) 'bar"), (V{"(foo", ")", " '", "bar"}));
  EXPECT_EQ(o(""), V{});
}

TEST(O200kSplitTest, TekkenHasSingleDigitsAndNoContractions) {
  const auto t = pieces<kTekkenRules>;
  EXPECT_EQ(t("HTMLParser don't DON'T"), (V{"HTMLParser", " don", "'t", " DON", "'T"}));
  EXPECT_EQ(t("12345"), (V{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(t("x'\u017fy"), (V{"x", "'\u017fy"}));
  EXPECT_EQ(t("ABC def"), (V{"ABC", " def"}));
}

// Lower-case runs skip ASCII eight bytes at a time: they must end wherever
// a word does.
TEST(O200kSplitTest, LongLowerCaseRunsEndWhereTheyShould) {
  for (size_t len = 1; len < 20; ++len)
    for (const char* end : {"A", "@", "[", "`", "{", "1", " ", "\u00e9", "\u3042", "\u0301", "'"}) {
      const std::string word = "W" + std::string(len, 'z');
      const auto p = pieces<kTekkenRules>(word + end + "Z");
      ASSERT_FALSE(p.empty());
      const bool lower = std::string(end) == "\u00e9" || std::string(end) == "\u3042" || std::string(end) == "\u0301";
      EXPECT_EQ(p[0], lower ? word + end : word) << len << " " << end;
    }
}

TEST(O200kSplitTest, WindowsAgreeWithTheScanner) {
  testing::expect_windows_agree([](std::string_view t, auto&& emit) { split_o200k<kO200kRules>(t, emit); },
                                [](std::string_view t, auto&& emit) { split_o200k_scanner<kO200kRules>(t, emit); });
  testing::expect_windows_agree([](std::string_view t, auto&& emit) { split_o200k<kTekkenRules>(t, emit); },
                                [](std::string_view t, auto&& emit) { split_o200k_scanner<kTekkenRules>(t, emit); });
}

}  // namespace
}  // namespace outboard::tokenize
