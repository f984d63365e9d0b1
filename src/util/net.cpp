#include "util/net.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <linux/filter.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <vector>

namespace outboard::net {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

// Waits until `fd` is ready for `events` or the deadline; kTimedOut then.
Status wait_ready(int fd, short events, Deadline deadline, std::string_view what) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, deadline.remaining_ms());
    if (rc > 0) return {};
    if (rc == 0) return {Code::kTimedOut, std::string(what) + " did not complete before the deadline"};
    if (errno != EINTR) return {Code::kIoError, std::string(what) + ": poll: " + errno_text(errno)};
  }
}

Result<sockaddr_in> resolve(const HostPort& where, bool passive) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  const std::string port = std::to_string(where.port);
  if (int rc = ::getaddrinfo(where.host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return Status(passive ? Code::kBadConfig : Code::kInvalidArgument,
                  "address '" + where.to_string() + "': " + ::gai_strerror(rc));
  sockaddr_in addr{};
  std::memcpy(&addr, res->ai_addr, sizeof addr);
  ::freeaddrinfo(res);
  return addr;
}

std::string format(const sockaddr_in& a) {
  char ip[INET_ADDRSTRLEN] = "?";
  ::inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
  return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}

}  // namespace

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Result<HostPort> parse_host_port(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) return Status(Code::kBadConfig, "address '" + text + "' is not host:port");
  const std::string digits = text.substr(colon + 1);
  char* end = nullptr;
  const long port = std::strtol(digits.c_str(), &end, 10);
  if (digits.empty() || *end != '\0' || port < 0 || port > 65535)
    return Status(Code::kBadConfig, "port in address '" + text + "' is not 0..65535");
  HostPort hp{text.substr(0, colon), static_cast<uint16_t>(port)};
  if (hp.host.empty()) hp.host = "0.0.0.0";
  return hp;
}

namespace {
// This host's IPv4 addresses, host order.
std::vector<uint32_t> local_ipv4() {
  std::vector<uint32_t> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i; i = i->ifa_next)
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET)
      out.push_back(ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr));
  ::freeifaddrs(list);
  return out;
}
}  // namespace

std::vector<std::string> ipv4_addresses() {
  std::vector<std::string> out;
  for (uint32_t a : local_ipv4()) {
    const in_addr net_order{htonl(a)};
    char text[INET_ADDRSTRLEN];
    if (::inet_ntop(AF_INET, &net_order, text, sizeof text)) out.emplace_back(text);
  }
  return out;
}

std::string interface_of(const std::string& host) {
  in_addr want{};
  if (host == "localhost") return "lo";
  if (::inet_pton(AF_INET, host.c_str(), &want) != 1 || want.s_addr == INADDR_ANY) return {};
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return {};
  std::string name;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    if (reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == want.s_addr) {
      name = i->ifa_name;
      break;
    }
  }
  ::freeifaddrs(list);
  return name;
}

bool is_loopback(const std::string& host) {
  if (host == "localhost") return true;
  in_addr a{};
  return ::inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

Result<Fd> listen_tcp(const HostPort& where, int backlog) {
  OB_ASSIGN_OR_RETURN(sockaddr_in addr, resolve(where, true));
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status(Code::kIoError, "socket: " + errno_text(errno));
  const int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    if (err == EADDRINUSE)
      return Status(Code::kBadConfig, "listen address " + where.to_string() + " is already in use (another agent?)");
    return Status(Code::kBadConfig, "cannot listen on " + where.to_string() + ": " + errno_text(err));
  }
  if (::listen(fd.get(), backlog) != 0)
    return Status(Code::kIoError, "listen on " + where.to_string() + ": " + errno_text(errno));
  return fd;
}

std::string local_address(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "?";
  return format(a);
}

std::string peer_address(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "?";
  return format(a);
}

Result<Fd> connect_tcp(const HostPort& where, Deadline deadline) {
  OB_ASSIGN_OR_RETURN(sockaddr_in addr, resolve(where, false));
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status(Code::kIoError, "socket: " + errno_text(errno));
  const int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno != EINPROGRESS)
    return Status(Code::kConnectionReset, "connect to " + where.to_string() + ": " + errno_text(errno));
  OB_RETURN_IF_ERROR(wait_ready(fd.get(), POLLOUT, deadline, "connect to " + where.to_string()));
  int err = 0;
  socklen_t len = sizeof err;
  ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
  if (err == ECONNREFUSED)
    return Status(Code::kConnectionReset, "nothing listens at " + where.to_string() + " (connection refused)");
  if (err != 0) return Status(Code::kConnectionReset, "connect to " + where.to_string() + ": " + errno_text(err));
  return fd;
}

void set_keepalive(int fd, int idle_s, int interval_s, int count) {
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  // Unacknowledged data is given up on as quickly as a silent peer.
  const unsigned user_timeout_ms = static_cast<unsigned>((idle_s + interval_s * count) * 1000);
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

Status send_all(int fd, std::span<const uint8_t> bytes, Deadline deadline, std::string_view what) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes = bytes.subspan(static_cast<size_t>(n));
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      OB_RETURN_IF_ERROR(wait_ready(fd, POLLOUT, deadline, what));
    } else if (errno != EINTR) {
      return {Code::kConnectionReset, std::string(what) + ": " + errno_text(errno)};
    }
  }
  return {};
}

Status recv_exact(int fd, std::span<uint8_t> out, Deadline deadline, std::string_view what) {
  while (!out.empty()) {
    const ssize_t n = ::recv(fd, out.data(), out.size(), 0);
    if (n > 0) {
      out = out.subspan(static_cast<size_t>(n));
    } else if (n == 0) {
      return {Code::kConnectionReset, std::string(what) + ": the peer closed the connection"};
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      OB_RETURN_IF_ERROR(wait_ready(fd, POLLIN, deadline, what));
    } else if (errno != EINTR) {
      return {Code::kConnectionReset, std::string(what) + ": " + errno_text(errno)};
    }
  }
  return {};
}

Result<size_t> recv_some(int fd, std::span<uint8_t> out, Deadline deadline, std::string_view what, int flags) {
  for (;;) {
    const ssize_t n = ::recv(fd, out.data(), out.size(), flags);
    if (n > 0) return static_cast<size_t>(n);
    if (n == 0) return Status(Code::kConnectionReset, std::string(what) + ": the peer closed the connection");
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      OB_RETURN_IF_ERROR(wait_ready(fd, POLLIN, deadline, what));
    } else if (errno != EINTR) {
      return Status(Code::kConnectionReset, std::string(what) + ": " + errno_text(errno));
    }
  }
}

Result<std::pair<Fd, Fd>> seqpacket_pair() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0)
    return Status(Code::kIoError, "socketpair: " + errno_text(errno));
  return std::make_pair(Fd(fds[0]), Fd(fds[1]));
}

Status send_message(int fd, std::span<const uint8_t> bytes, int pass) {
  iovec iov{const_cast<uint8_t*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (pass >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pass, sizeof(int));
  }
  for (;;) {
    if (::sendmsg(fd, &msg, MSG_NOSIGNAL) >= 0) return {};
    if (errno == EAGAIN || errno == EWOULDBLOCK) return {Code::kAgain, "the receiver's queue is full"};
    if (errno != EINTR) return {Code::kIoError, "sendmsg: " + errno_text(errno)};
  }
}

Result<size_t> recv_message(int fd, std::span<uint8_t> buf, Fd* passed) {
  iovec iov{buf.data(), buf.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Status(Code::kAgain, "no message");
    return Status(Code::kIoError, "recvmsg: " + errno_text(errno));
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int fd_in = -1;
    std::memcpy(&fd_in, CMSG_DATA(c), sizeof fd_in);
    Fd owned(fd_in);  // closed unless the caller takes it
    if (passed) *passed = std::move(owned);
  }
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
    return Status(Code::kTooBig, "control message over " + std::to_string(buf.size()) + " B");
  return static_cast<size_t>(n);
}

Result<LocalPeer> local_peer(int fd) {
  sockaddr_in self{}, peer{};
  socklen_t len = sizeof self;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len) != 0 || self.sin_family != AF_INET)
    return Status(Code::kNotFound, "not an IPv4 socket");
  len = sizeof peer;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0)
    return Status(Code::kNotFound, "no peer: " + errno_text(errno));
  // The peer's own socket: its local address is our peer address, its
  // remote address ours. /proc/net/tcp prints each address as the raw
  // 32-bit word in hex and the port in host order.
  char want_local[32], want_remote[32];
  std::snprintf(want_local, sizeof want_local, "%08X:%04X", peer.sin_addr.s_addr, ntohs(peer.sin_port));
  std::snprintf(want_remote, sizeof want_remote, "%08X:%04X", self.sin_addr.s_addr, ntohs(self.sin_port));
  FILE* f = std::fopen("/proc/net/tcp", "r");
  if (!f) return Status(Code::kNotFound, "/proc/net/tcp: " + errno_text(errno));
  char line[512];
  Result<LocalPeer> found = Status(Code::kNotFound, "peer " + format(peer) + " is not a socket of this host");
  while (std::fgets(line, sizeof line, f)) {
    char local[64], remote[64];
    unsigned uid = 0;
    unsigned long long inode = 0;
    // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
    if (std::sscanf(line, " %*s %63s %63s %*s %*s %*s %*s %u %*s %llu", local, remote, &uid, &inode) != 4) continue;
    if (std::strcmp(local, want_local) == 0 && std::strcmp(remote, want_remote) == 0) {
      found = LocalPeer{uid, inode};
      break;
    }
  }
  std::fclose(f);
  return found;
}

Result<Fd> open_peer_process(int fd, pid_t pid) {
  Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!pidfd.valid()) return Status(Code::kUnsupported, "pidfd_open(" + std::to_string(pid) + "): " + std::strerror(errno));
  // Checked after the pidfd is open: the process it names is the one holding the socket now.
  auto peer = local_peer(fd);
  if (!peer.ok()) return peer.status();
  if (!process_holds_socket(pid, peer->inode))
    return Status(Code::kNotFound, "process " + std::to_string(pid) + " does not hold this connection's socket");
  return pidfd;
}

bool process_ended(const Fd& pidfd) {
  pollfd p{pidfd.get(), POLLIN, 0};  // a pidfd polls readable once its process has ended
  return ::poll(&p, 1, 0) > 0;
}

Result<Fd> open_peer_pipe(const Fd& pidfd, pid_t pid, int fd) {
  const std::string what = "descriptor " + std::to_string(fd) + " of process " + std::to_string(pid);
  // O_PATH opens nothing (no device's open runs); the inode it pins is the one checked and reopened.
  Fd path(::open(("/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd)).c_str(), O_PATH | O_CLOEXEC));
  if (!path.valid()) return Status(Code::kUnsupported, what + ": " + errno_text(errno));
  if (process_ended(pidfd)) return Status(Code::kUnsupported, what + ": that process has ended");  // its pid may be another's
  // An anonymous pipe only: a named FIFO reopened here would be opened with our rights, not its holder's.
  const std::string pinned = "/proc/self/fd/" + std::to_string(path.get());
  char link[64] = {};
  const ssize_t n = ::readlink(pinned.c_str(), link, sizeof link - 1);
  struct stat st {};
  if (n < 0 || ::fstat(path.get(), &st) != 0 || !S_ISFIFO(st.st_mode) || std::strncmp(link, "pipe:[", 6) != 0)
    return Status(Code::kInvalidArgument, what + " is " + (n < 0 ? errno_text(errno) : std::string(link)) +
                                              ", not an anonymous pipe");
  Fd end(::open(pinned.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
  if (!end.valid()) return Status(Code::kUnsupported, what + ": " + errno_text(errno));
  return end;
}

namespace {
struct Gate {
  std::mutex mu;
  bool guarded = false;
  std::set<uint32_t> sources;  // host order
};
Gate& gate() {
  static Gate g;
  return g;
}

// The filter: the IPv4 source is one of `sources`, else the packet is dropped.
Status attach_filters(const std::set<uint32_t>& sources) {
  std::vector<sock_filter> code;
  // The IPv4 header's source (SKF_NET_OFF: from the network header, a negative offset by design).
  code.push_back({BPF_LD | BPF_W | BPF_ABS, 0, 0, static_cast<uint32_t>(SKF_NET_OFF + 12)});
  // Each match jumps to the last instruction (accept), past the rest and the drop.
  uint8_t to_accept = static_cast<uint8_t>(sources.size());
  for (uint32_t source : sources) code.push_back({BPF_JMP | BPF_JEQ | BPF_K, to_accept--, 0, source});
  code.push_back({BPF_RET | BPF_K, 0, 0, 0});
  code.push_back({BPF_RET | BPF_K, 0, 0, 0xffffffffu});
  const sock_fprog program{static_cast<unsigned short>(code.size()), code.data()};
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return {Code::kIoError, "/proc/self/fd: " + errno_text(errno)};
  Status st;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || fd == ::dirfd(d)) continue;
    int listening = 0;
    sockaddr_storage local{};
    socklen_t len = sizeof listening, local_len = sizeof local;
    if (::getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening ||
        ::getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_len) != 0)
      continue;
    if (local.ss_family != AF_INET) {
      st = {Code::kUnsupported, "listening socket " + std::to_string(fd) + " is not IPv4: no filter for it"};
      break;
    }
    if (::setsockopt(static_cast<int>(fd), SOL_SOCKET, SO_ATTACH_FILTER, &program, sizeof program) != 0) {
      st = {Code::kIoError, "a filter on listening socket " + std::to_string(fd) + ": " + errno_text(errno)};
      break;
    }
  }
  ::closedir(d);
  return st;
}
}  // namespace

Status guard_listeners() {
  Gate& g = gate();
  std::lock_guard lock(g.mu);
  g.guarded = true;
  return attach_filters(g.sources);
}

Status admit_peer(int fd) {
  Gate& g = gate();
  std::lock_guard lock(g.mu);
  if (!g.guarded) return {};
  sockaddr_in peer{};
  socklen_t len = sizeof peer;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0 || peer.sin_family != AF_INET)
    return {Code::kInvalidArgument, "socket " + std::to_string(fd) + " has no IPv4 peer to admit"};
  const uint32_t source = ntohl(peer.sin_addr.s_addr);
  if (g.sources.count(source)) return {};
  // A process of this host may reach us from any of its addresses (a client
  // that dialed 127.0.0.1 has UCX connect from eth0's): admit them all.
  std::set<uint32_t> more = g.sources;
  more.insert(source);
  const std::vector<uint32_t> here = local_ipv4();
  if ((source >> 24) == 127 /* loopback, 127.0.0.0/8 */ || std::find(here.begin(), here.end(), source) != here.end())
    more.insert(here.begin(), here.end());
  if (more.size() > kMaxAdmittedSources)
    return {Code::kTooBig, "this session's UCX listeners admit " + std::to_string(g.sources.size()) + " addresses; " +
                               format(peer) + "'s host would pass their limit of " +
                               std::to_string(kMaxAdmittedSources) + " (kMaxAdmittedSources)"};
  g.sources = std::move(more);
  return attach_filters(g.sources);
}

bool process_holds_socket(pid_t pid, uint64_t inode) {
  if (pid <= 0) return false;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (!d) return false;
  const std::string want = "socket:[" + std::to_string(inode) + "]";
  bool held = false;
  char target[64];
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const ssize_t n = ::readlinkat(::dirfd(d), e->d_name, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    if (want == target) {
      held = true;
      break;
    }
  }
  ::closedir(d);
  return held;
}

}  // namespace outboard::net
