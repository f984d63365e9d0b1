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

TEST(PieceCacheTest, AnswersOnlyThePieceItKept) {
  auto made = PieceCache::create(PieceCache::kSlotBytes);  // one slot: every piece shares it
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
  cache.insert(bytes("xyz"), 3, 42, ids, 2);  // replaces
  EXPECT_FALSE(cache.find(bytes("abc"), 3, 42, out));
  ASSERT_TRUE(cache.find(bytes("xyz"), 3, 42, out));
  EXPECT_EQ(out, (std::vector<int32_t>{1, 7, 8, 9, 7, 8}));
}

TEST(PieceCacheTest, KeepsNothingLargerThanASlot) {
  auto made = PieceCache::create(PieceCache::kSlotBytes);
  ASSERT_TRUE(made);
  const PieceCache& cache = *made;
  const std::string piece(PieceCache::kPayloadBytes - 8, 'q');
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
  auto bytes = [](size_t max) { return PieceCache::create(max)->capacity_bytes(); };
  EXPECT_EQ(bytes(1000), 512u);  // a power of two of slots, never above the bound
  EXPECT_EQ(bytes(size_t{64} << 20), size_t{64} << 20);
  EXPECT_EQ(bytes((size_t{64} << 20) - 1), size_t{32} << 20);
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
  for (size_t bytes : {PieceCache::kSlotBytes, size_t{4096}, kDefaultPieceCacheBytes}) {
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
