// Tokenization on a CUDA device: GPT-2's byte-level BPE or BERT's WordPiece,
// the ids left in device memory for the kernels that use them (an embedding
// lookup). The same ids as the CPU tokenizer's (bpe_kernels.h,
// wordpiece_kernels.h). Built where nvcc was found at configure time;
// elsewhere create() says so.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "outboard/status.h"
#include "outboard/tokenizer.h"

namespace outboard::gpu {

/// Longest batch (all its texts' bytes) one encode() takes: its device arrays take ~60 times that
/// (rounded up to a power of two).
inline constexpr size_t kMaxBatchBytes = size_t{64} << 20;

/// Whether this build has CUDA code and a CUDA device is usable; if not, why.
Status cuda_usable();

class GpuTokenizer {
 public:
  /// Times of one batch's stages, from CUDA events on its stream (ns).
  struct Stages {
    uint64_t copy_in_ns = 0;  ///< the texts to the device
    uint64_t kernels_ns = 0;  ///< pre-tokenization, merges and placing the ids
    uint64_t copy_out_ns = 0; ///< the texts' id offsets back
  };

  virtual ~GpuTokenizer() = default;
  /// The tokenizer's tables copied to the device (GPT-2's BPE and BERT's WordPiece; kUnsupported
  /// naming the vocabulary otherwise, or saying why there is no device).
  static Result<std::unique_ptr<GpuTokenizer>> create(const Tokenizer& tokenizer);

  /// Encodes `texts` (strict UTF-8) into `ids`, device memory of `capacity` int32s; text i's ids are
  /// ids[offsets[i], offsets[i + 1]). Special-token text is an error unless `ordinary`, when it is
  /// ordinary text (as Tokenizer's). Batches of one GpuTokenizer run one at a time.
  virtual Status encode(std::span<const std::string_view> texts, bool ordinary, int32_t* ids, size_t capacity,
                        std::vector<uint32_t>& offsets, Stages* stages = nullptr) = 0;
  /// Bytes of device memory held (tables and batch buffers).
  [[nodiscard]] virtual size_t device_bytes() const = 0;
};

/// The host's checks of a batch before it goes to the device: valid UTF-8 and no special-token text
/// (unless `ordinary`), each failure naming the text and offset; the total within kMaxBatchBytes.
Status check_batch(std::span<const std::string_view> texts, bool ordinary,
                   const std::vector<std::pair<std::string, int32_t>>& specials);

}  // namespace outboard::gpu
