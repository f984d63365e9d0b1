// The agent's memory budget: a session's quota, its TLS identity's group
// quota across sessions, the agent's limit, and what an ended session frees.
#include "util/budget.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace outboard {
namespace {

constexpr uint64_t kMiB = 1 << 20;

bool says(const Status& st, const std::string& text) { return st.message().find(text) != std::string::npos; }

TEST(MemoryBudgetTest, EachLimitIsKeptAndNamed) {
  const MemoryBudget::Quotas quotas{4 * kMiB, 6 * kMiB};
  auto agent = std::move(MemoryBudget::create(10 * kMiB, quotas, 4)).value();
  // Two sessions of one tenant (group 0), one of another (group 1), one plaintext.
  auto a1 = std::move(MemoryBudget::attach(::dup(agent->fd()), 10 * kMiB, quotas, 4, 0, 0)).value();
  auto a2 = std::move(MemoryBudget::attach(::dup(agent->fd()), 10 * kMiB, quotas, 4, 1, 0)).value();
  auto b = std::move(MemoryBudget::attach(::dup(agent->fd()), 10 * kMiB, quotas, 4, 2, 1)).value();
  auto plain = std::move(MemoryBudget::attach(::dup(agent->fd()), 10 * kMiB, quotas, 4, 3)).value();

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
  EXPECT_TRUE(says(MemoryBudget::attach(::dup(agent->fd()), 10 * kMiB, quotas, 4, 0, 4).status(), "group 4 of 4"));
}

}  // namespace
}  // namespace outboard
