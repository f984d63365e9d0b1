// libFuzzer: what a stranger may send on the agent's listening port, and an
// agent's answer as a client reads it: the bootstrap framing (fed in
// pieces), then the Hello, Welcome and Refusal decoders. A message that
// decodes encodes back to the same bytes.
#include <algorithm>

#include "channel/bootstrap.h"

using namespace outboard::channel;

namespace {

template <typename T>
void round_trip(const outboard::Result<T>& decoded, std::span<const uint8_t> payload) {
  if (!decoded.ok()) return;
  const std::vector<uint8_t> again = encode(decoded.value());
  if (again.size() != kBootHeaderBytes + payload.size() ||
      !std::equal(payload.begin(), payload.end(), again.begin() + kBootHeaderBytes))
    __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  // The first byte sets how the rest arrives: in pieces of 1..256 bytes.
  const size_t piece = 1 + data[0];
  std::span<const uint8_t> in(data + 1, size - 1);
  BootReader reader;
  while (!in.empty() && !reader.done()) {
    const size_t n = std::min<size_t>({piece, reader.want(), in.size()});
    if (!reader.feed(in.first(n)).ok()) return 0;
    in = in.subspan(n);
  }
  if (!reader.done()) return 0;
  const auto payload = reader.payload();
  switch (reader.kind()) {
    case BootKind::kHello: round_trip(decode_hello(payload), payload); break;
    case BootKind::kWelcome: round_trip(decode_welcome(payload), payload); break;
    case BootKind::kRefusal: round_trip(decode_refusal(payload), payload); break;
    case BootKind::kSealed: {
      // An agent's sealed answer, opened with a key a stranger does not know.
      static outboard::secure::Sealer sealer(std::array<uint8_t, 32>{}, outboard::secure::Aead::kAes256Gcm);
      (void)open_message(sealer, 0, std::vector<uint8_t>(payload.begin(), payload.end()));
      break;
    }
  }
  return 0;
}
