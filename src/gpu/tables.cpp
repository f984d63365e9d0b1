#include "gpu/tables.h"

#include <algorithm>
#include <bit>

#include "tokenize/char_kind.h"
#include "tokenize/model.h"
#include "tokenize/unicode.h"
#include "tokenize/wordpiece.h"

namespace outboard::gpu {

static_assert(uint8_t(tokenize::Kind::kLetter) == kLetter && uint8_t(tokenize::Kind::kNumber) == kNumber &&
              uint8_t(tokenize::Kind::kSpace) == kSpace && uint8_t(tokenize::Kind::kOther) == kOther);
using WordKind = tokenize::BertWordPiece::CharKind;
static_assert(uint8_t(WordKind::kOther) == kWordOther && uint8_t(WordKind::kWhitespace) == kWordSpace &&
              uint8_t(WordKind::kPunctuation) == kWordPunct);

BpeTables BpeTableImage::view(const uint8_t* kinds_at, const int32_t* byte_ids_at, const PairSlot* pairs_at,
                              const WholeSlot* wholes_at, const uint8_t* whole_bytes_at) const {
  return {kinds_at,
          byte_ids_at,
          pairs_at,
          pairs.size() - 1,
          64 - std::countr_zero(pairs.size()),
          wholes_at,
          wholes.size() - 1,
          whole_bytes_at,
          whole_min,
          whole_max};
}

namespace {

// Power-of-two slot counts at most half full, as tokenize::IntTable.
size_t table_size(size_t entries) { return std::bit_ceil(entries * 2 + 2); }

void fill_pairs(const tokenize::BpeVocab& vocab, BpeTableImage& image) {
  const auto merges = vocab.pair_merges();
  image.pairs.assign(table_size(merges.size()), PairSlot{kEmptyKey, kNoPriority, -1});
  const BpeTables t = image.host_view();
  for (const auto& m : merges) {
    const uint64_t key = uint64_t(uint32_t(m.left)) << 32 | uint32_t(m.right);
    uint64_t i = (key * 0x9e3779b97f4a7c15ull) >> t.pair_shift;
    while (image.pairs[i].key != kEmptyKey) i = (i + 1) & t.pair_mask;
    image.pairs[i] = {key, m.priority, m.merged};
  }
}

// Tokens the merge loop does not make from their own bytes: tiktoken finds a piece whole first,
// so such a token is still the id of a piece that spells it.
void fill_wholes(const tokenize::BpeVocab& vocab, BpeTableImage& image) {
  std::vector<std::pair<std::string_view, int32_t>> found;
  const BpeTables t = image.host_view();
  std::vector<int32_t> parts;
  std::vector<uint32_t> ranks, links;
  std::vector<uint64_t> heap;
  for (int32_t id = 0; id <= vocab.max_id(); ++id) {
    const std::string_view bytes = vocab.bytes_of(id);
    if (bytes.empty()) continue;
    const size_t n = bytes.size();
    parts.resize(n);
    ranks.resize(n);
    links.resize(2 * n);
    heap.resize(3 * n);
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
    const MergeScratch scratch{parts.data(), ranks.data(), links.data(), links.data() + n, heap.data()};
    if (merge_bytes(t, p, static_cast<uint32_t>(n), scratch) != 1 || parts[0] != id) found.emplace_back(bytes, id);
  }
  image.wholes.assign(table_size(found.size()), WholeSlot{0, 0, 0, -1});
  const uint64_t mask = image.wholes.size() - 1;
  image.whole_min = UINT32_MAX;
  for (const auto& [bytes, id] : found) {
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
    const auto n = static_cast<uint32_t>(bytes.size());
    const uint64_t h = whole_hash(p, n);
    uint64_t i = h & mask;
    while (image.wholes[i].hash != 0) i = (i + 1) & mask;
    image.wholes[i] = {h, static_cast<uint32_t>(image.whole_bytes.size()), n, id};
    image.whole_bytes.insert(image.whole_bytes.end(), p, p + n);
    image.whole_min = std::min(image.whole_min, n);
    image.whole_max = std::max(image.whole_max, n);
  }
  if (found.empty()) image.whole_min = 0;
  if (image.whole_bytes.empty()) image.whole_bytes.push_back(0);  // a valid address to copy
}

BpeTableImage bpe_tables(const tokenize::ByteBpe& bpe) {
  BpeTableImage image;
  image.kinds.assign(kCodePoints / 4, 0);
  for (char32_t cp = 0; cp < kCodePoints; ++cp)
    image.kinds[cp / 4] |= static_cast<uint8_t>(uint8_t(tokenize::kind_of(cp)) << (cp % 4 * 2));
  image.byte_ids.resize(256);
  for (int b = 0; b < 256; ++b) image.byte_ids[b] = bpe.vocab.byte_id(static_cast<uint8_t>(b));
  fill_pairs(bpe.vocab, image);
  fill_wholes(bpe.vocab, image);
  if (bpe.specials_in_text) image.specials = bpe.specials;
  return image;
}

std::vector<TrieCell> trie_cells(const tokenize::Trie& trie) {
  std::vector<TrieCell> cells;
  cells.reserve(trie.cells().size());
  for (const auto& c : trie.cells()) cells.push_back({c.base, c.check, c.id});
  return cells;
}

int utf8_length(char32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// BertNormalizer is per character: each code point's normalized bytes, computed once.
WordPieceTableImage wordpiece_tables(const tokenize::BertWordPiece& wp) {
  WordPieceTableImage image;
  image.norm_index.assign(kCodePoints, 0);
  image.kinds.assign(kCodePoints / 4, 0);
  std::string one, normalized;
  for (char32_t cp = 0; cp < kCodePoints; ++cp) {
    const auto kind = static_cast<uint8_t>(tokenize::BertWordPiece::char_kind(cp));
    image.kinds[cp / 4] |= static_cast<uint8_t>(kind << (cp % 4 * 2));
    if (cp >= 0xD800 && cp < 0xE000) continue;  // surrogates: never in valid UTF-8
    one.clear();
    tokenize::append_utf8(cp, one);
    normalized.clear();
    wp.normalize(one, normalized);
    image.norm_index[cp] = static_cast<uint32_t>(image.norm_bytes.size() << 8 | normalized.size());
    image.norm_bytes.insert(image.norm_bytes.end(), normalized.begin(), normalized.end());
    const int len = utf8_length(cp);
    image.max_expansion = std::max<uint32_t>(image.max_expansion, (normalized.size() + len - 1) / len);
  }
  image.initial = trie_cells(wp.initial);
  image.continuing = trie_cells(wp.continuing);
  image.unk_id = wp.unk_id;
  image.max_word_chars = static_cast<uint32_t>(std::min<size_t>(wp.options.max_input_chars_per_word, UINT32_MAX));
  if (wp.specials_in_text) image.specials = wp.specials;
  return image;
}

}  // namespace

Result<ModelTables> model_tables(const Tokenizer& tokenizer) {
  const Tokenizer::Model& model = tokenizer.model();
  if (const auto* bpe = dynamic_cast<const tokenize::ByteBpe*>(&model)) {
    if (bpe->pretokenizer == Pretokenizer::kR50k) return ModelTables(bpe_tables(*bpe));
    return Status(Code::kUnsupported, "the GPU tokenizer has GPT-2's byte-level BPE (r50k's pattern) and BERT's "
                                      "WordPiece; this vocabulary is byte-level BPE with another pattern");
  }
  if (const auto* wp = dynamic_cast<const tokenize::BertWordPiece*>(&model)) return ModelTables(wordpiece_tables(*wp));
  return Status(Code::kUnsupported, "the GPU tokenizer has GPT-2's byte-level BPE (r50k's pattern) and BERT's "
                                    "WordPiece; this vocabulary is neither");
}

}  // namespace outboard::gpu
