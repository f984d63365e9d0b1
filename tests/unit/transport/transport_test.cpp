// The transport layer on its own: the UCX_TLS narrowing, a peer's region
// descriptor checks, and one-sided operations through a real UCX endpoint
// of the process worker to itself.
#include "transport/transport.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <mutex>

#include "outboard/clock.h"

namespace outboard::transport {
namespace {

TEST(NarrowTransportsTest, TheEnvironmentOnlyNarrowsThePolicy) {
  EXPECT_EQ(narrow_transports("posix,tcp", nullptr).value(), "posix,tcp");
  EXPECT_EQ(narrow_transports("posix,tcp", "tcp,rc").value(), "tcp");
  EXPECT_EQ(narrow_transports("posix,tcp", "^tcp").value(), "posix");
  EXPECT_EQ(narrow_transports("posix,tcp", "shm").value(), "posix");  // an alias, expanded
  EXPECT_EQ(narrow_transports("posix,tcp", "all").value(), "posix,tcp");
  auto none = narrow_transports("posix", "tcp");
  ASSERT_EQ(none.status().code(), Code::kBadConfig);
  EXPECT_EQ(none.status().message(),
            "UCX_TLS=tcp leaves none of the transports this side may use (posix)");
}

class WorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto w = Worker::process_worker({});
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    worker_ = std::move(w).value();
  }
  // Progresses until `op` completes or the deadline passes.
  Status finish(Result<PolledOp>& op) {
    if (!op.ok()) return op.status();
    const Deadline deadline = Deadline::after_ms(5000);
    while (!op->done()) {
      if (deadline.expired()) return {Code::kTimedOut, "operation did not complete"};
      worker_->progress();
    }
    return op->status("operation");
  }
  std::shared_ptr<Worker> worker_;
};

TEST_F(WorkerTest, PutsAndGetsReachTheRegionAndStayInsideIt) {
  std::lock_guard lock(worker_->mutex());
  auto region = worker_->allocate_memory(4096);
  ASSERT_TRUE(region.ok()) << region.status().to_string();
  auto ep = worker_->connect_to(worker_->address());
  ASSERT_TRUE(ep.ok()) << ep.status().to_string();
  auto key = ep->import_region(region->descriptor(), /*map=*/false);
  ASSERT_TRUE(key.ok()) << key.status().to_string();
  EXPECT_EQ(key->length(), 4096u);

  const char hello[] = "one-sided";
  auto put = ep->put(*key, 100, {reinterpret_cast<const uint8_t*>(hello), sizeof hello});
  ASSERT_TRUE(finish(put).ok());
  EXPECT_EQ(std::memcmp(region->data() + 100, hello, sizeof hello), 0);
  std::vector<uint8_t> back(sizeof hello);
  auto get = ep->get(*key, 100, back);
  ASSERT_TRUE(finish(get).ok());
  EXPECT_EQ(std::memcmp(back.data(), hello, sizeof hello), 0);

  auto outside = ep->put(*key, 4090, {reinterpret_cast<const uint8_t*>(hello), sizeof hello});
  EXPECT_EQ(outside.status().code(), Code::kOutOfRange);
  ep->close(/*force=*/true);
}

TEST_F(WorkerTest, ADescriptorIsCheckedAgainstWhatThePeerMayName) {
  std::lock_guard lock(worker_->mutex());
  auto region = worker_->allocate_memory(8192);
  ASSERT_TRUE(region.ok()) << region.status().to_string();
  const Bytes& descriptor = region->descriptor();

  DescriptorPolicy own{.shared_memory = true, .owner = ::getpid()};
  auto checked = check_descriptor(descriptor, own);
  ASSERT_TRUE(checked.ok()) << checked.status().to_string();
  EXPECT_EQ(checked->base, reinterpret_cast<uint64_t>(region->data()));
  EXPECT_EQ(checked->length, 8192u);
  EXPECT_FALSE(checked->gpu);

  // A peer not trusted with shared memory keeps only keys of no bytes:
  // the rebuilt key is never larger.
  auto remote = check_descriptor(descriptor, DescriptorPolicy{});
  ASSERT_TRUE(remote.ok()) << remote.status().to_string();
  EXPECT_LE(remote->packed_key.size(), checked->packed_key.size());

  auto truncated = check_descriptor(std::span(descriptor).first(kDescriptorHeaderBytes - 1), own);
  EXPECT_EQ(truncated.status().code(), Code::kInvalidArgument);
  Bytes gpu = descriptor;
  std::memcpy(gpu.data(), &kCudaRegionMagic, sizeof kCudaRegionMagic);
  EXPECT_EQ(check_descriptor(gpu, own).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace outboard::transport
