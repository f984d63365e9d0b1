// Client of the agent's `tokenize` service: texts go to the agent, exact ids
// come back by a one-sided write into this process's registered memory, so a
// consumer reads them in place (no copy, no parsing). On a sealed connection,
// where one-sided access is refused, they come in the answer, sealed with
// it, and are copied into the same slots.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "outboard/channel.h"
#include "outboard/tokenizer.h"

namespace outboard {

struct OffloadOptions {
  EncodeOptions encode;
  /// Ids allowed per text; a text with more fails alone (never truncated). 0: no limit.
  uint32_t max_len = 0;
  /// Id slots reserved for the batch; 0: as many as the texts can produce.
  /// Texts that do not fit fail alone, naming the sizes.
  uint64_t capacity = 0;
};

/// What the agent reported about a batch.
struct AgentTiming {
  uint32_t queued_before = 0;  ///< batches ahead of it in the agent's queue
  uint64_t queue_ns = 0;       ///< waiting for a tokenize thread
  uint64_t tokenize_ns = 0;    ///< tokenizing (wall)
  uint64_t cpu_ns = 0;         ///< tokenizing (thread CPU)
  uint64_t put_ns = 0;         ///< writing the ids into our memory, flushed
};

/// The ids of one batch, in registered memory of this process. Copyable;
/// the slots are reused once the last copy (and keepalive()) is gone.
class EncodedBatch {
 public:
  EncodedBatch() = default;
  /// `keepalive` holds the memory `ids` views.
  EncodedBatch(std::shared_ptr<const void> keepalive, std::span<const int32_t> ids, std::vector<uint64_t> offsets,
               std::vector<Status> errors, AgentTiming timing, MemoryKind kind = MemoryKind::kHost)
      : keepalive_(std::move(keepalive)),
        ids_(ids),
        offsets_(std::move(offsets)),
        errors_(std::move(errors)),
        timing_(timing),
        kind_(kind) {}
  /// Ids of all texts back to back; text i is ids()[offsets()[i] .. offsets()[i+1]).
  /// In GPU memory where memory_kind() says so: not for this CPU to read.
  [[nodiscard]] std::span<const int32_t> ids() const { return ids_; }
  [[nodiscard]] MemoryKind memory_kind() const { return kind_; }
  [[nodiscard]] const std::vector<uint64_t>& offsets() const { return offsets_; }
  /// ok, or why text i failed (it then has no ids).
  [[nodiscard]] const std::vector<Status>& errors() const { return errors_; }
  [[nodiscard]] const AgentTiming& timing() const { return timing_; }
  /// Holds the slots, for views that outlive this object.
  [[nodiscard]] std::shared_ptr<const void> keepalive() const { return keepalive_; }

 private:
  std::shared_ptr<const void> keepalive_;
  std::span<const int32_t> ids_;
  std::vector<uint64_t> offsets_;
  std::vector<Status> errors_;
  AgentTiming timing_;
  MemoryKind kind_ = MemoryKind::kHost;
};

/// Memory of the caller's where ids land (pinned host memory that a GPU's
/// copy engine reads, say). It is registered for the tokenizer's life (on a
/// sealed connection, ids are copied into it from the answer) and
/// `owner` is held until no batch views it. Batches that do not fit get slabs
/// of the tokenizer's own.
struct OutputMemory {
  std::span<int32_t> ids;
  std::shared_ptr<void> owner;
  /// kCuda: the device's memory (a CUDA tensor), which the agent writes one-sidedly (cuda_ipc on one
  /// host): needs a UCX that carries GPU memory and a connection that is not sealed.
  MemoryKind kind = MemoryKind::kHost;
};

/// A tokenizer opened on the agent at the other end of a connection.
/// Thread mode: multi (batches from several threads are in flight at once).
/// The connection must outlive it.
class RemoteTokenizer {
 public:
  /// Opens `name`: "gpt2", "bert-base-uncased" or a file name in the
  /// agent's vocabulary directory; or, when it holds a '/', a vocabulary file
  /// of this machine (.tiktoken, tokenizer .json or vocab .txt), uploaded to
  /// the agent. `pool_ids`: id slots registered up front (more are
  /// registered when a batch needs them).
  [[nodiscard]] static Result<std::unique_ptr<RemoteTokenizer>> open(Connection& connection, const std::string& name,
                                                                     Deadline deadline, uint64_t pool_ids = 1u << 22);
  /// Opens `name` with ids landing in `output` first.
  [[nodiscard]] static Result<std::unique_ptr<RemoteTokenizer>> open(Connection& connection, const std::string& name,
                                                                     Deadline deadline, OutputMemory output);
  ~RemoteTokenizer();

  /// Tokenizes on the agent. Per-text failures are in errors(); the call
  /// fails only when the batch as a whole does (connection, deadline, limits).
  [[nodiscard]] Result<EncodedBatch> encode_batch(std::span<const std::string_view> texts, const OffloadOptions& options,
                                                  Deadline deadline);
  using EncodeDone = std::function<void(Result<EncodedBatch>)>;
  /// encode_batch() without waiting: `done` runs exactly once (the batch, or
  /// why it failed, kTimedOut at the deadline) on a thread that progresses the
  /// connection (Connection::progress, wait_until or any blocking call), and
  /// must not block. The texts are copied before it returns. With no credit
  /// free (the agent's window full of batches) it waits for some, within the
  /// deadline; with Credit::kFail it returns kAgain at once, nothing sent and
  /// `done` never run, so an event loop is never held up.
  [[nodiscard]] Status submit(std::span<const std::string_view> texts, const OffloadOptions& options, Deadline deadline,
                              EncodeDone done, Connection::Credit credit = Connection::Credit::kWait);
  [[nodiscard]] size_t vocab_size() const { return vocab_size_; }
  /// Memory registered for ids (plain memory on a sealed connection): the
  /// first `pool_ids` slots, plus slabs added for peaks until they are empty
  /// and the next batch unbinds (or frees) them.
  [[nodiscard]] uint64_t registered_bytes() const;

  /// The most ids `text` can produce (what capacity 0 reserves).
  static uint64_t max_ids(std::string_view text, const EncodeOptions& options);

  struct Pool;
  struct Slots;

 private:
  struct Request;
  RemoteTokenizer(Connection& connection, uint32_t handle, size_t vocab_size, std::shared_ptr<Pool> pool);
  static Result<std::unique_ptr<RemoteTokenizer>> open(Connection& connection, const std::string& name,
                                                       Deadline deadline, OutputMemory output, uint64_t pool_ids);
  Result<Request> prepare(std::span<const std::string_view> texts, const OffloadOptions& options, Deadline deadline);
  static Result<EncodedBatch> finish(const Buffer& reply, std::shared_ptr<Slots> slots, size_t texts);
  Connection& connection_;
  uint32_t handle_;
  size_t vocab_size_;
  std::shared_ptr<Pool> pool_;
};

}  // namespace outboard
