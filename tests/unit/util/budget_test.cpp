// The agent's session budget: a session's memory quota, its TLS identity's
// group quotas across sessions (memory, busy tokenize workers, outstanding
// requests, graph instances), the agent's limit, and what an ended session frees.
#include "util/budget.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace outboard {
namespace {

constexpr uint64_t kMiB = 1 << 20;

bool says(const Status& st, const std::string& text) { return st.message().find(text) != std::string::npos; }

TEST(SessionBudgetTest, EachLimitIsKeptAndNamed) {
  const SessionBudget::Quotas quotas{4 * kMiB, 6 * kMiB};
  auto agent = std::move(SessionBudget::create(10 * kMiB, quotas, 4)).value();
  // Two sessions of one tenant (group 0), one of another (group 1), one plaintext.
  auto a1 = std::move(SessionBudget::attach(::dup(agent->fd()), 10 * kMiB, quotas, 4, 0, 0)).value();
  auto a2 = std::move(SessionBudget::attach(::dup(agent->fd()), 10 * kMiB, quotas, 4, 1, 0)).value();
  auto b = std::move(SessionBudget::attach(::dup(agent->fd()), 10 * kMiB, quotas, 4, 2, 1)).value();
  auto plain = std::move(SessionBudget::attach(::dup(agent->fd()), 10 * kMiB, quotas, 4, 3)).value();

  ASSERT_TRUE(a1->reserve(4 * kMiB, "region").ok());
  Status session = a1->reserve(1, "region");
  EXPECT_EQ(session.code(), Code::kNoMemory);
  EXPECT_TRUE(says(session, "this session holds 4194304 B of its quota of 4194304 B (agent option --max-session-memory)"))
      << session.to_string();
  ASSERT_TRUE(a2->reserve(2 * kMiB, "region").ok());
  Status group = a2->reserve(1, "region");
  EXPECT_TRUE(says(group, "this client's sessions hold 6291456 B of its quota of 6291456 B "
                          "(agent option --max-client-memory)"))
      << group.to_string();
  ASSERT_TRUE(b->reserve(4 * kMiB, "region").ok());  // another tenant: its own group
  EXPECT_EQ(agent->used(), 10 * kMiB);
  Status limit = plain->reserve(1, "region");
  EXPECT_TRUE(says(limit, "the agent holds 10485760 B of its 10485760 B for clients (agent option --max-memory)"))
      << limit.to_string();

  // A refused reserve took nothing; a release gives back to the session, its group and the agent.
  a2->release(kMiB);
  EXPECT_EQ(agent->used(), 9 * kMiB);
  EXPECT_TRUE(a2->reserve(kMiB, "region").ok());
  // An ended session's share goes back to its group and the agent.
  agent->release_slot(0, 0);
  EXPECT_EQ(agent->used(), 6 * kMiB);
  EXPECT_TRUE(a2->reserve(2 * kMiB, "region").ok());  // within its own quota, and the group's again
  EXPECT_TRUE(says(SessionBudget::attach(::dup(agent->fd()), 10 * kMiB, quotas, 4, 0, 4).status(), "group 4 of 4"));
}

// A worker of `budget` waiting in begin_work() on a thread of its own.
struct Waiter {
  std::atomic<bool> stop{false}, began{false}, done{false};
  bool waited = false;
  std::thread thread;
  explicit Waiter(SessionBudget& budget)
      : thread([this, &budget] {
          began = budget.begin_work(stop, waited);
          done = true;
        }) {}
  ~Waiter() {
    stop = true;
    if (thread.joinable()) thread.join();
  }
  // Still waiting a while after it started: nothing let it through.
  [[nodiscard]] bool held_back() const {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return !done;
  }
  void join() { thread.join(); }
};

TEST(SessionBudgetTest, ATenantsSessionsShareItsTokenizeWorkersAndAnEndedSessionGivesItsBack) {
  const SessionBudget::Quotas quotas{kMiB, kMiB, 1};
  auto agent = std::move(SessionBudget::create(kMiB, quotas, 4)).value();
  auto a1 = std::move(SessionBudget::attach(::dup(agent->fd()), kMiB, quotas, 4, 0, 0)).value();
  auto a2 = std::move(SessionBudget::attach(::dup(agent->fd()), kMiB, quotas, 4, 1, 0)).value();
  auto b = std::move(SessionBudget::attach(::dup(agent->fd()), kMiB, quotas, 4, 2, 1)).value();
  auto plain = std::move(SessionBudget::attach(::dup(agent->fd()), kMiB, quotas, 4, 3)).value();
  const std::atomic<bool> go{false};
  bool waited = true;

  ASSERT_TRUE(a1->begin_work(go, waited));
  EXPECT_FALSE(waited);
  EXPECT_EQ(agent->busy_workers(0), 1u);
  // Another tenant, and a client of no tenant, are not held back by it.
  ASSERT_TRUE(b->begin_work(go, waited));
  EXPECT_FALSE(waited);
  ASSERT_TRUE(plain->begin_work(go, waited));
  EXPECT_FALSE(waited);
  {
    Waiter second(*a2);  // the tenant's other session waits for the worker
    EXPECT_TRUE(second.held_back());
    a1->end_work();
    second.join();
    EXPECT_TRUE(second.began);
    EXPECT_TRUE(second.waited);
    EXPECT_EQ(agent->busy_workers(0), 1u);
  }
  {
    Waiter first(*a1);
    EXPECT_TRUE(first.held_back());
    agent->release_slot(1, 0);  // a2's session ended holding the worker: it goes back, and wakes a1
    first.join();
    EXPECT_TRUE(first.began);
    EXPECT_EQ(agent->busy_workers(0), 1u);
  }
  {
    Waiter stopped(*a2);
    EXPECT_TRUE(stopped.held_back());
    stopped.stop = true;
    stopped.join();
    EXPECT_FALSE(stopped.began);
  }
  agent->release_slot(1, 0);  // the stopped wait took nothing to give back
  EXPECT_EQ(agent->busy_workers(0), 1u);
  a1->end_work();
  b->end_work();
  plain->end_work();
  EXPECT_EQ(agent->busy_workers(0), 0u);
  EXPECT_EQ(agent->busy_workers(1), 0u);
}

TEST(SessionBudgetTest, ATenantsSessionsShareItsRequestAndInstanceQuotasAndAnEndedSessionGivesItsBack) {
  using Held = SessionBudget::Held;
  const SessionBudget::Quotas quotas{kMiB, kMiB, 1, 3, 1};
  auto agent = std::move(SessionBudget::create(kMiB, quotas, 4)).value();
  auto a1 = std::move(SessionBudget::attach(::dup(agent->fd()), kMiB, quotas, 4, 0, 0)).value();
  auto a2 = std::move(SessionBudget::attach(::dup(agent->fd()), kMiB, quotas, 4, 1, 0)).value();
  auto b = std::move(SessionBudget::attach(::dup(agent->fd()), kMiB, quotas, 4, 2, 1)).value();
  auto plain = std::move(SessionBudget::attach(::dup(agent->fd()), kMiB, quotas, 4, 3)).value();

  ASSERT_TRUE(a1->hold(Held::kRequests).ok());
  ASSERT_TRUE(a1->hold(Held::kRequests).ok());
  ASSERT_TRUE(a2->hold(Held::kRequests).ok());
  Status requests = a2->hold(Held::kRequests);
  EXPECT_EQ(requests.code(), Code::kAgain);
  EXPECT_TRUE(says(requests, "this client's connections hold 3 outstanding requests of its quota of 3 "
                             "(agent option --max-client-requests)"))
      << requests.to_string();
  ASSERT_TRUE(a1->hold(Held::kGraphInstances).ok());
  Status instances = a2->hold(Held::kGraphInstances);
  EXPECT_TRUE(says(instances, "this client's connections hold 1 graph instances of its quota of 1 "
                              "(agent option --max-client-graph-instances)"))
      << instances.to_string();
  EXPECT_EQ(agent->held(Held::kRequests, 0), 3u);
  EXPECT_EQ(agent->held(Held::kGraphInstances, 0), 1u);
  // Another tenant has its own quota; a client of no tenant counts only per connection.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(b->hold(Held::kRequests).ok());
  EXPECT_FALSE(b->hold(Held::kRequests).ok());
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(plain->hold(Held::kRequests).ok());

  // A refused hold took nothing; a drop gives back.
  a2->drop(Held::kRequests);
  EXPECT_EQ(agent->held(Held::kRequests, 0), 2u);
  EXPECT_TRUE(a2->hold(Held::kRequests).ok());
  // An ended session's holdings go back to its group, no more than it held.
  agent->release_slot(0, 0);
  EXPECT_EQ(agent->held(Held::kRequests, 0), 1u);
  EXPECT_EQ(agent->held(Held::kGraphInstances, 0), 0u);
  EXPECT_TRUE(a2->hold(Held::kGraphInstances).ok());
  agent->release_slot(1, 0);
  EXPECT_EQ(agent->held(Held::kRequests, 0), 0u);
  EXPECT_EQ(agent->held(Held::kGraphInstances, 0), 0u);
  EXPECT_EQ(agent->held(Held::kRequests, 1), 3u);  // the other tenant's are its own
}

}  // namespace
}  // namespace outboard
