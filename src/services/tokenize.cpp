// The `tokenize` service: batches of texts in, exact token ids written with
// a one-sided put straight into the client's registered output buffer (in
// the answer instead on a sealed connection), then an answer with per-text
// offsets, lengths and errors. Tokenizing runs on the service's own worker
// threads; the progress thread only parses, queues, and writes the results
// back (posted by the workers). With no workers the progress thread
// tokenizes too: on one dedicated core it can then poll without taking the
// core from a worker, and a client never has to wake it.
#include <algorithm>
#include <atomic>
#include <unordered_map>

#include "outboard/clock.h"
#include "outboard/tokenizer.h"
#include "services/builtin.h"
#include "services/tokenize_wire.h"
#include "services/vocabularies.h"
#include "services/worker_queue.h"
#include "util/text.h"

namespace outboard::services {
namespace {

namespace wire = tokenize_wire;

constexpr int64_t kPutDeadlineMs = 5000;  // a client that cannot take its ids in 5 s has failed

// Output buffers a connection may bind: a client that binds without end
// runs out here, not the session's memory.
constexpr size_t kMaxOutputsPerConnection = 4096;

struct Client {
  std::vector<std::shared_ptr<const Tokenizer>> tokenizers;
  std::vector<std::shared_ptr<RemoteRegion>> outputs;
};

// State shared by the service, its workers and the closures they post; the
// closures hold it, so a late one never touches a destroyed service.
struct Core {
  TokenizeConfig config;
  std::atomic<bool> detached{false};  // the service is gone: posted closures do nothing
  std::unordered_map<uint32_t, Client> clients;  // progress thread only
  WorkerQueue workers;
  ServiceHost* host = nullptr;  // set by attach(), before any request
  std::shared_ptr<Vocabularies> vocabularies;
};

class Tokenize final : public Service {
 public:
  Tokenize(TokenizeConfig config, std::shared_ptr<Vocabularies> vocabularies) : core_(std::make_shared<Core>()) {
    core_->config = std::move(config);
    core_->vocabularies = std::move(vocabularies);
  }
  ~Tokenize() override {
    core_->detached = true;
    core_->workers.stop();
  }

  std::string name() const override { return "tokenize"; }

  void attach(ServiceHost& host) override {
    core_->host = &host;
    core_->workers.attach(host, core_->config.threads);
  }

  void on_disconnect(uint32_t id) override { core_->clients.erase(id); }

  void handle(ServiceRequest r) override {
    if (!r.responder.expects_response())
      return r.responder.fail({Code::kInvalidArgument, "tokenize takes requests, not one-way messages"});
    std::span<const uint8_t> in = r.payload.span();
    if (in.empty()) return r.responder.fail({Code::kInvalidArgument, "empty tokenize request"});
    char op = static_cast<char>(in[0]);
    in = in.subspan(1);
    switch (op) {
      case wire::kOpen:
        return open(std::move(r), Vocabularies::Request{std::string(reinterpret_cast<const char*>(in.data()), in.size())});
      case wire::kUpload:
        return open(std::move(r), core_->vocabularies->upload(in));
      case wire::kBind:
        return bind(std::move(r), in);
      case wire::kEncode:
        return encode(std::move(r));
      case wire::kUnbind:
        return unbind(std::move(r), in);
      default:
        return r.responder.fail({Code::kInvalidArgument, "unknown tokenize request " + quote({&op, 1})});
    }
  }

 private:
  // Queues work unless the queue is at its limit; then `responder` fails.
  // Without workers it runs here, on the progress thread.
  void enqueue(WorkerQueue::Work work, const Responder& responder) {
    if (core_->config.threads == 0) return work()();
    if (core_->workers.push(std::move(work), core_->config.max_queued)) return;
    responder.fail({Code::kAgain, "tokenize queue is full: limit " + std::to_string(core_->config.max_queued) +
                                      " batches (agent option --tokenize-queue)"});
  }

  // A vocabulary the agent has in its directory, or one the client
  // uploaded: loaded once per session, on a worker.
  void open(ServiceRequest r, Result<Vocabularies::Request> request) {
    Responder responder = r.responder;
    auto work = open_work(core_, std::move(request), r);
    if (!work.ok()) return responder.fail(work.status());
    enqueue(std::move(work).value(), responder);
  }

  void bind(ServiceRequest r, std::span<const uint8_t> descriptor) {
    auto remote = r.peer->import_region(descriptor);
    if (!remote.ok()) return r.responder.fail(remote.status());
    auto& outputs = core_->clients[r.peer->id()].outputs;
    // An unbound output's slot is reused: a client that binds and unbinds
    // for its peaks keeps a short table.
    auto slot = std::find(outputs.begin(), outputs.end(), nullptr);
    if (slot == outputs.end() && outputs.size() >= kMaxOutputsPerConnection)
      return r.responder.fail({Code::kTooBig, "connection has bound " + std::to_string(outputs.size()) +
                                                  " output buffers, the limit kMaxOutputsPerConnection"});
    if (slot == outputs.end()) slot = outputs.insert(slot, nullptr);
    *slot = std::make_shared<RemoteRegion>(std::move(remote).value());
    uint32_t handle = static_cast<uint32_t>(slot - outputs.begin());
    r.responder.respond(Buffer::copy_of({reinterpret_cast<const uint8_t*>(&handle), sizeof handle}));
  }

  // Batches already running keep the region until they finish.
  void unbind(ServiceRequest r, std::span<const uint8_t> body) {
    wire::Reader in{body};
    uint32_t handle = 0;
    if (!in.get(handle)) return r.responder.fail({Code::kInvalidArgument, "unbind request is truncated"});
    auto& outputs = core_->clients[r.peer->id()].outputs;
    if (handle >= outputs.size() || !outputs[handle])
      return r.responder.fail({Code::kNotFound, "output buffer " + std::to_string(handle) + " is not bound on this connection"});
    outputs[handle].reset();
    r.responder.respond(Buffer());
  }

  void encode(ServiceRequest r) {
    const TokenizeConfig& cfg = core_->config;
    wire::Reader in{r.payload.span().subspan(1)};
    wire::EncodeHeader h;
    if (!in.get(h)) return r.responder.fail({Code::kInvalidArgument, "encode request is truncated (no header)"});
    if (h.texts > cfg.max_batch_texts)
      return r.responder.fail({Code::kTooBig, "batch of " + std::to_string(h.texts) + " texts exceeds max_batch_texts " +
                                                  std::to_string(cfg.max_batch_texts) + " (agent option --max-batch-texts)"});
    Client& client = core_->clients[r.peer->id()];
    if (h.tokenizer >= client.tokenizers.size())
      return r.responder.fail({Code::kNotFound, "tokenizer " + std::to_string(h.tokenizer) + " was not opened on this connection"});
    // In band, the ids go in the answer: its size is checked when it is sent.
    std::shared_ptr<RemoteRegion> output;
    if (!(h.flags & wire::kIdsInBand)) {
      if (h.output >= client.outputs.size() || !client.outputs[h.output])
        return r.responder.fail({Code::kNotFound, "output buffer " + std::to_string(h.output) + " is not bound on this connection"});
      output = client.outputs[h.output];
      const uint64_t slots = output->size() / sizeof(int32_t);
      if (h.out_offset > slots || h.out_capacity > slots - h.out_offset)
        return r.responder.fail({Code::kOutOfRange, "output range of " + std::to_string(h.out_capacity) + " ids at id " +
                                                        std::to_string(h.out_offset) + " exceeds the output buffer of " +
                                                        std::to_string(slots) + " ids"});
    }
    std::vector<uint64_t> lengths(h.texts);
    uint64_t total = 0;
    for (auto& len : lengths) {
      if (!in.get(len)) return r.responder.fail({Code::kInvalidArgument, "encode request is truncated (text lengths)"});
      total += len;
    }
    if (total != in.in.size())
      return r.responder.fail({Code::kInvalidArgument, "text lengths add up to " + std::to_string(total) +
                                                           " B but the request carries " + std::to_string(in.in.size()) + " B"});
    Responder responder = r.responder;
    const uint8_t* texts = in.in.data();
    auto job = std::make_shared<Job>(Job{std::move(r), client.tokenizers[h.tokenizer], std::move(output), h,
                                         std::move(lengths), texts, Clock::now(), static_cast<uint32_t>(core_->workers.waiting())});
    enqueue([core = core_, job] { return run(core, job); }, responder);
  }

  struct Job {
    ServiceRequest request;  // owns the payload the texts point into
    std::shared_ptr<const Tokenizer> tokenizer;
    std::shared_ptr<RemoteRegion> output;  // null: the ids go in the answer
    wire::EncodeHeader header;
    std::vector<uint64_t> lengths;
    const uint8_t* texts;
    Clock::time_point arrived;
    uint32_t queued_before;
  };

  // Worker thread: tokenize every text; a failing text fails alone. A
  // tenant's batches take at most its --max-client-tokenize-threads workers
  // at once, across its sessions: the wait counts as queueing.
  static std::function<void()> run(const std::shared_ptr<Core>& core, const std::shared_ptr<Job>& jobp) {
    if (!core->host->begin_client_work(core->detached)) return [] {};  // the service is going
    struct EndWork {
      ServiceHost* host;
      ~EndWork() { host->end_client_work(); }
    } end_work{core->host};
    Job& job = *jobp;
    const auto started = Clock::now();
    const uint64_t cpu0 = thread_cpu_ns();
    const TokenizeConfig& cfg = core->config;
    const wire::EncodeHeader& h = job.header;
    EncodeOptions options;
    options.allow_special = h.flags & wire::kAllowSpecial;
    options.ordinary = h.flags & wire::kOrdinary;
    options.utf8 = (h.flags & wire::kUtf8Replace) ? Utf8Policy::kReplace : Utf8Policy::kStrict;
    options.add_special_tokens = h.flags & wire::kAddSpecialTokens;

    std::vector<std::string_view> texts(h.texts);
    const uint8_t* text = job.texts;
    for (uint32_t i = 0; i < h.texts; ++i) {
      texts[i] = {reinterpret_cast<const char*>(text), job.lengths[i]};
      text += job.lengths[i];
    }
    TextLimits limits;
    limits.max_text_bytes = cfg.max_text_bytes;
    limits.max_text_bytes_source = "agent option --max-text-bytes";
    limits.max_len = h.max_len;
    limits.capacity = h.out_capacity;
    auto ids = std::make_shared<std::vector<int32_t>>();
    std::vector<uint64_t> offsets;
    const std::vector<Status> statuses = job.tokenizer->encode_each(texts, *ids, offsets, options, limits);
    std::vector<wire::TextResult> results(h.texts);
    std::vector<std::string> errors;
    for (uint32_t i = 0; i < h.texts; ++i) {
      results[i] = {offsets[i], static_cast<uint32_t>(offsets[i + 1] - offsets[i]), static_cast<int32_t>(statuses[i].code())};
      if (!statuses[i].ok()) errors.push_back(statuses[i].message());
    }
    wire::ResultHeader rh;
    rh.texts = h.texts;
    rh.queued_before = job.queued_before;
    rh.queue_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(started - job.arrived).count());
    rh.tokenize_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - started).count());
    rh.cpu_ns = thread_cpu_ns() - cpu0;
    rh.ids = ids->size();

    wire::Writer answer;
    answer.put(rh);
    for (const auto& res : results) answer.put(res);
    if (!job.output) {
      answer.put_bytes({reinterpret_cast<const uint8_t*>(ids->data()), ids->size() * sizeof(int32_t)});
      ids->clear();
    }
    for (const auto& e : errors) {
      answer.put(static_cast<uint32_t>(e.size()));
      answer.put_bytes(e);
    }
    return [core, jobp, ids = std::move(ids), answer = std::move(answer.bytes)]() mutable {
      if (!core->detached) finish(*jobp, *ids, answer);
    };
  }

  // Progress thread: the ids land in the client's buffer before the answer.
  static void finish(Job& job, const std::vector<int32_t>& ids, std::vector<uint8_t>& answer) {
    ServiceRequest& r = job.request;
    if (!r.peer->is_open()) return;  // the client left mid-batch
    if (!job.output && answer.size() > r.peer->peer_max_msg_size())
      return r.responder.fail({Code::kTooBig, "the answer of " + std::to_string(answer.size()) +
                                                  " B, its ids in band (a sealed connection), exceeds the client's "
                                                  "max_msg_size " + std::to_string(r.peer->peer_max_msg_size()) +
                                                  " B: send smaller batches"});
    const auto t0 = Clock::now();
    if (!ids.empty()) {
      const auto deadline = Deadline::after_ms(kPutDeadlineMs);
      std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(ids.data()), ids.size() * sizeof(int32_t));
      Status st = r.peer->put(*job.output, job.header.out_offset * sizeof(int32_t), bytes, deadline);
      if (st.ok()) st = r.peer->flush(deadline);
      if (!st.ok()) return r.responder.fail(st.with_context("writing the ids"));
    }
    wire::ResultHeader rh;
    std::memcpy(&rh, answer.data(), sizeof rh);
    rh.put_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
    std::memcpy(answer.data(), &rh, sizeof rh);
    r.responder.respond(Buffer::copy_of(answer));
  }

  std::shared_ptr<Core> core_;
};

}  // namespace

std::unique_ptr<Service> make_tokenize(TokenizeConfig config, std::shared_ptr<Vocabularies> vocabularies) {
  return std::make_unique<Tokenize>(std::move(config), std::move(vocabularies));
}

}  // namespace outboard::services
