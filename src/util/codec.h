// Little-endian plain-old-data encoding: the services' wire formats and the
// channel's bootstrap messages.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace outboard::codec {

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
  /// u32 length, then the bytes.
  void put_string(std::string_view s) {
    put(static_cast<uint32_t>(s.size()));
    put_bytes(s);
  }
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
  /// What Writer::put_string wrote.
  bool get_string(std::string& out) {
    uint32_t n = 0;
    std::span<const uint8_t> bytes;
    if (!get(n) || !take(n, bytes)) return false;
    out.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    return true;
  }
};

}  // namespace outboard::codec
