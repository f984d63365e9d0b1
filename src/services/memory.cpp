#include <atomic>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "outboard/checksum.h"
#include "services/builtin.h"
#include "util/text.h"

namespace outboard::services {
namespace {

bool read_u64(std::span<const uint8_t>& in, uint64_t& v) {
  if (in.size() < 8) return false;
  std::memcpy(&v, in.data(), 8);
  in = in.subspan(8);
  return true;
}

Buffer u64_buffer(uint64_t v) { return Buffer::copy_of({reinterpret_cast<const uint8_t*>(&v), 8}); }

// The u64 at `at` of a region the client writes (put_signal, a kernel's stores), as it is now.
uint64_t signal_word(const uint8_t* base, uint64_t at) {
  // atomic_ref<const T> is C++26 (libc++ refuses it): the region is ours and writable, only read here.
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(const_cast<uint8_t*>(base + at)))
      .load(std::memory_order_acquire);
}

// A mirror session: answers each ping of one client from a poller on the
// progress thread, until all are answered, the client goes quiet or leaves.
struct Mirror {
  std::shared_ptr<Connection> peer;
  RemoteRegion remote;
  Responder responder;
  std::shared_ptr<Region> region;  // kept while the session runs, whatever the service does
  const uint8_t* base = nullptr;   // region->data(), read once: it is polled on every round
  uint64_t size = 0, slots = 0, pings = 0, idle_ms = 0;
  uint64_t next = 1;               // the ping awaited
  uint64_t slot = 0;               // its slot: (next - 1) % slots, without a division per poll
  uint64_t answered_at_check = 0;  // `next` at the last idle check
  uint64_t checked_ns = 0;
  uint32_t polls = 0;
  // Renewed with the idle check, not per ping: a clock read (~20 ns) is a
  // seventh of a mapped round trip, and a mapped put never waits for it.
  Deadline put_deadline = Deadline::after_ms(kPutTimeoutMs);
  std::atomic<bool> over{false};  // answered, failed, its client left or the service is going

  // One poll: false once the session is over (answered or failed).
  bool poll() {
    if (over) return false;
    const uint64_t signal_at = mirror_signal_at(slot, size);
    const uint64_t signal = signal_word(base, signal_at);
    if (signal < next) return (++polls % 1024 != 0) || still_waiting();
    if (signal > next) {
      return finish({Code::kInvalidArgument, "mirror: ping " + std::to_string(signal) + " came before ping " +
                                                 std::to_string(next) + " was answered"});
    }
    const uint64_t at = slot * size;
    Status st = peer->put_signal(remote, at, {base + at, size - 8}, signal_at, next, put_deadline);
    if (!st.ok()) return finish(st.with_context("mirror: answer to ping " + std::to_string(next)));
    if (++slot == slots) slot = 0;
    if (next++ == pings) return finish({});
    return true;
  }

  bool still_waiting() {
    const uint64_t now = now_ns();
    put_deadline = Deadline::after_ms(kPutTimeoutMs);
    if (next != answered_at_check || checked_ns == 0) {
      answered_at_check = next;
      checked_ns = now;
      return true;
    }
    if (now - checked_ns < idle_ms * 1'000'000) return true;
    return finish({Code::kTimedOut, "mirror: no ping " + std::to_string(next) + " within " +
                                        std::to_string(idle_ms) + " ms"});
  }

  bool finish(const Status& st) {
    if (st.ok()) responder.respond(u64_buffer(pings));
    else responder.fail(st);
    over = true;
    return false;
  }

  static constexpr int64_t kPutTimeoutMs = 5000;
};

// A wait for a region's signal word ('G'), polled on the progress thread:
// answered with the checksum of the region's first bytes once the word holds
// the value awaited, or failed at its deadline.
struct SignalWait {
  std::shared_ptr<Region> region;  // kept while it waits
  Responder responder;
  const uint8_t* base = nullptr;
  uint64_t signal_at = 0, value = 0, length = 0, timeout_ms = 0;
  Deadline deadline = Deadline::now();
  uint32_t polls = 0;
  std::atomic<bool> over{false};  // answered, failed, its client left or the service is going

  bool poll() {
    if (over) return false;
    const uint64_t signal = signal_word(base, signal_at);
    if (signal >= value) {
      responder.respond(u64_buffer(checksum({base, length})));
    } else if (++polls % 1024 == 0 && deadline.expired()) {
      responder.fail({Code::kTimedOut, "signal word at offset " + std::to_string(signal_at) + " holds " +
                                           std::to_string(signal) + ", not " + std::to_string(value) + ", after " +
                                           std::to_string(timeout_ms) + " ms"});
    } else {
      return true;
    }
    over = true;
    return false;
  }
};

class Memory final : public Service {
 public:
  explicit Memory(uint64_t max_region_size) : max_(max_region_size) {}
  ~Memory() override {
    for (auto& [id, m] : mirrors_) m->over = true;
    for (auto& [id, w] : waits_) w->over = true;
  }
  std::string name() const override { return "memory"; }
  void attach(ServiceHost& host) override { host_ = &host; }
  void on_disconnect(uint32_t id) override {
    if (auto m = mirrors_.find(id); m != mirrors_.end()) m->second->over = true;
    if (auto w = waits_.find(id); w != waits_.end()) w->second->over = true;
    mirrors_.erase(id);
    waits_.erase(id);
    regions_.erase(id);
  }

  void handle(ServiceRequest r) override {
    if (r.notification) return notified(r);
    std::span<const uint8_t> in = r.payload.span();
    if (in.empty()) return r.responder.fail({Code::kInvalidArgument, "empty memory request"});
    char op = static_cast<char>(in[0]);
    in = in.subspan(1);
    uint64_t a = 0, b = 0, c = 0, d = 0;
    switch (op) {
      case 'A': {
        if (!read_u64(in, a)) break;
        if (in.size() > 1)
          return r.responder.fail({Code::kInvalidArgument, "'A' takes at most one region kind byte after the size, "
                                                           "not " + std::to_string(in.size())});
        if (in.size() == 1 && in[0] > 1)
          return r.responder.fail({Code::kInvalidArgument,
                                   "region kind " + std::to_string(in[0]) + " is neither 0 (host) nor 1 (GPU)"});
        const MemoryKind kind = in.empty() || in[0] == 0 ? MemoryKind::kHost : MemoryKind::kCuda;
        if (mirroring(r.peer->id()))
          return r.responder.fail({Code::kBadState, "a mirror session is using this connection's region"});
        if (a > max_)
          return r.responder.fail({Code::kTooBig, "region of " + std::to_string(a) + " B exceeds max_region_size " +
                                                      std::to_string(max_) + " B (agent option --max-region-size)"});
        // The region this connection held goes first: its memory is the new one's.
        regions_.erase(r.peer->id());
        if (Status st = host_->reserve_memory(a, "memory region"); !st.ok()) return r.responder.fail(st);
        auto region = r.peer->allocate_memory(a, kind);
        if (!region.ok()) {
          host_->release_memory(a);
          return r.responder.fail(region.status());
        }
        auto desc = region.value().descriptor();
        Buffer out = Buffer::copy_of(desc);
        // Given back when the last holder (this table, a mirror) lets go.
        regions_[r.peer->id()] = std::shared_ptr<Region>(new Region(std::move(region).value()), [host = host_, a](Region* p) {
          delete p;
          host->release_memory(a);
        });
        return r.responder.respond(std::move(out));
      }
      case 'P': {
        if (!read_u64(in, a)) break;
        auto region = find(r, "fill");
        if (!region) return;
        fill_pattern({region->data(), region->size()}, a);
        return r.responder.respond(Buffer());
      }
      case 'S': {
        if (!read_u64(in, a) || !read_u64(in, b)) break;
        auto region = find(r, "checksum");
        if (!region) return;
        if (a > region->size() || b > region->size() - a)
          return r.responder.fail({Code::kOutOfRange, "checksum of " + std::to_string(b) + " B at offset " +
                                                          std::to_string(a) + " exceeds region of " +
                                                          std::to_string(region->size()) + " B"});
        return r.responder.respond(u64_buffer(checksum({region->data() + a, b})));
      }
      case 'W': {
        if (!read_u64(in, a) || !read_u64(in, b) || !read_u64(in, c) || !read_u64(in, d)) break;
        if (c > max_)
          return r.responder.fail({Code::kTooBig, "write of " + std::to_string(c) + " B exceeds max_region_size " +
                                                      std::to_string(max_) + " B"});
        auto remote = r.peer->import_region(in);
        if (!remote.ok()) return r.responder.fail(remote.status());
        std::vector<uint8_t> data(c);
        fill_pattern(data, d);
        Status st = r.peer->put_notify(remote.value(), b, data, a, Deadline::after_ms(5000));
        if (!st.ok()) return r.responder.fail(st);
        return r.responder.respond(u64_buffer(checksum(data)));
      }
      case 'M': {
        if (!read_u64(in, a) || !read_u64(in, b) || !read_u64(in, c) || !read_u64(in, d)) break;
        return mirror(r, a, b, c, d, in);
      }
      case 'G': {
        if (!read_u64(in, a) || !read_u64(in, b) || !read_u64(in, c) || !read_u64(in, d)) break;
        return await_signal(r, a, b, c, d);
      }
      default:
        return r.responder.fail({Code::kInvalidArgument, "unknown memory request " + quote({&op, 1})});
    }
    r.responder.fail({Code::kInvalidArgument, "memory request " + quote({&op, 1}) + " is truncated"});
  }

 private:
  // Proves the data was visible when the notification arrived.
  void notified(const ServiceRequest& r) {
    auto region = find(r, "notification");
    if (!region) return;
    const Notification& n = *r.notification;
    if (n.offset > region->size() || n.length > region->size() - n.offset)
      return r.responder.fail({Code::kOutOfRange, "notification outside the region"});
    uint64_t reply[2] = {n.cookie, checksum({region->data() + n.offset, n.length})};
    Status st = r.peer->try_send({reinterpret_cast<const uint8_t*>(reply), sizeof reply});
    if (!st.ok()) return r.responder.fail(st);
    r.responder.respond({});
  }

  void mirror(ServiceRequest& r, uint64_t size, uint64_t slots, uint64_t pings, uint64_t idle_ms,
              std::span<const uint8_t> descriptor) {
    if (mirroring(r.peer->id()))
      return r.responder.fail({Code::kBadState, "a mirror session is already running on this connection"});
    auto region = find(r, "mirror");
    if (!region) return;
    if (size == 0 || slots == 0 || pings == 0)
      return r.responder.fail({Code::kInvalidArgument, "mirror needs a size, slots and pings of at least 1"});
    if (size % 8 != 0)
      return r.responder.fail({Code::kInvalidArgument, "mirror slot size " + std::to_string(size) +
                                                           " is not a multiple of 8 (its last 8 bytes are the "
                                                           "signal word)"});
    if (slots > region->size() / size)
      return r.responder.fail({Code::kOutOfRange, "mirror of " + std::to_string(slots) + " slots of " +
                                                      std::to_string(size) + " B exceeds the region of " +
                                                      std::to_string(region->size()) + " B"});
    auto remote = r.peer->import_region(descriptor);
    if (!remote.ok()) return r.responder.fail(remote.status());
    auto m = std::make_shared<Mirror>();
    m->peer = r.peer;
    m->remote = std::move(remote).value();
    m->responder = r.responder;
    m->region = std::move(region);
    m->base = m->region->data();
    m->size = size, m->slots = slots, m->pings = pings;
    m->idle_ms = std::min(std::max<uint64_t>(idle_ms, 1), kMirrorMaxIdleMs);
    mirrors_[r.peer->id()] = m;  // an ended session's entry stays until the next 'M' or the disconnect
    host_->add_poller([m] { return m->poll(); });
  }

  void await_signal(ServiceRequest& r, uint64_t signal_at, uint64_t value, uint64_t length, uint64_t timeout_ms) {
    if (auto it = waits_.find(r.peer->id()); it != waits_.end() && !it->second->over)
      return r.responder.fail({Code::kBadState, "a signal wait is already running on this connection"});
    auto region = find(r, "signal wait");
    if (!region) return;
    if (region->size() < 8 || signal_at % 8 != 0 || signal_at > region->size() - 8 || length > region->size())
      return r.responder.fail({Code::kOutOfRange, "signal word at offset " + std::to_string(signal_at) + " and " +
                                                      std::to_string(length) + " B to check: not an aligned word and "
                                                      "a range within the region of " +
                                                      std::to_string(region->size()) + " B"});
    if (timeout_ms > kMaxSignalWaitMs)
      return r.responder.fail({Code::kTooBig, "signal wait of " + std::to_string(timeout_ms) + " ms exceeds " +
                                                  std::to_string(kMaxSignalWaitMs) + " ms (kMaxSignalWaitMs)"});
    auto w = std::make_shared<SignalWait>();
    w->responder = r.responder;
    w->base = region->data();
    w->region = std::move(region);
    w->signal_at = signal_at, w->value = value, w->length = length, w->timeout_ms = timeout_ms;
    w->deadline = Deadline::after_ms(static_cast<int64_t>(timeout_ms));
    waits_[r.peer->id()] = w;
    host_->add_poller([w] { return w->poll(); });
  }

  bool mirroring(uint32_t id) const {
    auto it = mirrors_.find(id);
    return it != mirrors_.end() && !it->second->over;
  }

  // The connection's region, for `what` done by the agent's CPU.
  std::shared_ptr<Region> find(const ServiceRequest& r, std::string_view what) {
    auto it = regions_.find(r.peer->id());
    if (it == regions_.end()) {
      r.responder.fail({Code::kNotFound, "no region allocated on this connection (send 'A' first)"});
      return nullptr;
    }
    if (it->second->kind() != MemoryKind::kHost) {
      r.responder.fail({Code::kUnsupported, std::string(what) + ": this connection's region is GPU memory, "
                                                                "which the agent's CPU does not touch (get it back)"});
      return nullptr;
    }
    return it->second;
  }

  uint64_t max_;
  ServiceHost* host_ = nullptr;
  std::unordered_map<uint32_t, std::shared_ptr<Region>> regions_;
  std::unordered_map<uint32_t, std::shared_ptr<Mirror>> mirrors_;
  std::unordered_map<uint32_t, std::shared_ptr<SignalWait>> waits_;
};

}  // namespace

std::unique_ptr<Service> make_memory(uint64_t max_region_size) { return std::make_unique<Memory>(max_region_size); }

}  // namespace outboard::services
