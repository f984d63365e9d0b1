// The offload agent: hosts services behind a channel listener. The same
// native code runs as `outboard-agent` on a DPU's Arm cores or a spare core.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "outboard/channel.h"
#include "outboard/config.h"
#include "outboard/service.h"

namespace outboard {

/// Most workers --tokenize-threads may ask for.
inline constexpr uint32_t kMaxTokenizeThreads = 256;

struct AgentConfig {
  std::string listen = "127.0.0.1:0";  ///< --listen host:port (port 0: any free port)
  ChannelConfig channel;
  std::string cores;                   ///< --cores "0,2-3": pin the agent; empty: no pinning
  std::string address_file;            ///< --address-file: written once listening
  uint64_t max_region_size = 1ull << 30;  ///< --max-region-size for the memory service
  // The tokenize service.
  uint32_t tokenize_threads = 1;          ///< --tokenize-threads: workers tokenizing batches (0: the progress thread)
  uint32_t tokenize_queue = 1024;         ///< --tokenize-queue: batches waiting for a worker
  uint32_t max_batch_texts = 4096;        ///< --max-batch-texts: texts per batch
  uint64_t max_text_bytes = 16ull << 20;  ///< --max-text-bytes: a longer text fails alone
  std::string vocab_dir;                  ///< --vocab-dir; empty: default_vocab_dir()
  // The graph service.
  uint32_t graph_threads = 0;               ///< --graph-threads: workers for engine nodes (0: the progress thread)
  uint32_t graph_max_instances = 1u << 16;  ///< --graph-max-instances per connection
  uint64_t graph_max_memory = 1ull << 30;   ///< --graph-max-memory: agent memory per connection
};

/// Where `outboard vocab fetch` caches vocabularies: $OUTBOARD_CACHE_DIR,
/// else $XDG_CACHE_HOME/outboard, else ~/.cache/outboard.
std::string default_vocab_dir();

/// The agent's option table (shared by outboard-agent and tests).
config::Options agent_options();
/// Reads AgentConfig from parsed options.
Result<AgentConfig> agent_config_from(const config::Options& options);

/// Thread mode: run() on one thread; stop() from any thread or a signal handler.
class Agent {
 public:
  /// Creates an agent with the built-in services (echo, stats, memory,
  /// sink, tokenize, graph).
  [[nodiscard]] static Result<std::unique_ptr<Agent>> create(const AgentConfig& config);
  ~Agent();

  /// Adds a service before start(); kInvalidArgument on a duplicate name.
  [[nodiscard]] Status add_service(std::unique_ptr<Service> service);
  /// Listens and writes the address file.
  [[nodiscard]] Status start();
  [[nodiscard]] const std::string& address() const;
  /// Serves until stop(); then fails in-flight requests with kShutDown and
  /// closes every connection.
  [[nodiscard]] Status run();
  void stop() { stop_.store(true, std::memory_order_relaxed); }
  /// Counters as a JSON object (the `stats` service's answer).
  [[nodiscard]] std::string stats_json();

 private:
  struct Impl;
  explicit Agent(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> stop_{false};
};

}  // namespace outboard
