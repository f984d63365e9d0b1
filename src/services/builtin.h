// Services every agent ships.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "outboard/service.h"
#include "outboard/tokenizer.h"
#include "services/mpi_p2p.h"
#include "services/vocabularies.h"

namespace outboard::services {

/// `echo`: answers a request with its payload; reflects one-way messages.
std::unique_ptr<Service> make_echo();
/// `stats`: answers with `snapshot()` (a JSON object of the agent's counters).
std::unique_ptr<Service> make_stats(std::function<std::string()> snapshot);
/// `memory`: a per-connection region on the agent for one-sided tests and
/// benchmarks. Requests (little-endian): 'A' u64 size [u8 1: GPU memory,
/// MemoryKind::kCuda] -> descriptor; the agent's CPU never touches a GPU
/// region, so the requests below that read or write it refuse one;
/// 'P' u64 seed -> fills the region; 'S' u64 offset u64 len -> u64 checksum;
/// 'W' u64 cookie u64 offset u64 len u64 seed + the client's descriptor ->
/// writes the pattern into the client's region with notify. A client's
/// write-with-notify into the region is answered with a one-way message of
/// u64 cookie, u64 checksum of the notified bytes.
/// 'M' u64 size u64 slots u64 pings u64 idle_ms + the client's descriptor ->
/// mirrors pings, as perftest's write_lat peer does: ping i (from 1) fills
/// slot (i-1) % slots (`size` bytes at slot * size of the region, `size` a
/// multiple of 8): the client's put_signal of its first size - 8 bytes with
/// its last 8, the slot's signal word, set to i, as perftest's sequence
/// number is the last byte of its message. The agent, polling that word, puts
/// the slot back at the same offset of the client's region the same way.
/// Answers u64 pings when all are mirrored; kTimedOut when no ping comes for
/// idle_ms.
/// 'G' u64 signal_at u64 value u64 length u64 timeout_ms -> u64 checksum of
/// the region's first `length` bytes once the u64 at signal_at (a multiple of
/// 8) holds at least `value`: the agent polls that word, as a GPU kernel's (or
/// the CPU's) stores into the mapped region end by setting it; kTimedOut after
/// timeout_ms (at most kMaxSignalWaitMs).
std::unique_ptr<Service> make_memory(uint64_t max_region_size);
/// The longest a 'G' request waits for its signal word.
inline constexpr uint64_t kMaxSignalWaitMs = 60'000;
/// Offset of a mirror slot's signal word: its last 8 bytes.
inline constexpr uint64_t mirror_signal_at(uint64_t slot, uint64_t size) { return (slot + 1) * size - 8; }
/// The longest a mirror may wait for a ping (its idle_ms is capped to it).
inline constexpr uint64_t kMirrorMaxIdleMs = 60'000;
/// `sink`: absorbs one-way messages, tallying per connection their count,
/// bytes and digest (checksum_chain over the messages in order, from
/// kChecksumChainSeed). A request answers u64 count, u64 bytes, u64 digest
/// and starts a new tally. For streaming benchmarks.
std::unique_ptr<Service> make_sink();

/// Limits of the `tokenize` service (agent options in the comments).
struct TokenizeConfig {
  uint32_t threads = 1;                   ///< --tokenize-threads: workers tokenizing batches (0: the progress thread)
  uint32_t max_queued = 1024;             ///< --tokenize-queue: batches waiting for a worker
  uint32_t max_batch_texts = 4096;        ///< --max-batch-texts
  uint64_t max_text_bytes = 16ull << 20;  ///< --max-text-bytes: longer texts fail alone
};
/// `tokenize`: exact tokenizers on the agent; ids are put into the client's
/// registered buffer (wire format: services/tokenize_wire.h). Its
/// vocabularies are the session's (services/vocabularies.h).
std::unique_ptr<Service> make_tokenize(TokenizeConfig config, std::shared_ptr<Vocabularies> vocabularies);

/// `detokenize`: ids in, text out as each sequence's characters complete,
/// the decode state of every sequence kept on the agent (wire format:
/// services/detokenize_wire.h), with the session's vocabularies.
std::unique_ptr<Service> make_detokenize(std::shared_ptr<Vocabularies> vocabularies);

/// Limits of the `graph` service (agent options in the comments).
struct GraphServiceConfig {
  /// --graph-threads: executor workers running engine nodes; 0 runs them on
  /// the agent's progress thread (no hand-off between threads).
  uint32_t threads = 0;
  uint32_t max_instances = 1u << 16;    ///< --graph-max-instances per connection
  uint64_t max_memory = 1ull << 30;     ///< --graph-max-memory: agent memory of a connection's instances
};
/// `graph`: task graphs shipped by clients (outboard/graph_offload.h; wire
/// format: services/graph_wire.h).
std::unique_ptr<Service> make_graph(GraphServiceConfig config);

/// Limits of the `mpi` service (agent options in the comments).
struct MpiServiceConfig {
  uint32_t max_pending = 256;  ///< --mpi-max-pending: a rank's collectives waiting for its other ranks
  MpiP2pConfig p2p;            ///< point-to-point limits
  /// The agent's keys: its links to the agents of other hosts are secure as its clients' are.
  SecureConfig secure;
};
/// `mpi`: collectives handed off by MPI ranks (the interposer, src/mpi), run once every rank of
/// the communicator has posted them, and their point-to-point messages, matched as MPI matches
/// them (services/mpi_p2p.h; wire format: services/mpi_wire.h).
std::unique_ptr<Service> make_mpi(MpiServiceConfig config);

/// Limits of the `checkpoint` service (agent options in the comments).
struct CheckpointConfig {
  /// --checkpoint-root: the directory clients' checkpoint directories must lie in; empty: the
  /// service refuses every directory.
  std::string root;
  uint64_t max_dir_bytes = 0;  ///< --checkpoint-max-dir-bytes: a directory's checkpoints; 0: no limit
  uint32_t min_free_pct = 0;   ///< --checkpoint-min-free-pct: of the filesystem, what a checkpoint leaves free
  uint64_t max_client_bytes = 0;  ///< --checkpoint-max-client-bytes: a TLS identity's checkpoints; 0: no limit
};
/// `checkpoint`: persists trainers' snapshots from their staging regions as safetensors files and
/// a manifest, durably (services/checkpoint_store.h; wire format: services/checkpoint_wire.h).
std::unique_ptr<Service> make_checkpoint(CheckpointConfig config);

}  // namespace outboard::services
