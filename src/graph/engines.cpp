// Built-in engines: the CPU stand-ins for a DPU's SHA and DMA engines.
#include <sodium.h>

#include <cstdlib>
#include <cstring>

#include "outboard/graph.h"

namespace outboard::graph {

uint64_t Engine::estimated_ns(const void*) const { return kUnknownCost; }

namespace {
// Rough single-core rates, for estimated_ns() only.
constexpr double kSha256BytesPerNs = 0.4;
constexpr double kCopyBytesPerNs = 8;

uint64_t ns_for(size_t bytes, double bytes_per_ns) {
  double ns = static_cast<double>(bytes) / bytes_per_ns;
  return ns >= static_cast<double>(kUnknownCost) ? kUnknownCost : static_cast<uint64_t>(ns);
}

class Sha256Engine final : public Engine {
 public:
  Sha256Engine() {
    if (sodium_init() < 0) std::abort();  // libsodium could not initialise: nothing can run
  }
  std::string_view name() const override { return "sha256"; }
  Status run(void* task) const override {
    auto* t = static_cast<Sha256Task*>(task);
    if (!t || (!t->src && t->len) || !t->digest) return {Code::kInvalidArgument, "sha256 task without buffers"};
    crypto_hash_sha256(t->digest, static_cast<const unsigned char*>(t->src), t->len);
    return {};
  }
  uint64_t estimated_ns(const void* task) const override {
    return task ? ns_for(static_cast<const Sha256Task*>(task)->len, kSha256BytesPerNs) : kUnknownCost;
  }
};

class CopyEngine final : public Engine {
 public:
  std::string_view name() const override { return "dma"; }
  Status run(void* task) const override {
    auto* t = static_cast<CopyTask*>(task);
    if (!t || (t->len && (!t->src || !t->dst))) return {Code::kInvalidArgument, "dma task without buffers"};
    if (t->len) std::memcpy(t->dst, t->src, t->len);
    return {};
  }
  uint64_t estimated_ns(const void* task) const override {
    return task ? ns_for(static_cast<const CopyTask*>(task)->len, kCopyBytesPerNs) : kUnknownCost;
  }
};

}  // namespace

const Engine& sha256_engine() {
  static const Sha256Engine engine;
  return engine;
}

const Engine& copy_engine() {
  static const CopyEngine engine;
  return engine;
}

}  // namespace outboard::graph
