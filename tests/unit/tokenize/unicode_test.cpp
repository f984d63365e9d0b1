#include "tokenize/unicode.h"

#include <gtest/gtest.h>

#include <string>

#include "tokenize/char_kind.h"

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

// kind_of reads the BMP from its packed table and the rest from
// char_class: both must say what char_class's bits say.
TEST(UnicodeTest, KindOfEveryCodePointFollowsItsClass) {
  size_t wrong = 0;
  char32_t first_wrong = 0;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    const uint8_t c = char_class(cp);
    const Kind expected = c & kLetter ? Kind::kLetter : c & kNumber ? Kind::kNumber
                          : c & kSpace ? Kind::kSpace : Kind::kOther;
    if (kind_of(cp) != expected && wrong++ == 0) first_wrong = cp;
  }
  EXPECT_EQ(wrong, 0u) << "first: U+" << std::hex << uint32_t(first_wrong);
  EXPECT_EQ(kind_of(U'Ж'), Kind::kLetter);
  EXPECT_EQ(kind_of(U'中'), Kind::kLetter);
  EXPECT_EQ(kind_of(0x3000), Kind::kSpace);  // ideographic space
  EXPECT_EQ(kind_of(U'٣'), Kind::kNumber);
  EXPECT_EQ(kind_of(U'😀'), Kind::kOther);
}

TEST(UnicodeTest, CaseOfEveryCodePointIsItsCaseClass) {
  size_t wrong = 0;
  char32_t first_wrong = 0;
  for (char32_t cp = 0; cp < 0x110000; ++cp)
    if (case_of(cp) != case_class(cp) && wrong++ == 0) first_wrong = cp;
  EXPECT_EQ(wrong, 0u) << "first: U+" << std::hex << uint32_t(first_wrong);
  EXPECT_EQ(case_of(U'Ж'), kUpperish);
  EXPECT_EQ(case_of(U'ж'), kLowerish);
  EXPECT_EQ(case_of(U'中'), kUpperish | kLowerish);  // Lo: in both
  EXPECT_EQ(case_of(U'٣'), 0);
  EXPECT_EQ(case_of(0x10400), kUpperish);  // DESERET CAPITAL LONG I, past the table
}

// What first_invalid_utf8 must say: utf8_sequence at every character.
size_t first_invalid_by_sequences(std::string_view t) {
  size_t i = 0;
  int bad, len;
  while (i < t.size() && (len = seq(t.data() + i, t.size() - i, bad)) > 0) i += len;
  return i;
}

// Every two bytes, and every three after each three-byte lead, alone and
// between other text: its fast paths for two- and three-byte characters
// meet every error and every end of the text.
TEST(UnicodeTest, FirstInvalidUtf8AgreesWithTheSequencesRules) {
  size_t checked = 0, wrong = 0;
  std::string first_wrong;
  auto check = [&](const std::string& t) {
    ++checked;
    if (first_invalid_utf8(t) != first_invalid_by_sequences(t) && wrong++ == 0) first_wrong = t;
  };
  for (int a = 0x80; a < 0x100; ++a)
    for (int b = 0; b < 0x100; ++b) {
      const std::string two{char(a), char(b)};
      check(two);
      check("x" + two + "\xC3\xA9yz");
      if (a < 0xE0 || a > 0xEF) continue;
      for (int c = 0; c < 0x100; ++c) {
        check(two + char(c));
        check("ab" + two + char(c) + "\xD0\x96");
      }
    }
  EXPECT_EQ(wrong, 0u) << "of " << checked << "; first: " << testing::PrintToString(first_wrong);
}

}  // namespace
}  // namespace outboard::tokenize
