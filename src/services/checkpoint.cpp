// The `checkpoint` service: a trainer snapshots its state into a staging region of its own and
// asks; the agent reads the region (a CPU copy where it is mapped here, one-sided gets where it is
// not), writes the checkpoint (services/checkpoint_store.h), makes it durable, prunes, and answers.
// The disk work runs on the service's one worker thread, started with the first request: the
// progress thread only decodes, imports the region and answers.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "outboard/clock.h"
#include "outboard/log.h"
#include "services/builtin.h"
#include "services/checkpoint_store.h"
#include "services/checkpoint_wire.h"
#include "services/worker_queue.h"
#include "util/text.h"

OB_LOG_MODULE("checkpoint");

namespace outboard::services {
namespace {

namespace wire = checkpoint_wire;
using checkpoint::Directory;

// What one connection may hold: directories open, and requests waiting for the worker.
constexpr size_t kMaxDirectoriesPerConnection = 16;
constexpr uint32_t kMaxQueuedPerConnection = 4;
// A get of one piece (8 MiB) from a client's memory that takes longer has failed.
constexpr int64_t kGetDeadlineMs = 30'000;

struct Client {
  std::vector<std::shared_ptr<Directory>> dirs;  // by handle; null once closed
  uint32_t queued = 0;                            // requests waiting for or on the worker
};

// Shared by the service, its worker and the closures it posts; they hold it, so a late one
// never touches a destroyed service.
struct Core {
  CheckpointConfig config;
  std::atomic<bool> detached{false};
  std::unordered_map<uint32_t, Client> clients;  // progress thread only
  WorkerQueue worker;                             // one thread: a directory's saves stay in order
};

std::string json_answer(const checkpoint::Written& w, uint64_t step, double persist_s) {
  return nlohmann::json{{"step", step},          {"path", w.path},       {"bytes", w.bytes},
                        {"read_s", w.read_s},    {"hash_s", w.hash_s},   {"write_s", w.write_s},
                        {"persist_s", persist_s}, {"pruned", w.pruned}}
      .dump();
}

Buffer text_buffer(std::string_view s) { return Buffer::copy_of({reinterpret_cast<const uint8_t*>(s.data()), s.size()}); }

class CheckpointService final : public Service {
 public:
  explicit CheckpointService(CheckpointConfig config) : core_(std::make_shared<Core>()) {
    core_->config = std::move(config);
  }
  ~CheckpointService() override {
    core_->detached = true;
    core_->worker.stop();
  }

  std::string name() const override { return "checkpoint"; }
  void attach(ServiceHost& host) override { core_->worker.attach(host, 1); }
  // Saves already queued finish (their snapshot is whole); the directories close after them.
  void on_disconnect(uint32_t id) override { core_->clients.erase(id); }

  void handle(ServiceRequest r) override {
    if (!r.responder.expects_response())
      return r.responder.fail({Code::kInvalidArgument, "checkpoint takes requests, not one-way messages"});
    auto kind = wire::kind_of(r.payload.span());
    if (!kind.ok()) return r.responder.fail(kind.status());
    switch (kind.value()) {
      case wire::Kind::kOpen: return open(std::move(r));
      case wire::Kind::kSave: return save(std::move(r));
      case wire::Kind::kClose: return close(std::move(r));
    }
  }

 private:
  // Queues `work` for the worker, counted against the client's limit until its answer.
  void enqueue(const ServiceRequest& r, WorkerQueue::Work work) {
    Client& client = core_->clients[r.peer->id()];
    if (client.queued >= kMaxQueuedPerConnection)
      return r.responder.fail({Code::kAgain, "checkpoint: " + std::to_string(client.queued) +
                                                 " requests of this connection are waiting, the limit "
                                                 "kMaxQueuedPerConnection"});
    if (!core_->worker.push(std::move(work), SIZE_MAX))
      return r.responder.fail({Code::kShutDown, "checkpoint: the service is stopping"});
    ++client.queued;
  }

  // Runs on the progress thread once the worker is done with a request of connection `id`.
  static void finished(Core& core, uint32_t id) {
    if (auto it = core.clients.find(id); it != core.clients.end() && it->second.queued > 0) --it->second.queued;
  }

  void open(ServiceRequest r) {
    auto open = wire::decode_open(r.payload.span());
    if (!open.ok()) return r.responder.fail(open.status());
    Client& client = core_->clients[r.peer->id()];
    const size_t live = std::count_if(client.dirs.begin(), client.dirs.end(), [](auto& d) { return d != nullptr; });
    if (live >= kMaxDirectoriesPerConnection)
      return r.responder.fail({Code::kTooBig, "checkpoint: this connection has " + std::to_string(live) +
                                                  " directories open, the limit kMaxDirectoriesPerConnection"});
    const uint32_t id = r.peer->id();
    enqueue(r, [core = core_, open = std::move(open).value(), responder = r.responder, id]() -> std::function<void()> {
      auto dir = Directory::open(core->config.root, open.dir, open.keep_last,
                                 {core->config.max_dir_bytes, core->config.min_free_pct});
      if (dir.ok()) OB_LOG_INFO("checkpoints of connection %u go to %s", id, dir.value()->path().c_str());
      std::shared_ptr<Directory> shared = dir.ok() ? std::move(dir).value() : nullptr;
      return [core, responder, id, shared, status = dir.status()] {
        if (core->detached) return;
        finished(*core, id);
        auto it = core->clients.find(id);
        if (!status.ok() || it == core->clients.end()) return responder.fail(status);
        auto& dirs = it->second.dirs;
        auto slot = std::find(dirs.begin(), dirs.end(), nullptr);
        if (slot == dirs.end()) slot = dirs.insert(slot, nullptr);
        *slot = shared;
        const auto handle = static_cast<uint32_t>(slot - dirs.begin());
        responder.respond(Buffer::copy_of({reinterpret_cast<const uint8_t*>(&handle), sizeof handle}));
      };
    });
  }

  Result<std::shared_ptr<Directory>> directory(uint32_t id, uint32_t handle) {
    Client& client = core_->clients[id];
    if (handle >= client.dirs.size() || !client.dirs[handle])
      return Status(Code::kNotFound, "checkpoint: directory " + std::to_string(handle) + " is not open on this connection");
    return client.dirs[handle];
  }

  void save(ServiceRequest r) {
    auto decoded = wire::decode_save(r.payload.span());
    if (!decoded.ok()) return r.responder.fail(decoded.status());
    wire::Save save = std::move(decoded).value();
    auto dir = directory(r.peer->id(), save.handle);
    if (!dir.ok()) return r.responder.fail(dir.status());
    auto imported = r.peer->import_region(save.region);
    if (!imported.ok()) return r.responder.fail(imported.status().with_context("checkpoint: the staging region"));
    auto region = std::make_shared<RemoteRegion>(std::move(imported).value());
    for (const wire::Tensor& t : save.tensors)
      if (t.offset + t.bytes > region->size())
        return r.responder.fail({Code::kOutOfRange, "checkpoint: tensor " + quote(t.name, 256) + " at " +
                                                        std::to_string(t.offset) + " + " + std::to_string(t.bytes) +
                                                        " B lies outside the staging region of " +
                                                        std::to_string(region->size()) + " B"});
    const uint32_t id = r.peer->id();
    enqueue(r, [core = core_, dir = std::move(dir).value(), save = std::move(save), region, peer = r.peer,
                responder = r.responder, id]() -> std::function<void()> {
      const uint64_t t0 = now_ns();
      checkpoint::Source source = [&](uint64_t offset, std::span<uint8_t> scratch) -> Result<std::span<const uint8_t>> {
        if (region->mapped()) {
          OB_ASSIGN_OR_RETURN(auto span, region->mapped_span(offset, scratch.size()));
          return std::span<const uint8_t>(span);
        }
        OB_RETURN_IF_ERROR(peer->get(*region, offset, scratch, Deadline::after_ms(kGetDeadlineMs)));
        return std::span<const uint8_t>(scratch);
      };
      auto written = dir->write(save, source);
      const double persist_s = static_cast<double>(now_ns() - t0) / 1e9;
      if (written.ok())
        OB_LOG_INFO("step %llu: %llu B in %.3f s", static_cast<unsigned long long>(save.step),
                     static_cast<unsigned long long>(written.value().bytes), persist_s);
      else
        OB_LOG_WARN("step %llu not saved: %s", static_cast<unsigned long long>(save.step),
                    written.status().to_string().c_str());
      std::string answer = written.ok() ? json_answer(written.value(), save.step, persist_s) : std::string();
      // The region is released here, on the progress thread, as it was imported.
      return [core, responder, id, region, status = written.status(), answer = std::move(answer)] {
        if (core->detached) return;
        finished(*core, id);
        if (status.ok()) responder.respond(text_buffer(answer));
        else responder.fail(status);
      };
    });
  }

  // The directory's lock goes once the saves queued for it are done.
  void close(ServiceRequest r) {
    auto handle = wire::decode_close(r.payload.span());
    if (!handle.ok()) return r.responder.fail(handle.status());
    auto dir = directory(r.peer->id(), handle.value());
    if (!dir.ok()) return r.responder.fail(dir.status());
    core_->clients[r.peer->id()].dirs[handle.value()].reset();
    r.responder.respond(Buffer());
  }

  std::shared_ptr<Core> core_;
};

}  // namespace

std::unique_ptr<Service> make_checkpoint(CheckpointConfig config) {
  return std::make_unique<CheckpointService>(std::move(config));
}

}  // namespace outboard::services
