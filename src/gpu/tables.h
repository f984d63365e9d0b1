// The tables the GPU's threads read (bpe_kernels.h, wordpiece_kernels.h),
// built on the host from a loaded tokenizer: what gets copied to the device,
// and a view of it in host memory for a CPU run of the same steps.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "gpu/bpe_kernels.h"
#include "gpu/wordpiece_kernels.h"
#include "outboard/status.h"
#include "outboard/tokenizer.h"

namespace outboard::gpu {

struct BpeTableImage {
  std::vector<uint8_t> kinds;
  std::vector<int32_t> byte_ids;
  std::vector<PairSlot> pairs;
  std::vector<WholeSlot> wholes;
  std::vector<uint8_t> whole_bytes;
  uint32_t whole_min = 0, whole_max = 0;
  /// Special-token text, which the GPU does not look for: the host refuses texts holding it.
  std::vector<std::pair<std::string, int32_t>> specials;

  /// The tables at these addresses (the image's own vectors, or copies of them on a device).
  [[nodiscard]] BpeTables view(const uint8_t* kinds, const int32_t* byte_ids, const PairSlot* pairs,
                               const WholeSlot* wholes, const uint8_t* whole_bytes) const;
  [[nodiscard]] BpeTables host_view() const {
    return view(kinds.data(), byte_ids.data(), pairs.data(), wholes.data(), whole_bytes.data());
  }
};

struct WordPieceTableImage {
  std::vector<uint32_t> norm_index;
  std::vector<uint8_t> norm_bytes;
  std::vector<uint8_t> kinds;
  std::vector<TrieCell> initial, continuing;
  int32_t unk_id = -1;
  uint32_t max_word_chars = 0;
  /// The most normalized bytes a character's bytes become (a batch's normalized text is at most
  /// this many times as long).
  uint32_t max_expansion = 1;
  std::vector<std::pair<std::string, int32_t>> specials;

  [[nodiscard]] WordPieceTables view(const uint32_t* norm_index, const uint8_t* norm_bytes, const uint8_t* kinds,
                                     const TrieCell* initial, const TrieCell* continuing) const {
    return {norm_index, norm_bytes, kinds, initial, continuing, unk_id, max_word_chars};
  }
  [[nodiscard]] WordPieceTables host_view() const {
    return view(norm_index.data(), norm_bytes.data(), kinds.data(), initial.data(), continuing.data());
  }
};

/// A model the GPU runs: GPT-2's byte-level BPE (r50k's pattern) or BERT's WordPiece.
using ModelTables = std::variant<BpeTableImage, WordPieceTableImage>;
/// The tables of `tokenizer`'s model; kUnsupported for any other, naming it.
Result<ModelTables> model_tables(const Tokenizer& tokenizer);

}  // namespace outboard::gpu
