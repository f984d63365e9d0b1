#include <cstring>
#include <unordered_map>

#include "outboard/checksum.h"
#include "services/builtin.h"

namespace outboard::services {
namespace {

// Absorbs one-way messages for streaming benchmarks, keeping per connection
// a count, a byte total and an order-sensitive digest of what arrived, so the
// sender can prove every byte landed, in order, once.
class Sink final : public Service {
 public:
  std::string name() const override { return "sink"; }
  void on_disconnect(uint32_t id) override { tallies_.erase(id); }

  bool handles_inline() const override { return true; }  // tallies and answers
  void handle(ServiceRequest r) override {
    Tally& t = tallies_[r.peer->id()];
    if (!r.responder.expects_response()) {
      t.add(r.payload.span());
      return r.responder.respond({});
    }
    // A request: answer the tally so far and start a new one.
    uint64_t out[3] = {t.count, t.bytes, t.digest};
    t = Tally{};
    r.responder.respond(Buffer::copy_of({reinterpret_cast<const uint8_t*>(out), sizeof(out)}));
  }

 private:
  struct Tally {
    uint64_t count = 0, bytes = 0, digest = kChecksumChainSeed;
    void add(std::span<const uint8_t> m) {
      ++count;
      bytes += m.size();
      digest = checksum_chain(digest, m);
    }
  };
  std::unordered_map<uint32_t, Tally> tallies_;
};

}  // namespace

std::unique_ptr<Service> make_sink() { return std::make_unique<Sink>(); }

}  // namespace outboard::services
