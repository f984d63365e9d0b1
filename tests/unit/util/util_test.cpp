// Status, statistics, checksums, core lists, and who holds a loopback connection.
#include <gtest/gtest.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

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


TEST(NetTest, OnlyANonBlockingEventfdOfAnotherProcessIsTakenAsItsDoorbell) {
  int numbers[2];
  ASSERT_EQ(0, ::pipe(numbers));
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the peer: a doorbell rung 7 times, a blocking eventfd, a pipe
    int bell = ::eventfd(0, EFD_NONBLOCK), blocking = ::eventfd(0, 0), fds[2];
    if (::pipe(fds) != 0) ::_exit(1);
    const uint64_t seven = 7;
    (void)!::write(bell, &seven, sizeof seven);
    const int sent[3] = {bell, blocking, fds[0]};
    (void)!::write(numbers[1], sent, sizeof sent);
    ::pause();
    ::_exit(0);
  }
  int fd[3];
  ASSERT_EQ(static_cast<ssize_t>(sizeof fd), ::read(numbers[0], fd, sizeof fd));
  ::close(numbers[0]), ::close(numbers[1]);
  net::Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, child, 0)));
  ASSERT_TRUE(pidfd.valid());

  auto bell = net::take_peer_eventfd(pidfd, fd[0]);
  ASSERT_TRUE(bell.ok()) << bell.status().to_string();
  uint64_t count = 0;
  ASSERT_EQ(static_cast<ssize_t>(sizeof count), ::read(bell->get(), &count, sizeof count));
  EXPECT_EQ(count, 7u) << "the child's own eventfd, not a new one";
  EXPECT_EQ(::fcntl(bell->get(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);

  auto blocking = net::take_peer_eventfd(pidfd, fd[1]);
  EXPECT_EQ(blocking.status().code(), Code::kInvalidArgument);
  EXPECT_NE(blocking.status().message().find("blocks, expected a non-blocking one"), std::string::npos)
      << blocking.status().to_string();
  auto pipe = net::take_peer_eventfd(pidfd, fd[2]);
  EXPECT_EQ(pipe.status().code(), Code::kInvalidArgument);
  EXPECT_NE(pipe.status().message().find("is pipe:["), std::string::npos) << pipe.status().to_string();
  EXPECT_NE(pipe.status().message().find("expected an eventfd"), std::string::npos);
  EXPECT_EQ(net::take_peer_eventfd(pidfd, 1000).status().code(), Code::kUnsupported);  // not open there

  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_EQ(net::take_peer_eventfd(pidfd, fd[0]).status().code(), Code::kUnsupported);  // ended
}
}  // namespace
}  // namespace outboard
