// Client of the `graph` service: ships graphs, creates instances, batches
// submits and host-node results into one request each per progress round,
// and runs host nodes when the agent says their predecessors are done.
#include "outboard/graph_offload.h"

#include <algorithm>

#include "outboard/log.h"
#include "services/graph_wire.h"

OB_LOG_MODULE("graph");

namespace outboard::graph {

namespace wire = graph_wire;

namespace {
constexpr int64_t kBatchDeadlineMs = 10000;  // the agent answers a batch as it parses it

wire::Ref to_wire(const Ref& r) {
  wire::Ref w;
  w.space = r.space == Ref::Space::kHost ? 1 : 0;
  w.region = r.region;
  w.offset = r.offset;
  w.length = r.length;
  return w;
}

// The items of a batch the agent refused: (index in the batch, why).
using BatchErrors = std::vector<std::pair<uint32_t, Status>>;

Result<BatchErrors> read_errors(const Result<Buffer>& answer) {
  if (!answer.ok()) return answer.status();
  wire::Reader in{answer.value().span()};
  uint32_t count = 0;
  if (!in.get(count)) return Status(Code::kInvalidArgument, "the agent's batch answer is truncated");
  BatchErrors out;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t index = 0;
    int32_t code = 0;
    std::string message;
    if (!in.get(index) || !in.get(code) || !in.get_string(message))
      return Status(Code::kInvalidArgument, "the agent's batch answer is truncated");
    out.emplace_back(index, Status(static_cast<Code>(code), message));
  }
  return out;
}
}  // namespace

RemoteInstance::RemoteInstance(Offload* owner, std::shared_ptr<const RemoteGraph> graph, uint32_t id)
    : owner_(owner), graph_(std::move(graph)), id_(id), host_data_(graph_->graph().size(), nullptr) {}

RemoteInstance::~RemoteInstance() { owner_->forget(*this); }

Status RemoteInstance::set_host_data(NodeId node, void* data) {
  if (node >= host_data_.size())
    return {Code::kInvalidArgument, "node " + std::to_string(node) + " does not exist (graph '" +
                                        graph_->graph().name() + "' has " + std::to_string(host_data_.size()) + " nodes)"};
  if (in_flight_) return {Code::kBadState, "instance of graph '" + graph_->graph().name() + "' is in flight"};
  host_data_[node] = data;
  return {};
}

Offload::Offload(std::unique_ptr<Connection> connection) : connection_(std::move(connection)) {}

Offload::~Offload() {
  // Answers to batches still out run now, while this object is whole.
  connection_->close();
}

Result<std::unique_ptr<Offload>> Offload::connect(const std::string& address, Deadline deadline,
                                                  const ChannelConfig& config) {
  ChannelConfig c = config;
  c.connect_timeout_ms = std::max<int64_t>(1, deadline.remaining_ms());
  OB_ASSIGN_OR_RETURN(auto conn, Connection::connect(address, c));
  auto services = conn->peer_services();
  if (std::find(services.begin(), services.end(), "graph") == services.end())
    return Status(Code::kNotFound, "the agent at " + address + " offers no graph service");
  return std::unique_ptr<Offload>(new Offload(std::move(conn)));
}

Status Offload::request(char op, const std::vector<uint8_t>& body, Deadline deadline, Buffer* answer) {
  if (!broken_.ok()) return broken_;
  std::vector<uint8_t> payload;
  payload.reserve(body.size() + 1);
  payload.push_back(static_cast<uint8_t>(op));
  payload.insert(payload.end(), body.begin(), body.end());
  OB_ASSIGN_OR_RETURN(*answer, connection_->request("graph", payload, deadline));
  return {};
}

Result<uint32_t> Offload::bind(const Region& region, Deadline deadline) {
  std::vector<uint8_t> body(region.descriptor().begin(), region.descriptor().end());
  Buffer answer;
  OB_RETURN_IF_ERROR(request(wire::kBind, body, deadline, &answer));
  uint32_t handle = 0;
  if (!wire::Reader{answer.span()}.get(handle)) return Status(Code::kInvalidArgument, "bad bind answer");
  return handle;
}

Result<std::shared_ptr<const RemoteGraph>> Offload::ship(std::shared_ptr<const Graph> graph, uint64_t agent_bytes,
                                                         Deadline deadline) {
  if (!graph || !graph->frozen()) return Status(Code::kBadState, "only a frozen graph can be shipped");
  wire::Writer w;
  w.put_string(graph->name());
  w.put(agent_bytes);
  w.put(static_cast<uint32_t>(graph->size()));
  uint32_t edges = 0;
  for (NodeId n = 0; n < graph->size(); ++n) {
    const std::string& name = graph->node_name(n);
    wire::NodeKind kind;
    const Engine* engine = graph->node_engine(n);
    if (graph->node_kind(n) == NodeKind::kUser && graph->is_host(n)) {
      kind = wire::NodeKind::kHost;
    } else if (engine && engine->name() == sha256_engine().name()) {
      kind = wire::NodeKind::kSha256;
    } else if (engine && engine->name() == copy_engine().name()) {
      kind = wire::NodeKind::kDma;
    } else if (engine) {
      return Status(Code::kInvalidArgument, "node '" + name + "': engine '" + std::string(engine->name()) +
                                                "' has no agent-side implementation (the agent runs sha256 and dma)");
    } else {
      return Status(Code::kInvalidArgument, "node '" + name +
                                                "' cannot be offloaded: only engine nodes and host nodes "
                                                "(Graph::add_host) can");
    }
    w.put(kind);
    w.put_string(name);
    edges += static_cast<uint32_t>(graph->successors(n).size());
  }
  w.put(edges);
  for (NodeId n = 0; n < graph->size(); ++n)
    for (NodeId s : graph->successors(n)) {
      w.put(n);
      w.put(s);
    }
  Buffer answer;
  OB_RETURN_IF_ERROR(request(wire::kGraph, w.bytes, deadline, &answer));
  uint32_t handle = 0;
  if (!wire::Reader{answer.span()}.get(handle)) return Status(Code::kInvalidArgument, "bad graph answer");
  return std::make_shared<const RemoteGraph>(std::move(graph), handle, agent_bytes);
}

Result<std::unique_ptr<RemoteInstance>> Offload::instantiate(std::shared_ptr<const RemoteGraph> graph,
                                                             std::span<const Buffers> buffers, Deadline deadline) {
  if (buffers.size() != graph->graph().size())
    return Status(Code::kInvalidArgument, std::to_string(buffers.size()) + " node buffers given; graph '" +
                                              graph->graph().name() + "' has " + std::to_string(graph->graph().size()) +
                                              " nodes");
  wire::Writer w;
  w.put(graph->handle());
  for (const Buffers& b : buffers) w.put(wire::Buffers{to_wire(b.src), to_wire(b.dst)});
  Buffer answer;
  OB_RETURN_IF_ERROR(request(wire::kInstance, w.bytes, deadline, &answer));
  uint32_t id = 0;
  if (!wire::Reader{answer.span()}.get(id)) return Status(Code::kInvalidArgument, "bad instance answer");
  std::unique_ptr<RemoteInstance> inst(new RemoteInstance(this, std::move(graph), id));
  by_id_[id] = inst.get();
  return inst;
}

Status Offload::submit(RemoteInstance& instance, std::span<const AgentWrite> writes) {
  const std::string& name = instance.graph_->graph().name();
  if (instance.in_flight_) return {Code::kBadState, "instance of graph '" + name + "' is already in flight"};
  if (!broken_.ok()) return broken_;
  const uint64_t memory = instance.graph_->agent_bytes();
  for (const AgentWrite& wr : writes)
    if (wr.offset > memory || wr.bytes.size() > memory - wr.offset)
      return {Code::kOutOfRange, "write of " + std::to_string(wr.bytes.size()) + " B at offset " +
                                     std::to_string(wr.offset) + " is outside the " + std::to_string(memory) +
                                     " B of agent memory of graph '" + name + "'"};
  wire::Writer w;
  w.bytes.swap(submits_);
  w.put(instance.id_);
  w.put(static_cast<uint32_t>(writes.size()));
  for (const AgentWrite& wr : writes) {
    w.put(wr.offset);
    w.put(static_cast<uint32_t>(wr.bytes.size()));
    w.put_bytes(wr.bytes);
  }
  w.bytes.swap(submits_);
  submit_ids_.push_back(instance.id_);
  instance.in_flight_ = true;
  ++in_flight_;
  if (submits_.size() >= kMaxBatchBytes) send_batches(Deadline::after_ms(kBatchDeadlineMs));
  return {};
}

void Offload::send_batches(Deadline deadline) {
  if (!broken_.ok()) return;
  const auto post = [&](char op, uint32_t count, std::vector<uint8_t>& body, ResponseFn fn) {
    Buffer payload(1 + sizeof count + body.size());
    payload.data()[0] = static_cast<uint8_t>(op);
    std::memcpy(payload.data() + 1, &count, sizeof count);
    std::memcpy(payload.data() + 1 + sizeof count, body.data(), body.size());
    Status st = connection_->submit("graph", std::move(payload), deadline, std::move(fn));
    if (st.code() == Code::kAgain) return false;  // no credit: the batch waits for the next round
    if (!st.ok()) broken_ = st;
    body.clear();
    return true;
  };
  if (host_result_count_ != 0 &&
      post(wire::kHostDone, host_result_count_, host_results_, [](Result<Buffer> answer) {
        auto errors = read_errors(answer);
        if (!errors.ok()) {
          OB_LOG_WARN("host results refused: %s", errors.status().to_string().c_str());
          return;
        }
        for (auto& [index, st] : errors.value()) OB_LOG_WARN("host result refused: %s", st.to_string().c_str());
      }))
    host_result_count_ = 0;
  if (!submit_ids_.empty() &&
      post(wire::kSubmit, static_cast<uint32_t>(submit_ids_.size()), submits_,
           [this, ids = submit_ids_](Result<Buffer> answer) {
             auto errors = read_errors(answer);
             auto fail = [&](uint32_t id, const Status& st) {
               if (auto it = by_id_.find(id); it != by_id_.end() && it->second->in_flight_) complete(*it->second, st);
             };
             if (!errors.ok()) {
               for (uint32_t id : ids) fail(id, errors.status().with_context("submitting"));
               return;
             }
             for (auto& [index, st] : errors.value())
               if (index < ids.size()) fail(ids[index], st);
           }))
    submit_ids_.clear();
  if (!broken_.ok()) fail_all();
}

void Offload::fail_all() {
  // Nothing more will come: every run in flight ends with the reason.
  std::vector<RemoteInstance*> running;
  for (auto& [id, inst] : by_id_)
    if (inst->in_flight_) running.push_back(inst);
  for (RemoteInstance* inst : running) complete(*inst, broken_);
}

void Offload::complete(RemoteInstance& instance, const Status& status) {
  instance.in_flight_ = false;
  instance.status_ = status;
  --in_flight_;
  if (instance.callback_) instance.callback_(instance, status);
}

void Offload::forget(RemoteInstance& instance) {
  by_id_.erase(instance.id_);
  if (instance.in_flight_) --in_flight_;
  if (!broken_.ok() || !connection_->is_open()) return;
  uint8_t msg[1 + sizeof(uint32_t)] = {static_cast<uint8_t>(wire::kRelease)};
  std::memcpy(msg + 1, &instance.id_, sizeof instance.id_);
  // Best effort: without it the agent frees the instance when we disconnect.
  Status st = connection_->send(msg, Deadline::after_ms(kBatchDeadlineMs), "graph");
  if (!st.ok()) OB_LOG_WARN("releasing instance %u: %s", instance.id_, st.to_string().c_str());
}

void Offload::handle_events(std::span<const uint8_t> message) {
  wire::Reader in{message};
  char tag = 0;
  uint32_t count = 0;
  if (!in.get(tag) || tag != wire::kEvents || !in.get(count)) {
    OB_LOG_WARN("dropped a %zu B message that is not a graph event batch", message.size());
    return;
  }
  for (uint32_t i = 0; i < count; ++i) {
    wire::EventKind kind;
    uint32_t id = 0;
    if (!in.get(kind) || !in.get(id)) break;
    auto it = by_id_.find(id);
    RemoteInstance* inst = it == by_id_.end() ? nullptr : it->second;
    if (kind == wire::EventKind::kHostReady) {
      NodeId node = 0;
      if (!in.get(node)) break;
      Status st;
      if (!inst || node >= inst->host_data_.size() || !inst->graph_->graph().node_body(node)) {
        st = {Code::kBadState, "the client dropped instance " + std::to_string(id)};
      } else {
        try {
          st = (*inst->graph_->graph().node_body(node))(inst->host_data_[node]);
        } catch (const std::exception& e) {
          st = {Code::kFailed, std::string("threw: ") + e.what()};
        }
      }
      wire::Writer w;
      w.bytes.swap(host_results_);
      w.put(id);
      w.put(node);
      w.put(static_cast<int32_t>(st.code()));
      w.put_string(st.message());
      w.bytes.swap(host_results_);
      ++host_result_count_;
    } else {
      int32_t code = 0;
      std::string msg;
      if (!in.get(code) || !in.get_string(msg)) break;
      if (inst && inst->in_flight_) complete(*inst, code == 0 ? Status() : Status(static_cast<Code>(code), msg));
    }
  }
}

unsigned Offload::poll(Deadline deadline) {
  unsigned n = 0;
  for (;;) {
    auto in = connection_->receive(n == 0 ? deadline : Deadline::now());
    if (!in.ok()) {
      if (in.status().code() != Code::kTimedOut && broken_.ok()) {
        broken_ = in.status().with_context("graph offload connection");
        fail_all();
      }
      return n;
    }
    if (in.value().kind == Incoming::Kind::kMessage) handle_events(in.value().data.span());
    ++n;
  }
}

unsigned Offload::progress() {
  send_batches(Deadline::after_ms(kBatchDeadlineMs));
  unsigned n = poll(Deadline::now());
  send_batches(Deadline::after_ms(kBatchDeadlineMs));
  return n;
}

Status Offload::wait(RemoteInstance& instance, Deadline deadline) {
  for (;;) {
    send_batches(Deadline::after_ms(kBatchDeadlineMs));
    if (!instance.in_flight_) return instance.status_;
    if (deadline.expired())
      return {Code::kTimedOut, "instance of graph '" + instance.graph_->graph().name() + "' still running at the deadline"};
    poll(deadline);
  }
}

Status Offload::drain(Deadline deadline) {
  for (;;) {
    send_batches(Deadline::after_ms(kBatchDeadlineMs));
    if (in_flight_ == 0) return {};
    if (deadline.expired()) return {Code::kTimedOut, std::to_string(in_flight_) + " instances still in flight at the deadline"};
    poll(deadline);
  }
}

}  // namespace outboard::graph
