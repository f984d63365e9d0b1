#include "outboard/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "../temp_file.h"
#include "../vocab_cache.h"

namespace outboard {
namespace {

namespace fs = std::filesystem;

testing::TempFile write(std::string_view name, std::string_view content) { return {name, content}; }

std::string gpt2_path() { return testing::cached_vocab("gpt2.tiktoken"); }

TEST(TokenizerTest, Gpt2KnownAnswers) {
  if (!fs::exists(gpt2_path())) GTEST_SKIP() << "run `outboard vocab fetch` first";
  auto t = Tokenizer::from_tiktoken(gpt2_path());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  std::vector<int32_t> ids;
  ASSERT_TRUE(t->encode("Hello world", ids).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(t->vocab_size(), 50257u);
  EXPECT_EQ(t->special_id("<|endoftext|>"), 50256);
  ids.clear();
  EncodeOptions ordinary;
  ordinary.ordinary = true;
  ASSERT_TRUE(t->encode("<|endoftext|>", ids, ordinary).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{27, 91, 437, 1659, 5239, 91, 29}));
  ids.clear();
  Status st = t->encode("a<|endoftext|>", ids);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_TRUE(ids.empty());
  EncodeOptions replace;
  replace.utf8 = Utf8Policy::kReplace;
  ASSERT_TRUE(t->encode("ab\xff cd ef", ids, replace).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{397, 4210, 22927, 304, 69}));
  auto text = t->decode(ids);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text.value(), "ab\xEF\xBF\xBD cd ef");
  int32_t bad[] = {50300};
  EXPECT_EQ(t->decode(bad).status().code(), Code::kNotFound);
}

// Each text fails alone, by the rules an agent's tokenize service applies
// (it calls encode_each too), and adds no ids.
TEST(TokenizerTest, EncodeEachFailsTextsAlone) {
  if (!fs::exists(gpt2_path())) GTEST_SKIP() << "run `outboard vocab fetch` first";
  auto t = Tokenizer::from_tiktoken(gpt2_path());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const std::vector<std::string_view> texts = {"Hello world", "bad \xff byte", "a<|endoftext|>",
                                               "0123456789", "Hello world Hello", "Hello"};
  TextLimits limits;
  limits.max_text_bytes = 16;
  limits.max_text_bytes_source = "agent option --max-text-bytes";
  limits.max_len = 3;
  limits.capacity = 2;
  std::vector<int32_t> ids;
  std::vector<uint64_t> offsets;
  const std::vector<Status> st = t->encode_each(texts, ids, offsets, {}, limits);
  ASSERT_EQ(st.size(), texts.size());
  EXPECT_TRUE(st[0].ok());
  EXPECT_EQ(st[1].code(), Code::kInvalidArgument);
  EXPECT_NE(st[1].message().find("text 1"), std::string::npos) << st[1].message();
  EXPECT_EQ(st[2].code(), Code::kInvalidArgument);
  EXPECT_NE(st[2].message().find("special token"), std::string::npos) << st[2].message();
  EXPECT_EQ(st[3].code(), Code::kTooBig);
  EXPECT_NE(st[3].message().find("text 3 has 5 ids, over max_len 3"), std::string::npos) << st[3].message();
  EXPECT_EQ(st[4].code(), Code::kTooBig);
  EXPECT_EQ(st[4].message(), "text 4 of 17 B exceeds max_text_bytes 16 (agent option --max-text-bytes)");
  EXPECT_EQ(st[5].code(), Code::kTooBig);
  EXPECT_NE(st[5].message().find("output buffer too small: text 5 needs 1 ids at id 2 but the buffer holds 2"),
            std::string::npos)
      << st[5].message();
  EXPECT_EQ(ids, (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(offsets, (std::vector<uint64_t>{0, 2, 2, 2, 2, 2, 2}));

  // No limits: every valid text, ids as encode() gives them.
  const std::vector<Status> all = t->encode_each(texts, ids, offsets, {}, {});
  EXPECT_TRUE(all[3].ok() && all[4].ok() && all[5].ok());
  std::vector<int32_t> one;
  ASSERT_TRUE(t->encode(texts[4], one).ok());
  EXPECT_EQ(std::vector<int32_t>(ids.begin() + offsets[4], ids.begin() + offsets[5]), one);
}

TEST(TokenizerTest, MalformedTiktokenFilesNameTheLine) {
  std::string base;
  for (int b = 0; b < 3; ++b) base += "QUE= " + std::to_string(b) + "\n";
  auto r = Tokenizer::from_tiktoken(write("bad1.tiktoken", "IQ== 0\nnot-base64! 1\n").string());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("line 2"), std::string::npos) << r.status().message();
  r = Tokenizer::from_tiktoken(write("bad2.tiktoken", "IQ== zero\n").string());
  EXPECT_NE(r.status().message().find("line 1: rank"), std::string::npos) << r.status().message();
  r = Tokenizer::from_tiktoken(write("bad3.tiktoken", "IQ== 0\nIQ== 1\n").string());
  EXPECT_NE(r.status().message().find("line 2: token 1 repeats"), std::string::npos) << r.status().message();
  r = Tokenizer::from_tiktoken(write("small.tiktoken", "IQ== 0\n").string());
  EXPECT_NE(r.status().message().find("at least the 256 bytes"), std::string::npos);
  EXPECT_EQ(Tokenizer::from_tiktoken("/nonexistent/x.tiktoken").status().code(), Code::kNotFound);
}

TEST(TokenizerTest, MalformedVocabAndMergesNameTheProblem) {
  auto merges = write("m.txt", "#version: 0.2\na b\n");
  auto r = Tokenizer::from_vocab_merges(write("v1.json", "[1,2]").string(), merges.string());
  EXPECT_NE(r.status().message().find("not a JSON object"), std::string::npos);
  r = Tokenizer::from_vocab_merges(write("v2.json", R"({"a": "x"})").string(), merges.string());
  EXPECT_NE(r.status().message().find("key 'a'"), std::string::npos) << r.status().message();
  r = Tokenizer::from_vocab_merges(write("v3.json", R"({"a": 0, "b": 1})").string(), merges.string());
  EXPECT_NE(r.status().message().find("line 2: the merge result"), std::string::npos) << r.status().message();
  r = Tokenizer::from_vocab_merges(write("v4.json", R"({"a": 0, "b": 1, "ab": 2})").string(),
                                   write("m2.txt", "a b c\n").string());
  EXPECT_NE(r.status().message().find("line 1: expected two tokens"), std::string::npos) << r.status().message();
  r = Tokenizer::from_vocab_merges(write("v5.json", R"({"a": 0, "b": 1, "ab": 2})").string(), merges.string());
  EXPECT_NE(r.status().message().find("lacks the base token for byte"), std::string::npos) << r.status().message();
}

TEST(TokenizerTest, MalformedTokenizerJsonNamesTheKey) {
  const std::string head = R"({"model": {"type": "WordPiece", "unk_token": "[UNK]", "vocab": )";
  auto r = Tokenizer::from_tokenizer_json(write("t1.json", head + R"({"[UNK]": 0, "a": 1, "b": 1}}})").string());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("used twice"), std::string::npos) << r.status().message();
  // An added token without content once made the special-token search loop forever (found by fuzzing).
  r = Tokenizer::from_tokenizer_json(
      write("t2.json", head + R"({"[UNK]": 0, "a": 1}}, "added_tokens": [{"special": true}]})").string());
  EXPECT_NE(r.status().message().find("added_tokens[0].content"), std::string::npos) << r.status().message();
  r = Tokenizer::from_tokenizer_json(write("t3.json", R"({"model": {"type": 7}})").string());
  EXPECT_NE(r.status().message().find("malformed tokenizer.json"), std::string::npos) << r.status().message();
  r = Tokenizer::from_tokenizer_json(write("t4.json", R"({"model": {"type": "Unigram"}})").string());
  EXPECT_EQ(r.status().code(), Code::kUnsupported);
}


// A small Tekken file: the 256 bytes and "ab" (and `vocab_extra`), 4 special ids, with `extra`
// spliced into its top-level object.
std::string tekken_file(std::string_view pattern, std::string_view vocab_extra = "", std::string_view extra = "",
                        int vocab_size = 261) {
  static const char* b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    const std::string bytes = {b64[b >> 2], b64[(b & 3) << 4], '=', '='};
    vocab += "{\"rank\": " + std::to_string(b) + ", \"token_bytes\": \"" + bytes + "\", \"token_str\": null},";
  }
  vocab += R"({"rank": 256, "token_bytes": "YWI=", "token_str": "ab"})";
  vocab += vocab_extra;
  return R"({"config": {"pattern": ")" + std::string(pattern) +
         R"(", "default_vocab_size": )" + std::to_string(vocab_size) +
         R"(, "default_num_special_tokens": 4}, "vocab": [)" + vocab + "]" +
         std::string(extra) + "}";
}

constexpr std::string_view kTekkenPatternJson =
    R"([^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?)"
    R"([\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|)"
    R"(\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+)";

TEST(TokenizerTest, TekkenFilesLoadAndMalformedOnesNameTheField) {
  auto ok = Tokenizer::from_tekken_json(write("tekken_ok.json", tekken_file(kTekkenPatternJson)).string());
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  std::vector<int32_t> ids;
  ASSERT_TRUE(ok->encode("ab [INST]", ids).ok());  // special-token text is ordinary text
  EXPECT_EQ(ids.front(), 256 + 4);                  // ranks follow the 4 special ids
  EXPECT_EQ(ok->special_id("[INST]"), 3);
  EXPECT_EQ(ok->special_id("<SPECIAL_3>"), -1);
  EXPECT_EQ(ok->vocab_size(), 261u);
  EncodeOptions allow;
  allow.allow_special = true;
  EXPECT_EQ(ok->encode("ab", ids, allow).code(), Code::kInvalidArgument);

  auto r = Tokenizer::from_tekken_json(write("tekken_p.json", tekken_file("\\\\p{L}+")).string());
  EXPECT_EQ(r.status().code(), Code::kUnsupported);
  EXPECT_NE(r.status().message().find("tekken_p.json' key 'config.pattern'"), std::string::npos) << r.status().message();
  r = Tokenizer::from_tekken_json(
      write("tekken_r.json", tekken_file(kTekkenPatternJson, R"(,{"rank": 9, "token_bytes": "YWI="})", "", 262)).string());
  EXPECT_NE(r.status().message().find("vocab[257].rank' must be 257"), std::string::npos) << r.status().message();
  r = Tokenizer::from_tekken_json(
      write("tekken_s.json", tekken_file(kTekkenPatternJson, "", R"(, "special_tokens": [{"rank": 4, "token_str": "x"}])"))
          .string());
  EXPECT_NE(r.status().message().find("special_tokens[0].rank' must be an integer in 0..3"), std::string::npos)
      << r.status().message();
  r = Tokenizer::from_tekken_json(write("tekken_j.json", R"({"config": )").string());
  EXPECT_NE(r.status().message().find("is not valid JSON"), std::string::npos) << r.status().message();
  r = Tokenizer::from_tekken_json(write("tekken_t.json", R"({"config": {"pattern": 7}, "vocab": []})").string());
  EXPECT_EQ(r.status().code(), Code::kUnsupported);
}

// Protobuf wire bytes, for small SentencePiece models.
std::string varint(uint64_t v) {
  std::string s;
  do {
    const auto low = static_cast<uint8_t>(v & 0x7F);
    v >>= 7;
    s.push_back(static_cast<char>(low | (v ? 0x80 : 0)));
  } while (v);
  return s;
}
std::string number_field(uint32_t number, uint64_t v) { return varint(number << 3) + varint(v); }
std::string bytes_field(uint32_t number, std::string_view b) {
  return varint(number << 3 | 2) + varint(b.size()) + std::string(b);
}
std::string sp_piece(std::string_view text, float score, int type = 1) {
  std::string f;
  f.resize(4);
  std::memcpy(f.data(), &score, 4);
  return bytes_field(1, bytes_field(1, text) + varint(2 << 3 | 5) + f + number_field(3, type));
}
// <unk> <s> </s>, the 256 byte pieces (ids 3..258), then "▁" "a" "b" "▁a" "ab", and spaces joined last
// ("▁▁" "▁▁▁" at -1e9, as Mistral's); `trainer` is appended to a BPE, byte-fallback trainer_spec.
std::string sp_model(std::string_view trainer = "", std::string_view normal_extra = "", int bytes = 256) {
  std::string m = sp_piece("<unk>", 0, 2) + sp_piece("<s>", 0, 3) + sp_piece("</s>", 0, 3);
  for (int b = 0; b < bytes; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    m += sp_piece(name, 0, 6);
  }
  m += sp_piece("\u2581", -1e9f) + sp_piece("a", -100) + sp_piece("b", -101) + sp_piece("\u2581a", -1) +
       sp_piece("ab", -2) + sp_piece("\u2581\u2581", -1e9f) + sp_piece("\u2581\u2581\u2581", -1e9f);
  m += normal_extra;
  m += bytes_field(2, number_field(3, 2) + number_field(35, 1) + std::string(trainer));
  m += bytes_field(3, bytes_field(1, "identity") + number_field(3, 1) + number_field(4, 0) + number_field(5, 1));
  return m;
}

TEST(TokenizerTest, SentencePieceModelsLoadAndMalformedOnesNameTheField) {
  auto ok = Tokenizer::from_sentencepiece(write("sp_ok.model", sp_model()).string());
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->vocab_size(), 3u + 256 + 7);
  auto encode = [&](std::string_view text) {
    std::vector<int32_t> ids;
    EXPECT_TRUE(ok->encode(text, ids).ok());
    return ids;
  };
  const int32_t mark = 259, b = 261, a_ = 262, mark2 = 264, mark3 = 265;
  EXPECT_EQ(encode("ab"), (std::vector<int32_t>{a_, b}));     // "▁a" outscores "ab"
  EXPECT_EQ(encode("   a"), (std::vector<int32_t>{mark3, a_}));  // the word first, then its spaces from the left
  EXPECT_EQ(encode("    "), (std::vector<int32_t>{mark3, mark2}));
  EXPECT_EQ(encode("c\xC3\xA9"), (std::vector<int32_t>{mark, 3 + 'c', 3 + 0xC3, 3 + 0xA9}));  // byte fallback
  EXPECT_EQ(encode("<s>"), (std::vector<int32_t>{mark, 3 + '<', 3 + 's', 3 + '>'}));  // control text is text
  std::vector<int32_t> ids;
  EncodeOptions bos;
  bos.add_special_tokens = true;
  ASSERT_TRUE(ok->encode("ab", ids, bos).ok());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, a_, b}));
  ids.push_back(2);
  EXPECT_EQ(ok->decode(ids).value(), "ab");  // control ids invisible, the first "▁" dropped
  EXPECT_EQ(ok->decode(std::vector<int32_t>{mark, a_, 0}).value(), " a \xE2\x81\x87 ");
  EXPECT_EQ(ok->special_id("<s>"), 1);
  EXPECT_EQ(Tokenizer::vocab_format_of("dir/tokenizer.model.v3"), VocabFormat::kSentencePieceModel);

  auto fails = [&](std::string_view name, const std::string& bytes, Code code, std::string_view says) {
    auto r = Tokenizer::from_sentencepiece(write(name, bytes).string());
    EXPECT_EQ(r.status().code(), code) << r.status().to_string();
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(name), std::string::npos) << r.status().message();
  };
  const std::string model = sp_model();
  fails("sp_cut.model", model.substr(0, 1000), Code::kInvalidArgument, "past the end");
  fails("sp_unigram.model", sp_model(number_field(3, 1)), Code::kUnsupported, "trainer_spec.model_type is 1");
  fails("sp_bytes.model", sp_model("", "", 255), Code::kInvalidArgument, "lack the byte piece <0xFF>");
  fails("sp_dup.model", sp_model("", sp_piece("ab", -3)), Code::kInvalidArgument, "pieces[266].piece 'ab' repeats pieces[263]");
  fails("sp_tie.model", sp_model("", sp_piece("ba", -2)), Code::kUnsupported, "ties with");
  fails("sp_wire.model", model + varint(1 << 3 | 0) + varint(5), Code::kInvalidArgument, "pieces has wire type 0");
  fails("sp_type.model", sp_model("", sp_piece("zz", -5, 9)), Code::kInvalidArgument, "pieces[266].type is 9");
  fails("sp_empty.model", "", Code::kInvalidArgument, "no pieces");
}

// Ids streamed one at a time give the text as decode() does, holding back
// only a character's first bytes; ill-formed bytes become U+FFFD as soon as
// no later byte can complete them.
TEST(TokenizerTest, TokenTextAndOffsetsSpellTheText) {
  using Spans = std::vector<std::array<uint32_t, 2>>;
  auto sp = Tokenizer::from_sentencepiece(write("sp_offsets.model", sp_model()).string());
  ASSERT_TRUE(sp.ok()) << sp.status().to_string();
  const int32_t mark = 259, b = 261, a_ = 262, ab = 263;
  EXPECT_EQ(sp->token_text(a_).value(), "\u2581a");
  EXPECT_EQ(sp->token_text(3 + 0x0A).value(), "<0x0A>");
  EXPECT_EQ(sp->token_text(0).value(), "<unk>");
  EXPECT_EQ(sp->token_text(1).value(), "<s>");
  EXPECT_EQ(sp->token_text(1 << 20).status().code(), Code::kNotFound);
  // BOS spans nothing; the dummy prefix belongs to the first word; "é" (2 bytes, byte fallback) is one
  // character that both its byte pieces span.
  const std::vector<int32_t> ids{1, a_, b, mark, 3 + 0xC3, 3 + 0xA9, ab};
  EXPECT_EQ(sp->char_offsets("ab \xC3\xA9" "ab", ids).value(), (Spans{{0, 0}, {0, 1}, {1, 2}, {2, 3}, {3, 4}, {3, 4}, {4, 6}}));
  auto wrong = sp->char_offsets("ab", std::vector<int32_t>{a_, a_});
  EXPECT_EQ(wrong.status().code(), Code::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("ids[1] = 262 does not spell the text at byte 1"), std::string::npos)
      << wrong.status().to_string();
  EXPECT_NE(sp->char_offsets("abab", std::vector<int32_t>{a_, b}).status().message().find("spell 2 of the text's 4"),
            std::string::npos);
  EXPECT_TRUE(sp->char_offsets("", std::vector<int32_t>{}).value().empty());
  std::vector<int32_t> marked;  // a "▁" in the text is a space mark too: its pieces decode it as a space
  ASSERT_TRUE(sp->encode("\xE2\x96\x81" "a b", marked).ok());
  auto spans_marked = sp->char_offsets("\xE2\x96\x81" "a b", marked);
  ASSERT_TRUE(spans_marked.ok()) << spans_marked.status().to_string();
  EXPECT_EQ(spans_marked->front()[0], 0u);
  EXPECT_EQ(spans_marked->back()[1], 4u);

  if (!fs::exists(gpt2_path())) GTEST_SKIP() << "run `outboard vocab fetch` first";
  auto gpt2 = Tokenizer::from_tiktoken(gpt2_path());
  ASSERT_TRUE(gpt2.ok());
  EXPECT_EQ(gpt2->token_text(995).value(), "\u0120world");  // "Ġworld": GPT-2's alphabet
  EXPECT_EQ(gpt2->token_text(198).value(), "\u010A");       // "\n" is "Ċ"
  EXPECT_EQ(gpt2->token_text(50256).value(), "<|endoftext|>");
  std::vector<int32_t> g;
  EncodeOptions all;
  all.allow_special = true;
  ASSERT_TRUE(gpt2->encode("Hi \xF0\x9F\x99\x82<|endoftext|>", g, all).ok());  // "🙂" splits over ids
  auto spans = gpt2->char_offsets("Hi \xF0\x9F\x99\x82<|endoftext|>", g);
  ASSERT_TRUE(spans.ok()) << spans.status().to_string();
  EXPECT_EQ(spans->front(), (std::array<uint32_t, 2>{0, 2}));
  EXPECT_EQ(spans->back(), (std::array<uint32_t, 2>{4, 17}));  // special text in the text spans it
  for (size_t i = 1; i + 1 < spans->size(); ++i) EXPECT_EQ((*spans)[i][1], 4u) << i;  // each part spans all of "🙂"
  // WordPiece: ids placed by the characters their normalized pieces came from,
  // in code points; [CLS]/[SEP] at (0, 0); special text where it stands.
  auto wp = Tokenizer::bert_wordpiece(
      write("offsets_vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\n##b\ncafe\n!\n").string());
  ASSERT_TRUE(wp.ok());
  EXPECT_EQ(wp->token_text(5).value(), "a");
  std::vector<int32_t> w;
  const std::string text = "Café AB [MASK] ab!";
  ASSERT_TRUE(wp->encode(text, w, EncodeOptions{.allow_special = true, .add_special_tokens = true}).ok());
  ASSERT_EQ(w, (std::vector<int32_t>{2, 7, 5, 6, 4, 5, 6, 8, 3}));
  using Spans = std::vector<std::array<uint32_t, 2>>;
  EXPECT_EQ(wp->char_offsets(text, w).value(),
            (Spans{{0, 0}, {0, 4}, {5, 6}, {6, 7}, {8, 14}, {15, 16}, {16, 17}, {17, 18}, {0, 0}}));
  const std::vector<int32_t> plain(w.begin() + 1, w.end() - 1);  // without [CLS] and [SEP]
  EXPECT_EQ(wp->char_offsets(text, plain)->size(), plain.size());
  std::vector<int32_t> cls_text;  // "[CLS]" in the text, not added: it spans itself
  ASSERT_TRUE(wp->encode("[CLS] a", cls_text, EncodeOptions{.allow_special = true}).ok());
  EXPECT_EQ(wp->char_offsets("[CLS] a", cls_text).value(), (Spans{{0, 5}, {6, 7}}));
  std::vector<int32_t> misplaced = plain;
  misplaced[2] = 5;
  EXPECT_EQ(wp->char_offsets(text, misplaced).status().message(), "ids[2] = 5 is not the text's encoding there (6)");
}

TEST(TokenizerTest, DecodeStreamHoldsBackOnlyUnfinishedCharacters) {
  if (!fs::exists(gpt2_path())) GTEST_SKIP() << "run `outboard vocab fetch` first";
  auto tok = Tokenizer::from_tiktoken(gpt2_path());
  ASSERT_TRUE(tok.ok());
  const std::string text = "naïve café — 日本語 🙂🙂 done";
  std::vector<int32_t> ids;
  ASSERT_TRUE(tok->encode(text, ids).ok());
  DecodeStream stream(*tok);
  std::string out;
  for (int32_t id : ids) {
    ASSERT_TRUE(stream.step({&id, 1}, out).ok());
    EXPECT_LE(stream.pending_bytes(), 3u);
    EXPECT_LE(out.size() + stream.pending_bytes(), text.size());
    EXPECT_EQ(text.compare(0, out.size(), out), 0) << out;  // a prefix of the text, never a broken character
  }
  const int32_t unknown = 1 << 20;
  EXPECT_EQ(stream.step({&unknown, 1}, out).code(), Code::kNotFound);
  stream.finish(out);
  EXPECT_EQ(out, text);

  // 0xFF (no character starts so), then E2 82 (a begun "€") broken by 'a'.
  int32_t ff = -1, e2 = -1, x82 = -1;
  for (int32_t id = 0; id < 50256; ++id) {
    auto b = tok->decode(std::span<const int32_t>(&id, 1));
    if (b->size() != 1) continue;
    const auto c = static_cast<uint8_t>((*b)[0]);
    if (c == 0xFF) ff = id;
    if (c == 0xE2) e2 = id;
    if (c == 0x82) x82 = id;
  }
  std::string broken;
  ASSERT_TRUE(stream.step(std::vector<int32_t>{ff, e2, x82}, broken).ok());
  EXPECT_EQ(broken, "\xEF\xBF\xBD");
  EXPECT_EQ(stream.pending_bytes(), 2u);
  std::vector<int32_t> a;
  ASSERT_TRUE(tok->encode("a", a).ok());
  ASSERT_TRUE(stream.step(a, broken).ok());
  EXPECT_EQ(broken, "\xEF\xBF\xBD\xEF\xBF\xBD" "a");  // as Python: b"\xff\xe2\x82a".decode(errors="replace")
  ASSERT_TRUE(stream.step(std::vector<int32_t>{e2}, broken).ok());
  stream.finish(broken);
  EXPECT_EQ(broken, "\xEF\xBF\xBD\xEF\xBF\xBD" "a" "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace outboard
