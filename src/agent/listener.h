// The agent's front door: the listening socket, the hello each client must
// send in time, and the agent-wide caps. Whatever a stranger sends on the
// port ends here, at worst with its own connection: this code runs in a
// process that never touches UCX, and hands each client on to a session
// (session.h) only once its hello has decoded.
// Thread mode: single (the loop that waits on its poller).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "channel/bootstrap.h"
#include "channel/server.h"
#include "util/poller.h"

namespace outboard::agent {

struct ListenerLimits {
  uint32_t max_connections = 4096;      ///< --max-connections: served and in their handshake
  uint32_t max_handshakes = 64;         ///< --max-handshakes: connections that have not sent their hello
  int64_t handshake_timeout_ms = 5000;  ///< --handshake-timeout-ms: the time a client has to send it
};

/// Where the listener hands each client whose hello decoded.
class SessionDispatch {
 public:
  virtual ~SessionDispatch() = default;
  /// Takes the client; reports its end through Listener::closed(), once.
  virtual void hand_off(net::Fd socket, const channel::Hello& hello, std::vector<uint8_t> hello_bytes,
                        const channel::PeerInfo& peer) = 0;
  /// Ends the sessions serving a certificate `refused` says the agent no
  /// longer accepts (PeerInfo::certificate); how many. None by default: one
  /// process's clients cannot be ended apart (Isolation::kNone).
  virtual size_t end_refused(const std::function<bool(const std::string& certificate)>& refused) {
    (void)refused;
    return 0;
  }
};

/// What the listener has seen, for the agent's logs and stats.
struct ListenerCounters {
  uint64_t accepted = 0;
  uint64_t handed_off = 0;
  uint64_t refused_limits = 0;     ///< over --max-connections or --max-handshakes
  uint64_t refused_hello = 0;      ///< a hello that did not decode
  uint64_t handshake_timeouts = 0;
  uint64_t refused_tls = 0;        ///< a TLS handshake that failed, or plaintext where TLS is required
  uint64_t resumed_tls = 0;        ///< clients handed on after resuming a TLS session (no certificates)
  uint64_t keys_reloaded = 0;      ///< key files read again after they changed on disk (a new CRL)
  uint64_t accept_errors = 0;      ///< out of file descriptors, say
};

class Listener {
 public:
  /// Binds `where` exactly; the poller must outlive the listener. `tls`:
  /// the agent's keys (none: it speaks no TLS), required of clients not on
  /// loopback, and of every client with `mode` kAlways.
  static Result<std::unique_ptr<Listener>> create(const net::HostPort& where, const ListenerLimits& limits,
                                                  net::Poller& poller, SessionDispatch& dispatch,
                                                  std::shared_ptr<secure::Context> tls, SecureConfig::Mode mode);
  ~Listener();

  /// "ip:port", the port as bound.
  [[nodiscard]] const std::string& address() const { return address_; }
  /// Expires handshakes past their deadline and resumes accepting after an
  /// accept error; returns how long the loop may wait before calling again.
  int tick();
  /// `n` clients handed off have left. Thread mode: any thread.
  void closed(size_t n) { live_.fetch_sub(n, std::memory_order_relaxed); }
  [[nodiscard]] size_t connections() const { return live_.load(std::memory_order_relaxed) + pending_.size(); }
  [[nodiscard]] const ListenerCounters& counters() const { return counters_; }

 private:
  struct Pending {
    net::Fd socket;
    channel::BootReader reader;
    Deadline deadline;
    bool local = false;                // the peer is on loopback (or, asked when it matters, on this host)
    bool decided = false;              // whether it speaks TLS is known (its first byte)
    std::unique_ptr<secure::Tls> tls;  // it does
  };
  Listener(net::Poller& poller, SessionDispatch& dispatch, const ListenerLimits& limits)
      : poller_(poller), dispatch_(dispatch), limits_(limits) {}
  void on_accept();
  void on_readable(int fd);
  void on_tls(int fd, Pending& p);
  /// Whether it may go on in plaintext or TLS, by its first byte.
  bool decide(int fd, Pending& p, uint8_t first);
  /// The keys as they are on disk now: an error (logged once) while changed files do not load.
  Status reload_keys();
  void fail_tls(int fd, const Status& why);
  void finish(int fd);
  void drop(int fd, const channel::Refusal& why);
  channel::PeerInfo describe(int fd, const channel::Hello& hello) const;

  net::Poller& poller_;
  SessionDispatch& dispatch_;
  std::shared_ptr<secure::Context> tls_;
  std::string keys_error_;  // why changed key files do not load (logged once)
  Deadline keys_checked_ = Deadline::now();  // when tick() looks at the key files next
  SecureConfig::Mode mode_ = SecureConfig::Mode::kAuto;
  ListenerLimits limits_;
  net::Fd socket_;
  std::string address_;
  std::unordered_map<int, Pending> pending_;
  std::atomic<size_t> live_{0};  // handed off, not yet left
  bool accepting_ = true;
  Deadline resume_ = Deadline::now();
  ListenerCounters counters_;
};

}  // namespace outboard::agent
