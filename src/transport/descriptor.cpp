#include "transport/descriptor.h"

#include <sys/shm.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cstring>
#include <string>

#include "util/codec.h"

namespace outboard::transport {
namespace {

// UCX's posix transport key (uct_posix_packed_rkey_t, the same in UCX 1.13
// and 1.22): u64 seg_id (flags in the top 4 bits, then 30 bits of fd and
// 30 of pid in /proc mode), u64 address, u64 length; then, in a pid
// namespace other than the initial one, a u64 namespace id.
constexpr uint64_t kPosixProcfs = 1ull << 63;
constexpr uint64_t kPosixShmOpen = 1ull << 62;
constexpr uint64_t kPosixPidNs = 1ull << 60;
constexpr uint64_t kPosixFlags = 0xfull << 60;
constexpr unsigned kPosixPidBits = 30;
constexpr size_t kPosixKeyBytes = 24;
constexpr size_t kSysvKeyBytes = 12;                    // u32 segment id, u64 owner's address
constexpr uint8_t kHostMemory = 0;                      // UCS_MEMORY_TYPE_HOST
constexpr uint8_t kUnknownDevice = 0xff;                // UCS_SYS_DEVICE_ID_UNKNOWN
constexpr uint64_t kInitialPidNamespace = 0xeffffffcu;  // PROC_PID_INIT_INO

uint64_t pid_namespace() {
  struct stat st {};
  return ::stat("/proc/self/ns/pid", &st) == 0 ? st.st_ino : 0;
}

Status bad(const std::string& why) { return {Code::kInvalidArgument, "region descriptor: " + why}; }

// A posix key of the policy's owner whose segment covers [base, base + length).
Status check_posix(std::span<const uint8_t> key, const DescriptorPolicy& policy, uint64_t base, uint64_t length) {
  codec::Reader r{key};
  uint64_t seg_id = 0, address = 0, seg_length = 0;
  r.get(seg_id), r.get(address), r.get(seg_length);
  const uint64_t flags = seg_id & kPosixFlags;
  // /proc mode wins over a named file when both flags are there (UCX keeps
  // the shm_open flag of the file it unlinked).
  if (!(flags & kPosixProcfs)) return bad("its shared memory is named by a file, not by the client's process");
  const uint64_t ns = pid_namespace();
  if (flags & kPosixPidNs) {
    uint64_t peer_ns = 0;
    if (!r.get(peer_ns) || peer_ns != ns) return bad("its shared memory is in another pid namespace");
  } else if (ns != kInitialPidNamespace) {
    return bad("its shared memory names no pid namespace");
  }
  const uint64_t mmid = seg_id & ~kPosixFlags;
  const auto pid = static_cast<pid_t>(mmid & ((1ull << kPosixPidBits) - 1));
  const auto fd = static_cast<int>(mmid >> kPosixPidBits);
  if (pid != policy.owner)
    return bad("its shared memory belongs to process " + std::to_string(pid) + ", not to the client (" +
               std::to_string(policy.owner) + ")");
  if (base < address || base - address > seg_length || length > seg_length - (base - address))
    return bad("the region of " + std::to_string(length) + " B is outside its shared memory segment of " +
               std::to_string(seg_length) + " B");
  // UCX writes the requested length into the file and maps it page-aligned:
  // a mapping past the last page of the file would fault on access.
  struct stat st {};
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
      (static_cast<uint64_t>(st.st_size) + page - 1) / page * page < seg_length)
    return bad("descriptor " + std::to_string(fd) + " of process " + std::to_string(pid) +
               " is not a shared memory segment of " + std::to_string(seg_length) + " B");
  return {};
}

// A sysv key names a segment by id, which any process of our user may
// attach: one created by someone other than the client is refused.
Status check_sysv(std::span<const uint8_t> key, const DescriptorPolicy& policy) {
  int32_t id = 0;
  std::memcpy(&id, key.data(), sizeof id);
  shmid_ds ds{};
  if (::shmctl(id, IPC_STAT, &ds) == 0 && ds.shm_cpid != policy.owner)
    return bad("it names shared memory segment " + std::to_string(id) + " of process " + std::to_string(ds.shm_cpid) +
               ", not of the client (" + std::to_string(policy.owner) + ")");
  return {};
}

// Whether to keep one transport's key; an error refuses the descriptor.
// UCX unpacks each key with the component it pairs with that domain through
// the peer's worker address, which the peer wrote too. So what is kept must
// be harmless whichever component reads it: in a session that has shared
// memory, only the one checked posix key (any component that reads it reads
// what was checked); in one without, only keys of no bytes (its tcp
// component reads none).
Result<bool> keep_key(std::span<const uint8_t> key, const DescriptorPolicy& policy, const CheckedDescriptor& d,
                      bool have_posix) {
  if (key.size() == kSysvKeyBytes) {
    if (policy.shared_memory) OB_RETURN_IF_ERROR(check_sysv(key, policy));
    return false;
  }
  if (key.size() == kPosixKeyBytes || key.size() == kPosixKeyBytes + 8) {
    uint64_t seg_id = 0;
    std::memcpy(&seg_id, key.data(), sizeof seg_id);
    if (!(seg_id & (kPosixProcfs | kPosixShmOpen))) return false;  // not a posix key
    if (!policy.shared_memory) return false;
    OB_RETURN_IF_ERROR(check_posix(key, policy, d.base, d.length));
    return !have_posix;
  }
  return key.empty() && !policy.shared_memory;
}

}  // namespace

Result<CheckedDescriptor> check_descriptor(std::span<const uint8_t> d, const DescriptorPolicy& policy) {
  if (d.size() > kMaxDescriptorBytes)
    return bad(std::to_string(d.size()) + " B exceeds the limit of " + std::to_string(kMaxDescriptorBytes) + " B");
  codec::Reader r{d};
  uint32_t magic = 0;
  CheckedDescriptor out;
  uint64_t md_map = 0;
  uint8_t memory_type = 0;
  if (!r.get(magic) || !r.get(out.base) || !r.get(out.length))
    return bad("truncated header (" + std::to_string(d.size()) + " B)");
  if (magic == kCudaRegionMagic) return bad("GPU memory of a client is not accepted");
  if (magic != kRegionMagic && magic != kProcessRegionMagic) return bad("not an outboard region descriptor");
  if (out.length == 0 || out.base + out.length < out.base)
    return bad("region of " + std::to_string(out.length) + " B at " + std::to_string(out.base) + " is empty or wraps");
  // Its memory is named by pid (/proc/<owner>, process keys): not once another may hold that pid.
  if (policy.owner_process && net::process_ended(*policy.owner_process))
    return Status(Code::kConnectionReset, "region descriptor: process " + std::to_string(policy.owner) + " has ended");
  if (magic == kProcessRegionMagic) {
    if (d.size() != kDescriptorHeaderBytes)
      return bad("process memory descriptor of " + std::to_string(d.size()) + " B, not " +
                 std::to_string(kDescriptorHeaderBytes));
    if (!policy.shared_memory || policy.owner <= 0)
      return bad("process memory of a peer not checked to be a process of this host and user");
    out.process = true;
    return out;
  }
  if (!r.get(md_map) || !r.get(memory_type)) return bad("truncated header (" + std::to_string(d.size()) + " B)");
  if (memory_type != kHostMemory) return bad("memory type " + std::to_string(memory_type) + " is not host memory");

  uint64_t kept = 0;
  std::vector<std::span<const uint8_t>> keys;
  for (uint64_t bits = md_map; bits != 0; bits &= bits - 1) {
    uint8_t size = 0;
    std::span<const uint8_t> key;
    if (!r.get(size) || !r.take(size, key))
      return bad("the key of memory domain " + std::to_string(std::countr_zero(bits)) + " is truncated");
    OB_ASSIGN_OR_RETURN(const bool keep, keep_key(key, policy, out, kept != 0));
    if (!keep) continue;
    kept |= bits & -bits;
    keys.push_back(key);
  }
  // What follows the keys (the memory's device and its distances to others) is dropped: the device is
  // declared unknown. ucp_ep_rkey_unpack takes no length, and UCX 1.20 and later read that byte whenever
  // a key is there, then distances up to an end mark: without it they read past the buffer. UCX 1.13
  // reads nothing after the keys.
  codec::Writer w;
  w.put(kept);
  w.put(memory_type);
  for (auto key : keys) {
    w.put(static_cast<uint8_t>(key.size()));
    w.put_bytes(key);
  }
  if (kept != 0) w.put(kUnknownDevice);
  out.packed_key = std::move(w.bytes);
  return out;
}

}  // namespace outboard::transport
