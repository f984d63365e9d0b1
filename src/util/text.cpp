#include "util/text.h"

#include <cstdio>

namespace outboard {

std::string printable(std::string_view bytes, size_t max) {
  std::string out;
  const size_t n = bytes.size() < max ? bytes.size() : max;
  out.reserve(n + 16);
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  if (bytes.size() > n) out += "... (" + std::to_string(bytes.size()) + " B)";
  return out;
}

}  // namespace outboard
