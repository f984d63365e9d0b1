// Deterministic test patterns and checksums for verifying transferred bytes.
#pragma once

#include <cstdint>
#include <span>

namespace outboard {

/// Fills `out` with a pseudo-random stream determined by `seed` (splitmix64).
void fill_pattern(std::span<uint8_t> out, uint64_t seed);
/// XXH3-64 of `data` (xxHash): verifying bytes must not be slower than moving them.
uint64_t checksum(std::span<const uint8_t> data);
/// Folds `data` into a running digest of a message sequence: order matters,
/// so a lost, repeated or reordered message changes the result.
inline constexpr uint64_t kChecksumChainSeed = 0xcbf29ce484222325ull;  // FNV offset basis
/// The fold itself, for a message whose checksum() is already known.
inline constexpr uint64_t checksum_fold(uint64_t digest, uint64_t message_checksum) {
  return (digest ^ message_checksum) * 0x100000001b3ull;
}
inline uint64_t checksum_chain(uint64_t digest, std::span<const uint8_t> data) {
  return checksum_fold(digest, checksum(data));
}

}  // namespace outboard
