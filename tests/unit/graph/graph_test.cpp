// Building graphs: errors name the nodes; freeze fixes the topology.
#include "outboard/graph.h"

#include <gtest/gtest.h>

#include <random>

namespace outboard::graph {
namespace {

UserFn noop() {
  return [](void*) { return Status(); };
}

TEST(Graph, CycleIsRefusedNamingBothNodes) {
  auto g = Graph::create("g");
  NodeId a = g->add_user("a", noop()).value(), b = g->add_user("b", noop()).value(),
         c = g->add_user("c", noop()).value();
  ASSERT_TRUE(g->add_dependency(a, b).ok());
  ASSERT_TRUE(g->add_dependency(b, c).ok());
  Status st = g->add_dependency(c, a);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_EQ(st.message(), "edge 'c' -> 'a' closes a cycle ('a' already reaches 'c')");
  EXPECT_EQ(g->edges(), 2u);  // the refused edge left nothing behind
  EXPECT_EQ(g->add_dependency(b, b).message(), "self-edge on node 'b'");
  EXPECT_EQ(g->add_dependency(a, b).message(), "edge 'a' -> 'b' already exists");
  EXPECT_EQ(g->add_dependency(a, 7).message(), "node 7 does not exist (graph 'g' has 3 nodes)");
}

TEST(Graph, BackwardEdgesKeepAnOrderAndStillFindCycles) {
  // Edges added against id order exercise the reordering; compare every
  // answer with a reachability check by brute force.
  std::mt19937 rng(7);
  for (int round = 0; round < 20; ++round) {
    auto g = Graph::create();
    const uint32_t n = 40;
    for (uint32_t i = 0; i < n; ++i) ASSERT_TRUE(g->add_user("n" + std::to_string(i), noop()).ok());
    std::vector<std::vector<bool>> reach(n, std::vector<bool>(n, false));
    for (uint32_t i = 0; i < n; ++i) reach[i][i] = true;
    for (int e = 0; e < 120; ++e) {
      NodeId a = rng() % n, b = rng() % n;
      if (a == b) continue;
      bool cycle = reach[b][a];
      Status st = g->add_dependency(a, b);
      if (!st.ok() && st.message().find("already exists") != std::string::npos) continue;
      ASSERT_EQ(st.ok(), !cycle) << a << " -> " << b << ": " << st.to_string();
      if (!st.ok()) continue;
      for (uint32_t x = 0; x < n; ++x)
        if (reach[x][a])
          for (uint32_t y = 0; y < n; ++y)
            if (reach[b][y]) reach[x][y] = true;
    }
  }
}

TEST(Graph, FrozenGraphRefusesChanges) {
  auto g = Graph::create("f");
  NodeId a = g->add_user("a", noop()).value(), b = g->add_user("b", noop()).value();
  ASSERT_TRUE(g->freeze().ok());
  EXPECT_EQ(g->add_user("c", noop()).status().code(), Code::kBadState);
  Status st = g->add_dependency(a, b);
  EXPECT_EQ(st.code(), Code::kBadState);
  EXPECT_EQ(st.message(), "add_dependency('a', 'b') on graph 'f' after freeze()");
  EXPECT_EQ(g->freeze().code(), Code::kBadState);
}

TEST(Graph, BadNodesAndEmptyGraphs) {
  auto g = Graph::create("e");
  EXPECT_EQ(g->freeze().message(), "graph 'e' has no nodes");
  EXPECT_EQ(g->add_user("x", UserFn()).status().message(), "user node 'x' has no body");
  EXPECT_EQ(g->add_user(std::string(kMaxNameBytes + 1, 'n'), noop()).status().message(),
            "node name of 257 B exceeds kMaxNameBytes 256");
  auto open = Graph::create("open");
  ASSERT_TRUE(open->add_user("a", noop()).ok());
  EXPECT_EQ(g->add_subgraph("s", open).status().code(), Code::kBadState);  // not frozen
  EXPECT_EQ(Instance::create(open).status().message(), "graph 'open' is not frozen");
}

TEST(Graph, InstanceStateIsCountersNotACopy) {
  // A chain has no join counters; a fan-in has one per join node.
  auto chain = Graph::create();
  NodeId prev = chain->add_user("0", noop()).value();
  for (int i = 1; i < 1000; ++i) {
    NodeId n = chain->add_user(std::to_string(i), noop()).value();
    ASSERT_TRUE(chain->add_dependency(prev, n).ok());
    prev = n;
  }
  ASSERT_TRUE(chain->freeze().ok());
  auto join = Graph::create();
  NodeId a = join->add_user("a", noop()).value(), b = join->add_user("b", noop()).value(),
         c = join->add_user("c", noop()).value();
  ASSERT_TRUE(join->add_dependency(a, c).ok());
  ASSERT_TRUE(join->add_dependency(b, c).ok());
  ASSERT_TRUE(join->freeze().ok());
  EXPECT_EQ(join->instance_state_bytes() - chain->instance_state_bytes(), sizeof(uint32_t));
  EXPECT_LT(chain->instance_state_bytes(), 512u);
}

}  // namespace
}  // namespace outboard::graph
