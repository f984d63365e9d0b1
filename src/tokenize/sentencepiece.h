// SentencePiece BPE with byte fallback (Llama 2, Mistral 7B): ids as the
// `sentencepiece` library gives them for a `.model` file with the identity
// normalizer.
//
// SentencePiece merges characters by the score of the merged piece, highest
// first and leftmost on ties — the same rule as tiktoken's ranks, on
// characters instead of bytes. So the pieces go into a BpeVocab as bytes,
// each character formed from its bytes before any real merge (the lowest
// priorities), and the byte-level machinery (cache, backtracking) does the
// rest. The text first splits between characters that no piece holds side
// by side (no merge crosses there): most parts are one character, found by
// a table read, and a character no piece holds becomes its <0xNN> byte
// pieces, SentencePiece's byte fallback.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "tokenize/int_table.h"
#include "tokenize/model.h"

namespace outboard::tokenize {

struct SentencePieceBpe final : Tokenizer::Model {
  enum class Kind : uint8_t { kText, kByte, kControl, kUnknown };
  BpeVocab vocab;
  int32_t pieces = 0;  ///< ids at and above are the loader's partial characters, never output
  int32_t byte_ids[256];
  bool dummy_prefix = true;  ///< "▁" before the text (normalizer_spec.add_dummy_prefix)
  Trie user_defined;         ///< pieces matched whole in the text, never merged
  std::array<bool, 256> stops{};  ///< bytes the normalizer stops at: a space, a user-defined piece's first
  /// A character's piece (-1: none, its bytes stand for it) and whether some
  /// piece has a character after it (kJoinsRight) or before it (kJoinsLeft).
  struct CharInfo {
    int32_t id = -1;
    uint8_t sides = 0;
  };
  static constexpr uint8_t kJoinsRight = 1, kJoinsLeft = 2;
  std::array<CharInfo, 128> ascii_info;  ///< ASCII by value (no piece: its byte piece's id)
  IntTable<CharInfo> char_info;          ///< the others by code point
  /// Characters side by side in some piece the merges form: the text splits
  /// between any other two, as no merge crosses there.
  std::array<std::array<uint64_t, 2>, 128> ascii_joins{};  // bit b of [a]: "ab"
  IntTable<uint8_t> joins;                                  // a << 21 | b, the rest
  bool join(char32_t a, CharInfo ia, char32_t b, CharInfo ib) const {
    if (!(ia.sides & kJoinsRight) || !(ib.sides & kJoinsLeft)) return false;
    if ((a | b) < 0x80) return (ascii_joins[a][b >> 6] >> (b & 63)) & 1;
    return joins.find(uint64_t{a} << 21 | b) != nullptr;
  }
  std::vector<Kind> kinds;         ///< per id
  std::vector<std::string> texts;  ///< per id: the decoded text ("▁" as " "), or the byte
  std::string unknown_surface;     ///< what <unk> decodes to
  std::string unknown_piece;       ///< <unk>'s own spelling
  /// Pieces of m spaces by m ("▁" at 1, -1 where none) when they merge after
  /// all others (the encoder joins them); empty when they are ordinary.
  std::vector<int32_t> space_runs;

  Status encode_ordinary(std::string_view text, std::vector<int32_t>& out, const PieceCache* cache) const override;
  Status decode_one(int32_t id, std::string& out, bool& at_start) const override;
  Result<std::string> token_text(int32_t id) const override;
  Result<Spelling> spelling() const override { return Spelling{size_t{dummy_prefix}, true}; }
  bool uses_piece_cache() const override { return true; }
  size_t vocab_size() const override { return static_cast<size_t>(pieces); }

 private:
  /// Encodes normalized text (no user-defined pieces in it).
  Status encode_normalized(std::string_view norm, std::vector<int32_t>& out, const PieceCache* cache) const;
  void join_space_runs(std::vector<int32_t>& out, size_t from) const;
};

/// Reads a SentencePiece `.model` (a ModelProto); errors name `src` and the field.
Result<Tokenizer> parse_sentencepiece(std::string_view bytes, const std::string& src);

}  // namespace outboard::tokenize
