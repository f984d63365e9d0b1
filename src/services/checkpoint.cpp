// The `checkpoint` service: a trainer snapshots its state into a staging region of its own and
// asks; the agent reads the region (a CPU copy where it is mapped here, one-sided gets where it is
// not), writes the checkpoint (services/checkpoint_store.h), makes it durable, prunes, and answers.
// Over TLS, where one-sided access is refused, the trainer sends the bytes in pieces instead
// (an in-band save). The disk work runs on the service's one worker thread, started with the
// first request: the progress thread only decodes, imports the region and answers.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

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

// An in-band save from its request to its last piece. The progress thread keeps the count of bytes
// it accepted; the writer is the worker's alone, so it is also released there (nothing else
// touches the directory meanwhile).
struct Stream {
  uint32_t handle = 0;
  uint64_t step = 0;
  uint64_t total = 0;     // the tensors' bytes
  uint64_t received = 0;  // accepted in pieces so far (progress thread)
  uint64_t t0 = 0;        // when the save came
  Responder save;         // answered when the last piece is written, or the stream fails
  std::shared_ptr<Directory> dir;              // outlives the writer, which writes into it
  std::unique_ptr<checkpoint::Writer> writer;  // worker only; null once ended
  Status why;                                  // worker only: why it ended early
};

struct Client {
  std::vector<std::shared_ptr<Directory>> dirs;  // by handle; null once closed
  std::unordered_map<uint32_t, std::shared_ptr<Stream>> streams;  // by directory handle
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

// How a stream ended, on the worker: its last byte written and the checkpoint finished, or an error.
struct End {
  bool ended = false;
  Status status;
  std::string answer;  // json_answer, when ok
};

// Worker side, after the begin or an append that returned `st`.
End settle(Stream& s, Status st) {
  if (st.ok() && s.writer && s.writer->written() < s.writer->total()) return {};
  if (st.ok()) {
    auto written = s.writer->finish();
    if (written.ok()) {
      s.writer.reset();
      return {true, {}, json_answer(written.value(), s.step, static_cast<double>(now_ns() - s.t0) / 1e9)};
    }
    st = written.status();
  }
  s.writer.reset();
  s.why = st;
  return {true, st, {}};
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
  // Saves already queued finish (their snapshot is whole); the directories close after them. An
  // in-band save still waiting for pieces is dropped.
  void on_disconnect(uint32_t id) override {
    auto it = core_->clients.find(id);
    if (it == core_->clients.end()) return;
    abandon_unfinished(it->second, {Code::kConnectionReset, "checkpoint: the client left"});
    core_->clients.erase(it);
  }

  void handle(ServiceRequest r) override {
    if (!r.responder.expects_response())
      return r.responder.fail({Code::kInvalidArgument, "checkpoint takes requests, not one-way messages"});
    auto kind = wire::kind_of(r.payload.span());
    if (!kind.ok()) return r.responder.fail(kind.status());
    switch (kind.value()) {
      case wire::Kind::kOpen: return open(std::move(r));
      case wire::Kind::kSave: return save(std::move(r));
      case wire::Kind::kClose: return close(std::move(r));
      case wire::Kind::kPiece: return piece(std::move(r));
      case wire::Kind::kList: return list(std::move(r));
      case wire::Kind::kRead: return read(std::move(r));
    }
  }

 private:
  // Queues `work` for the worker, counted against the client's limit until its answer; false, the
  // request failed, when it cannot.
  bool enqueue(const ServiceRequest& r, WorkerQueue::Work work) {
    Client& client = core_->clients[r.peer->id()];
    if (client.queued >= kMaxQueuedPerConnection) {
      r.responder.fail({Code::kAgain, "checkpoint: " + std::to_string(client.queued) +
                                          " requests of this connection are waiting, the limit "
                                          "kMaxQueuedPerConnection"});
      return false;
    }
    if (!core_->worker.push(std::move(work), SIZE_MAX)) {
      r.responder.fail({Code::kShutDown, "checkpoint: the service is stopping"});
      return false;
    }
    ++client.queued;
    return true;
  }

  // Progress thread: the stream's save is answered and it leaves the client's map.
  static void end_stream(Core& core, uint32_t id, const std::shared_ptr<Stream>& s, const End& end) {
    if (end.status.ok()) s->save.respond(text_buffer(end.answer));
    else s->save.fail(end.status);
    auto it = core.clients.find(id);
    if (it == core.clients.end()) return;
    auto at = it->second.streams.find(s->handle);
    if (at != it->second.streams.end() && at->second == s) it->second.streams.erase(at);
  }

  // Progress thread: gives up a stream the client broke: its save fails with `why`, and the worker
  // drops what it wrote, after anything of the stream already queued there.
  void abandon(Client& client, uint32_t handle, const Status& why) {
    auto it = client.streams.find(handle);
    if (it == client.streams.end()) return;
    std::shared_ptr<Stream> s = std::move(it->second);
    client.streams.erase(it);
    s->save.fail(why);
    (void)core_->worker.push([s]() -> std::function<void()> {
      s->writer.reset();
      return [] {};
    }, SIZE_MAX);  // false only when stopping: no worker runs then
  }

  // The streams of `client` (of directory `handle`, or all) that still wait for pieces: one whose
  // last piece came is whole and finishes.
  void abandon_unfinished(Client& client, const Status& why, std::optional<uint32_t> handle = std::nullopt) {
    std::vector<uint32_t> unfinished;
    for (const auto& [h, s] : client.streams)
      if (s->received < s->total && (!handle || h == *handle)) unfinished.push_back(h);
    for (uint32_t h : unfinished) abandon(client, h, why);
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
    // A TLS client's directories lie in its own, which no other tenant reaches; this host's
    // plaintext clients (the agent's user, the kernel's word) share the root.
    const std::string& identity = r.peer->peer_identity();
    std::string home = identity.empty() ? std::string() : checkpoint::tenant_dir(identity);
    enqueue(r, [core = core_, open = std::move(open).value(), home = std::move(home), responder = r.responder,
                id]() -> std::function<void()> {
      auto dir = Directory::open(core->config.root, open.dir, open.keep_last,
                                 {core->config.max_dir_bytes, core->config.min_free_pct,
                                  home.empty() ? 0 : core->config.max_client_bytes},
                                 home);
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
        responder.respond(Buffer::copy_of(wire::encode_opened(handle, shared->path(), shared->token())));
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
    Client& client = core_->clients[r.peer->id()];
    if (auto it = client.streams.find(save.handle); it != client.streams.end())
      return r.responder.fail({Code::kBadState, "checkpoint: directory " + std::to_string(save.handle) +
                                                    " is still receiving the pieces of step " +
                                                    std::to_string(it->second->step)});
    if (save.in_band()) return save_in_band(std::move(r), std::move(dir).value(), std::move(save));
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

  // The tensors' bytes follow in pieces; the writer is begun now, so a save the directory cannot take
  // fails before any piece is written.
  void save_in_band(ServiceRequest r, std::shared_ptr<Directory> dir, wire::Save save) {
    auto s = std::make_shared<Stream>();
    s->handle = save.handle;
    s->step = save.step;
    s->total = save.tensor_bytes();
    s->t0 = now_ns();
    s->save = r.responder;
    s->dir = std::move(dir);
    const uint32_t id = r.peer->id();
    if (!enqueue(r, [core = core_, save = std::move(save), s, id]() -> std::function<void()> {
          auto writer = s->dir->begin(save);
          if (writer.ok()) s->writer = std::move(writer).value();
          End end = settle(*s, writer.status());
          return [core, s, id, end = std::move(end)] {
            if (core->detached) return;
            finished(*core, id);
            if (end.ended) end_stream(*core, id, s, end);
          };
        }))
      return;
    core_->clients[id].streams[s->handle] = s;
  }

  // The next bytes of an in-band save: accepted only in order, within its tensors' bytes; anything
  // else ends the stream, so the checkpoint is never written with a hole.
  void piece(ServiceRequest r) {
    auto decoded = wire::decode_piece(r.payload.span());
    if (!decoded.ok()) return r.responder.fail(decoded.status());
    const wire::Piece p = decoded.value();
    const uint32_t id = r.peer->id();
    Client& client = core_->clients[id];
    auto it = client.streams.find(p.handle);
    if (it == client.streams.end() || it->second->step != p.step)
      return r.responder.fail({Code::kNotFound, "checkpoint: no in-band save of step " + std::to_string(p.step) +
                                                    " is receiving pieces on directory " + std::to_string(p.handle)});
    std::shared_ptr<Stream> s = it->second;
    if (p.offset != s->received || p.bytes.size() > s->total - s->received) {
      const Status why(Code::kOutOfRange, "checkpoint: a piece of " + std::to_string(p.bytes.size()) + " B at " +
                                              std::to_string(p.offset) + " of step " + std::to_string(p.step) +
                                              ", whose next byte is " + std::to_string(s->received) + " of " +
                                              std::to_string(s->total));
      abandon(client, p.handle, why);
      return r.responder.fail(why);
    }
    const size_t at = static_cast<size_t>(p.bytes.data() - r.payload.data());
    if (!enqueue(r, [core = core_, s, payload = std::make_shared<Buffer>(std::move(r.payload)), at, id,
                     responder = r.responder]() -> std::function<void()> {
          Status st = s->writer ? s->writer->append(payload->span().subspan(at))
                                : Status(Code::kBadState, "checkpoint: step " + std::to_string(s->step) +
                                                              " already failed: " + s->why.message());
          End end = s->writer ? settle(*s, st) : End{};
          return [core, s, id, responder, st, end = std::move(end)] {
            if (core->detached) return;
            finished(*core, id);
            if (st.ok()) responder.respond(Buffer());
            else responder.fail(st);
            if (end.ended) end_stream(*core, id, s, end);
          };
        }))
      return abandon(client, p.handle, {Code::kAgain, "checkpoint: a piece of step " + std::to_string(p.step) +
                                                          " was refused: too many requests of this connection wait"});
    s->received += p.bytes.size();
  }

  // The steps a directory holds, listed on the worker (which writes and prunes them).
  void list(ServiceRequest r) {
    auto handle = wire::decode_list(r.payload.span());
    if (!handle.ok()) return r.responder.fail(handle.status());
    auto dir = directory(r.peer->id(), handle.value());
    if (!dir.ok()) return r.responder.fail(dir.status());
    on_worker(r, [dir = std::move(dir).value()]() -> Result<Buffer> {
      const std::vector<uint64_t> steps = dir->steps();
      Buffer answer(4 + 8 * steps.size());
      const auto n = static_cast<uint32_t>(steps.size());
      std::memcpy(answer.data(), &n, 4);
      if (n != 0) std::memcpy(answer.data() + 4, steps.data(), 8 * steps.size());
      return answer;
    });
  }

  // A piece of a checkpoint's file, for a client whose filesystem is not the agent's.
  void read(ServiceRequest r) {
    auto decoded = wire::decode_read(r.payload.span());
    if (!decoded.ok()) return r.responder.fail(decoded.status());
    const wire::Read want = decoded.value();
    auto dir = directory(r.peer->id(), want.handle);
    if (!dir.ok()) return r.responder.fail(dir.status());
    on_worker(r, [dir = std::move(dir).value(), want] {
      return dir->read(want.step, want.file, want.offset, want.length);
    });
  }

  // Runs `work` on the worker and answers the request with what it returns.
  void on_worker(const ServiceRequest& r, std::function<Result<Buffer>()> work) {
    enqueue(r, [core = core_, work = std::move(work), responder = r.responder,
                id = r.peer->id()]() -> std::function<void()> {
      auto answer = std::make_shared<Result<Buffer>>(work());
      return [core, responder, id, answer] {
        if (core->detached) return;
        finished(*core, id);
        if (answer->ok()) responder.respond(std::move(*answer).value());
        else responder.fail(answer->status());
      };
    });
  }

  // The directory's lock goes once the saves queued for it are done; a save still receiving pieces
  // is given up.
  void close(ServiceRequest r) {
    auto handle = wire::decode_close(r.payload.span());
    if (!handle.ok()) return r.responder.fail(handle.status());
    auto dir = directory(r.peer->id(), handle.value());
    if (!dir.ok()) return r.responder.fail(dir.status());
    Client& client = core_->clients[r.peer->id()];
    abandon_unfinished(client, {Code::kBadState, "checkpoint: directory " + std::to_string(handle.value()) +
                                                     " was closed before the last piece came"},
                       handle.value());
    client.dirs[handle.value()].reset();
    r.responder.respond(Buffer());
  }

  std::shared_ptr<Core> core_;
};

}  // namespace

std::unique_ptr<Service> make_checkpoint(CheckpointConfig config) {
  return std::make_unique<CheckpointService>(std::move(config));
}

}  // namespace outboard::services
