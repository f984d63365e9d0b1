// The `mpi` service under a real agent: "ranks" are connections of this process (one session, as
// the ranks of a job share one), each with registered send and receive buffers; every result is
// compared with the collective computed here.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <numeric>
#include <random>
#include <span>
#include <thread>

#include "../agent_fixture.h"
#include "channel/connection_impl.h"
#include "services/mpi_wire.h"
#include "transport/secure.h"
#include "util/net.h"

namespace outboard {
namespace {

using services::mpi_wire::Coll;
using services::mpi_wire::Elem;
using services::mpi_wire::Post;
using services::mpi_wire::Reduce;

constexpr int64_t kWaitMs = 10'000;

struct Rank {
  std::unique_ptr<Connection> conn;
  std::vector<uint8_t> send, recv;
  Region send_region, recv_region;
  std::optional<Status> answer;
};

class MpiServiceTest : public testing::AgentFixture {
 protected:
  std::vector<Rank> ranks(size_t n) {
    std::vector<Rank> out(n);
    for (auto& r : out) r.conn = connect();
    return out;
  }

  // Registers the rank's buffers with UCX (even ranks) or exposes them to the agent, which copies
  // them through the kernel (odd ranks: both paths, mixed in one collective), and fills in the
  // post's regions.
  static void regions(Rank& r, Post& p) {
    auto region = [&](std::vector<uint8_t>& v) {
      return p.rank % 2 ? r.conn->expose_memory(v.data(), v.size()) : r.conn->register_memory(v.data(), v.size());
    };
    if (!r.send.empty() && !p.in_place && p.coll != Coll::kBcast) {
      auto reg = region(r.send);
      ASSERT_TRUE(reg.ok()) << reg.status().to_string();
      r.send_region = std::move(reg).value();
      p.send_region.assign(r.send_region.descriptor().begin(), r.send_region.descriptor().end());
    }
    if (!r.recv.empty()) {
      auto reg = region(r.recv);
      ASSERT_TRUE(reg.ok()) << reg.status().to_string();
      r.recv_region = std::move(reg).value();
      p.recv_region.assign(r.recv_region.descriptor().begin(), r.recv_region.descriptor().end());
    }
  }

  // Posts `p` on `conn`; `answer` gets the agent's answer.
  static void submit(Connection& conn, const Post& p, std::optional<Status>& answer) {
    answer.reset();
    ASSERT_TRUE(conn.submit("mpi", Buffer::copy_of(services::mpi_wire::encode(p)), Deadline::after_ms(kWaitMs),
                            [&answer](Result<Buffer> a) { answer = a.status(); }, Connection::Credit::kWait)
                    .ok());
  }

  // Progresses `conn` until every one of `answers` came (false at the deadline).
  static bool answered(Connection& conn, std::span<const std::optional<Status>> answers) {
    return conn.wait_until(Deadline::after_ms(kWaitMs), [&] {
      return std::all_of(answers.begin(), answers.end(), [](auto& a) { return a.has_value(); });
    });
  }

  // Posts each rank's collective, in `order`, then waits for every answer.
  static void post_all(std::vector<Rank>& rs, std::vector<Post> posts, std::vector<size_t> order = {}) {
    if (order.empty()) {
      order.resize(rs.size());
      std::iota(order.begin(), order.end(), 0);
    }
    for (size_t i : order) {
      Rank& r = rs[i];
      regions(r, posts[i]);
      submit(*r.conn, posts[i], r.answer);
    }
    const bool all = rs[0].conn->wait_until(Deadline::after_ms(kWaitMs), [&] {
      return std::all_of(rs.begin(), rs.end(), [](const Rank& r) { return r.answer.has_value(); });
    });
    ASSERT_TRUE(all) << "not every rank was answered";
  }

  void many_in_flight(bool keep);
  using MakePost = std::function<Post(Coll, uint64_t, uint32_t, uint32_t, uint64_t)>;
  // Every collective over memory UCX allocated (the agent maps it) with 4 KiB of agent memory.
  void mapped_without_staging(std::vector<Rank>& rs, const MakePost& make);

  static Post post(Coll coll, uint64_t seq, uint32_t size, uint32_t rank, uint64_t bytes) {
    Post p;
    p.comm = 7, p.seq = seq, p.size = size, p.rank = rank, p.coll = coll, p.bytes = bytes;
    return p;
  }

  // Alltoallv counts and displacements for `p`'s rank: it sends 10 * rank + j + 1 B to rank j from
  // `gap` B past the previous block and receives packed; (bytes sent with gaps, bytes received).
  static std::pair<uint64_t, uint64_t> alltoallv_counts(Post& p, uint64_t gap) {
    auto counts = [](uint32_t from, uint32_t to) -> uint64_t { return 10 * from + to + 1; };
    uint64_t sent = 0, got = 0;
    for (uint32_t j = 0; j < p.size; ++j) {
      p.send_counts.push_back(counts(p.rank, j)), p.send_displs.push_back(sent + gap), sent += counts(p.rank, j) + gap;
      p.recv_counts.push_back(counts(j, p.rank)), p.recv_displs.push_back(got), got += counts(j, p.rank);
    }
    return {sent, got};
  }

  static std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = static_cast<uint8_t>(rng());
    return v;
  }
};

TEST_F(MpiServiceTest, AlltoallMovesEveryBlockToItsRankAndInPlaceToo) {
  for (bool in_place : {false, true}) {
    constexpr uint32_t n = 3;
    constexpr uint64_t block = 1000;
    auto rs = ranks(n);
    std::vector<Post> posts;
    std::vector<std::vector<uint8_t>> inputs;
    for (uint32_t i = 0; i < n; ++i) {
      inputs.push_back(random_bytes(n * block, i + 10 * in_place));
      rs[i].send = inputs[i];
      rs[i].recv = in_place ? inputs[i] : std::vector<uint8_t>(n * block);
      posts.push_back(post(Coll::kAlltoall, 0, n, i, block));
      posts.back().in_place = in_place;
    }
    post_all(rs, posts, {2, 0, 1});
    for (uint32_t j = 0; j < n; ++j) {
      ASSERT_TRUE(rs[j].answer->ok()) << rs[j].answer->to_string();
      for (uint32_t i = 0; i < n; ++i)
        EXPECT_EQ(0, std::memcmp(rs[j].recv.data() + i * block, inputs[i].data() + j * block, block))
            << "block from rank " << i << " at rank " << j << (in_place ? " (in place)" : "");
    }
  }
}

TEST_F(MpiServiceTest, AllgatherBcastAndZeroCounts) {
  constexpr uint32_t n = 4;
  constexpr uint64_t block = 333;
  auto rs = ranks(n);
  std::vector<Post> gather, bcast, empty;
  for (uint32_t i = 0; i < n; ++i) {
    rs[i].send = random_bytes(block, 100 + i);
    rs[i].recv.assign(n * block, 0);
    if (i == 1) {  // in place: its block already sits at its place
      std::memcpy(rs[i].recv.data() + i * block, rs[i].send.data(), block);
      gather.push_back(post(Coll::kAllgather, 0, n, i, block));
      gather.back().in_place = true;
    } else {
      gather.push_back(post(Coll::kAllgather, 0, n, i, block));
    }
  }
  post_all(rs, gather);
  for (uint32_t j = 0; j < n; ++j) {
    ASSERT_TRUE(rs[j].answer->ok()) << rs[j].answer->to_string();
    for (uint32_t i = 0; i < n; ++i)
      EXPECT_EQ(0, std::memcmp(rs[j].recv.data() + i * block, rs[i].send.data(), block)) << i << " at " << j;
  }
  const auto root_data = random_bytes(block, 7);
  for (uint32_t i = 0; i < n; ++i) {
    rs[i].recv = i == 2 ? root_data : std::vector<uint8_t>(block);
    rs[i].send.clear();
    bcast.push_back(post(Coll::kBcast, 1, n, i, block));
    bcast.back().root = 2;
    empty.push_back(post(Coll::kAlltoall, 2, n, i, 0));
  }
  post_all(rs, bcast);
  for (auto& r : rs) {
    ASSERT_TRUE(r.answer->ok()) << r.answer->to_string();
    EXPECT_EQ(r.recv, root_data);
  }
  for (auto& r : rs) r.send.clear(), r.recv.clear();
  post_all(rs, empty);  // zero counts: no region, still one collective every rank completes
  for (auto& r : rs) EXPECT_TRUE(r.answer->ok()) << r.answer->to_string();
}

template <typename T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

template <typename T>
void check_allreduce(MpiServiceTest* test, std::vector<Rank>& rs, Elem elem, Reduce op, uint64_t seq,
                     void (*post_all)(std::vector<Rank>&, std::vector<Post>, std::vector<size_t>),
                     Post (*make)(Coll, uint64_t, uint32_t, uint32_t, uint64_t)) {
  (void)test;
  const uint32_t n = static_cast<uint32_t>(rs.size());
  constexpr size_t count = 37;
  std::vector<std::vector<T>> in(n, std::vector<T>(count));
  for (uint32_t i = 0; i < n; ++i)
    for (size_t k = 0; k < count; ++k) in[i][k] = static_cast<T>(T(k % 5) - T(2) + T(i) * T(0.5) + T(1));
  std::vector<T> want = in[0];  // rank order, as the service documents
  for (uint32_t i = 1; i < n; ++i)
    for (size_t k = 0; k < count; ++k) {
      T& a = want[k];
      const T b = in[i][k];
      a = op == Reduce::kSum ? a + b : op == Reduce::kMin ? std::min(a, b) : op == Reduce::kMax ? std::max(a, b) : a * b;
    }
  std::vector<Post> posts;
  for (uint32_t i = 0; i < n; ++i) {
    rs[i].send = as_bytes(in[i]);
    rs[i].recv = i == 0 ? as_bytes(in[i]) : std::vector<uint8_t>(count * sizeof(T));
    Post p = make(Coll::kAllreduce, seq, n, i, count * sizeof(T));
    p.elem = elem, p.reduce = op, p.in_place = i == 0;
    posts.push_back(p);
  }
  post_all(rs, posts, {});
  for (auto& r : rs) {
    ASSERT_TRUE(r.answer->ok()) << r.answer->to_string();
    EXPECT_EQ(r.recv, as_bytes(want)) << "element " << int(elem) << " op " << int(op);
  }
}

TEST_F(MpiServiceTest, AllreduceEveryTypeAndOpInRankOrder) {
  auto rs = ranks(3);
  uint64_t seq = 0;
  for (Reduce op : {Reduce::kSum, Reduce::kMin, Reduce::kMax, Reduce::kProd}) {
    check_allreduce<int32_t>(this, rs, Elem::kI32, op, seq++, post_all, post);
    check_allreduce<int64_t>(this, rs, Elem::kI64, op, seq++, post_all, post);
    check_allreduce<float>(this, rs, Elem::kF32, op, seq++, post_all, post);
    check_allreduce<double>(this, rs, Elem::kF64, op, seq++, post_all, post);
  }
}

TEST_F(MpiServiceTest, AlltoallvPairsCountsAndNamesRanksThatDisagree) {
  constexpr uint32_t n = 3;
  auto rs = ranks(n);
  std::vector<Post> posts;
  for (uint32_t i = 0; i < n; ++i) {
    Post p = post(Coll::kAlltoallv, 0, n, i, 0);
    const auto [sent, got] = alltoallv_counts(p, 5);
    rs[i].send = random_bytes(sent, 50 + i);
    rs[i].recv.assign(got, 0);
    posts.push_back(p);
  }
  post_all(rs, posts);
  for (uint32_t j = 0; j < n; ++j) {
    ASSERT_TRUE(rs[j].answer->ok()) << rs[j].answer->to_string();
    for (uint32_t i = 0; i < n; ++i)
      EXPECT_EQ(0, std::memcmp(rs[j].recv.data() + posts[j].recv_displs[i],
                               rs[i].send.data() + posts[i].send_displs[j], posts[i].send_counts[j]));
  }
  for (auto& p : posts) p.seq = 1;
  posts[2].recv_counts[1] += 1;  // rank 2 expects a byte more from rank 1 than rank 1 sends
  rs[2].recv.push_back(0);
  post_all(rs, posts);
  for (auto& r : rs) {
    ASSERT_FALSE(r.answer->ok());
    EXPECT_NE(r.answer->message().find("rank 1 sends 13 B to rank 2, which expects 14 B"), std::string::npos)
        << r.answer->to_string();
  }
}

// Twice: regions imported per collective, then kept (kKeep: 16 regions a rank against 8 kept
// imports, so some are dropped while collectives that read them are still to run).
TEST_F(MpiServiceTest, ManyInFlightOnOneCommunicatorPostedInAnyOrder) {
  for (const bool keep : {false, true}) many_in_flight(keep);
}

void MpiServiceTest::many_in_flight(bool keep) {
  SCOPED_TRACE(keep ? "kept regions" : "regions per collective");
  constexpr uint32_t n = 2, kOps = 8;
  constexpr uint64_t block = 64;
  std::vector<std::optional<Status>> answers(n * kOps);
  std::vector<std::vector<uint8_t>> send(n * kOps), recv(n * kOps, std::vector<uint8_t>(n * block));
  auto rs = ranks(n);
  std::vector<Region> held;
  for (uint32_t k = 0; k < kOps; ++k)
    for (uint32_t idx = 0; idx < n; ++idx) {
      const uint32_t i = k % 2 ? n - 1 - idx : idx;  // ranks post in alternating order
      const uint32_t slot = k * n + i;
      send[slot] = random_bytes(n * block, slot);
      Post p = post(Coll::kAlltoall, k, n, i, block);
      p.keep = keep;  // true: `held` holds every region to the end
      auto s = rs[i].conn->register_memory(send[slot].data(), send[slot].size());
      auto r = rs[i].conn->register_memory(recv[slot].data(), recv[slot].size());
      ASSERT_TRUE(s.ok() && r.ok());
      p.send_region.assign(s.value().descriptor().begin(), s.value().descriptor().end());
      p.recv_region.assign(r.value().descriptor().begin(), r.value().descriptor().end());
      held.push_back(std::move(s).value()), held.push_back(std::move(r).value());
      submit(*rs[i].conn, p, answers[slot]);
    }
  ASSERT_TRUE(answered(*rs[0].conn, answers));
  for (uint32_t k = 0; k < kOps; ++k)
    for (uint32_t j = 0; j < n; ++j) {
      ASSERT_TRUE(answers[k * n + j]->ok()) << answers[k * n + j]->to_string();
      for (uint32_t i = 0; i < n; ++i)
        EXPECT_EQ(0, std::memcmp(recv[k * n + j].data() + i * block, send[k * n + i].data() + j * block, block));
    }
}

// Memory UCX allocated is mapped by the agent: blocks go straight from input to output, and
// allreduce combines in place, with no staging. The agent has 4 KiB for staging, far less than
// these collectives would stage; an in-place alltoall still stages, and fails naming the limit.
TEST_F(MpiServiceTest, MappedRegionsAreCopiedStraightAcrossWithoutStaging) {
  if (agent_in_process()) GTEST_SKIP() << "an agent in this process maps no region of its own process";
  AgentConfig config = testing::test_config();
  config.max_memory = 4096;
  stop_agent();
  start_agent(config);
  auto rs = ranks(3);
  mapped_without_staging(rs, post);
}

void MpiServiceTest::mapped_without_staging(std::vector<Rank>& rs, const MakePost& make) {
  constexpr uint32_t n = 3;
  constexpr uint64_t block = 20'000;
  std::vector<Region> send, recv;
  std::vector<std::vector<uint8_t>> input;
  for (uint32_t i = 0; i < n; ++i) {
    auto s = rs[i].conn->allocate_memory(n * block), r = rs[i].conn->allocate_memory(n * block);
    ASSERT_TRUE(s.ok() && r.ok());
    send.push_back(std::move(s).value()), recv.push_back(std::move(r).value());
    input.push_back(random_bytes(n * block, 40 + i));
    std::memcpy(send[i].data(), input[i].data(), n * block);
  }
  std::vector<std::optional<Status>> answers(n);
  auto run = [&](Coll coll, uint64_t seq, const std::function<void(Post&)>& shape = {}) {
    for (uint32_t i = 0; i < n; ++i) {
      std::memset(recv[i].data(), 0, n * block);
      Post p = make(coll, seq, n, i, block);
      if (shape) shape(p);
      p.keep = true;
      if (coll != Coll::kBcast) p.send_region.assign(send[i].descriptor().begin(), send[i].descriptor().end());
      p.recv_region.assign(recv[i].descriptor().begin(), recv[i].descriptor().end());
      submit(*rs[i].conn, p, answers[i]);
    }
    ASSERT_TRUE(answered(*rs[0].conn, answers));
  };
  auto at = [&](const Region& r, uint64_t offset) { return r.data() + offset; };

  run(Coll::kAlltoall, 0);
  for (uint32_t j = 0; j < n; ++j) {
    ASSERT_TRUE(answers[j]->ok()) << answers[j]->to_string();
    for (uint32_t i = 0; i < n; ++i) EXPECT_EQ(0, std::memcmp(at(recv[j], i * block), input[i].data() + j * block, block));
  }
  run(Coll::kAllgather, 1);
  for (uint32_t j = 0; j < n; ++j) {
    ASSERT_TRUE(answers[j]->ok()) << answers[j]->to_string();
    for (uint32_t i = 0; i < n; ++i) EXPECT_EQ(0, std::memcmp(at(recv[j], i * block), input[i].data(), block));
  }
  run(Coll::kBcast, 2, [&](Post& p) {  // after run() cleared the outputs: the root's buffer is its input
    p.root = 2;
    if (p.rank == 2) std::memcpy(recv[2].data(), input[2].data(), block);
  });
  for (uint32_t j = 0; j < n; ++j) {
    ASSERT_TRUE(answers[j]->ok()) << answers[j]->to_string();
    EXPECT_EQ(0, std::memcmp(at(recv[j], 0), input[2].data(), block)) << j;
  }
  // Alltoallv: rank i sends (i + j + 1) * 100 B to rank j from displacement j * block.
  run(Coll::kAlltoallv, 3, [&](Post& p) {
    for (uint32_t j = 0; j < n; ++j) {
      p.send_counts.push_back((p.rank + j + 1) * 100), p.send_displs.push_back(j * block);
      p.recv_counts.push_back((j + p.rank + 1) * 100), p.recv_displs.push_back(j * block);
    }
  });
  for (uint32_t j = 0; j < n; ++j) {
    ASSERT_TRUE(answers[j]->ok()) << answers[j]->to_string();
    for (uint32_t i = 0; i < n; ++i)
      EXPECT_EQ(0, std::memcmp(at(recv[j], i * block), input[i].data() + j * block, (i + j + 1) * 100));
  }
  // Allreduce, rank 1 in place (its input sits in its output): sums in rank order. A block each:
  // two ranks' inputs shared in one request stay off the memory budget.
  static_assert(2 * block < kBudgetedRequestBytes);
  run(Coll::kAllreduce, 4, [&](Post& p) {
    p.elem = Elem::kI32, p.reduce = Reduce::kSum, p.bytes = block;
    if (p.rank == 1) p.in_place = true, std::memcpy(recv[1].data(), input[1].data(), block);
  });
  std::vector<int32_t> sum(block / 4, 0);
  for (uint32_t i = 0; i < n; ++i)
    for (size_t k = 0; k < sum.size(); ++k) {
      int32_t v;
      std::memcpy(&v, input[i].data() + 4 * k, 4);
      sum[k] = static_cast<int32_t>(static_cast<uint32_t>(sum[k]) + static_cast<uint32_t>(v));
    }
  for (uint32_t j = 0; j < n; ++j) {
    ASSERT_TRUE(answers[j]->ok()) << answers[j]->to_string();
    EXPECT_EQ(0, std::memcmp(recv[j].data(), sum.data(), block)) << j;
  }
  // In place, alltoall's copies would overwrite inputs not yet read: it stages, and 4 KiB is short.
  run(Coll::kAlltoall, 5, [](Post& p) { p.in_place = p.rank == 0; });
  for (auto& a : answers) {
    ASSERT_FALSE(a->ok());
    EXPECT_NE(a->message().find("--max-memory"), std::string::npos) << a->to_string();
  }
}

// A rank asks before it hands over exposed buffers: the agent reads back what it wrote there.
TEST_F(MpiServiceTest, AReachReadsTheRanksWordOrSaysWhyNot) {
  auto rs = ranks(1);
  uint64_t word = 0x1234'5678'9abc'def0ull;
  auto region = rs[0].conn->expose_memory(&word, sizeof word);
  ASSERT_TRUE(region.ok()) << region.status().to_string();
  services::mpi_wire::Reach reach{word, {region->descriptor().begin(), region->descriptor().end()}};
  auto ask = [&] {
    return rs[0].conn->request("mpi", services::mpi_wire::encode(reach), Deadline::after_ms(kWaitMs)).status();
  };
  EXPECT_TRUE(ask().ok()) << ask().to_string();
  reach.value = 7;
  Status st = ask();
  EXPECT_EQ(st.message(), "mpi: reaching the rank's memory: read " + std::to_string(word) + " where the rank wrote 7");
  // A region of 4 B holds no 8-byte word: refused before the kernel is asked.
  auto small = rs[0].conn->expose_memory(&word, 4);
  reach.region.assign(small->descriptor().begin(), small->descriptor().end());
  EXPECT_EQ(ask().code(), Code::kOutOfRange) << ask().to_string();
}

// Exposed buffers that the program frees before the collective runs (its bug): the agent's copy
// finds the pages gone and fails the collective on every rank naming the range; the agent, and
// the next collective, go on.
TEST_F(MpiServiceTest, AnExposedBufferFreedBeforeTheCollectiveFailsItNotTheAgent) {
  constexpr uint32_t n = 2;
  constexpr uint64_t block = 8192;
  auto rs = ranks(n);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  void* gone = ::mmap(nullptr, n * block + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(gone, MAP_FAILED);
  std::vector<std::optional<Status>> answers(n);
  std::vector<std::vector<uint8_t>> send(n, random_bytes(n * block, 5)), recv(n, std::vector<uint8_t>(n * block));
  auto run = [&](uint64_t seq, void* rank0_send) {
    for (uint32_t i = 0; i < n; ++i) {
      Post p = post(Coll::kAlltoall, seq, n, i, block);
      auto in = rs[i].conn->expose_memory(i == 0 ? rank0_send : send[i].data(), n * block);
      auto out = rs[i].conn->expose_memory(recv[i].data(), n * block);
      ASSERT_TRUE(in.ok() && out.ok());
      p.send_region.assign(in->descriptor().begin(), in->descriptor().end());
      p.recv_region.assign(out->descriptor().begin(), out->descriptor().end());
      submit(*rs[i].conn, p, answers[i]);
    }
    ASSERT_TRUE(answered(*rs[0].conn, answers));
  };
  // Taken away as a free would, but never handed out again (an agent in this process could map
  // something new at an unmapped address): the kernel refuses pages of no access alike.
  ASSERT_EQ(0, ::mprotect(gone, n * block + page, PROT_NONE));
  run(0, gone);
  for (auto& a : answers) {
    ASSERT_FALSE(a->ok());
    EXPECT_NE(a->message().find("does not map this memory (freed?)"), std::string::npos) << a->to_string();
    EXPECT_NE(a->message().find("reading rank 0's input"), std::string::npos) << a->to_string();
  }
  run(1, send[0].data());
  for (uint32_t j = 0; j < n; ++j) {
    ASSERT_TRUE(answers[j]->ok()) << answers[j]->to_string();
    for (uint32_t i = 0; i < n; ++i)
      EXPECT_EQ(0, std::memcmp(recv[j].data() + i * block, send[i].data() + j * block, block));
  }
  ::munmap(gone, n * block + page);
}

// A rank that copied the block it gives itself (kOwnBlock) finds it as it left it; the others get
// theirs from the agent, as does a rank that did not say so.
TEST_F(MpiServiceTest, ABlockARankGaveItselfIsLeftAlone) {
  constexpr uint32_t n = 3;
  constexpr uint64_t block = 500;
  auto rs = ranks(n);
  std::vector<Post> posts;
  for (uint32_t i = 0; i < n; ++i) {
    rs[i].send = random_bytes(n * block, 60 + i);
    rs[i].recv.assign(n * block, 0xee);
    posts.push_back(post(Coll::kAlltoall, 0, n, i, block));
    posts.back().own_block = i != 1;
  }
  post_all(rs, posts);
  for (uint32_t j = 0; j < n; ++j) {
    ASSERT_TRUE(rs[j].answer->ok()) << rs[j].answer->to_string();
    for (uint32_t i = 0; i < n; ++i) {
      const std::vector<uint8_t> got(rs[j].recv.begin() + i * block, rs[j].recv.begin() + (i + 1) * block);
      if (i == j && j != 1) EXPECT_EQ(got, std::vector<uint8_t>(block, 0xee)) << "rank " << j << "'s own block";
      else EXPECT_EQ(0, std::memcmp(got.data(), rs[i].send.data() + j * block, block)) << i << " to " << j;
    }
  }
}

TEST_F(MpiServiceTest, DisagreeingPostsFailEveryRankNamingBoth) {
  auto rs = ranks(2);
  std::vector<Post> posts = {post(Coll::kBcast, 0, 2, 0, 16), post(Coll::kBcast, 0, 2, 1, 16)};
  posts[1].root = 1;
  rs[0].recv.assign(16, 1), rs[1].recv.assign(16, 2);
  post_all(rs, posts);
  for (auto& r : rs) {
    ASSERT_FALSE(r.answer->ok());
    EXPECT_NE(r.answer->message().find("rank 1 posted bcast of 16 B (element 0, op 0, root 1), rank 0 bcast of 16 B "
                                       "(element 0, op 0, root 0)"),
              std::string::npos)
        << r.answer->to_string();
  }
  EXPECT_EQ(rs[1].recv, std::vector<uint8_t>(16, 2));  // nothing written
}

TEST_F(MpiServiceTest, ARankThatCannotTakePartFailsEveryRankNamingItsReason) {
  auto rs = ranks(2);
  std::vector<Post> posts = {post(Coll::kAlltoall, 0, 2, 0, 8), post(Coll::kAlltoall, 0, 2, 1, 8)};
  posts[1].failure = "staging of its own for 16 B exceeds OUTBOARD_MPI_OWN_STAGING_BYTES 8";
  rs[0].send.assign(16, 1), rs[0].recv.assign(16, 0);
  post_all(rs, posts);
  for (auto& r : rs) {
    ASSERT_FALSE(r.answer->ok());
    EXPECT_EQ(r.answer->code(), Code::kFailed);
    EXPECT_NE(r.answer->message().find("alltoall #0 on communicator 7: rank 1 could not take part: staging of its "
                                       "own for 16 B exceeds OUTBOARD_MPI_OWN_STAGING_BYTES 8"),
              std::string::npos)
        << r.answer->to_string();
  }
  EXPECT_EQ(rs[0].recv, std::vector<uint8_t>(16, 0));  // nothing written
  // The communicator goes on.
  for (uint32_t i = 0; i < 2; ++i) rs[i].send = random_bytes(16, i), rs[i].recv.assign(16, 0), rs[i].answer.reset();
  post_all(rs, {post(Coll::kAlltoall, 1, 2, 0, 8), post(Coll::kAlltoall, 1, 2, 1, 8)});
  for (uint32_t j = 0; j < 2; ++j) {
    ASSERT_TRUE(rs[j].answer->ok()) << rs[j].answer->to_string();
    for (uint32_t i = 0; i < 2; ++i) EXPECT_EQ(0, std::memcmp(rs[j].recv.data() + i * 8, rs[i].send.data() + j * 8, 8));
  }
}

TEST_F(MpiServiceTest, ARankThatLeavesFailsTheWaitingOthersInsteadOfHangingThem) {
  std::vector<std::optional<Status>> answers(2);
  auto rs = ranks(3);
  // Rank 2 joins the communicator with a first collective, then leaves before the second.
  std::vector<Post> first;
  for (uint32_t i = 0; i < 3; ++i) first.push_back(post(Coll::kAlltoall, 0, 3, i, 0));
  post_all(rs, first);
  for (uint32_t i = 0; i < 2; ++i) submit(*rs[i].conn, post(Coll::kAlltoall, 1, 3, i, 0), answers[i]);
  rs[2].conn->close();
  ASSERT_TRUE(answered(*rs[0].conn, answers));
  for (auto& a : answers) {
    EXPECT_EQ(a->code(), Code::kConnectionReset) << a->to_string();
    EXPECT_NE(a->message().find("rank 2 left (its connection closed) before the collective ran"), std::string::npos);
  }
  // A collective posted after the agent saw rank 2 leave fails at once, the same way.
  std::optional<Status> later;
  submit(*rs[0].conn, post(Coll::kAlltoall, 2, 3, 0, 0), later);
  ASSERT_TRUE(answered(*rs[0].conn, {&later, 1}));
  EXPECT_EQ(later->code(), Code::kConnectionReset) << later->to_string();
  EXPECT_NE(later->message().find("alltoall #2 on communicator 7: rank 2 left"), std::string::npos)
      << later->to_string();
}

TEST_F(MpiServiceTest, ARanksWaitingCollectivesAreBounded) {
  AgentConfig config = testing::test_config();
  config.mpi_max_pending = 2;
  stop_agent();
  start_agent(config);
  std::vector<std::optional<Status>> answers(3);  // outlives the connection, whose close fails the waiting two
  auto rs = ranks(1);
  for (uint64_t k = 0; k < 3; ++k)  // a communicator of 2 whose other rank never comes
    submit(*rs[0].conn, post(Coll::kAlltoall, k, 2, 0, 0), answers[k]);
  ASSERT_TRUE(answered(*rs[0].conn, std::span(answers).last(1)));
  EXPECT_EQ(answers[2]->code(), Code::kTooBig);
  EXPECT_NE(answers[2]->message().find("already has 2 collectives waiting for their other ranks (limit 2, agent option "
                                       "--mpi-max-pending)"),
            std::string::npos)
      << answers[2]->to_string();
  EXPECT_FALSE(answers[0].has_value());
}

// Two agents, as on two nodes: ranks 0 and 2 on the fixture's agent, rank 1 on another. Each
// agent shares its ranks' blocks with the other as a client of the job's session there, over TCP
// even on one host (network-only addresses).
class MpiSpanningTest : public MpiServiceTest {
 protected:
  static constexpr const char* kToken = "5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed";
  void SetUp() override { restart_both(testing::test_config()); }
  void TearDown() override {
    other_.stop();
    MpiServiceTest::TearDown();
  }

  std::vector<Rank> spanning_ranks() {
    std::vector<Rank> out(agent_of_.size());
    ChannelConfig config;
    config.session = kToken;
    for (size_t i = 0; i < out.size(); ++i) {
      auto c = Connection::connect(agent_of_[i] ? other_->address() : agent_->address(), config);
      EXPECT_TRUE(c.ok()) << c.status().to_string();
      if (c.ok()) out[i].conn = std::move(c).value();
    }
    return out;
  }
  void restart_both(const AgentConfig& config) {
    other_.stop();
    stop_agent();
    start_agent(config);
    other_.start(config);
  }
  Post spanning(Coll coll, uint64_t seq, uint32_t rank, uint64_t bytes) {
    Post p = post(coll, seq, static_cast<uint32_t>(agent_of_.size()), rank, bytes);
    p.token = kToken;
    p.agents = {agent_->address(), other_->address()};
    p.agent_of = agent_of_;
    return p;
  }
  // An alltoall #seq of random `block`s (seeded from `seed`), posted in `order`, and its every block checked.
  void alltoall_across(std::vector<Rank>& rs, uint64_t seq, uint64_t block, uint64_t seed,
                       std::vector<size_t> order = {}) {
    const auto n = static_cast<uint32_t>(rs.size());
    std::vector<Post> posts;
    for (uint32_t i = 0; i < n; ++i) {
      rs[i].send = random_bytes(n * block, seed + i);
      rs[i].recv.assign(n * block, 0);
      posts.push_back(spanning(Coll::kAlltoall, seq, i, block));
    }
    post_all(rs, posts, std::move(order));
    for (uint32_t j = 0; j < n; ++j) {
      ASSERT_TRUE(rs[j].answer->ok()) << rs[j].answer->to_string();
      for (uint32_t i = 0; i < n; ++i)
        EXPECT_EQ(0, std::memcmp(rs[j].recv.data() + i * block, rs[i].send.data() + j * block, block))
            << "alltoall block from rank " << i << " at rank " << j;
    }
  }

  std::vector<uint32_t> agent_of_ = {0, 1, 0};
  testing::PeerAgent other_;
};

TEST_F(MpiSpanningTest, EveryCollectiveAcrossTwoAgents) {
  constexpr uint32_t n = 3;
  constexpr uint64_t block = 1000;
  auto rs = spanning_ranks();
  uint64_t seq = 0;
  alltoall_across(rs, seq, block, 100, {1, 2, 0});
  {  // alltoall in place: every input staged before any result is written (others unmapped here)
    std::vector<Post> posts;
    std::vector<std::vector<uint8_t>> inputs;
    ++seq;
    for (uint32_t i = 0; i < n; ++i) {
      inputs.push_back(random_bytes(n * block, 150 + i));
      rs[i].recv = inputs[i];
      posts.push_back(spanning(Coll::kAlltoall, seq, i, block));
      posts.back().in_place = true;
    }
    post_all(rs, posts);
    for (uint32_t j = 0; j < n; ++j) {
      ASSERT_TRUE(rs[j].answer->ok()) << rs[j].answer->to_string();
      for (uint32_t i = 0; i < n; ++i)
        EXPECT_EQ(0, std::memcmp(rs[j].recv.data() + i * block, inputs[i].data() + j * block, block))
            << "in-place alltoall block from rank " << i << " at rank " << j;
    }
  }
  auto alltoallv = [&](uint64_t s, uint32_t i) {
    Post p = spanning(Coll::kAlltoallv, s, i, 0);
    const auto [sent, got] = alltoallv_counts(p, 3);
    rs[i].send = random_bytes(sent, 200 + i);
    rs[i].recv.assign(got, 0);
    return p;
  };
  {
    std::vector<Post> posts;
    ++seq;
    for (uint32_t i = 0; i < n; ++i) posts.push_back(alltoallv(seq, i));
    post_all(rs, posts);
    for (uint32_t j = 0; j < n; ++j) {
      ASSERT_TRUE(rs[j].answer->ok()) << rs[j].answer->to_string();
      for (uint32_t i = 0; i < n; ++i)
        EXPECT_EQ(0, std::memcmp(rs[j].recv.data() + posts[j].recv_displs[i],
                                 rs[i].send.data() + posts[i].send_displs[j], posts[i].send_counts[j]))
            << "alltoallv block from rank " << i << " at rank " << j;
    }
  }
  {  // allgather
    std::vector<Post> posts;
    ++seq;
    for (uint32_t i = 0; i < n; ++i) {
      rs[i].send = random_bytes(block, 300 + i);
      rs[i].recv.assign(n * block, 0);
      posts.push_back(spanning(Coll::kAllgather, seq, i, block));
    }
    post_all(rs, posts);
    for (uint32_t j = 0; j < n; ++j) {
      ASSERT_TRUE(rs[j].answer->ok()) << rs[j].answer->to_string();
      for (uint32_t i = 0; i < n; ++i)
        EXPECT_EQ(0, std::memcmp(rs[j].recv.data() + i * block, rs[i].send.data(), block));
    }
  }
  for (uint32_t root : {1u, 2u}) {  // bcast from another agent's rank, then from this one's
    std::vector<Post> posts;
    const auto data = random_bytes(block, 400 + root);
    ++seq;
    for (uint32_t i = 0; i < n; ++i) {
      rs[i].send.clear();
      rs[i].recv = i == root ? data : std::vector<uint8_t>(block, 0);
      posts.push_back(spanning(Coll::kBcast, seq, i, block));
      posts.back().root = root;
    }
    post_all(rs, posts);
    for (auto& r : rs) {
      ASSERT_TRUE(r.answer->ok()) << r.answer->to_string();
      EXPECT_EQ(r.recv, data) << "bcast from rank " << root;
    }
  }
  {  // allreduce of doubles: rank 0's input, then rank 1's, then rank 2's, whichever agent has them
    constexpr size_t count = 100;
    std::vector<Post> posts;
    std::vector<std::vector<double>> in(n, std::vector<double>(count));
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> value(-1e6, 1e6);
    std::vector<double> want(count);
    ++seq;
    for (uint32_t i = 0; i < n; ++i) {
      for (size_t k = 0; k < count; ++k) in[i][k] = value(rng), want[k] = i ? want[k] + in[i][k] : in[i][k];
      rs[i].send.assign(reinterpret_cast<uint8_t*>(in[i].data()), reinterpret_cast<uint8_t*>(in[i].data() + count));
      rs[i].recv.assign(count * sizeof(double), 0);
      Post p = spanning(Coll::kAllreduce, seq, i, count * sizeof(double));
      p.elem = Elem::kF64, p.reduce = Reduce::kSum;
      posts.push_back(p);
    }
    post_all(rs, posts);
    for (auto& r : rs) {
      ASSERT_TRUE(r.answer->ok()) << r.answer->to_string();
      EXPECT_EQ(0, std::memcmp(r.recv.data(), want.data(), count * sizeof(double)));
    }
  }
  {  // rank 2 expects a byte more from rank 1 (another agent's) than rank 1 sends
    std::vector<Post> posts;
    ++seq;
    for (uint32_t i = 0; i < n; ++i) posts.push_back(alltoallv(seq, i));
    posts[2].recv_counts[1] += 1;
    rs[2].recv.push_back(0);
    post_all(rs, posts);
    for (uint32_t i : {0u, 2u}) {  // rank 1's agent may have delivered before it heard
      ASSERT_FALSE(rs[i].answer->ok());
      EXPECT_NE(rs[i].answer->message().find("rank 1 sends 13 B to rank 2, which expects 14 B"), std::string::npos)
          << rs[i].answer->to_string();
    }
  }
}

// Agents of other hosts reach each other through TLS, each with its own certificate (made for both
// sides), and another agent's link joins the session of its job's ranks. One host stands in for
// two: the agents listen on its non-loopback address, where an agent with keys takes another
// host's clients through TLS only, and their ranks dial it too (plaintext: the kernel says they
// are this host's). With keys of one CA a collective spans them, with no UCX_TLS telling the
// sessions to take TCP (listening beyond loopback does); a link with an agent's certificate
// lands in the ranks' session, one with a tenant's certificate and the same token in a session of
// its own. With another CA's keys the link is refused, and each rank's collective fails saying so.
TEST_F(MpiSpanningTest, AgentsWithKeysReachEachOtherThroughTlsOnly) {
  const std::vector<std::string> here = net::ipv4_addresses();
  const auto wide = std::find_if(here.begin(), here.end(), [](const std::string& a) { return !net::is_loopback(a); });
  if (wide == here.end()) GTEST_SKIP() << "no IPv4 address here but loopback's, where agents link without TLS";
  const std::filesystem::path keys =
      std::filesystem::temp_directory_path() / ("outboard_mpi_keys_" + std::to_string(::getpid()));
  std::filesystem::remove_all(keys);
  std::filesystem::create_directories(keys);
  ASSERT_TRUE(init_keys((keys / "a").string(), "agent a").ok());  // lists this host's addresses
  ASSERT_TRUE(init_keys((keys / "b").string(), "agent b").ok());
  auto with_keys = [&](const char* deployment) {
    AgentConfig config = testing::test_config();
    config.listen = *wide + ":0";
    const std::string d = (keys / deployment).string();
    config.channel.secure = {.cert = d + "/agent.pem", .key = d + "/agent.key", .ca = d + "/ca.pem"};
    return config;
  };
  ::unsetenv("UCX_TLS");  // the fixture's agents' sessions take TCP by it; other_ restores it
  restart_both(with_keys("a"));
  auto rs = spanning_ranks();
  alltoall_across(rs, 0, 1000, 100);
  auto session_pid = [](Connection& c) {
    auto stats = c.request("stats", {}, Deadline::after_ms(kWaitMs));
    if (!stats.ok()) return std::string(stats.status().to_string());
    const std::string text(stats->span().begin(), stats->span().end());
    const size_t at = text.find("\"pid\":");
    return at == std::string::npos ? text : text.substr(at, text.find_first_of(",}", at) - at);
  };
  auto link_as = [&](const char* who) {
    ChannelConfig config;
    config.session = kToken;
    config.network_only = true;  // as the mpi service dials another agent
    const std::string d = (keys / "a").string() + "/" + who;
    config.secure = {.cert = d + ".pem", .key = d + ".key", .ca = (keys / "a" / "ca.pem").string()};
    auto c = Connection::connect(agent_->address(), config);
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    return c.ok() ? session_pid(**c) : c.status().to_string();
  };
  const std::string ranks_session = session_pid(*rs[0].conn);
  EXPECT_EQ(link_as("agent"), ranks_session);
  EXPECT_NE(link_as("client"), ranks_session);  // a tenant with the job's token gets no further
  rs.clear();
  other_.stop();
  stop_agent();
  start_agent(with_keys("a"));
  other_.start(with_keys("b"));  // another deployment's agent
  rs = spanning_ranks();
  std::vector<Post> posts;
  for (uint32_t i = 0; i < rs.size(); ++i) {
    rs[i].send = random_bytes(rs.size() * 1000, i);
    rs[i].recv.assign(rs.size() * 1000, 0);
    posts.push_back(spanning(Coll::kAlltoall, 0, i, 1000));
  }
  post_all(rs, posts);
  for (const Rank& r : rs) {
    ASSERT_FALSE(r.answer->ok());
    EXPECT_NE(r.answer->message().find("certificate"), std::string::npos) << r.answer->to_string();
  }
  std::filesystem::remove_all(keys);
}

// Each agent's share here is 2 blocks of 3 MiB, over the agents' 5 MiB message limit: it goes in
// pieces (the first with the header, then a SharePiece), which the other agent puts together.
TEST_F(MpiSpanningTest, SharesLargerThanAMessageGoInPieces) {
  constexpr uint64_t block = 3ull << 20;
  AgentConfig config = testing::test_config();
  config.channel.max_msg_size = services::mpi_wire::kMaxSharePiece + (1 << 20);
  static_assert(2 * block > services::mpi_wire::kMaxSharePiece + (1 << 20));
  restart_both(config);
  auto rs = spanning_ranks();
  alltoall_across(rs, 0, block, 900);
}

// Another agent's pieces that do not follow a share's first piece, in order and within it, are
// refused naming what was due; a first piece whose whole share the session cannot hold fails
// before anything of it is allocated.
TEST_F(MpiSpanningTest, PiecesOutOfPlaceAndSharesOverTheMemoryAreRefused) {
  using namespace services::mpi_wire;
  auto c = connect();
  auto ask = [&](const std::vector<uint8_t>& message) {
    std::optional<Status> answer;
    EXPECT_TRUE(c->submit("mpi", Buffer::copy_of(message), Deadline::after_ms(kWaitMs),
                          [&answer](Result<Buffer> a) { answer = a.status(); }, Connection::Credit::kWait)
                    .ok());
    EXPECT_TRUE(answered(*c, {&answer, 1}));
    return answer.value_or(Status{Code::kTimedOut, "no answer"});
  };
  const std::vector<uint8_t> data(100, 7);
  const Status stray = ask(encode(SharePiece{7, 5, 1, 0, data}));
  EXPECT_NE(stray.message().find("a piece of collective #5 on communicator 7 from agent 1, which sent no share of it "
                                 "in pieces"),
            std::string::npos)
      << stray.to_string();

  Share first;
  first.comm = 7, first.seq = 6, first.size = 3, first.from = 1, first.coll = Coll::kAlltoall, first.bytes = 300;
  first.first_piece = true, first.lengths = {300, 300}, first.data = data;
  ASSERT_TRUE(ask(encode(first)).ok());
  const Status skipped = ask(encode(SharePiece{7, 6, 1, 200, data}));
  EXPECT_NE(skipped.message().find("agent 1's piece of 100 B at 200, where its share of 600 B had 100 in"),
            std::string::npos)
      << skipped.to_string();
  // The collective failed here: its later pieces get that failure.
  EXPECT_NE(ask(encode(SharePiece{7, 6, 1, 100, data})).message().find("had 100 in"), std::string::npos);

  first.seq = 7, first.lengths = {1ull << 50, 1};
  const Status huge = ask(encode(first));
  EXPECT_FALSE(huge.ok());
  EXPECT_NE(huge.message().find("agent 1's share of " + std::to_string((1ull << 50) + 1) + " B"), std::string::npos)
      << huge.to_string();
}

// Inputs in memory the agents map are read in place: nothing is staged (4 KiB of agent memory each),
// except an in-place alltoall, which fails naming the limit.
TEST_F(MpiSpanningTest, MappedInputsAreSharedAndDeliveredWithoutStaging) {
  if (agent_in_process()) GTEST_SKIP() << "an agent in this process maps no region of its own process";
  AgentConfig config = testing::test_config();
  config.max_memory = 4096;
  restart_both(config);
  auto rs = spanning_ranks();
  mapped_without_staging(rs, [this](Coll coll, uint64_t seq, uint32_t, uint32_t rank, uint64_t bytes) {
    return spanning(coll, seq, rank, bytes);
  });
}

// Connections between agents outlive a collective: each closes once the agent that opened it has
// no rank left and every share it sent was answered. Counted by each agent's session (its `stats`
// service's clients, less the connection that asks).
TEST_F(MpiSpanningTest, AnAgentClosesItsConnectionsToOthersWhenItsRanksAllLeft) {
  constexpr uint32_t n = 3;
  constexpr uint64_t block = 64;
  ChannelConfig config;
  config.session = kToken;
  auto here = Connection::connect(agent_->address(), config), there = Connection::connect(other_->address(), config);
  ASSERT_TRUE(here.ok() && there.ok());
  auto others = [](Connection& c) {
    auto stats = c.request("stats", {}, Deadline::after_ms(kWaitMs));
    if (!stats.ok()) return -1;
    const std::string text(stats->span().begin(), stats->span().end());
    const size_t at = text.find("\"clients\":");
    return at == std::string::npos ? -1 : std::stoi(text.substr(at + 10)) - 1;
  };
  auto settles_at = [&](Connection& c, int want) {
    const Deadline deadline = Deadline::after_ms(kWaitMs);
    while (others(c) != want && !deadline.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return others(c);
  };
  auto rs = spanning_ranks();
  std::vector<Post> posts;
  for (uint32_t i = 0; i < n; ++i) {
    rs[i].send = random_bytes(n * block, 500 + i);
    rs[i].recv.assign(n * block, 0);
    posts.push_back(spanning(Coll::kAlltoall, 0, i, block));
  }
  post_all(rs, posts);
  for (auto& r : rs) ASSERT_TRUE(r.answer->ok()) << r.answer->to_string();
  // Ranks 0 and 2 here, rank 1 there, and each agent a client of the other.
  EXPECT_EQ(settles_at(**here, 3), 3);
  EXPECT_EQ(settles_at(**there, 2), 2);
  rs[0].conn->close(), rs[2].conn->close();
  EXPECT_EQ(settles_at(**there, 1), 1) << "this agent's ranks left: its connection to the other closes";
  EXPECT_EQ(settles_at(**here, 1), 1) << "the other agent still has rank 1: its connection stays";
  rs[1].conn->close();
  EXPECT_EQ(settles_at(**here, 0), 0);
  EXPECT_EQ(settles_at(**there, 0), 0);
}

// The other agent ends while this one's ranks wait for its share: they fail, naming it.
TEST_F(MpiSpanningTest, AnAgentThatEndsFailsTheOtherAgentsRanksNamingIt) {
  auto rs = spanning_ranks();
  std::vector<std::optional<Status>> answers(2);
  for (uint32_t i : {0u, 2u}) {
    rs[i].send = random_bytes(3 * 10, i);
    rs[i].recv.assign(3 * 10, 0);
    Post p = spanning(Coll::kAlltoall, 0, i, 10);
    regions(rs[i], p);
    submit(*rs[i].conn, p, answers[i / 2]);
  }
  const std::string address = other_->address();
  // Its rank never posts; the agent stops with this agent's share there or on its way.
  rs[1].conn.reset();
  other_.stop();
  ASSERT_TRUE(answered(*rs[0].conn, answers));
  for (auto& a : answers) {
    ASSERT_FALSE(a->ok());
    EXPECT_NE(a->message().find("agent " + address), std::string::npos) << a->to_string();
  }
}

TEST_F(MpiSpanningTest, ARankThatCannotTakePartFailsTheOtherAgentsRanksToo) {
  auto rs = spanning_ranks();
  std::vector<Post> posts;
  for (uint32_t i = 0; i < 3; ++i) {
    if (i != 1) rs[i].send = random_bytes(3 * 10, i), rs[i].recv.assign(3 * 10, 0);
    posts.push_back(spanning(Coll::kAlltoall, 0, i, 10));
  }
  posts[1].failure = "no memory";  // rank 1, the other agent's
  post_all(rs, posts);
  for (auto& r : rs) {
    ASSERT_FALSE(r.answer->ok());
    EXPECT_NE(r.answer->message().find("alltoall #0 on communicator 7: rank 1 could not take part: no memory"),
              std::string::npos)
        << r.answer->to_string();
  }
  for (auto& r : rs) r.answer.reset();
  alltoall_across(rs, 1, 10, 5);  // the communicator goes on
}

TEST(MpiWireTest, DecodeChecksEveryField) {
  using namespace services::mpi_wire;
  Post p;
  p.comm = 1, p.size = 2, p.rank = 1, p.coll = Coll::kAllreduce, p.elem = Elem::kF64, p.reduce = Reduce::kSum;
  p.bytes = 16, p.send_region = {1, 2, 3}, p.recv_region = {4}, p.keep = true;
  auto round = decode(encode(p));
  ASSERT_TRUE(round.ok()) << round.status().to_string();
  EXPECT_EQ(round.value().bytes, 16u);
  EXPECT_TRUE(round.value().keep);
  EXPECT_FALSE(round.value().in_place);
  EXPECT_EQ(round.value().send_region, p.send_region);
  auto fails = [](Post q, const std::string& what) {
    auto r = decode(encode(q));
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().to_string();
  };
  Post q = p;
  q.rank = 2;
  fails(q, "rank 2 of 2 ranks");
  q = p, q.size = kMaxRanks + 1, q.rank = 0;
  fails(q, "communicator of 1025 ranks (1 to 1024)");
  q = p, q.bytes = 12;
  fails(q, "allreduce of 12 B is not a whole number of 8 B elements");
  q = p, q.reduce = Reduce::kNone;
  fails(q, "only allreduce, and it always, names both");
  q = p, q.send_region.clear();
  fails(q, "allreduce without its send region");
  q = p, q.coll = Coll::kBcast, q.elem = Elem::kBytes, q.reduce = Reduce::kNone, q.root = 5;
  fails(q, "bcast from root 5 of 2 ranks");
  q = p, q.send_region.assign(kMaxDescriptorBytes + 1, 0);
  fails(q, "send region descriptor of 4097 B exceeds 4096 B");
  auto bytes = encode(p);
  bytes.push_back(0);
  EXPECT_NE(decode(bytes).status().message().find("1 B after the request"), std::string::npos);
  bytes = encode(p);
  bytes[2 + 8 + 8 + 4 + 4 + 3] = 64;  // flags: none of kInPlace, kKeep, kSpans, kOwnBlock, kFailed, kFreed
  EXPECT_NE(decode(bytes).status().message().find("unknown flags 64"), std::string::npos);
  bytes[0] = 9;
  EXPECT_NE(decode(bytes).status().message().find("wire version 9"), std::string::npos);
  bytes.resize(10);
  bytes[0] = kVersion;
  EXPECT_NE(decode(bytes).status().message().find("truncated collective header"), std::string::npos);
  q = p, q.coll = Coll::kAlltoallv, q.elem = Elem::kBytes, q.reduce = Reduce::kNone;
  q.send_counts = {1, 1}, q.send_displs = {0, 1}, q.recv_counts = {1, 1}, q.recv_displs = {0};
  fails(q, "alltoallv needs four arrays of 2 values");
  // Spanning several agents.
  Post span = p;
  span.token = std::string(kTokenHexDigits, 'a'), span.agents = {"127.0.0.1:1", "127.0.0.1:2"}, span.agent_of = {1, 0};
  auto spans = decode(encode(span));
  ASSERT_TRUE(spans.ok()) << spans.status().to_string();
  EXPECT_EQ(spans->agents, span.agents);
  EXPECT_EQ(spans->agent_of, span.agent_of);
  EXPECT_EQ(spans->token, span.token);
  q = span, q.token[3] = 'x';
  fails(q, "session token is not 64 hex digits");
  q = span, q.agent_of = {0, 2};
  fails(q, "agent_of names agent 2 of 2");
  q = span, q.agents.push_back("127.0.0.1:3");
  fails(q, "3 agents for a communicator of 2 ranks (2 to one per rank)");
  q = span, q.agents[1].assign(kMaxAddressBytes + 1, 'h');
  fails(q, "agent 1's address: truncated, empty or over 256 B");
  q = span, q.agent_of = {0};
  fails(q, "agent_of needs 2 values");
  // Regions the rank freed, named before its spans.
  q = span, q.freed = {{7, 7}, {8}};
  auto freed = decode(encode(q));
  ASSERT_TRUE(freed.ok()) << freed.status().to_string();
  EXPECT_EQ(freed->freed, q.freed);
  EXPECT_EQ(freed->agents, span.agents);
  EXPECT_TRUE(decode(encode(p))->freed.empty());
  q = p, q.freed.assign(kMaxFreed + 1, {1});
  fails(q, "a post that names 17 freed regions (1 to 16)");
  q = p, q.freed = {{1}, {}};
  fails(q, "a freed region without its descriptor");
  q = p, q.freed = {std::vector<uint8_t>(kMaxDescriptorBytes + 1, 0)};
  fails(q, "freed region descriptor of 4097 B exceeds 4096 B");
  q = p, q.own_block = true;  // an allreduce has no block of its own
  fails(q, "allreduce with its own block copied (only alltoall(v) and allgather, not in place)");
  q = p, q.coll = Coll::kAllgather, q.elem = Elem::kBytes, q.reduce = Reduce::kNone, q.own_block = true;
  ASSERT_TRUE(decode(encode(q)).ok());
  EXPECT_TRUE(decode(encode(q))->own_block);
  q.in_place = true;
  fails(q, "allgather in place with its own block copied");
  // A rank that cannot take part says why, and needs no region.
  q = span, q.send_region.clear(), q.recv_region.clear(), q.failure = "no memory";
  auto failed = decode(encode(q));
  ASSERT_TRUE(failed.ok()) << failed.status().to_string();
  EXPECT_EQ(failed->failure, "no memory");
  EXPECT_EQ(failed->agents, span.agents);
  q.failure.assign(kMaxFailureBytes + 7, 'x');
  EXPECT_EQ(decode(encode(q))->failure.size(), kMaxFailureBytes);  // what encode() keeps
  bytes = encode(q);
  bytes.resize(bytes.size() - 1);
  EXPECT_NE(decode(bytes).status().message().find("truncated reason for not taking part"), std::string::npos);
  bytes = encode(q);
  bytes[bytes.size() - kMaxFailureBytes - 4] = 1;  // its length's low byte: 1025 (0x401), and one more byte
  bytes.push_back('x');
  EXPECT_NE(decode(bytes).status().message().find("a reason for not taking part of 1025 B (1 to 1024)"),
            std::string::npos)
      << decode(bytes).status().to_string();
}

TEST(MpiWireTest, DecodeShareChecksItsBlocks) {
  using namespace services::mpi_wire;
  const std::vector<uint8_t> blocks = {1, 2, 3, 4, 5};
  Share s;
  s.comm = 3, s.seq = 9, s.size = 4, s.from = 2, s.coll = Coll::kAlltoall, s.bytes = 2;
  s.lengths = {2, 3}, s.data = blocks;
  auto bytes = encode(s);
  ASSERT_EQ(kind_of(bytes).value(), Kind::kShare);
  auto round = decode_share(bytes);
  ASSERT_TRUE(round.ok()) << round.status().to_string();
  EXPECT_EQ(round->lengths, s.lengths);
  EXPECT_TRUE(std::equal(round->data.begin(), round->data.end(), blocks.begin(), blocks.end()));
  EXPECT_NE(decode(bytes).status().message().find("a share where a post was expected"), std::string::npos);
  auto fails = [](const std::vector<uint8_t>& b, const std::string& what) {
    auto r = decode_share(b);
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().to_string();
  };
  auto more = bytes;
  more.push_back(6);
  fails(more, "share's blocks add up to 5 B, it carries 6");
  fails({bytes.begin(), bytes.end() - 1}, "share's blocks add up to more than");
  Share bad = s;
  bad.from = 4;
  fails(encode(bad), "share from agent 4 for a communicator of 4 ranks");
  bad = s, bad.lengths.assign(17, 0), bad.data = {};
  fails(encode(bad), "share of 17 blocks for 4 ranks");
  bad = s, bad.coll = Coll::kAllreduce;
  fails(encode(bad), "only allreduce, and it always, names both");
  fails({kVersion, kKinds}, "unknown message kind " + std::to_string(kKinds));
}

TEST(MpiWireTest, ASharesFirstPieceAndItsPiecesAreChecked) {
  using namespace services::mpi_wire;
  const std::vector<uint8_t> piece(10, 1);
  Share s;
  s.comm = 3, s.seq = 9, s.size = 4, s.from = 2, s.coll = Coll::kAlltoall, s.bytes = 20;
  s.first_piece = true, s.lengths = {20, 20}, s.data = piece;
  auto round = decode_share(encode(s));
  ASSERT_TRUE(round.ok()) << round.status().to_string();
  EXPECT_TRUE(round->first_piece);
  EXPECT_EQ(round->data.size(), 10u);
  auto fails = [](const auto& decoded, const std::string& what) {
    ASSERT_FALSE(decoded.ok()) << what;
    EXPECT_NE(decoded.status().message().find(what), std::string::npos) << decoded.status().to_string();
  };
  Share bad = s;
  bad.data = {};
  fails(decode_share(encode(bad)), "share's first piece of 0 B (1 to 4194304, less than its blocks' 40)");
  bad = s, bad.lengths = {5, 5};
  fails(decode_share(encode(bad)), "share's first piece of 10 B (1 to 4194304, less than its blocks' 10)");
  bad = s, bad.lengths = {UINT64_MAX, 2};
  fails(decode_share(encode(bad)), "share's blocks add up to more than 2^64 B");
  auto flags = encode(s);
  flags[2 + 8 + 8 + 4 + 4 + 3 + 4 + 8] = 2;
  fails(decode_share(flags), "unknown share flags 2");

  const SharePiece p{3, 9, 2, 10, piece};
  auto bytes = encode(p);
  ASSERT_EQ(kind_of(bytes).value(), Kind::kSharePiece);
  auto back = decode_share_piece(bytes);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->comm, 3u);
  EXPECT_EQ(back->seq, 9u);
  EXPECT_EQ(back->from, 2u);
  EXPECT_EQ(back->offset, 10u);
  EXPECT_EQ(back->data.size(), 10u);
  fails(decode_share_piece(encode(SharePiece{3, 9, 2, 10, {}})), "share piece of 0 B at 10");
  fails(decode_share_piece(encode(SharePiece{3, 9, 2, UINT64_MAX - 2, piece})), "ending within 2^64");
  const std::vector<uint8_t> big(kMaxSharePiece + 1, 0);
  fails(decode_share_piece(encode(SharePiece{3, 9, 2, 0, big})), "share piece of 4194305 B");
  fails(decode_share_piece({bytes.begin(), bytes.begin() + 20}), "truncated share piece");
  fails(decode_share(bytes), "a share piece where a share was expected");
}

TEST(MpiWireTest, DecodeReachChecksItsRegion) {
  using namespace services::mpi_wire;
  const Reach r{0xfeed, {1, 2, 3}};
  auto bytes = encode(r);
  ASSERT_EQ(kind_of(bytes).value(), Kind::kReach);
  auto round = decode_reach(bytes);
  ASSERT_TRUE(round.ok()) << round.status().to_string();
  EXPECT_EQ(round->value, 0xfeedu);
  EXPECT_EQ(round->region, r.region);
  EXPECT_EQ(decode_share(bytes).status().message(), "mpi: a reach where a share was expected");
  auto more = bytes;
  more.push_back(0);
  EXPECT_EQ(decode_reach(more).status().message(), "mpi: 1 B after the reach");
  EXPECT_EQ(decode_reach(encode(Reach{1, {}})).status().message(), "mpi: reach without a region");
  EXPECT_EQ(decode_reach({bytes.begin(), bytes.begin() + 5}).status().message(), "mpi: truncated reach");
}

}  // namespace
}  // namespace outboard
