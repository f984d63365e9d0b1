#include "agent/process_sessions.h"

#include <fcntl.h>
#include <signal.h>
#include <sodium.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "agent/control.h"
#include "agent/session.h"
#include "outboard/log.h"

extern char** environ;

OB_LOG_MODULE("sessions");

namespace outboard::agent {

namespace {
// The fd number a session process finds its control socket at.
constexpr int kSessionControlFd = 3;
constexpr int kReapPollMs = 10;

// The key of a token's session: a digest, so the table holds no tokens and
// a lookup's timing says nothing about one. The TLS identity is in it: a
// token that leaked to another tenant does not take it into the session.
std::string session_key(const channel::SessionToken& token, bool shared_memory, const std::string& identity) {
  unsigned char digest[crypto_generichash_BYTES];
  crypto_generichash_state state;
  crypto_generichash_init(&state, nullptr, 0, sizeof digest);
  crypto_generichash_update(&state, token.data(), token.size());
  crypto_generichash_update(&state, reinterpret_cast<const unsigned char*>(identity.data()), identity.size());
  crypto_generichash_final(&state, digest, sizeof digest);
  std::string key(reinterpret_cast<const char*>(digest), sizeof digest);
  key.push_back(shared_memory ? 's' : 'n');
  return key;
}
}  // namespace

ProcessSessions::ProcessSessions(const AgentConfig& config, std::string program, std::shared_ptr<SessionBudget> budget,
                                 net::Poller& poller, std::function<void(size_t)> closed)
    : config_(config), program_(std::move(program)), budget_(std::move(budget)), poller_(poller), closed_(std::move(closed)) {
  for (uint32_t slot = config_.max_connections; slot-- > 0;) free_slots_.push_back(slot);
  free_groups_ = free_slots_;
}

ProcessSessions::~ProcessSessions() {
  for (auto& [fd, p] : by_fd_) poller_.remove(fd);
}

Result<ProcessSessions::Proc*> ProcessSessions::spawn(const std::string& key, bool shared_memory,
                                                      const std::string& identity) {
  // Never more sessions than connections: a slot is free for each.
  if (free_slots_.empty()) return Status(Code::kAgain, "every session slot is taken (agent option --max-connections)");
  OB_ASSIGN_OR_RETURN(auto ends, net::seqpacket_pair());
  // Not at the fd the child wants it at: dup2 onto itself would leave it close-on-exec.
  net::Fd child(::fcntl(ends.second.get(), F_DUPFD_CLOEXEC, kSessionControlFd + 1));
  if (!child.valid()) return Status(Code::kIoError, std::string("fcntl: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, child.get(), kSessionControlFd);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  const std::string fd_text = std::to_string(kSessionControlFd);
  char* argv[] = {const_cast<char*>(program_.c_str()), const_cast<char*>("--session-fd"),
                  const_cast<char*>(fd_text.c_str()), nullptr};
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, program_.c_str(), &actions, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return Status(Code::kIoError, "cannot start a session process (" + program_ + "): " + std::strerror(rc));
  children_.insert(pid);
  const uint32_t slot = free_slots_.back();
  free_slots_.pop_back();
  held_[pid] = {slot, identity};
  // A session is never without a group slot: there are as many as sessions.
  uint32_t group = SessionBudget::kNoGroup;
  if (!identity.empty()) {
    auto [it, added] = groups_.try_emplace(identity);
    if (added) it->second.index = free_groups_.back(), free_groups_.pop_back();
    ++it->second.sessions;
    group = it->second.index;
  }

  // What the session's UCX may use: shared memory (posix only: a client's
  // segments are reached through /proc/<its pid>, which is checked) for a
  // client of this host and user, else TCP on the listening interface.
  SessionSetup setup;
  setup.config = config_;
  setup.log_level = log::level();
  setup.budget_slot = slot;
  setup.budget_group = group;
  OB_ASSIGN_OR_RETURN(auto where, net::parse_host_port(config_.listen));
  setup.transport.net_devices = net::interface_of(where.host);
  // A UCX_TLS in the agent's environment that names no shared memory (to
  // measure TCP, say) still finds TCP in a same-user session, as does one
  // of an agent that listens beyond loopback: another host's agent may join
  // it (a job's, job_session()).
  setup.transport.transports =
      !shared_memory ? "tcp" : std::getenv("UCX_TLS") || !net::is_loopback(where.host) ? "posix,tcp" : "posix";
  net::Fd control = std::move(ends.first);
  if (::fcntl(control.get(), F_SETFL, O_NONBLOCK) != 0 ||
      !net::send_message(control.get(), encode_config(encode_setup(setup)), budget_->fd()).ok()) {
    ::kill(pid, SIGKILL);
    return Status(Code::kIoError, "cannot configure session process " + std::to_string(pid));
  }
  const int fd = control.get();
  OB_RETURN_IF_ERROR(poller_.add(fd, [this, fd] { on_control(fd); }));
  Proc& p = by_fd_[fd];
  p.pid = pid;
  p.control = std::move(control);
  p.key = key;
  p.identity = identity;
  by_key_[key] = fd;
  OB_LOG_INFO("session process %d started (%s)", static_cast<int>(pid), setup.transport.transports.c_str());
  return &p;
}

ProcessSessions::Proc* ProcessSessions::job_session(const channel::SessionToken& token) {
  for (const bool shared_memory : {true, false})
    if (auto it = by_key_.find(session_key(token, shared_memory, "")); it != by_key_.end()) return &by_fd_.at(it->second);
  return nullptr;
}

void ProcessSessions::hand_off(net::Fd socket, const channel::Hello& hello, std::vector<uint8_t> hello_bytes,
                               const channel::PeerInfo& peer) {
  const std::string key = session_key(hello.token, peer.policy.shared_memory, peer.identity);
  Proc* p = nullptr;
  Status st;
  const auto counted = clients_of_.find(peer.identity);
  const size_t held = counted == clients_of_.end() ? 0 : counted->second;
  if (!peer.identity.empty() && held >= config_.max_client_connections) {
    st = Status(Code::kAgain, "client " + peer.identity + " holds " + std::to_string(held) + " connections, its limit " +
                                  "(agent option --max-client-connections)");
  } else if (Proc* job = (hello.flags & channel::kHelloNetworkOnly) && (peer.identity.empty() || peer.agent)
                             ? job_session(hello.token)
                             : nullptr) {
    p = job;  // another agent's link to its job's agent here: where that job's ranks are
  } else if (auto it = by_key_.find(key); it != by_key_.end()) {
    p = &by_fd_.at(it->second);
  } else {
    auto started = spawn(key, peer.policy.shared_memory, peer.identity);
    if (started.ok()) p = started.value();
    else st = started.status();
  }
  if (p) {
    st = net::send_message(p->control.get(), encode_adopt(peer, hello_bytes), socket.get());
    if (st.code() == Code::kAgain)
      st = Status(Code::kAgain, "the session of this client is not taking connections now (its queue is full)");
  }
  if (!st.ok()) {
    OB_LOG_WARN("client %s not handed to a session: %s", peer.name.c_str(), st.to_string().c_str());
    channel::refuse(socket.get(), {st.code(), st.message()});
    closed_(1);
    return;
  }
  ++p->clients;
  if (!p->identity.empty()) ++clients_of_[p->identity];
  if (!peer.certificate.empty()) p->certificates.insert(peer.certificate);
}

size_t ProcessSessions::end_refused(const std::function<bool(const std::string& certificate)>& refused) {
  size_t ended = 0;
  for (auto& [fd, p] : by_fd_) {
    if (std::none_of(p.certificates.begin(), p.certificates.end(), refused)) continue;
    // It tells its clients why and exits; its control socket's end then counts them gone.
    OB_LOG_WARN("session process %d: a certificate of its clients is no longer accepted: ending it",
                static_cast<int>(p.pid));
    (void)net::send_message(fd, encode_revoked());
    p.certificates.clear();
    ++ended;
  }
  return ended;
}

void ProcessSessions::on_control(int fd) {
  auto it = by_fd_.find(fd);
  if (it == by_fd_.end()) return;
  Proc& p = it->second;
  uint8_t buf[64];
  for (;;) {
    auto n = net::recv_message(fd, buf, nullptr);
    if (!n.ok() && n.status().code() == Code::kAgain) return;
    if (!n.ok() || n.value() == 0) {
      // The session ended on its own: crashed, killed, or failed to start.
      if (p.clients != 0)
        OB_LOG_WARN("session process %d ended with %zu clients", static_cast<int>(p.pid), p.clients);
      left(p, p.clients);
      return end(fd);
    }
    if (buf[0] == static_cast<uint8_t>(ControlKind::kClosed) && p.clients != 0) left(p, 1);
    if (p.clients == 0) return end(fd);  // its last client left: closing its control ends it
  }
}

void ProcessSessions::left(Proc& p, size_t n) {
  if (n == 0) return;  // a session that ended before any client was handed to it counted none
  p.clients -= n;
  if (!p.identity.empty()) {
    auto it = clients_of_.find(p.identity);
    if ((it->second -= n) == 0) clients_of_.erase(it);
  }
  closed_(n);
}

void ProcessSessions::end(int fd) {
  poller_.remove(fd);
  auto node = by_fd_.extract(fd);
  if (node.empty()) return;
  by_key_.erase(node.mapped().key);
}

void ProcessSessions::reap() {
  // Ours only, by pid: a program embedding the agent may have children of its own.
  for (pid_t pid : std::vector<pid_t>(children_.begin(), children_.end())) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) != pid) continue;
    children_.erase(pid);
    // Only now: a session's slot is its own until it can no longer write it.
    if (auto it = held_.find(pid); it != held_.end()) {
      const Held& h = it->second;
      auto group = groups_.find(h.identity);
      budget_->release_slot(h.slot, group == groups_.end() ? SessionBudget::kNoGroup : group->second.index);
      free_slots_.push_back(h.slot);
      if (group != groups_.end() && --group->second.sessions == 0) {
        free_groups_.push_back(group->second.index);
        groups_.erase(group);
      }
      held_.erase(it);
    }
    if (WIFSIGNALED(status))
      OB_LOG_WARN("session process %d ended by signal %d (%s)", static_cast<int>(pid), WTERMSIG(status),
                  strsignal(WTERMSIG(status)));
    else if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
      OB_LOG_WARN("session process %d exited with status %d", static_cast<int>(pid), WEXITSTATUS(status));
  }
}

void ProcessSessions::shut_down(Deadline deadline) {
  for (auto& [fd, p] : by_fd_) (void)net::send_message(fd, encode_end());
  while (!by_fd_.empty()) end(by_fd_.begin()->first);
  while (!children_.empty() && !deadline.expired()) {
    reap();
    if (!children_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(kReapPollMs));
  }
  for (pid_t pid : children_) {
    OB_LOG_WARN("session process %d did not end in time: killed", static_cast<int>(pid));
    ::kill(pid, SIGKILL);
  }
  while (!children_.empty()) {
    reap();
    if (!children_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(kReapPollMs));
  }
}

}  // namespace outboard::agent
