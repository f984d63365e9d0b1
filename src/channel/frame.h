// Wire format of channel frames: a fixed header carried as the UCX AM
// header, the payload as AM data. Both ends are little-endian (x86, Arm).
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "outboard/status.h"

namespace outboard::channel {

constexpr uint8_t kWireVersion = 1;
constexpr uint32_t kNoService = 0xffffffffu;

enum class FrameType : uint8_t {
  kHello = 1,     // client -> agent on the bootstrap endpoint (unsequenced)
  kWelcome = 2,   // agent -> client, first frame on the data endpoint
  kMessage = 3,   // one-way, credited
  kRequest = 4,   // credited; answered by kResponse
  kResponse = 5,  // not credited: bounded by the requester's outstanding requests
  kCredit = 6,    // returns credits; kFlagWantCredit asks for them
  kNotify = 7,    // write-with-notify completion, credited (0 bytes)
  kClose = 8,     // graceful close or shutdown; status says which
};

constexpr uint8_t kFlagWantCredit = 1;

struct FrameHeader {
  uint8_t version = kWireVersion;
  FrameType type = FrameType::kMessage;
  int8_t status = 0;         // kResponse/kClose: outboard::Code
  uint8_t flags = 0;
  uint32_t dst = 0;          // receiver's connection id (0: the agent's listener)
  uint64_t seq = 0;          // sender's per-connection frame number
  uint64_t id = 0;           // request id / notify cookie
  uint64_t arg = 0;          // notify offset
  uint64_t credit_bytes = 0; // credits returned to the receiver of this frame
  uint32_t credit_msgs = 0;
  uint32_t service = kNoService;
};
static_assert(sizeof(FrameHeader) == 48);

inline std::span<const uint8_t> as_bytes(const FrameHeader& h) {
  return {reinterpret_cast<const uint8_t*>(&h), sizeof h};
}

/// Little serialiser for handshake payloads.
class Writer {
 public:
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void bytes(std::span<const uint8_t> b) {
    u32(static_cast<uint32_t>(b.size()));
    raw(b.data(), b.size());
  }
  void str(const std::string& s) { bytes({reinterpret_cast<const uint8_t*>(s.data()), s.size()}); }
  std::vector<uint8_t>& out() { return out_; }

 private:
  void raw(const void* p, size_t n) {
    auto* b = static_cast<const uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  bool u32(uint32_t& v) { return raw(&v, 4); }
  bool u64(uint64_t& v) { return raw(&v, 8); }
  bool bytes(std::vector<uint8_t>& b) {
    uint32_t n = 0;
    if (!u32(n) || n > in_.size() - pos_) return false;
    b.assign(in_.data() + pos_, in_.data() + pos_ + n);
    pos_ += n;
    return true;
  }
  bool str(std::string& s) {
    std::vector<uint8_t> b;
    if (!bytes(b)) return false;
    s.assign(b.begin(), b.end());
    return true;
  }

 private:
  bool raw(void* p, size_t n) {
    if (n > in_.size() - pos_) return false;
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

}  // namespace outboard::channel
