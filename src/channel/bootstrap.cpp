#include "channel/bootstrap.h"

#include <sodium.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "channel/ring.h"
#include "util/codec.h"
#include "util/net.h"

namespace outboard::channel {
namespace {

std::vector<uint8_t> frame(BootKind kind, std::vector<uint8_t> payload) {
  codec::Writer w;
  w.put(kBootMagic);
  w.put(static_cast<uint8_t>(kind));
  w.put(kBootVersion);
  w.put(uint16_t{0});
  w.put(static_cast<uint32_t>(payload.size()));
  w.put_bytes(payload);
  return std::move(w.bytes);
}

void put_blob(codec::Writer& w, std::span<const uint8_t> b) {
  w.put(static_cast<uint32_t>(b.size()));
  w.put_bytes(b);
}

// Field readers: each failure names the message, the field and its limit.
class Fields {
 public:
  Fields(std::span<const uint8_t> in, const char* message) : r_{in}, message_(message) {}

  template <typename T>
  Status get(T& v, const char* field) {
    if (!r_.get(v)) return truncated(field);
    return {};
  }
  Status blob(std::vector<uint8_t>& out, size_t limit, const char* field) {
    uint32_t n = 0;
    if (!r_.get(n)) return truncated(field);
    if (n > limit)
      return {Code::kInvalidArgument, std::string(message_) + " field " + field + " of " + std::to_string(n) +
                                          " B exceeds its limit of " + std::to_string(limit) + " B"};
    std::span<const uint8_t> bytes;
    if (!r_.take(n, bytes)) return truncated(field);
    out.assign(bytes.begin(), bytes.end());
    return {};
  }
  Status end() const {
    if (r_.in.empty()) return {};
    return {Code::kInvalidArgument,
            std::string(message_) + " has " + std::to_string(r_.in.size()) + " B after its last field"};
  }
  Status invalid(const char* field, uint64_t value, const std::string& expected) const {
    return {Code::kInvalidArgument,
            std::string(message_) + " field " + field + " is " + std::to_string(value) + ", expected " + expected};
  }

 private:
  Status truncated(const char* field) const {
    return {Code::kInvalidArgument, std::string(message_) + " is truncated at field " + field};
  }
  codec::Reader r_;
  const char* message_;
};

// What a Hello and a Welcome both carry, and must carry.
template <typename M>
Status check_common(Fields& f, const M& m) {
  if (m.connection_id == 0) return f.invalid("connection_id", 0, "a connection id from 1");
  if (m.max_msg_size == 0) return f.invalid("max_msg_size", 0, "at least 1 B");
  if (m.window_msgs == 0) return f.invalid("window_msgs", 0, "at least 1 message");
  if (m.worker_address.empty()) return f.invalid("worker_address", 0, "a UCX worker address");
  if (m.ring_slots != 0 && !valid_ring_slots(m.ring_slots))
    return f.invalid("ring_slots", m.ring_slots, "0 or a power of two up to " + std::to_string(kMaxRingSlots));
  if ((m.ring_slots == 0) != m.ring_descriptor.empty())
    return f.invalid("ring_descriptor", m.ring_descriptor.size(),
                     m.ring_slots ? "a descriptor for the ring" : "none without a ring");
  if (m.bell_fd != kNoBell && (m.ring_slots == 0 || m.bell_fd > INT32_MAX))
    return f.invalid("bell_fd", m.bell_fd, m.ring_slots ? "a descriptor number or none" : "none without a ring");
  return {};
}

// Where the bytes of a session token come from; kBadConfig naming the source.
Status fill_token(std::string_view hex, SessionToken& out, std::string_view source) {
  if (hex.size() != 2 * out.size())
    return {Code::kBadConfig, std::string(source) + " is " + std::to_string(hex.size()) + " characters, expected " +
                                  std::to_string(2 * out.size()) + " hex digits"};
  size_t n = 0;
  if (sodium_hex2bin(out.data(), out.size(), hex.data(), hex.size(), nullptr, &n, nullptr) != 0 || n != out.size())
    return {Code::kBadConfig, std::string(source) + " is not hex digits"};
  return {};
}

Status random_token(SessionToken& out) {
  if (::getrandom(out.data(), out.size(), 0) != static_cast<ssize_t>(out.size()))
    return {Code::kIoError, std::string("getrandom: ") + std::strerror(errno)};
  return {};
}

}  // namespace

Result<SessionToken> session_token(const std::string& session) {
  SessionToken token{};
  if (session == "new") {
    OB_RETURN_IF_ERROR(random_token(token));
  } else if (!session.empty()) {
    OB_RETURN_IF_ERROR(fill_token(session, token, "session token"));
  } else {
    // One per process, made once: the connections of one process share a
    // session unless they ask otherwise.
    static const Result<SessionToken> process_token = []() -> Result<SessionToken> {
      SessionToken t{};
      if (const char* env = std::getenv("OUTBOARD_SESSION_TOKEN"); env && *env) {
        OB_RETURN_IF_ERROR(fill_token(env, t, "OUTBOARD_SESSION_TOKEN"));
        return t;
      }
      OB_RETURN_IF_ERROR(random_token(t));
      return t;
    }();
    return process_token;
  }
  return token;
}

std::vector<uint8_t> encode(const Hello& h) {
  codec::Writer w;
  w.put(h.connection_id);
  w.put(h.pid);
  w.put(h.flags);
  w.put_bytes(std::span<const uint8_t>(h.token));
  w.put(h.max_msg_size);
  w.put(h.window_msgs);
  w.put(h.window_bytes);
  put_blob(w, h.worker_address);
  w.put(h.ring_slots);
  put_blob(w, h.ring_descriptor);
  w.put(h.bell_fd);
  return frame(BootKind::kHello, std::move(w.bytes));
}

std::vector<uint8_t> encode(const Welcome& m) {
  codec::Writer w;
  w.put(m.connection_id);
  w.put(m.pid);
  put_blob(w, m.worker_address);
  w.put(m.max_msg_size);
  w.put(m.window_msgs);
  w.put(m.window_bytes);
  w.put(static_cast<uint32_t>(m.services.size()));
  for (const auto& s : m.services) w.put_string(s);
  w.put(m.ring_slots);
  put_blob(w, m.ring_descriptor);
  w.put(m.bell_fd);
  w.put(static_cast<uint32_t>(m.facts.size()));
  for (const auto& [name, value] : m.facts) {
    w.put_string(name);
    w.put(value);
  }
  return frame(BootKind::kWelcome, std::move(w.bytes));
}

std::vector<uint8_t> encode(const Refusal& r) {
  codec::Writer w;
  w.put(static_cast<int8_t>(r.code));
  w.put_string(r.message);
  return frame(BootKind::kRefusal, std::move(w.bytes));
}

Result<Hello> decode_hello(std::span<const uint8_t> payload) {
  Fields f(payload, "hello");
  Hello h;
  OB_RETURN_IF_ERROR(f.get(h.connection_id, "connection_id"));
  OB_RETURN_IF_ERROR(f.get(h.pid, "pid"));
  OB_RETURN_IF_ERROR(f.get(h.flags, "flags"));
  OB_RETURN_IF_ERROR(f.get(h.token, "token"));
  OB_RETURN_IF_ERROR(f.get(h.max_msg_size, "max_msg_size"));
  OB_RETURN_IF_ERROR(f.get(h.window_msgs, "window_msgs"));
  OB_RETURN_IF_ERROR(f.get(h.window_bytes, "window_bytes"));
  OB_RETURN_IF_ERROR(f.blob(h.worker_address, kMaxWorkerAddress, "worker_address"));
  OB_RETURN_IF_ERROR(f.get(h.ring_slots, "ring_slots"));
  OB_RETURN_IF_ERROR(f.blob(h.ring_descriptor, kMaxRingDescriptor, "ring_descriptor"));
  OB_RETURN_IF_ERROR(f.get(h.bell_fd, "bell_fd"));
  OB_RETURN_IF_ERROR(f.end());
  if (h.flags & ~kHelloFlags) return f.invalid("flags", h.flags, "a subset of " + std::to_string(kHelloFlags));
  OB_RETURN_IF_ERROR(check_common(f, h));
  return h;
}

Result<Welcome> decode_welcome(std::span<const uint8_t> payload) {
  Fields f(payload, "welcome");
  Welcome m;
  uint32_t services = 0;
  OB_RETURN_IF_ERROR(f.get(m.connection_id, "connection_id"));
  OB_RETURN_IF_ERROR(f.get(m.pid, "pid"));
  OB_RETURN_IF_ERROR(f.blob(m.worker_address, kMaxWorkerAddress, "worker_address"));
  OB_RETURN_IF_ERROR(f.get(m.max_msg_size, "max_msg_size"));
  OB_RETURN_IF_ERROR(f.get(m.window_msgs, "window_msgs"));
  OB_RETURN_IF_ERROR(f.get(m.window_bytes, "window_bytes"));
  OB_RETURN_IF_ERROR(f.get(services, "services"));
  if (services > kMaxServices) return f.invalid("services", services, "at most " + std::to_string(kMaxServices));
  m.services.resize(services);
  for (auto& s : m.services) {
    std::vector<uint8_t> name;
    OB_RETURN_IF_ERROR(f.blob(name, kMaxServiceName, "service name"));
    s.assign(name.begin(), name.end());
  }
  OB_RETURN_IF_ERROR(f.get(m.ring_slots, "ring_slots"));
  OB_RETURN_IF_ERROR(f.blob(m.ring_descriptor, kMaxRingDescriptor, "ring_descriptor"));
  OB_RETURN_IF_ERROR(f.get(m.bell_fd, "bell_fd"));
  uint32_t facts = 0;
  OB_RETURN_IF_ERROR(f.get(facts, "facts"));
  if (facts > kMaxFacts) return f.invalid("facts", facts, "at most " + std::to_string(kMaxFacts));
  m.facts.resize(facts);
  for (auto& [name, value] : m.facts) {
    std::vector<uint8_t> bytes;
    OB_RETURN_IF_ERROR(f.blob(bytes, kMaxFactName, "fact name"));
    name.assign(bytes.begin(), bytes.end());
    OB_RETURN_IF_ERROR(f.get(value, "fact value"));
  }
  OB_RETURN_IF_ERROR(f.end());
  OB_RETURN_IF_ERROR(check_common(f, m));
  return m;
}

Result<Refusal> decode_refusal(std::span<const uint8_t> payload) {
  Fields f(payload, "refusal");
  int8_t code = 0;
  std::vector<uint8_t> message;
  OB_RETURN_IF_ERROR(f.get(code, "code"));
  OB_RETURN_IF_ERROR(f.blob(message, kMaxBootMessage, "message"));
  OB_RETURN_IF_ERROR(f.end());
  if (code >= 0 || !known_code(code)) return f.invalid("code", static_cast<uint8_t>(code), "an error code");
  return Refusal{static_cast<Code>(code), std::string(message.begin(), message.end())};
}

size_t BootReader::want() const {
  if (buf_.size() < kBootHeaderBytes) return kBootHeaderBytes - buf_.size();
  return kBootHeaderBytes + length_ - buf_.size();
}

Status BootReader::feed(std::span<const uint8_t> bytes) {
  if (bytes.size() > want())
    return {Code::kInvalidArgument, std::to_string(bytes.size()) + " B fed where " + std::to_string(want()) +
                                        " B complete the message"};
  buf_.insert(buf_.end(), bytes.begin(), bytes.end());
  if (header_ok_ || buf_.size() < kBootHeaderBytes) return {};
  codec::Reader r{buf_};
  uint32_t magic = 0, length = 0;
  uint8_t kind = 0, version = 0;
  uint16_t reserved = 0;
  r.get(magic), r.get(kind), r.get(version), r.get(reserved), r.get(length);
  if (magic != kBootMagic)
    return {Code::kInvalidArgument, "not an outboard bootstrap message (magic " + std::to_string(magic) + ")"};
  if (version != kBootVersion)
    return {Code::kInvalidArgument, "bootstrap version " + std::to_string(version) + " (this side speaks " +
                                        std::to_string(kBootVersion) + ")"};
  if (kind < static_cast<uint8_t>(BootKind::kHello) || kind > static_cast<uint8_t>(BootKind::kSealed) || reserved)
    return {Code::kInvalidArgument, "bootstrap message of unknown kind " + std::to_string(kind)};
  if (length > kMaxBootMessage)
    return {Code::kTooBig, "bootstrap message of " + std::to_string(length) + " B exceeds its limit of " +
                               std::to_string(kMaxBootMessage) + " B"};
  kind_ = static_cast<BootKind>(kind);
  length_ = length;
  header_ok_ = true;
  buf_.reserve(kBootHeaderBytes + length_);
  return {};
}

Status BootReader::feed_until_done(std::span<const uint8_t>& bytes) {
  while (!done() && !bytes.empty()) {
    const size_t n = std::min(bytes.size(), want());
    OB_RETURN_IF_ERROR(feed(bytes.first(n)));
    bytes = bytes.subspan(n);
  }
  return {};
}

Result<BootMessage> read_boot_message(int fd, Deadline deadline, std::string_view what) {
  BootReader reader;
  uint8_t chunk[4096];
  while (!reader.done()) {
    std::span<uint8_t> into(chunk, std::min(sizeof chunk, reader.want()));
    OB_RETURN_IF_ERROR(net::recv_exact(fd, into, deadline, what));
    OB_RETURN_IF_ERROR(reader.feed(into).with_context(what));
  }
  auto payload = reader.payload();
  return BootMessage{reader.kind(), std::vector<uint8_t>(payload.begin(), payload.end())};
}

Result<std::vector<uint8_t>> seal_message(secure::Sealer& sealer, uint64_t number,
                                          std::span<const uint8_t> message) {
  if (message.size() + secure::kTagBytes > kMaxBootMessage)
    return Status(Code::kTooBig, "sealed bootstrap message of " + std::to_string(message.size() + secure::kTagBytes) +
                                     " B exceeds its limit of " + std::to_string(kMaxBootMessage) + " B");
  std::vector<uint8_t> sealed(message.size() + secure::kTagBytes);
  sealer.seal(secure::Sealer::Stream::kSocket, number, {}, message, sealed.data());
  return frame(BootKind::kSealed, std::move(sealed));
}

Result<BootMessage> open_message(secure::Sealer& sealer, uint64_t number, std::vector<uint8_t> payload) {
  OB_RETURN_IF_ERROR(
      sealer.open(secure::Sealer::Stream::kSocket, number, {}, payload).with_context("sealed bootstrap message"));
  payload.resize(payload.size() - secure::kTagBytes);
  BootReader reader;
  std::span<const uint8_t> rest(payload);
  OB_RETURN_IF_ERROR(reader.feed_until_done(rest).with_context("sealed bootstrap message"));
  if (!reader.done() || !rest.empty() || reader.kind() == BootKind::kSealed)
    return Status(Code::kInvalidArgument, "a sealed bootstrap message holds no single message");
  auto inner = reader.payload();
  return BootMessage{reader.kind(), std::vector<uint8_t>(inner.begin(), inner.end())};
}

namespace {
// A plaintext bootstrap message starts with the magic's first byte; a TLS record never does.
constexpr uint8_t kBootMagicFirst = kBootMagic & 0xff;
// A TLS record: type, version, 16-bit length, then at most 2^14 B + 256 (RFC 8446 §5.2).
constexpr size_t kTlsRecordHeader = 5;
constexpr size_t kMaxTlsRecord = (1 << 14) + 256;

Result<uint8_t> peek_first(int fd, Deadline deadline, std::string_view what) {
  uint8_t b = 0;
  OB_RETURN_IF_ERROR(net::recv_some(fd, {&b, 1}, deadline, what, MSG_PEEK).status());
  return b;
}

Status refusal_of(int fd, Deadline deadline, std::string_view what) {
  OB_ASSIGN_OR_RETURN(BootMessage m, read_boot_message(fd, deadline, what));
  if (m.kind != BootKind::kRefusal)
    return {Code::kAuthentication, std::string(what) + ": the agent answered in plaintext, not TLS"};
  OB_ASSIGN_OR_RETURN(Refusal r, decode_refusal(m.payload));
  return {r.code, std::string(what) + ": the agent refused the connection: " + r.message};
}
}  // namespace

Result<std::unique_ptr<secure::Tls>> tls_connect(int fd, std::shared_ptr<secure::Context> context, std::string peer,
                                                 Deadline deadline, std::string_view what) {
  OB_ASSIGN_OR_RETURN(auto tls, secure::Tls::create(std::move(context), std::move(peer)));
  for (bool first = true;; first = false) {
    Result<bool> done = tls->handshake();
    const std::vector<uint8_t> out = tls->take_output();  // a flight, or the alert that says why not
    Status sent = out.empty() ? Status() : net::send_all(fd, out, deadline, what);
    if (!done.ok()) return done.status().with_context(what);
    OB_RETURN_IF_ERROR(sent);
    if (*done) return tls;
    if (first) {
      OB_ASSIGN_OR_RETURN(uint8_t b, peek_first(fd, deadline, what));
      if (b == kBootMagicFirst) return refusal_of(fd, deadline, what);
    }
    uint8_t buf[4096];
    OB_ASSIGN_OR_RETURN(size_t n, net::recv_some(fd, buf, deadline, what));
    OB_RETURN_IF_ERROR(tls->feed({buf, n}).with_context(what));
  }
}

Result<BootMessage> read_secure_answer(int fd, secure::Tls& tls, secure::Sealer& in, Deadline deadline,
                                       std::string_view what) {
  OB_ASSIGN_OR_RETURN(uint8_t b, peek_first(fd, deadline, what));
  if (b == kBootMagicFirst) {
    OB_ASSIGN_OR_RETURN(BootMessage m, read_boot_message(fd, deadline, what));
    if (m.kind == BootKind::kSealed) return open_message(in, 0, std::move(m.payload));
    if (m.kind == BootKind::kRefusal) return m;
    return Status(Code::kAuthentication, std::string(what) + ": the agent answered unsealed");
  }
  // TLS records after our handshake completed: a session to resume, or the
  // agent's alert (it refused our keys). Read whole, one at a time: its
  // sealed answer may follow on the socket.
  for (;;) {
    uint8_t record[kTlsRecordHeader + kMaxTlsRecord];
    OB_RETURN_IF_ERROR(net::recv_exact(fd, {record, kTlsRecordHeader}, deadline, what));
    const size_t length = size_t{record[3]} << 8 | record[4];
    if (length > kMaxTlsRecord)
      return Status(Code::kAuthentication, std::string(what) + ": a TLS record of " + std::to_string(length) +
                                               " B, over TLS's " + std::to_string(kMaxTlsRecord) + " B");
    OB_RETURN_IF_ERROR(net::recv_exact(fd, {record + kTlsRecordHeader, length}, deadline, what));
    OB_RETURN_IF_ERROR(tls.feed({record, kTlsRecordHeader + length}).with_context(what));
    auto data = tls.read();
    if (!data.ok()) return data.status().with_context(what);
    if (!data->empty())
      return Status(Code::kAuthentication, std::string(what) + ": the agent sent TLS data after the handshake");
    OB_ASSIGN_OR_RETURN(b, peek_first(fd, deadline, what));
    if (b == kBootMagicFirst) return read_secure_answer(fd, tls, in, deadline, what);
  }
}

}  // namespace outboard::channel
