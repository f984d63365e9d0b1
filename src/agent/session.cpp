#include "agent/session.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstring>

#include <nlohmann/json.hpp>

#include "agent/control.h"
#include "channel/access.h"
#include "channel/hub.h"
#include "outboard/log.h"
#include "services/access.h"
#include "services/builtin.h"
#include "util/id_map.h"

OB_LOG_MODULE("session");

namespace outboard::agent {

namespace {

constexpr int64_t kShutdownFlushMs = 1000;  // bound on telling clients we stop

// Services post to the hub, which this keeps alive until they are gone.
class HubHost final : public ServiceHost {
 public:
  void post(std::function<void()> fn) override { hub->post(std::move(fn)); }
  void add_poller(std::function<bool()> poll) override OB_HUB_LOCKED { hub->add_poller(std::move(poll)); }
  Status reserve_memory(uint64_t bytes, std::string_view what) override { return budget->reserve(bytes, what); }
  void release_memory(uint64_t bytes) override { budget->release(bytes); }
  Status reserve_graph_instance() override { return budget->hold(SessionBudget::Held::kGraphInstances); }
  void release_graph_instance() override { budget->drop(SessionBudget::Held::kGraphInstances); }
  bool begin_client_work(const std::atomic<bool>& stop) override {
    bool waited = false;
    const bool began = budget->begin_work(stop, waited);
    if (waited) client_quota_waits.fetch_add(1, std::memory_order_relaxed);
    return began;
  }
  void end_client_work() override { budget->end_work(); }
  std::shared_ptr<channel::Hub> hub;
  std::shared_ptr<SessionBudget> budget;
  std::atomic<uint64_t> client_quota_waits{0};  // work that waited for its client's other sessions
};

}  // namespace

struct Session::Impl {
  AgentConfig config;
  HubHost host;  // declared before services: outlives them
  std::map<std::string, std::unique_ptr<Service>> services;
  std::function<void()> on_closed;
  Clock::time_point started = Clock::now();

  // Per message: by index, no name lookup; per client, its channel and one
  // non-owning Connection, made on its first message and dropped when it
  // leaves (copying these is cheaper than shared_from_this()'s lock).
  std::vector<Service*> by_index;  // the order advertised in the welcome
  struct Client {
    std::shared_ptr<Connection::Impl> channel;
    std::shared_ptr<Connection> peer;
  };
  IdMap<Client> clients;  // no division per lookup, as unordered_map's

  void dispatch(Connection::Impl& conn, const channel::FrameHeader& h, Buffer payload) {
    Client& client = *clients.emplace(conn.local_id, {}).first;
    if (!client.channel) {
      client.channel = conn.shared_from_this();
      client.peer = channel::detail::Access::connection(client.channel, /*owner=*/false);
    }
    const bool one_way = h.type != channel::FrameType::kRequest;
    const uint64_t id = one_way ? h.seq : h.id;
    if (h.service >= by_index.size())
      return services::detail::Access::responder(client.channel, id, one_way)
          .fail({Code::kNotFound, "service index " + std::to_string(h.service) + " is not offered"});
    // Each request is built in the argument itself: one built first and
    // moved in is copied in 16 B moves, which stall on its fields' fresh
    // stores (measured on the 64 B echo round trip).
    Service* service = by_index[h.service];
    if (h.type == channel::FrameType::kNotify) {
      Notification notification{h.id, h.arg, 0};
      if (payload.size() == sizeof(uint64_t)) std::memcpy(&notification.length, payload.data(), sizeof(uint64_t));
      return service->handle(ServiceRequest{Buffer(), notification, services::detail::Access::responder(client.channel, id, one_way), client.peer});
    }
    service->handle(ServiceRequest{std::move(payload), std::nullopt, services::detail::Access::responder(client.channel, id, one_way), client.peer});
  }
};

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Session::~Session() {
  server_.reset();  // its connections go before the services they call
}

Result<std::unique_ptr<Session>> Session::create(const AgentConfig& config,
                                                 std::vector<std::unique_ptr<Service>> extra,
                                                 std::shared_ptr<SessionBudget> budget, std::function<void()> on_closed) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->host.budget = std::move(budget);
  impl->on_closed = std::move(on_closed);
  std::unique_ptr<Session> session(new Session(std::move(impl)));
  Session* self = session.get();
  Impl* im = self->impl_.get();
  extra.push_back(services::make_echo());
  extra.push_back(services::make_stats([self] { return self->stats_json(); }));
  extra.push_back(services::make_memory(config.max_region_size));
  extra.push_back(services::make_sink());
  // One set of loaded vocabularies for both directions of text.
  auto vocabularies = std::make_shared<services::Vocabularies>(services::Vocabularies::Config{
      config.vocab_dir.empty() ? default_vocab_dir() : config.vocab_dir, config.max_vocab_bytes,
      config.tokenize_cache_bytes});
  extra.push_back(services::make_tokenize(
      {config.tokenize_threads, config.tokenize_queue, config.max_batch_texts, config.max_text_bytes}, vocabularies));
  extra.push_back(services::make_detokenize(vocabularies));
  extra.push_back(services::make_graph({config.graph_threads, config.graph_max_instances, config.graph_max_memory}));
  extra.push_back(services::make_mpi(
      {config.mpi_max_pending,
       {config.mpi_unexpected_bytes, config.mpi_max_messages, config.mpi_forward_window_bytes},
       config.channel.secure}));
  extra.push_back(services::make_checkpoint(
      {config.checkpoint_root, config.checkpoint_max_dir_bytes, config.checkpoint_min_free_pct,
       config.checkpoint_max_client_bytes}));
  for (auto& s : extra) {
    std::string name = s->name();
    if (!im->services.emplace(name, std::move(s)).second)
      return Status(Code::kInvalidArgument, "service '" + name + "' is already registered");
  }
  std::vector<std::string> names;
  std::vector<bool> inline_ok;
  for (auto& [name, s] : im->services) {
    names.push_back(name);
    inline_ok.push_back(s->handles_inline());
    im->by_index.push_back(s.get());
  }
  OB_ASSIGN_OR_RETURN(
      session->server_,
      channel::Server::create(
          config.channel, names, inline_ok,
          {{"tokenize_threads", config.tokenize_threads}, {"graph_threads", config.graph_threads}},
          im->host.budget,
          [im](Connection::Impl& c, const channel::FrameHeader& h, Buffer p) { im->dispatch(c, h, std::move(p)); },
          [im](uint32_t id) {
            for (auto& [name, s] : im->services) s->on_disconnect(id);
            im->clients.take(id);
            if (im->on_closed) im->on_closed();
          }));
  OB_ASSIGN_OR_RETURN(im->host.hub, channel::Hub::get());
  for (auto& [name, s] : im->services) s->attach(im->host);
  return session;
}

void Session::adopt(net::Fd socket, std::span<const uint8_t> hello_bytes, const channel::PeerInfo& peer) {
  auto hello = channel::decode_hello(hello_bytes);
  if (!hello.ok()) {
    OB_LOG_WARN("client %s refused: %s", peer.name.c_str(), hello.status().to_string().c_str());
    channel::refuse(socket.get(), {hello.status().code(), hello.status().message()});
    if (impl_->on_closed) impl_->on_closed();
    return;
  }
  if (Status st = net::admit_peer(socket.get()); !st.ok()) {
    OB_LOG_WARN("client %s refused: %s", peer.name.c_str(), st.to_string().c_str());
    channel::refuse(socket.get(), {st.code(), st.message()});
    if (impl_->on_closed) impl_->on_closed();
    return;
  }
  (void)server_->adopt(std::move(socket), hello.value(), peer);  // a failure is the client's, logged there
}

void Session::run(const std::atomic<bool>& stop, const Status& why) {
  auto& hub = server_->hub();
  {
    channel::Lock lock(hub.mutex());
    hub.wait_until(Deadline::after(std::chrono::hours(24 * 365 * 100)), channel::spin_of(impl_->config.channel),
                   [&stop] { return stop.load(std::memory_order_relaxed); });
  }
  OB_LOG_INFO("shutting down: %zu clients connected (%s)", server_->connections(), why.to_string().c_str());
  server_->shut_down(why, Deadline::after_ms(kShutdownFlushMs));
}

std::string Session::stats_json() {
  nlohmann::json j;
  const auto& c = server_->counters();
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
  j["doorbells_by_pipe"] = c.doorbells_by_pipe;
  j["clients"] = server_->connections();
  std::vector<std::string> names;
  for (auto& [name, s] : impl_->services) names.push_back(name);
  j["services"] = names;
  j["cpu_ns"] = process_cpu_ns();
  j["tokenize_threads"] = impl_->config.tokenize_threads;
  j["tokenize_client_quota_waits"] = impl_->host.client_quota_waits.load(std::memory_order_relaxed);
  j["address"] = impl_->config.listen;
  j["isolation"] = impl_->config.isolation == Isolation::kProcess ? "process" : "none";
  j["pid"] = getpid();
  j["uptime_s"] = std::chrono::duration<double>(Clock::now() - impl_->started).count();
  return j.dump();
}

std::string encode_setup(const SessionSetup& setup) {
  nlohmann::json j;
  j["options"] = nlohmann::json::parse(agent_options(setup.config).to_json());
  j["options"]["log-level"] = std::to_string(static_cast<int>(setup.log_level));
  j["transports"] = setup.transport.transports;
  j["net_devices"] = setup.transport.net_devices;
  j["budget_slot"] = setup.budget_slot;
  j["budget_group"] = setup.budget_group;
  return j.dump();
}

Result<SessionSetup> decode_setup(std::string_view text) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("options") || !j["transports"].is_string() ||
      !j["net_devices"].is_string() || !j["budget_slot"].is_number_unsigned() ||
      !j["budget_group"].is_number_unsigned())
    return Status(Code::kBadConfig, "session setup is not the JSON the agent sends");
  auto options = agent_options();
  OB_RETURN_IF_ERROR(options.apply_json(j["options"].dump(), "the session setup"));
  SessionSetup setup;
  OB_ASSIGN_OR_RETURN(setup.config, agent_config_from(options));
  OB_ASSIGN_OR_RETURN(setup.log_level, log::parse_level(options.str("log-level")));
  setup.transport.transports = j["transports"].get<std::string>();
  setup.transport.net_devices = j["net_devices"].get<std::string>();
  setup.budget_slot = j["budget_slot"].get<uint32_t>();
  setup.budget_group = j["budget_group"].get<uint32_t>();
  return setup;
}

}  // namespace outboard::agent

namespace outboard {

namespace {
std::atomic<bool>* g_session_stop = nullptr;
void on_session_signal(int) {
  if (g_session_stop) g_session_stop->store(true, std::memory_order_relaxed);
}

// A session process from its setup to its end; an error stops it before
// it serves anyone (the listener then sees its control socket close).
Status serve_session(net::Fd control) {
  using namespace agent;
  std::vector<uint8_t> buf(kMaxControlMessage);
  // The setup comes first, at once: the agent sends it right after starting us.
  pollfd p{control.get(), POLLIN, 0};
  if (::poll(&p, 1, 10'000) != 1) return {Code::kTimedOut, "no setup from the agent"};
  net::Fd budget_fd;
  auto n = net::recv_message(control.get(), buf, &budget_fd);
  if (!n.ok() || n.value() < 1 || buf[0] != static_cast<uint8_t>(ControlKind::kConfig))
    return {Code::kInvalidArgument, "the agent's first message is not a setup"};
  OB_ASSIGN_OR_RETURN(SessionSetup setup, decode_setup({reinterpret_cast<const char*>(buf.data()) + 1, n.value() - 1}));
  log::set_level(setup.log_level);
  std::atomic<bool> stop{false};
  Status end_reason(Code::kShutDown, "agent is shutting down");
  g_session_stop = &stop;
  struct sigaction sa {};
  sa.sa_handler = on_session_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  OB_ASSIGN_OR_RETURN(auto hub, channel::Hub::get(setup.transport));
  // UCX's TCP listeners answer only the hosts of this session's clients (and of the agents it dials).
  if (setup.transport.transports.find("tcp") != std::string::npos) OB_RETURN_IF_ERROR(net::guard_listeners());
  const int fd = control.get();
  OB_ASSIGN_OR_RETURN(auto budget, SessionBudget::attach(budget_fd.release(), setup.config.max_memory,
                                                         budget_quotas(setup.config), setup.config.max_connections,
                                                         setup.budget_slot, setup.budget_group));
  OB_ASSIGN_OR_RETURN(auto session, Session::create(setup.config, {}, std::move(budget),
                                                    [fd] { (void)net::send_message(fd, encode_closed()); }));
  Session& s = *session;
  ::fcntl(fd, F_SETFL, O_NONBLOCK);
  auto on_control = [&]() OB_HUB_LOCKED {
    for (;;) {
      net::Fd client;
      auto got = net::recv_message(fd, buf, &client);
      if (!got.ok() && got.status().code() == Code::kAgain) return;
      if (!got.ok() || got.value() == 0) {
        // The listener closes a session once its last client has left, or
        // it died: in either case no client is left to tell anything.
        if (s.connections() != 0)
          OB_LOG_WARN("session %d: the agent is gone; ending with %zu clients", static_cast<int>(getpid()),
                      s.connections());
        std::_Exit(0);
      }
      const auto kind = static_cast<ControlKind>(buf[0]);
      if (kind == ControlKind::kEnd || kind == ControlKind::kRevoked) {
        if (kind == ControlKind::kRevoked)
          end_reason = Status(Code::kAuthentication, "the agent no longer accepts a certificate this session's clients "
                                                     "came with (revoked by its --crl, or expired): session ended");
        s.hub().unwatch(fd);
        stop.store(true, std::memory_order_relaxed);
        return;
      }
      if (buf[0] != static_cast<uint8_t>(ControlKind::kAdopt) || !client.valid()) continue;
      auto adopt = decode_adopt({buf.data() + 1, got.value() - 1});
      if (!adopt.ok()) {
        (void)net::send_message(fd, encode_closed());
        continue;
      }
      s.adopt(std::move(client), adopt->hello, adopt->peer);
    }
  };
  {
    channel::Lock lock(s.hub().mutex());
    OB_RETURN_IF_ERROR(s.hub().watch(fd, on_control));
  }
  s.run(stop, end_reason);
  g_session_stop = nullptr;
  return {};
}

}  // namespace

int run_agent_session(int control_fd) {
  net::Fd control(control_fd);
  // Die with the agent even while busy, where the control socket's end
  // would be noticed only at the next round.
  const pid_t agent_pid = ::getppid();
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != agent_pid) return 1;
  if (Status st = serve_session(std::move(control)); !st.ok()) {
    OB_LOG_ERR("session %d: %s", static_cast<int>(getpid()), st.to_string().c_str());
    return 1;
  }
  return 0;
}

}  // namespace outboard
