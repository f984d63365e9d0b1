// The GPU tokenizer's steps (src/gpu/bpe_kernels.h) run on the CPU against
// the CPU tokenizer, on text made to hit every rule of the pre-tokenizer and
// every chunk boundary; where a CUDA device is, the same batches on it.
#include <algorithm>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu/tables.h"
#include "gpu/gpu_tokenizer.h"
#include "tests/unit/vocab_cache.h"

#if OUTBOARD_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace outboard::gpu {
namespace {

namespace fs = std::filesystem;

// bpe_kernels.h's executor on one CPU thread: the steps in order, each thread's work in turn.
struct CpuExec {
  template <typename F>
  void each(uint32_t n, F f) {
    for (uint32_t i = 0; i < n; ++i) f(i);
  }
  void exclusive_sum(const uint32_t* in, uint32_t* out, uint32_t n) { std::exclusive_scan(in, in + n, out, 0u); }
};

struct Encoded {
  std::vector<int32_t> ids;
  std::vector<uint32_t> offsets;
};

// A batch's texts back to back, and where each begins (one more: the end).
struct Joined {
  std::string all;
  std::vector<uint32_t> offsets;
  explicit Joined(const std::vector<std::string>& texts) {
    for (const auto& t : texts) {
      offsets.push_back(static_cast<uint32_t>(all.size()));
      all += t;
    }
    offsets.push_back(static_cast<uint32_t>(all.size()));
  }
};

Encoded encode_on_cpu(const BpeTableImage& image, const std::vector<std::string>& texts, uint32_t capacity) {
  Joined joined(texts);
  const std::string& all = joined.all;
  std::vector<uint32_t>& text_offsets = joined.offsets;
  const size_t n = all.size();
  std::vector<uint32_t> starts(n + 1), piece_of(n + 1), ranks(n), links(2 * n), counts(n + 1), id_offsets(n + 1),
      text_ids(texts.size() + 1);
  std::vector<uint64_t> heap(3 * n);
  std::vector<int32_t> parts(n);
  Encoded out;
  out.ids.assign(capacity + 2, -1);  // two past the capacity, which no step may write
  const BpeBatch b{reinterpret_cast<const uint8_t*>(all.data()), static_cast<uint32_t>(n), text_offsets.data(),
                   static_cast<uint32_t>(texts.size()), starts.data(), piece_of.data(), parts.data(), ranks.data(),
                   links.data(), heap.data(), counts.data(), id_offsets.data(), out.ids.data(), capacity,
                   text_ids.data()};
  CpuExec exec;
  encode_batch(exec, image.host_view(), b);
  out.offsets = text_ids;
  return out;
}

Encoded encode_on_cpu(const WordPieceTableImage& image, const std::vector<std::string>& texts, uint32_t capacity) {
  Joined joined(texts);
  const std::string& all = joined.all;
  std::vector<uint32_t>& text_offsets = joined.offsets;
  const size_t n = all.size(), nn = (n + 1) * image.max_expansion;
  std::vector<uint32_t> norm_lens(n + 1), norm_at(n + 1), starts(nn), word_of(nn), counts(nn), id_offsets(nn),
      text_ids(texts.size() + 1);
  std::vector<uint8_t> norm(nn);
  std::vector<int32_t> parts(nn);
  Encoded out;
  out.ids.assign(capacity + 2, -1);  // two past the capacity, which no step may write
  const WordPieceBatch b{reinterpret_cast<const uint8_t*>(all.data()), static_cast<uint32_t>(n), text_offsets.data(),
                         static_cast<uint32_t>(texts.size()), norm_lens.data(), norm_at.data(), norm.data(),
                         static_cast<uint32_t>(nn - 1), starts.data(), word_of.data(), parts.data(), counts.data(),
                         id_offsets.data(), out.ids.data(), capacity, text_ids.data()};
  CpuExec exec;
  encode_batch(exec, image.host_view(), b);
  out.offsets = text_ids;
  return out;
}

// Characters that each rule of r50k's pattern turns on: letters of several scripts, combining
// marks, digits and other numbers, apostrophes and the contractions' letters, whitespace of every
// kind, punctuation, symbols, CJK and emoji (4-byte UTF-8).
const std::vector<std::string> kAlphabet = {
    "a", "b", "s", "t", "d", "m", "l", "v", "e", "r", "Z", "'", "'", "'", " ", " ", " ", " ", "\t", "\n", "\r\n",
    "\u00a0", "\u3000", "\u2028", "0", "7", "\u00b2", "\u2167", "\u0663", ".", ",", "!", "?", "-", "(", "\"", "$",
    "\u00e9", "e\u0301", "\u00df", "\u0416", "\u05d0", "\u0628", "\u4e2d", "\u6587", "\u3042", "\ud55c",
    "\U0001F600", "\U0001F44D\U0001F3FD", "\u20ac", "\u00a9", "\u200b", "\u0301"};

std::string random_text(std::mt19937& rng, size_t chars) {
  std::string s;
  std::uniform_int_distribution<size_t> pick(0, kAlphabet.size() - 1), run(1, 3 * kChunkBytes);
  while (chars > 0) {
    // Runs of one character now and then, longer than a chunk: a chunk with nowhere to start.
    const std::string& c = kAlphabet[pick(rng)];
    const size_t repeat = rng() % 16 == 0 ? std::min(chars, run(rng)) : 1;
    for (size_t k = 0; k < repeat; ++k) s += c;
    chars -= repeat;
  }
  return s;
}

class GpuTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = testing::cached_vocab("gpt2.tiktoken");
    if (!fs::exists(path)) GTEST_SKIP() << "run `outboard vocab fetch` first";
    auto t = Tokenizer::from_tiktoken(path);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    tokenizer_ = std::make_unique<Tokenizer>(std::move(*t));
    auto image = model_tables(*tokenizer_);
    ASSERT_TRUE(image.ok()) << image.status().to_string();
    image_ = std::move(std::get<BpeTableImage>(*image));
  }

  std::vector<std::vector<int32_t>> reference(const std::vector<std::string>& texts) const {
    std::vector<std::vector<int32_t>> ids(texts.size());
    EncodeOptions ordinary;
    ordinary.ordinary = true;
    for (size_t i = 0; i < texts.size(); ++i) EXPECT_TRUE(tokenizer_->encode(texts[i], ids[i], ordinary).ok());
    return ids;
  }

  static void expect_same(const std::vector<std::string>& texts, const std::vector<std::vector<int32_t>>& want,
                          const std::vector<int32_t>& ids, const std::vector<uint32_t>& offsets) {
    ASSERT_EQ(offsets.size(), texts.size() + 1);
    for (size_t i = 0; i < texts.size(); ++i) {
      const std::vector<int32_t> got(ids.begin() + offsets[i], ids.begin() + offsets[i + 1]);
      ASSERT_EQ(got, want[i]) << "text " << i << ": '" << texts[i] << "'";
    }
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  BpeTableImage image_;
};

TEST_F(GpuTokenizerTest, StepsOnTheCpuGiveTheCpuTokenizersIds) {
  std::mt19937 rng(7);
  std::vector<std::string> texts = {"", "Hello world", "I'm here, they'll see: it's 2024's   best\n\n  day!",
                                    "  leading", "trailing   ", "\n", "'s'S'll'LL've're'd'm't", "''''", "x''s",
                                    "\u4e2d\u6587\u4e2d\u6587 \U0001F600\U0001F600!"};
  texts.emplace_back(100, ' ');  // whitespace longer than a chunk, then a word
  texts.back() += "x";
  texts.emplace_back(3 * kChunkBytes + 5, 'a');  // chunks with nowhere to start
  texts.back() += " b";
  for (int i = 0; i < 400; ++i) texts.push_back(random_text(rng, rng() % 300));
  texts.push_back(random_text(rng, 8192));
  // Long pieces, which merge through the queue: letters of several scripts with nothing between them.
  const std::vector<std::string> letters = {"a", "q", "Z", "e", "s", "\u00e9", "\u0416", "\u4e2d", "\u6587", "\u3042",
                                            "\u0e01", "\u0e32", "\ud55c"};
  for (size_t chars : {33, 40, 100, 700, 3000}) {
    std::string t = " ";
    for (size_t k = 0; k < chars; ++k) t += letters[rng() % letters.size()];
    texts.push_back(t);
  }
  const auto want = reference(texts);
  size_t total = 0;
  for (const auto& w : want) total += w.size();
  const Encoded got = encode_on_cpu(image_, texts, static_cast<uint32_t>(total));
  expect_same(texts, want, got.ids, got.offsets);
  EXPECT_EQ(got.offsets.back(), total);
}

TEST_F(GpuTokenizerTest, TokensTheMergesDoNotMakeAreFoundWhole) {
  // Every token of the vocabulary, as a text of its own where it is valid UTF-8 on its own.
  std::vector<std::string> texts;
  for (int32_t id = 0; id < 50256; ++id) {
    std::vector<int32_t> ids = {id};
    auto text = tokenizer_->decode(ids);
    if (text.ok() && gpu::check_batch(std::vector<std::string_view>{*text}, true, {}).ok()) texts.push_back(*text);
  }
  ASSERT_GT(texts.size(), 40000u);
  const auto want = reference(texts);
  size_t total = 0;
  for (const auto& w : want) total += w.size();
  const Encoded got = encode_on_cpu(image_, texts, static_cast<uint32_t>(total));
  expect_same(texts, want, got.ids, got.offsets);
}

TEST_F(GpuTokenizerTest, IdsThatDoNotFitAreNotWritten) {
  const std::vector<std::string> texts = {"one two three four five six"};
  const Encoded got = encode_on_cpu(image_, texts, 3);
  EXPECT_EQ(got.offsets.back(), 6u);  // the total is known, for the caller's error
  const auto want = reference(texts);
  EXPECT_EQ(std::vector<int32_t>(got.ids.begin(), got.ids.begin() + 3),
            std::vector<int32_t>(want[0].begin(), want[0].begin() + 3));
  EXPECT_EQ(got.ids[3], -1) << "an id past the capacity was written";
  EXPECT_EQ(got.ids[4], -1) << "an id past the capacity was written";
}

TEST_F(GpuTokenizerTest, BatchesAreCheckedOnTheHostNamingTheText) {
  const std::vector<std::pair<std::string, int32_t>> specials = {{"<|endoftext|>", 50256}};
  std::vector<std::string_view> texts = {"fine", "bad \xff byte"};
  Status st = check_batch(texts, false, specials);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("text 1 is not valid UTF-8 at byte offset 4"), std::string::npos) << st.to_string();
  texts = {"fine", "an <|endoftext|> here"};
  st = check_batch(texts, false, specials);
  EXPECT_NE(st.message().find("text 1 contains the special token '<|endoftext|>' at byte offset 3"), std::string::npos)
      << st.to_string();
  EXPECT_TRUE(check_batch(texts, true, specials).ok());
}

TEST_F(GpuTokenizerTest, OtherVocabulariesAreRefusedNamingWhy) {
  const std::string path = testing::cached_vocab("cl100k_base.tiktoken");
  if (!fs::exists(path)) GTEST_SKIP() << "run `outboard vocab fetch` first";
  auto cl100k = Tokenizer::from_tiktoken(path, {}, Pretokenizer::kCl100k);
  ASSERT_TRUE(cl100k.ok());
  auto image = model_tables(*cl100k);
  EXPECT_EQ(image.status().code(), Code::kUnsupported);
  EXPECT_NE(image.status().message().find("byte-level BPE with another pattern"), std::string::npos);
}

// BERT's rules: whitespace of every kind, ASCII and Unicode punctuation, controls (dropped), accents
// (stripped: composed and combining), capitals, CJK (a word each), Hangul (decomposed), letters the
// vocabulary lacks, and words over 100 characters.
const std::vector<std::string> kBertAlphabet = {
    "a", "b", "e", "s", "T", "H", "q", " ", " ", " ", "\t", "\n", "\u3000", "\u00a0", ".", ",", "!", "'", "-", "#",
    "$", "\u00bf", "\u2014", "\u3001", "\x01", "\x7f", "\u200b", "\ufffd", "\u00e9", "E\u0301", "\u00c5", "\u0130",
    "\u00df", "\u0416", "\u4e2d", "\u6587", "\ud55c", "\u0e01", "7", "\u00b2", "\U0001F600", "\U00020000"};

std::string random_bert_text(std::mt19937& rng, size_t chars) {
  std::string s;
  std::uniform_int_distribution<size_t> pick(0, kBertAlphabet.size() - 1);
  for (size_t k = 0; k < chars; ++k) s += kBertAlphabet[pick(rng)];
  return s;
}

TEST(GpuWordPieceTest, StepsOnTheCpuGiveTheCpuTokenizersIds) {
  const std::string path = testing::cached_vocab("bert-base-uncased-vocab.txt");
  if (!fs::exists(path)) GTEST_SKIP() << "run `outboard vocab fetch` first";
  for (bool lowercase : {true, false}) {
    WordPieceOptions options;
    options.lowercase = lowercase;
    auto bert = Tokenizer::bert_wordpiece(path, options);
    ASSERT_TRUE(bert.ok());
    auto tables = model_tables(*bert);
    ASSERT_TRUE(tables.ok()) << tables.status().to_string();
    const auto& image = std::get<WordPieceTableImage>(*tables);
    EXPECT_GE(image.max_expansion, lowercase ? 3u : 2u);  // a Hangul syllable stripped: three jamo; CJK: " X "
    std::mt19937 rng(lowercase ? 3 : 4);
    std::vector<std::string> texts = {"", "Hello, World!", "  unaffable   ", "don't", "\u4e2d\u6587abc\u00e9\u00e9",
                                      "\x01\x02", "naïve café Ægir"};
    texts.emplace_back(101, 'a');  // over 100 characters: [UNK]
    texts.emplace_back(100, 'a');
    for (int i = 0; i < 400; ++i) texts.push_back(random_bert_text(rng, rng() % 200));
    for (int i = 0; i < 50; ++i) {  // words of letters and accents, some long
      std::string t;
      for (size_t k = rng() % 300; k > 0; --k) t += rng() % 9 == 0 ? " " : rng() % 5 == 0 ? "\u00e9" : std::string(1, char('a' + rng() % 26));
      texts.push_back(t);
    }
    std::vector<std::vector<int32_t>> want(texts.size());
    size_t total = 0;
    EncodeOptions ordinary;
    ordinary.ordinary = true;
    for (size_t i = 0; i < texts.size(); ++i) {
      ASSERT_TRUE(bert->encode(texts[i], want[i], ordinary).ok());
      total += want[i].size();
    }
    const Encoded got = encode_on_cpu(image, texts, static_cast<uint32_t>(total));
    ASSERT_EQ(got.offsets.size(), texts.size() + 1);
    for (size_t i = 0; i < texts.size(); ++i)
      ASSERT_EQ(std::vector<int32_t>(got.ids.begin() + got.offsets[i], got.ids.begin() + got.offsets[i + 1]), want[i])
          << "lowercase " << lowercase << ", text " << i << ": '" << texts[i] << "'";
    EXPECT_EQ(got.ids[total], -1) << "an id past the capacity was written";
  }
}

TEST_F(GpuTokenizerTest, OnTheDeviceTheIdsAreTheCpuTokenizers) {
  auto gpu = GpuTokenizer::create(*tokenizer_);
  if (!gpu.ok()) GTEST_SKIP() << "no GPU tokenizer here: " << gpu.status().to_string();
#if OUTBOARD_HAVE_CUDA
  std::mt19937 rng(11);
  std::vector<std::string> texts = {"Hello world", "", "it's   2024\n\n"};
  for (int i = 0; i < 200; ++i) texts.push_back(random_text(rng, rng() % 2000));
  const auto want = reference(texts);
  std::vector<std::string_view> views(texts.begin(), texts.end());
  size_t bytes = 0;
  for (const auto& t : texts) bytes += t.size();
  int32_t* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, bytes * sizeof(int32_t)), cudaSuccess);
  std::vector<uint32_t> offsets;
  GpuTokenizer::Stages stages;
  Status st = (*gpu)->encode(views, true, device, bytes, offsets, &stages);
  ASSERT_TRUE(st.ok()) << st.to_string();
  std::vector<int32_t> ids(offsets.back());
  ASSERT_EQ(cudaMemcpy(ids.data(), device, ids.size() * sizeof(int32_t), cudaMemcpyDeviceToHost), cudaSuccess);
  expect_same(texts, want, ids, offsets);
  EXPECT_GT(stages.kernels_ns, 0u);
  // Too little room fails naming both counts, and host memory is refused.
  st = (*gpu)->encode(views, true, device, 10, offsets);
  EXPECT_EQ(st.code(), Code::kTooBig);
  EXPECT_NE(st.message().find("the output holds 10"), std::string::npos) << st.to_string();
  st = (*gpu)->encode(views, true, ids.data(), ids.size(), offsets);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.to_string();
  cudaFree(device);
#endif
}

}  // namespace
}  // namespace outboard::gpu
