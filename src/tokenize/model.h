// The tokenizer models behind outboard::Tokenizer.
#pragma once

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "outboard/tokenizer.h"
#include "tokenize/bpe.h"

namespace outboard {

struct Tokenizer::Model {
  virtual ~Model() = default;
  /// Encodes valid UTF-8 text that holds no special tokens to handle;
  /// `cache` (none if null) remembers pieces that took work.
  virtual Status encode_ordinary(std::string_view text, std::vector<int32_t>& out,
                                 const tokenize::PieceCache* cache) const = 0;
  /// Appends the text of `id`; `at_start` as in Tokenizer::decode_append.
  virtual Status decode_one(int32_t id, std::string& out, bool& at_start) const = 0;
  /// The vocabulary's spelling of ordinary `id` (Tokenizer::token_text).
  virtual Result<std::string> token_text(int32_t id) const = 0;
  /// How the ids' decoded bytes spell the text they encode (char_offsets):
  /// after `prefix_spaces` spaces the encoding put before it (SentencePiece's
  /// dummy prefix), byte for byte, but that a decoded space may stand for
  /// "▁" where `space_is_mark`. kUnsupported where they do not spell it.
  struct Spelling {
    size_t prefix_spaces = 0;
    bool space_is_mark = false;
  };
  virtual Result<Spelling> spelling() const { return Spelling{}; }
  /// [begin, end) bytes of the text.
  using ByteSpans = std::vector<std::array<size_t, 2>>;
  /// encode_ordinary that also says where each id lies in `text`, for the
  /// models whose ids do not spell it (spelling() is kUnsupported).
  virtual Status encode_spans(std::string_view /*text*/, std::vector<int32_t>& /*out*/, ByteSpans& /*spans*/) const {
    return {Code::kUnsupported, "this vocabulary's ids spell their text: see spelling()"};
  }
  /// Does encode_ordinary use a pre-token cache? (Tokenizers map one only then.)
  virtual bool uses_piece_cache() const { return false; }
  /// All ids, special ones included.
  virtual size_t vocab_size() const = 0;

  std::vector<std::pair<std::string, int32_t>> specials;  ///< sorted by id (Tokenizer's constructor)
  /// Is special-token text in the input found (tiktoken), or ordinary text
  /// (mistral-common's Tekken, whose callers add control ids themselves)?
  bool specials_in_text = true;
  int32_t cls_id = -1, sep_id = -1;  ///< added around a text when asked ([CLS] text [SEP])
  std::string config_report;         ///< what a loaded file asked for that we report (padding, ...)

  /// The text of special token `id`, or null if `id` is not one.
  const std::string* special_text(int32_t id) const {
    auto it = std::lower_bound(specials.begin(), specials.end(), id,
                               [](const auto& sp, int32_t v) { return sp.second < v; });
    return it == specials.end() || it->second != id ? nullptr : &it->first;
  }

 protected:
  /// Appends the text of special token `id`; false if `id` is not one.
  bool decode_special(int32_t id, std::string& out) const {
    const std::string* text = special_text(id);
    if (text != nullptr) out += *text;
    return text != nullptr;
  }
};

namespace tokenize {

/// Byte-level BPE (tiktoken's ranks) behind one of tiktoken's pre-tokenizers.
struct ByteBpe final : Tokenizer::Model {
  BpeVocab vocab;
  Pretokenizer pretokenizer = Pretokenizer::kR50k;
  Status encode_ordinary(std::string_view text, std::vector<int32_t>& out,
                         const PieceCache* cache) const override;
  Status decode_one(int32_t id, std::string& out, bool& at_start) const override;
  Result<std::string> token_text(int32_t id) const override;
  bool uses_piece_cache() const override { return true; }
  /// One past the largest id (tiktoken's n_vocab): cl100k leaves ids unused.
  size_t vocab_size() const override {
    int32_t top = vocab.max_id();
    for (const auto& sp : specials) top = std::max(top, sp.second);
    return static_cast<size_t>(top) + 1;
  }
};

}  // namespace tokenize
}  // namespace outboard
