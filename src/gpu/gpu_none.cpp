// A build without nvcc: no GPU tokenizer or writer, and every caller told why.
#include "gpu/gpu_tokenizer.h"
#include "gpu/writes.h"

namespace outboard::gpu {

namespace {
Status no_cuda() {
  return {Code::kUnsupported, "this build has no CUDA code: nvcc was not found when it was configured"};
}
}  // namespace

Status cuda_usable() { return no_cuda(); }

Result<std::unique_ptr<GpuTokenizer>> GpuTokenizer::create(const Tokenizer&) { return no_cuda(); }

Result<std::unique_ptr<GpuWriter>> GpuWriter::create(std::span<uint8_t>) { return no_cuda(); }

}  // namespace outboard::gpu
