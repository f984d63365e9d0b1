// BERT WordPiece: BertNormalizer, BertPreTokenizer and greedy longest-match
// WordPiece, as HF tokenizers runs them.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "tokenize/int_table.h"
#include "tokenize/model.h"

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

/// A byte trie over the vocabulary (longest match from a position in one
/// walk: no hashing of every candidate substring).
class Trie {
 public:
  Trie();
  void insert(std::string_view bytes, int32_t id);
  /// Freezes the edges into a flat open-addressing table; call after the last insert().
  void finalize();
  /// Longest token starting at p (bytes up to end); returns its length, 0 if none.
  size_t longest(const uint8_t* p, const uint8_t* end, int32_t& id) const;

 private:
  uint32_t child(uint32_t node, uint8_t byte) const {
    const uint32_t* c = edges_.find((uint64_t{node} << 8) | byte);
    return c ? *c : 0;
  }
  std::vector<int32_t> ids_;  // per node, -1: no token ends here
  std::unordered_map<uint64_t, uint32_t> building_;
  IntTable<uint32_t> edges_;  // (node << 8 | byte) -> child
};

struct BertWordPiece final : Tokenizer::Model {
  BertOptions options;
  std::vector<std::string> tokens;  // by id
  Trie initial;                     // word-initial tokens
  Trie continuing;                  // "##" tokens, without the prefix
  int32_t unk_id = -1;

  Status build(std::vector<std::string> vocab, const std::string& source);
  /// BertNormalizer on valid UTF-8.
  void normalize(std::string_view text, std::string& out) const;
  Status encode_ordinary(std::string_view text, std::vector<int32_t>& out) const override;
  Status decode_one(int32_t id, std::string& out) const override;
  size_t vocab_size() const override { return tokens.size(); }

 private:
  void encode_word(const uint8_t* p, size_t n, size_t chars, std::vector<int32_t>& out) const;
};

}  // namespace outboard::tokenize
