// The transport layer on its own: the UCX_TLS narrowing, a peer's region
// descriptor checks, and one-sided operations through a real UCX endpoint
// of the process worker to itself.
#include "transport/transport.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <mutex>

#include "outboard/checksum.h"
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
  EXPECT_EQ(none.status().message(), "UCX_TLS=tcp leaves none of the transports this side may use (posix)");
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

  // Exposed memory names its own process's memory: only a peer checked to share our host and
  // user may name it, and the descriptor is the header alone.
  uint64_t word = 0;
  auto exposed = worker_->expose_memory(&word, sizeof word);
  ASSERT_TRUE(exposed.ok()) << exposed.status().to_string();
  auto process = check_descriptor(exposed->descriptor(), own);
  ASSERT_TRUE(process.ok()) << process.status().to_string();
  EXPECT_TRUE(process->process);
  EXPECT_EQ(process->base, reinterpret_cast<uint64_t>(&word));
  EXPECT_TRUE(process->packed_key.empty());
  EXPECT_EQ(check_descriptor(exposed->descriptor(), DescriptorPolicy{}).status().message(),
            "region descriptor: process memory of a peer not checked to be a process of this host and user");
  Bytes longer = exposed->descriptor();
  longer.push_back(0);
  EXPECT_EQ(check_descriptor(longer, own).status().code(), Code::kInvalidArgument);
}

// UCX 1.20 and later read a rebuilt key up to its device byte, with no length to stop them: a key
// that ends where unreadable memory begins is still read to its end and no further.
TEST_F(WorkerTest, ARebuiltKeyIsReadToItsEndAndNoFurther) {
  std::lock_guard lock(worker_->mutex());
  auto region = worker_->allocate_memory(4096);
  ASSERT_TRUE(region.ok()) << region.status().to_string();
  auto checked = check_descriptor(region->descriptor(), {.shared_memory = true, .owner = ::getpid()});
  ASSERT_TRUE(checked.ok()) << checked.status().to_string();
  Bytes rebuilt(region->descriptor().begin(), region->descriptor().begin() + kDescriptorHeaderBytes);
  rebuilt.insert(rebuilt.end(), checked->packed_key.begin(), checked->packed_key.end());

  const size_t page = ::sysconf(_SC_PAGESIZE);
  auto* pages =
      static_cast<uint8_t*>(::mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(pages, MAP_FAILED);
  ASSERT_EQ(::mprotect(pages + page, page, PROT_NONE), 0);
  uint8_t* at = pages + page - rebuilt.size();
  std::memcpy(at, rebuilt.data(), rebuilt.size());

  auto ep = worker_->connect_to(worker_->address());
  ASSERT_TRUE(ep.ok()) << ep.status().to_string();
  auto key = ep->import_region({at, rebuilt.size()}, /*map=*/false);
  ASSERT_TRUE(key.ok()) << key.status().to_string();
  const char word[] = "rebuilt";
  auto put = ep->put(*key, 8, {reinterpret_cast<const uint8_t*>(word), sizeof word});
  ASSERT_TRUE(finish(put).ok());
  EXPECT_EQ(std::memcmp(region->data() + 8, word, sizeof word), 0);
  ep->close(/*force=*/true);
  ::munmap(pages, 2 * page);
}

// The kernel copies exposed memory: bounds are checked first, and memory the owner no longer maps
// is an error naming the range, not a crash.
TEST_F(WorkerTest, AProcessKeyCopiesThroughTheKernelWithinItsBounds) {
  std::vector<uint8_t> theirs(10000), mine(4000);
  fill_pattern(theirs, 3);
  auto exposed = worker_->expose_memory(theirs.data(), theirs.size());
  ASSERT_TRUE(exposed.ok());
  DescriptorPolicy own{.shared_memory = true, .owner = ::getpid()};
  std::lock_guard lock(worker_->mutex());
  auto ep = worker_->connect_to(worker_->address());
  ASSERT_TRUE(ep.ok()) << ep.status().to_string();
  auto key = ep->import_region(exposed->descriptor(), true, &own);
  ASSERT_TRUE(key.ok()) << key.status().to_string();
  EXPECT_EQ(key->process(), ::getpid());
  EXPECT_EQ(key->mapped(), nullptr);
  ASSERT_TRUE(get_process(*key, 5000, mine).ok());
  EXPECT_EQ(0, std::memcmp(mine.data(), theirs.data() + 5000, mine.size()));
  std::vector<uint8_t> zeros(100, 0);
  auto put = ep->put(*key, 9900, zeros);  // the endpoint's put takes the same path, done in the call
  ASSERT_TRUE(put.ok() && put->done()) << put.status().to_string();
  EXPECT_EQ(std::vector<uint8_t>(theirs.end() - 100, theirs.end()), zeros);
  EXPECT_EQ(put_process(*key, 9901, zeros).code(), Code::kOutOfRange);

  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  void* gone = ::mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(gone, MAP_FAILED);
  auto freed = worker_->expose_memory(gone, page);
  ASSERT_TRUE(freed.ok());
  auto freed_key = ep->import_region(freed->descriptor(), true, &own);
  ASSERT_TRUE(freed_key.ok());
  // Taken away as a free would, but never handed out again (an agent in this process could map
  // something new at an unmapped address): the kernel refuses pages of no access alike.
  ASSERT_EQ(0, ::mprotect(gone, page, PROT_NONE));
  Status st = get_process(*freed_key, 0, {mine.data(), 16});
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("does not map this memory"), std::string::npos) << st.to_string();
  ::munmap(gone, page);
  ep->close(true);
}

// A process key copies only while the process its policy checked runs (by pidfd): once that one
// ended its pid may name another, so copies and imports are refused even where the pid names a
// live process (here this one, standing in for a process that reused the number).
TEST_F(WorkerTest, AProcessKeyStopsOnceTheProcessItWasCheckedForEnded) {
  std::vector<uint8_t> theirs(64, 7), mine(64);
  auto exposed = worker_->expose_memory(theirs.data(), theirs.size());
  ASSERT_TRUE(exposed.ok());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  // Killed and reaped however the test ends: an ASSERT that returns early must not leave it paused.
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      if (pid > 0 && ::kill(pid, SIGKILL) == 0) ::waitpid(pid, nullptr, 0);
    }
  } reaper{child};
  auto checked = std::make_shared<net::Fd>(static_cast<int>(::syscall(SYS_pidfd_open, child, 0)));
  ASSERT_TRUE(checked->valid()) << std::strerror(errno);
  DescriptorPolicy policy{.shared_memory = true, .owner = ::getpid(), .owner_process = checked};
  std::lock_guard lock(worker_->mutex());
  auto ep = worker_->connect_to(worker_->address());
  ASSERT_TRUE(ep.ok()) << ep.status().to_string();
  auto key = ep->import_region(exposed->descriptor(), true, &policy);
  ASSERT_TRUE(key.ok()) << key.status().to_string();
  ASSERT_TRUE(get_process(*key, 0, mine).ok());
  EXPECT_EQ(mine, theirs);

  ::kill(child, SIGKILL);
  ASSERT_EQ(child, ::waitpid(child, nullptr, 0));
  reaper.pid = -1;
  Status st = get_process(*key, 0, mine);
  EXPECT_EQ(st.code(), Code::kConnectionReset);
  EXPECT_NE(st.message().find("that process has ended"), std::string::npos) << st.to_string();
  std::vector<uint8_t> zeros(64, 0);
  EXPECT_EQ(put_process(*key, 0, zeros).code(), Code::kConnectionReset);
  EXPECT_EQ(theirs, std::vector<uint8_t>(64, 7));
  auto again = ep->import_region(exposed->descriptor(), true, &policy);
  EXPECT_EQ(again.status().code(), Code::kConnectionReset);
  EXPECT_NE(again.status().message().find("has ended"), std::string::npos) << again.status().to_string();
  ep->close(true);
}

}  // namespace
}  // namespace outboard::transport
