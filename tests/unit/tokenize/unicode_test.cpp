#include "tokenize/unicode.h"

#include <gtest/gtest.h>

namespace outboard::tokenize {
namespace {

TEST(UnicodeTest, ClassesOfKnownCharacters) {
  EXPECT_EQ(unicode_version(), "16.0.0");
  EXPECT_TRUE(char_class(U'a') & kLetter);
  EXPECT_TRUE(char_class(U'Ж') & kLetter);
  EXPECT_TRUE(char_class(U'中') & kLetter);
  EXPECT_TRUE(char_class(U'中') & kCjk);
  EXPECT_TRUE(char_class(U'٣') & kNumber);   // Arabic-Indic digit
  EXPECT_TRUE(char_class(U'Ⅻ') & kNumber);   // Nl
  EXPECT_TRUE(char_class(0x00A0) & kSpace);  // NBSP is White_Space
  EXPECT_TRUE(char_class(0x0085) & kSpace);
  EXPECT_FALSE(char_class(0x200B) & kSpace); // ZWSP is not
  EXPECT_FALSE(char_class(0x180E) & kSpace); // not since Unicode 6.3
  EXPECT_TRUE(char_class(0x0301) & kMarkNonspacing);
  EXPECT_TRUE(char_class(U'!') & kPunct);
  EXPECT_TRUE(char_class(0xE000) & kControl);  // private use
  EXPECT_EQ(char_class(0x110000), 0);
}

int seq(const char* s, size_t n, int& bad) {
  return utf8_sequence(reinterpret_cast<const uint8_t*>(s), n, bad);
}

TEST(UnicodeTest, Utf8SequencesAndMaximalSubparts) {
  int bad;
  EXPECT_EQ(seq("\xC3\xA9", 2, bad), 2);
  EXPECT_EQ(seq("\xF0\x9F\x98\x80", 4, bad), 4);
  EXPECT_EQ(seq("\xFF", 1, bad), 0);
  EXPECT_EQ(bad, 1);
  EXPECT_EQ(seq("\xE0\x80\x80", 3, bad), 0);  // overlong: E0 needs A0..BF
  EXPECT_EQ(bad, 1);
  EXPECT_EQ(seq("\xED\xA0\x80", 3, bad), 0);  // surrogate
  EXPECT_EQ(bad, 1);
  EXPECT_EQ(seq("\xF0\x9F\x98", 3, bad), 0);  // truncated: one U+FFFD for all three
  EXPECT_EQ(bad, 3);
  EXPECT_EQ(seq("\xE2\x82x", 3, bad), 0);
  EXPECT_EQ(bad, 2);
  EXPECT_EQ(seq("\xF4\x90\x80\x80", 4, bad), 0);  // above U+10FFFF
  EXPECT_EQ(bad, 1);
}

}  // namespace
}  // namespace outboard::tokenize
