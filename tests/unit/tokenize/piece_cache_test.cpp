#include "tokenize/piece_cache.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include "../temp_file.h"
#include "../vocab_cache.h"
#include "outboard/tokenizer.h"

namespace outboard::tokenize {
namespace {

namespace fs = std::filesystem;

const uint8_t* bytes(std::string_view s) { return reinterpret_cast<const uint8_t*>(s.data()); }

// The least cache has one set in each table: pieces of one hash share it.
TEST(PieceCacheTest, AnswersOnlyThePieceItKept) {
  auto made = PieceCache::create(PieceCache::kMinBytes);
  ASSERT_TRUE(made);
  const PieceCache& cache = *made;
  const int32_t ids[] = {7, 8, 9};
  std::vector<int32_t> out = {1};
  EXPECT_FALSE(cache.find(bytes("abc"), 3, 42, out));
  cache.insert(bytes("abc"), 3, 42, ids, 3);
  ASSERT_TRUE(cache.find(bytes("abc"), 3, 42, out));
  EXPECT_EQ(out, (std::vector<int32_t>{1, 7, 8, 9}));  // appended
  EXPECT_FALSE(cache.find(bytes("abd"), 3, 42, out));  // same hash, other bytes
  EXPECT_FALSE(cache.find(bytes("abc"), 3, 43, out));  // other hash
  EXPECT_FALSE(cache.find(bytes("ab"), 2, 42, out));
  EXPECT_EQ(out.size(), 4u);
}

// Two ways a set: two pieces that collide are both kept, a third evicts one.
TEST(PieceCacheTest, ASetKeepsTwoPiecesAndAThirdEvictsOne) {
  auto made = PieceCache::create(PieceCache::kMinBytes);
  ASSERT_TRUE(made);
  const PieceCache& cache = *made;
  const int32_t ids[] = {4, 5};
  auto found = [&](std::string_view piece) {
    std::vector<int32_t> out;
    return cache.find(bytes(piece), piece.size(), 42, out) && out == std::vector<int32_t>{4, 5};
  };
  cache.insert(bytes("xa"), 2, 42, ids, 2);
  cache.insert(bytes("xb"), 2, 42, ids, 2);
  EXPECT_TRUE(found("xa"));
  EXPECT_TRUE(found("xb"));
  cache.insert(bytes("xc"), 2, 42, ids, 2);
  EXPECT_TRUE(found("xc"));
  EXPECT_EQ(found("xa") + found("xb"), 1);
}

// Each table holds the pieces of its size; one hash may be in all three.
TEST(PieceCacheTest, PiecesOfEverySizeUpToTheLargestSlot) {
  auto made = PieceCache::create(PieceCache::kMinBytes);
  ASSERT_TRUE(made);
  const PieceCache& cache = *made;
  std::vector<int32_t> ids(60);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(1000 + i);
  struct Case {
    std::string piece;
    size_t count;
  } cases[] = {{"line", 4},                    // 4 + 16: a line's way
               {std::string(20, 'm'), 20},     // 20 + 80: a medium slot
               {std::string(100, 'w'), 37}};   // 100 + 148: a wide slot, full
  for (const auto& c : cases) {
    ASSERT_TRUE(PieceCache::fits(c.piece.size(), c.count)) << c.piece.size();
    cache.insert(bytes(c.piece), c.piece.size(), 7, ids.data(), c.count);
  }
  for (const auto& c : cases) {
    std::vector<int32_t> out;
    ASSERT_TRUE(cache.find(bytes(c.piece), c.piece.size(), 7, out)) << c.piece.size();
    EXPECT_EQ(out, std::vector<int32_t>(ids.begin(), ids.begin() + c.count));
  }
}

TEST(PieceCacheTest, KeepsNothingLargerThanASlot) {
  auto made = PieceCache::create(PieceCache::kMinBytes);
  ASSERT_TRUE(made);
  const PieceCache& cache = *made;
  const std::string piece(PieceCache::kMaxPayloadBytes - 8, 'q');
  const int32_t ids[3] = {1, 2, 3};
  EXPECT_TRUE(PieceCache::fits(piece.size(), 2));
  EXPECT_FALSE(PieceCache::fits(piece.size(), 3));
  cache.insert(bytes(piece), piece.size(), 5, ids, 3);
  std::vector<int32_t> out;
  EXPECT_FALSE(cache.find(bytes(piece), piece.size(), 5, out));
  cache.insert(bytes(piece), piece.size(), 5, ids, 2);
  EXPECT_TRUE(cache.find(bytes(piece), piece.size(), 5, out));
  EXPECT_EQ(out, (std::vector<int32_t>{1, 2}));
}

TEST(PieceCacheTest, StaysWithinItsBound) {
  EXPECT_EQ(PieceCache::create(PieceCache::kMinBytes - 1), nullptr);  // too small for a set of each: none
  for (size_t max : {PieceCache::kMinBytes, size_t{1000}, size_t{1050}, size_t{4096}, size_t{16} << 20, (size_t{64} << 20) - 1}) {
    const size_t got = PieceCache::create(max)->capacity_bytes();
    EXPECT_LE(got, max);
    EXPECT_GT(got, max - PieceCache::kMinBytes) << max;  // the rest of the bound is less than a set of each
  }
}

TEST(PieceCacheTest, OnlyModelsThatUseOneMapOne) {
  testing::TempFile vocab("vocab.txt", "[UNK]\n[CLS]\n[SEP]\na\n");
  auto bert = Tokenizer::bert_wordpiece(vocab.string());
  ASSERT_TRUE(bert.ok()) << bert.status().to_string();
  EXPECT_EQ(bert->piece_cache_bytes(), 0u);
  EXPECT_EQ(bert->with_piece_cache(4096).piece_cache_bytes(), 0u);
}

std::string gpt2_path() { return testing::cached_vocab("gpt2.tiktoken"); }

// Words of several scripts, most of them several tokens long, repeating.
std::vector<std::string> texts(size_t count) {
  static const char* alphabet[] = {"a", "e", "k",  "q",  "z", "é", "ß", "α", "λ",
                                   "ж", "я", "中", "語", "😀", "7", "'", "-"};
  std::mt19937 rng(11);
  std::vector<std::string> words(300);
  for (auto& w : words)
    for (size_t i = 1 + rng() % 12; i > 0; --i) w += alphabet[rng() % std::size(alphabet)];
  std::vector<std::string> out(count);
  for (auto& t : out)
    for (int i = 0; i < 200; ++i) t += (rng() % 4 ? " " : "\n") + words[rng() % words.size()];
  return out;
}

std::vector<std::vector<int32_t>> encode_all(const Tokenizer& t, const std::vector<std::string>& in) {
  std::vector<std::vector<int32_t>> out(in.size());
  for (size_t i = 0; i < in.size(); ++i) EXPECT_TRUE(t.encode(in[i], out[i]).ok());
  return out;
}

TEST(PieceCacheTest, NeverChangesIds) {
  if (!fs::exists(gpt2_path())) GTEST_SKIP() << "run `outboard vocab fetch` first";
  auto loaded = Tokenizer::from_tiktoken(gpt2_path());
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  const Tokenizer none = loaded->with_piece_cache(0);
  EXPECT_EQ(none.piece_cache_bytes(), 0u);
  EXPECT_EQ(loaded->piece_cache_bytes(), kDefaultPieceCacheBytes);
  const auto in = texts(40);
  const auto expected = encode_all(none, in);
  for (size_t bytes : {PieceCache::kMinBytes, size_t{4096}, kDefaultPieceCacheBytes}) {
    const Tokenizer cached = loaded->with_piece_cache(bytes);
    EXPECT_EQ(encode_all(cached, in), expected) << bytes << " B, cold";
    EXPECT_EQ(encode_all(cached, in), expected) << bytes << " B, warm";
  }
}

// Threads share one small cache (slots replaced all the time); under TSan
// this is also the race check of the seqlock.
TEST(PieceCacheTest, ThreadsSharingACacheGetTheSameIds) {
  if (!fs::exists(gpt2_path())) GTEST_SKIP() << "run `outboard vocab fetch` first";
  auto loaded = Tokenizer::from_tiktoken(gpt2_path());
  ASSERT_TRUE(loaded.ok());
  const auto in = texts(24);
  const auto expected = encode_all(loaded->with_piece_cache(0), in);
  const Tokenizer shared = loaded->with_piece_cache(2048);
  std::vector<std::vector<std::vector<int32_t>>> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) got[t] = encode_all(shared, in);
    });
  for (auto& th : threads) th.join();
  for (const auto& g : got) EXPECT_EQ(g, expected);
}

}  // namespace
}  // namespace outboard::tokenize
