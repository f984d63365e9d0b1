// Sockets of our own: the agent's listener and each connection's bootstrap
// socket (TCP), and the agent's control sockets to its session processes
// (AF_UNIX SOCK_SEQPACKET, which keeps message boundaries and passes fds).
// UCX never sees these: it trusts its peers, so the bytes a stranger sends
// land here first. Thread mode: an Fd has one owner; the functions are
// reentrant.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "outboard/clock.h"
#include "outboard/status.h"

namespace outboard::net {

/// Owns one file descriptor. Move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.fd_, -1));
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  [[nodiscard]] int get() const { return fd_; }
  [[nodiscard]] bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

struct HostPort {
  std::string host;
  uint16_t port = 0;
  [[nodiscard]] std::string to_string() const { return host + ":" + std::to_string(port); }
};

/// Parses "host:port" (port 0: any free one; an empty host: 0.0.0.0).
Result<HostPort> parse_host_port(const std::string& text);

/// Whether `host` (a numeric IPv4 address or "localhost") is on the loopback
/// network, 127.0.0.0/8.
bool is_loopback(const std::string& host);

/// This host's IPv4 addresses (every interface's, loopback too), dotted.
std::vector<std::string> ipv4_addresses();

/// The network interface that has IPv4 address `host` ("lo" for
/// 127.0.0.1); empty for 0.0.0.0 or an address of no interface here.
std::string interface_of(const std::string& host);

/// A non-blocking listening TCP socket bound to `where` exactly.
/// kBadConfig naming the address when it is in use or cannot be bound.
Result<Fd> listen_tcp(const HostPort& where, int backlog);
/// "ip:port" the socket is bound to (its local address).
std::string local_address(int fd);
/// "ip:port" of the socket's peer.
std::string peer_address(int fd);

/// Connects to `where` before the deadline; the socket is left non-blocking.
Result<Fd> connect_tcp(const HostPort& where, Deadline deadline);
/// TCP keepalive: a peer whose host died is noticed after about
/// idle + interval * count seconds (a process that dies closes at once).
void set_keepalive(int fd, int idle_s, int interval_s, int count);

/// Writes all of `bytes` to a non-blocking socket before the deadline.
/// `what` names the exchange in errors.
Status send_all(int fd, std::span<const uint8_t> bytes, Deadline deadline, std::string_view what);
/// Reads exactly `out.size()` bytes before the deadline; kConnectionReset
/// when the peer closes first.
Status recv_exact(int fd, std::span<uint8_t> out, Deadline deadline, std::string_view what);
/// Reads what has arrived, at least 1 byte, before the deadline (`flags`: recv's, MSG_PEEK say).
Result<size_t> recv_some(int fd, std::span<uint8_t> out, Deadline deadline, std::string_view what, int flags = 0);

/// Connected AF_UNIX SOCK_SEQPACKET pair, both ends close-on-exec.
Result<std::pair<Fd, Fd>> seqpacket_pair();
/// Sends one message, with `pass` (if valid) as SCM_RIGHTS ancillary data;
/// kAgain when a non-blocking socket's peer has no room for it.
Status send_message(int fd, std::span<const uint8_t> bytes, int pass = -1);
/// Receives one message into `buf` (never blocks when the fd is
/// non-blocking: kAgain). Returns its size, 0 at end of stream; a passed fd
/// lands in `passed`. A message longer than `buf` is kTooBig.
Result<size_t> recv_message(int fd, std::span<uint8_t> buf, Fd* passed);

/// Who is at the other end of a TCP connection on this host, as the kernel
/// records it (/proc/net/tcp): a peer's claims about itself are checked
/// against this before it is trusted with shared memory.
struct LocalPeer {
  uint32_t uid = 0;     ///< owner of the peer's socket
  uint64_t inode = 0;   ///< the peer's socket inode
};
/// kNotFound unless the peer of `fd` is a socket of this host's network
/// namespace (a loopback connection).
Result<LocalPeer> local_peer(int fd);
/// Whether process `pid` holds socket `inode` among its descriptors.
bool process_holds_socket(pid_t pid, uint64_t inode);

/// Source addresses admit() takes per process (a classic BPF jump spans at most 255).
inline constexpr size_t kMaxAdmittedSources = 255;
/// From now on every listening IPv4 TCP socket of this process, and each
/// connection it accepts, takes packets only from the addresses admit()
/// names: none yet. A socket filter (SO_ATTACH_FILTER, no privilege
/// needed), for a session process, whose listeners are UCX's: UCX answers
/// whoever connects, and its TCP transport writes where the peer says.
Status guard_listeners();
/// Lets packets from the host at the other end of connected socket `fd`
/// reach the guarded listeners; nothing while none are guarded. kTooBig
/// past kMaxAdmittedSources.
Status admit_peer(int fd);
/// A pidfd of process `pid`, once the kernel confirms that this very process
/// holds the other end of loopback socket `fd`: unlike the pid, it can never
/// name a later process that reused the number.
Result<Fd> open_peer_process(int fd, pid_t pid);
/// Whether the process of `pidfd` has ended.
bool process_ended(const Fd& pidfd);
/// A write end of this process's own to pipe `fd` of process `pid` (held as
/// `pidfd`), opened anew through /proc/`pid`/fd (the caller may ptrace it):
/// its file status flags are ours alone, so a write is non-blocking whatever
/// that process does with its ends, and reaches only that pipe. kUnsupported
/// (not reachable, ended) or kInvalidArgument (not a pipe) says why not.
Result<Fd> open_peer_pipe(const Fd& pidfd, pid_t pid, int fd);

}  // namespace outboard::net
