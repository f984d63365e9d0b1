// Graph building (cycle checks as edges arrive), freezing, and instances.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "graph/graph_impl.h"
#include "outboard/log.h"

OB_LOG_MODULE("graph");

namespace outboard::graph {

using detail::BuildNode;
using detail::GraphLayout;
using detail::InstanceRun;

namespace {

std::string quoted(const GraphLayout& g, NodeId n) { return "'" + g.nodes[n].name + "'"; }

Status check_node(const GraphLayout& g, NodeId n) {
  if (n < g.nodes.size()) return {};
  return {Code::kInvalidArgument, "node " + std::to_string(n) + " does not exist (graph '" + g.name + "' has " +
                                      std::to_string(g.nodes.size()) + " nodes)"};
}

// `what` names the refused change; it is built only when refusing.
template <class What>
Status check_open(const GraphLayout& g, What&& what) {
  if (!g.frozen) return {};
  return {Code::kBadState, what() + " on graph '" + g.name + "' after freeze()"};
}

// Pearce-Kelly: restores a topological order after adding from -> to where
// position(from) > position(to); false if `to` reaches `from` (a cycle).
bool reorder(GraphLayout& g, NodeId from, NodeId to) {
  const uint32_t lower = g.nodes[to].position, upper = g.nodes[from].position;
  std::vector<NodeId> forward, backward, stack{to};
  std::vector<uint8_t> seen(g.nodes.size(), 0);
  seen[to] = 1;
  while (!stack.empty()) {
    NodeId n = stack.back();
    stack.pop_back();
    if (n == from) return false;
    forward.push_back(n);
    for (NodeId s : g.nodes[n].succ)
      if (!seen[s] && g.nodes[s].position <= upper) seen[s] = 1, stack.push_back(s);
  }
  stack = {from};
  seen[from] = 2;
  while (!stack.empty()) {
    NodeId n = stack.back();
    stack.pop_back();
    backward.push_back(n);
    for (NodeId p : g.nodes[n].pred)
      if (seen[p] != 2 && g.nodes[p].position >= lower) seen[p] = 2, stack.push_back(p);
  }
  auto by_order = [&](NodeId a, NodeId b) { return g.nodes[a].position < g.nodes[b].position; };
  std::sort(forward.begin(), forward.end(), by_order);
  std::sort(backward.begin(), backward.end(), by_order);
  std::vector<uint32_t> slots;
  for (NodeId n : backward) slots.push_back(g.nodes[n].position);
  for (NodeId n : forward) slots.push_back(g.nodes[n].position);
  std::sort(slots.begin(), slots.end());
  size_t i = 0;
  for (NodeId n : backward) g.nodes[n].position = slots[i++];
  for (NodeId n : forward) g.nodes[n].position = slots[i++];
  return true;
}

}  // namespace

// Room for small graphs up front: building one graph per instance (DOCA's
// pattern, the benchmark's M1) otherwise reallocates as the first nodes arrive.
constexpr size_t kReservedNodes = 4;  // more would leave malloc's per-thread cache

Graph::Graph(std::string name) : layout_(std::make_unique<GraphLayout>()) {
  layout_->name = std::move(name);
  layout_->nodes.reserve(kReservedNodes);
}
Graph::~Graph() = default;

std::shared_ptr<Graph> Graph::create(std::string name) {
  struct Shared : Graph {  // make_shared needs a public constructor: one allocation for both
    explicit Shared(std::string n) : Graph(std::move(n)) {}
  };
  return std::make_shared<Shared>(std::move(name));
}

namespace {
Result<NodeId> add_node(GraphLayout& g, BuildNode node) {
  OB_RETURN_IF_ERROR(check_open(g, [&] { return "add node '" + node.name + "'"; }));
  if (node.name.size() > kMaxNameBytes)
    return Status(Code::kInvalidArgument, "node name of " + std::to_string(node.name.size()) +
                                              " B exceeds kMaxNameBytes " + std::to_string(kMaxNameBytes));
  if (g.nodes.size() >= kMaxNodes)
    return Status(Code::kTooBig, "graph '" + g.name + "' already has " + std::to_string(g.nodes.size()) +
                                     " nodes, the limit kMaxNodes");
  auto id = static_cast<NodeId>(g.nodes.size());
  node.position = id;
  g.nodes.push_back(std::move(node));
  return id;
}
}  // namespace

Result<NodeId> Graph::add_user(std::string name, UserFn body) {
  if (!body) return Status(Code::kInvalidArgument, "user node '" + name + "' has no body");
  return add_node(*layout_, {.name = std::move(name), .kind = NodeKind::kUser, .body = std::move(body)});
}

Result<NodeId> Graph::add_host(std::string name, UserFn body) {
  if (!body) return Status(Code::kInvalidArgument, "host node '" + name + "' has no body");
  return add_node(*layout_, {.name = std::move(name), .kind = NodeKind::kUser, .body = std::move(body), .host = true});
}

Result<NodeId> Graph::add_async(std::string name, AsyncFn start) {
  if (!start) return Status(Code::kInvalidArgument, "async node '" + name + "' has no body");
  return add_node(*layout_, {.name = std::move(name), .kind = NodeKind::kAsync, .async = std::move(start)});
}

Result<NodeId> Graph::add_engine(std::string name, const Engine& engine) {
  return add_node(*layout_, {.name = std::move(name), .kind = NodeKind::kEngine, .engine = &engine});
}

Result<NodeId> Graph::add_subgraph(std::string name, std::shared_ptr<const Graph> sub) {
  if (!sub || !sub->frozen())
    return Status(Code::kBadState, "sub-graph node '" + name + "' needs a frozen graph");
  if (sub.get() == this) return Status(Code::kInvalidArgument, "graph '" + layout_->name + "' cannot contain itself");
  return add_node(*layout_, {.name = std::move(name), .kind = NodeKind::kSubgraph, .sub = std::move(sub)});
}

Status Graph::add_dependency(NodeId from, NodeId to) {
  GraphLayout& g = *layout_;
  OB_RETURN_IF_ERROR(check_node(g, from));
  OB_RETURN_IF_ERROR(check_node(g, to));
  OB_RETURN_IF_ERROR(check_open(g, [&] { return "add_dependency(" + quoted(g, from) + ", " + quoted(g, to) + ")"; }));
  if (from == to) return {Code::kInvalidArgument, "self-edge on node " + quoted(g, from)};
  auto& succ = g.nodes[from].succ;
  if (std::find(succ.begin(), succ.end(), to) != succ.end())
    return {Code::kInvalidArgument, "edge " + quoted(g, from) + " -> " + quoted(g, to) + " already exists"};
  if (g.nodes[from].position > g.nodes[to].position && !reorder(g, from, to))
    return {Code::kInvalidArgument, "edge " + quoted(g, from) + " -> " + quoted(g, to) + " closes a cycle (" +
                                        quoted(g, to) + " already reaches " + quoted(g, from) + ")"};
  succ.push_back(to);
  g.nodes[to].pred.push_back(from);
  ++g.edge_count;
  return {};
}

Status Graph::freeze() {
  GraphLayout& g = *layout_;
  OB_RETURN_IF_ERROR(check_open(g, [] { return std::string("freeze()"); }));
  if (g.nodes.empty()) return {Code::kInvalidArgument, "graph '" + g.name + "' has no nodes"};
  g.hot.resize(g.nodes.size());
  size_t roots = 0;
  for (const BuildNode& b : g.nodes) roots += b.pred.empty();
  g.succ.reserve(g.edge_count + roots);
  for (NodeId n = 0; n < g.nodes.size(); ++n) {
    BuildNode& b = g.nodes[n];
    detail::HotNode& h = g.hot[n];
    h.kind = b.kind;
    h.body = b.kind == NodeKind::kUser ? &b.body : nullptr;
    h.engine = b.engine;
    h.async = b.kind == NodeKind::kAsync ? &b.async : nullptr;
    h.preds = static_cast<uint32_t>(b.pred.size());
    h.succ_begin = static_cast<uint32_t>(g.succ.size());
    g.succ.insert(g.succ.end(), b.succ.begin(), b.succ.end());
    h.succ_end = static_cast<uint32_t>(g.succ.size());
    if (h.preds >= 2) h.counter = g.counters++;
    if (b.succ.empty()) ++g.sinks;
    if (b.kind == NodeKind::kSubgraph) g.has_subgraphs = true;
  }
  for (NodeId n = 0; n < g.nodes.size(); ++n)
    if (g.nodes[n].pred.empty()) g.succ.push_back(n);
  g.root_count = static_cast<uint32_t>(roots);
  g.frozen = true;
  return {};
}

bool Graph::frozen() const { return layout_->frozen; }
const std::string& Graph::name() const { return layout_->name; }
size_t Graph::size() const { return layout_->nodes.size(); }
size_t Graph::edges() const { return layout_->edge_count; }
const std::string& Graph::node_name(NodeId node) const { return layout_->nodes.at(node).name; }
NodeKind Graph::node_kind(NodeId node) const { return layout_->nodes.at(node).kind; }
bool Graph::is_host(NodeId node) const { return layout_->nodes.at(node).host; }
const Engine* Graph::node_engine(NodeId node) const { return layout_->nodes.at(node).engine; }
const UserFn* Graph::node_body(NodeId node) const {
  const auto& n = layout_->nodes.at(node);
  return n.kind == NodeKind::kUser ? &n.body : nullptr;
}
std::span<const NodeId> Graph::successors(NodeId node) const { return layout_->nodes.at(node).succ; }

size_t Graph::instance_state_bytes() const {
  return sizeof(InstanceRun) + layout_->counters * sizeof(uint32_t);
}

// ---------------------------------------------------------------- Instance

Instance::Instance(std::unique_ptr<InstanceRun> run) : run_(std::move(run)) { run_->self = this; }

Instance::~Instance() {
  OB_CHECK(!run_ || !run_->in_flight.load(std::memory_order_acquire),
           "instance of graph '" + run_->layout->name + "' destroyed while in flight");
  // A completion may still be finishing its last touch (the run counter).
  while (run_ && run_->completed.load(std::memory_order_acquire) != run_->submitted.load(std::memory_order_acquire))
    std::this_thread::yield();
}

Result<std::unique_ptr<Instance>> Instance::create(std::shared_ptr<const Graph> graph) {
  if (!graph) return Status(Code::kInvalidArgument, "no graph");
  if (!graph->frozen()) return Status(Code::kBadState, "graph '" + graph->name() + "' is not frozen");
  auto run = std::make_unique<InstanceRun>();
  const GraphLayout& g = graph->layout();
  run->layout = &g;
  if (g.counters != 0) run->join.reset(new std::atomic<uint32_t>[g.counters]);
  for (const detail::HotNode& h : g.hot)
    if (h.counter != detail::kNoCounter) run->join[h.counter].store(h.preds, std::memory_order_relaxed);
  run->data.assign(g.nodes.size(), nullptr);
  if (g.has_subgraphs) {
    run->subs.resize(g.nodes.size());
    for (NodeId n = 0; n < g.nodes.size(); ++n) {
      if (g.nodes[n].kind != NodeKind::kSubgraph) continue;
      OB_ASSIGN_OR_RETURN(run->subs[n], Instance::create(g.nodes[n].sub));
      run->subs[n]->run_->parent = run.get();
      run->subs[n]->run_->parent_node = n;
    }
  }
  run->graph = std::move(graph);
  return std::unique_ptr<Instance>(new Instance(std::move(run)));
}

namespace {
Status check_idle(const InstanceRun& r, std::string_view what) {
  if (!r.in_flight.load(std::memory_order_acquire)) return {};
  return {Code::kBadState, std::string(what) + " while an instance of graph '" + r.layout->name + "' is in flight"};
}
}  // namespace

Status Instance::set_data(NodeId node, void* data) {
  OB_RETURN_IF_ERROR(check_node(*run_->layout, node));
  OB_RETURN_IF_ERROR(check_idle(*run_, "set_data"));
  run_->data[node] = data;
  return {};
}

void* Instance::data(NodeId node) const { return node < run_->data.size() ? run_->data[node] : nullptr; }

Instance* Instance::sub(NodeId node) const { return node < run_->subs.size() ? run_->subs[node].get() : nullptr; }

Status Instance::set_callback(CompletionFn on_complete) {
  OB_RETURN_IF_ERROR(check_idle(*run_, "set_callback"));
  run_->callback = std::move(on_complete);
  return {};
}

Status Instance::enable_timing(bool on) {
  OB_RETURN_IF_ERROR(check_idle(*run_, "enable_timing"));
  run_->timing_on = on;
  run_->timing.assign(on ? run_->layout->nodes.size() : 0, NodeTiming{});
  return {};
}

std::span<const NodeTiming> Instance::timing() const { return run_->timing; }
bool Instance::in_flight() const { return run_->in_flight.load(std::memory_order_acquire); }
Status Instance::status() const { return run_->result; }
const Graph& Instance::graph() const { return *run_->graph; }

}  // namespace outboard::graph
