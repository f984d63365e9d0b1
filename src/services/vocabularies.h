// The vocabularies an agent session serves to its tokenize and detokenize
// services: names resolved in the agent's vocabulary directory only, and
// files clients upload (keyed by their sha256 and format). Each is loaded
// once and shared by every client of the session. Thread mode: multi.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "outboard/service.h"
#include "outboard/tokenizer.h"
#include "services/worker_queue.h"

namespace outboard::services {

class Vocabularies {
 public:
  struct Config {
    std::string dir;                 ///< --vocab-dir: the only place names are opened
    uint64_t max_upload_bytes = 0;   ///< --max-vocab-bytes: largest vocabulary a client uploads
    uint64_t cache_bytes = kDefaultPieceCacheBytes;  ///< --tokenize-cache-bytes: each one's pre-token cache
  };
  /// What a client asks to open: a name, or an upload (a format byte, then
  /// the file's bytes). Checked on the progress thread: no I/O, no parsing.
  struct Request {
    std::string key;  ///< the name, or "sha256:<hex>:<format>" of an upload
    VocabFormat format{};
    std::span<const uint8_t> contents;  ///< empty for a name
  };

  explicit Vocabularies(Config config) : config_(std::move(config)) {}
  /// An upload's request; kTooBig over max_upload_bytes, kInvalidArgument
  /// for an unknown format.
  Result<Request> upload(std::span<const uint8_t> body) const;
  /// The tokenizer asked for: loaded already, or loaded now (parsing takes
  /// up to seconds: call it off the progress thread).
  Result<std::shared_ptr<const Tokenizer>> open(const Request& request);

 private:
  Config config_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<const Tokenizer>> loaded_;
};

/// Tokenizers one connection may open on a service: a client that opens
/// without end runs out here, not the session's memory.
inline constexpr size_t kMaxTokenizersPerConnection = 256;

/// The work of opening a vocabulary for a client of a service: it loads on
/// a worker; back on the progress thread, unless the service is gone, the
/// client's tokenizers gain it and the request is answered u32 handle, u32
/// vocabulary size. `Core`: the service's shared state (`detached`,
/// `vocabularies`, `clients[connection].tokenizers`).
/// kTooBig when the client has opened kMaxTokenizersPerConnection already.
template <typename Core>
Result<WorkerQueue::Work> open_work(std::shared_ptr<Core> core, Result<Vocabularies::Request> request,
                                    ServiceRequest& r) {
  if (!request.ok()) return request.status();
  const uint32_t conn = r.peer->id();
  if (core->clients[conn].tokenizers.size() >= kMaxTokenizersPerConnection)
    return Status(Code::kTooBig, "connection has opened " + std::to_string(kMaxTokenizersPerConnection) +
                                     " tokenizers, the limit kMaxTokenizersPerConnection");
  auto req = std::make_shared<ServiceRequest>(std::move(r));  // closures must be copyable; it owns the upload
  return WorkerQueue::Work([core = std::move(core), request = std::move(request).value(), req, conn]() -> std::function<void()> {
    auto tok = core->vocabularies->open(request);
    return [core, req, tok = std::move(tok), conn] {
      if (core->detached) return;
      if (!tok.ok()) return req->responder.fail(tok.status());
      auto& tokenizers = core->clients[conn].tokenizers;
      tokenizers.push_back(tok.value());
      const uint32_t reply[2] = {static_cast<uint32_t>(tokenizers.size() - 1), static_cast<uint32_t>(tok.value()->vocab_size())};
      req->responder.respond(Buffer::copy_of({reinterpret_cast<const uint8_t*>(reply), sizeof reply}));
    };
  });
}

}  // namespace outboard::services
