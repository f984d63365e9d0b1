#include "outboard/agent.h"

#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "agent/listener.h"
#include "agent/process_sessions.h"
#include "agent/session.h"
#include "transport/secure.h"
#include "channel/ring.h"
#include "outboard/affinity.h"
#include "outboard/graph.h"
#include "outboard/log.h"
#include "util/budget.h"
#include "util/poller.h"

OB_LOG_MODULE("agent");

namespace outboard {

config::Options agent_options(const AgentConfig& a) {
  using config::Type;
  const ChannelConfig& c = a.channel;
  return config::Options(
      "outboard-agent",
      {
          {"listen", Type::kString, a.listen,
           "host:port to listen on (port 0: any free port); wider than loopback only with keys, or --insecure"},
          {"insecure", Type::kBool, a.insecure ? "true" : "false",
           "allow a --listen wider than loopback without keys: anyone who reaches the port can use the agent, "
           "and its clients' traffic crosses the network in clear"},
          {"secure", Type::kString, c.secure.mode == SecureConfig::Mode::kAlways ? "always" : "auto",
           "with keys, TLS for: auto, clients of other hosts (this host's, at any of its addresses, either way); "
           "always, every client"},
          {"cert", Type::kString, c.secure.cert, "the agent's certificate chain (PEM), for TLS with --key and --ca"},
          {"key", Type::kString, c.secure.key, "its private key (PEM, mode 600)"},
          {"ca", Type::kString, c.secure.ca, "the CA that clients' certificates must chain to (PEM)"},
          {"crl", Type::kString, c.secure.crl,
           "certificates revoked by the CA (PEM; outboard keys revoke): clients showing one are refused; read "
           "again when it changes"},
          {"psk-file", Type::kString, c.secure.psk_file,
           "a TLS 1.3 pre-shared key instead of certificates: one line identity:64 hex digits (mode 600)"},
          {"rekey-bytes", Type::kSize, std::to_string(c.secure.rekey_bytes),
           "bytes the agent seals for a client under one key before it moves to the next"},
          {"tls-session-lifetime-s", Type::kInt, std::to_string(c.secure.session_lifetime_s),
           "certificates: seconds a client may resume its TLS session without them (0: a full handshake each "
           "connect); a certificate expired or replaced meanwhile is noticed at most this much later"},
          {"isolation", Type::kString, a.isolation == Isolation::kProcess ? "process" : "none",
           "process: the clients of each session token in a process of their own (a client's bytes harm at most "
           "its session); none: every client in the agent's process"},
          {"max-connections", Type::kInt, std::to_string(a.max_connections),
           "connections the agent serves at once, handshakes included"},
          {"max-client-connections", Type::kInt, std::to_string(a.max_client_connections),
           "connections one TLS client identity (certificate subject, PSK identity) holds at once, of "
           "--max-connections"},
          {"max-handshakes", Type::kInt, std::to_string(a.max_handshakes),
           "connections that have not sent their hello yet"},
          {"handshake-timeout-ms", Type::kInt, std::to_string(a.handshake_timeout_ms),
           "time a new connection has to send its hello"},
          {"cores", Type::kString, a.cores, "cores to pin the agent to, e.g. \"2\" or \"2-3\""},
          {"address-file", Type::kString, a.address_file, "write the listen address to this file when ready"},
          {"max-msg-size", Type::kSize, std::to_string(c.max_msg_size), "largest message accepted"},
          {"recv-window-msgs", Type::kInt, std::to_string(c.recv_window_msgs),
           "messages a client may have in flight to the agent (credits)"},
          {"recv-window-bytes", Type::kSize, std::to_string(c.recv_window_bytes),
           "bytes a client may have in flight to the agent (raised to max-msg-size)"},
          {"max-outstanding-requests", Type::kInt, std::to_string(c.max_outstanding_requests),
           "requests the agent may have outstanding per connection"},
          {"keepalive-ms", Type::kInt, std::to_string(c.keepalive_ms),
           "TCP keepalive of each client's bootstrap socket (whole seconds; a client process that dies is seen at once)"},
          {"spin-us", Type::kInt, std::to_string(c.spin_us), "the most a wait busy-polls before sleeping on the event fd"},
          {"adaptive-spin", Type::kBool, c.adaptive_spin ? "true" : "false",
           "poll only while recent answers came within --spin-us (false: always poll that long)"},
          {"map-peer-regions", Type::kBool, c.map_peer_regions ? "true" : "false",
           "write and read a client's region on this host by CPU copies where UCX maps it here (else through UCX)"},
          {"ring-slots", Type::kInt, std::to_string(c.ring_slots),
           "slots (a power of two) of the ring per client into which a client on this host writes small frames, "
           "as the agent into the client's (0: all through UCX)"},
          {"max-region-size", Type::kSize, std::to_string(a.max_region_size),
           "largest region the memory service allocates"},
          {"max-memory", Type::kSize, std::to_string(a.max_memory),
           "agent memory held for clients (regions, graph instances), all sessions together"},
          {"tokenize-threads", Type::kInt, std::to_string(a.tokenize_threads),
           "threads tokenizing batches (0: the progress thread tokenizes; with --spin-us it then polls its core)"},
          {"tokenize-queue", Type::kInt, std::to_string(a.tokenize_queue), "batches that may wait for a tokenize thread"},
          {"max-batch-texts", Type::kInt, std::to_string(a.max_batch_texts), "texts in one tokenize batch"},
          {"max-text-bytes", Type::kSize, std::to_string(a.max_text_bytes), "longest text the tokenize service takes"},
          {"max-vocab-bytes", Type::kSize, std::to_string(a.max_vocab_bytes),
           "largest vocabulary a client uploads (one the vocabulary directory lacks)"},
          {"tokenize-cache-bytes", Type::kSize, std::to_string(a.tokenize_cache_bytes),
           "pre-token cache (piece -> ids) of each vocabulary a session loads, shared by its clients (0: none)"},
          {"graph-threads", Type::kInt, std::to_string(a.graph_threads),
           "workers running offloaded graphs' engine nodes (0: the progress thread runs them)"},
          {"graph-max-instances", Type::kInt, std::to_string(a.graph_max_instances),
           "graph instances a connection may hold"},
          {"max-session-memory", Type::kSize, std::to_string(a.max_session_memory),
           "of --max-memory, what one session (a client's connections) may hold: one cannot starve the others"},
          {"max-client-memory", Type::kSize, std::to_string(a.max_client_memory),
           "of --max-memory, what the sessions of one TLS identity (certificate subject, PSK identity) hold "
           "together"},
          {"max-client-tokenize-threads", Type::kInt, std::to_string(a.max_client_tokenize_threads),
           "tokenize threads the sessions of one TLS identity keep busy at once, waiting beyond: a tenant with more "
           "sessions gets no more of the agent's cores (0: as many as --tokenize-threads, at least 1)"},
          {"max-client-requests", Type::kInt, std::to_string(a.max_client_requests),
           "requests the connections of one TLS identity have outstanding together (each also at most "
           "--max-outstanding-requests): a tenant with more connections gets no more of them"},
          {"max-client-graph-instances", Type::kInt, std::to_string(a.max_client_graph_instances),
           "graph instances the connections of one TLS identity hold together (each also at most "
           "--graph-max-instances)"},
          {"graph-max-memory", Type::kSize, std::to_string(a.graph_max_memory),
           "agent memory a connection's graph instances may hold"},
          {"mpi-max-pending", Type::kInt, std::to_string(a.mpi_max_pending),
           "collectives one MPI rank may have waiting for its communicator's other ranks"},
          {"mpi-unexpected-bytes", Type::kSize, std::to_string(a.mpi_unexpected_bytes),
           "MPI messages sent before their receive was posted that the agent buffers for one job (beyond it, a "
           "send waits for its receive)"},
          {"mpi-max-messages", Type::kInt, std::to_string(a.mpi_max_messages),
           "point-to-point sends and receives one MPI rank may have unmatched"},
          {"mpi-forward-window-bytes", Type::kSize, std::to_string(a.mpi_forward_window_bytes),
           "MPI sends forwarded to another agent (whose ranks receive them) and not yet answered, per agent (beyond "
           "it, sends wait in their ranks' memory)"},
          {"checkpoint-root", Type::kString, a.checkpoint_root,
           "directory the checkpoint service writes clients' checkpoints in (each client names a directory inside "
           "it); empty: the service refuses every directory"},
          {"checkpoint-max-dir-bytes", Type::kSize, std::to_string(a.checkpoint_max_dir_bytes),
           "bytes one checkpoint directory may hold, its kept checkpoints and the one being written (0: no limit)"},
          {"checkpoint-max-client-bytes", Type::kSize, std::to_string(a.checkpoint_max_client_bytes),
           "bytes the checkpoints of one TLS client identity may hold, in all its directories (its own under "
           "--checkpoint-root) with the one being written (0: no limit)"},
          {"checkpoint-min-free-pct", Type::kInt, std::to_string(a.checkpoint_min_free_pct),
           "percent of the checkpoint filesystem a checkpoint must leave free, for the host and other clients "
           "(0: none; a save may then fill the disk and fail alone)"},
          {"vocab-dir", Type::kString, a.vocab_dir,
           "vocabulary cache, the only place the tokenize service opens names in (default: $OUTBOARD_CACHE_DIR or "
           "~/.cache/outboard)"},
      });
}

Status init_keys(const std::string& dir, const std::string& agent_name, const std::vector<std::string>& agent_hosts) {
  return secure::init_keys(dir, agent_name, agent_hosts);
}

Status issue_keys(const std::string& dir, const std::string& name, bool agent,
                  const std::vector<std::string>& agent_hosts) {
  return secure::issue_keys(dir, name, agent ? secure::Role::kAgent : secure::Role::kClient, agent_hosts);
}

Status revoke_certificate(const std::string& dir, const std::string& cert_file) {
  return secure::revoke(dir, cert_file);
}

Result<SecureConfig> secure_config_from(const config::Options& o) {
  SecureConfig c;
  const std::string mode = o.str("secure");
  if (mode == "always") c.mode = SecureConfig::Mode::kAlways;
  else if (mode != "auto")
    return Status(Code::kBadConfig, "option 'secure' is '" + mode + "', expected auto or always");
  c.cert = o.str("cert");
  c.key = o.str("key");
  c.ca = o.str("ca");
  c.psk_file = o.str("psk-file");
  c.crl = o.str("crl");
  c.rekey_bytes = o.size("rekey-bytes");
  if (c.rekey_bytes == 0) return Status(Code::kBadConfig, "option 'rekey-bytes' must be > 0");
  const int64_t lifetime = o.integer("tls-session-lifetime-s");
  if (lifetime < 0 || lifetime > kMaxTlsSessionLifetimeS)
    return Status(Code::kBadConfig, "option 'tls-session-lifetime-s' is " + std::to_string(lifetime) +
                                        ", expected 0.." + std::to_string(kMaxTlsSessionLifetimeS) +
                                        " (TLS 1.3's limit, 7 days)");
  c.session_lifetime_s = static_cast<uint32_t>(lifetime);
  if (c.mode == SecureConfig::Mode::kAlways && !secure::has_keys(c))
    return Status(Code::kBadConfig, "--secure always needs keys: --cert, --key and --ca, or --psk-file");
  return c;
}

Result<AgentConfig> agent_config_from(const config::Options& o) {
  AgentConfig a;
  a.listen = o.str("listen");
  a.insecure = o.flag("insecure");
  OB_ASSIGN_OR_RETURN(a.channel.secure, secure_config_from(o));
  if (o.str("isolation") == "process") a.isolation = Isolation::kProcess;
  else if (o.str("isolation") == "none") a.isolation = Isolation::kNone;
  else return Status(Code::kBadConfig, "option 'isolation' is '" + o.str("isolation") + "', expected process or none");
  a.cores = o.str("cores");
  a.address_file = o.str("address-file");
  a.channel.max_msg_size = o.size("max-msg-size");
  a.max_region_size = o.size("max-region-size");
  a.max_memory = o.size("max-memory");
  a.max_session_memory = o.size("max-session-memory");
  a.max_client_memory = o.size("max-client-memory");
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
  OB_ASSIGN_OR_RETURN(int64_t client_threads, in_range("max-client-tokenize-threads", 0, kMaxTokenizeThreads));
  OB_ASSIGN_OR_RETURN(int64_t queue, positive("tokenize-queue"));
  OB_ASSIGN_OR_RETURN(int64_t batch, positive("max-batch-texts"));
  OB_ASSIGN_OR_RETURN(int64_t graph_threads, in_range("graph-threads", 0, graph::Executor::kMaxThreads));
  OB_ASSIGN_OR_RETURN(int64_t graph_instances, positive("graph-max-instances"));
  OB_ASSIGN_OR_RETURN(int64_t mpi_pending, positive("mpi-max-pending"));
  OB_ASSIGN_OR_RETURN(int64_t mpi_messages, positive("mpi-max-messages"));
  OB_ASSIGN_OR_RETURN(int64_t min_free_pct, in_range("checkpoint-min-free-pct", 0, 90));
  OB_ASSIGN_OR_RETURN(int64_t ring_slots, in_range("ring-slots", 0, channel::kMaxRingSlots));
  OB_ASSIGN_OR_RETURN(int64_t max_connections, positive("max-connections"));
  OB_ASSIGN_OR_RETURN(int64_t max_handshakes, positive("max-handshakes"));
  OB_ASSIGN_OR_RETURN(int64_t max_client_connections, positive("max-client-connections"));
  a.max_client_connections = static_cast<uint32_t>(max_client_connections);
  OB_ASSIGN_OR_RETURN(int64_t client_requests, positive("max-client-requests"));
  a.max_client_requests = static_cast<uint32_t>(client_requests);
  OB_ASSIGN_OR_RETURN(int64_t client_instances, positive("max-client-graph-instances"));
  a.max_client_graph_instances = static_cast<uint32_t>(client_instances);
  OB_ASSIGN_OR_RETURN(a.handshake_timeout_ms, in_range("handshake-timeout-ms", 1, INT32_MAX));
  a.max_connections = static_cast<uint32_t>(max_connections);
  a.max_handshakes = static_cast<uint32_t>(max_handshakes);
  a.graph_threads = static_cast<uint32_t>(graph_threads);
  a.graph_max_instances = static_cast<uint32_t>(graph_instances);
  a.graph_max_memory = o.size("graph-max-memory");
  a.mpi_max_pending = static_cast<uint32_t>(mpi_pending);
  a.mpi_max_messages = static_cast<uint32_t>(mpi_messages);
  a.mpi_unexpected_bytes = o.size("mpi-unexpected-bytes");
  a.mpi_forward_window_bytes = o.size("mpi-forward-window-bytes");
  a.tokenize_threads = static_cast<uint32_t>(threads);
  a.max_client_tokenize_threads = static_cast<uint32_t>(client_threads);
  a.tokenize_queue = static_cast<uint32_t>(queue);
  a.max_batch_texts = static_cast<uint32_t>(batch);
  a.max_text_bytes = o.size("max-text-bytes");
  a.max_vocab_bytes = o.size("max-vocab-bytes");
  a.vocab_dir = o.str("vocab-dir");
  a.tokenize_cache_bytes = o.size("tokenize-cache-bytes");
  a.checkpoint_root = o.str("checkpoint-root");
  a.checkpoint_max_dir_bytes = o.size("checkpoint-max-dir-bytes");
  a.checkpoint_max_client_bytes = o.size("checkpoint-max-client-bytes");
  a.checkpoint_min_free_pct = static_cast<uint32_t>(min_free_pct);
  a.channel.recv_window_msgs = static_cast<uint32_t>(window);
  a.channel.max_outstanding_requests = static_cast<uint32_t>(outstanding);
  a.channel.keepalive_ms = static_cast<uint64_t>(keepalive);
  a.channel.spin_us = static_cast<uint32_t>(std::max<int64_t>(0, o.integer("spin-us")));
  a.channel.adaptive_spin = o.flag("adaptive-spin");
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


namespace {

constexpr int64_t kSessionsShutdownMs = 3000;  // a session's clients are told within 1 s; then it exits

// Hands clients to the one session in this process (Isolation::kNone).
class InProcessSessions final : public agent::SessionDispatch {
 public:
  explicit InProcessSessions(agent::Session& session) : session_(session) {}
  void hand_off(net::Fd socket, const channel::Hello&, std::vector<uint8_t> hello,
                const channel::PeerInfo& peer) override {
    auto fd = std::make_shared<net::Fd>(std::move(socket));  // posted work must be copyable
    session_.hub().post([this, fd, hello = std::move(hello), peer] { session_.adopt(std::move(*fd), hello, peer); });
  }

 private:
  agent::Session& session_;
};

Result<std::string> own_executable() {
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return Status(Code::kIoError, std::string("readlink /proc/self/exe: ") + std::strerror(errno));
  return std::string(path, static_cast<size_t>(n));
}

}  // namespace

struct Agent::Impl {
  AgentConfig config;
  std::vector<std::unique_ptr<Service>> extra;  // Isolation::kNone
  std::optional<net::Poller> poller;
  std::unique_ptr<agent::SessionDispatch> dispatch;
  agent::ProcessSessions* processes = nullptr;  // `dispatch`, with Isolation::kProcess
  std::unique_ptr<agent::Listener> listener;
  std::unique_ptr<agent::Session> session;  // Isolation::kNone: the one, in this process
  std::thread listener_thread;              // Isolation::kNone: the listener's loop
  net::Fd wake;                             // eventfd in the poller, written by stop()
  std::string address;
  Clock::time_point started = Clock::now();
};

Agent::Agent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Agent::~Agent() {
  stop();
  if (impl_->listener_thread.joinable()) impl_->listener_thread.join();
  impl_->listener.reset();
  impl_->dispatch.reset();
  impl_->session.reset();
}

Result<std::unique_ptr<Agent>> Agent::create(const AgentConfig& config) {
  OB_ASSIGN_OR_RETURN(auto where, net::parse_host_port(config.listen));
  if (!secure::has_keys(config.channel.secure) && !net::is_loopback(where.host)) {
    if (!config.insecure)
      return Status(Code::kBadConfig, "--listen " + config.listen +
                                          " is wider than loopback and the agent has no keys: give --cert, --key "
                                          "and --ca (or --psk-file), or pass --insecure to let anyone who reaches "
                                          "it connect, in clear");
    OB_LOG_WARN("--insecure: listening on %s without keys; anyone who reaches it can use this agent, and its "
                "clients' traffic crosses the network in clear", config.listen.c_str());
  }
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  return std::unique_ptr<Agent>(new Agent(std::move(impl)));
}

Status Agent::add_service(std::unique_ptr<Service> service) {
  if (impl_->listener) return {Code::kInvalidArgument, "service '" + service->name() + "' added after start()"};
  if (impl_->config.isolation != Isolation::kNone)
    return {Code::kUnsupported, "service '" + service->name() +
                                    "': a session process runs the built-in services only (use Isolation::kNone)"};
  for (const auto& s : impl_->extra)
    if (s->name() == service->name())
      return {Code::kInvalidArgument, "service '" + service->name() + "' is already registered"};
  impl_->extra.push_back(std::move(service));
  return {};
}

Status Agent::start() {
  Impl& im = *impl_;
  // A descriptor per connection and one per session: take all the kernel
  // allows this user (a soft limit of 1024 would stop the agent at ~500
  // sessions); --max-connections is the agent's own bound.
  if (rlimit nofile{}; ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  if (!im.config.cores.empty()) {
    OB_ASSIGN_OR_RETURN(auto cores, parse_core_list(im.config.cores));
    OB_RETURN_IF_ERROR(pin_to_cores(cores));  // session processes inherit it
  }
  OB_ASSIGN_OR_RETURN(auto where, net::parse_host_port(im.config.listen));
  OB_ASSIGN_OR_RETURN(auto poller, net::Poller::create());
  im.poller.emplace(std::move(poller));
  im.wake = net::Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!im.wake.valid()) return {Code::kIoError, std::string("eventfd: ") + std::strerror(errno)};
  OB_RETURN_IF_ERROR(im.poller->add(im.wake.get(), [fd = im.wake.get()] {
    uint64_t n;
    [[maybe_unused]] ssize_t r = ::read(fd, &n, sizeof n);
  }));
  wake_fd_ = im.wake.get();
  agent::ListenerLimits limits{im.config.max_connections, im.config.max_handshakes, im.config.handshake_timeout_ms};
  auto closed = [&listener_slot = im.listener](size_t n) { listener_slot->closed(n); };
  if (im.config.isolation == Isolation::kNone) {
    OB_ASSIGN_OR_RETURN(auto budget, SessionBudget::create(im.config.max_memory, agent::budget_quotas(im.config), 1));
    OB_ASSIGN_OR_RETURN(im.session, agent::Session::create(im.config, std::move(im.extra), std::move(budget),
                                                           [closed] { closed(1); }));
    im.dispatch = std::make_unique<InProcessSessions>(*im.session);
  } else {
    std::string program = im.config.session_program;
    if (program.empty()) {
      OB_ASSIGN_OR_RETURN(program, own_executable());
      // Another program embedding the agent would be started again, whole.
      if (program.substr(program.rfind('/') + 1) != "outboard-agent")
        return {Code::kBadConfig, "this program (" + program + ") is not outboard-agent: set AgentConfig::"
                                  "session_program to one, or use Isolation::kNone"};
    }
    if (::access(program.c_str(), X_OK) != 0)
      return {Code::kBadConfig, "session program '" + program + "' is not executable: " + std::strerror(errno)};
    OB_ASSIGN_OR_RETURN(auto budget, SessionBudget::create(im.config.max_memory, agent::budget_quotas(im.config),
                                                           im.config.max_connections));
    auto processes = std::make_unique<agent::ProcessSessions>(im.config, program, std::move(budget), *im.poller, closed);
    im.processes = processes.get();
    im.dispatch = std::move(processes);
  }
  std::shared_ptr<secure::Context> tls;
  if (secure::has_keys(im.config.channel.secure)) {
    OB_ASSIGN_OR_RETURN(tls, secure::Context::create(im.config.channel.secure, secure::Role::kAgent));
  }
  OB_ASSIGN_OR_RETURN(im.listener, agent::Listener::create(where, limits, *im.poller, *im.dispatch, std::move(tls),
                                                           im.config.channel.secure.mode));
  im.address = im.listener->address();
  im.config.listen = im.address;  // sessions report the port actually bound
  if (!im.config.address_file.empty()) {
    std::string tmp = im.config.address_file + ".tmp";
    {
      std::ofstream out(tmp);
      out << im.address << "\n";
      if (!out) return {Code::kIoError, "cannot write address file '" + tmp + "'"};
    }
    if (std::rename(tmp.c_str(), im.config.address_file.c_str()) != 0)
      return {Code::kIoError, "cannot rename '" + tmp + "' to '" + im.config.address_file + "'"};
  }
  return {};
}

const std::string& Agent::address() const { return impl_->address; }

void Agent::stop() {
  stop_.store(true, std::memory_order_relaxed);
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t r = ::write(wake_fd_, &one, sizeof one);
  }
  if (impl_->session) impl_->session->hub().wake();  // asleep with no deadline to watch: up to a second
}

Status Agent::run() {
  Impl& im = *impl_;
  if (!im.listener) return {Code::kNotConnected, "run() before start()"};
  auto listen_until_stopped = [this, &im] {
    while (!stop_.load(std::memory_order_relaxed)) {
      im.poller->wait(im.listener->tick());
      if (im.processes) im.processes->reap();
    }
  };
  if (im.session) {
    im.listener_thread = std::thread(listen_until_stopped);
    im.session->run(stop_);
    im.listener_thread.join();
    return {};
  }
  listen_until_stopped();
  OB_LOG_INFO("shutting down: %zu connections", im.listener->connections());
  im.processes->shut_down(Deadline::after_ms(kSessionsShutdownMs));
  return {};
}

std::string Agent::stats_json() {
  nlohmann::json j;
  const Impl& im = *impl_;
  if (im.listener) {
    const auto& c = im.listener->counters();
    j["connections"] = im.listener->connections();
    j["accepted"] = c.accepted;
    j["handed_off"] = c.handed_off;
    j["refused_limits"] = c.refused_limits;
    j["refused_hello"] = c.refused_hello;
    j["refused_tls"] = c.refused_tls;
    j["resumed_tls"] = c.resumed_tls;
    j["keys_reloaded"] = c.keys_reloaded;
    j["handshake_timeouts"] = c.handshake_timeouts;
    j["accept_errors"] = c.accept_errors;
  }
  if (im.processes) j["sessions"] = im.processes->sessions();
  j["address"] = im.address;
  j["pid"] = getpid();
  j["uptime_s"] = std::chrono::duration<double>(Clock::now() - im.started).count();
  return j.dump();
}

}  // namespace outboard
