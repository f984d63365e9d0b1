// The offload agent: hosts services behind a channel listener. The same
// native code runs as `outboard-agent` on a DPU's Arm cores or a spare core.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "outboard/channel.h"
#include "outboard/config.h"
#include "outboard/service.h"
#include "outboard/tokenizer.h"

namespace outboard {

/// Most workers --tokenize-threads may ask for.
inline constexpr uint32_t kMaxTokenizeThreads = 256;

/// How clients are kept apart.
enum class Isolation {
  /// Each session (the clients of one token) runs in a process of its own,
  /// started by the agent for it: a client's bytes can harm at most its own
  /// session, and the agent's listening process never touches UCX.
  kProcess,
  /// Every client is served in the agent's own process (one UCX worker):
  /// for embedding trusted services, and tests. A client that sends hostile
  /// bytes may take the agent down with it.
  kNone,
};

/// The agent's --spin-us by default: longer than a client's (ChannelConfig::
/// spin_us), since its cores (a DPU's Arm cores) are there to serve, where a
/// client's are what the offload frees.
inline constexpr uint32_t kAgentSpinUs = 200;

struct AgentConfig {
  std::string listen = "127.0.0.1:0";  ///< --listen host:port (port 0: any free port)
  /// --insecure: allow a --listen wider than loopback without keys
  /// (channel.secure): anyone who reaches the port can use the agent, in clear.
  bool insecure = false;
  Isolation isolation = Isolation::kProcess;  ///< --isolation process|none
  uint32_t max_connections = 4096;           ///< --max-connections: served and in their handshake, agent-wide
  uint32_t max_handshakes = 64;              ///< --max-handshakes: connections that have not sent their hello yet
  /// --max-client-connections: connections one TLS identity (a certificate's
  /// subject, a PSK's identity) holds at once, so that one tenant cannot
  /// take every one of --max-connections (process isolation).
  uint32_t max_client_connections = 512;
  int64_t handshake_timeout_ms = 5000;       ///< --handshake-timeout-ms: the time a client has to send its hello
  /// The program a session process runs (`outboard-agent`); empty: this
  /// process's own executable, which must then be outboard-agent.
  std::string session_program;
  ChannelConfig channel{.spin_us = kAgentSpinUs};
  std::string cores;                   ///< --cores "0,2-3": pin the agent; empty: no pinning
  std::string address_file;            ///< --address-file: written once listening
  uint64_t max_region_size = 1ull << 30;  ///< --max-region-size for the memory service
  /// --max-memory: agent memory held for clients (regions, graph instances),
  /// all sessions together.
  uint64_t max_memory = 8ull << 30;
  /// --max-session-memory: of it, what one session may hold (with --isolation none: all clients).
  uint64_t max_session_memory = 2ull << 30;
  /// --max-client-memory: of it, what one TLS identity's sessions hold together.
  uint64_t max_client_memory = 2ull << 30;
  /// --max-client-tokenize-threads: tokenize workers one TLS identity's
  /// sessions keep busy at once, so that a tenant opening more sessions
  /// gets no more of the agent's cores; 0: as many as one session has
  /// (--tokenize-threads, at least 1).
  uint32_t max_client_tokenize_threads = 0;
  /// --max-client-requests: requests one TLS identity's connections have
  /// outstanding together (each connection also at most
  /// channel.max_outstanding_requests).
  uint32_t max_client_requests = 1u << 16;
  /// --max-client-graph-instances: graph instances one TLS identity's
  /// connections hold together (each also at most graph_max_instances).
  uint32_t max_client_graph_instances = 1u << 16;
  // The tokenize service.
  uint32_t tokenize_threads = 1;          ///< --tokenize-threads: workers tokenizing batches (0: the progress thread)
  uint32_t tokenize_queue = 1024;         ///< --tokenize-queue: batches waiting for a worker
  uint32_t max_batch_texts = 4096;        ///< --max-batch-texts: texts per batch
  uint64_t max_text_bytes = 16ull << 20;  ///< --max-text-bytes: a longer text fails alone
  uint64_t max_vocab_bytes = 64ull << 20; ///< --max-vocab-bytes: largest vocabulary a client uploads
  std::string vocab_dir;                  ///< --vocab-dir; empty: default_vocab_dir()
  uint64_t tokenize_cache_bytes = kDefaultPieceCacheBytes;  ///< --tokenize-cache-bytes: per vocabulary (0: none)
  // The graph service.
  uint32_t graph_threads = 0;               ///< --graph-threads: workers for engine nodes (0: the progress thread)
  uint32_t graph_max_instances = 1u << 16;  ///< --graph-max-instances per connection
  uint64_t graph_max_memory = 1ull << 30;   ///< --graph-max-memory: agent memory per connection
  // The mpi service.
  uint32_t mpi_max_pending = 256;  ///< --mpi-max-pending: a rank's collectives waiting for its other ranks
  uint64_t mpi_unexpected_bytes = 64ull << 20;  ///< --mpi-unexpected-bytes: unexpected messages buffered per job
  uint32_t mpi_max_messages = 4096;  ///< --mpi-max-messages: a rank's sends and receives unmatched
  /// --mpi-forward-window-bytes: sends forwarded to another agent, unanswered, per agent
  uint64_t mpi_forward_window_bytes = 16ull << 20;
  // The checkpoint service.
  std::string checkpoint_root;  ///< --checkpoint-root: where clients' checkpoints may go; empty: nowhere
  uint64_t checkpoint_max_dir_bytes = 0;  ///< --checkpoint-max-dir-bytes: one directory's checkpoints; 0: no limit
  /// --checkpoint-max-client-bytes: the checkpoints of one TLS identity, in all its directories; 0: no limit
  uint64_t checkpoint_max_client_bytes = 0;
  /// --checkpoint-min-free-pct: of the checkpoint filesystem, what a checkpoint must leave free (for
  /// the host, and for other clients' checkpoints).
  uint32_t checkpoint_min_free_pct = 2;
};

/// Where `outboard vocab fetch` caches vocabularies: $OUTBOARD_CACHE_DIR,
/// else $XDG_CACHE_HOME/outboard, else ~/.cache/outboard.
std::string default_vocab_dir();

/// The agent's option table (shared by outboard-agent and tests), with
/// `defaults` as the defaults.
config::Options agent_options(const AgentConfig& defaults = {});
/// A small CA (Ed25519) in `dir` with an empty CRL (crl.pem), and signed
/// by it an agent certificate named `agent_name` (for TLS servers) listing
/// `agent_hosts` (none: localhost, 127.0.0.1, ::1, this host's name and
/// IPv4 addresses) and a client certificate (for TLS clients), plus a PSK
/// file; private keys mode 600. Never overwrites a file.
Status init_keys(const std::string& dir, const std::string& agent_name,
                 const std::vector<std::string>& agent_hosts = {});
/// DIR/NAME.pem and NAME.key, signed by DIR's CA: a client's certificate
/// named NAME, or with `agent` an agent's listing `agent_hosts` (as above).
Status issue_keys(const std::string& dir, const std::string& name, bool agent,
                  const std::vector<std::string>& agent_hosts = {});
/// Adds the certificate in `cert_file` to DIR/crl.pem (replaced atomically):
/// agents started with --crl DIR/crl.pem refuse it from their next handshake.
Status revoke_certificate(const std::string& dir, const std::string& cert_file);
/// The secure-channel options (--secure, --cert, --key, --ca, --crl, --psk-file), for the agent and clients.
Result<SecureConfig> secure_config_from(const config::Options& options);
/// Reads AgentConfig from parsed options.
Result<AgentConfig> agent_config_from(const config::Options& options);

/// Thread mode: run() on one thread; stop() from any thread or a signal handler.
class Agent {
 public:
  /// Creates an agent with the built-in services (echo, stats, memory,
  /// sink, tokenize, graph). kBadConfig for a --listen wider than loopback
  /// without keys or insecure.
  [[nodiscard]] static Result<std::unique_ptr<Agent>> create(const AgentConfig& config);
  ~Agent();

  /// Adds a service before start(); kInvalidArgument on a duplicate name.
  /// Isolation::kNone only: a session process runs the built-in services
  /// (kUnsupported otherwise).
  [[nodiscard]] Status add_service(std::unique_ptr<Service> service);
  /// Listens and writes the address file.
  [[nodiscard]] Status start();
  [[nodiscard]] const std::string& address() const;
  /// Serves until stop(); then fails in-flight requests with kShutDown and
  /// closes every connection (and ends every session process).
  [[nodiscard]] Status run();
  /// Async-signal-safe.
  void stop();
  /// The listener's counters and the sessions, as a JSON object.
  [[nodiscard]] std::string stats_json();

 private:
  struct Impl;
  explicit Agent(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> stop_{false};
  int wake_fd_ = -1;  // written by stop(): wakes the listener's loop
};

/// The main of a session process (`outboard-agent --session-fd N`): takes
/// its setup and then its clients from the agent over `control_fd`, and
/// serves them until the agent closes it. Returns the exit status.
int run_agent_session(int control_fd);

}  // namespace outboard
