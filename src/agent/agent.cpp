#include "outboard/agent.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "channel/hub.h"
#include "channel/ring.h"
#include "channel/server.h"
#include "outboard/affinity.h"
#include "outboard/graph.h"
#include "outboard/log.h"
#include "services/builtin.h"
#include "util/id_map.h"

OB_LOG_MODULE("agent");

namespace outboard {

constexpr int64_t kShutdownFlushMs = 1000;  // bound on telling clients we stop

config::Options agent_options() {
  using config::Type;
  ChannelConfig c;
  AgentConfig a;
  return config::Options(
      "outboard-agent",
      {
          {"listen", Type::kString, a.listen, "host:port to listen on (port 0: any free port)"},
          {"cores", Type::kString, "", "cores to pin the agent to, e.g. \"2\" or \"2-3\""},
          {"address-file", Type::kString, "", "write the listen address to this file when ready"},
          {"max-msg-size", Type::kSize, std::to_string(c.max_msg_size), "largest message accepted"},
          {"recv-window-msgs", Type::kInt, std::to_string(c.recv_window_msgs),
           "messages a client may have in flight to the agent (credits)"},
          {"recv-window-bytes", Type::kSize, std::to_string(c.recv_window_bytes),
           "bytes a client may have in flight to the agent (raised to max-msg-size)"},
          {"max-outstanding-requests", Type::kInt, std::to_string(c.max_outstanding_requests),
           "requests the agent may have outstanding per connection"},
          {"keepalive-ms", Type::kInt, std::to_string(c.keepalive_ms), "UCX keepalive interval"},
          {"spin-us", Type::kInt, std::to_string(c.spin_us), "busy-poll time before sleeping on the event fd"},
          {"map-peer-regions", Type::kBool, c.map_peer_regions ? "true" : "false",
           "write and read a client's region on this host by CPU copies where UCX maps it here (else through UCX)"},
          {"ring-slots", Type::kInt, std::to_string(c.ring_slots),
           "slots (a power of two) of the ring per client into which a client on this host writes small frames, "
           "as the agent into the client's (0: all through UCX)"},
          {"max-region-size", Type::kSize, std::to_string(a.max_region_size),
           "largest region the memory service allocates"},
          {"tokenize-threads", Type::kInt, std::to_string(a.tokenize_threads),
           "threads tokenizing batches (0: the progress thread tokenizes; with --spin-us it then polls its core)"},
          {"tokenize-queue", Type::kInt, std::to_string(a.tokenize_queue), "batches that may wait for a tokenize thread"},
          {"max-batch-texts", Type::kInt, std::to_string(a.max_batch_texts), "texts in one tokenize batch"},
          {"max-text-bytes", Type::kSize, std::to_string(a.max_text_bytes), "longest text the tokenize service takes"},
          {"graph-threads", Type::kInt, std::to_string(a.graph_threads),
           "workers running offloaded graphs' engine nodes (0: the progress thread runs them)"},
          {"graph-max-instances", Type::kInt, std::to_string(a.graph_max_instances),
           "graph instances a connection may hold"},
          {"graph-max-memory", Type::kSize, std::to_string(a.graph_max_memory),
           "agent memory a connection's graph instances may hold"},
          {"vocab-dir", Type::kString, "", "vocabulary cache (default: $OUTBOARD_CACHE_DIR or ~/.cache/outboard)"},
      });
}

Result<AgentConfig> agent_config_from(const config::Options& o) {
  AgentConfig a;
  a.listen = o.str("listen");
  a.cores = o.str("cores");
  a.address_file = o.str("address-file");
  a.channel.max_msg_size = o.size("max-msg-size");
  a.max_region_size = o.size("max-region-size");
  a.channel.recv_window_bytes = o.size("recv-window-bytes");
  auto in_range = [&](const char* name, int64_t lo, int64_t hi) -> Result<int64_t> {
    int64_t v = o.integer(name);
    if (v < lo || v > hi)
      return Status(Code::kBadConfig, "option '" + std::string(name) + "' is " + std::to_string(v) + ", expected " +
                                          std::to_string(lo) + ".." + std::to_string(hi));
    return v;
  };
  auto positive = [&](const char* name) { return in_range(name, 1, UINT32_MAX); };
  OB_ASSIGN_OR_RETURN(int64_t window, positive("recv-window-msgs"));
  OB_ASSIGN_OR_RETURN(int64_t outstanding, positive("max-outstanding-requests"));
  OB_ASSIGN_OR_RETURN(int64_t keepalive, positive("keepalive-ms"));
  OB_ASSIGN_OR_RETURN(int64_t threads, in_range("tokenize-threads", 0, kMaxTokenizeThreads));
  OB_ASSIGN_OR_RETURN(int64_t queue, positive("tokenize-queue"));
  OB_ASSIGN_OR_RETURN(int64_t batch, positive("max-batch-texts"));
  OB_ASSIGN_OR_RETURN(int64_t graph_threads, in_range("graph-threads", 0, graph::Executor::kMaxThreads));
  OB_ASSIGN_OR_RETURN(int64_t graph_instances, positive("graph-max-instances"));
  OB_ASSIGN_OR_RETURN(int64_t ring_slots, in_range("ring-slots", 0, channel::kMaxRingSlots));
  a.graph_threads = static_cast<uint32_t>(graph_threads);
  a.graph_max_instances = static_cast<uint32_t>(graph_instances);
  a.graph_max_memory = o.size("graph-max-memory");
  a.tokenize_threads = static_cast<uint32_t>(threads);
  a.tokenize_queue = static_cast<uint32_t>(queue);
  a.max_batch_texts = static_cast<uint32_t>(batch);
  a.max_text_bytes = o.size("max-text-bytes");
  a.vocab_dir = o.str("vocab-dir");
  a.channel.recv_window_msgs = static_cast<uint32_t>(window);
  a.channel.max_outstanding_requests = static_cast<uint32_t>(outstanding);
  a.channel.keepalive_ms = static_cast<uint64_t>(keepalive);
  a.channel.spin_us = static_cast<uint32_t>(std::max<int64_t>(0, o.integer("spin-us")));
  a.channel.map_peer_regions = o.flag("map-peer-regions");
  a.channel.ring_slots = static_cast<uint32_t>(ring_slots);
  if (ring_slots != 0 && !channel::valid_ring_slots(a.channel.ring_slots))
    return Status(Code::kBadConfig,
                  "option 'ring-slots' is " + std::to_string(ring_slots) + ", expected 0 or a power of two");
  if (a.channel.max_msg_size == 0) return Status(Code::kBadConfig, "option 'max-msg-size' must be > 0");
  return a;
}

std::string default_vocab_dir() {
  if (const char* d = std::getenv("OUTBOARD_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/outboard";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/outboard";
}

// Services post to the hub, which this keeps alive until they are gone.
class HubHost final : public ServiceHost {
 public:
  void post(std::function<void()> fn) override { hub->post(std::move(fn)); }
  void add_poller(std::function<bool()> poll) override { hub->add_poller(std::move(poll)); }
  std::shared_ptr<channel::Hub> hub;
};

struct Agent::Impl {
  AgentConfig config;
  HubHost host;  // declared before services: outlives them
  std::map<std::string, std::unique_ptr<Service>> services;
  std::unique_ptr<channel::Server> server;
  std::string address;
  Clock::time_point started = Clock::now();

  // Per message: by index, no name lookup; per client, its channel and one
  // non-owning Connection, made on its first message and dropped when it
  // leaves (copying these is cheaper than shared_from_this()'s lock).
  std::vector<Service*> by_index;  // the order advertised in kWelcome
  struct Client {
    std::shared_ptr<Connection::Impl> channel;
    std::shared_ptr<Connection> peer;
  };
  IdMap<Client> clients;  // no division per lookup, as unordered_map's

  void dispatch(Connection::Impl& conn, const channel::FrameHeader& h, Buffer payload) {
    Client& client = *clients.emplace(conn.local_id, {}).first;
    if (!client.channel) {
      client.channel = conn.shared_from_this();
      client.peer = std::make_shared<Connection>(client.channel, /*owner=*/false);
    }
    const bool one_way = h.type != channel::FrameType::kRequest;
    const uint64_t id = one_way ? h.seq : h.id;
    if (h.service >= by_index.size())
      return Responder(client.channel, id, one_way)
          .fail({Code::kNotFound, "service index " + std::to_string(h.service) + " is not offered"});
    // Each request is built in the argument itself: one built first and
    // moved in is copied in 16 B moves, which stall on its fields' fresh
    // stores (measured on the 64 B echo round trip).
    Service* service = by_index[h.service];
    if (h.type == channel::FrameType::kNotify) {
      Notification notification{h.id, h.arg, 0};
      if (payload.size() == sizeof(uint64_t)) std::memcpy(&notification.length, payload.data(), sizeof(uint64_t));
      return service->handle(ServiceRequest{Buffer(), notification, Responder(client.channel, id, one_way), client.peer});
    }
    service->handle(ServiceRequest{std::move(payload), std::nullopt, Responder(client.channel, id, one_way), client.peer});
  }
};

Agent::Agent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Agent::~Agent() = default;

Result<std::unique_ptr<Agent>> Agent::create(const AgentConfig& config) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  std::unique_ptr<Agent> agent(new Agent(std::move(impl)));
  Agent* self = agent.get();
  OB_RETURN_IF_ERROR(agent->add_service(services::make_echo()));
  OB_RETURN_IF_ERROR(agent->add_service(services::make_stats([self] { return self->stats_json(); })));
  OB_RETURN_IF_ERROR(agent->add_service(services::make_memory(config.max_region_size)));
  OB_RETURN_IF_ERROR(agent->add_service(services::make_sink()));
  OB_RETURN_IF_ERROR(agent->add_service(services::make_tokenize(
      {config.tokenize_threads, config.tokenize_queue, config.max_batch_texts, config.max_text_bytes,
       config.vocab_dir.empty() ? default_vocab_dir() : config.vocab_dir})));
  OB_RETURN_IF_ERROR(agent->add_service(
      services::make_graph({config.graph_threads, config.graph_max_instances, config.graph_max_memory})));
  return agent;
}

Status Agent::add_service(std::unique_ptr<Service> service) {
  if (impl_->server) return {Code::kInvalidArgument, "service '" + service->name() + "' added after start()"};
  std::string name = service->name();
  if (!impl_->services.emplace(name, std::move(service)).second)
    return {Code::kInvalidArgument, "service '" + name + "' is already registered"};
  return {};
}

Status Agent::start() {
  if (!impl_->config.cores.empty()) {
    OB_ASSIGN_OR_RETURN(auto cores, parse_core_list(impl_->config.cores));
    OB_RETURN_IF_ERROR(pin_to_cores(cores));
  }
  std::vector<std::string> names;
  std::vector<bool> inline_ok;
  for (auto& [name, s] : impl_->services) {
    names.push_back(name);
    inline_ok.push_back(s->handles_inline());
    impl_->by_index.push_back(s.get());
  }
  Impl* impl = impl_.get();
  OB_ASSIGN_OR_RETURN(
      impl_->server,
      channel::Server::listen(
          impl_->config.listen, impl_->config.channel, names, inline_ok,
          [impl](Connection::Impl& c, const channel::FrameHeader& h, Buffer p) { impl->dispatch(c, h, std::move(p)); },
          [impl](uint32_t id) {
            for (auto& [name, s] : impl->services) s->on_disconnect(id);
            impl->clients.take(id);
          }));
  OB_ASSIGN_OR_RETURN(impl_->host.hub, channel::Hub::get(impl_->config.channel));
  for (auto& [name, s] : impl_->services) s->attach(impl_->host);
  impl_->address = impl_->server->address();
  if (!impl_->config.address_file.empty()) {
    std::string tmp = impl_->config.address_file + ".tmp";
    {
      std::ofstream out(tmp);
      out << impl_->address << "\n";
      if (!out) return {Code::kIoError, "cannot write address file '" + tmp + "'"};
    }
    if (std::rename(tmp.c_str(), impl_->config.address_file.c_str()) != 0)
      return {Code::kIoError, "cannot rename '" + tmp + "' to '" + impl_->config.address_file + "'"};
  }
  return {};
}

const std::string& Agent::address() const { return impl_->address; }

Status Agent::run() {
  if (!impl_->server) return {Code::kNotConnected, "run() before start()"};
  auto& hub = impl_->server->hub();
  channel::Lock lock(hub.mutex());
  hub.wait_until(lock, Deadline::after(std::chrono::hours(24 * 365 * 100)), impl_->config.channel.spin_us,
                 [this] { return stop_.load(std::memory_order_relaxed); });
  OB_LOG_INFO("shutting down: %zu clients connected", impl_->server->connections());
  lock.unlock();
  impl_->server->shut_down(Status(Code::kShutDown, "agent is shutting down"), Deadline::after_ms(kShutdownFlushMs));
  return {};
}

std::string Agent::stats_json() {
  nlohmann::json j;
  if (impl_->server) {
    const auto& c = impl_->server->counters();
    j["messages_in"] = c.messages_in;
    j["bytes_in"] = c.bytes_in;
    j["messages_out"] = c.messages_out;
    j["bytes_out"] = c.bytes_out;
    j["errors"] = c.errors;
    j["connects"] = c.connects;
    j["disconnects"] = c.disconnects;
    j["ring_frames_in"] = c.ring_frames_in;
    j["ring_frames_out"] = c.ring_frames_out;
    j["doorbells_out"] = c.doorbells_out;
    j["clients"] = impl_->server->connections();
  }
  std::vector<std::string> names;
  for (auto& [name, s] : impl_->services) names.push_back(name);
  j["services"] = names;
  j["cpu_ns"] = process_cpu_ns();
  j["tokenize_threads"] = impl_->config.tokenize_threads;
  j["address"] = impl_->address;
  j["pid"] = getpid();
  j["uptime_s"] = std::chrono::duration<double>(Clock::now() - impl_->started).count();
  return j.dump();
}

}  // namespace outboard
