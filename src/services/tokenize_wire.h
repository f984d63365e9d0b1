// Wire format of the `tokenize` service, shared by the service and its
// client. Little-endian; every request starts with an op byte.
//
//   'O' name bytes                      -> u32 tokenizer, u32 vocab size
//   'B' region descriptor               -> u32 output (the client's region, imported)
//   'E' EncodeHeader, u64 length[n], texts back to back
//       -> the ids are put into the output region first, then
//          ResultHeader, TextResult[n], then for each failed text a u32
//          length and its message.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace outboard::tokenize_wire {

inline constexpr char kOpen = 'O';
inline constexpr char kBind = 'B';
inline constexpr char kEncode = 'E';

enum Flags : uint8_t {
  kAllowSpecial = 1,
  kOrdinary = 2,
  kUtf8Replace = 4,
  kAddSpecialTokens = 8,
};

struct EncodeHeader {
  uint32_t tokenizer = 0;
  uint32_t output = 0;
  uint64_t out_offset = 0;    ///< first id slot of the output region to write
  uint64_t out_capacity = 0;  ///< id slots available from out_offset
  uint32_t texts = 0;
  uint32_t max_len = 0;       ///< ids per text; 0: no limit
  uint8_t flags = 0;
  uint8_t pad[7] = {};
};

struct ResultHeader {
  uint32_t texts = 0;
  uint32_t queued_before = 0;  ///< jobs ahead of this one when it arrived
  uint64_t queue_ns = 0;       ///< arrival to a worker picking it up
  uint64_t tokenize_ns = 0;    ///< the worker's wall time on the batch
  uint64_t cpu_ns = 0;         ///< the worker's thread CPU time on the batch
  uint64_t put_ns = 0;         ///< one-sided write of the ids and its flush
  uint64_t ids = 0;            ///< ids written
};

struct TextResult {
  uint64_t offset = 0;  ///< first id, relative to out_offset
  uint32_t length = 0;  ///< ids
  int32_t code = 0;     ///< outboard::Code; 0 = ok
};

/// Appends plain-old-data values to a byte vector.
struct Writer {
  std::vector<uint8_t> bytes;
  template <typename T>
  void put(const T& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  void put_bytes(std::span<const uint8_t> b) { bytes.insert(bytes.end(), b.begin(), b.end()); }
  void put_bytes(std::string_view s) { put_bytes({reinterpret_cast<const uint8_t*>(s.data()), s.size()}); }
};

/// Reads plain-old-data values; every read says whether the bytes were there.
struct Reader {
  std::span<const uint8_t> in;
  template <typename T>
  bool get(T& v) {
    if (in.size() < sizeof(T)) return false;
    std::memcpy(&v, in.data(), sizeof(T));
    in = in.subspan(sizeof(T));
    return true;
  }
  bool take(size_t n, std::span<const uint8_t>& out) {
    if (in.size() < n) return false;
    out = in.first(n);
    in = in.subspan(n);
    return true;
  }
};

}  // namespace outboard::tokenize_wire
