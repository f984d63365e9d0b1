// UCX transport: the only layer that includes UCX headers.
//
// Threading model: one UCX context per process and its workers (UCX thread
// mode SERIALIZED), all under one mutex, process_mutex. Every call into a
// Worker, its endpoints and regions must hold it; callbacks run inside
// progress() on the calling thread with the mutex already held, so the mutex
// is recursive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "outboard/buffer.h"
#include "outboard/memory_kind.h"
#include "outboard/status.h"
#include "transport/descriptor.h"
#include "util/mutex.h"

struct ucp_context;
struct ucp_worker;
struct ucp_ep;
struct ucp_mem;
struct ucp_rkey;

namespace outboard::transport {

/// The process's UCX lock: the worker's, the hub's, and every connection's
/// state (what they guard says so, and clang checks it).
extern RecursiveMutex process_mutex;

using Bytes = std::vector<uint8_t>;
using DoneFn = std::function<void(Status)>;

/// How the process's UCX context is set up. UCX_* variables in the
/// environment are honoured except where a field here narrows them.
struct TransportConfig {
  /// Transports (UCX_TLS names) this context may use, e.g. "posix,tcp";
  /// empty: UCX's own choice. A UCX_TLS in the environment can only narrow
  /// it: an agent's session never opens a transport its policy leaves out.
  std::string transports;
  /// Network devices (UCX_NET_DEVICES), e.g. "lo"; empty: all.
  std::string net_devices;
};

/// `policy` (a UCX_TLS list) narrowed by `env` (the environment's UCX_TLS,
/// an allow list or a ^deny list, aliases sm/shm/mm expanded); kBadConfig
/// when nothing is left.
Result<std::string> narrow_transports(const std::string& policy, const char* env);

class Endpoint;

/// An active message as UCX handed it to us; valid only inside the handler.
struct IncomingAm {
  std::span<const uint8_t> header;
  const uint8_t* data = nullptr;  ///< eager payload, or the rendezvous descriptor
  size_t length = 0;
  bool rendezvous = false;        ///< fetch with Worker::receive_rendezvous or drop
};
using AmHandler = std::function<void(IncomingAm&)>;

/// Remote access to a peer's region, bound to one endpoint. Bounds-checked.
class RemoteKey {
 public:
  RemoteKey() = default;
  RemoteKey(RemoteKey&&) noexcept;
  RemoteKey& operator=(RemoteKey&&) noexcept;
  ~RemoteKey();
  [[nodiscard]] uint64_t base() const { return base_; }
  [[nodiscard]] uint64_t length() const { return length_; }
  [[nodiscard]] ucp_rkey* handle() const { return rkey_; }
  /// The peer's region mapped into this process (shared memory on one host,
  /// ucp_rkey_ptr), else null. Mapped, a put or get is a CPU copy made in the
  /// call, and a signal a release store, without UCX's per-operation cost.
  [[nodiscard]] uint8_t* mapped() const { return mapped_; }
  /// The peer process whose own memory this is (a process descriptor), else
  /// 0: the kernel copies it in the call (put_process, get_process), no UCX.
  [[nodiscard]] pid_t process() const { return process_; }
  /// Whether that process has ended, by the pidfd the import's policy held
  /// (false without one): its pid may name another process by now.
  [[nodiscard]] bool process_ended() const { return process_fd_ && net::process_ended(*process_fd_); }

 private:
  friend class Endpoint;
  ucp_rkey* rkey_ = nullptr;
  uint8_t* mapped_ = nullptr;
  pid_t process_ = 0;
  std::shared_ptr<const net::Fd> process_fd_;  // the policy's pidfd of process_, where it has one
  uint64_t base_ = 0, length_ = 0;
};

/// Operations on a mapped key (RemoteKey::mapped()), bounds-checked as an
/// Endpoint's: CPU copies made in the call that touch no UCX state, so they
/// need no lock, and complete when they return.
Status put_mapped(const RemoteKey& key, uint64_t offset, std::span<const uint8_t> src);
Status get_mapped(const RemoteKey& key, uint64_t offset, std::span<uint8_t> dst);
/// The mapped bytes [offset, offset + length), for copies made by the caller.
Result<std::span<uint8_t>> mapped_span(const RemoteKey& key, uint64_t offset, uint64_t length);
/// Operations on a process key (RemoteKey::process()), bounds-checked: the
/// kernel copies between the peer's memory and ours in the call
/// (process_vm_writev/readv), touching no UCX state. Memory the peer no
/// longer maps is kInvalidArgument, naming the range: the peer's bug
/// reaches only the peer.
Status put_process(const RemoteKey& key, uint64_t offset, std::span<const uint8_t> src);
Status get_process(const RemoteKey& key, uint64_t offset, std::span<uint8_t> dst);
/// Stores `value` into the aligned word at `offset` with release order: a
/// peer that sees it sees every put_mapped() made before it, on any CPU.
Status store_release(const RemoteKey& key, uint64_t offset, uint64_t value);

/// A registered local memory region. Owns the registration (and the memory
/// when allocated by UCX).
class MemoryRegion {
 public:
  MemoryRegion() = default;
  MemoryRegion(MemoryRegion&&) noexcept;
  MemoryRegion& operator=(MemoryRegion&&) noexcept;
  ~MemoryRegion();
  [[nodiscard]] uint8_t* data() const { return data_; }
  [[nodiscard]] size_t size() const { return size_; }
  [[nodiscard]] MemoryKind kind() const { return kind_; }
  /// Opaque bytes the peer passes to Endpoint::import_region.
  [[nodiscard]] const Bytes& descriptor() const { return descriptor_; }

 private:
  friend class Worker;
  ucp_context* context_ = nullptr;
  ucp_mem* memh_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  MemoryKind kind_ = MemoryKind::kHost;
  Bytes descriptor_;
};

/// A UCX operation started without a callback. done() is true once it has
/// completed (UCX completes it inside worker progress); status() is then its
/// result. Destroying an unfinished one hands it to UCX to release when it
/// completes: the buffer must stay valid until then or the endpoint closes.
class PolledOp {
 public:
  PolledOp() = default;
  PolledOp(PolledOp&& o) noexcept : request_(std::exchange(o.request_, nullptr)) {}
  PolledOp& operator=(PolledOp&& o) noexcept;
  PolledOp(const PolledOp&) = delete;
  PolledOp& operator=(const PolledOp&) = delete;
  // Inline: most operations on shared memory complete in place (no request).
  ~PolledOp() {
    if (request_) release();
  }
  [[nodiscard]] bool done() const { return !request_ || request_done(); }
  [[nodiscard]] Status status(const char* what) const { return request_ ? request_status(what) : Status(); }

 private:
  friend class Endpoint;
  explicit PolledOp(void* request) : request_(request) {}
  void release();
  [[nodiscard]] bool request_done() const;
  [[nodiscard]] Status request_status(const char* what) const;
  void* request_ = nullptr;  // null: completed in place (failures never make a PolledOp)
};

/// Owns one ucp endpoint. Move-only; closing is non-blocking.
class Endpoint {
 public:
  Endpoint() = default;
  Endpoint(Endpoint&&) noexcept;
  Endpoint& operator=(Endpoint&&) noexcept;
  ~Endpoint();

  [[nodiscard]] bool valid() const { return ep_ != nullptr; }
  /// Sends an active message. `header` is copied; `data` must stay valid
  /// until `done` runs (UCX picks eager or zero-copy rendezvous by size).
  void send(std::span<const uint8_t> header, std::span<const uint8_t> data, DoneFn done);
  /// Sends `data`, kept in the operation until UCX is done with it: no
  /// separate holder or callback to allocate.
  void send(std::span<const uint8_t> header, Buffer data);
  /// As send(header, Buffer): `data` is copied only if UCX cannot send it at once.
  void send_copy(std::span<const uint8_t> header, std::span<const uint8_t> data);
  /// One-sided write/read at `offset` of the remote region; errors with
  /// kOutOfRange (nothing transferred) when outside it. No callback and no
  /// allocation: shared-memory operations usually complete in place, and
  /// the caller polls the rest. Through UCX even for a mapped key: its CPU
  /// copies are put_mapped() and get_mapped().
  Result<PolledOp> put(const RemoteKey& key, uint64_t offset, std::span<const uint8_t> src);
  Result<PolledOp> get(const RemoteKey& key, uint64_t offset, std::span<uint8_t> dst);
  /// Completes all earlier operations at the target before `done` runs.
  void flush(DoneFn done);
  /// `map`: use the region through RemoteKey::mapped() where UCX maps it here.
  /// `policy`: the peer is not trusted, and its descriptor is checked and
  /// rebuilt first (check_descriptor); null: a peer we trust (our agent).
  Result<RemoteKey> import_region(std::span<const uint8_t> descriptor, bool map,
                                  const DescriptorPolicy* policy = nullptr);
  /// The lanes UCX chose, as ucp_ep_print_info prints them.
  [[nodiscard]] std::string lanes() const;
  /// Starts a non-blocking close; `force` after the peer failed. `done`
  /// runs when it has completed (at once if it completed in place).
  void close(bool force, DoneFn done = nullptr);

  struct State;  // internal: failure callback and flags, shared with UCX callbacks

 private:
  friend struct WorkerAccess;
  static Result<PolledOp> polled(void* status_ptr, const char* what);
  /// Sends a small message if UCX can complete it in place; false otherwise.
  bool send_now(std::span<const uint8_t> header, std::span<const uint8_t> data);
  void start_send(std::span<const uint8_t> header, std::span<const uint8_t> data, struct Op* op);
  ucp_ep* ep_ = nullptr;
  State* state_ = nullptr;  // owned; outlives the ep until the close completes
};

class Worker {
 public:
  /// The process-wide worker, created on first use with `config` (later
  /// calls get the same worker, whatever their config).
  static Result<std::shared_ptr<Worker>> process_worker(const TransportConfig& config);
  ~Worker();

  [[nodiscard]] RecursiveMutex& mutex() OB_RETURN_CAPABILITY(process_mutex) { return process_mutex; }
  /// Drives UCX; returns the number of events handled (0 when idle).
  unsigned progress();
  /// A file descriptor that becomes readable when progress() has work.
  [[nodiscard]] int event_fd() const { return efd_; }
  /// Orders this worker's one-sided operations (ucp_worker_fence).
  Status fence();
  /// Arms event_fd(); kAgain means events are pending: progress first.
  Status arm();

  [[nodiscard]] const Bytes& address() const { return address_; }
  /// The address without shared-memory transports: a peer that connects to it reaches this worker
  /// over the network even from the same host (agent to agent, as between nodes).
  [[nodiscard]] const Bytes& net_address() const { return net_address_; }
  void set_am_handler(AmHandler handler) { am_handler_ = std::move(handler); }

  /// Endpoint to a peer worker's address: UCX picks shared memory on the
  /// same host, TCP or RDMA across hosts. UCX 1.13 drops sysv/posix lanes
  /// from endpoints in peer-failure mode (they only have ep_check), so such
  /// endpoints are created without it: callers detect a dead peer on a
  /// socket of their own (the bootstrap's) and force-close this one, which
  /// cancels its outstanding operations.
  Result<Endpoint> connect_to(std::span<const uint8_t> worker_address);

  /// Fetches a rendezvous payload into `dst` (dst.size() == message length).
  void receive_rendezvous(const IncomingAm& am, std::span<uint8_t> dst, DoneFn done);

  Result<MemoryRegion> register_memory(void* data, size_t size, MemoryKind kind = MemoryKind::kHost);
  Result<MemoryRegion> allocate_memory(size_t size, MemoryKind kind = MemoryKind::kHost);
  /// `data` described for a peer on this host that copies it through the
  /// kernel (a process descriptor): nothing registered, nothing to undo.
  Result<MemoryRegion> expose_memory(void* data, size_t size);

 private:
  Worker() = default;
  friend struct WorkerAccess;
  static Result<std::shared_ptr<Worker>> create(ucp_context* context);
  Result<MemoryRegion> map(void* data, size_t size, bool allocate, MemoryKind kind);
  /// Whether this UCX can allocate and register GPU (CUDA) memory.
  [[nodiscard]] bool cuda_memory_supported() const;

  std::unordered_set<void*> closing_;  // endpoint-close requests still in flight
  std::unordered_map<void*, Endpoint::State*> open_;  // open endpoints by handle (their failures)
  ucp_context* context_ = nullptr;
  ucp_worker* worker_ = nullptr;
  int efd_ = -1;
  Bytes address_, net_address_;
  AmHandler am_handler_;
};

/// "1.13.1 (/usr/lib/x86_64-linux-gnu/libucp.so.0)": the UCX library in use and the file it was loaded from
/// (a wheel's or the system's).
std::string ucx_version();

/// Whether the UCX this process loaded carries GPU (CUDA) memory: one of its
/// memory domains detects it, which needs a UCX built with CUDA and, at run
/// time, the CUDA driver. Asked of a context of its own, once per process.
bool ucx_carries_cuda_memory();

}  // namespace outboard::transport
