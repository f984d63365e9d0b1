// libFuzzer: region descriptors from an untrusted client, checked before UCX
// unpacks them. The first byte picks the policy (shared memory or not);
// the owner is this process, so a posix key may name our own descriptors.
// What passes is a well-formed packed key of at most one posix part (or
// only empty parts) and the unknown device, which parses back the same way; or, with shared memory
// only, a process descriptor (the header alone, no key).
#include <unistd.h>

#include <bit>

#include "transport/descriptor.h"
#include "util/codec.h"

using namespace outboard;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  transport::DescriptorPolicy policy;
  policy.shared_memory = data[0] & 1;
  policy.owner = getpid();
  auto checked = transport::check_descriptor({data + 1, size - 1}, policy);
  if (!checked.ok()) return 0;
  if (checked->process) {
    if (!policy.shared_memory || !checked->packed_key.empty() || size - 1 != transport::kDescriptorHeaderBytes ||
        checked->length == 0 || checked->base + checked->length < checked->base)
      __builtin_trap();
    return 0;
  }
  codec::Reader r{checked->packed_key};
  uint64_t md_map = 0;
  uint8_t memory_type = 0;
  if (!r.get(md_map) || !r.get(memory_type) || memory_type != 0) __builtin_trap();
  if (policy.shared_memory && std::popcount(md_map) > 1) __builtin_trap();
  for (int i = 0; i < std::popcount(md_map); ++i) {
    uint8_t n = 0;
    std::span<const uint8_t> key;
    if (!r.get(n) || !r.take(n, key)) __builtin_trap();
    if (!policy.shared_memory && n != 0) __builtin_trap();
  }
  // After a key, the unknown device: where UCX 1.20 and later stop reading.
  uint8_t device = 0;
  if (md_map != 0 && (!r.get(device) || device != 0xff)) __builtin_trap();
  if (!r.in.empty() || checked->length == 0) __builtin_trap();
  return 0;
}
