#include "tokenize/wordpiece.h"

#include <gtest/gtest.h>

namespace outboard::tokenize {
namespace {

// A fake vocabulary (unit test only) exercising the greedy longest match.
BertWordPiece fake_model(BertOptions o = {}) {
  BertWordPiece m;
  m.options = o;
  std::vector<std::string> vocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "##aff", "##able", "aff", "able",
                                    "!",     "hello", "##s",   "a",     "##a", "中",   "ω", "##ω"};
  EXPECT_TRUE(m.build(vocab, "fake").ok());
  return m;
}

std::vector<int32_t> ids(const BertWordPiece& m, std::string_view text) {
  std::vector<int32_t> out;
  EXPECT_TRUE(m.encode_ordinary(text, out, nullptr).ok());
  return out;
}

TEST(WordPieceTest, GreedyLongestMatchAndUnk) {
  auto m = fake_model();
  EXPECT_EQ(ids(m, "unaffable"), (std::vector<int32_t>{4, 5, 6}));
  EXPECT_EQ(ids(m, "Hello!"), (std::vector<int32_t>{10, 9}));  // lowercased, punctuation split
  EXPECT_EQ(ids(m, "hellox"), (std::vector<int32_t>{1}));       // one failed part: whole word [UNK]
  EXPECT_EQ(ids(m, "  a\t\na  "), (std::vector<int32_t>{12, 12}));
  EXPECT_EQ(ids(m, "中中"), (std::vector<int32_t>{14, 14}));     // CJK padded into words
}

// Where each id came from in the text, in bytes: the normalizer lowercases,
// strips accents and drops controls, so ids are placed by the characters
// their normalized pieces came from.
TEST(WordPieceTest, SpansPointAtTheCharactersEachPieceCameFrom) {
  auto m = fake_model();
  auto spans = [&](std::string_view text) {
    std::vector<int32_t> out;
    Tokenizer::Model::ByteSpans s;
    EXPECT_TRUE(m.encode_spans(text, out, s).ok());
    EXPECT_EQ(out, ids(m, text));
    return s;
  };
  using S = Tokenizer::Model::ByteSpans;
  EXPECT_EQ(spans("UNAFFABLE!"), (S{{0, 2}, {2, 5}, {5, 9}, {9, 10}}));
  // "Ü" (2 bytes) strips to "u"; the control byte \x01 is dropped between pieces' words.
  EXPECT_EQ(spans("\xC3\x9Cnaff \x01" "able"), (S{{0, 3}, {3, 6}, {8, 12}}));
  EXPECT_EQ(spans(" hellox  a"), (S{{1, 7}, {9, 10}}));  // an [UNK] spans its whole word
  EXPECT_EQ(spans("a中中"), (S{{0, 1}, {1, 4}, {4, 7}}));
  EXPECT_EQ(spans("ωω"), (S{{0, 2}, {2, 4}}));
  // Appending to ids a caller already holds: the spans are the new ids' alone.
  std::vector<int32_t> held = {12, 12, 12};
  S s;
  ASSERT_TRUE(m.encode_spans("hellox a", held, s).ok());
  EXPECT_EQ(s, (S{{0, 6}, {7, 8}}));
}

TEST(WordPieceTest, HundredCharacterLimitCountsCharacters) {
  auto m = fake_model();
  std::string word100, word101;
  for (int i = 0; i < 100; ++i) word100 += "ω";  // 200 bytes, 100 characters
  word101 = word100 + "ω";
  EXPECT_EQ(ids(m, word100).size(), 100u);
  EXPECT_EQ(ids(m, word101), (std::vector<int32_t>{1}));
}

TEST(WordPieceTest, NormalizerCleansStripsAndLowercasesPerCharacter) {
  auto m = fake_model();
  std::string out;
  m.normalize("\xC3\x89t\xC3\xA9\x01\tX\xCE\xA3", out);  // Été \x01 \t X Σ
  EXPECT_EQ(out, "ete x\xCF\x83");                      // σ, not final ς: per-character, as HF
  BertOptions keep;
  keep.lowercase = false;
  keep.strip_accents = false;
  auto raw = fake_model(keep);
  out.clear();
  raw.normalize("\xC3\x89t\xC3\xA9", out);
  EXPECT_EQ(out, "\xC3\x89t\xC3\xA9");
}

TEST(WordPieceTest, MissingUnkTokenIsAnError) {
  BertWordPiece m;
  EXPECT_EQ(m.build({"a", "b"}, "'v.txt'").code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace outboard::tokenize
