// Internal layout of a frozen graph and of an instance's run state.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "outboard/graph.h"

namespace outboard::graph::detail {

inline constexpr uint32_t kNoNode = UINT32_MAX;
inline constexpr uint32_t kNoCounter = UINT32_MAX;

/// What the hot path reads per node, packed together.
struct HotNode {
  uint32_t succ_begin = 0;
  uint32_t succ_end = 0;
  uint32_t preds = 0;
  /// Join counter index: only nodes with two or more predecessors have one
  /// (a node with one predecessor is ready when that one finishes).
  uint32_t counter = kNoCounter;
  NodeKind kind = NodeKind::kUser;
  const UserFn* body = nullptr;
  const Engine* engine = nullptr;
  const AsyncFn* async = nullptr;
};

struct BuildNode {
  std::string name;
  NodeKind kind = NodeKind::kUser;
  UserFn body;
  const Engine* engine = nullptr;
  AsyncFn async;
  bool host = false;
  std::shared_ptr<const Graph> sub;
  std::vector<NodeId> succ;
  std::vector<NodeId> pred;
  // Topological position, kept valid while edges are added (Pearce-Kelly),
  // so most edges are checked for cycles in O(1).
  uint32_t position = 0;
};

struct GraphLayout {
  [[nodiscard]] std::span<const NodeId> roots() const { return {succ.data() + edge_count, root_count}; }

  std::string name;
  bool frozen = false;
  std::vector<BuildNode> nodes;
  size_t edge_count = 0;

  // Fixed by freeze():
  std::vector<HotNode> hot;
  // Successors, CSR by HotNode::succ_begin/end, then the roots (nodes without
  // predecessors): one allocation, as a graph may be built per instance.
  std::vector<NodeId> succ;
  uint32_t root_count = 0;
  uint32_t counters = 0;  // join counters (HotNode::counter) an instance keeps
  uint32_t sinks = 0;
  bool has_subgraphs = false;
};

/// Per-run state of an instance: what a run changes, nothing of the graph.
struct InstanceRun {
  std::shared_ptr<const Graph> graph;
  const GraphLayout* layout = nullptr;
  Instance* self = nullptr;
  std::unique_ptr<std::atomic<uint32_t>[]> join;
  std::vector<void*> data;
  std::vector<std::unique_ptr<Instance>> subs;  // by node; empty without sub-graphs
  std::vector<NodeTiming> timing;
  bool timing_on = false;
  CompletionFn callback;

  std::atomic<uint32_t> sinks_left{0};
  std::atomic<bool> failed{false};
  std::atomic<bool> in_flight{false};
  Status error;  // written by the first failing node, read at completion
  Status result;
  // wait(): runs submitted and runs completed.
  std::atomic<uint32_t> submitted{0};
  std::atomic<uint32_t> completed{0};
  // A sub-instance reports to its parent's node instead of completing.
  InstanceRun* parent = nullptr;
  NodeId parent_node = kNoNode;
};

}  // namespace outboard::graph::detail
