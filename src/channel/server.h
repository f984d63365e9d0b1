// Agent side of the channel: takes clients whose Hello arrived on a socket
// (the agent's listener reads it), creates their endpoints, answers with a
// Welcome, and routes their service frames to one handler.
// Thread mode: multi (hub mutex).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "channel/connection_impl.h"

namespace outboard::channel {

/// What the agent knows of a client beyond its Hello.
struct PeerInfo {
  std::string name;  ///< for logs and errors: "127.0.0.1:40312 (pid 123)"
  /// What its region descriptors may name (transport::check_descriptor).
  transport::DescriptorPolicy policy;
  /// A client that came through TLS: the keys its frames are sealed with.
  std::optional<secure::Keys> keys;
  /// Who it authenticated as (Tls::peer_identity()): sessions never mix
  /// identities, and each holds at most --max-client-connections. Services
  /// read it (Connection::peer_identity()) to keep tenants apart.
  std::string identity;
  /// And its certificate (DER; none with a PSK), which the listener checks
  /// again when the agent's keys change (a CRL revoking it). Not sent to sessions.
  std::string certificate;
  /// Its certificate is made for agents (Tls::peer_is_agent()): another agent of the deployment,
  /// whose link to a job's session (a network-only hello) joins that session. Not sent to sessions.
  bool agent = false;
};

class Server {
 public:
  /// `inline_services[i]`: service i's frames may be handed to `on_service`
  /// inside UCX's receive callback (Service::handles_inline()).
  /// `facts` go into every Welcome. `budget` (may be null): the session's,
  /// in which open requests count (Connection::Impl::budget).
  static Result<std::unique_ptr<Server>> create(const ChannelConfig& config, std::vector<std::string> services,
                                                std::vector<bool> inline_services, Facts facts,
                                                std::shared_ptr<SessionBudget> budget,
                                                Connection::Impl::ServiceFn on_service,
                                                std::function<void(uint32_t)> on_closed);
  ~Server();

  /// Serves a client: its endpoint, its ring, the Welcome on `socket`, which
  /// is then watched for the client's end. A client that cannot be served
  /// (its worker address unreachable) gets a Refusal; either way the
  /// connection's fate is the client's alone.
  Status adopt(net::Fd socket, const Hello& hello, const PeerInfo& peer);

  [[nodiscard]] Hub& hub() { return *hub_; }
  [[nodiscard]] size_t connections();
  [[nodiscard]] const Counters& counters() const { return counters_; }
  /// Fails every open request with `why`, sends kClose, and flushes (bounded by deadline).
  void shut_down(const Status& why, Deadline deadline);

 private:
  Server() = default;
  void prune();

  std::shared_ptr<Hub> hub_;
  ChannelConfig config_;
  std::vector<std::string> services_;
  std::vector<bool> inline_services_;
  Facts facts_;
  std::shared_ptr<SessionBudget> budget_;
  Connection::Impl::ServiceFn on_service_;
  std::function<void(uint32_t)> on_closed_;
  std::vector<std::shared_ptr<Connection::Impl>> conns_;
  Counters counters_;
};

/// Sends `refusal` on a socket that will not be served, without waiting (a
/// client that does not read loses it), and ends the socket's output.
void refuse(int socket, const Refusal& refusal);

}  // namespace outboard::channel
