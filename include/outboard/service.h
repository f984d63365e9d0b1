// Services hosted by an agent. A service gets each request for its name on
// the agent's progress thread and answers it exactly once, now or later.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "outboard/channel.h"

namespace outboard {

namespace services::detail {
/// How the agent builds a Responder (src/services/access.h).
struct Access;
}  // namespace services::detail

/// Answers one request. Copyable; answering twice, or after the client left,
/// is a no-op. For a one-way message respond() acknowledges it: the sender's
/// credit returns only then, which is how a slow service slows its client.
/// Thread mode: call on the agent's progress thread.
class Responder {
 public:
  Responder() = default;
  void respond(Buffer response) const;
  void fail(const Status& status) const;
  /// False for one-way messages: nobody waits for an answer.
  [[nodiscard]] bool expects_response() const { return !one_way_; }

 private:
  friend struct services::detail::Access;
  Responder(std::shared_ptr<Connection::Impl> conn, uint64_t id, bool one_way)
      : conn_(std::move(conn)), id_(id), one_way_(one_way) {}
  // Owning: a weak pointer's lock() per answer was two more atomic
  // operations on the hot path. A closed connection ignores the answer.
  std::shared_ptr<Connection::Impl> conn_;
  uint64_t id_ = 0;
  bool one_way_ = false;
};

/// A peer's write-with-notify into a region of ours has landed.
struct Notification {
  uint64_t cookie = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

struct ServiceRequest {
  Buffer payload;
  /// Set (and payload empty) when this is a write-with-notify notification;
  /// respond() acknowledges it like a one-way message.
  std::optional<Notification> notification;
  Responder responder;
  /// The client's connection, for one-sided access to its regions and for
  /// one-way messages back. Not owned: the client closes it.
  std::shared_ptr<Connection> peer;
};

/// What an agent offers its services beyond requests.
class ServiceHost {
 public:
  virtual ~ServiceHost() = default;
  /// Runs `fn` on the agent's progress thread soon. Thread mode: any thread:
  /// how a service's own worker threads hand results back (answers,
  /// one-sided writes) without contending for the channel.
  virtual void post(std::function<void()> fn) = 0;
  /// Calls `poll` on every round of the progress thread until it returns
  /// false: for watching memory that peers write with one-sided puts, which
  /// raises no event. The progress thread busy-polls (a core) while any is
  /// registered. Thread mode: the progress thread.
  virtual void add_poller(std::function<bool()> poll) = 0;
  /// Takes `bytes` of agent memory held for a client (a region, a graph
  /// instance) from the agent-wide --max-memory; kNoMemory naming `what`,
  /// the agent's use and the limit when it is spent. Give each back with
  /// release_memory(). Thread mode: any thread.
  [[nodiscard]] virtual Status reserve_memory(uint64_t /*bytes*/, std::string_view /*what*/) { return {}; }
  virtual void release_memory(uint64_t /*bytes*/) {}
  /// Takes one graph instance of the client's --max-client-graph-instances
  /// (its TLS identity's connections together); kAgain naming the quota
  /// when they hold all of it. Give each back with release_graph_instance().
  /// Thread mode: any thread.
  [[nodiscard]] virtual Status reserve_graph_instance() { return {}; }
  virtual void release_graph_instance() {}
  /// Called on a service's worker before it tokenizes for a client: waits
  /// while the client's other sessions keep its --max-client-tokenize-threads
  /// busy. False, having taken nothing, once `stop` is set; give each true
  /// back with end_client_work(). Thread mode: any thread.
  [[nodiscard]] virtual bool begin_client_work(const std::atomic<bool>& /*stop*/) { return true; }
  virtual void end_client_work() {}
};

class Service {
 public:
  virtual ~Service() = default;
  /// Called once when the agent starts, before any request; `host` lives
  /// until the service is destroyed.
  virtual void attach(ServiceHost& /*host*/) {}
  [[nodiscard]] virtual std::string name() const = 0;
  /// Must not block for long: every client waits while it runs.
  virtual void handle(ServiceRequest request) = 0;
  /// True when handle() never blocks, waits or progresses (it answers, sends
  /// with try_send() and computes briefly): the agent may then call it from
  /// inside UCX's receive callback, a deferral less per request.
  [[nodiscard]] virtual bool handles_inline() const { return false; }
  /// A client connection closed; drop its per-connection state.
  virtual void on_disconnect(uint32_t /*connection_id*/) {}
};

}  // namespace outboard
