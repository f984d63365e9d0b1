// Small frames written straight into the peer's memory.
//
// Where UCX maps a peer's region into this process (shared memory on one
// host), a sender copies a small frame into the next slot of the receiver's
// ring and publishes it with a release store; the receiver's Hub polls its
// rings on every progress() round. This skips UCX's active-message path,
// which was over half of a 64 B round trip (~100 ns of ~215 ns one way on
// this VM). A frame that does not fit a slot or finds the ring full goes
// through UCX instead: frames carry sequence numbers, and the receiver
// merges both paths in order.
//
// A receiver about to sleep marks its ring asleep (an odd epoch); a sender
// that publishes into a ring marked so rings the doorbell once per sleep: an
// unsequenced kDoorbell frame through UCX, whose arrival wakes the receiver.
// Both sides order their store before their load with a full fence, so either
// the sender sees the mark or the receiver sees the frame before it sleeps.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "transport/transport.h"

namespace outboard::channel {

/// Bytes of one slot: its mark and lengths, a frame header and its data.
constexpr size_t kRingSlotBytes = 256;
/// Largest ring a peer may advertise (1 MiB of slots).
constexpr uint32_t kMaxRingSlots = 4096;
/// A ring's slots are a power of two (an index masks, never divides).
constexpr bool valid_ring_slots(uint32_t slots) {
  return slots != 0 && slots <= kMaxRingSlots && (slots & (slots - 1)) == 0;
}

/// A ring in its receiver's memory. The receiver writes the first two cache
/// lines, the sender the slots.
struct RingLayout {
  static constexpr size_t kSleepOffset = 0;      // u64 epoch, odd while the receiver sleeps
  static constexpr size_t kConsumedOffset = 64;  // u64 frames the receiver has taken
  static constexpr size_t kSlotsOffset = 128;
  // A slot: u64 mark (the frame's index in the ring + 1, stored last),
  // u16 header bytes, u16 data bytes, then the header and the data.
  static constexpr size_t kSlotHeaderBytesOffset = 8;
  static constexpr size_t kSlotDataBytesOffset = 10;
  static constexpr size_t kSlotMetaBytes = 12;
  static constexpr size_t kSlotCapacity = kRingSlotBytes - kSlotMetaBytes;
  static constexpr size_t bytes(uint32_t slots) { return kSlotsOffset + size_t{slots} * kRingSlotBytes; }
  /// Where frame `index` goes in a ring of `slots` (a power of two).
  static constexpr size_t slot(uint64_t index, uint32_t slots) {
    return kSlotsOffset + (index & (slots - 1)) * kRingSlotBytes;
  }
};

/// A frame taken out of a ring: copied, so the slot is free at once.
struct RingFrame {
  uint16_t header_bytes = 0;
  uint16_t data_bytes = 0;
  uint8_t bytes[RingLayout::kSlotCapacity];
  [[nodiscard]] std::span<const uint8_t> header() const { return {bytes, header_bytes}; }
  [[nodiscard]] const uint8_t* data() const { return bytes + header_bytes; }
};

/// The receiving side: owns the ring's memory, registered for the peer.
class RxRing {
 public:
  /// A ring of `slots` slots in memory UCX allocates (what it can share).
  static Result<std::unique_ptr<RxRing>> create(transport::Worker& worker, uint32_t slots);

  [[nodiscard]] const transport::Bytes& descriptor() const { return memory_.descriptor(); }

  enum class Take { kNone, kFrame, kMalformed };
  /// Copies the next frame out and frees its slot. kMalformed: the peer
  /// wrote lengths beyond a slot (the slot is freed, `out` is not filled).
  Take take(RingFrame& out);
  /// Marks the ring asleep; false, unmarked, if a frame is waiting.
  bool sleep();
  /// Unmarks it (nothing when not marked).
  void wake();

 private:
  RxRing(transport::MemoryRegion memory, uint32_t slots) : memory_(std::move(memory)), slots_(slots) {}
  [[nodiscard]] uint8_t* slot(uint64_t index) const { return memory_.data() + RingLayout::slot(index, slots_); }
  transport::MemoryRegion memory_;
  uint32_t slots_;
  uint64_t next_ = 0;   // index of the next frame to take
  uint64_t epoch_ = 0;  // odd while marked asleep
};

/// The sending side: the peer's ring, mapped into this process.
class TxRing {
 public:
  /// Binds to the peer's ring; null unless `key` is mapped and `slots` slots fit it.
  static std::unique_ptr<TxRing> bind(transport::RemoteKey key, uint32_t slots);

  /// Copies the frame into the next slot and publishes it; false when it
  /// does not fit a slot or the ring is full (send it through UCX). Sets
  /// `doorbell` when the receiver sleeps and has not been rung this sleep.
  bool write(std::span<const uint8_t> header, std::span<const uint8_t> data, bool& doorbell);

 private:
  TxRing(transport::RemoteKey key, uint32_t slots) : key_(std::move(key)), slots_(slots) {}
  transport::RemoteKey key_;
  uint32_t slots_ = 0;
  uint64_t next_ = 0;      // index of the next frame to write
  uint64_t consumed_ = 0;  // the receiver's count, as last read
  uint64_t rung_ = 0;      // the sleep epoch last rung
};

}  // namespace outboard::channel
