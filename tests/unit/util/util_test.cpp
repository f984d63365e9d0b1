// Status, statistics, checksums, core lists, who holds a loopback connection, and doorbell pipes.
#include <gtest/gtest.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "outboard/affinity.h"
#include "outboard/checksum.h"
#include "outboard/stats.h"
#include "outboard/status.h"
#include "outboard/clock.h"
#include "util/net.h"

namespace outboard {
namespace {

Result<int> half(int x) {
  if (x % 2) return Status(Code::kInvalidArgument, "odd value " + std::to_string(x));
  return x / 2;
}

Result<int> quarter(int x) {
  OB_ASSIGN_OR_RETURN(int h, half(x));
  return half(h);
}

TEST(StatusTest, CodesAndMessagesPropagate) {
  EXPECT_EQ(quarter(8).value(), 2);
  Status st = quarter(6).status();
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_EQ(st.to_string(), "invalid argument: odd value 3");
  EXPECT_EQ(st.with_context("quarter").message(), "quarter: odd value 3");
  EXPECT_EQ(code_name(Code::kConnectionReset), "connection reset");
  EXPECT_EQ(code_name(Code::kShutDown), "shut down");
}

// Misuse aborts naming the condition and where; failure returns a Status.
TEST(StatusDeathTest, ValueOfAnErrorAndABrokenCheckAbortNamingWhere) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Result<int> none = Status{Code::kNotFound, "no such thing"};
  EXPECT_DEATH((void)none.value(), "check failed: ok\\(\\) at .*status.h:[0-9]+: value\\(\\) of not found: no such thing");
  const int limit = 3;
  EXPECT_DEATH(OB_CHECK(limit > 4, "limit is " + std::to_string(limit)), "check failed: limit > 4 at .*util_test.cpp:[0-9]+: limit is 3");
  OB_CHECK(limit == 3);  // holds: nothing happens
}

TEST(StatsTest, NearestRankPercentiles) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  auto s = stats::summarize(v);
  EXPECT_EQ(s.count, 100u);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.p50, 50);
  EXPECT_EQ(s.p90, 90);
  EXPECT_EQ(s.p99, 99);
  EXPECT_EQ(s.max, 100);
  EXPECT_EQ(stats::summarize({}).count, 0u);
}

TEST(ChecksumTest, PatternDependsOnSeedAndChecksumOnEveryByte) {
  std::vector<uint8_t> a(1000), b(1000);
  fill_pattern(a, 1);
  fill_pattern(b, 2);
  EXPECT_NE(checksum(a), checksum(b));
  fill_pattern(b, 1);
  EXPECT_EQ(a, b);
  b[999] ^= 1;
  EXPECT_NE(checksum(a), checksum(b));
  EXPECT_EQ(checksum({}), 0x2D06800538D394C2ull);  // XXH3-64 of nothing: xxHash's known answer
}

TEST(AffinityTest, CoreLists) {
  EXPECT_EQ(parse_core_list("0,2-4").value(), (std::vector<int>{0, 2, 3, 4}));
  EXPECT_EQ(parse_core_list("x").status().code(), Code::kBadConfig);
  EXPECT_EQ(parse_core_list("3-1").status().code(), Code::kBadConfig);
  EXPECT_EQ(pin_to_cores({100000}).code(), Code::kBadConfig);
}

// The pidfd names the process that holds the other end of the connection, as the kernel's tables
// say, and polls as ended once that process is gone (its pid is then free for another).
TEST(NetTest, APeerProcessIsHeldByPidfdOnlyIfItHoldsTheSocket) {
  auto listener = net::listen_tcp({"127.0.0.1", 0}, 1);
  ASSERT_TRUE(listener.ok()) << listener.status().to_string();
  auto port = net::parse_host_port(net::local_address(listener->get()));
  ASSERT_TRUE(port.ok());
  auto client = net::connect_tcp(*port, Deadline::after_ms(5000));
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  net::Fd served(::accept(listener->get(), nullptr, nullptr));
  ASSERT_TRUE(served.valid());

  auto me = net::open_peer_process(served.get(), ::getpid());
  ASSERT_TRUE(me.ok()) << me.status().to_string();
  EXPECT_FALSE(net::process_ended(*me));

  int ready[2];
  ASSERT_EQ(0, ::pipe(ready));
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // closes its copy of the client's end: only this test's process holds it
    client->reset();
    (void)!::write(ready[1], "x", 1);
    ::pause();
    ::_exit(0);
  }
  char x;
  ASSERT_EQ(1, ::read(ready[0], &x, 1));
  ::close(ready[0]), ::close(ready[1]);
  auto other = net::open_peer_process(served.get(), child);
  EXPECT_EQ(other.status().code(), Code::kNotFound);
  EXPECT_NE(other.status().message().find("does not hold this connection's socket"), std::string::npos)
      << other.status().to_string();

  net::Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, child, 0)));
  ASSERT_TRUE(pidfd.valid());
  EXPECT_FALSE(net::process_ended(pidfd));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_TRUE(net::process_ended(pidfd));
  EXPECT_EQ(net::open_peer_process(served.get(), child).status().code(), Code::kUnsupported);  // no such process
}


TEST(NetTest, ADoorbellIsAWriteEndOfOurOwnToAnAnonymousPipeOfAnotherProcess) {
  int numbers[2];
  ASSERT_EQ(0, ::pipe(numbers));
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the peer: a blocking pipe (its flags are not ours), an eventfd, a named FIFO
    int bell[2];
    const std::string fifo = "/tmp/outboard-net-test-fifo-" + std::to_string(::getpid());
    if (::pipe(bell) != 0 || ::mkfifo(fifo.c_str(), 0600) != 0) ::_exit(1);
    const int named = ::open(fifo.c_str(), O_RDWR);
    ::unlink(fifo.c_str());
    const int sent[4] = {bell[0], bell[1], ::eventfd(0, EFD_NONBLOCK), named};
    (void)!::write(numbers[1], sent, sizeof sent);
    char got[4] = {};
    (void)!::read(bell[0], got, 3);  // what the test rang, sent back
    (void)!::write(numbers[1], got, 3);
    ::pause();
    ::_exit(0);
  }
  int fd[4];
  ASSERT_EQ(static_cast<ssize_t>(sizeof fd), ::read(numbers[0], fd, sizeof fd));
  net::Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, child, 0)));
  ASSERT_TRUE(pidfd.valid());

  auto bell = net::open_peer_pipe(pidfd, child, fd[0]);  // its read end names the pipe as well
  ASSERT_TRUE(bell.ok()) << bell.status().to_string();
  EXPECT_EQ(::fcntl(bell->get(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  ASSERT_EQ(3, ::write(bell->get(), "abc", 3));
  char back[4] = {};
  ASSERT_EQ(3, ::read(numbers[0], back, 3));
  EXPECT_STREQ(back, "abc") << "the child's own pipe";
  // Its end blocks; ours does not: a full pipe answers EAGAIN, the writer goes on.
  ssize_t n = 0;
  const std::vector<char> chunk(4096, 'x');
  while ((n = ::write(bell->get(), chunk.data(), chunk.size())) > 0) {}
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_TRUE(net::open_peer_pipe(pidfd, child, fd[1]).ok()) << "its write end names the same pipe";

  for (int i : {2, 3}) {
    auto refused = net::open_peer_pipe(pidfd, child, fd[i]);
    EXPECT_EQ(refused.status().code(), Code::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("not an anonymous pipe"), std::string::npos)
        << refused.status().to_string();
  }
  EXPECT_EQ(net::open_peer_pipe(pidfd, child, 1000).status().code(), Code::kUnsupported);  // not open there
  ::close(numbers[0]), ::close(numbers[1]);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_EQ(net::open_peer_pipe(pidfd, child, fd[0]).status().code(), Code::kUnsupported);  // ended
}
}  // namespace
}  // namespace outboard
