// libFuzzer: what a stranger may send to an agent with keys before its
// handshake completes, as the listener feeds it (in pieces, bounded by
// kMaxHandshakeBytes): a certificate agent or a PSK agent (our PSK lookup
// runs on the stranger's identity), and the client reading an agent's answer.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "transport/secure.h"

using namespace outboard;

namespace {

struct Contexts {
  std::shared_ptr<secure::Context> cert_agent, psk_agent, client;
};

const Contexts& contexts() {
  static const Contexts c = [] {
    const auto name = "outboard_fuzz_keys_" + std::to_string(::getpid());
    const std::string dir = (std::filesystem::temp_directory_path() / name).string();
    std::filesystem::remove_all(dir);
    if (!secure::init_keys(dir, "fuzz agent").ok()) std::abort();
    SecureConfig certs{.cert = dir + "/agent.pem", .key = dir + "/agent.key", .ca = dir + "/ca.pem"};
    SecureConfig client{
        .cert = dir + "/client.pem", .key = dir + "/client.key", .ca = dir + "/ca.pem", .agent_host = "localhost"};
    SecureConfig psk{.psk_file = dir + "/psk.txt"};
    Contexts made{secure::Context::create(certs, secure::Role::kAgent).value(),
                  secure::Context::create(psk, secure::Role::kAgent).value(),
                  secure::Context::create(client, secure::Role::kClient).value()};
    std::filesystem::remove_all(dir);  // loaded: the files are no longer needed
    return made;
  }();
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  // The first byte: which side (2 bits), and the piece size the bytes arrive in.
  const Contexts& c = contexts();
  const auto& side = (data[0] & 3) == 0 ? c.cert_agent : (data[0] & 3) == 1 ? c.psk_agent : c.client;
  const size_t piece = 1 + (data[0] >> 2) * 64;
  auto tls = secure::Tls::create(side);
  if (!tls.ok()) std::abort();
  std::span<const uint8_t> in(data + 1, size - 1);
  while (!in.empty()) {
    const size_t n = std::min(piece, in.size());
    if (!(*tls)->feed(in.first(n)).ok()) return 0;
    in = in.subspan(n);
    auto done = (*tls)->handshake();
    (void)(*tls)->take_output();
    if (!done.ok()) return 0;
    if (*done) {
      // A stranger cannot complete a handshake; if it did, what follows is a Hello.
      if (!(*tls)->read().ok()) return 0;
    }
  }
  return 0;
}
