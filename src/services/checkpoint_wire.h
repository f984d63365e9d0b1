#pragma once
// The `checkpoint` service's wire format (little-endian, util/codec.h). A trainer opens a
// directory under the agent's --checkpoint-root, then asks for each snapshot it copied into its
// staging region to be persisted: the agent reads the tensors' bytes from the region, writes them
// as a safetensors file plus a JSON manifest, makes both durable and answers once they are.
//
// Every message: u8 kVersion, u8 Kind.
// Open:  u32 keep_last, then the directory (u32 length + bytes) -> answers u32 handle, then the
//        directory's absolute path on the agent's host (u32 length + bytes). A TLS client's
//        directory lies in its own under the root (checkpoint::tenant_dir), relative paths too.
// Save:  u32 handle, u64 step, the staging region's descriptor (u32 length + bytes), u32-counted
//        tensors, each: name (u32 length + bytes), u8 Dtype, u8-counted u64 dims, u64 offset in the
//        region, u64 bytes; then the state's JSON (u32 length + bytes) -> answers a JSON object.
// Close: u32 handle -> answers nothing (empty): the directory's lock is released.
// Piece: u32 handle, u64 step, u64 offset, then the bytes -> answers nothing (empty) once written.
// List:  u32 handle -> answers u32 count, then the steps the directory holds (u64 each, ascending).
// Read:  u32 handle, u64 step, u8 File, u64 offset, u32 length (1..kMaxPieceBytes) -> answers the
//        file's u64 size, then its bytes from offset (fewer than length at its end): how a client
//        whose filesystem is not the agent's loads a checkpoint.
//
// A save with an empty descriptor is in-band, for a link where one-sided access is refused (TLS):
// its tensors' bytes follow in Piece requests, in table order and back to back (offset counts
// from the first tensor's first byte; the tensors' staging offsets are not read), each at most
// kMaxPieceBytes. The save is answered once the last piece is written.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "outboard/status.h"

namespace outboard::services::checkpoint_wire {

/// 2: the open's answer names the directory; in-band saves, List and Read. 3: the open's answer
/// carries the directory's token.
inline constexpr uint8_t kVersion = 3;
/// Bytes of a directory a client names.
inline constexpr uint32_t kMaxPathBytes = 4096;
/// Bytes of a region descriptor (UCX's packed key and address run to a few hundred).
inline constexpr uint32_t kMaxDescriptorBytes = 4096;
/// Tensors in one checkpoint (a large model's state dict has a few thousand).
inline constexpr uint32_t kMaxTensors = 1u << 20;
/// Bytes of a tensor's name.
inline constexpr uint32_t kMaxNameBytes = 1024;
/// Dimensions of a tensor.
inline constexpr uint8_t kMaxDims = 16;
/// The largest step (checkpoint directories are named by 12 digits).
inline constexpr uint64_t kMaxStep = 999'999'999'999;
/// Checkpoints a directory keeps.
inline constexpr uint32_t kMaxKeepLast = 1u << 16;
/// Bytes of one piece of an in-band save.
inline constexpr uint64_t kMaxPieceBytes = 8ull << 20;

enum class Kind : uint8_t { kOpen, kSave, kClose, kPiece, kList, kRead };
inline constexpr uint8_t kKinds = 6;
/// The files of a checkpoint a Read names.
enum class File : uint8_t { kTensors, kManifest };
inline constexpr uint8_t kFiles = 2;

/// safetensors' element types, in its spelling (dtype_name) and size.
enum class Dtype : uint8_t { kBool, kU8, kI8, kU16, kI16, kF16, kBF16, kU32, kI32, kF32, kU64, kI64, kF64 };
inline constexpr uint8_t kDtypes = 13;
std::string_view dtype_name(Dtype d);
uint64_t dtype_size(Dtype d);

struct Open {
  uint32_t keep_last = 3;  // 0: keep every checkpoint
  std::string dir;
};

struct Tensor {
  std::string name;
  Dtype dtype = Dtype::kU8;
  std::vector<uint64_t> dims;
  uint64_t offset = 0;  // in the staging region
  uint64_t bytes = 0;
};

struct Save {
  uint32_t handle = 0;
  uint64_t step = 0;
  std::vector<uint8_t> region;  // descriptor
  std::vector<Tensor> tensors;
  std::string state;  // JSON

  [[nodiscard]] bool in_band() const { return region.empty(); }
  /// The tensors' bytes: what an in-band save's pieces carry.
  [[nodiscard]] uint64_t tensor_bytes() const;
};

struct Read {
  uint32_t handle = 0;
  uint64_t step = 0;
  File file = File::kTensors;
  uint64_t offset = 0;
  uint32_t length = 0;
};

struct Piece {
  uint32_t handle = 0;
  uint64_t step = 0;
  uint64_t offset = 0;               // in the save's tensor bytes
  std::span<const uint8_t> bytes;    // into the decoded message
};

std::vector<uint8_t> encode(const Open& open);
std::vector<uint8_t> encode(const Save& save);
std::vector<uint8_t> encode_close(uint32_t handle);
/// The answer to an open: the handle, the directory's path and its token (Directory::token).
std::vector<uint8_t> encode_opened(uint32_t handle, std::string_view path, std::string_view token);
std::vector<uint8_t> encode(const Piece& piece);
std::vector<uint8_t> encode_list(uint32_t handle);
std::vector<uint8_t> encode(const Read& read);
/// The message's kind, or an error for a version or kind this agent does not speak.
Result<Kind> kind_of(std::span<const uint8_t> bytes);
/// A directory within kMaxPathBytes with no NUL, keep_last <= kMaxKeepLast, nothing left over.
Result<Open> decode_open(std::span<const uint8_t> bytes);
/// Every field checked: step <= kMaxStep, a descriptor within kMaxDescriptorBytes, at most kMaxTensors, names
/// non-empty, within kMaxNameBytes, without NUL and unique, known dtypes, at most kMaxDims dims
/// whose product times the dtype's size is `bytes` (no overflow), offset + bytes not overflowing,
/// the state a JSON text, nothing left over. Not checked here: the region's size (the service does).
Result<Save> decode_save(std::span<const uint8_t> bytes);
Result<uint32_t> decode_close(std::span<const uint8_t> bytes);
/// A piece of 1..kMaxPieceBytes bytes whose end does not overflow; it points into `bytes`.
Result<Piece> decode_piece(std::span<const uint8_t> bytes);
Result<uint32_t> decode_list(std::span<const uint8_t> bytes);
/// A step <= kMaxStep, a known file, a length of 1..kMaxPieceBytes, nothing left over.
Result<Read> decode_read(std::span<const uint8_t> bytes);

}  // namespace outboard::services::checkpoint_wire
