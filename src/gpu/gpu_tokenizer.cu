// GpuTokenizer on the CUDA runtime: bpe_kernels.h's steps as kernels on a
// stream of its own, prefix sums by CUB, one synchronisation per batch.
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <cub/device/device_scan.cuh>
#include <mutex>
#include <string>

#include "gpu/bpe_tables.h"
#include "gpu/gpu_tokenizer.h"
#include "util/mutex.h"

namespace outboard::gpu {

namespace {

Status cuda_error(cudaError_t e, const std::string& what) {
  return {Code::kIoError, what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")"};
}

#define OB_CUDA_TRY(call, what)                                          \
  do {                                                                   \
    if (const cudaError_t ob_e_ = (call); ob_e_ != cudaSuccess) return cuda_error(ob_e_, what); \
  } while (0)

template <typename F>
__global__ void each_kernel(uint32_t n, F f) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) f(i);
}

// bpe_kernels.h's executor: each step a launch on the stream, in order.
struct CudaExec {
  cudaStream_t stream;
  void* temp;
  size_t temp_bytes;
  cudaError_t error = cudaSuccess;

  template <typename F>
  void each(uint32_t n, F f) {
    constexpr uint32_t kThreads = 128;
    if (n == 0 || error != cudaSuccess) return;
    each_kernel<<<(n + kThreads - 1) / kThreads, kThreads, 0, stream>>>(n, f);
    error = cudaGetLastError();
  }
  void exclusive_sum(const uint32_t* in, uint32_t* out, uint32_t n) {
    if (error != cudaSuccess) return;
    size_t bytes = temp_bytes;
    error = cub::DeviceScan::ExclusiveSum(temp, bytes, in, out, n, stream);
  }
};

struct DeviceFree {
  void operator()(void* p) const { cudaFree(p); }
};
struct HostFree {
  void operator()(void* p) const { cudaFreeHost(p); }
};
using DevicePtr = std::unique_ptr<void, DeviceFree>;
using PinnedPtr = std::unique_ptr<void, HostFree>;

Result<DevicePtr> device_alloc(size_t bytes, const char* what) {
  void* p = nullptr;
  if (const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1)); e != cudaSuccess)
    return cuda_error(e, std::string("allocating ") + std::to_string(bytes) + " B of device memory for " + what);
  return DevicePtr(p);
}

template <typename T>
Result<DevicePtr> device_copy(const std::vector<T>& v, const char* what) {
  OB_ASSIGN_OR_RETURN(DevicePtr p, device_alloc(v.size() * sizeof(T), what));
  OB_CUDA_TRY(cudaMemcpy(p.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), std::string("copying ") + what);
  return std::move(p);  // nvcc's front end moves no local into a Result by itself
}

uint64_t elapsed_ns(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0;
  return cudaEventElapsedTime(&ms, from, to) == cudaSuccess ? static_cast<uint64_t>(ms * 1e6) : 0;
}

class CudaTokenizer final : public GpuTokenizer {
 public:
  ~CudaTokenizer() override {
    for (cudaEvent_t e : events_)
      if (e) cudaEventDestroy(e);
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status init(BpeTableImage image) {
    image_ = std::move(image);
    OB_CUDA_TRY(cudaSetDevice(0), "selecting CUDA device 0");
    OB_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a CUDA stream");
    for (cudaEvent_t& e : events_) OB_CUDA_TRY(cudaEventCreate(&e), "creating a CUDA event");
    OB_ASSIGN_OR_RETURN(kinds_, device_copy(image_.kinds, "the character kinds"));
    OB_ASSIGN_OR_RETURN(byte_ids_, device_copy(image_.byte_ids, "the byte tokens"));
    OB_ASSIGN_OR_RETURN(pairs_, device_copy(image_.pairs, "the pair table"));
    OB_ASSIGN_OR_RETURN(wholes_, device_copy(image_.wholes, "the whole-token table"));
    OB_ASSIGN_OR_RETURN(whole_bytes_, device_copy(image_.whole_bytes, "the whole tokens' bytes"));
    tables_ = image_.view(static_cast<const uint8_t*>(kinds_.get()), static_cast<const int32_t*>(byte_ids_.get()),
                          static_cast<const PairSlot*>(pairs_.get()), static_cast<const WholeSlot*>(wholes_.get()),
                          static_cast<const uint8_t*>(whole_bytes_.get()));
    table_bytes_ = image_.kinds.size() + image_.byte_ids.size() * 4 + image_.pairs.size() * sizeof(PairSlot) +
                   image_.wholes.size() * sizeof(WholeSlot) + image_.whole_bytes.size();
    return {};
  }

  Status encode(std::span<const std::string_view> texts, bool ordinary, int32_t* ids, size_t capacity,
                std::vector<uint32_t>& offsets, Stages* stages) override {
    OB_RETURN_IF_ERROR(check_batch(texts, ordinary, image_.specials));
    cudaPointerAttributes where{};
    if (cudaPointerGetAttributes(&where, ids) != cudaSuccess ||
        (where.type != cudaMemoryTypeDevice && where.type != cudaMemoryTypeManaged)) {
      cudaGetLastError();  // clear the error a host pointer leaves
      return {Code::kInvalidArgument, "the output for the ids is not CUDA device memory"};
    }
    size_t bytes = 0;
    for (std::string_view t : texts) bytes += t.size();
    const auto n = static_cast<uint32_t>(bytes);
    const auto count = static_cast<uint32_t>(texts.size());
    MutexLock hold(mutex_);
    OB_RETURN_IF_ERROR(reserve(bytes + 1, texts.size() + 1));
    auto* staged = static_cast<uint8_t*>(pinned_.get());
    auto* text_offsets = reinterpret_cast<uint32_t*>(staged + batch_bytes_);
    auto* text_ids = text_offsets + batch_texts_;
    uint32_t at = 0;
    for (uint32_t i = 0; i < count; ++i) {
      text_offsets[i] = at;
      std::memcpy(staged + at, texts[i].data(), texts[i].size());
      at += static_cast<uint32_t>(texts[i].size());
    }
    text_offsets[count] = at;

    auto* base = static_cast<uint8_t*>(batch_.get());
    auto u32 = [&](int k) { return reinterpret_cast<uint32_t*>(base + batch_bytes_ + size_t(k) * batch_bytes_ * 4); };
    auto* text_offsets_d = u32(6);
    BpeBatch b{base, n, text_offsets_d, count, u32(0), u32(1), reinterpret_cast<int32_t*>(u32(2)), u32(3),
               u32(4), u32(5), ids, static_cast<uint32_t>(std::min<size_t>(capacity, UINT32_MAX)),
               text_offsets_d + batch_texts_};
    OB_CUDA_TRY(cudaEventRecord(events_[0], stream_), "recording a CUDA event");
    OB_CUDA_TRY(cudaMemcpyAsync(base, staged, n, cudaMemcpyHostToDevice, stream_), "copying the texts to the device");
    OB_CUDA_TRY(cudaMemcpyAsync(text_offsets_d, text_offsets, (count + 1) * 4, cudaMemcpyHostToDevice, stream_),
                "copying the texts' offsets to the device");
    OB_CUDA_TRY(cudaEventRecord(events_[1], stream_), "recording a CUDA event");
    OB_CUDA_TRY(cudaMemsetAsync(b.starts, 0, (size_t(n) + 1) * 4, stream_), "clearing the piece marks");
    OB_CUDA_TRY(cudaMemsetAsync(b.counts, 0, (size_t(n) + 1) * 4, stream_), "clearing the piece counts");
    CudaExec exec{stream_, temp_.get(), temp_bytes_};
    encode_batch(exec, tables_, b);
    if (exec.error != cudaSuccess) return cuda_error(exec.error, "launching the tokenizer's kernels");
    OB_CUDA_TRY(cudaEventRecord(events_[2], stream_), "recording a CUDA event");
    OB_CUDA_TRY(cudaMemcpyAsync(text_ids, b.text_ids, (count + 1) * 4, cudaMemcpyDeviceToHost, stream_),
                "copying the ids' offsets from the device");
    OB_CUDA_TRY(cudaEventRecord(events_[3], stream_), "recording a CUDA event");
    OB_CUDA_TRY(cudaStreamSynchronize(stream_), "running the tokenizer's kernels");
    if (text_ids[count] > capacity)
      return {Code::kTooBig, "a batch of " + std::to_string(count) + " texts makes " + std::to_string(text_ids[count]) +
                                 " ids; the output holds " + std::to_string(capacity)};
    offsets.assign(text_ids, text_ids + count + 1);
    if (stages)
      *stages = {elapsed_ns(events_[0], events_[1]), elapsed_ns(events_[1], events_[2]),
                 elapsed_ns(events_[2], events_[3])};
    return {};
  }

  [[nodiscard]] size_t device_bytes() const override {
    MutexLock hold(mutex_);
    return table_bytes_ + (batch_bytes_ * 25 + batch_texts_ * 8) + temp_bytes_;
  }

 private:
  // Room for a batch of `bytes` (+1) and `texts` (+1), in powers of two: the text, six arrays of
  // uint32 per byte (bpe_kernels.h's BpeBatch), the texts' offsets and ids' offsets, CUB's scratch.
  Status reserve(size_t bytes, size_t texts) OB_REQUIRES(mutex_) {
    if (bytes <= batch_bytes_ && texts <= batch_texts_) return {};
    // At least 256 bytes: the uint32 arrays after the text stay aligned.
    const size_t nb = std::bit_ceil(std::max({bytes, batch_bytes_, size_t{256}}));
    const size_t nt = std::bit_ceil(std::max(texts, batch_texts_));
    OB_CUDA_TRY(cudaStreamSynchronize(stream_), "finishing the last batch");
    batch_.reset();
    pinned_.reset();
    temp_.reset();
    batch_bytes_ = batch_texts_ = temp_bytes_ = 0;
    size_t temp = 0;
    OB_CUDA_TRY(cub::DeviceScan::ExclusiveSum(nullptr, temp, static_cast<const uint32_t*>(nullptr),
                                              static_cast<uint32_t*>(nullptr), static_cast<uint32_t>(nb), stream_),
                "sizing the prefix sum's scratch");
    OB_ASSIGN_OR_RETURN(batch_, device_alloc(nb * 25 + nt * 8, "a batch"));
    OB_ASSIGN_OR_RETURN(temp_, device_alloc(temp, "the prefix sum's scratch"));
    void* host = nullptr;
    OB_CUDA_TRY(cudaMallocHost(&host, nb + nt * 8), "allocating pinned memory for a batch");
    pinned_.reset(host);
    batch_bytes_ = nb;
    batch_texts_ = nt;
    temp_bytes_ = temp;
    return {};
  }

  BpeTableImage image_;
  BpeTables tables_{};
  size_t table_bytes_ = 0;
  DevicePtr kinds_, byte_ids_, pairs_, wholes_, whole_bytes_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t events_[4] = {};
  mutable Mutex mutex_;
  DevicePtr batch_ OB_GUARDED_BY(mutex_), temp_ OB_GUARDED_BY(mutex_);
  PinnedPtr pinned_ OB_GUARDED_BY(mutex_);
  size_t batch_bytes_ OB_GUARDED_BY(mutex_) = 0, batch_texts_ OB_GUARDED_BY(mutex_) = 0,
                                           temp_bytes_ OB_GUARDED_BY(mutex_) = 0;
};

}  // namespace

Status cuda_usable() {
  int devices = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess) {
    cudaGetLastError();
    return {Code::kUnsupported, std::string("no usable CUDA device: ") + cudaGetErrorString(e)};
  }
  if (devices == 0) return {Code::kUnsupported, "no CUDA device"};
  return {};
}

Result<std::unique_ptr<GpuTokenizer>> GpuTokenizer::create(const Tokenizer& tokenizer) {
  OB_ASSIGN_OR_RETURN(BpeTableImage image, bpe_tables(tokenizer));
  OB_RETURN_IF_ERROR(cuda_usable());
  auto gpu = std::make_unique<CudaTokenizer>();
  OB_RETURN_IF_ERROR(gpu->init(std::move(image)));
  return std::unique_ptr<GpuTokenizer>(std::move(gpu));
}

}  // namespace outboard::gpu
