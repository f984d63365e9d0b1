#include "transport/transport.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <dlfcn.h>
#include <sys/uio.h>
#include <ucp/api/ucp.h>

#include "outboard/log.h"
#include "transport/cuda_driver.h"
#include "transport/descriptor.h"

OB_LOG_MODULE("transport");

namespace outboard::transport {
namespace {

constexpr uint16_t kAmId = 1;
constexpr size_t kMaxAmHeader = 128;
// Regions UCX allocates (ucp_mem_map with ALLOCATE: rings, the memory
// service's) come from posix shared memory first: a session reaches a
// client's posix segment only through /proc/<client pid>, which it checks
// (descriptor.h), where a sysv segment id would name anyone's. UCX's own
// default puts md:sysv first.
constexpr const char* kAllocPriority = "md:posix,thp,md:*,mmap,heap";
// Messages up to this size go eager: over shared memory UCX's automatic
// threshold sends 8-64 KiB by rendezvous, whose acknowledgement wakes a
// sleeping sender a second time per request (an 8 KiB tokenize request:
// 1.75 -> 1.0 sleeps and ~8 us less client CPU on the 2-core VM).
constexpr size_t kEagerMaxBytes = 64 << 10;
// Sends up to this size (header and data) first try UCX's short path, which
// completes in place: no operation state to allocate, no callback. Shared
// memory's short limit is 100 B; larger sends skip the try.
constexpr size_t kSendNowMaxBytes = 128;

// `what` is a view: the hot paths (put, get, completions) pass literals and
// build no string unless the call failed.
Status from_ucs(ucs_status_t s, std::string_view what) {
  if (s == UCS_OK) return {};
  Code code = Code::kIoError;
  switch (s) {
    case UCS_ERR_NO_MEMORY: code = Code::kNoMemory; break;
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED: code = Code::kConnectionReset; break;
    case UCS_ERR_CANCELED: code = Code::kShutDown; break;
    case UCS_ERR_TIMED_OUT: code = Code::kTimedOut; break;
    case UCS_ERR_UNSUPPORTED: code = Code::kUnsupported; break;
    case UCS_ERR_INVALID_PARAM: code = Code::kInvalidArgument; break;
    case UCS_ERR_BUSY: code = Code::kAgain; break;
    default: break;
  }
  return {code, std::string(what) + ": " + ucs_status_string(s)};
}

}  // namespace

// Heap state of one non-blocking operation: its callback, the header of an
// AM send (UCX 1.13 reads it until completion) and the data it keeps alive.
struct Op {
  DoneFn done;
  Buffer owned;
  size_t header_len = 0;
  uint8_t header[kMaxAmHeader];
};

namespace {

void finish(Op* op, ucs_status_t s, const char* what) {
  DoneFn done = std::move(op->done);
  delete op;
  if (done) done(from_ucs(s, what));
}

void send_cb(void* request, ucs_status_t status, void* user_data) {
  finish(static_cast<Op*>(user_data), status, "send");
  ucp_request_free(request);
}

void recv_am_cb(void* request, ucs_status_t status, size_t, void* user_data) {
  finish(static_cast<Op*>(user_data), status, "rendezvous receive");
  ucp_request_free(request);
}

// Completes `op` now or when UCX calls back.
void track(ucs_status_ptr_t r, Op* op, const char* what) {
  if (r == nullptr) return finish(op, UCS_OK, what);
  if (UCS_PTR_IS_ERR(r)) return finish(op, UCS_PTR_STATUS(r), what);
}

ucp_request_param_t op_param(Op* op) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = send_cb;
  p.user_data = op;
  return p;
}

void put_u32(Bytes& b, uint32_t v) { b.insert(b.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 4); }
void put_u64(Bytes& b, uint64_t v) { b.insert(b.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 8); }

}  // namespace

// ---------------------------------------------------------------- Endpoint

struct Endpoint::State {
  std::unordered_set<void*>* closing = nullptr;  // the worker's in-flight closes
  std::unordered_map<void*, State*>* open = nullptr;  // the worker's open endpoints, by handle
  DoneFn on_closed;  // close()'s callback, once the close completes
  bool closed = false;
  bool failed = false;
};

namespace {

// Who owns the connection learns of a lost peer from a socket of its own;
// this only stops further use of the endpoint (and forces its close). UCX
// 1.13 may report the failure of a TCP lane after its endpoint's close
// completed: the state is found by handle among the open ones, not trusted
// from the argument.
void ep_error_cb(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* open = static_cast<std::unordered_map<void*, Endpoint::State*>*>(arg);
  auto it = open->find(ep);
  if (it == open->end()) return;
  Endpoint::State* state = it->second;
  if (state->closed || state->failed) return;
  state->failed = true;
  OB_LOG_DBG("endpoint %p failed: %s", static_cast<void*>(ep), ucs_status_string(status));
}

void ep_close_cb(void* request, ucs_status_t s, void* user_data) {
  auto* state = static_cast<Endpoint::State*>(user_data);
  state->closing->erase(request);
  DoneFn done = std::move(state->on_closed);
  delete state;
  ucp_request_free(request);
  if (done) done(from_ucs(s, "endpoint close"));
}

}  // namespace

Endpoint::Endpoint(Endpoint&& o) noexcept : ep_(o.ep_), state_(o.state_) {
  o.ep_ = nullptr;
  o.state_ = nullptr;
}
Endpoint& Endpoint::operator=(Endpoint&& o) noexcept {
  if (this != &o) {
    close(false);
    std::swap(ep_, o.ep_);
    std::swap(state_, o.state_);
  }
  return *this;
}
Endpoint::~Endpoint() { close(false); }

void Endpoint::close(bool force, DoneFn done) {
  if (!ep_) {
    if (done) done({});
    return;
  }
  state_->closed = true;
  state_->open->erase(ep_);
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = (force || state_->failed) ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  p.cb.send = ep_close_cb;
  p.user_data = state_;
  ucs_status_ptr_t r = ucp_ep_close_nbx(ep_, &p);
  if (r == nullptr || UCS_PTR_IS_ERR(r)) {
    delete state_;
    if (done) done(from_ucs(UCS_PTR_STATUS(r), "endpoint close"));
  } else {
    state_->on_closed = std::move(done);
    state_->closing->insert(r);
  }
  ep_ = nullptr;
  state_ = nullptr;
}

void Endpoint::send(std::span<const uint8_t> header, std::span<const uint8_t> data, DoneFn done) {
  if (!ep_ || state_->failed) {
    if (done) done({Code::kConnectionReset, "send on a failed or closed endpoint"});
    return;
  }
  if (header.size() > kMaxAmHeader) {
    if (done) done({Code::kTooBig, "am header of " + std::to_string(header.size()) +
                                       " B exceeds " + std::to_string(kMaxAmHeader) + " B"});
    return;
  }
  if (send_now(header, data)) {
    if (done) done({});
    return;
  }
  start_send(header, data, new Op{std::move(done)});
}

void Endpoint::send(std::span<const uint8_t> header, Buffer data) {
  if (!ep_ || state_->failed || header.size() > kMaxAmHeader) return;  // as a send whose callback ignores errors
  if (send_now(header, data.span())) return;
  auto* op = new Op{nullptr, std::move(data)};
  start_send(header, op->owned.span(), op);
}

void Endpoint::send_copy(std::span<const uint8_t> header, std::span<const uint8_t> data) {
  if (!ep_ || state_->failed || header.size() > kMaxAmHeader || send_now(header, data)) return;
  auto* op = new Op{nullptr, Buffer::copy_of(data)};
  start_send(header, op->owned.span(), op);
}

bool Endpoint::send_now(std::span<const uint8_t> header, std::span<const uint8_t> data) {
  if (header.size() + data.size() > kSendNowMaxBytes) return false;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL | UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_AM_SEND_FLAG_EAGER;
  // Anything but done in place (no resource, an error) goes the usual way,
  // which reports errors through the callback.
  return ucp_am_send_nbx(ep_, kAmId, header.data(), header.size(), data.data(), data.size(), &p) == nullptr;
}

void Endpoint::start_send(std::span<const uint8_t> header, std::span<const uint8_t> data, Op* op) {
  op->header_len = header.size();
  std::memcpy(op->header, header.data(), header.size());
  ucp_request_param_t p = op_param(op);
  p.flags = data.size() <= kEagerMaxBytes ? UCP_AM_SEND_FLAG_EAGER : 0;
  if (p.flags != 0) p.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
  track(ucp_am_send_nbx(ep_, kAmId, op->header, op->header_len, data.data(), data.size(), &p), op,
        "am send");
}

static Status check_bounds(const RemoteKey& key, uint64_t offset, size_t len, const char* what) {
  if (!key.handle() && !key.process()) return {Code::kInvalidArgument, std::string(what) + " on an empty remote region"};
  if (offset > key.length() || len > key.length() - offset)
    return {Code::kOutOfRange, std::string(what) + " of " + std::to_string(len) + " B at offset " +
                                   std::to_string(offset) + " exceeds remote region of " +
                                   std::to_string(key.length()) + " B"};
  return {};
}

Status put_mapped(const RemoteKey& key, uint64_t offset, std::span<const uint8_t> src) {
  OB_RETURN_IF_ERROR(check_bounds(key, offset, src.size(), "put"));
  if (!key.mapped()) return {Code::kInvalidArgument, "put_mapped into a region that is not mapped"};
  if (!src.empty()) std::memcpy(key.mapped() + offset, src.data(), src.size());
  return {};
}

Result<std::span<uint8_t>> mapped_span(const RemoteKey& key, uint64_t offset, uint64_t length) {
  OB_RETURN_IF_ERROR(check_bounds(key, offset, length, "mapped span"));
  if (!key.mapped()) return Status(Code::kInvalidArgument, "mapped span of a region that is not mapped");
  return std::span<uint8_t>(key.mapped() + offset, length);
}

Status get_mapped(const RemoteKey& key, uint64_t offset, std::span<uint8_t> dst) {
  OB_RETURN_IF_ERROR(check_bounds(key, offset, dst.size(), "get"));
  if (!key.mapped()) return {Code::kInvalidArgument, "get_mapped from a region that is not mapped"};
  if (!dst.empty()) std::memcpy(dst.data(), key.mapped() + offset, dst.size());
  return {};
}

// One kernel copy between the peer process's memory and ours; a short count
// (the rest crosses a page the peer does not map) goes on from where it stopped.
// Only while the process the key was checked for runs: its pid is free for
// another only once it ended and was reaped, so a later process that reused
// the number would have to appear between this check and the copy.
static Status process_copy(const RemoteKey& key, uint64_t offset, std::span<uint8_t> local, bool write) {
  const char* what = write ? "put" : "get";
  OB_RETURN_IF_ERROR(check_bounds(key, offset, local.size(), what));
  if (!key.process()) return {Code::kInvalidArgument, std::string(what) + " through the kernel on a key of no process"};
  if (key.process_ended())
    return {Code::kConnectionReset, std::string(what) + " of " + std::to_string(local.size()) + " B of process " +
                                        std::to_string(key.process()) + ": that process has ended"};
  for (size_t done = 0; done < local.size();) {
    iovec mine{local.data() + done, local.size() - done};
    iovec theirs{reinterpret_cast<void*>(key.base() + offset + done), local.size() - done};
    const ssize_t n = write ? ::process_vm_writev(key.process(), &mine, 1, &theirs, 1, 0)
                            : ::process_vm_readv(key.process(), &mine, 1, &theirs, 1, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    const int err = n == 0 ? EFAULT : errno;
    const std::string range = std::string(what) + " of " + std::to_string(local.size() - done) + " B at " +
                              std::to_string(key.base() + offset + done) + " of process " +
                              std::to_string(key.process());
    switch (err) {
      case EFAULT: return {Code::kInvalidArgument, range + ": that process does not map this memory (freed?)"};
      case ESRCH: return {Code::kConnectionReset, range + ": that process has ended"};
      case EPERM:
        return {Code::kUnsupported, range + ": not permitted (another user, or ptrace rules such as Yama's "
                                            "ptrace_scope forbid it)"};
      default: return {Code::kIoError, range + ": " + std::strerror(err)};
    }
  }
  return {};
}

Status put_process(const RemoteKey& key, uint64_t offset, std::span<const uint8_t> src) {
  return process_copy(key, offset, {const_cast<uint8_t*>(src.data()), src.size()}, true);
}

Status get_process(const RemoteKey& key, uint64_t offset, std::span<uint8_t> dst) {
  return process_copy(key, offset, dst, false);
}

Status store_release(const RemoteKey& key, uint64_t offset, uint64_t value) {
  OB_RETURN_IF_ERROR(check_bounds(key, offset, sizeof value, "signal"));
  if (!key.mapped()) return {Code::kInvalidArgument, "release store into a region that is not mapped"};
  if ((reinterpret_cast<uintptr_t>(key.mapped()) + offset) % alignof(uint64_t) != 0)
    return {Code::kInvalidArgument, "signal word at offset " + std::to_string(offset) + " is not aligned"};
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(key.mapped() + offset)).store(value, std::memory_order_release);
  return {};
}

Result<PolledOp> Endpoint::put(const RemoteKey& key, uint64_t offset, std::span<const uint8_t> src) {
  if (key.process()) {
    OB_RETURN_IF_ERROR(put_process(key, offset, src));
    return PolledOp();
  }
  OB_RETURN_IF_ERROR(check_bounds(key, offset, src.size(), "put"));
  if (!ep_ || state_->failed) return Status(Code::kConnectionReset, "put on a failed or closed endpoint");
  ucp_request_param_t p{};
  return polled(ucp_put_nbx(ep_, src.data(), src.size(), key.base() + offset, key.handle(), &p), "put");
}

Result<PolledOp> Endpoint::get(const RemoteKey& key, uint64_t offset, std::span<uint8_t> dst) {
  if (key.process()) {
    OB_RETURN_IF_ERROR(get_process(key, offset, dst));
    return PolledOp();
  }
  OB_RETURN_IF_ERROR(check_bounds(key, offset, dst.size(), "get"));
  if (!ep_ || state_->failed) return Status(Code::kConnectionReset, "get on a failed or closed endpoint");
  ucp_request_param_t p{};
  return polled(ucp_get_nbx(ep_, dst.data(), dst.size(), key.base() + offset, key.handle(), &p), "get");
}

Result<PolledOp> Endpoint::polled(void* r, const char* what) {
  auto s = static_cast<ucs_status_ptr_t>(r);
  if (UCS_PTR_IS_ERR(s)) return from_ucs(UCS_PTR_STATUS(s), what);
  return PolledOp(s);  // null when done in place
}

PolledOp& PolledOp::operator=(PolledOp&& o) noexcept {
  if (this != &o) {
    if (request_) release();
    request_ = std::exchange(o.request_, nullptr);
  }
  return *this;
}

void PolledOp::release() { ucp_request_free(request_); }

bool PolledOp::request_done() const { return ucp_request_check_status(request_) != UCS_INPROGRESS; }

Status PolledOp::request_status(const char* what) const { return from_ucs(ucp_request_check_status(request_), what); }

void Endpoint::flush(DoneFn done) {
  if (!ep_ || state_->failed) {
    if (done) done({Code::kConnectionReset, "flush on a failed or closed endpoint"});
    return;
  }
  auto* op = new Op{std::move(done)};
  ucp_request_param_t p = op_param(op);
  track(ucp_ep_flush_nbx(ep_, &p), op, "flush");
}

Result<RemoteKey> Endpoint::import_region(std::span<const uint8_t> d, bool map, const DescriptorPolicy* policy) {
  if (!ep_) return Status(Code::kNotConnected, "import on a closed endpoint");
  RemoteKey key;
  uint32_t magic = 0;
  std::vector<uint8_t> checked;
  std::span<const uint8_t> packed;
  if (policy) {
    OB_ASSIGN_OR_RETURN(CheckedDescriptor c, check_descriptor(d, *policy));
    magic = kRegionMagic;
    key.base_ = c.base;
    key.length_ = c.length;
    if (c.process) {  // the kernel copies it: no key for UCX
      key.process_ = policy->owner;
      key.process_fd_ = policy->owner_process;
      return key;
    }
    checked = std::move(c.packed_key);
    packed = checked;
  } else {
    if (d.size() < kDescriptorHeaderBytes ||
        (std::memcpy(&magic, d.data(), 4), magic != kRegionMagic && magic != kCudaRegionMagic))
      return Status(Code::kInvalidArgument,
                    "region descriptor of " + std::to_string(d.size()) + " B is not an outboard descriptor");
    std::memcpy(&key.base_, d.data() + 4, 8);
    std::memcpy(&key.length_, d.data() + 12, 8);
    packed = d.subspan(kDescriptorHeaderBytes);
  }
  // UCX reaches a peer's GPU memory (cuda_ipc) through the driver, on this thread.
  if (magic == kCudaRegionMagic)
    OB_RETURN_IF_ERROR(CudaDriver::get().use_context().with_context("import of a GPU memory region"));
  ucs_status_t s = ucp_ep_rkey_unpack(ep_, packed.data(), &key.rkey_);
  if (s != UCS_OK) return from_ucs(s, "unpack remote key");
  // UCS_ERR_UNREACHABLE unless a shared-memory transport maps the region here.
  void* mapped = nullptr;
  if (map && magic == kRegionMagic && ucp_rkey_ptr(key.rkey_, key.base_, &mapped) == UCS_OK)
    key.mapped_ = static_cast<uint8_t*>(mapped);
  return key;
}

std::string Endpoint::lanes() const {
  if (!ep_) return {};
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  if (!f) return {};
  ucp_ep_print_info(ep_, f);
  fclose(f);
  std::string out(buf, len);
  free(buf);
  return out;
}

// --------------------------------------------------------------- RemoteKey

RemoteKey::RemoteKey(RemoteKey&& o) noexcept
    : rkey_(o.rkey_), mapped_(o.mapped_), process_(o.process_), process_fd_(std::move(o.process_fd_)),
      base_(o.base_), length_(o.length_) {
  o.rkey_ = nullptr;
  o.mapped_ = nullptr;
  o.process_ = 0;
}
RemoteKey& RemoteKey::operator=(RemoteKey&& o) noexcept {
  std::swap(rkey_, o.rkey_);
  std::swap(mapped_, o.mapped_);
  std::swap(process_, o.process_);
  std::swap(process_fd_, o.process_fd_);
  base_ = o.base_;
  length_ = o.length_;
  return *this;
}
RemoteKey::~RemoteKey() {
  if (rkey_) ucp_rkey_destroy(rkey_);
}

// ------------------------------------------------------------ MemoryRegion

MemoryRegion::MemoryRegion(MemoryRegion&& o) noexcept { *this = std::move(o); }
MemoryRegion& MemoryRegion::operator=(MemoryRegion&& o) noexcept {
  std::swap(context_, o.context_);
  std::swap(memh_, o.memh_);
  std::swap(data_, o.data_);
  std::swap(size_, o.size_);
  std::swap(kind_, o.kind_);
  std::swap(descriptor_, o.descriptor_);
  return *this;
}
MemoryRegion::~MemoryRegion() {
  if (memh_) {
    ucs_status_t s = ucp_mem_unmap(context_, memh_);
    if (s != UCS_OK) OB_LOG_ERR("unmap region of %zu B: %s", size_, ucs_status_string(s));
  }
}

struct WorkerAccess {
  static Endpoint wrap(ucp_ep_h ep, Endpoint::State* state) {
    Endpoint e;
    e.ep_ = ep;
    e.state_ = state;
    return e;
  }
  static void deliver(Worker* w, IncomingAm& am) {
    if (w->am_handler_) w->am_handler_(am);
  }
};

// ------------------------------------------------------------------ Worker

namespace {

// Transport names as UCX_TLS spells them, with the aliases expanded.
std::vector<std::string> expand_transports(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    std::string name = list.substr(start, end - start);
    if (auto colon = name.find(':'); colon != std::string::npos) name.resize(colon);  // "ud:aux"
    if (name == "sm" || name == "shm") out.insert(out.end(), {"posix", "sysv", "cma", "knem", "xpmem"});
    else if (name == "mm") out.insert(out.end(), {"posix", "sysv", "xpmem"});
    else if (!name.empty()) out.push_back(name);
    start = end + 1;
  }
  return out;
}

}  // namespace

RecursiveMutex process_mutex;

Result<std::string> narrow_transports(const std::string& policy, const char* env) {
  if (!env || !*env || policy.empty()) return policy;
  const bool deny = env[0] == '^';
  const std::vector<std::string> named = expand_transports(env + (deny ? 1 : 0));
  auto in_env = [&](const std::string& t) {
    return std::find(named.begin(), named.end(), "all") != named.end() ||
           std::find(named.begin(), named.end(), t) != named.end();
  };
  std::string out;
  for (const std::string& t : expand_transports(policy))
    if (in_env(t) != deny) out += (out.empty() ? "" : ",") + t;
  if (out.empty())
    return Status(Code::kBadConfig, "UCX_TLS=" + std::string(env) + " leaves none of the transports this side may use (" +
                                        policy + ")");
  return out;
}

Result<std::shared_ptr<Worker>> Worker::process_worker(const TransportConfig& config) {
  static std::mutex mu;
  static std::weak_ptr<Worker> current;
  std::lock_guard lock(mu);
  if (auto w = current.lock()) return w;

  ucp_config_t* cfg = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &cfg);
  if (s != UCS_OK) return from_ucs(s, "read UCX config");
  auto modify = [&](const char* name, const std::string& value) -> Status {
    return from_ucs(ucp_config_modify(cfg, name, value.c_str()), std::string("UCX option ") + name + "=" + value);
  };
  Status st;
  if (!std::getenv("UCX_ALLOC_PRIO")) st = modify("ALLOC_PRIO", kAllocPriority);
  if (st.ok() && !config.transports.empty()) {
    auto tls = narrow_transports(config.transports, std::getenv("UCX_TLS"));
    st = tls.ok() ? modify("TLS", tls.value()) : tls.status();
  }
  if (st.ok() && !config.net_devices.empty()) st = modify("NET_DEVICES", config.net_devices);
  ucp_context* context = nullptr;
  if (st.ok()) {
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
    st = from_ucs(ucp_init(&params, cfg, &context), "ucp_init");
  }
  ucp_config_release(cfg);
  OB_RETURN_IF_ERROR(st);
  OB_ASSIGN_OR_RETURN(auto w, create(context));
  current = w;
  return w;
}

Result<std::shared_ptr<Worker>> Worker::create(ucp_context* context) {
  std::shared_ptr<Worker> w(new Worker());
  w->context_ = context;  // owned from here: cleaned up with the worker, even a half-made one
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucs_status_t s = ucp_worker_create(w->context_, &wp, &w->worker_);
  if (s != UCS_OK) return from_ucs(s, "ucp_worker_create");
  s = ucp_worker_get_efd(w->worker_, &w->efd_);
  if (s != UCS_OK) return from_ucs(s, "ucp_worker_get_efd");

  ucp_address_t* addr = nullptr;
  size_t addr_len = 0;
  s = ucp_worker_get_address(w->worker_, &addr, &addr_len);
  if (s != UCS_OK) return from_ucs(s, "ucp_worker_get_address");
  w->address_.assign(reinterpret_cast<uint8_t*>(addr), reinterpret_cast<uint8_t*>(addr) + addr_len);
  ucp_worker_release_address(w->worker_, addr);
  ucp_worker_attr_t attr{};
  attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS | UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS;
  attr.address_flags = UCP_WORKER_ADDRESS_FLAG_NET_ONLY;
  s = ucp_worker_query(w->worker_, &attr);
  if (s != UCS_OK) return from_ucs(s, "ucp_worker_query (network address)");
  const auto* net = reinterpret_cast<const uint8_t*>(attr.address);
  w->net_address_.assign(net, net + attr.address_length);
  ucp_worker_release_address(w->worker_, attr.address);

  ucp_am_handler_param_t hp{};
  hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  hp.id = kAmId;
  hp.flags = UCP_AM_FLAG_WHOLE_MSG;
  hp.arg = w.get();
  hp.cb = [](void* arg, const void* header, size_t header_length, void* data, size_t length,
             const ucp_am_recv_param_t* param) -> ucs_status_t {
    IncomingAm am;
    am.header = {static_cast<const uint8_t*>(header), header_length};
    am.data = static_cast<const uint8_t*>(data);
    am.length = length;
    am.rendezvous = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    WorkerAccess::deliver(static_cast<Worker*>(arg), am);
    return UCS_OK;
  };
  s = ucp_worker_set_am_recv_handler(w->worker_, &hp);
  if (s != UCS_OK) return from_ucs(s, "set am handler");
  OB_LOG_DBG("ucx worker ready, address %zu B", w->address_.size());
  return w;
}

Worker::~Worker() {
  constexpr int64_t kCloseDrainMs = 1000;
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kCloseDrainMs);
  while (!closing_.empty() && std::chrono::steady_clock::now() < until) ucp_worker_progress(worker_);
  for (void* r : closing_) ucp_request_free(r);
  if (worker_) ucp_worker_destroy(worker_);
  if (context_) ucp_cleanup(context_);
}

unsigned Worker::progress() { return ucp_worker_progress(worker_); }

Status Worker::fence() { return from_ucs(ucp_worker_fence(worker_), "ucp_worker_fence"); }

Status Worker::arm() {
  ucs_status_t s = ucp_worker_arm(worker_);
  if (s == UCS_ERR_BUSY) return {Code::kAgain, "events pending"};
  return from_ucs(s, "ucp_worker_arm");
}

Result<Endpoint> Worker::connect_to(std::span<const uint8_t> address) {
  auto* state = new Endpoint::State();
  state->closing = &closing_;
  state->open = &open_;
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                 UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
  p.err_mode = UCP_ERR_HANDLING_MODE_NONE;  // keeps shm lanes (transport.h)
  p.err_handler.cb = ep_error_cb;
  p.err_handler.arg = &open_;
  p.address = reinterpret_cast<const ucp_address_t*>(address.data());
  ucp_ep_h ep = nullptr;
  ucs_status_t s = ucp_ep_create(worker_, &p, &ep);
  if (s != UCS_OK) {
    delete state;
    return from_ucs(s, "connect to peer worker address");
  }
  open_[ep] = state;
  return WorkerAccess::wrap(ep, state);
}

void Worker::receive_rendezvous(const IncomingAm& am, std::span<uint8_t> dst, DoneFn done) {
  auto* op = new Op{std::move(done)};
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.recv_am = recv_am_cb;
  p.user_data = op;
  track(ucp_am_recv_data_nbx(worker_, const_cast<uint8_t*>(am.data), dst.data(), dst.size(), &p), op,
        "rendezvous receive");
}

Result<MemoryRegion> Worker::register_memory(void* data, size_t size, MemoryKind kind) {
  return map(data, size, false, kind);
}
Result<MemoryRegion> Worker::allocate_memory(size_t size, MemoryKind kind) { return map(nullptr, size, true, kind); }

Result<MemoryRegion> Worker::expose_memory(void* data, size_t size) {
  if (size == 0) return Status(Code::kInvalidArgument, "memory region of 0 B");
  MemoryRegion r;
  r.data_ = static_cast<uint8_t*>(data);
  r.size_ = size;
  put_u32(r.descriptor_, kProcessRegionMagic);
  put_u64(r.descriptor_, reinterpret_cast<uint64_t>(data));
  put_u64(r.descriptor_, size);
  return r;
}

namespace {

// UCS_MEMORY_TYPE_CUDA is 1 in every UCX from 1.13 to 1.22 (what came later
// was added after it).
bool carries_cuda(ucp_context* context) {
  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  return ucp_context_query(context, &attr) == UCS_OK && (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
}

}  // namespace

bool Worker::cuda_memory_supported() const { return carries_cuda(context_); }

bool ucx_carries_cuda_memory() {
  // Asked of a context of its own once: the UCX loaded and its configuration are the process's.
  static const bool cuda = [] {
    ucp_config_t* cfg = nullptr;
    if (ucp_config_read(nullptr, nullptr, &cfg) != UCS_OK) return false;
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA;
    ucp_context* context = nullptr;
    const bool made = ucp_init(&params, cfg, &context) == UCS_OK;
    ucp_config_release(cfg);
    if (!made) return false;
    const bool carries = carries_cuda(context);
    ucp_cleanup(context);
    return carries;
  }();
  return cuda;
}

Result<MemoryRegion> Worker::map(void* data, size_t size, bool allocate, MemoryKind kind) {
  const bool cuda = kind == MemoryKind::kCuda;
  if (size == 0) return Status(Code::kInvalidArgument, "memory region of 0 B");
  if (cuda && !cuda_memory_supported())
    return Status(Code::kUnsupported, "GPU memory region of " + std::to_string(size) +
                                          " B: this UCX has no CUDA memory support (ucx_info -d lists no "
                                          "cuda_copy; UCX " + ucx_version() + ")");
  if (cuda) OB_RETURN_IF_ERROR(CudaDriver::get().use_context().with_context("GPU memory region of " +
                                                                          std::to_string(size) + " B"));
  ucp_mem_map_params_t p{};
  p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
  p.address = data;
  p.length = size;
  p.flags = allocate ? UCP_MEM_MAP_ALLOCATE : 0;
  // Memory we register is left for UCX to detect rather than named UCS_MEMORY_TYPE_UNKNOWN: that value
  // is UCS_MEMORY_TYPE_LAST, 5 in UCX 1.13's headers and RDMA in 1.22's, so a build against Debian's
  // UCX that loads the libucx wheel's would register host memory as RDMA device memory.
  if (cuda || allocate) {
    p.field_mask |= UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
    p.memory_type = cuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
  }
  MemoryRegion r;
  r.context_ = context_;
  r.kind_ = kind;
  ucs_status_t s = ucp_mem_map(context_, &p, &r.memh_);
  if (s != UCS_OK)
    return from_ucs(s, std::string(allocate ? "allocate " : "register ") + (cuda ? "GPU " : "") + "memory region of " +
                           std::to_string(size) + " B");
  ucp_mem_attr_t attr{};
  attr.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
  ucp_mem_query(r.memh_, &attr);
  r.data_ = static_cast<uint8_t*>(attr.address);
  r.size_ = size;
  void* rkey = nullptr;
  size_t rkey_len = 0;
  s = ucp_rkey_pack(context_, r.memh_, &rkey, &rkey_len);
  if (s != UCS_OK) return from_ucs(s, "pack remote key");
  put_u32(r.descriptor_, cuda ? kCudaRegionMagic : kRegionMagic);
  put_u64(r.descriptor_, reinterpret_cast<uint64_t>(r.data_));
  put_u64(r.descriptor_, size);
  r.descriptor_.insert(r.descriptor_.end(), static_cast<uint8_t*>(rkey), static_cast<uint8_t*>(rkey) + rkey_len);
  ucp_rkey_buffer_release(rkey);
  return r;
}

std::string ucx_version() {
  std::string v = ucp_get_version_string();
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ucp_get_version_string), &info) != 0 && info.dli_fname != nullptr) {
    // Normal form: a library found through an RPATH such as $ORIGIN/../lib is named without the "..".
    v += " (" + std::filesystem::path(info.dli_fname).lexically_normal().string() + ")";
  }
  return v;
}

}  // namespace outboard::transport
