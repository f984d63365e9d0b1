// GPU-initiated writes (DOCA GPUNetIO's experiment, on one host): a CUDA
// kernel stores into memory of another process's (an agent's region, mapped
// here by shared memory and registered with CUDA), then sets a signal word
// the other process polls. No CPU is in the data path. The words stored are
// a function of the iteration and the position, so the CPU can post the same
// bytes (the comparison) and check what landed.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "gpu/bpe_kernels.h"  // OB_HD
#include "outboard/status.h"

namespace outboard::gpu {

/// Word k of iteration `it` (splitmix64 of both): distinct payloads per iteration.
OB_HD inline uint64_t write_word(uint64_t it, uint64_t k) {
  uint64_t z = (it << 40 ^ k) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// The words from `first` in steps of `stride` of iteration `it` (a thread's share of it).
OB_HD inline void write_words(uint64_t* to, uint64_t words, uint64_t it, uint64_t first, uint64_t stride) {
  for (uint64_t k = first; k < words; k += stride) to[k] = write_word(it, k);
}

/// Threads of the one block that stores each iteration (perftest's 512 writes in flight).
inline constexpr uint32_t kWriterThreads = 512;

/// A kernel's writes into `mapped` memory, which stays registered with CUDA while this lives.
class GpuWriter {
 public:
  virtual ~GpuWriter() = default;
  /// Registers `mapped` (host memory this process maps: page-aligned, as shared memory is).
  static Result<std::unique_ptr<GpuWriter>> create(std::span<uint8_t> mapped);
  /// Starts iterations first .. first + count - 1: each stores `words` words from the start of the
  /// memory, then a system-wide fence, then the iteration's number in the u64 at `signal_at`.
  /// Returns once launched; finish() waits.
  virtual Status launch(uint64_t words, uint64_t signal_at, uint64_t first, uint64_t count) = 0;
  /// Waits for the kernel; its time from CUDA events (ns).
  virtual Result<uint64_t> finish() = 0;
};

}  // namespace outboard::gpu
