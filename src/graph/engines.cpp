// Built-in engines: the CPU stand-ins for a DPU's SHA and DMA engines.
#include <sodium.h>

#include <cstdlib>
#include <cstring>

#include "outboard/graph.h"

namespace outboard::graph {
namespace {

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
