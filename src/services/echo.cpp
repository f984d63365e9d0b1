#include <deque>
#include <unordered_map>

#include "services/builtin.h"

namespace outboard::services {
namespace {

// Answers requests with their payload. Reflects one-way messages back as
// one-way messages; when the client's credits run out they wait here, and
// holding them unacknowledged slows the client instead of dropping data.
class Echo final : public Service {
 public:
  std::string name() const override { return "echo"; }
  bool handles_inline() const override { return true; }  // answers, or try_send() and waits for credit
  void on_disconnect(uint32_t id) override { backlog_.erase(id); }

  void handle(ServiceRequest r) override {
    if (r.responder.expects_response()) return r.responder.respond(std::move(r.payload));
    auto& b = backlog_[r.peer->id()];
    b.queue.push_back({std::move(r.payload), std::move(r.responder)});
    flush(r.peer);
  }

 private:
  struct Pending {
    Buffer payload;
    Responder responder;
  };
  struct Backlog {
    std::deque<Pending> queue;
    bool waiting = false;
  };

  void flush(const std::shared_ptr<Connection>& peer) {
    auto it = backlog_.find(peer->id());
    if (it == backlog_.end()) return;
    Backlog& b = it->second;
    while (!b.queue.empty()) {
      Status st = peer->try_send(b.queue.front().payload.span());
      if (st.code() == Code::kAgain) {
        if (!b.waiting) {
          b.waiting = true;
          peer->on_credit([this, peer] {
            if (auto again = backlog_.find(peer->id()); again != backlog_.end()) again->second.waiting = false;
            flush(peer);
          });
        }
        return;
      }
      if (!st.ok()) b.queue.front().responder.fail(st);
      else b.queue.front().responder.respond({});
      b.queue.pop_front();
    }
  }

  std::unordered_map<uint32_t, Backlog> backlog_;
};

}  // namespace

std::unique_ptr<Service> make_echo() { return std::make_unique<Echo>(); }

}  // namespace outboard::services
