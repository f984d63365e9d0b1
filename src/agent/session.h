// One agent session: the services and the channel server that serve the
// clients handed to it, on this process's hub. In a session process (the
// default) it serves the clients of one token; with --isolation none, every
// client of the agent, in the agent's own process.
// Thread mode: run() on one thread; adopt() on that thread (post it there).
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "channel/server.h"
#include "outboard/agent.h"
#include "outboard/log.h"
#include "util/budget.h"

namespace outboard::agent {

class Session {
 public:
  /// The built-in services and `extra`; `on_closed` runs (on the progress
  /// thread) each time a client adopted here leaves.
  /// `budget`: where the services' memory for clients is counted.
  static Result<std::unique_ptr<Session>> create(const AgentConfig& config,
                                                 std::vector<std::unique_ptr<Service>> extra,
                                                 std::shared_ptr<SessionBudget> budget, std::function<void()> on_closed);
  ~Session();

  /// Serves a client whose hello the listener read; one that does not
  /// decode is refused (and counted as left).
  void adopt(net::Fd socket, std::span<const uint8_t> hello, const channel::PeerInfo& peer);
  [[nodiscard]] channel::Hub& hub() { return server_->hub(); }
  [[nodiscard]] size_t connections() { return server_->connections(); }
  /// Serves until `stop`; then fails requests in flight with `why` (read
  /// then: kShutDown unless changed meanwhile) and closes every connection.
  void run(const std::atomic<bool>& stop, const Status& why = Status(Code::kShutDown, "agent is shutting down"));
  /// Counters as a JSON object (the `stats` service's answer).
  [[nodiscard]] std::string stats_json();

 private:
  struct Impl;
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<channel::Server> server_;
};

/// The JSON a session process is configured with: the agent's options and
/// what its UCX context may use.
struct SessionSetup {
  AgentConfig config;
  transport::TransportConfig transport;
  log::Level log_level = log::Level::kWarning;
  uint32_t budget_slot = 0;  ///< this session's slot of the agent's SessionBudget (its fd comes with the setup)
  uint32_t budget_group = SessionBudget::kNoGroup;  ///< and its TLS identity's group there
};
std::string encode_setup(const SessionSetup& setup);
/// The SessionBudget quotas of `config` (--max-session-memory, --max-client-memory,
/// --max-client-tokenize-threads, --max-client-requests, --max-client-graph-instances).
inline SessionBudget::Quotas budget_quotas(const AgentConfig& config) {
  const uint32_t workers = config.max_client_tokenize_threads != 0 ? config.max_client_tokenize_threads
                                                                   : std::max<uint32_t>(config.tokenize_threads, 1);
  return {config.max_session_memory, config.max_client_memory, workers, config.max_client_requests,
          config.max_client_graph_instances};
}
Result<SessionSetup> decode_setup(std::string_view json);

}  // namespace outboard::agent
