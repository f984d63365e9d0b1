#include "services/builtin.h"

namespace outboard::services {
namespace {

class Stats final : public Service {
 public:
  explicit Stats(std::function<std::string()> snapshot) : snapshot_(std::move(snapshot)) {}
  std::string name() const override { return "stats"; }
  void handle(ServiceRequest r) override {
    std::string json = snapshot_();
    r.responder.respond(Buffer::copy_of(json));
  }

 private:
  std::function<std::string()> snapshot_;
};

}  // namespace

std::unique_ptr<Service> make_stats(std::function<std::string()> snapshot) {
  return std::make_unique<Stats>(std::move(snapshot));
}

}  // namespace outboard::services
