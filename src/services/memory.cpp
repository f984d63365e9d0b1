#include <cstring>
#include <unordered_map>
#include <vector>

#include "outboard/checksum.h"
#include "services/builtin.h"

namespace outboard::services {
namespace {

bool read_u64(std::span<const uint8_t>& in, uint64_t& v) {
  if (in.size() < 8) return false;
  std::memcpy(&v, in.data(), 8);
  in = in.subspan(8);
  return true;
}

Buffer u64_buffer(uint64_t v) { return Buffer::copy_of({reinterpret_cast<const uint8_t*>(&v), 8}); }

class Memory final : public Service {
 public:
  explicit Memory(uint64_t max_region_size) : max_(max_region_size) {}
  std::string name() const override { return "memory"; }
  void on_disconnect(uint32_t id) override { regions_.erase(id); }

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
        if (a > max_)
          return r.responder.fail({Code::kTooBig, "region of " + std::to_string(a) + " B exceeds max_region_size " +
                                                      std::to_string(max_) + " B (agent option --max-region-size)"});
        auto region = r.peer->allocate_memory(a);
        if (!region.ok()) return r.responder.fail(region.status());
        auto desc = region.value().descriptor();
        Buffer out = Buffer::copy_of(desc);
        regions_[r.peer->id()] = std::move(region).value();
        return r.responder.respond(std::move(out));
      }
      case 'P': {
        if (!read_u64(in, a)) break;
        Region* region = find(r);
        if (!region) return;
        fill_pattern({region->data(), region->size()}, a);
        return r.responder.respond(Buffer());
      }
      case 'S': {
        if (!read_u64(in, a) || !read_u64(in, b)) break;
        Region* region = find(r);
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
      default:
        return r.responder.fail({Code::kInvalidArgument, std::string("unknown memory request '") + op + "'"});
    }
    r.responder.fail({Code::kInvalidArgument, std::string("memory request '") + op + "' is truncated"});
  }

 private:
  // Proves the data was visible when the notification arrived.
  void notified(const ServiceRequest& r) {
    Region* region = find(r);
    if (!region) return;
    const Notification& n = *r.notification;
    if (n.offset > region->size() || n.length > region->size() - n.offset)
      return r.responder.fail({Code::kOutOfRange, "notification outside the region"});
    uint64_t reply[2] = {n.cookie, checksum({region->data() + n.offset, n.length})};
    Status st = r.peer->try_send({reinterpret_cast<const uint8_t*>(reply), sizeof reply});
    if (!st.ok()) return r.responder.fail(st);
    r.responder.respond({});
  }

  Region* find(const ServiceRequest& r) {
    auto it = regions_.find(r.peer->id());
    if (it != regions_.end()) return &it->second;
    r.responder.fail({Code::kNotFound, "no region allocated on this connection (send 'A' first)"});
    return nullptr;
  }

  uint64_t max_;
  std::unordered_map<uint32_t, Region> regions_;
};

}  // namespace

std::unique_ptr<Service> make_memory(uint64_t max_region_size) { return std::make_unique<Memory>(max_region_size); }

}  // namespace outboard::services
