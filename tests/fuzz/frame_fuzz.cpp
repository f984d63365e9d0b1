// libFuzzer: channel frame headers, as a peer writes them into a ring or a
// UCX active message. Decoding never reads past the bytes; a decoded header
// encodes back to the same bytes.
#include <cstring>

#include "channel/frame.h"

using namespace outboard::channel;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FrameHeader h;
  if (decode({data, size}, h) != DecodeError::kNone) return 0;
  const WireHeader w = encode(h);
  if (w.size != size || std::memcmp(w.bytes, data, size) != 0) {
    // Flags outside the known ones are dropped on decode: compare decoded forms.
    FrameHeader again;
    if (decode(w.span(), again) != DecodeError::kNone || again.type != h.type || again.seq != h.seq ||
        again.id != h.id || again.service != h.service || again.arg != h.arg || again.dst != h.dst)
      __builtin_trap();
  }
  return 0;
}
