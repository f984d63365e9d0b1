// Deterministic test patterns and checksums for verifying transferred bytes.
#pragma once

#include <cstdint>
#include <span>

namespace outboard {

/// Fills `out` with a pseudo-random stream determined by `seed` (splitmix64).
void fill_pattern(std::span<uint8_t> out, uint64_t seed);
/// FNV-1a 64 of `data`.
uint64_t checksum(std::span<const uint8_t> data);

}  // namespace outboard
