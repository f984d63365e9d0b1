// The `detokenize` service: a server streaming generated text sends each
// sequence's new ids and gets back the text they complete — whole UTF-8
// characters only, the bytes of one begun held on the agent until later ids
// end it (Tokenizer's DecodeStream). One request steps any number of
// sequences, so a serving loop pays one round trip per generation step.
//
// Decoding is a table read per id: steps run on the progress thread.
// Opening a vocabulary parses a file (up to seconds): that runs on a worker.
#include <atomic>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "outboard/tokenizer.h"
#include "services/builtin.h"
#include "services/detokenize_wire.h"
#include "services/vocabularies.h"
#include "services/worker_queue.h"
#include "util/text.h"

namespace outboard::services {
namespace {

namespace wire = detokenize_wire;

// What a connection may hold and ask at once: a client that opens streams
// without end, or sends a huge step, runs out here, not the session's memory.
constexpr size_t kMaxStreamsPerConnection = 1 << 16;
constexpr uint64_t kMaxStepIds = 1 << 20;
constexpr size_t kOpensQueued = 64;  // vocabularies waiting for the loader thread

struct Client {
  std::vector<std::shared_ptr<const Tokenizer>> tokenizers;
  std::unordered_map<uint64_t, DecodeStream> streams;  // by stream_key(tokenizer, the client's name)
};

uint64_t stream_key(uint32_t tokenizer, uint32_t stream) { return uint64_t{tokenizer} << 32 | stream; }

struct Core {
  std::atomic<bool> detached{false};
  std::unordered_map<uint32_t, Client> clients;  // progress thread only
  std::shared_ptr<Vocabularies> vocabularies;
  WorkerQueue loader;
};

class Detokenize final : public Service {
 public:
  explicit Detokenize(std::shared_ptr<Vocabularies> vocabularies) : core_(std::make_shared<Core>()) {
    core_->vocabularies = std::move(vocabularies);
  }
  ~Detokenize() override {
    core_->detached = true;
    core_->loader.stop();
  }

  std::string name() const override { return "detokenize"; }
  void attach(ServiceHost& host) override { core_->loader.attach(host, 1); }
  void on_disconnect(uint32_t id) override { core_->clients.erase(id); }

  void handle(ServiceRequest r) override {
    if (!r.responder.expects_response())
      return r.responder.fail({Code::kInvalidArgument, "detokenize takes requests, not one-way messages"});
    std::span<const uint8_t> in = r.payload.span();
    if (in.empty()) return r.responder.fail({Code::kInvalidArgument, "empty detokenize request"});
    const char op = static_cast<char>(in[0]);
    in = in.subspan(1);
    switch (op) {
      case wire::kOpen:
        return open(std::move(r), Vocabularies::Request{std::string(reinterpret_cast<const char*>(in.data()), in.size())});
      case wire::kUpload:
        return open(std::move(r), core_->vocabularies->upload(in));
      case wire::kStep:
        return step(std::move(r), in);
      case wire::kClose:
        return close(std::move(r), in);
      default:
        return r.responder.fail({Code::kInvalidArgument, "unknown detokenize request " + quote({&op, 1})});
    }
  }

 private:
  void open(ServiceRequest r, Result<Vocabularies::Request> request) {
    Responder responder = r.responder;
    auto work = open_work(core_, std::move(request), r);
    if (!work.ok()) return responder.fail(work.status());
    if (!core_->loader.push(std::move(work).value(), kOpensQueued))
      responder.fail({Code::kAgain, "detokenize has " + std::to_string(kOpensQueued) +
                                        " vocabularies waiting to load, the limit kOpensQueued"});
  }

  // Step `s`'s stream, of a request naming `tokenizer`: begun where flagged and not open.
  Result<DecodeStream*> stream_of(Client& client, const wire::Step& s, uint32_t tokenizer) {
    if (auto it = client.streams.find(stream_key(tokenizer, s.stream)); it != client.streams.end()) return &it->second;
    if (!(s.flags & wire::kBegin))
      return Status(Code::kNotFound, "stream " + std::to_string(s.stream) + " is not open on this connection");
    if (client.streams.size() >= kMaxStreamsPerConnection)
      return Status(Code::kTooBig, "connection has " + std::to_string(client.streams.size()) +
                                       " open streams, the limit kMaxStreamsPerConnection");
    return &client.streams.try_emplace(stream_key(tokenizer, s.stream), *client.tokenizers[tokenizer]).first->second;
  }

  void close(ServiceRequest r, std::span<const uint8_t> body) {
    wire::Reader in{body};
    uint32_t tokenizer = 0, handle = 0;
    if (!in.get(tokenizer) || !in.get(handle))
      return r.responder.fail({Code::kInvalidArgument, "close request is truncated"});
    Client& client = core_->clients[r.peer->id()];
    if (!client.streams.erase(stream_key(tokenizer, handle)))
      return r.responder.fail({Code::kNotFound, "stream " + std::to_string(handle) + " is not open on this connection"});
    r.responder.respond(Buffer());
  }

  void step(ServiceRequest r, std::span<const uint8_t> body) {
    wire::Reader in{body};
    uint32_t tokenizer = 0, n = 0;
    if (!in.get(tokenizer) || !in.get(n))
      return r.responder.fail({Code::kInvalidArgument, "step request is truncated (no count)"});
    if (n > kMaxStreamsPerConnection)
      return r.responder.fail({Code::kTooBig, "step of " + std::to_string(n) + " streams exceeds kMaxStreamsPerConnection " +
                                                  std::to_string(kMaxStreamsPerConnection)});
    std::vector<wire::Step> steps(n);
    uint64_t total = 0;
    for (auto& s : steps) {
      if (!in.get(s)) return r.responder.fail({Code::kInvalidArgument, "step request is truncated (steps)"});
      total += s.ids;
    }
    if (total > kMaxStepIds)
      return r.responder.fail({Code::kTooBig, "step of " + std::to_string(total) + " ids exceeds kMaxStepIds " +
                                                  std::to_string(kMaxStepIds)});
    if (total * sizeof(int32_t) != in.in.size())
      return r.responder.fail({Code::kInvalidArgument, "steps name " + std::to_string(total) + " ids but the request carries " +
                                                           std::to_string(in.in.size()) + " B"});
    Client& client = core_->clients[r.peer->id()];
    if (tokenizer >= client.tokenizers.size())
      return r.responder.fail({Code::kNotFound, "tokenizer " + std::to_string(tokenizer) + " was not opened on this connection"});
    std::vector<wire::StepResult> results(n);
    std::string text;
    std::vector<std::string> errors;
    std::vector<int32_t> ids;
    const uint8_t* next = in.in.data();
    for (uint32_t i = 0; i < n; ++i) {
      const wire::Step& s = steps[i];
      ids.resize(s.ids);
      if (s.ids != 0) std::memcpy(ids.data(), next, s.ids * sizeof(int32_t));  // the payload need not be aligned
      next += s.ids * sizeof(int32_t);
      const size_t before = text.size();
      Result<DecodeStream*> stream = stream_of(client, s, tokenizer);
      Status st = stream.ok() ? (*stream)->step(ids, text) : stream.status();
      if (stream.ok() && (s.flags & wire::kFinish)) {  // closed even where its ids failed, as the client forgot it
        if (st.ok()) (*stream)->finish(text);
        client.streams.erase(stream_key(tokenizer, s.stream));
      }
      if (!st.ok()) {
        text.resize(before);
        errors.push_back("step " + std::to_string(i) + ": " + st.message());
      }
      results[i] = {static_cast<uint32_t>(text.size() - before), static_cast<int32_t>(st.code())};
    }
    wire::Writer answer;
    for (const auto& res : results) answer.put(res);
    answer.put_bytes(text);
    for (const auto& e : errors) answer.put_string(e);
    r.responder.respond(Buffer::copy_of(answer.bytes));
  }

  std::shared_ptr<Core> core_;
};

}  // namespace

std::unique_ptr<Service> make_detokenize(std::shared_ptr<Vocabularies> vocabularies) {
  return std::make_unique<Detokenize>(std::move(vocabularies));
}

}  // namespace outboard::services
