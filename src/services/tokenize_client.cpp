#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include "outboard/log.h"
#include "outboard/tokenize_client.h"
#include "services/tokenize_wire.h"

OB_LOG_MODULE("tokenize");

namespace outboard {

namespace wire = tokenize_wire;

namespace {
constexpr std::string_view kService = "tokenize";

Result<Buffer> call(Connection& conn, std::span<const uint8_t> payload, Deadline deadline) {
  return conn.request(kService, payload, deadline);
}
}  // namespace

// Registered slabs the agent writes into, handed out first-fit. A batch
// reserves its slots before it is sent and keeps them while any view lives.
// The first slab (ours, or the caller's OutputMemory) stays; one added for a
// peak (a long text, many batches in flight) is unbound and unregistered once
// it is empty again. On a sealed connection the agent may not write here:
// the slabs are plain memory, never bound, and the ids come in the answer.
struct RemoteTokenizer::Pool : std::enable_shared_from_this<Pool> {
  struct Slab {
    Region region;                       // registered (not in band)
    std::unique_ptr<int32_t[]> own;      // or ours, in band
    std::span<int32_t> memory;           // what either holds, or the caller's OutputMemory
    uint32_t handle = 0;                 // the agent's name for it
    MemoryKind kind = MemoryKind::kHost;
    std::map<uint64_t, uint64_t> free;   // first slot -> slots
    [[nodiscard]] uint64_t ids() const { return memory.size(); }
  };
  Connection& conn;
  uint64_t slab_ids;
  std::shared_ptr<void> owner;  // of the caller's memory: outlives the slab registered on it
  const bool in_band;           // conn.sealed()
  std::mutex mu;
  std::vector<std::unique_ptr<Slab>> slabs;
  std::vector<std::unique_ptr<Slab>> emptied;  // to unbind, by the next reserve()

  Pool(Connection& c, uint64_t ids, std::shared_ptr<void> memory_owner)
      : conn(c), slab_ids(ids), owner(std::move(memory_owner)), in_band(c.sealed()) {}

  Result<std::unique_ptr<Slab>> new_slab(uint64_t ids, Deadline deadline) {
    if (in_band) {
      auto slab = std::make_unique<Slab>();
      slab->own = std::make_unique_for_overwrite<int32_t[]>(ids);
      const std::span<int32_t> memory(slab->own.get(), ids);
      return with_memory(std::move(slab), memory);
    }
    OB_ASSIGN_OR_RETURN(Region region, conn.allocate_memory(ids * sizeof(int32_t)));
    return bind(std::move(region), deadline);
  }

  // The caller's memory: registered and bound, or in band used as it is.
  Result<std::unique_ptr<Slab>> adopt(std::span<int32_t> ids, MemoryKind kind, Deadline deadline) {
    if (in_band) return with_memory(std::make_unique<Slab>(), ids);  // host memory only (open() checks)
    OB_ASSIGN_OR_RETURN(Region region, conn.register_memory(ids.data(), ids.size_bytes(), kind));
    OB_ASSIGN_OR_RETURN(auto slab, bind(std::move(region), deadline));
    slab->kind = kind;
    return slab;
  }

  static std::unique_ptr<Slab> with_memory(std::unique_ptr<Slab> slab, std::span<int32_t> memory) {
    slab->memory = memory;
    slab->free[0] = memory.size();
    return slab;
  }

  // Blocks for a round trip: called without `mu`.
  Result<std::unique_ptr<Slab>> bind(Region region, Deadline deadline) {
    wire::Writer w;
    w.put(wire::kBind);
    w.put_bytes(region.descriptor());
    OB_ASSIGN_OR_RETURN(Buffer reply, call(conn, w.bytes, deadline));
    auto slab = std::make_unique<Slab>();
    wire::Reader r{reply.span()};
    if (!r.get(slab->handle)) return Status(Code::kIoError, "tokenize service answered a bind with " + std::to_string(reply.size()) + " B");
    std::span<int32_t> memory(reinterpret_cast<int32_t*>(region.data()), region.size() / sizeof(int32_t));
    slab->region = std::move(region);
    return with_memory(std::move(slab), memory);
  }

  struct Reservation {
    Slab* slab = nullptr;
    uint64_t first = 0, count = 0;
  };

  Result<Reservation> reserve(uint64_t count, Deadline deadline) {
    unbind_emptied(deadline);
    {
      std::lock_guard lock(mu);
      for (auto& slab : slabs) {
        for (auto it = slab->free.begin(); it != slab->free.end(); ++it) {
          if (it->second < count) continue;
          Reservation res{slab.get(), it->first, count};
          uint64_t rest = it->second - count;
          uint64_t next = it->first + count;
          slab->free.erase(it);
          if (rest != 0) slab->free[next] = rest;
          return res;
        }
      }
    }
    OB_ASSIGN_OR_RETURN(auto slab, new_slab(std::max(count, slab_ids), deadline));
    slab->free.clear();
    if (slab->ids() > count) slab->free[count] = slab->ids() - count;
    std::lock_guard lock(mu);
    slabs.push_back(std::move(slab));
    return Reservation{slabs.back().get(), 0, count};
  }

  void release(const Reservation& r) {
    if (r.count == 0) return;
    std::lock_guard lock(mu);
    auto& free = r.slab->free;
    auto [it, inserted] = free.emplace(r.first, r.count);
    if (auto next = std::next(it); next != free.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free.erase(next);
    }
    if (it != free.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free.erase(it);
      }
    }
    // Views may be dropped under the connection's own callbacks: the unbind
    // (a request) is left to the next reserve().
    if (r.slab != slabs.front().get() && free.size() == 1 && free.begin()->second == r.slab->ids()) {
      auto slab = std::find_if(slabs.begin(), slabs.end(), [&](const auto& s) { return s.get() == r.slab; });
      emptied.push_back(std::move(*slab));
      slabs.erase(slab);
    }
  }

  void unbind_emptied(Deadline deadline) {
    std::vector<std::unique_ptr<Slab>> unbind;
    {
      std::lock_guard lock(mu);
      unbind.swap(emptied);
    }
    if (in_band) return;  // never bound: freeing it is all
    for (auto it = unbind.begin(); it != unbind.end(); ++it) {
      const auto handle = (*it)->handle;
      wire::Writer w;
      w.put(wire::kUnbind);
      w.put(handle);
      // The agent writes into a slab only for a reservation: none is left, so
      // the memory can go before the answer comes.
      Status st = conn.submit(kService, Buffer::copy_of(w.bytes), deadline, [handle](Result<Buffer> answer) {
        if (!answer.ok()) OB_LOG_WARN("unbinding output %u: %s", handle, answer.status().to_string().c_str());
      });
      if (st.code() == Code::kAgain) {  // the agent's window is full: the next reserve() tries again
        std::lock_guard lock(mu);
        emptied.insert(emptied.end(), std::make_move_iterator(it), std::make_move_iterator(unbind.end()));
        return;
      }
      if (!st.ok()) OB_LOG_WARN("unbinding output %u: %s", handle, st.to_string().c_str());
    }
  }

  [[nodiscard]] uint64_t registered_ids() {
    std::lock_guard lock(mu);
    uint64_t ids = 0;
    for (const auto& slab : slabs) ids += slab->ids();
    for (const auto& slab : emptied) ids += slab->ids();
    return ids;
  }
};

struct RemoteTokenizer::Slots {
  Slots(std::shared_ptr<RemoteTokenizer::Pool> p, RemoteTokenizer::Pool::Reservation r)
      : pool(std::move(p)), reservation(r) {}
  Slots(const Slots&) = delete;  // exactly one release per reservation
  Slots& operator=(const Slots&) = delete;
  ~Slots() { pool->release(reservation); }
  std::shared_ptr<RemoteTokenizer::Pool> pool;
  RemoteTokenizer::Pool::Reservation reservation;
};

RemoteTokenizer::RemoteTokenizer(Connection& connection, uint32_t handle, size_t vocab_size, std::shared_ptr<Pool> pool)
    : connection_(connection), handle_(handle), vocab_size_(vocab_size), pool_(std::move(pool)) {}

RemoteTokenizer::~RemoteTokenizer() = default;

Result<std::unique_ptr<RemoteTokenizer>> RemoteTokenizer::open(Connection& connection, const std::string& name,
                                                               Deadline deadline, uint64_t pool_ids) {
  return open(connection, name, deadline, OutputMemory{}, pool_ids);
}

Result<std::unique_ptr<RemoteTokenizer>> RemoteTokenizer::open(Connection& connection, const std::string& name,
                                                               Deadline deadline, OutputMemory output) {
  if (output.ids.empty()) return Status(Code::kInvalidArgument, "output memory for the ids is empty");
  const uint64_t ids = output.ids.size();
  return open(connection, name, deadline, std::move(output), ids);
}

Result<std::unique_ptr<RemoteTokenizer>> RemoteTokenizer::open(Connection& connection, const std::string& name,
                                                               Deadline deadline, OutputMemory output,
                                                               uint64_t pool_ids) {
  if (output.kind == MemoryKind::kCuda && connection.sealed())
    return Status(Code::kUnsupported, "ids into GPU memory need the agent's one-sided write, which a secure "
                                      "connection does not allow (its ids come in the sealed answer)");
  wire::Writer w;
  OB_RETURN_IF_ERROR(services::put_vocabulary_request(w, name));
  OB_ASSIGN_OR_RETURN(Buffer reply, call(connection, w.bytes, deadline));
  uint32_t handle = 0, vocab = 0;
  wire::Reader r{reply.span()};
  if (!r.get(handle) || !r.get(vocab))
    return Status(Code::kIoError, "tokenize service answered an open with " + std::to_string(reply.size()) + " B");
  auto pool = std::make_shared<Pool>(connection, std::max<uint64_t>(pool_ids, 1), std::move(output.owner));
  std::unique_ptr<Pool::Slab> slab;
  if (output.ids.empty()) {
    OB_ASSIGN_OR_RETURN(slab, pool->new_slab(pool->slab_ids, deadline));
  } else {
    OB_ASSIGN_OR_RETURN(slab, pool->adopt(output.ids, output.kind, deadline));
  }
  pool->slabs.push_back(std::move(slab));
  return std::unique_ptr<RemoteTokenizer>(new RemoteTokenizer(connection, handle, vocab, std::move(pool)));
}

uint64_t RemoteTokenizer::registered_bytes() const { return pool_->registered_ids() * sizeof(int32_t); }

uint64_t RemoteTokenizer::max_ids(std::string_view text, const EncodeOptions& options) {
  // Every id covers at least one input byte, except that a replaced invalid
  // byte becomes U+FFFD (3 bytes, up to 3 ids) and [CLS]/[SEP] cover none.
  const uint64_t per_byte = options.utf8 == Utf8Policy::kReplace ? 3 : 1;
  return text.size() * per_byte + (options.add_special_tokens ? 2 : 0);
}

struct RemoteTokenizer::Request {
  std::shared_ptr<Slots> slots;
  Buffer bytes;  // the message itself: submit() sends it without another copy
  size_t texts = 0;
};

Result<RemoteTokenizer::Request> RemoteTokenizer::prepare(std::span<const std::string_view> texts,
                                                          const OffloadOptions& options, Deadline deadline) {
  if (texts.size() > UINT32_MAX) return Status(Code::kTooBig, "batch of " + std::to_string(texts.size()) + " texts");
  uint64_t capacity = options.capacity;
  uint64_t bytes = 0;
  for (std::string_view t : texts) {
    bytes += t.size();
    if (options.capacity == 0) {
      uint64_t most = max_ids(t, options.encode);
      capacity += options.max_len != 0 ? std::min<uint64_t>(most, options.max_len) : most;
    }
  }
  OB_ASSIGN_OR_RETURN(Pool::Reservation res, pool_->reserve(capacity, deadline));
  Request req{std::make_shared<Slots>(pool_, res), {}, texts.size()};

  wire::EncodeHeader h;
  h.tokenizer = handle_;
  h.output = res.slab->handle;
  h.out_offset = res.first;
  h.out_capacity = res.count;
  h.texts = static_cast<uint32_t>(texts.size());
  h.max_len = options.max_len;
  const EncodeOptions& e = options.encode;
  h.flags = (e.allow_special ? wire::kAllowSpecial : 0) | (e.ordinary ? wire::kOrdinary : 0) |
            (e.utf8 == Utf8Policy::kReplace ? wire::kUtf8Replace : 0) |
            (e.add_special_tokens ? wire::kAddSpecialTokens : 0) | (pool_->in_band ? wire::kIdsInBand : 0);
  req.bytes = Buffer(1 + sizeof h + texts.size() * sizeof(uint64_t) + bytes);
  uint8_t* out = req.bytes.data();
  auto put = [&out](const void* p, size_t n) {
    if (n != 0) std::memcpy(out, p, n);
    out += n;
  };
  put(&wire::kEncode, 1);
  put(&h, sizeof h);
  for (std::string_view t : texts) {
    const uint64_t size = t.size();
    put(&size, sizeof size);
  }
  for (std::string_view t : texts) put(t.data(), t.size());
  return req;
}

Result<EncodedBatch> RemoteTokenizer::finish(const Buffer& reply, std::shared_ptr<Slots> slots,
                                             size_t texts) {
  const Pool::Reservation& res = slots->reservation;
  auto malformed = [&](const char* what) {
    return Status(Code::kIoError, std::string("tokenize service sent a malformed answer (") + what + ")");
  };
  wire::Reader r{reply.span()};
  wire::ResultHeader rh;
  if (!r.get(rh) || rh.texts != texts || rh.ids > res.count) return malformed("header");
  std::vector<uint64_t> offsets;
  std::vector<Status> errors(texts);
  offsets.reserve(texts + 1);
  uint64_t expect = 0;
  std::vector<std::pair<size_t, int32_t>> failed;  // text, code
  for (size_t i = 0; i < texts; ++i) {
    wire::TextResult t;
    if (!r.get(t) || t.offset != expect) return malformed("offsets");
    offsets.push_back(t.offset);
    expect += t.length;
    if (t.code != 0) failed.emplace_back(i, t.code);
  }
  if (expect != rh.ids) return malformed("total");
  offsets.push_back(expect);
  int32_t* base = res.slab->memory.data() + res.first;
  if (slots->pool->in_band) {
    std::span<const uint8_t> ids;
    if (!r.take(rh.ids * sizeof(int32_t), ids)) return malformed("ids");
    if (!ids.empty()) std::memcpy(base, ids.data(), ids.size());
  }
  for (auto [i, code] : failed) {
    uint32_t len = 0;
    std::span<const uint8_t> msg;
    if (!r.get(len) || !r.take(len, msg)) return malformed("messages");
    errors[i] = Status(static_cast<Code>(code), std::string(reinterpret_cast<const char*>(msg.data()), msg.size()));
  }
  const MemoryKind kind = res.slab->kind;
  return EncodedBatch(std::move(slots), {base, rh.ids}, std::move(offsets), std::move(errors),
                      {rh.queued_before, rh.queue_ns, rh.tokenize_ns, rh.cpu_ns, rh.put_ns}, kind);
}

Result<EncodedBatch> RemoteTokenizer::encode_batch(std::span<const std::string_view> texts, const OffloadOptions& options,
                                                   Deadline deadline) {
  OB_ASSIGN_OR_RETURN(Request req, prepare(texts, options, deadline));
  OB_ASSIGN_OR_RETURN(Buffer reply, call(connection_, req.bytes.span(), deadline));
  return finish(reply, std::move(req.slots), req.texts);
}

Status RemoteTokenizer::submit(std::span<const std::string_view> texts, const OffloadOptions& options,
                               Deadline deadline, EncodeDone done, Connection::Credit credit) {
  OB_ASSIGN_OR_RETURN(Request req, prepare(texts, options, deadline));
  return connection_.submit(
      kService, std::move(req.bytes), deadline,
      [slots = std::move(req.slots), n = req.texts, done = std::move(done)](Result<Buffer> reply) {
        if (!reply.ok()) return done(reply.status());
        done(finish(reply.value(), slots, n));
      },
      credit);
}

}  // namespace outboard
