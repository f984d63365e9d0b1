// Where a registered region's bytes live.
#pragma once

#include <cstdint>

namespace outboard {

enum class MemoryKind : uint8_t {
  kHost,  ///< CPU memory.
  /// Memory of the current CUDA device, allocated by UCX: needs a UCX built
  /// with CUDA. Its data() is a device pointer, which the CPU must not touch;
  /// peers reach it only through UCX (it is never mapped for CPU copies).
  kCuda,
};

}  // namespace outboard
