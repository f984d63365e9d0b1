// Region descriptors: what one side sends so that the other can reach a
// region of its memory. Ours wrap UCX's packed remote key:
//
//   u32 magic ("OBR1" host memory, "OBG1" GPU memory), u64 base, u64 length,
//   then the packed key: u64 md_map, u8 memory type, and for each bit of
//   md_map a u8 size and that many bytes of the transport's own key.
//
// UCX unpacks a key without a length and acts on what it finds: the posix
// transport opens /proc/<pid>/fd/<fd> or a named file, sysv attaches any
// segment id, and nothing bounds an address. So a key from a peer we do not
// trust is checked here and rebuilt from the parts that pass before UCX
// sees it. No UCX headers: this is plain byte checking, fuzzed as such.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "util/net.h"

#include "outboard/status.h"

namespace outboard::transport {

inline constexpr uint32_t kRegionMagic = 0x3152424f;      // "OBR1"
inline constexpr uint32_t kCudaRegionMagic = 0x3147424f;  // "OBG1": a peer must not map GPU memory for CPU copies
/// "OBP1": memory of the describing process itself, which the other side copies through the
/// kernel (process_vm_readv/writev): the header alone, no key, nothing registered.
inline constexpr uint32_t kProcessRegionMagic = 0x3150424f;
inline constexpr size_t kDescriptorHeaderBytes = 20;
/// Largest descriptor accepted from a peer (a packed key is tens of bytes
/// per memory domain).
inline constexpr size_t kMaxDescriptorBytes = 1024;

/// What a peer's descriptor may name. The agent builds one per connection
/// from what the kernel says about the client (net::local_peer).
struct DescriptorPolicy {
  /// The peer shares this host and our user: it may name shared memory,
  /// but only its own (posix segments reached through /proc/`owner`/fd).
  bool shared_memory = false;
  pid_t owner = 0;
  /// `owner` as a pidfd (net::open_peer_process): a process key's copies stop
  /// once that process ended, before its pid can name another.
  std::shared_ptr<const net::Fd> owner_process;
};

/// A descriptor that passed the checks.
struct CheckedDescriptor {
  bool gpu = false;
  /// kProcessRegionMagic: the policy's owner's memory at [base, base + length), no key.
  bool process = false;
  uint64_t base = 0;
  uint64_t length = 0;
  /// The packed key rebuilt from the parts that passed, for ucp_ep_rkey_unpack.
  std::vector<uint8_t> packed_key;
};

/// Checks a peer's descriptor against `policy`: header, lengths, and each
/// transport key. Keeps a posix key only if it names a segment of the
/// policy's owner through /proc that covers the region (checked with
/// stat(2)), and keys of no bytes (tcp, cma); drops the rest (sysv ids,
/// named files, keys of unknown shape). Refuses GPU descriptors, and process
/// descriptors unless the policy allows shared memory (its owner is the
/// process it names: the peer reaches nobody's memory but its own).
/// kInvalidArgument naming what is wrong.
Result<CheckedDescriptor> check_descriptor(std::span<const uint8_t> descriptor, const DescriptorPolicy& policy);

}  // namespace outboard::transport
