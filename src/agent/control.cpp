#include "agent/control.h"

#include "util/codec.h"

namespace outboard::agent {

namespace {
std::vector<uint8_t> just(ControlKind kind) { return {static_cast<uint8_t>(kind)}; }
}  // namespace

std::vector<uint8_t> encode_config(const std::string& json) {
  codec::Writer w;
  w.put(ControlKind::kConfig);
  w.put_bytes(json);
  return std::move(w.bytes);
}

std::vector<uint8_t> encode_adopt(const channel::PeerInfo& peer, std::span<const uint8_t> hello) {
  codec::Writer w;
  w.put(ControlKind::kAdopt);
  w.put_string(peer.name);
  w.put_string(peer.identity);
  w.put(static_cast<uint8_t>(peer.policy.shared_memory));
  w.put(static_cast<int32_t>(peer.policy.owner));
  w.put(static_cast<uint8_t>(peer.keys.has_value()));
  if (peer.keys) {
    w.put_bytes(std::span<const uint8_t>(peer.keys->client_to_agent));
    w.put_bytes(std::span<const uint8_t>(peer.keys->agent_to_client));
    w.put(static_cast<uint8_t>(peer.keys->aead));
  }
  w.put_bytes(hello);
  return std::move(w.bytes);
}

std::vector<uint8_t> encode_closed() { return just(ControlKind::kClosed); }
std::vector<uint8_t> encode_end() { return just(ControlKind::kEnd); }
std::vector<uint8_t> encode_revoked() { return just(ControlKind::kRevoked); }

Result<Adopt> decode_adopt(std::span<const uint8_t> body) {
  codec::Reader r{body};
  Adopt a;
  uint8_t shared = 0;
  int32_t owner = 0;
  uint8_t sealed = 0;
  if (!r.get_string(a.peer.name) || !r.get_string(a.peer.identity) || !r.get(shared) || !r.get(owner) ||
      !r.get(sealed))
    return Status(Code::kInvalidArgument, "adopt message is truncated");
  if (sealed) {
    secure::Keys keys;
    uint8_t aead = 0;
    if (!r.get(keys.client_to_agent) || !r.get(keys.agent_to_client) || !r.get(aead))
      return Status(Code::kInvalidArgument, "adopt message is truncated at its keys");
    if (aead != static_cast<uint8_t>(secure::Aead::kAes256Gcm) &&
        aead != static_cast<uint8_t>(secure::Aead::kChaCha20Poly1305))
      return Status(Code::kInvalidArgument, "adopt message names AEAD " + std::to_string(aead) + ", not 1 or 2");
    keys.aead = static_cast<secure::Aead>(aead);
    a.peer.keys = keys;
  }
  a.peer.policy.shared_memory = shared != 0;
  a.peer.policy.owner = owner;
  a.hello = r.in;
  return a;
}

}  // namespace outboard::agent
