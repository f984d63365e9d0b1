#include "channel/ring.h"

#include <atomic>
#include <cstring>

namespace outboard::channel {

namespace {

std::atomic_ref<uint64_t> word(uint8_t* at) { return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(at)); }

}  // namespace

Result<std::unique_ptr<RxRing>> RxRing::create(transport::Worker& worker, uint32_t slots) {
  if (!valid_ring_slots(slots))
    return Status(Code::kInvalidArgument, "ring of " + std::to_string(slots) + " slots: a power of two up to " +
                                              std::to_string(kMaxRingSlots) + " expected");
  OB_ASSIGN_OR_RETURN(auto memory, worker.allocate_memory(RingLayout::bytes(slots)));
  std::memset(memory.data(), 0, memory.size());
  return std::unique_ptr<RxRing>(new RxRing(std::move(memory), slots));
}

RxRing::Take RxRing::take(RingFrame& out) {
  uint8_t* s = slot(next_);
  if (word(s).load(std::memory_order_acquire) != next_ + 1) return Take::kNone;
  std::memcpy(&out.header_bytes, s + RingLayout::kSlotHeaderBytesOffset, 2);
  std::memcpy(&out.data_bytes, s + RingLayout::kSlotDataBytesOffset, 2);
  const bool fits = size_t{out.header_bytes} + out.data_bytes <= RingLayout::kSlotCapacity;
  if (fits) std::memcpy(out.bytes, s + RingLayout::kSlotMetaBytes, size_t{out.header_bytes} + out.data_bytes);
  ++next_;
  // Release: the copy above is done before the sender may reuse the slot.
  word(memory_.data() + RingLayout::kConsumedOffset).store(next_, std::memory_order_release);
  return fits ? Take::kFrame : Take::kMalformed;
}

bool RxRing::sleep() {
  if ((epoch_ & 1) == 0) word(memory_.data() + RingLayout::kSleepOffset).store(++epoch_, std::memory_order_seq_cst);
  if (word(slot(next_)).load(std::memory_order_seq_cst) != next_ + 1) return true;
  wake();
  return false;
}

void RxRing::wake() {
  if ((epoch_ & 1) == 0) return;
  word(memory_.data() + RingLayout::kSleepOffset).store(++epoch_, std::memory_order_relaxed);
}

std::unique_ptr<TxRing> TxRing::bind(transport::RemoteKey key, uint32_t slots) {
  if (!key.mapped() || !valid_ring_slots(slots) || key.length() < RingLayout::bytes(slots)) return nullptr;
  return std::unique_ptr<TxRing>(new TxRing(std::move(key), slots));
}

bool TxRing::write(std::span<const uint8_t> header, std::span<const uint8_t> data, bool& doorbell) {
  if (header.size() + data.size() > RingLayout::kSlotCapacity) return false;
  uint8_t* base = key_.mapped();
  if (next_ - consumed_ >= slots_) {
    consumed_ = word(base + RingLayout::kConsumedOffset).load(std::memory_order_acquire);
    if (next_ - consumed_ >= slots_) return false;
  }
  uint8_t* s = base + RingLayout::slot(next_, slots_);
  const auto header_bytes = static_cast<uint16_t>(header.size());
  const auto data_bytes = static_cast<uint16_t>(data.size());
  std::memcpy(s + RingLayout::kSlotHeaderBytesOffset, &header_bytes, 2);
  std::memcpy(s + RingLayout::kSlotDataBytesOffset, &data_bytes, 2);
  std::memcpy(s + RingLayout::kSlotMetaBytes, header.data(), header.size());
  if (!data.empty()) std::memcpy(s + RingLayout::kSlotMetaBytes + header.size(), data.data(), data.size());
  ++next_;
  word(s).store(next_, std::memory_order_release);
  // Dekker with RxRing::sleep(): the mark's store before the epoch's load.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const uint64_t epoch = word(base + RingLayout::kSleepOffset).load(std::memory_order_relaxed);
  if ((epoch & 1) != 0 && epoch != rung_) {
    rung_ = epoch;
    doorbell = true;
  }
  return true;
}

}  // namespace outboard::channel
