// The tables the GPU's BPE threads read (bpe_kernels.h), built on the host
// from a loaded tokenizer: what gets copied to the device, and a view of it
// in host memory for a CPU run of the same steps.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gpu/bpe_kernels.h"
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

/// The tables of a GPT-2 (r50k) byte-level BPE tokenizer; kUnsupported for any other, naming it.
Result<BpeTableImage> bpe_tables(const Tokenizer& tokenizer);

}  // namespace outboard::gpu
