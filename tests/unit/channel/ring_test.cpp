// The small-frame ring on real UCX memory: a ring this process allocates,
// mapped back into it through an endpoint to its own worker, as a peer on
// the same host maps it.
#include "channel/ring.h"

#include <gtest/gtest.h>

#include <optional>

#include <cstring>
#include <string>
#include <vector>

#include "channel/hub.h"

namespace outboard::channel {
namespace {

std::span<const uint8_t> bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

std::string text(std::span<const uint8_t> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

class RingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto hub = Hub::get();
    ASSERT_TRUE(hub.ok()) << hub.status().to_string();
    hub_ = std::move(hub).value();
    lock_.emplace(hub_->mutex());
    auto ep = hub_->worker().connect_to(hub_->worker().address());
    ASSERT_TRUE(ep.ok()) << ep.status().to_string();
    ep_ = std::move(ep).value();
  }
  void TearDown() override {
    tx_.reset();
    rx_.reset();
    ep_.close(true);
    lock_.reset();
  }
  // A ring of `slots` and the sending side bound to it (callers ASSERT_NO_FATAL_FAILURE: a failed ASSERT
  // here returns from this function only).
  void open(uint32_t slots) {
    auto rx = RxRing::create(hub_->worker(), slots);
    ASSERT_TRUE(rx.ok()) << rx.status().to_string();
    rx_ = std::move(rx).value();
    auto key = ep_.import_region(rx_->descriptor(), /*map=*/true);
    ASSERT_TRUE(key.ok()) << key.status().to_string();
    ASSERT_NE(key.value().mapped(), nullptr) << "UCX maps its own allocation into this process";
    tx_ = TxRing::bind(std::move(key).value(), slots);
    ASSERT_NE(tx_, nullptr);
  }
  bool write(const std::string& header, const std::string& data) {
    bool doorbell = false;
    return tx_->write(bytes(header), bytes(data), doorbell);
  }

  std::shared_ptr<Hub> hub_;
  std::optional<Lock> lock_;
  transport::Endpoint ep_;
  std::unique_ptr<RxRing> rx_;
  std::unique_ptr<TxRing> tx_;
};

TEST_F(RingTest, FramesComeOutInOrderAcrossManyWrapsOfTheRing) {
  ASSERT_NO_FATAL_FAILURE(open(4));
  RingFrame f;
  for (int i = 0; i < 100; ++i) {
    // Up to 3 frames in flight: the ring wraps 25 times with some pending.
    const int batch = 1 + i % 3;
    for (int k = 0; k < batch; ++k)
      ASSERT_TRUE(write("h" + std::to_string(i), "payload " + std::to_string(i * 10 + k)));
    for (int k = 0; k < batch; ++k) {
      ASSERT_EQ(rx_->take(f), RxRing::Take::kFrame);
      EXPECT_EQ(text(f.header()), "h" + std::to_string(i));
      EXPECT_EQ(text({f.data(), f.data_bytes}), "payload " + std::to_string(i * 10 + k));
    }
    EXPECT_EQ(rx_->take(f), RxRing::Take::kNone);
  }
}

TEST_F(RingTest, AFullRingOrAFrameLargerThanASlotIsRefusedForUcx) {
  ASSERT_NO_FATAL_FAILURE(open(2));
  const std::string largest(RingLayout::kSlotCapacity - 4, 'x');
  EXPECT_FALSE(write("head", largest + "y")) << "one byte over a slot";
  ASSERT_TRUE(write("head", largest));
  ASSERT_TRUE(write("h", ""));
  EXPECT_FALSE(write("h", "third")) << "both slots hold frames not yet taken";
  RingFrame f;
  ASSERT_EQ(rx_->take(f), RxRing::Take::kFrame);
  EXPECT_EQ(text({f.data(), f.data_bytes}), largest);
  EXPECT_TRUE(write("h", "third")) << "a taken frame frees its slot";
  ASSERT_EQ(rx_->take(f), RxRing::Take::kFrame);
  EXPECT_EQ(f.data_bytes, 0);
  ASSERT_EQ(rx_->take(f), RxRing::Take::kFrame);
  EXPECT_EQ(text({f.data(), f.data_bytes}), "third");
}

TEST_F(RingTest, ASleepingReceiverIsRungOncePerSleepAndNeverSleepsOverAFrame) {
  ASSERT_NO_FATAL_FAILURE(open(8));
  bool doorbell = false;
  ASSERT_TRUE(tx_->write(bytes("h"), bytes("awake"), doorbell));
  EXPECT_FALSE(doorbell) << "the receiver polls: no doorbell";
  EXPECT_FALSE(rx_->sleep()) << "a frame waits: the receiver must not sleep";
  RingFrame f;
  ASSERT_EQ(rx_->take(f), RxRing::Take::kFrame);

  ASSERT_TRUE(rx_->sleep());
  ASSERT_TRUE(tx_->write(bytes("h"), bytes("first"), doorbell));
  EXPECT_TRUE(doorbell) << "published into a sleeping ring";
  doorbell = false;
  ASSERT_TRUE(tx_->write(bytes("h"), bytes("second"), doorbell));
  EXPECT_FALSE(doorbell) << "already rung during this sleep";
  rx_->wake();
  ASSERT_EQ(rx_->take(f), RxRing::Take::kFrame);
  ASSERT_EQ(rx_->take(f), RxRing::Take::kFrame);

  ASSERT_TRUE(rx_->sleep());
  ASSERT_TRUE(rx_->sleep()) << "armed twice: still asleep";
  ASSERT_TRUE(tx_->write(bytes("h"), bytes("next sleep"), doorbell));
  EXPECT_TRUE(doorbell) << "a new sleep is rung again";
}

TEST_F(RingTest, LengthsBeyondASlotAreReportedAndTheRingGoesOn) {
  ASSERT_NO_FATAL_FAILURE(open(4));
  ASSERT_TRUE(write("h", "good"));
  // What a peer gone wrong could write: the slot's lengths, then its mark.
  auto key = ep_.import_region(rx_->descriptor(), true);
  ASSERT_TRUE(key.ok());
  uint8_t* slot1 = key.value().mapped() + RingLayout::slot(1, 4);
  const uint16_t huge = 0xffff;
  std::memcpy(slot1 + RingLayout::kSlotDataBytesOffset, &huge, 2);
  const uint64_t mark = 2;
  std::memcpy(slot1, &mark, 8);
  RingFrame f;
  ASSERT_EQ(rx_->take(f), RxRing::Take::kFrame);
  EXPECT_EQ(rx_->take(f), RxRing::Take::kMalformed);
  EXPECT_EQ(rx_->take(f), RxRing::Take::kNone);
}

TEST_F(RingTest, SlotCountsArePowersOfTwoWithinTheLimit) {
  EXPECT_FALSE(RxRing::create(hub_->worker(), 0).ok());
  EXPECT_FALSE(RxRing::create(hub_->worker(), 48).ok());
  EXPECT_FALSE(RxRing::create(hub_->worker(), kMaxRingSlots * 2).ok());
  auto rx = RxRing::create(hub_->worker(), 64);
  ASSERT_TRUE(rx.ok());
  // Bound with fewer bytes than its slots need: refused.
  auto key = ep_.import_region(rx.value()->descriptor(), true);
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(TxRing::bind(std::move(key).value(), 128), nullptr);
}

}  // namespace
}  // namespace outboard::channel
