#include <string>

#include "gpu/cuda_status.h"
#include "gpu/gpu_tokenizer.h"  // cuda_usable
#include "gpu/writes.h"

namespace outboard::gpu {
namespace {

// One block: every thread stores its share of an iteration, fences so the stores are visible to
// the host before the signal, and thread 0 sets the signal once all have.
__global__ void write_kernel(uint64_t* memory, uint64_t words, uint64_t* signal, uint64_t first, uint64_t count) {
  for (uint64_t it = first; it < first + count; ++it) {
    write_words(memory, words, it, threadIdx.x, blockDim.x);
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0) *reinterpret_cast<volatile uint64_t*>(signal) = it;
    __syncthreads();
  }
}

class CudaWriter final : public GpuWriter {
 public:
  explicit CudaWriter(std::span<uint8_t> mapped) : mapped_(mapped) {}
  ~CudaWriter() override {
    if (stream_) cudaStreamSynchronize(stream_);
    for (cudaEvent_t e : events_)
      if (e) cudaEventDestroy(e);
    if (stream_) cudaStreamDestroy(stream_);
    if (registered_) cudaHostUnregister(mapped_.data());
  }

  Status init() {
    OB_CUDA_TRY(cudaSetDevice(0), "selecting CUDA device 0");
    OB_CUDA_TRY(cudaHostRegister(mapped_.data(), mapped_.size(), cudaHostRegisterMapped | cudaHostRegisterPortable),
                "registering " + std::to_string(mapped_.size()) + " B of mapped memory with CUDA");
    registered_ = true;
    void* device = nullptr;
    OB_CUDA_TRY(cudaHostGetDevicePointer(&device, mapped_.data(), 0), "the device's address of the mapped memory");
    device_ = static_cast<uint8_t*>(device);
    OB_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a CUDA stream");
    for (cudaEvent_t& ev : events_) OB_CUDA_TRY(cudaEventCreate(&ev), "creating a CUDA event");
    return {};
  }

  Status launch(uint64_t words, uint64_t signal_at, uint64_t first, uint64_t count) override {
    if (words * 8 > mapped_.size() || signal_at % 8 != 0 || signal_at + 8 > mapped_.size())
      return {Code::kOutOfRange, std::to_string(words) + " words and the signal at " + std::to_string(signal_at) +
                                     " do not fit the " + std::to_string(mapped_.size()) + " B mapped"};
    cudaEventRecord(events_[0], stream_);
    write_kernel<<<1, kWriterThreads, 0, stream_>>>(reinterpret_cast<uint64_t*>(device_), words,
                                                   reinterpret_cast<uint64_t*>(device_ + signal_at), first, count);
    OB_CUDA_TRY(cudaGetLastError(), "launching the write kernel");
    cudaEventRecord(events_[1], stream_);
    return {};
  }

  Result<uint64_t> finish() override {
    OB_CUDA_TRY(cudaStreamSynchronize(stream_), "the write kernel");
    float ms = 0;
    OB_CUDA_TRY(cudaEventElapsedTime(&ms, events_[0], events_[1]), "timing the write kernel");
    return static_cast<uint64_t>(ms * 1e6);
  }

 private:
  std::span<uint8_t> mapped_;
  bool registered_ = false;
  uint8_t* device_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t events_[2] = {};
};

}  // namespace

Result<std::unique_ptr<GpuWriter>> GpuWriter::create(std::span<uint8_t> mapped) {
  OB_RETURN_IF_ERROR(cuda_usable());
  auto writer = std::make_unique<CudaWriter>(mapped);
  OB_RETURN_IF_ERROR(writer->init());
  return std::unique_ptr<GpuWriter>(std::move(writer));
}

}  // namespace outboard::gpu
