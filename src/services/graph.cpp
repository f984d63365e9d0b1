// The `graph` service: task graphs shipped by clients run on the agent's
// executor. Engine nodes run on the executor's workers over the instance's
// agent memory; their one-sided transfers to and from the client, host-node
// hand-offs and completions go through an outbox that the progress thread
// drains in batches (one flush per batch of puts, one message per batch of
// events), so an event never overtakes the data written before it.
#include <sodium.h>

#include <deque>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "outboard/graph.h"
#include "outboard/log.h"
#include "services/builtin.h"
#include "services/graph_wire.h"
#include "util/mutex.h"
#include "util/text.h"

OB_LOG_MODULE("graph");

namespace outboard::services {
namespace {

namespace wire = graph_wire;
using graph::NodeDone;
using graph::NodeId;
using wire::NodeKind;

constexpr int64_t kTransferDeadlineMs = 5000;  // a client that cannot take 5 s of writes has failed
constexpr uint32_t kMaxGraphsPerConnection = 4096;
constexpr uint32_t kMaxEventsPerMessage = 8192;
constexpr uint64_t kDigestBytes = 32;

struct ClientState;
struct AgentInstance;

// One node of one instance: what its body works on.
struct Task {
  NodeKind kind = NodeKind::kHost;
  wire::Buffers buffers;
  uint8_t* src = nullptr;  // agent memory, when src is there
  uint8_t* dst = nullptr;  // agent memory, when dst is there
  std::shared_ptr<RemoteRegion> host;  // the client's region a transfer uses
  uint8_t digest[kDigestBytes] = {};   // staged for a put to the client
  AgentInstance* owner = nullptr;
  NodeId node = 0;
};

struct AgentInstance {
  ~AgentInstance() {
    if (!host) return;
    host->release_memory(memory_bytes);
    host->release_graph_instance();
  }
  uint32_t id = 0;
  ClientState* client = nullptr;
  ServiceHost* host = nullptr;  // the memory and the instance came from its budget
  std::unique_ptr<uint8_t[]> memory;
  uint64_t memory_bytes = 0;
  std::vector<Task> tasks;
  std::unique_ptr<graph::Instance> run;
  std::vector<std::optional<NodeDone>> host_waiting;  // progress thread only
  bool in_flight = false;                              // progress thread only
  bool released = false;
};

struct ShippedGraph {
  std::shared_ptr<graph::Graph> graph;
  std::vector<NodeKind> kinds;
  uint64_t agent_bytes = 0;
};

struct ClientState {
  uint32_t id = 0;
  std::shared_ptr<Connection> peer;
  std::vector<std::shared_ptr<RemoteRegion>> regions;
  std::vector<ShippedGraph> graphs;
  // By id. Ids are never reused on a connection: an event in flight for a
  // freed instance must not reach a new one.
  std::unordered_map<uint32_t, std::unique_ptr<AgentInstance>> instances;
  uint32_t next_instance = 0;
  uint64_t agent_bytes = 0;
  uint32_t live_instances = 0;
  uint32_t running = 0;
  bool gone = false;  // disconnected; kept until its runs are over
  // Event messages to send, in order; the last one takes new events until it
  // holds kMaxEventsPerMessage.
  struct EventMessage {
    wire::Writer bytes;  // 'E', u32 count (written when sent), events
    uint32_t count = 0;
  };
  std::deque<EventMessage> outgoing;
  bool waiting_for_credit = false;

  // Where the next event goes.
  wire::Writer& add_event() {
    if (outgoing.empty() || outgoing.back().count == kMaxEventsPerMessage) {
      outgoing.emplace_back();
      outgoing.back().bytes.put(wire::kEvents);
      outgoing.back().bytes.put(uint32_t{0});
    }
    ++outgoing.back().count;
    return outgoing.back().bytes;
  }
};

// What workers hand to the progress thread.
struct Transfer {
  Task* task;
  NodeDone done;
  bool put;
};
struct HostReady {
  Task* task;
  NodeDone done;
};
struct Completion {
  AgentInstance* instance;
  Status status;
};

struct Round;

// Shared with the closures posted to the progress thread, which may run
// after the service is gone (they then do nothing).
struct Core : std::enable_shared_from_this<Core> {
  GraphServiceConfig config;
  ServiceHost* host = nullptr;
  std::unique_ptr<graph::Executor> executor;
  std::unordered_map<uint32_t, std::unique_ptr<ClientState>> clients;  // progress thread only
  // Progress thread only. True while pump() runs: a blocking transfer in it
  // progresses the hub, which may run another posted pump() (or a client's
  // disconnect) on this thread, inside the first. Those leave the work to
  // the outer pump's next round and the client table as it is.
  bool pumping = false;

  Mutex mu;
  std::vector<Transfer> transfers OB_GUARDED_BY(mu);
  std::vector<HostReady> host_ready OB_GUARDED_BY(mu);
  std::vector<Completion> completions OB_GUARDED_BY(mu);
  bool scheduled OB_GUARDED_BY(mu) = false;
  bool detached OB_GUARDED_BY(mu) = false;  // the service is going: nothing more is posted

  // Any thread: queue for the progress thread. Returns false when the
  // service is going (the caller finishes the node itself).
  template <typename T>
  bool queue(std::vector<T> Core::*list, T item) {
    bool post = false;
    {
      MutexLock lock(mu);
      if (detached) return false;
      (this->*list).push_back(std::move(item));
      post = !std::exchange(scheduled, true);
    }
    if (post) host->post([self = shared_from_this()] { self->pump(); });
    return true;
  }

  void pump();
  // pump()'s phases.
  void transfer(std::vector<Transfer>& xfers);
  void announce_host_ready(Round& round);
  void announce_completions(Round& round);
  // Without workers the progress thread is the executor (DOCA's progress
  // engine): it runs the ready nodes here.
  void run_ready() {
    if (config.threads == 0)
      while (executor->progress() != 0) {
      }
  }
  void send_events(ClientState& c);
  void free_instance(ClientState& c, AgentInstance& inst);
  void settle(AgentInstance& inst);
  void forget_gone_clients() {
    for (auto it = clients.begin(); it != clients.end();) {
      if (it->second->gone && it->second->running == 0) {
        for (auto& [id, inst] : it->second->instances) settle(*inst);
        it = clients.erase(it);
      } else {
        ++it;
      }
    }
  }
};

Status shutting_down() { return {Code::kShutDown, "the agent's graph service is shutting down"}; }
Status client_left() { return {Code::kConnectionReset, "the client disconnected"}; }

// ------------------------------------------------------------- node bodies

Status run_sha256(Core* core, void* data, NodeDone done) {
  auto* t = static_cast<Task*>(data);
  uint8_t* out = t->dst ? t->dst : t->digest;
  crypto_hash_sha256(out, t->src, t->buffers.src.length);
  if (t->dst) {
    done.finish({});
    return {};
  }
  if (!core->queue(&Core::transfers, Transfer{t, done, true})) done.finish(shutting_down());
  return {};
}

Status run_dma(Core* core, void* data, NodeDone done) {
  auto* t = static_cast<Task*>(data);
  if (t->src && t->dst) {
    std::memcpy(t->dst, t->src, t->buffers.src.length);
    done.finish({});
    return {};
  }
  if (!core->queue(&Core::transfers, Transfer{t, done, /*put=*/t->src != nullptr})) done.finish(shutting_down());
  return {};
}

Status run_host(Core* core, void* data, NodeDone done) {
  if (!core->queue(&Core::host_ready, HostReady{static_cast<Task*>(data), done})) done.finish(shutting_down());
  return {};
}

// ---------------------------------------------------------------- the pump

// What one round of the pump takes from the workers, and the clients it
// has events for.
struct Round {
  std::vector<Transfer> transfers;
  std::vector<HostReady> host_ready;
  std::vector<Completion> completions;
  std::vector<ClientState*> touched;

  [[nodiscard]] bool empty() const { return transfers.empty() && host_ready.empty() && completions.empty(); }
  void touch(ClientState& c) {
    if (std::find(touched.begin(), touched.end(), &c) == touched.end()) touched.push_back(&c);
  }
  void clear() {
    transfers.clear();
    host_ready.clear();
    completions.clear();
    touched.clear();
  }
};

// Progress thread: rounds until the workers have queued nothing more.
void Core::pump() {
  {
    MutexLock lock(mu);
    if (detached) return;
  }
  if (pumping) return;  // a blocking transfer below progressed the hub into here: the outer round takes it
  pumping = true;
  Round round;
  for (;;) {
    run_ready();
    {
      MutexLock lock(mu);
      round.transfers.swap(transfers);
      round.host_ready.swap(host_ready);
      round.completions.swap(completions);
      scheduled = false;
    }
    if (round.empty()) break;
    transfer(round.transfers);
    announce_host_ready(round);
    announce_completions(round);
    for (ClientState* c : round.touched) send_events(*c);
    round.clear();
  }
  pumping = false;
  forget_gone_clients();
}

// The one-sided puts and gets engine nodes asked for, then one flush per
// client, which makes all its puts of the round visible; each node finishes
// with its transfer's status.
void Core::transfer(std::vector<Transfer>& xfers) {
  const auto deadline = Deadline::after_ms(kTransferDeadlineMs);
  std::vector<Transfer*> to_flush;
  std::vector<ClientState*> clients;
  for (Transfer& x : xfers) {
    Task& t = *x.task;
    ClientState& c = *t.owner->client;
    if (c.gone || !c.peer->is_open()) {
      x.done.finish(client_left());
      continue;
    }
    const wire::Ref& remote = x.put ? t.buffers.dst : t.buffers.src;
    Status st;
    if (x.put) {
      const uint8_t* from = t.kind == NodeKind::kSha256 ? t.digest : t.src;
      st = c.peer->put(*t.host, remote.offset, {from, remote.length}, deadline);
    } else {
      st = c.peer->get(*t.host, remote.offset, {t.dst, remote.length}, deadline);
    }
    if (!st.ok() || !x.put) {
      x.done.finish(st.ok() ? st : st.with_context(x.put ? "put to the client" : "get from the client"));
      continue;
    }
    if (std::find(clients.begin(), clients.end(), &c) == clients.end()) clients.push_back(&c);
    to_flush.push_back(&x);
  }
  for (ClientState* c : clients) {
    Status st = c->peer->flush(deadline);
    for (Transfer* x : to_flush)
      if (x->task->owner->client == c) x->done.finish(st.ok() ? st : st.with_context("flushing puts to the client"));
  }
}

// Host nodes whose inputs are ready: the client runs them and says when.
void Core::announce_host_ready(Round& round) {
  for (HostReady& h : round.host_ready) {
    AgentInstance& inst = *h.task->owner;
    if (inst.client->gone || inst.released) {
      h.done.finish(inst.released ? Status(Code::kBadState, "the client released the instance") : client_left());
      continue;
    }
    inst.host_waiting[h.task->node] = h.done;
    wire::Writer& e = inst.client->add_event();
    e.put(wire::EventKind::kHostReady);
    e.put(inst.id);
    e.put(h.task->node);
    round.touch(*inst.client);
  }
}

// Instances that finished: their clients are told, released ones freed.
void Core::announce_completions(Round& round) {
  for (Completion& d : round.completions) {
    AgentInstance& inst = *d.instance;
    ClientState& c = *inst.client;
    inst.in_flight = false;
    --c.running;
    if (!c.gone && !inst.released) {
      wire::Writer& e = c.add_event();
      e.put(wire::EventKind::kComplete);
      e.put(inst.id);
      e.put(static_cast<int32_t>(d.status.code()));
      e.put_string(d.status.message());
      round.touch(c);
    }
    if (inst.released) free_instance(c, inst);
  }
}

void Core::send_events(ClientState& c) {
  while (!c.outgoing.empty() && !c.gone) {
    ClientState::EventMessage& m = c.outgoing.front();
    std::memcpy(m.bytes.bytes.data() + 1, &m.count, sizeof m.count);
    Status st = c.peer->try_send(m.bytes.bytes);
    if (st.code() == Code::kAgain) {
      if (!c.waiting_for_credit) {
        c.waiting_for_credit = true;
        const uint32_t id = c.id;
        c.peer->on_credit([weak = weak_from_this(), id] {
          auto self = weak.lock();
          if (!self) return;
          if (auto it = self->clients.find(id); it != self->clients.end()) {
            it->second->waiting_for_credit = false;
            self->send_events(*it->second);
          }
        });
      }
      return;
    }
    if (!st.ok()) OB_LOG_WARN("client %u: events not delivered: %s", c.id, st.to_string().c_str());
    c.outgoing.pop_front();
  }
}

// With workers, the executor may still be delivering the run that just
// completed (its callback queued the completion): wait for that first.
void Core::settle(AgentInstance& inst) {
  Status st = executor->wait(*inst.run, Deadline::after_ms(kTransferDeadlineMs));
  if (st.code() == Code::kTimedOut) OB_LOG_WARN("instance %u: run still delivering at release", inst.id);
}

void Core::free_instance(ClientState& c, AgentInstance& inst) {
  settle(inst);
  c.agent_bytes -= inst.memory_bytes;
  --c.live_instances;
  c.instances.erase(inst.id);
}

// ----------------------------------------------------------------- service

Status check_ref(const ClientState& c, const wire::Ref& ref, uint64_t agent_bytes, const std::string& what,
                 std::shared_ptr<RemoteRegion>* region) {
  if (ref.space > 1) return {Code::kInvalidArgument, what + ": unknown memory space " + std::to_string(ref.space)};
  uint64_t size = agent_bytes;
  std::string where = "the instance's " + std::to_string(agent_bytes) + " B of agent memory";
  if (ref.space == 1) {
    if (ref.region >= c.regions.size())
      return {Code::kNotFound, what + ": region " + std::to_string(ref.region) + " was not bound on this connection"};
    *region = c.regions[ref.region];
    size = (*region)->size();
    where = "bound region " + std::to_string(ref.region) + " of " + std::to_string(size) + " B";
  }
  if (ref.offset > size || ref.length > size - ref.offset)
    return {Code::kOutOfRange, what + ": " + std::to_string(ref.length) + " B at offset " + std::to_string(ref.offset) +
                                   " is outside " + where};
  return {};
}

class GraphService final : public Service {
 public:
  explicit GraphService(GraphServiceConfig config) : core_(std::make_shared<Core>()) { core_->config = config; }

  ~GraphService() override {
    Core& c = *core_;
    std::vector<Transfer> xfers;
    std::vector<HostReady> ready;
    {
      std::lock_guard lock(c.mu);
      c.detached = true;
      xfers.swap(c.transfers);
      ready.swap(c.host_ready);
      c.completions.clear();
    }
    for (auto& x : xfers) x.done.finish(shutting_down());
    for (auto& h : ready) h.done.finish(shutting_down());
    for (auto& [id, client] : c.clients)
      for (auto& [iid, inst] : client->instances)
        for (auto& w : inst->host_waiting)
          if (w) std::exchange(w, std::nullopt)->finish(shutting_down());
    if (c.executor) c.executor.reset();  // waits for the runs, which now all end
    c.clients.clear();
  }

  std::string name() const override { return "graph"; }

  void attach(ServiceHost& host) override {
    core_->host = &host;
    graph::ExecutorConfig ec;
    ec.threads = core_->config.threads;
    auto ex = graph::Executor::create(ec);
    if (!ex.ok()) {
      OB_LOG_ERR("graph executor: %s", ex.status().to_string().c_str());
      return;
    }
    core_->executor = std::move(ex).value();
  }

  void on_disconnect(uint32_t id) override {
    auto it = core_->clients.find(id);
    if (it == core_->clients.end()) return;
    ClientState& c = *it->second;
    c.gone = true;
    for (auto& [iid, inst] : c.instances)
      for (auto& w : inst->host_waiting)
        if (w) std::exchange(w, std::nullopt)->finish(client_left());
    // Not under a pump (a blocking transfer there can land us here): it holds clients.
    if (!core_->pumping) core_->forget_gone_clients();
  }

  void handle(ServiceRequest r) override {
    std::span<const uint8_t> in = r.payload.span();
    if (in.empty()) return r.responder.fail({Code::kInvalidArgument, "empty graph request"});
    if (!core_->executor) return r.responder.fail({Code::kShutDown, "the graph service has no executor"});
    const char op = static_cast<char>(in[0]);
    wire::Reader reader{in.subspan(1)};
    ClientState& c = client(r);
    if (op == wire::kRelease) return release(r, c, reader);
    if (!r.responder.expects_response())
      return r.responder.fail({Code::kInvalidArgument, "graph takes requests, except release"});
    switch (op) {
      case wire::kBind: return bind(r, c, reader);
      case wire::kGraph: return ship(r, c, reader);
      case wire::kInstance: return instantiate(r, c, reader);
      case wire::kSubmit: return submit(r, c, reader);
      case wire::kHostDone: return host_done(r, c, reader);
      default:
        return r.responder.fail({Code::kInvalidArgument, "unknown graph request " + quote({&op, 1})});
    }
  }

 private:
  ClientState& client(const ServiceRequest& r) {
    auto& slot = core_->clients[r.peer->id()];
    if (!slot) {
      slot = std::make_unique<ClientState>();
      slot->id = r.peer->id();
      slot->peer = r.peer;
    }
    return *slot;
  }

  static void respond_u32(const ServiceRequest& r, uint32_t v) {
    r.responder.respond(Buffer::copy_of({reinterpret_cast<const uint8_t*>(&v), sizeof v}));
  }

  void bind(ServiceRequest& r, ClientState& c, wire::Reader& in) {
    auto remote = r.peer->import_region(in.in);
    if (!remote.ok()) return r.responder.fail(remote.status().with_context("binding a region"));
    c.regions.push_back(std::make_shared<RemoteRegion>(std::move(remote).value()));
    respond_u32(r, static_cast<uint32_t>(c.regions.size() - 1));
  }

  void ship(ServiceRequest& r, ClientState& c, wire::Reader& in) {
    const auto truncated = [&](const char* what) {
      r.responder.fail({Code::kInvalidArgument, std::string("graph request is truncated (") + what + ")"});
    };
    if (c.graphs.size() >= kMaxGraphsPerConnection)
      return r.responder.fail({Code::kTooBig, "connection already shipped " + std::to_string(c.graphs.size()) +
                                                  " graphs, the limit kMaxGraphsPerConnection"});
    std::string name;
    uint64_t agent_bytes = 0;
    uint32_t nodes = 0;
    if (!in.get_string(name) || !in.get(agent_bytes) || !in.get(nodes)) return truncated("header");
    const GraphServiceConfig& cfg = core_->config;
    if (agent_bytes > cfg.max_memory)
      return r.responder.fail({Code::kTooBig, "graph " + quote(name) + ": " + std::to_string(agent_bytes) +
                                                  " B of agent memory per instance exceeds the connection's " +
                                                  std::to_string(cfg.max_memory) + " B (agent option --graph-max-memory)"});
    if (nodes > in.in.size() / 5) return truncated("nodes");  // each takes at least 5 B
    ShippedGraph shipped;
    shipped.graph = graph::Graph::create(name);
    shipped.agent_bytes = agent_bytes;
    Core* core = core_.get();
    for (uint32_t i = 0; i < nodes; ++i) {
      NodeKind kind;
      std::string node_name;
      if (!in.get(kind) || !in.get_string(node_name)) return truncated("nodes");
      Result<NodeId> id = Status(Code::kInvalidArgument, "node " + quote(node_name) + " has unknown kind " +
                                                            std::to_string(static_cast<int>(kind)));
      using namespace std::placeholders;
      if (kind == NodeKind::kSha256) id = shipped.graph->add_async(node_name, std::bind(run_sha256, core, _1, _2));
      else if (kind == NodeKind::kDma) id = shipped.graph->add_async(node_name, std::bind(run_dma, core, _1, _2));
      else if (kind == NodeKind::kHost) id = shipped.graph->add_async(node_name, std::bind(run_host, core, _1, _2));
      if (!id.ok()) return r.responder.fail(id.status().with_context("graph " + quote(name)));
      shipped.kinds.push_back(kind);
    }
    uint32_t edges = 0;
    if (!in.get(edges) || edges > in.in.size() / 8) return truncated("edges");
    for (uint32_t i = 0; i < edges; ++i) {
      uint32_t from = 0, to = 0;
      in.get(from);
      in.get(to);
      Status st = shipped.graph->add_dependency(from, to);
      if (!st.ok()) return r.responder.fail(st.with_context("graph " + quote(name)));
    }
    if (!in.in.empty()) return r.responder.fail({Code::kInvalidArgument, "graph request has trailing bytes"});
    if (Status st = shipped.graph->freeze(); !st.ok()) return r.responder.fail(st);
    c.graphs.push_back(std::move(shipped));
    respond_u32(r, static_cast<uint32_t>(c.graphs.size() - 1));
  }

  void instantiate(ServiceRequest& r, ClientState& c, wire::Reader& in) {
    const GraphServiceConfig& cfg = core_->config;
    uint32_t gid = 0;
    if (!in.get(gid)) return r.responder.fail({Code::kInvalidArgument, "instance request is truncated"});
    if (gid >= c.graphs.size())
      return r.responder.fail({Code::kNotFound, "graph " + std::to_string(gid) + " was not shipped on this connection"});
    const ShippedGraph& g = c.graphs[gid];
    const size_t n = g.kinds.size();
    if (in.in.size() != n * sizeof(wire::Buffers))
      return r.responder.fail({Code::kInvalidArgument, "instance request carries " + std::to_string(in.in.size()) +
                                                           " B of buffers; graph " + quote(g.graph->name()) + " needs " +
                                                           std::to_string(n * sizeof(wire::Buffers))});
    if (c.live_instances >= cfg.max_instances)
      return r.responder.fail({Code::kTooBig, std::to_string(c.live_instances) + " instances on this connection reach " +
                                                  std::to_string(cfg.max_instances) + " (agent option --graph-max-instances)"});
    if (g.agent_bytes > cfg.max_memory - c.agent_bytes)
      return r.responder.fail({Code::kTooBig, "instance of graph " + quote(g.graph->name()) + " needs " +
                                                  std::to_string(g.agent_bytes) + " B of agent memory; the connection holds " +
                                                  std::to_string(c.agent_bytes) + " B of its " + std::to_string(cfg.max_memory) +
                                                  " B (agent option --graph-max-memory)"});
    if (Status st = core_->host->reserve_graph_instance(); !st.ok()) return r.responder.fail(st);
    if (Status st = core_->host->reserve_memory(g.agent_bytes, "instance of graph " + quote(g.graph->name()));
        !st.ok()) {
      core_->host->release_graph_instance();
      return r.responder.fail(st);
    }
    auto inst = std::make_unique<AgentInstance>();
    inst->client = &c;
    inst->host = core_->host;
    inst->memory_bytes = g.agent_bytes;
    inst->memory = std::make_unique<uint8_t[]>(g.agent_bytes);
    inst->tasks.resize(n);
    inst->host_waiting.resize(n);
    auto run = graph::Instance::create(g.graph);
    if (!run.ok()) return r.responder.fail(run.status());
    inst->run = std::move(run).value();
    for (NodeId i = 0; i < n; ++i) {
      Task& t = inst->tasks[i];
      t.kind = g.kinds[i];
      t.owner = inst.get();
      t.node = i;
      in.get(t.buffers);
      const std::string node = "node " + quote(g.graph->node_name(i));
      if (Status st = check_task(c, t, g.agent_bytes, node, inst->memory.get()); !st.ok()) return r.responder.fail(st);
      (void)inst->run->set_data(i, &t);
    }
    AgentInstance* raw = inst.get();
    (void)inst->run->set_callback([core = core_.get(), raw](graph::Instance&, const Status& st) {
      core->queue(&Core::completions, Completion{raw, st});
    });
    const uint32_t id = c.next_instance++;
    inst->id = id;
    c.instances.emplace(id, std::move(inst));
    c.agent_bytes += g.agent_bytes;
    ++c.live_instances;
    respond_u32(r, id);
  }

  static Status check_task(const ClientState& c, Task& t, uint64_t agent_bytes, const std::string& node,
                           uint8_t* memory) {
    if (t.kind == NodeKind::kHost) return {};
    std::shared_ptr<RemoteRegion> src_region, dst_region;
    OB_RETURN_IF_ERROR(check_ref(c, t.buffers.src, agent_bytes, node + " source", &src_region));
    OB_RETURN_IF_ERROR(check_ref(c, t.buffers.dst, agent_bytes, node + " destination", &dst_region));
    const bool src_host = t.buffers.src.space == 1, dst_host = t.buffers.dst.space == 1;
    if (!src_host) t.src = memory + t.buffers.src.offset;
    if (!dst_host) t.dst = memory + t.buffers.dst.offset;
    t.host = src_host ? src_region : dst_region;
    if (t.kind == NodeKind::kSha256) {
      if (src_host)
        return {Code::kInvalidArgument, node + ": sha256 reads agent memory; fetch host data with a dma node first"};
      if (t.buffers.dst.length != kDigestBytes)
        return {Code::kInvalidArgument, node + ": the digest destination is " + std::to_string(t.buffers.dst.length) +
                                            " B; sha256 writes 32"};
      return {};
    }
    if (src_host && dst_host)
      return {Code::kInvalidArgument, node + ": dma between two client buffers (one end must be agent memory)"};
    if (t.buffers.src.length != t.buffers.dst.length)
      return {Code::kInvalidArgument, node + ": dma source of " + std::to_string(t.buffers.src.length) +
                                          " B and destination of " + std::to_string(t.buffers.dst.length) + " B differ"};
    return {};
  }

  AgentInstance* find(ClientState& c, uint32_t id) {
    auto it = c.instances.find(id);
    return it == c.instances.end() ? nullptr : it->second.get();
  }

  // Per-item failures of a batch: the others went ahead.
  struct Errors {
    wire::Writer w;
    uint32_t count = 0;
    void add(uint32_t index, const Status& st) {
      w.put(index);
      w.put(static_cast<int32_t>(st.code()));
      w.put_string(st.message());
      ++count;
    }
    void respond(const ServiceRequest& r) {
      wire::Writer out;
      out.put(count);
      out.put_bytes(w.bytes);
      r.responder.respond(Buffer::copy_of(out.bytes));
    }
  };

  void submit(ServiceRequest& r, ClientState& c, wire::Reader& in) {
    uint32_t count = 0;
    if (!in.get(count)) return r.responder.fail({Code::kInvalidArgument, "submit request is truncated"});
    Errors errors;
    for (uint32_t i = 0; i < count; ++i) {
      uint32_t id = 0, writes = 0;
      if (!in.get(id) || !in.get(writes))
        return r.responder.fail({Code::kInvalidArgument, "submit request is truncated at submit " + std::to_string(i)});
      AgentInstance* inst = find(c, id);
      Status st;
      if (!inst || inst->released) st = {Code::kNotFound, "instance " + std::to_string(id) + " does not exist"};
      else if (inst->in_flight) st = {Code::kBadState, "instance " + std::to_string(id) + " is already in flight"};
      for (uint32_t w = 0; w < writes; ++w) {
        uint64_t offset = 0;
        uint32_t length = 0;
        std::span<const uint8_t> bytes;
        if (!in.get(offset) || !in.get(length) || !in.take(length, bytes))
          return r.responder.fail({Code::kInvalidArgument, "submit request is truncated in the writes of submit " +
                                                               std::to_string(i)});
        if (!st.ok()) continue;
        if (offset > inst->memory_bytes || length > inst->memory_bytes - offset)
          st = {Code::kOutOfRange, "write of " + std::to_string(length) + " B at offset " + std::to_string(offset) +
                                       " is outside instance " + std::to_string(id) + "'s " +
                                       std::to_string(inst->memory_bytes) + " B of agent memory"};
        else std::memcpy(inst->memory.get() + offset, bytes.data(), length);
      }
      if (st.ok()) {
        inst->in_flight = true;
        ++c.running;
        st = core_->executor->submit(*inst->run);
        if (!st.ok()) {
          inst->in_flight = false;
          --c.running;
        }
      }
      if (!st.ok()) errors.add(i, st);
    }
    errors.respond(r);
    if (core_->config.threads == 0) core_->pump();
  }

  void host_done(ServiceRequest& r, ClientState& c, wire::Reader& in) {
    uint32_t count = 0;
    if (!in.get(count)) return r.responder.fail({Code::kInvalidArgument, "host-done request is truncated"});
    Errors errors;
    for (uint32_t i = 0; i < count; ++i) {
      uint32_t id = 0, node = 0;
      int32_t code = 0;
      std::string message;
      if (!in.get(id) || !in.get(node) || !in.get(code) || !in.get_string(message))
        return r.responder.fail({Code::kInvalidArgument, "host-done request is truncated at result " + std::to_string(i)});
      AgentInstance* inst = find(c, id);
      if (!inst || node >= inst->host_waiting.size() || !inst->host_waiting[node]) {
        errors.add(i, {Code::kNotFound, "node " + std::to_string(node) + " of instance " + std::to_string(id) +
                                            " is not waiting for the host"});
        continue;
      }
      std::exchange(inst->host_waiting[node], std::nullopt)
          ->finish(code == 0 ? Status() : Status(static_cast<Code>(code), message));
    }
    errors.respond(r);
    if (core_->config.threads == 0) core_->pump();
  }

  void release(ServiceRequest& r, ClientState& c, wire::Reader& in) {
    uint32_t id = 0;
    AgentInstance* inst = in.get(id) ? find(c, id) : nullptr;
    r.responder.respond({});  // one-way: acknowledges, returning the credit
    if (!inst || inst->released) return;
    inst->released = true;
    for (auto& w : inst->host_waiting)
      if (w) std::exchange(w, std::nullopt)->finish({Code::kBadState, "the client released the instance"});
    if (!inst->in_flight) core_->free_instance(c, *inst);
  }

  std::shared_ptr<Core> core_;
};

}  // namespace

std::unique_ptr<Service> make_graph(GraphServiceConfig config) { return std::make_unique<GraphService>(config); }

}  // namespace outboard::services
