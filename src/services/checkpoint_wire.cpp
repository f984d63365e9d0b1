#include "services/checkpoint_wire.h"

#include <algorithm>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "util/codec.h"
#include "util/text.h"

namespace outboard::services::checkpoint_wire {

std::string_view dtype_name(Dtype d) {
  static constexpr std::string_view kNames[kDtypes] = {"BOOL", "U8",  "I8",  "U16", "I16", "F16", "BF16",
                                                       "U32",  "I32", "F32", "U64", "I64", "F64"};
  return kNames[static_cast<uint8_t>(d)];
}

uint64_t dtype_size(Dtype d) {
  static constexpr uint8_t kSizes[kDtypes] = {1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8, 8};
  return kSizes[static_cast<uint8_t>(d)];
}

namespace {

Status bad(const std::string& what) { return {Code::kInvalidArgument, "checkpoint: " + what}; }

void header(codec::Writer& w, Kind kind) {
  w.put(kVersion);
  w.put(static_cast<uint8_t>(kind));
}

// A u32-counted byte string within `max`; `what` names it in the error.
Status get_bytes(codec::Reader& r, uint32_t max, const char* what, std::span<const uint8_t>& out) {
  uint32_t n = 0;
  if (!r.get(n)) return bad(std::string(what) + ": truncated");
  if (n > max)
    return bad(std::string(what) + " of " + std::to_string(n) + " B exceeds " + std::to_string(max) + " B");
  if (!r.take(n, out)) return bad(std::string(what) + ": truncated");
  return {};
}

std::string_view as_text(std::span<const uint8_t> b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

Status done(const codec::Reader& r, const char* what) {
  if (!r.in.empty()) return bad(std::to_string(r.in.size()) + " B after the " + what);
  return {};
}

Status body(std::span<const uint8_t> bytes, Kind want, codec::Reader& r) {
  OB_ASSIGN_OR_RETURN(Kind kind, kind_of(bytes));
  if (kind != want) return bad("message kind " + std::to_string(static_cast<int>(kind)) + " is not the one expected");
  r.in = bytes.subspan(2);
  return {};
}

// The messages that carry a directory's handle only: Close and List.
std::vector<uint8_t> encode_handle(Kind kind, uint32_t handle) {
  codec::Writer w;
  header(w, kind);
  w.put(handle);
  return std::move(w.bytes);
}

Result<uint32_t> decode_handle(std::span<const uint8_t> bytes, Kind kind, const char* what) {
  codec::Reader r;
  OB_RETURN_IF_ERROR(body(bytes, kind, r));
  uint32_t handle = 0;
  if (!r.get(handle)) return bad(std::string(what) + ": truncated");
  OB_RETURN_IF_ERROR(done(r, "handle"));
  return handle;
}

}  // namespace

std::vector<uint8_t> encode(const Open& open) {
  codec::Writer w;
  header(w, Kind::kOpen);
  w.put(open.keep_last);
  w.put_string(open.dir);
  return std::move(w.bytes);
}

std::vector<uint8_t> encode(const Save& save) {
  codec::Writer w;
  header(w, Kind::kSave);
  w.put(save.handle);
  w.put(save.step);
  w.put(static_cast<uint32_t>(save.region.size()));
  w.put_bytes(save.region);
  w.put(static_cast<uint32_t>(save.tensors.size()));
  for (const Tensor& t : save.tensors) {
    w.put_string(t.name);
    w.put(static_cast<uint8_t>(t.dtype));
    w.put(static_cast<uint8_t>(t.dims.size()));
    for (uint64_t d : t.dims) w.put(d);
    w.put(t.offset);
    w.put(t.bytes);
  }
  w.put_string(save.state);
  return std::move(w.bytes);
}

uint64_t Save::tensor_bytes() const {
  uint64_t n = 0;
  for (const Tensor& t : tensors) n += t.bytes;  // no overflow: decode_save bounds the sum
  return n;
}

std::vector<uint8_t> encode(const Piece& piece) {
  codec::Writer w;
  header(w, Kind::kPiece);
  w.put(piece.handle);
  w.put(piece.step);
  w.put(piece.offset);
  w.put_bytes(piece.bytes);
  return std::move(w.bytes);
}

std::vector<uint8_t> encode(const Read& read) {
  codec::Writer w;
  header(w, Kind::kRead);
  w.put(read.handle);
  w.put(read.step);
  w.put(static_cast<uint8_t>(read.file));
  w.put(read.offset);
  w.put(read.length);
  return std::move(w.bytes);
}

std::vector<uint8_t> encode_opened(uint32_t handle, std::string_view path, std::string_view token) {
  codec::Writer w;
  w.put(handle);
  w.put_string(path);
  w.put_string(token);
  return std::move(w.bytes);
}

std::vector<uint8_t> encode_close(uint32_t handle) { return encode_handle(Kind::kClose, handle); }
std::vector<uint8_t> encode_list(uint32_t handle) { return encode_handle(Kind::kList, handle); }

Result<Kind> kind_of(std::span<const uint8_t> bytes) {
  if (bytes.size() < 2) return bad("message of " + std::to_string(bytes.size()) + " B is truncated");
  if (bytes[0] != kVersion)
    return bad("wire version " + std::to_string(bytes[0]) + ", this agent speaks " + std::to_string(kVersion));
  if (bytes[1] >= kKinds) return bad("unknown message kind " + std::to_string(bytes[1]));
  return static_cast<Kind>(bytes[1]);
}

Result<Open> decode_open(std::span<const uint8_t> bytes) {
  codec::Reader r;
  OB_RETURN_IF_ERROR(body(bytes, Kind::kOpen, r));
  Open open;
  std::span<const uint8_t> dir;
  if (!r.get(open.keep_last)) return bad("open: truncated");
  if (open.keep_last > kMaxKeepLast)
    return bad("keep_last " + std::to_string(open.keep_last) + " exceeds " + std::to_string(kMaxKeepLast));
  OB_RETURN_IF_ERROR(get_bytes(r, kMaxPathBytes, "directory", dir));
  open.dir = as_text(dir);
  if (open.dir.empty() || open.dir.find('\0') != std::string::npos)
    return bad("directory " + quote(open.dir) + " is empty or holds a NUL byte");
  OB_RETURN_IF_ERROR(done(r, "directory"));
  return open;
}

Result<Save> decode_save(std::span<const uint8_t> bytes) {
  codec::Reader r;
  OB_RETURN_IF_ERROR(body(bytes, Kind::kSave, r));
  Save save;
  std::span<const uint8_t> region, state;
  if (!r.get(save.handle) || !r.get(save.step)) return bad("save: truncated");
  if (save.step > kMaxStep) return bad("step " + std::to_string(save.step) + " exceeds " + std::to_string(kMaxStep));
  OB_RETURN_IF_ERROR(get_bytes(r, kMaxDescriptorBytes, "staging region descriptor", region));
  save.region.assign(region.begin(), region.end());
  uint32_t count = 0;
  if (!r.get(count)) return bad("save: truncated");
  if (count > kMaxTensors)
    return bad(std::to_string(count) + " tensors exceed the limit of " + std::to_string(kMaxTensors));
  // Each tensor takes at least 22 B: a count beyond what is there fails before any allocation.
  if (count > r.in.size() / 22) return bad("save: " + std::to_string(count) + " tensors, truncated");
  save.tensors.resize(count);
  std::unordered_set<std::string_view> names;
  uint64_t total = 0;
  for (Tensor& t : save.tensors) {
    std::span<const uint8_t> name;
    OB_RETURN_IF_ERROR(get_bytes(r, kMaxNameBytes, "tensor name", name));
    t.name = as_text(name);
    uint8_t dtype = 0, ndims = 0;
    if (!r.get(dtype) || !r.get(ndims)) return bad("tensor " + quote(t.name) + ": truncated");
    if (t.name.empty() || t.name.find('\0') != std::string::npos)
      return bad("tensor name " + quote(t.name) + " is empty or holds a NUL byte");
    if (dtype >= kDtypes) return bad("tensor " + quote(t.name) + ": unknown dtype " + std::to_string(dtype));
    if (ndims > kMaxDims)
      return bad("tensor " + quote(t.name) + ": " + std::to_string(ndims) + " dimensions exceed " +
                 std::to_string(kMaxDims));
    t.dtype = static_cast<Dtype>(dtype);
    t.dims.resize(ndims);
    uint64_t elements = 1;
    bool overflow = false;
    for (uint64_t& d : t.dims) {
      if (!r.get(d)) return bad("tensor " + quote(t.name) + ": truncated");
      overflow |= __builtin_mul_overflow(elements, d, &elements);
    }
    if (!r.get(t.offset) || !r.get(t.bytes)) return bad("tensor " + quote(t.name) + ": truncated");
    uint64_t expect = 0, end = 0;
    overflow |= __builtin_mul_overflow(elements, dtype_size(t.dtype), &expect);
    if (overflow || expect != t.bytes || __builtin_add_overflow(t.offset, t.bytes, &end))
      return bad("tensor " + quote(t.name) + ": " + std::to_string(t.bytes) + " B at offset " +
                 std::to_string(t.offset) + " is not what its shape and dtype " +
                 std::string(dtype_name(t.dtype)) + " make");
    if (__builtin_add_overflow(total, t.bytes, &total))
      return bad("tensor " + quote(t.name) + ": the tensors' bytes add up beyond 2^64");
  }
  // Names are checked once all strings are in place (the views point into save.tensors).
  for (const Tensor& t : save.tensors)
    if (!names.insert(t.name).second) return bad("tensor name " + quote(t.name) + " appears twice");
  OB_RETURN_IF_ERROR(get_bytes(r, UINT32_MAX, "state", state));
  save.state = as_text(state);
  if (!nlohmann::json::accept(save.state)) return bad("the state is not JSON text");
  OB_RETURN_IF_ERROR(done(r, "state"));
  return save;
}

Result<Piece> decode_piece(std::span<const uint8_t> bytes) {
  codec::Reader r;
  OB_RETURN_IF_ERROR(body(bytes, Kind::kPiece, r));
  Piece piece;
  if (!r.get(piece.handle) || !r.get(piece.step) || !r.get(piece.offset)) return bad("piece: truncated");
  piece.bytes = r.in;
  uint64_t end = 0;
  if (piece.bytes.empty() || piece.bytes.size() > kMaxPieceBytes ||
      __builtin_add_overflow(piece.offset, piece.bytes.size(), &end))
    return bad("piece of " + std::to_string(piece.bytes.size()) + " B at " + std::to_string(piece.offset) +
               ": a piece holds 1 to kMaxPieceBytes " + std::to_string(kMaxPieceBytes) + " B");
  return piece;
}

Result<Read> decode_read(std::span<const uint8_t> bytes) {
  codec::Reader r;
  OB_RETURN_IF_ERROR(body(bytes, Kind::kRead, r));
  Read read;
  uint8_t file = 0;
  if (!r.get(read.handle) || !r.get(read.step) || !r.get(file) || !r.get(read.offset) || !r.get(read.length))
    return bad("read: truncated");
  if (read.step > kMaxStep) return bad("step " + std::to_string(read.step) + " exceeds " + std::to_string(kMaxStep));
  if (file >= kFiles) return bad("read: unknown file " + std::to_string(file));
  read.file = static_cast<File>(file);
  if (read.length == 0 || read.length > kMaxPieceBytes)
    return bad("read of " + std::to_string(read.length) + " B: a read takes 1 to kMaxPieceBytes " +
               std::to_string(kMaxPieceBytes) + " B");
  OB_RETURN_IF_ERROR(done(r, "read"));
  return read;
}

Result<uint32_t> decode_close(std::span<const uint8_t> bytes) { return decode_handle(bytes, Kind::kClose, "close"); }
Result<uint32_t> decode_list(std::span<const uint8_t> bytes) { return decode_handle(bytes, Kind::kList, "list"); }

}  // namespace outboard::services::checkpoint_wire
