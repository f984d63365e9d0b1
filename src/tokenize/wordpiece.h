// BERT WordPiece: BertNormalizer, BertPreTokenizer and greedy longest-match
// WordPiece, as HF tokenizers runs them.
#pragma once

#include <string>
#include <vector>

#include "tokenize/model.h"
#include "tokenize/trie.h"

namespace outboard::tokenize {

struct BertOptions {
  bool clean_text = true;
  bool handle_chinese_chars = true;
  bool strip_accents = true;  ///< HF's default follows `lowercase`
  bool lowercase = true;
  std::string unk_token = "[UNK]";
  std::string continuing_prefix = "##";
  size_t max_input_chars_per_word = 100;  ///< longer words become [UNK]
};

struct BertWordPiece final : Tokenizer::Model {
  /// What BertPreTokenizer makes of a normalized character: part of a word, a split (dropped), or a
  /// word of its own.
  enum class CharKind : uint8_t { kOther, kWhitespace, kPunctuation };
  static CharKind char_kind(char32_t c);

  BertOptions options;
  std::vector<std::string> tokens;  // by id
  Trie initial;                     // word-initial tokens
  Trie continuing;                  // "##" tokens, without the prefix
  int32_t unk_id = -1;

  /// Call after setting `options`: the normalization table depends on them.
  Status build(std::vector<std::string> vocab, const std::string& source);
  /// BertNormalizer on valid UTF-8.
  void normalize(std::string_view text, std::string& out) const;
  Status encode_ordinary(std::string_view text, std::vector<int32_t>& out,
                         const PieceCache* cache) const override;
  Status encode_spans(std::string_view text, std::vector<int32_t>& out, ByteSpans& spans) const override;
  Status decode_one(int32_t id, std::string& out, bool& at_start) const override;
  Result<std::string> token_text(int32_t id) const override;
  Result<Spelling> spelling() const override {
    return Status(Code::kUnsupported, "WordPiece's normalizer rewrites the text (case, accents): see encode_spans");
  }
  size_t vocab_size() const override { return tokens.size(); }

 private:
  /// BertNormalizer of one non-ASCII character, appended to `out`.
  void normalize_char(char32_t c, std::string& out) const;
  // Every step of BertNormalizer is per character, so the BMP's results are
  // computed once at load: entry = offset << 8 | length into bmp_bytes_.
  std::vector<uint32_t> bmp_;
  std::string bmp_bytes_;
  void normalize_next(const uint8_t* s, size_t& i, std::string& out) const;
  /// Pre-tokenizes normalized text and encodes its words; with `spans`,
  /// where each id lies in `norm`.
  void encode_normalized(std::string_view norm, std::vector<int32_t>& out, ByteSpans* spans) const;
  /// One word of `n` bytes at byte `at` of the normalized text.
  void encode_word(const uint8_t* p, size_t n, size_t chars, std::vector<int32_t>& out, ByteSpans* spans,
                   size_t at) const;
};

}  // namespace outboard::tokenize
