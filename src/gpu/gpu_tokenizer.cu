// GpuTokenizer on the CUDA runtime: bpe_kernels.h's or wordpiece_kernels.h's
// steps as kernels on a stream of its own, prefix sums by CUB, one
// synchronisation per batch.
#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <cub/device/device_scan.cuh>
#include <string>

#include "gpu/cuda_status.h"
#include "gpu/gpu_tokenizer.h"
#include "gpu/tables.h"
#include "util/mutex.h"

namespace outboard::gpu {

namespace {

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

// A model's tables on the device, and the bytes they take.
struct DeviceTables {
  size_t table_bytes = 0;

  template <typename T>
  Result<DevicePtr> copy(const std::vector<T>& v, const char* what) {
    OB_ASSIGN_OR_RETURN(DevicePtr p, device_alloc(v.size() * sizeof(T), what));
    OB_CUDA_TRY(cudaMemcpy(p.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice),
                std::string("copying ") + what);
    table_bytes += v.size() * sizeof(T);
    return Result<DevicePtr>(std::move(p));  // nvcc's front end moves no local into a Result by itself
  }
};

uint64_t elapsed_ns(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0;
  return cudaEventElapsedTime(&ms, from, to) == cudaSuccess ? static_cast<uint64_t>(ms * 1e6) : 0;
}

// Carves aligned arrays out of one allocation; with no base it only adds up their size.
struct Arena {
  uint8_t* base = nullptr;
  size_t used = 0;
  template <typename T>
  T* take(size_t n) {
    used = (used + 255) & ~size_t{255};
    T* p = base ? reinterpret_cast<T*>(base + used) : nullptr;
    used += n * sizeof(T);
    return p;
  }
};

// A model on the device: its tables, and how a batch's arrays are laid out in an arena of room
// for `nb` bytes and `nt` texts (nb > the batch's bytes, nt > its texts).
struct DeviceBpe : DeviceTables {
  BpeTableImage image;
  BpeTables tables{};
  DevicePtr kinds, byte_ids, pairs, wholes, whole_bytes;

  Status upload() {
    OB_ASSIGN_OR_RETURN(kinds, copy(image.kinds, "the character kinds"));
    OB_ASSIGN_OR_RETURN(byte_ids, copy(image.byte_ids, "the byte tokens"));
    OB_ASSIGN_OR_RETURN(pairs, copy(image.pairs, "the pair table"));
    OB_ASSIGN_OR_RETURN(wholes, copy(image.wholes, "the whole-token table"));
    OB_ASSIGN_OR_RETURN(whole_bytes, copy(image.whole_bytes, "the whole tokens' bytes"));
    tables = image.view(static_cast<const uint8_t*>(kinds.get()), static_cast<const int32_t*>(byte_ids.get()),
                        static_cast<const PairSlot*>(pairs.get()), static_cast<const WholeSlot*>(wholes.get()),
                        static_cast<const uint8_t*>(whole_bytes.get()));
    return {};
  }
  [[nodiscard]] const auto& specials() const { return image.specials; }
  [[nodiscard]] uint64_t longest_scan(size_t nb) const { return nb; }
  BpeBatch layout(Arena& a, size_t nb, size_t nt) const {
    BpeBatch b{};
    b.text = a.take<uint8_t>(nb);
    b.text_offsets = a.take<uint32_t>(nt);
    b.text_ids = a.take<uint32_t>(nt);
    b.starts = a.take<uint32_t>(nb);
    b.piece_of = a.take<uint32_t>(nb);
    b.parts = a.take<int32_t>(nb);
    b.ranks = a.take<uint32_t>(nb);
    b.links = a.take<uint32_t>(2 * nb);
    b.heap = a.take<uint64_t>(3 * nb);
    b.counts = a.take<uint32_t>(nb);
    b.id_offsets = a.take<uint32_t>(nb);
    return b;
  }
  // What starts zeroed: [pointer, bytes) each.
  static std::array<std::pair<void*, size_t>, 2> zeroed(const BpeBatch& b) {
    return {{{b.starts, (size_t{b.bytes} + 1) * 4}, {b.counts, (size_t{b.bytes} + 1) * 4}}};
  }
};

struct DeviceWordPiece : DeviceTables {
  WordPieceTableImage image;
  WordPieceTables tables{};
  DevicePtr norm_index, norm_bytes, kinds, initial, continuing;

  Status upload() {
    OB_ASSIGN_OR_RETURN(norm_index, copy(image.norm_index, "the normalization index"));
    OB_ASSIGN_OR_RETURN(norm_bytes, copy(image.norm_bytes, "the normalized characters"));
    OB_ASSIGN_OR_RETURN(kinds, copy(image.kinds, "the character kinds"));
    OB_ASSIGN_OR_RETURN(initial, copy(image.initial, "the word-initial trie"));
    OB_ASSIGN_OR_RETURN(continuing, copy(image.continuing, "the continuing trie"));
    tables = image.view(static_cast<const uint32_t*>(norm_index.get()), static_cast<const uint8_t*>(norm_bytes.get()),
                        static_cast<const uint8_t*>(kinds.get()), static_cast<const TrieCell*>(initial.get()),
                        static_cast<const TrieCell*>(continuing.get()));
    return {};
  }
  [[nodiscard]] const auto& specials() const { return image.specials; }
  [[nodiscard]] uint64_t longest_scan(size_t nb) const { return uint64_t{nb} * image.max_expansion; }
  WordPieceBatch layout(Arena& a, size_t nb, size_t nt) const {
    const size_t nn = longest_scan(nb);  // normalized bytes, + 1 within: nb > bytes
    WordPieceBatch b{};
    b.text = a.take<uint8_t>(nb);
    b.text_offsets = a.take<uint32_t>(nt);
    b.text_ids = a.take<uint32_t>(nt);
    b.norm_lens = a.take<uint32_t>(nb);
    b.norm_at = a.take<uint32_t>(nb);
    b.norm = a.take<uint8_t>(nn);
    b.starts = a.take<uint32_t>(nn);
    b.word_of = a.take<uint32_t>(nn);
    b.parts = a.take<int32_t>(nn);
    b.counts = a.take<uint32_t>(nn);
    b.id_offsets = a.take<uint32_t>(nn);
    return b;
  }
  static std::array<std::pair<void*, size_t>, 3> zeroed(const WordPieceBatch& b) {
    const size_t nn = (size_t{b.norm_capacity} + 1) * 4;
    return {{{b.norm_lens, (size_t{b.bytes} + 1) * 4}, {b.starts, nn}, {b.counts, nn}}};
  }
};

template <typename Model>
class CudaTokenizer final : public GpuTokenizer {
 public:
  ~CudaTokenizer() override {
    for (cudaEvent_t e : events_)
      if (e) cudaEventDestroy(e);
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status init(decltype(Model::image) image) {
    model_.image = std::move(image);
    OB_CUDA_TRY(cudaSetDevice(0), "selecting CUDA device 0");
    OB_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a CUDA stream");
    for (cudaEvent_t& e : events_) OB_CUDA_TRY(cudaEventCreate(&e), "creating a CUDA event");
    return model_.upload();
  }

  Status encode(std::span<const std::string_view> texts, bool ordinary, int32_t* ids, size_t capacity,
                std::vector<uint32_t>& offsets, Stages* stages) override {
    OB_RETURN_IF_ERROR(check_batch(texts, ordinary, model_.specials()));
    cudaPointerAttributes where{};
    if (cudaPointerGetAttributes(&where, ids) != cudaSuccess ||
        (where.type != cudaMemoryTypeDevice && where.type != cudaMemoryTypeManaged)) {
      cudaGetLastError();  // clear the error a host pointer leaves
      return {Code::kInvalidArgument, "the output for the ids is not CUDA device memory"};
    }
    size_t bytes = 0;
    for (std::string_view t : texts) bytes += t.size();
    const auto count = static_cast<uint32_t>(texts.size());
    MutexLock hold(mutex_);
    OB_RETURN_IF_ERROR(reserve(bytes + 1, texts.size() + 1));
    Arena arena{static_cast<uint8_t*>(batch_.get())};
    auto b = model_.layout(arena, batch_bytes_, batch_texts_);
    b.bytes = static_cast<uint32_t>(bytes);
    b.texts = count;
    b.ids = ids;
    b.capacity = static_cast<uint32_t>(std::min<size_t>(capacity, UINT32_MAX));
    if constexpr (requires { b.norm_capacity; })
      b.norm_capacity = static_cast<uint32_t>(model_.longest_scan(bytes + 1) - 1);

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

    auto* text_d = const_cast<uint8_t*>(b.text);
    auto* offsets_d = const_cast<uint32_t*>(b.text_offsets);
    OB_CUDA_TRY(cudaEventRecord(events_[0], stream_), "recording a CUDA event");
    OB_CUDA_TRY(cudaMemcpyAsync(text_d, staged, bytes, cudaMemcpyHostToDevice, stream_), "copying the texts to the device");
    OB_CUDA_TRY(cudaMemcpyAsync(offsets_d, text_offsets, (count + 1) * 4, cudaMemcpyHostToDevice, stream_),
                "copying the texts' offsets to the device");
    OB_CUDA_TRY(cudaEventRecord(events_[1], stream_), "recording a CUDA event");
    for (auto [p, n] : Model::zeroed(b)) OB_CUDA_TRY(cudaMemsetAsync(p, 0, n, stream_), "clearing a batch's counts");
    CudaExec exec{stream_, temp_.get(), temp_bytes_};
    encode_batch(exec, model_.tables, b);
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
    return model_.table_bytes + batch_arena_ + temp_bytes_;
  }

 private:
  // Room for a batch of `bytes` and `texts` (each one more than the batch has), in powers of two:
  // the model's arrays, CUB's scratch for its longest prefix sum, pinned memory for the texts.
  Status reserve(size_t bytes, size_t texts) OB_REQUIRES(mutex_) {
    if (bytes <= batch_bytes_ && texts <= batch_texts_) return {};
    const size_t nb = std::bit_ceil(std::max({bytes, batch_bytes_, size_t{256}}));
    const size_t nt = std::bit_ceil(std::max(texts, batch_texts_));
    if (model_.longest_scan(nb) >= UINT32_MAX)
      return {Code::kTooBig, "a batch of " + std::to_string(bytes - 1) + " bytes: its arrays would pass 32-bit offsets"};
    OB_CUDA_TRY(cudaStreamSynchronize(stream_), "finishing the last batch");
    batch_.reset();
    pinned_.reset();
    temp_.reset();
    batch_bytes_ = batch_texts_ = batch_arena_ = temp_bytes_ = 0;
    size_t temp = 0;
    OB_CUDA_TRY(cub::DeviceScan::ExclusiveSum(nullptr, temp, static_cast<const uint32_t*>(nullptr),
                                              static_cast<uint32_t*>(nullptr),
                                              static_cast<uint32_t>(model_.longest_scan(nb)), stream_),
                "sizing the prefix sum's scratch");
    Arena sizing;
    model_.layout(sizing, nb, nt);
    OB_ASSIGN_OR_RETURN(batch_, device_alloc(sizing.used, "a batch"));
    OB_ASSIGN_OR_RETURN(temp_, device_alloc(temp, "the prefix sum's scratch"));
    void* host = nullptr;
    OB_CUDA_TRY(cudaMallocHost(&host, nb + nt * 8), "allocating pinned memory for a batch");
    pinned_.reset(host);
    batch_bytes_ = nb;
    batch_texts_ = nt;
    batch_arena_ = sizing.used;
    temp_bytes_ = temp;
    return {};
  }

  Model model_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t events_[4] = {};
  mutable Mutex mutex_;
  DevicePtr batch_ OB_GUARDED_BY(mutex_), temp_ OB_GUARDED_BY(mutex_);
  PinnedPtr pinned_ OB_GUARDED_BY(mutex_);
  size_t batch_bytes_ OB_GUARDED_BY(mutex_) = 0, batch_texts_ OB_GUARDED_BY(mutex_) = 0;
  size_t batch_arena_ OB_GUARDED_BY(mutex_) = 0, temp_bytes_ OB_GUARDED_BY(mutex_) = 0;
};

template <typename Model, typename Image>
Result<std::unique_ptr<GpuTokenizer>> make(Image image) {
  auto gpu = std::make_unique<CudaTokenizer<Model>>();
  OB_RETURN_IF_ERROR(gpu->init(std::move(image)));
  return std::unique_ptr<GpuTokenizer>(std::move(gpu));
}

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
  OB_ASSIGN_OR_RETURN(ModelTables tables, model_tables(tokenizer));
  OB_RETURN_IF_ERROR(cuda_usable());
  if (auto* bpe = std::get_if<BpeTableImage>(&tables)) return make<DeviceBpe>(std::move(*bpe));
  return make<DeviceWordPiece>(std::move(std::get<WordPieceTableImage>(tables)));
}

}  // namespace outboard::gpu
