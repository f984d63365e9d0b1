// BERT WordPiece (src/tokenize/wordpiece.h) as data-parallel steps, in the
// manner of bpe_kernels.h: the same code on the GPU and, in the tests, on
// the CPU. BertNormalizer works per character, so every code point's
// normalized bytes are a table: a thread per character writes its own at the
// offset a prefix sum gives. BertPreTokenizer's words start after whitespace
// or punctuation (a punctuation character is a word of its own), so a thread
// per normalized byte marks them; a thread per word runs the greedy longest
// match on the vocabulary's two tries; two prefix sums place the ids.
#pragma once

#include <cstdint>

#include "gpu/bpe_kernels.h"

namespace outboard::gpu {

/// BertWordPiece::CharKind, 2 bits per code point.
inline constexpr uint8_t kWordOther = 0, kWordSpace = 1, kWordPunct = 2;

/// tokenize::Trie::Cell: the child of the node at cell s on byte c is cell base[s] + c if its check is s.
struct TrieCell {
  uint32_t base;
  uint32_t check;
  int32_t id;
};

struct WordPieceTables {
  const uint32_t* norm_index;  ///< per code point: offset << 8 | length of its normalized bytes
  const uint8_t* norm_bytes;
  const uint8_t* kinds;  ///< kCodePoints / 4 bytes, of normalized characters
  const TrieCell* initial;
  const TrieCell* continuing;  ///< "##" tokens without the prefix
  int32_t unk_id;
  uint32_t max_word_chars;  ///< longer words are [UNK]
};

/// One batch's memory. Per-byte arrays of the text hold bytes + 1 entries, per-byte arrays of the
/// normalized text norm_capacity + 1 (what the longest expansion of a character allows).
struct WordPieceBatch {
  const uint8_t* text;
  uint32_t bytes;
  const uint32_t* text_offsets;  ///< texts + 1
  uint32_t texts;
  uint32_t* norm_lens;  ///< zeroed: a character's normalized length at its first byte
  uint32_t* norm_at;    ///< exclusive sum of norm_lens: where its normalized bytes go
  uint8_t* norm;
  uint32_t norm_capacity;
  uint32_t* starts;      ///< zeroed: 1 where a word begins in the normalized text
  uint32_t* word_of;     ///< exclusive sum of starts
  int32_t* parts;        ///< a word's ids at the word's own offset
  uint32_t* counts;      ///< zeroed: ids of each word
  uint32_t* id_offsets;  ///< exclusive sum of counts
  int32_t* ids;
  uint32_t capacity;
  uint32_t* text_ids;  ///< texts + 1
};

OB_HD inline bool char_start(uint8_t b) { return (b & 0xC0) != 0x80; }

OB_HD inline uint8_t word_kind(const WordPieceTables& t, const uint8_t* s, uint32_t j, int& len) {
  const uint32_t cp = decode_utf8(s + j, len);
  return (t.kinds[cp >> 2] >> ((cp & 3) * 2)) & 3;
}

/// Where normalized text k begins (k <= texts).
OB_HD inline uint32_t norm_text_start(const WordPieceBatch& b, uint32_t k) { return b.norm_at[b.text_offsets[k]]; }

/// The text whose normalized bytes hold `j` (< the normalized total).
OB_HD inline uint32_t norm_text_of(const WordPieceBatch& b, uint32_t j) {
  uint32_t lo = 0, hi = b.texts;
  while (hi - lo > 1) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (norm_text_start(b, mid) <= j) lo = mid;
    else hi = mid;
  }
  return lo;
}

/// Step 1, a thread per byte of text: a character's normalized length, at its first byte.
OB_HD inline void measure_char(const WordPieceTables& t, const WordPieceBatch& b, uint32_t i) {
  if (!char_start(b.text[i])) return;
  int len;
  b.norm_lens[i] = t.norm_index[decode_utf8(b.text + i, len)] & 0xFF;
}

/// Step 2, a thread per byte of text: a character's normalized bytes, in place.
OB_HD inline void normalize_char(const WordPieceTables& t, const WordPieceBatch& b, uint32_t i) {
  if (!char_start(b.text[i])) return;
  int len;
  const uint32_t entry = t.norm_index[decode_utf8(b.text + i, len)];
  const uint8_t* from = t.norm_bytes + (entry >> 8);
  uint8_t* to = b.norm + b.norm_at[i];
  for (uint32_t k = 0; k < (entry & 0xFF); ++k) to[k] = from[k];
}

/// Step 3, a thread per normalized byte: marks where words begin.
OB_HD inline void mark_word(const WordPieceTables& t, const WordPieceBatch& b, uint32_t j) {
  if (j >= b.norm_at[b.bytes] || !char_start(b.norm[j])) return;
  int len;
  const uint8_t kind = word_kind(t, b.norm, j, len);
  if (kind == kWordSpace) return;
  bool start = kind == kWordPunct || j == norm_text_start(b, norm_text_of(b, j));
  if (!start) {
    uint32_t q = j - 1;  // the character before, in the same text
    while (!char_start(b.norm[q])) --q;
    start = word_kind(t, b.norm, q, len) != kWordOther;
  }
  if (start) b.starts[j] = 1;
}

OB_HD inline uint32_t trie_longest(const TrieCell* cells, const uint8_t* p, const uint8_t* end, int32_t& id) {
  uint32_t node = 0, best = 0;
  for (const uint8_t* q = p; q < end; ++q) {
    const uint32_t next = cells[node].base + *q;
    if (cells[next].check != node) break;
    node = next;
    if (cells[node].id >= 0) {
      best = static_cast<uint32_t>(q + 1 - p);
      id = cells[node].id;
    }
  }
  return best;
}

/// Step 4, a thread per normalized byte: the thread of a word's first byte encodes the word in place
/// (BertWordPiece::encode_word): greedy longest match, the whole word [UNK] where a part has none or
/// it is too long.
OB_HD inline void encode_word(const WordPieceTables& t, const WordPieceBatch& b, uint32_t j) {
  if (!b.starts[j]) return;
  const uint32_t text_end = norm_text_start(b, norm_text_of(b, j) + 1);
  int len;
  uint32_t end = j, chars = 0;
  if (word_kind(t, b.norm, j, len) == kWordPunct) {
    end = j + len;
    chars = 1;
  } else {
    while (end < text_end && word_kind(t, b.norm, end, len) == kWordOther) {
      end += len;
      ++chars;
    }
  }
  uint32_t count = 0;
  if (chars <= t.max_word_chars) {
    for (uint32_t q = j; q < end;) {
      int32_t id = -1;
      const uint32_t matched = trie_longest(q == j ? t.initial : t.continuing, b.norm + q, b.norm + end, id);
      if (matched == 0) {
        count = 0;
        break;
      }
      b.parts[j + count++] = id;
      q += matched;
    }
  }
  if (count == 0) b.parts[j + count++] = t.unk_id;
  b.counts[b.word_of[j]] = count;
}

/// Step 5, a thread per normalized byte: a word's ids to their place, if they fit.
OB_HD inline void place_word(const WordPieceBatch& b, uint32_t j) {
  if (!b.starts[j]) return;
  const uint32_t word = b.word_of[j], at = b.id_offsets[word], count = b.counts[word];
  if (uint64_t{at} + count > b.capacity) return;
  for (uint32_t k = 0; k < count; ++k) b.ids[at + k] = b.parts[j + k];
}

/// The steps in order, for an executor as bpe_kernels.h's encode_batch takes.
template <typename Exec>
void encode_batch(Exec& exec, const WordPieceTables& t, const WordPieceBatch& b) {
  exec.each(b.bytes, [=] OB_HD(uint32_t i) { measure_char(t, b, i); });
  exec.exclusive_sum(b.norm_lens, b.norm_at, b.bytes + 1);
  exec.each(b.bytes, [=] OB_HD(uint32_t i) { normalize_char(t, b, i); });
  exec.each(b.norm_capacity, [=] OB_HD(uint32_t j) { mark_word(t, b, j); });
  exec.exclusive_sum(b.starts, b.word_of, b.norm_capacity + 1);
  exec.each(b.norm_capacity, [=] OB_HD(uint32_t j) { encode_word(t, b, j); });
  exec.exclusive_sum(b.counts, b.id_offsets, b.norm_capacity + 1);
  exec.each(b.norm_capacity, [=] OB_HD(uint32_t j) { place_word(b, j); });
  exec.each(b.texts + 1, [=] OB_HD(uint32_t k) { b.text_ids[k] = b.id_offsets[b.word_of[norm_text_start(b, k)]]; });
}

}  // namespace outboard::gpu
