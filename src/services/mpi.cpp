// `mpi`: collectives handed off by the ranks of MPI jobs (src/mpi, the interposer). A collective
// runs once every rank of its communicator has posted it: the agent reads each rank's input from
// its registered memory, combines it, writes each rank's result into its memory, and answers
// every rank. Ranks of one job share this session (one token), so one instance sees them all.

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "services/builtin.h"
#include "services/mpi_wire.h"

namespace outboard::services {
namespace {

using namespace mpi_wire;

// How long one read or write of a rank's memory may take (a rank that stops reading its end
// fails the collective instead of holding the agent).
constexpr int64_t kTransferTimeoutMs = 10'000;
// Imports kept per connection for regions the rank keeps (kKeep): the interposer posts one
// staging region again and again, and importing maps it anew (shared memory) each time.
constexpr size_t kKeptImportsPerConnection = 8;

struct Member {
  Post post;
  Responder responder;
  std::shared_ptr<Connection> peer;
  // Imported when the collective runs. Shared with the connection's kept imports: a rank that
  // leaves mid-collective drops those, and this collective still holds what it reads.
  std::shared_ptr<const RemoteRegion> send, recv;
};

struct Pending {
  std::vector<std::optional<Member>> ranks;  // by rank in the communicator
  uint32_t arrived = 0;
};

std::string where(const Post& p) {
  return "mpi: " + std::string(coll_name(p.coll)) + " #" + std::to_string(p.seq) + " on communicator " +
         std::to_string(p.comm);
}

// Integers wrap (two's complement, as the MPI libraries' sums do in practice): a rank's values
// may overflow, and signed overflow in the agent would be undefined behaviour.
template <typename T>
T wrapping(T a, T b, bool multiply) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(multiply ? static_cast<U>(static_cast<U>(a) * static_cast<U>(b))
                                   : static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return multiply ? a * b : a + b;
  }
}

template <typename T>
void combine(Reduce op, uint8_t* acc, const uint8_t* in, size_t bytes) {
  for (size_t at = 0; at < bytes; at += sizeof(T)) {
    T a, b;
    std::memcpy(&a, acc + at, sizeof(T));
    std::memcpy(&b, in + at, sizeof(T));
    switch (op) {
      case Reduce::kSum: a = wrapping(a, b, false); break;
      case Reduce::kMin: a = std::min(a, b); break;
      case Reduce::kMax: a = std::max(a, b); break;
      case Reduce::kProd: a = wrapping(a, b, true); break;
      case Reduce::kNone: break;
    }
    std::memcpy(acc + at, &a, sizeof(T));
  }
}

// acc = acc (op) in, element by element: a fixed order of operands, so floating-point sums are
// the same on every run (rank 0's input, then rank 1's, ...).
void reduce_into(Elem e, Reduce op, uint8_t* acc, const uint8_t* in, size_t bytes) {
  switch (e) {
    case Elem::kI32: return combine<int32_t>(op, acc, in, bytes);
    case Elem::kI64: return combine<int64_t>(op, acc, in, bytes);
    case Elem::kF32: return combine<float>(op, acc, in, bytes);
    case Elem::kF64: return combine<double>(op, acc, in, bytes);
    case Elem::kBytes: return;
  }
}

class Mpi final : public Service {
 public:
  explicit Mpi(MpiServiceConfig config) : config_(config) {}
  std::string name() const override { return "mpi"; }
  void attach(ServiceHost& host) override { host_ = &host; }

  void handle(ServiceRequest r) override {
    auto decoded = decode(r.payload.span());
    if (!decoded.ok()) return r.responder.fail(decoded.status());
    Post post = std::move(decoded).value();
    const uint32_t conn = r.peer->id();
    if (in_flight_[conn] >= config_.max_pending)
      return r.responder.fail({Code::kTooBig, where(post) + ": this rank already has " +
                                                  std::to_string(in_flight_[conn]) +
                                                  " collectives waiting for their other ranks (limit " +
                                                  std::to_string(config_.max_pending) + ", agent option --mpi-max-pending)"});
    if (auto comm = comms_.find(post.comm); comm != comms_.end() && comm->second.left)
      return r.responder.fail(left(post, *comm->second.left));
    const std::pair key{post.comm, post.seq};
    Pending& op = pending_[key];
    if (op.ranks.empty()) op.ranks.resize(post.size);
    if (op.ranks.size() != post.size)
      return r.responder.fail({Code::kInvalidArgument, where(post) + ": rank " + std::to_string(post.rank) + " counts " +
                                                           std::to_string(post.size) + " ranks, an earlier rank " +
                                                           std::to_string(op.ranks.size())});
    if (op.ranks[post.rank])
      return r.responder.fail({Code::kInvalidArgument, where(post) + ": rank " + std::to_string(post.rank) +
                                                           " posted it twice"});
    comms_[post.comm].ranks[post.rank] = conn;
    ++in_flight_[conn];
    ++op.arrived;
    const uint32_t size = post.size;
    op.ranks[post.rank] = Member{std::move(post), std::move(r.responder), std::move(r.peer), {}, {}};
    if (op.arrived < size) return;
    for (auto& m : op.ranks) --in_flight_[m->peer->id()];
    ready_.push_back(std::move(op.ranks));
    pending_.erase(key);
    // A collective's reads and writes progress the channel, which may hand this service the
    // posts that complete another: that one runs after, not inside, so collectives run one at
    // a time in the order they became complete.
    if (running_) return;
    running_ = true;
    while (!ready_.empty()) {
      auto ranks = std::move(ready_.front());
      ready_.pop_front();
      const Status st = run(ranks);
      for (auto& m : ranks) {
        if (st.ok()) m->responder.respond({});
        else m->responder.fail(st);
      }
    }
    running_ = false;
  }

  // A rank that leaves fails every collective of its communicators that is waiting, and every one
  // posted on them later (its posts may overtake the others'): the others hear why instead of
  // waiting for it.
  void on_disconnect(uint32_t conn) override {
    in_flight_.erase(conn);
    kept_.erase(conn);
    for (auto comm = comms_.begin(); comm != comms_.end();) {
      Comm& c = comm->second;
      auto rank = std::find_if(c.ranks.begin(), c.ranks.end(), [&](auto& m) { return m.second == conn; });
      if (rank == c.ranks.end()) {
        ++comm;
        continue;
      }
      if (!c.left) c.left = rank->first;
      c.ranks.erase(rank);
      for (auto op = pending_.lower_bound({comm->first, 0}); op != pending_.end() && op->first.first == comm->first;) {
        for (auto& m : op->second.ranks) {
          if (!m || m->peer->id() == conn) continue;
          --in_flight_[m->peer->id()];
          m->responder.fail(left(m->post, *c.left));
        }
        op = pending_.erase(op);
      }
      comm = c.ranks.empty() ? comms_.erase(comm) : std::next(comm);
    }
  }

 private:
  static Status left(const Post& post, uint32_t rank) {
    return {Code::kConnectionReset,
            where(post) + ": rank " + std::to_string(rank) + " left (its connection closed) before the collective ran"};
  }

  // Every rank posted the same collective; alltoallv's sent and received counts pair up.
  static Status agree(std::vector<std::optional<Member>>& ranks) {
    const Post& a = ranks[0]->post;
    for (auto& m : ranks) {
      const Post& b = m->post;
      if (b.coll != a.coll || b.elem != a.elem || b.reduce != a.reduce || b.root != a.root ||
          (a.coll != Coll::kAlltoallv && b.bytes != a.bytes))
        return {Code::kInvalidArgument,
                where(b) + ": rank " + std::to_string(b.rank) + " posted " + std::string(coll_name(b.coll)) + " of " +
                    std::to_string(b.bytes) + " B (element " + std::to_string(int(b.elem)) + ", op " +
                    std::to_string(int(b.reduce)) + ", root " + std::to_string(b.root) + "), rank 0 " +
                    std::string(coll_name(a.coll)) + " of " + std::to_string(a.bytes) + " B (element " +
                    std::to_string(int(a.elem)) + ", op " + std::to_string(int(a.reduce)) + ", root " +
                    std::to_string(a.root) + ")"};
    }
    if (a.coll != Coll::kAlltoallv) return {};
    for (auto& from : ranks)
      for (auto& to : ranks) {
        const uint64_t sent = sends_of(from->post)[to->post.rank], got = to->post.recv_counts[from->post.rank];
        if (sent != got)
          return {Code::kInvalidArgument, where(a) + ": rank " + std::to_string(from->post.rank) + " sends " +
                                              std::to_string(sent) + " B to rank " + std::to_string(to->post.rank) +
                                              ", which expects " + std::to_string(got) + " B"};
      }
    return {};
  }

  // In place, a rank's input is its receive buffer, laid out as its output is.
  static const std::vector<uint64_t>& sends_of(const Post& p) { return p.in_place ? p.recv_counts : p.send_counts; }
  static const std::vector<uint64_t>& send_displs_of(const Post& p) {
    return p.in_place ? p.recv_displs : p.send_displs;
  }

  // Error text is built only for an error: these run for every block of every collective.
  static Status read(Member& m, bool from_recv, uint64_t offset, std::span<uint8_t> out) {
    if (out.empty()) return {};
    const uint64_t base = from_recv ? m.post.recv_offset : m.post.send_offset;
    Status st = m.peer->get(from_recv ? *m.recv : *m.send, base + offset, out, Deadline::after_ms(kTransferTimeoutMs));
    if (st.ok()) return st;
    return st.with_context(where(m.post) + ": reading rank " + std::to_string(m.post.rank) + "'s input");
  }
  static Status write(Member& m, uint64_t offset, std::span<const uint8_t> in) {
    if (in.empty()) return {};
    Status st = m.peer->put(*m.recv, m.post.recv_offset + offset, in, Deadline::after_ms(kTransferTimeoutMs));
    if (st.ok()) return st;
    return st.with_context(where(m.post) + ": writing rank " + std::to_string(m.post.rank) + "'s result");
  }

  // The rank's region for `descriptor`: kept regions are imported once per connection (the
  // oldest of kKeptImportsPerConnection goes first), the rest for this collective only.
  Result<std::shared_ptr<const RemoteRegion>> imported(const Member& m, const std::vector<uint8_t>& descriptor) {
    if (!m.post.keep) {
      OB_ASSIGN_OR_RETURN(RemoteRegion region, m.peer->import_region(descriptor));
      return std::make_shared<const RemoteRegion>(std::move(region));
    }
    auto& kept = kept_[m.peer->id()];
    for (auto& [bytes, region] : kept)
      if (bytes == descriptor) return region;
    OB_ASSIGN_OR_RETURN(RemoteRegion region, m.peer->import_region(descriptor));
    if (kept.size() == kKeptImportsPerConnection) kept.erase(kept.begin());
    kept.emplace_back(descriptor, std::make_shared<const RemoteRegion>(std::move(region)));
    return kept.back().second;
  }

  Status run(std::vector<std::optional<Member>>& ranks) {
    OB_RETURN_IF_ERROR(agree(ranks));
    for (auto& m : ranks) {
      if (!m->post.send_region.empty()) {
        OB_ASSIGN_OR_RETURN(m->send, imported(*m, m->post.send_region));
      }
      if (!m->post.recv_region.empty()) {
        OB_ASSIGN_OR_RETURN(m->recv, imported(*m, m->post.recv_region));
      }
    }
    if (direct(ranks)) return ranks[0]->post.coll == Coll::kAllreduce ? reduce_across(ranks) : copy_across(ranks);
    const Post& a = ranks[0]->post;
    const uint64_t n = ranks.size();
    // Every input is read before any result is written: in place, the result overwrites it.
    uint64_t staged = 0;
    for (auto& m : ranks)
      switch (a.coll) {
        case Coll::kAlltoall: staged += n * a.bytes; break;
        case Coll::kAlltoallv: for (uint64_t c : sends_of(m->post)) staged += c; break;
        case Coll::kAllgather: case Coll::kAllreduce: staged += a.bytes; break;
        case Coll::kBcast: staged = a.bytes; break;
      }
    if (Status st = host_->reserve_memory(staged, "staging"); !st.ok()) return st.with_context(where(a));
    std::vector<std::vector<uint8_t>> in(n);
    Status st = stage(ranks, in);
    if (st.ok()) st = deliver(ranks, in);
    host_->release_memory(staged);
    return st;
  }

  // Every output is mapped here, and so is every input of an allreduce, which may be in place
  // (the other collectives may not: their copies would overwrite inputs not yet read). Then no
  // byte is staged: blocks go straight from input to output, and allreduce combines in rank 0's
  // output (below).
  static bool direct(const std::vector<std::optional<Member>>& ranks) {
    const bool reduces = ranks[0]->post.coll == Coll::kAllreduce;
    return std::none_of(ranks.begin(), ranks.end(), [&](auto& m) {
      if (m->recv && !m->recv->mapped()) return true;
      return reduces ? m->send && !m->send->mapped() : m->post.in_place;
    });
  }

  static Result<std::span<uint8_t>> output(Member& m, uint64_t at, uint64_t bytes) {
    auto out = m.recv->mapped_span(m.post.recv_offset + at, bytes);
    if (out.ok()) return out;
    return out.status().with_context(where(m.post) + ": rank " + std::to_string(m.post.rank) + "'s result");
  }

  // Rank 0's output becomes the sum: rank 0's input, then combined with rank 1's, ... (the staged
  // order); then it is copied to the other outputs. An input in place is read before its output is
  // written: only rank 0's output is written until every input is in.
  static Status reduce_across(std::vector<std::optional<Member>>& ranks) {
    const Post& a = ranks[0]->post;
    if (a.bytes == 0) return {};
    OB_ASSIGN_OR_RETURN(std::span<uint8_t> sum, output(*ranks[0], 0, a.bytes));
    if (!a.in_place) OB_RETURN_IF_ERROR(read(*ranks[0], false, 0, sum));
    for (size_t i = 1; i < ranks.size(); ++i) {
      Member& m = *ranks[i];
      auto in = m.post.in_place ? output(m, 0, a.bytes) : m.send->mapped_span(m.post.send_offset, a.bytes);
      if (!in.ok()) return in.status().with_context(where(m.post) + ": rank " + std::to_string(m.post.rank) + "'s input");
      reduce_into(a.elem, a.reduce, sum.data(), in.value().data(), a.bytes);
    }
    for (size_t j = 1; j < ranks.size(); ++j) {
      OB_ASSIGN_OR_RETURN(std::span<uint8_t> out, output(*ranks[j], 0, a.bytes));
      std::memcpy(out.data(), sum.data(), a.bytes);
    }
    return {};
  }

  // `bytes` of `from`'s input at `offset` (its receive buffer where `from_recv`: bcast's root)
  // into `to`'s output at `at`.
  static Status copy(Member& from, bool from_recv, uint64_t offset, Member& to, uint64_t at, uint64_t bytes) {
    if (bytes == 0) return {};
    OB_ASSIGN_OR_RETURN(std::span<uint8_t> out, output(to, at, bytes));
    return read(from, from_recv, offset, out);
  }

  static Status copy_across(std::vector<std::optional<Member>>& ranks) {
    const Post& a = ranks[0]->post;
    const uint64_t n = ranks.size();
    for (uint64_t j = 0; j < n; ++j)
      for (uint64_t i = 0; i < n; ++i) {
        Member &from = *ranks[i], &to = *ranks[j];
        switch (a.coll) {
          case Coll::kAlltoall: OB_RETURN_IF_ERROR(copy(from, false, j * a.bytes, to, i * a.bytes, a.bytes)); break;
          case Coll::kAlltoallv:
            OB_RETURN_IF_ERROR(copy(from, false, from.post.send_displs[j], to, to.post.recv_displs[i],
                                    from.post.send_counts[j]));
            break;
          case Coll::kAllgather: OB_RETURN_IF_ERROR(copy(from, false, 0, to, i * a.bytes, a.bytes)); break;
          case Coll::kBcast:
            if (i == a.root && j != a.root) OB_RETURN_IF_ERROR(copy(from, true, 0, to, 0, a.bytes));
            break;
          case Coll::kAllreduce: break;  // never direct()
        }
      }
    return {};
  }

  static Status stage(std::vector<std::optional<Member>>& ranks, std::vector<std::vector<uint8_t>>& in) {
    const Post& a = ranks[0]->post;
    const uint64_t n = ranks.size();
    for (uint64_t i = 0; i < n; ++i) {
      Member& m = *ranks[i];
      const bool own = m.post.in_place;
      switch (a.coll) {
        case Coll::kAlltoall:
          in[i].resize(n * a.bytes);
          OB_RETURN_IF_ERROR(read(m, own, 0, in[i]));
          break;
        case Coll::kAlltoallv: {
          uint64_t total = 0;
          for (uint64_t c : sends_of(m.post)) total += c;
          in[i].resize(total);
          for (uint64_t j = 0, at = 0; j < n; at += sends_of(m.post)[j], ++j)
            OB_RETURN_IF_ERROR(
                read(m, own, send_displs_of(m.post)[j], std::span(in[i]).subspan(at, sends_of(m.post)[j])));
          break;
        }
        case Coll::kAllgather:
          in[i].resize(a.bytes);
          OB_RETURN_IF_ERROR(read(m, own, own ? i * a.bytes : 0, in[i]));
          break;
        case Coll::kBcast:
          if (i != a.root) break;
          in[i].resize(a.bytes);
          OB_RETURN_IF_ERROR(read(m, true, 0, in[i]));
          break;
        case Coll::kAllreduce:
          in[i].resize(a.bytes);
          OB_RETURN_IF_ERROR(read(m, own, 0, in[i]));
          break;
      }
    }
    return {};
  }

  static Status deliver(std::vector<std::optional<Member>>& ranks, std::vector<std::vector<uint8_t>>& in) {
    const Post& a = ranks[0]->post;
    const uint64_t n = ranks.size();
    if (a.coll == Coll::kAllreduce)
      for (uint64_t i = 1; i < n; ++i) reduce_into(a.elem, a.reduce, in[0].data(), in[i].data(), a.bytes);
    for (uint64_t j = 0; j < n; ++j) {
      Member& to = *ranks[j];
      switch (a.coll) {
        case Coll::kAlltoall:
          for (uint64_t i = 0; i < n; ++i)
            OB_RETURN_IF_ERROR(write(to, i * a.bytes, std::span(in[i]).subspan(j * a.bytes, a.bytes)));
          break;
        case Coll::kAlltoallv:
          for (uint64_t i = 0; i < n; ++i) {
            const auto& sent = sends_of(ranks[i]->post);
            uint64_t at = 0;
            for (uint64_t k = 0; k < j; ++k) at += sent[k];
            OB_RETURN_IF_ERROR(write(to, to.post.recv_displs[i], std::span(in[i]).subspan(at, sent[j])));
          }
          break;
        case Coll::kAllgather:
          for (uint64_t i = 0; i < n; ++i) OB_RETURN_IF_ERROR(write(to, i * a.bytes, in[i]));
          break;
        case Coll::kBcast:
          if (j != a.root) OB_RETURN_IF_ERROR(write(to, 0, in[a.root]));
          break;
        case Coll::kAllreduce:
          OB_RETURN_IF_ERROR(write(to, 0, in[0]));
          break;
      }
    }
    // The answers may overtake writes that UCX carries (a small answer goes through the ring):
    // every result is in place before any rank hears that it is. A mapped region was written by
    // CPU copies already ordered before the answer's release store: no round trip for those.
    for (auto& m : ranks)
      if (m->recv && !m->recv->mapped())
        OB_RETURN_IF_ERROR(m->peer->flush(Deadline::after_ms(kTransferTimeoutMs))
                             .with_context(where(m->post) + ": completing rank " + std::to_string(m->post.rank) +
                                           "'s writes"));
    return {};
  }

  MpiServiceConfig config_;
  ServiceHost* host_ = nullptr;
  std::map<std::pair<uint64_t, uint64_t>, Pending> pending_;                     // (comm, seq) -> its posts
  struct Comm {
    std::unordered_map<uint32_t, uint32_t> ranks;  // rank -> connection, of the ranks still here
    std::optional<uint32_t> left;                  // the first of its ranks that left
  };
  std::unordered_map<uint64_t, Comm> comms_;  // by the job's name for the communicator
  std::unordered_map<uint32_t, uint32_t> in_flight_;                              // connection -> waiting posts
  std::deque<std::vector<std::optional<Member>>> ready_;  // complete collectives, in order
  bool running_ = false;                                  // one of them is running
  std::unordered_map<uint32_t, std::vector<std::pair<std::vector<uint8_t>, std::shared_ptr<const RemoteRegion>>>>
      kept_;  // connection -> imports of its kept regions, oldest first
};

}  // namespace

std::unique_ptr<Service> make_mpi(MpiServiceConfig config) { return std::make_unique<Mpi>(config); }

}  // namespace outboard::services
