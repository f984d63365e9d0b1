// Exact tokenizers: byte-level BPE (identical ids to tiktoken's r50k, cl100k
// and o200k, to HF's GPT-2 and to mistral-common's Tekken), SentencePiece
// BPE (identical to sentencepiece's) and BERT WordPiece (identical to HF's),
// and streaming decode. Standalone: depends only
// on util, so the agent and the host link the same code.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outboard/status.h"

namespace outboard {

/// What to do with bytes that are not valid UTF-8.
enum class Utf8Policy : uint8_t {
  kStrict,   ///< kInvalidArgument naming the byte offset (default)
  kReplace,  ///< each maximal ill-formed subpart becomes U+FFFD, as Python's errors="replace"
};

struct EncodeOptions {
  /// Special-token text (e.g. "<|endoftext|>") in the input is an error by
  /// default, as in tiktoken's encode(); true emits the special ids.
  bool allow_special = false;
  /// Treat special-token text as ordinary text (tiktoken's encode_ordinary).
  bool ordinary = false;
  Utf8Policy utf8 = Utf8Policy::kStrict;
  /// WordPiece: [CLS] text [SEP] (off by default).
  bool add_special_tokens = false;
};

/// Limits under which encode_each() fails a text alone.
struct TextLimits {
  uint64_t max_text_bytes = 0;      ///< a longer text fails unread (0: no limit)
  uint64_t max_len = 0;             ///< a text with more ids fails, never truncated (0: no limit)
  std::optional<uint64_t> capacity;  ///< id slots for the whole batch: a text that does not fit fails
  /// Where max_text_bytes comes from, for its error ("agent option --max-text-bytes").
  std::string_view max_text_bytes_source;
};

/// BERT normalizer settings of a WordPiece tokenizer.
struct WordPieceOptions {
  bool lowercase = true;
  /// Strip accents (NFD, drop nonspacing marks); HF's default follows `lowercase`.
  int strip_accents = -1;  ///< -1: as lowercase, 0: no, 1: yes
  bool clean_text = true;
  bool handle_chinese_chars = true;
};

/// tiktoken's pre-tokenizers: the pattern that splits text into the pieces
/// BPE encodes one by one.
enum class Pretokenizer : uint8_t {
  kR50k,    ///< GPT-2 (r50k_base, p50k_base)
  kCl100k,  ///< cl100k_base (GPT-3.5/4; Llama 3's pattern too)
  kO200k,   ///< o200k_base (GPT-4o)
  kTekken,  ///< Mistral's Tekken (o200k's classes, single digits, no contractions)
};

/// The kinds of vocabulary file the loaders read.
enum class VocabFormat : uint8_t {
  kTiktoken = 1,        ///< base64 token, rank per line (r50k pre-tokenizer)
  kTokenizerJson = 2,   ///< an HF tokenizer.json
  kWordPieceVocab = 3,  ///< a BERT vocab.txt (uncased)
  kTiktokenCl100k = 4,  ///< a .tiktoken file with the cl100k pre-tokenizer
  kTiktokenO200k = 5,   ///< a .tiktoken file with the o200k pre-tokenizer
  kTekkenJson = 6,      ///< a Mistral Tekken tokenizer (tekken_*.json)
  kSentencePieceModel = 7,  ///< a SentencePiece BPE .model with byte fallback
};

namespace tokenize {
class PieceCache;
}

/// The memory of a tokenizer's pre-token cache (piece bytes -> ids) by
/// default, mapped when the tokenizer is made: small enough for a DPU, and
/// within 3 % of a 64 MiB cache's warm hit rate on the bench corpus.
inline constexpr size_t kDefaultPieceCacheBytes = size_t{16} << 20;

/// Immutable once built; thread mode: multi (encode from any number of
/// threads). Copies share the model and the pre-token cache.
class Tokenizer {
 public:
  /// A `.tiktoken` file (base64 token, rank per line) with one of tiktoken's
  /// pre-tokenizers. `specials` default to the encoding's: r50k's
  /// {"<|endoftext|>": number of ranks}, cl100k's five (100257..100260,
  /// 100276), o200k's two (199999, 200018).
  static Result<Tokenizer> from_tiktoken(const std::string& path,
                                         std::vector<std::pair<std::string, int32_t>> specials = {},
                                         Pretokenizer pretokenizer = Pretokenizer::kR50k);
  /// GPT-2 style vocab.json (byte-to-unicode strings -> id) and merges.txt.
  static Result<Tokenizer> from_vocab_merges(const std::string& vocab_json, const std::string& merges_txt);
  /// BERT WordPiece from a vocab.txt (one token per line, id = line number).
  static Result<Tokenizer> bert_wordpiece(const std::string& vocab_txt, const WordPieceOptions& options = {});
  /// An HF tokenizer.json: WordPiece with BertNormalizer/BertPreTokenizer, or
  /// BPE with ByteLevel. Its padding and truncation are read and reported
  /// (config_report()), never applied.
  static Result<Tokenizer> from_tokenizer_json(const std::string& path);
  /// A vocabulary file read as its name says (vocab_format_of()).
  static Result<Tokenizer> from_file(const std::string& path);
  /// Mistral's Tekken (tekken_*.json of mistral-common): ids as its
  /// Tekkenizer.encode gives them (ranks after its special ids). Special-token
  /// text in the input is ordinary text, as there; add_special_tokens
  /// prepends BOS; decode drops control ids (Tekkenizer.decode's default).
  static Result<Tokenizer> from_tekken_json(const std::string& path);
  /// A SentencePiece BPE `.model` with byte fallback and the identity
  /// normalizer (Llama 2, Mistral 7B): ids as sentencepiece's encode gives
  /// them, control-token text ordinary text; add_special_tokens prepends
  /// BOS. Decode as sentencepiece's: control ids are invisible and the
  /// first "▁" is dropped; byte pieces that are not UTF-8 become U+FFFD per
  /// maximal ill-formed part (Python's rule), where sentencepiece puts one
  /// per byte.
  static Result<Tokenizer> from_sentencepiece(const std::string& path);
  /// The format a vocabulary file's name implies: "*.tiktoken" (with cl100k's
  /// or o200k's pre-tokenizer when the name starts with "cl100k" or "o200k",
  /// r50k's otherwise), "tekken*.json" (Tekken), other "*.json"
  /// (tokenizer.json), "*.txt" (vocab.txt), "*.model" or "*.model.v*"
  /// (SentencePiece); nullopt otherwise.
  static std::optional<VocabFormat> vocab_format_of(std::string_view path);
  /// A vocabulary file's contents (one a client uploaded to an agent, say),
  /// read as the loaders above read a file; `label` names it in errors.
  static Result<Tokenizer> from_contents(VocabFormat format, std::string_view contents, const std::string& label);

  /// Appends the ids of `text` to `out`. On error `out` is unchanged.
  [[nodiscard]] Status encode(std::string_view text, std::vector<int32_t>& out,
                              const EncodeOptions& options = {}) const;
  /// Encodes texts[i] into ids[offsets[i] .. offsets[i+1]) using up to
  /// `threads` threads (0: hardware concurrency). Stops at the first error,
  /// which names the text's index.
  [[nodiscard]] Status encode_batch(std::span<const std::string_view> texts, std::vector<int32_t>& ids,
                                    std::vector<uint64_t>& offsets, const EncodeOptions& options = {},
                                    unsigned threads = 1) const;
  /// Encodes every text into ids[offsets[i] .. offsets[i+1]); a text that
  /// fails (invalid UTF-8, a disallowed special token, over a limit) fails
  /// alone, adds no ids, and its Status (naming the text's index) is
  /// returned at its index. The one place of these rules: an agent's
  /// tokenize service and the host placement both call it.
  std::vector<Status> encode_each(std::span<const std::string_view> texts, std::vector<int32_t>& ids,
                                  std::vector<uint64_t>& offsets, const EncodeOptions& options,
                                  const TextLimits& limits) const;
  /// The bytes the ids stand for; kNotFound naming an unknown id.
  [[nodiscard]] Result<std::string> decode(std::span<const int32_t> ids) const;

  /// The vocabulary's spelling of `id`, as Hugging Face's
  /// convert_ids_to_tokens shows it: byte-level BPE in GPT-2's byte-to-unicode
  /// alphabet ("Ġworld"), SentencePiece pieces ("▁world", "<0x0A>"), WordPiece
  /// entries ("##ing"), special tokens as their text. kNotFound for an id not
  /// in the vocabulary.
  [[nodiscard]] Result<std::string> token_text(int32_t id) const;
  /// Where each of `ids`, an encoding of `text`, lies in it: [start, end) in
  /// code points (Python's str indices), Hugging Face's offset_mapping. A
  /// token holding part of a character spans all of it; an id the encoding
  /// added (BOS) spans nothing where it stands, [CLS] and [SEP] (0, 0).
  /// WordPiece's ids lie where the normalized text's pieces came from: they
  /// must be the text's encoding (special text allowed or ordinary).
  /// kInvalidArgument naming the first id that does not fit the text there.
  [[nodiscard]] Result<std::vector<std::array<uint32_t, 2>>> char_offsets(std::string_view text,
                                                                        std::span<const int32_t> ids) const;

  /// Number of ids (ordinary and special).
  [[nodiscard]] size_t vocab_size() const;
  /// Id of a special token, or -1.
  [[nodiscard]] int32_t special_id(std::string_view text) const;
  /// Every special (and control) token, (text, id) by id.
  [[nodiscard]] const std::vector<std::pair<std::string, int32_t>>& special_tokens() const;
  /// Settings of the loaded file that are reported but not applied (JSON).
  [[nodiscard]] std::string_view config_report() const;
  /// The Unicode version of the character tables ("16.0.0").
  static std::string_view unicode_version();

  /// The same model with a pre-token cache of its own, of at most
  /// `max_bytes` (under 832, the least a cache takes: none; BPE models
  /// only). Ids never depend on the cache; only speed does. Threads
  /// encoding with one tokenizer share it.
  [[nodiscard]] Tokenizer with_piece_cache(size_t max_bytes) const;
  /// The memory the pre-token cache may use (0: none, as for WordPiece).
  [[nodiscard]] size_t piece_cache_bytes() const;

  struct Model;
  /// The loaded model (src/tokenize/model.h), for code that builds tables of its own from it (src/gpu).
  [[nodiscard]] const Model& model() const { return *model_; }
  friend class DecodeStream;
  /// Takes a freshly loaded model (and orders its special tokens by id).
  explicit Tokenizer(std::shared_ptr<Model> model);

 private:
  /// encode(), and with `spans`, where each id lies in the text ([begin, end) bytes; strict UTF-8).
  Status encode_spans(std::string_view text, std::vector<int32_t>& out, const EncodeOptions& options,
                      std::vector<std::array<size_t, 2>>* spans) const;
  /// char_offsets' byte spans for a model whose ids do not spell the text.
  Status encoded_spans(std::string_view text, std::span<const int32_t> ids,
                       std::vector<std::array<size_t, 2>>& spans) const;
  /// Appends the text of `ids`. `at_start`: the models' leading-space rules
  /// still apply (nothing of this text decoded yet); they clear it.
  Status decode_append(std::span<const int32_t> ids, std::string& out, bool& at_start) const;

  std::shared_ptr<const Model> model_;
  std::shared_ptr<const tokenize::PieceCache> cache_;
};

/// Decoding as ids stream in (a server generating text): each step gives the
/// text its ids complete, holding back the bytes of a character that later
/// ids may finish; every step's text and finish()'s together equal decoding
/// all the ids at once as UTF-8 with errors="replace". One stream per
/// sequence; thread mode: single.
class DecodeStream {
 public:
  explicit DecodeStream(Tokenizer tokenizer);
  /// Appends the text these ids complete to `out`. An unknown id is
  /// kNotFound, and the stream is as it was.
  [[nodiscard]] Status step(std::span<const int32_t> ids, std::string& out);
  /// Appends what is held back (each ill-formed part as U+FFFD) and starts
  /// a new sequence.
  void finish(std::string& out);
  /// Bytes held back: a character begun and not ended (at most 3).
  [[nodiscard]] size_t pending_bytes() const { return pending_.size(); }

 private:
  Tokenizer tokenizer_;
  std::string pending_;
  bool at_start_ = true;
};

}  // namespace outboard
