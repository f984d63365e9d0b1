// libFuzzer: a message to the agent's `checkpoint` service (services/checkpoint_wire.h) — open,
// save, close, an in-band save's piece, a list or a read — decoded before anything else reads it. What decodes encodes back to the same
// bytes, and a save's tensors are within the bounds the writer relies on: unique non-empty names,
// byte counts that match their shape and dtype, offsets that do not overflow.
#include <cstring>
#include <set>
#include <string>

#include "services/checkpoint_wire.h"

using namespace outboard::services::checkpoint_wire;

namespace {

void same(const std::vector<uint8_t>& again, const uint8_t* data, size_t size) {
  if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
}

void save(const uint8_t* data, size_t size) {
  auto s = decode_save({data, size});
  if (!s.ok()) return;
  if (s->step > kMaxStep || s->region.size() > kMaxDescriptorBytes || s->tensors.size() > kMaxTensors) __builtin_trap();
  std::set<std::string> names;
  for (const Tensor& t : s->tensors) {
    uint64_t n = dtype_size(t.dtype);
    for (uint64_t d : t.dims)
      if (__builtin_mul_overflow(n, d, &n)) __builtin_trap();
    uint64_t end = 0;
    if (t.name.empty() || !names.insert(t.name).second || n != t.bytes || t.dims.size() > kMaxDims ||
        __builtin_add_overflow(t.offset, t.bytes, &end))
      __builtin_trap();
  }
  same(encode(s.value()), data, size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto kind = kind_of({data, size});
  if (!kind.ok()) return 0;
  switch (kind.value()) {
    case Kind::kOpen:
      if (auto o = decode_open({data, size}); o.ok()) {
        if (o->dir.empty() || o->dir.size() > kMaxPathBytes || o->keep_last > kMaxKeepLast) __builtin_trap();
        same(encode(o.value()), data, size);
      }
      break;
    case Kind::kSave: save(data, size); break;
    case Kind::kClose:
      if (auto h = decode_close({data, size}); h.ok()) same(encode_close(h.value()), data, size);
      break;
    case Kind::kPiece:
      if (auto p = decode_piece({data, size}); p.ok()) {
        uint64_t end = 0;
        if (p->bytes.empty() || p->bytes.size() > kMaxPieceBytes || p->bytes.data() + p->bytes.size() != data + size ||
            __builtin_add_overflow(p->offset, p->bytes.size(), &end))
          __builtin_trap();
        same(encode(p.value()), data, size);
      }
      break;
    case Kind::kList:
      if (auto h = decode_list({data, size}); h.ok()) same(encode_list(h.value()), data, size);
      break;
    case Kind::kRead:
      if (auto r = decode_read({data, size}); r.ok()) {
        if (r->step > kMaxStep || r->length == 0 || r->length > kMaxPieceBytes) __builtin_trap();
        same(encode(r.value()), data, size);
      }
      break;
  }
  return 0;
}
