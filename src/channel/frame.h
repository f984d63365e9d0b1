// Wire format of channel frames: a fixed header carried as the UCX AM
// header, the payload as AM data. Both ends are little-endian (x86, Arm).
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

#include "outboard/status.h"

namespace outboard::channel {

constexpr uint8_t kWireVersion = 5;
constexpr uint32_t kNoService = 0xffffffffu;

// The hello and welcome are not frames: they go over the bootstrap socket
// (bootstrap.h), before the data endpoints exist.
enum class FrameType : uint8_t {
  kMessage = 3,   // one-way, credited
  kRequest = 4,   // credited; answered by kResponse
  kResponse = 5,  // not credited: bounded by the requester's outstanding requests
  kCredit = 6,    // returns credits; kFlagWantCredit asks for them
  kNotify = 7,    // write-with-notify completion, credited (0 bytes)
  kClose = 8,     // graceful close or shutdown; status says which
  kDoorbell = 9,  // unsequenced: wakes a receiver asleep over its ring (ring.h)
};

constexpr uint8_t kFlagWantCredit = 1;
/// Secure connections: this frame is the first sealed with the sender's next key.
constexpr uint8_t kFlagRekey = 2;
/// Secure connections: the payload is sealed, and the header ends in its
/// AEAD tag (kWireTagBytes), so the payload keeps its size: 64 KiB sealed
/// stays one UCX fragment, where a tag appended to it took a second (25 %
/// of 64 KiB streaming, measured).
constexpr uint8_t kFlagSealed = 4;
constexpr uint8_t kFrameFlags = kFlagWantCredit | kFlagRekey | kFlagSealed;

/// A frame's header as the code uses it; on the wire it is encode()d.
/// `type` and `status` are not neighbours: encode() would read them with
/// one 2 B load, which the two 1 B stores that set them cannot forward to
/// (a ~5 ns stall per frame sent, measured).
struct FrameHeader {
  FrameType type = FrameType::kMessage;
  uint8_t flags = 0;         // kFlagWantCredit, kFlagRekey
  int8_t status = 0;         // kResponse/kClose: outboard::Code
  uint32_t dst = 0;          // receiver's connection id (0: the agent's listener)
  uint64_t seq = 0;          // sender's per-connection frame number (32 bits on the wire)
  uint64_t id = 0;           // request id / notify cookie
  uint64_t arg = 0;          // notify offset
  uint64_t credit_bytes = 0; // credits returned to the receiver of this frame
  uint32_t credit_msgs = 0;
  uint32_t service = kNoService;
};

// The wire form: 12 fixed bytes (version, type, status, flags, dst, low 32
// bits of seq), then only the fields that differ from their defaults, each
// flagged in the flags byte. A request is 24 B, a response 20 B: with UCP's
// own 8 B header and a 64 B payload that stays within UCX's shared-memory
// short path (am_short <= 100 B), which a fixed 48 B header missed (every
// frame then took the buffered-copy path with a UCP request).
constexpr uint8_t kWireHasId = 1 << 4;
constexpr uint8_t kWireHasService = 1 << 5;
constexpr uint8_t kWireHasCredit = 1 << 6;
constexpr uint8_t kWireHasArg = 1 << 7;
constexpr size_t kWireFixedBytes = 12;
constexpr size_t kWireTagBytes = 16;
constexpr size_t kMaxWireHeader = kWireFixedBytes + 8 + 4 + 12 + 8 + kWireTagBytes;

struct WireHeader {
  uint8_t bytes[kMaxWireHeader];
  uint8_t size = 0;
  [[nodiscard]] std::span<const uint8_t> span() const { return {bytes, size}; }
};

namespace detail {
template <class T>
inline void put(WireHeader& w, T v) {
  std::memcpy(w.bytes + w.size, &v, sizeof v);
  w.size += sizeof v;
}
template <class T>
inline bool take(std::span<const uint8_t>& in, T& v) {
  if (in.size() < sizeof v) return false;
  std::memcpy(&v, in.data(), sizeof v);
  in = in.subspan(sizeof v);
  return true;
}
}  // namespace detail

inline WireHeader encode(const FrameHeader& h) {
  uint8_t flags = h.flags & kFrameFlags;
  if (h.id != 0) flags |= kWireHasId;
  if (h.service != kNoService) flags |= kWireHasService;
  if (h.credit_msgs != 0 || h.credit_bytes != 0) flags |= kWireHasCredit;
  if (h.arg != 0) flags |= kWireHasArg;
  WireHeader w;
  detail::put(w, kWireVersion);
  detail::put(w, h.type);
  detail::put(w, h.status);
  detail::put(w, flags);
  detail::put(w, h.dst);
  detail::put(w, static_cast<uint32_t>(h.seq));
  if (flags & kWireHasId) detail::put(w, h.id);
  if (flags & kWireHasService) detail::put(w, h.service);
  if (flags & kWireHasCredit) {
    detail::put(w, h.credit_msgs);
    detail::put(w, h.credit_bytes);
  }
  if (flags & kWireHasArg) detail::put(w, h.arg);
  if (flags & kFlagSealed) {  // the tag's place: the sender seals into it
    std::memset(w.bytes + w.size, 0, kWireTagBytes);
    w.size += kWireTagBytes;
  }
  return w;
}

/// Why a received header was not decoded.
enum class DecodeError { kNone, kVersion, kMalformed };

/// Decodes `wire` into `h`; `h.seq` holds the low 32 bits (see extend_seq).
/// The header must be exactly as long as its flags say.
inline DecodeError decode(std::span<const uint8_t> wire, FrameHeader& h) {
  uint8_t version = 0, flags = 0;
  uint32_t seq = 0;
  if (!detail::take(wire, version)) return DecodeError::kMalformed;
  if (version != kWireVersion) return DecodeError::kVersion;
  if (!detail::take(wire, h.type) || !detail::take(wire, h.status) || !detail::take(wire, flags) ||
      !detail::take(wire, h.dst) || !detail::take(wire, seq))
    return DecodeError::kMalformed;
  if (static_cast<uint8_t>(h.type) < static_cast<uint8_t>(FrameType::kMessage) ||
      static_cast<uint8_t>(h.type) > static_cast<uint8_t>(FrameType::kDoorbell))
    return DecodeError::kMalformed;
  h.flags = flags & kFrameFlags;
  h.seq = seq;
  bool ok = true;
  if (flags & kWireHasId) ok = ok && detail::take(wire, h.id);
  if (flags & kWireHasService) ok = ok && detail::take(wire, h.service);
  if (flags & kWireHasCredit) ok = ok && detail::take(wire, h.credit_msgs) && detail::take(wire, h.credit_bytes);
  if (flags & kWireHasArg) ok = ok && detail::take(wire, h.arg);
  if (flags & kFlagSealed) ok = ok && wire.size() == kWireTagBytes, wire = {};
  return ok && wire.empty() ? DecodeError::kNone : DecodeError::kMalformed;
}

/// The full sequence number of a frame whose wire seq is `low32`, given the
/// next one expected: frames in flight are never 2^31 apart (credits and the
/// outstanding-request limit bound them far below that).
inline uint64_t extend_seq(uint64_t expected, uint64_t low32) {
  auto delta = static_cast<int32_t>(static_cast<uint32_t>(low32) - static_cast<uint32_t>(expected));
  return expected + static_cast<uint64_t>(static_cast<int64_t>(delta));
}

}  // namespace outboard::channel
