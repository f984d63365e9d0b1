// One-sided data path of a Connection: registered regions, put/get,
// flush, write-with-notify and put-with-signal.
#include <sys/prctl.h>

#include <atomic>

#include "channel/access.h"
#include "channel/connection_impl.h"
#include "util/cpu_relax.h"

namespace outboard {

using channel::FrameHeader;
using channel::FrameType;
using channel::Lock;

struct Region::Impl {
  Impl(std::shared_ptr<channel::Hub> h, transport::MemoryRegion m) : hub(std::move(h)), mr(std::move(m)) {}
  std::shared_ptr<channel::Hub> hub;  // keeps the worker alive past the region
  transport::MemoryRegion mr;
  ~Impl() {
    Lock lock(hub->mutex());
    mr = transport::MemoryRegion();
  }
};

struct RemoteRegion::Impl {
  Impl(std::shared_ptr<channel::Hub> h, const Connection::Impl* c, transport::RemoteKey k)
      : hub(std::move(h)), conn(c), key(std::move(k)) {}
  std::shared_ptr<channel::Hub> hub;
  const Connection::Impl* conn = nullptr;  // non-owning: identifies the connection
  transport::RemoteKey key;
  ~Impl() {
    Lock lock(hub->mutex());
    key = transport::RemoteKey();
  }
};

Region::Region() = default;
Region::Region(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Region::Region(Region&&) noexcept = default;
Region& Region::operator=(Region&&) noexcept = default;
Region::~Region() = default;
uint8_t* Region::data() const { return impl_ ? impl_->mr.data() : nullptr; }
size_t Region::size() const { return impl_ ? impl_->mr.size() : 0; }
MemoryKind Region::kind() const { return impl_ ? impl_->mr.kind() : MemoryKind::kHost; }
std::span<const uint8_t> Region::descriptor() const {
  if (!impl_) return {};
  return impl_->mr.descriptor();
}

RemoteRegion::RemoteRegion() = default;
RemoteRegion::RemoteRegion(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Region channel::detail::Access::region(std::unique_ptr<Region::Impl> impl) { return Region(std::move(impl)); }
RemoteRegion channel::detail::Access::remote_region(std::unique_ptr<RemoteRegion::Impl> impl) {
  return RemoteRegion(std::move(impl));
}
RemoteRegion::RemoteRegion(RemoteRegion&&) noexcept = default;
RemoteRegion& RemoteRegion::operator=(RemoteRegion&&) noexcept = default;
RemoteRegion::~RemoteRegion() = default;
uint64_t RemoteRegion::size() const { return impl_ ? impl_->key.length() : 0; }
bool RemoteRegion::mapped() const { return impl_ && impl_->key.mapped() != nullptr; }
bool RemoteRegion::in_call() const { return impl_ && (impl_->key.mapped() || impl_->key.process()); }

Result<std::span<uint8_t>> RemoteRegion::mapped_span(uint64_t offset, uint64_t length) const {
  if (!impl_) return Status(Code::kInvalidArgument, "mapped span of an empty remote region");
  return transport::mapped_span(impl_->key, offset, length);
}

Result<Region> Connection::register_memory(void* data, size_t size, MemoryKind kind) {
  Lock lock(impl_->hub->mutex());
  OB_ASSIGN_OR_RETURN(auto mr, impl_->hub->worker().register_memory(data, size, kind));
  return channel::detail::Access::region(std::make_unique<Region::Impl>(impl_->hub, std::move(mr)));
}

Result<Region> Connection::allocate_memory(size_t size, MemoryKind kind) {
  Lock lock(impl_->hub->mutex());
  OB_ASSIGN_OR_RETURN(auto mr, impl_->hub->worker().allocate_memory(size, kind));
  return channel::detail::Access::region(std::make_unique<Region::Impl>(impl_->hub, std::move(mr)));
}

Result<Region> Connection::expose_memory(void* data, size_t size) {
  Lock lock(impl_->hub->mutex());
  OB_RETURN_IF_ERROR(impl_->check_open());
  OB_ASSIGN_OR_RETURN(auto mr, impl_->hub->worker().expose_memory(data, size));
  // EINVAL where Yama is absent: nothing to allow then.
  if (!impl_->ptracer_set && !impl_->peer_in_process && impl_->peer_pid > 0) {
    ::prctl(PR_SET_PTRACER, static_cast<unsigned long>(impl_->peer_pid), 0, 0, 0);
    impl_->ptracer_set = true;
  }
  return channel::detail::Access::region(std::make_unique<Region::Impl>(impl_->hub, std::move(mr)));
}

Result<RemoteRegion> Connection::import_region(std::span<const uint8_t> descriptor) {
  Lock lock(impl_->hub->mutex());
  OB_RETURN_IF_ERROR(impl_->check_open());
  OB_ASSIGN_OR_RETURN(auto key, impl_->import(descriptor, impl_->config.map_peer_regions));
  return channel::detail::Access::remote_region(
      std::make_unique<RemoteRegion::Impl>(impl_->hub, impl_.get(), std::move(key)));
}

namespace {

// A region mapped into this process, or a peer's exposed memory, is written
// and read by copies that touch no UCX state: no lock. A connection that is
// not open takes the locked path, which names why.
bool unlocked_path(const Connection::Impl& conn, const RemoteRegion& region, bool mapped_only) {
  return (mapped_only ? region.mapped() : region.in_call()) && channel::detail::Access::impl(region).conn == &conn &&
         conn.state == Connection::Impl::State::kOpen;
}

Status check_region(const Connection::Impl& conn, const RemoteRegion& region) OB_HUB_LOCKED {
  if (region.size() == 0) return {Code::kInvalidArgument, "empty remote region"};
  if (channel::detail::Access::impl(region).conn != &conn)
    return {Code::kInvalidArgument, "remote region was imported on another connection"};
  return conn.check_open();
}

}  // namespace

Status Connection::put(const RemoteRegion& region, uint64_t offset, std::span<const uint8_t> src,
                       Deadline deadline) {
  if (unlocked_path(*impl_, region, false)) {
    const auto& key = channel::detail::Access::impl(region).key;
    return key.process() ? transport::put_process(key, offset, src) : transport::put_mapped(key, offset, src);
  }
  Lock lock(impl_->hub->mutex());
  OB_RETURN_IF_ERROR(check_region(*impl_, region));
  OB_ASSIGN_OR_RETURN(transport::PolledOp op, impl_->data_ep.put(channel::detail::Access::impl(region).key, offset, src));
  return impl_->wait_polled(deadline, op, "put");
}

Status Connection::get(const RemoteRegion& region, uint64_t offset, std::span<uint8_t> dst,
                       Deadline deadline) {
  if (unlocked_path(*impl_, region, false)) {
    const auto& key = channel::detail::Access::impl(region).key;
    return key.process() ? transport::get_process(key, offset, dst) : transport::get_mapped(key, offset, dst);
  }
  Lock lock(impl_->hub->mutex());
  OB_RETURN_IF_ERROR(check_region(*impl_, region));
  OB_ASSIGN_OR_RETURN(transport::PolledOp op, impl_->data_ep.get(channel::detail::Access::impl(region).key, offset, dst));
  return impl_->wait_polled(deadline, op, "get");
}

Status Connection::flush(Deadline deadline) {
  Lock lock(impl_->hub->mutex());
  OB_RETURN_IF_ERROR(impl_->check_open());
  auto op = std::make_shared<Completion>();
  impl_->data_ep.flush(completer(op));
  return impl_->wait_done(deadline, op, "flush");
}

Status Connection::fence() {
  Lock lock(impl_->hub->mutex());
  OB_RETURN_IF_ERROR(impl_->check_open());
  return impl_->hub->worker().fence();
}

namespace {

Status check_signal_word(uint64_t offset, uint64_t size, const char* whose) {
  if (offset % 8 != 0)
    return {Code::kInvalidArgument, "signal offset " + std::to_string(offset) + " is not a multiple of 8"};
  if (offset > size || size - offset < 8)
    return {Code::kOutOfRange, "signal word at offset " + std::to_string(offset) + " exceeds " + whose +
                                   " region of " + std::to_string(size) + " B"};
  return {};
}

}  // namespace

Status Connection::put_signal(const RemoteRegion& region, uint64_t offset, std::span<const uint8_t> src,
                              uint64_t signal_offset, uint64_t signal, Deadline deadline) {
  if (unlocked_path(*impl_, region, true)) {
    const transport::RemoteKey& key = channel::detail::Access::impl(region).key;
    // The data is copied in the call, so a release store orders the signal
    // after it on any CPU. UCX's fence is a full barrier, which would wait
    // for the data's cache lines to reach this core before the signal's store.
    OB_RETURN_IF_ERROR(check_signal_word(signal_offset, region.size(), "remote"));
    OB_RETURN_IF_ERROR(transport::put_mapped(key, offset, src));
    return transport::store_release(key, signal_offset, signal);
  }
  Lock lock(impl_->hub->mutex());
  OB_RETURN_IF_ERROR(check_region(*impl_, region));
  OB_RETURN_IF_ERROR(check_signal_word(signal_offset, region.size(), "remote"));
  const transport::RemoteKey& key = channel::detail::Access::impl(region).key;
  transport::PolledOp data;
  if (!src.empty()) {
    OB_ASSIGN_OR_RETURN(data, impl_->data_ep.put(key, offset, src));
  }
  OB_RETURN_IF_ERROR(impl_->hub->worker().fence());
  OB_ASSIGN_OR_RETURN(transport::PolledOp flag, impl_->data_ep.put(key, signal_offset,
                                                                   {reinterpret_cast<const uint8_t*>(&signal), 8}));
  OB_RETURN_IF_ERROR(impl_->wait_polled(deadline, data, "put_signal's data"));
  return impl_->wait_polled(deadline, flag, "put_signal's signal");
}

Status Connection::wait_signal(const Region& region, uint64_t offset, uint64_t at_least, Deadline deadline) {
  OB_RETURN_IF_ERROR(check_signal_word(offset, region.size(), "local"));
  // Regions are page-aligned and the offset a multiple of 8: an aligned word.
  std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(region.data() + offset));
  // Between memory checks a pause (polling the line tightly holds off the
  // peer's write to it; ~25 ns here), progress every 16th spin (puts over
  // TCP arrive as messages), the clock every 1024th.
  for (uint32_t spins = 1;; ++spins) {
    if (word.load(std::memory_order_acquire) >= at_least) return {};
    cpu_relax();
    if (spins % 16 != 0) continue;
    Lock lock(impl_->hub->mutex());
    OB_RETURN_IF_ERROR(impl_->check_open());
    impl_->hub->progress();
    if (spins % 1024 == 0 && deadline.expired())
      return {Code::kTimedOut, "signal word at offset " + std::to_string(offset) + " is " +
                                   std::to_string(word.load()) + ", not yet " + std::to_string(at_least) +
                                   ", at the deadline"};
  }
}

Status Connection::put_notify(const RemoteRegion& region, uint64_t offset, std::span<const uint8_t> src,
                              uint64_t cookie, Deadline deadline, std::string_view service) {
  Lock lock(impl_->hub->mutex());
  OB_RETURN_IF_ERROR(check_region(*impl_, region));
  OB_ASSIGN_OR_RETURN(uint32_t service_index, impl_->service_index(service));
  // The notification is credited: take the credit before touching the peer.
  OB_RETURN_IF_ERROR(impl_->acquire(0, deadline, true));
  FrameHeader h;
  h.type = FrameType::kNotify;
  h.id = cookie;
  h.arg = offset;
  h.service = service_index;
  const transport::RemoteKey& key = channel::detail::Access::impl(region).key;
  // The put itself is released to UCX (completion is the flush's business)
  // or, mapped, a copy already in the peer's memory.
  Status put = key.mapped() ? transport::put_mapped(key, offset, src) : impl_->data_ep.put(key, offset, src).status();
  if (!put.ok()) {
    ++impl_->send_msgs;  // nothing was sent: give the credit back
    return put;
  }
  if (key.mapped()) {
    // No flush to wait for: the notification's stores (into the peer's
    // ring or UCX's shared-memory queue) come after the data's.
    const uint64_t length = src.size();
    impl_->post_copy(h, {reinterpret_cast<const uint8_t*>(&length), 8});
    return {};
  }
  auto op = std::make_shared<Completion>();
  // The flush completes only once the data is in the peer's memory, so the
  // notification sent after it never overtakes the data.
  auto length = std::make_shared<uint64_t>(src.size());
  std::weak_ptr<Connection::Impl> weak = impl_;
  impl_->data_ep.flush([op, weak, length, h](Status fst) OB_HUB_LOCKED mutable {
    auto self = weak.lock();
    if (!self || !fst.ok()) {
      return completer(op)(fst.ok() ? Status(Code::kConnectionReset, "connection closed") : fst);
    }
    self->post(h, {reinterpret_cast<const uint8_t*>(length.get()), 8},
               [op, length](Status sst) { completer(op)(std::move(sst)); });
  });
  return impl_->wait_done(deadline, op, "put with notify");
}

}  // namespace outboard
