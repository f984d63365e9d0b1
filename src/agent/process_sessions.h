// Sessions in processes of their own (Isolation::kProcess), seen from the
// listener's process: clients that present one token go to one session
// process, started for the first of them (fork and exec of outboard-agent
// --session-fd: a fresh image, so no UCX state crosses the fork) and ended
// when the last leaves. The listener's process never touches UCX.
// Thread mode: single (the listener's loop).
#pragma once

#include <sys/types.h>

#include <functional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "agent/listener.h"
#include "outboard/agent.h"
#include "util/budget.h"

namespace outboard::agent {

class ProcessSessions final : public SessionDispatch {
 public:
  /// `closed(n)`: n clients handed off have left (Listener::closed).
  /// `config` is read at each start (the agent's: it outlives this, and
  /// holds the port once bound); `budget`: the agent's --max-memory, shared
  /// with every session (a slot each).
  ProcessSessions(const AgentConfig& config, std::string program, std::shared_ptr<SessionBudget> budget,
                  net::Poller& poller, std::function<void(size_t)> closed);
  ~ProcessSessions() override;

  void hand_off(net::Fd socket, const channel::Hello& hello, std::vector<uint8_t> hello_bytes,
                const channel::PeerInfo& peer) override;
  size_t end_refused(const std::function<bool(const std::string& certificate)>& refused) override;
  /// Collects the sessions that exited (logging any that did not end well).
  void reap();
  /// Ends every session (each tells its clients the agent is shutting
  /// down) and waits for them until the deadline; then kills the rest.
  void shut_down(Deadline deadline);
  [[nodiscard]] size_t sessions() const { return by_fd_.size(); }

 private:
  struct Proc {
    pid_t pid = 0;
    net::Fd control;
    std::string key;
    std::string identity;  // of its TLS clients ("": plaintext), one per session
    size_t clients = 0;
    std::set<std::string> certificates;  // of its TLS clients, distinct (DER)
  };
  Result<Proc*> spawn(const std::string& key, bool shared_memory, const std::string& identity);
  /// The session of a job's ranks (token, no TLS identity), if it runs: another agent's link to
  /// this one for that job (a network-only hello, plaintext or with an agent's certificate) joins
  /// it, as its shares and forwarded messages go to the ranks' collectives and receives there.
  Proc* job_session(const channel::SessionToken& token);
  /// `p` has `n` clients fewer.
  void left(Proc& p, size_t n);
  void on_control(int fd);
  void end(int fd);

  const AgentConfig& config_;
  std::string program_;
  std::shared_ptr<SessionBudget> budget_;
  // What a session holds of the budget until it is reaped: its slot, and
  // its TLS identity's group (shared by that identity's sessions).
  struct Held {
    uint32_t slot = 0;
    std::string identity;
  };
  struct Group {
    uint32_t index = 0;
    size_t sessions = 0;  // not yet reaped
  };
  std::vector<uint32_t> free_slots_;  // of the budget; groups have as many
  std::vector<uint32_t> free_groups_;
  std::unordered_map<pid_t, Held> held_;
  std::unordered_map<std::string, Group> groups_;  // TLS identity -> its group
  net::Poller& poller_;
  std::function<void(size_t)> closed_;
  std::unordered_map<std::string, int> by_key_;  // token digest -> control fd
  std::unordered_map<int, Proc> by_fd_;
  std::unordered_set<pid_t> children_;  // started, not yet reaped
  std::unordered_map<std::string, size_t> clients_of_;  // TLS identity -> its connections, in every session
};

}  // namespace outboard::agent
