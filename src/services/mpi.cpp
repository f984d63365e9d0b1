// `mpi`: collectives handed off by the ranks of MPI jobs (src/mpi, the interposer). A collective
// runs once every rank of its communicator has posted it: the agent reads each rank's input from
// its registered memory, combines it, writes each rank's result into its memory, and answers
// every rank. Ranks of one job share this session (one token), so one instance sees them all.
//
// Where the communicator's ranks are served by several agents (one per node or per rank), each
// agent stages its own ranks' inputs once they all posted, sends every other agent a share (the
// blocks that agent's ranks need), and delivers its ranks' results once every other agent's share
// came. Agents reach each other as clients of the same job session, over the network only.

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "services/builtin.h"
#include "outboard/log.h"
#include "services/mpi_p2p.h"
#include "services/mpi_wire.h"
#include "util/text.h"

namespace outboard::services {
namespace {

OB_LOG_MODULE("mpi");

using namespace mpi_wire;

constexpr int64_t kTransferTimeoutMs = kMpiTransferTimeoutMs;
// Imports kept per connection for regions the rank keeps (kKeep): the interposer posts one
// staging region again and again, and importing maps it anew (shared memory) each time.
constexpr size_t kKeptImportsPerConnection = 8;
// How long another agent may take to run a collective this one shared with it (it answers the
// share then): its ranks' own timeouts end a job stuck longer.
constexpr int64_t kShareTimeoutMs = 3'600'000;

// A block between two ranks whose memory this agent does not map goes through its memory in
// pieces of at most this.
constexpr uint64_t kBounceBytes = 1 << 20;

// Watches another agent's may hold here: one per agent of the job.
constexpr size_t kMaxWatches = kMaxRanks;

// Spanning collectives that failed here, remembered so that a share coming later fails at once
// (its sender then fails the collective too, instead of waiting for this agent's share).
constexpr size_t kRememberedFailures = 256;

using Key = std::pair<uint64_t, uint64_t>;  // (comm, seq)

struct Member {
  Post post;
  Responder responder;
  std::shared_ptr<Connection> peer;
  // Imported when the collective runs. Shared with the connection's kept imports: a rank that
  // leaves mid-collective drops those, and this collective still holds what it reads.
  std::shared_ptr<const RemoteRegion> send, recv;
};

// Another agent's share of a collective: its blocks are a view into `payload`.
struct Received {
  Share share;
  Buffer payload;
  Responder responder;  // answered once this agent ran the collective, or failed it
  uint32_t conn = 0;    // the connection it came on
};

struct Pending {
  std::vector<std::optional<Member>> ranks;  // by rank in the communicator; other agents' stay empty
  uint32_t arrived = 0, local = 0;           // posts in, and this agent's ranks
  // Spanning several agents: which one this is, the others' shares, this agent's ranks' inputs.
  uint32_t me = 0;
  std::map<uint32_t, Received> shares;
  // Shares coming in pieces, by agent: the whole share's buffer (reserved) and how much came.
  std::map<uint32_t, std::pair<Received, uint64_t>> pieces;
  std::vector<std::vector<uint8_t>> in;          // staged (packed by destination), or
  std::vector<std::span<const uint8_t>> views;   // where every input is mapped: read in place
  uint64_t reserved = 0;
  bool early = false;           // neither: this agent's blocks went to its ranks when shared
  bool shared = false;          // inputs staged and shared
  bool busy = false;            // a step of it runs now: failures wait in `failed` until it returns
  std::optional<Status> failed;
};

// What runs next: a collective of one agent (its posts), or the next step of a spanning one.
struct Work {
  std::vector<std::optional<Member>> ranks;
  Key key{};
};

// Another agent, as a client of the same job session on it.
struct Peer {
  struct Request {
    Buffer message;
    AgentAnswered answered;
    bool awaited;
  };
  std::shared_ptr<Connection> conn;
  bool connecting = false;
  uint32_t unanswered = 0;  // awaited requests sent, not yet answered: the connection stays open for them
  std::vector<Request> waiting;  // requests to send once connected
};

template <typename Message>  // Post or Share
std::string where(const Message& p) {
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

// out = a (op) b, element by element; out may be a. The op is chosen once per call, not per
// element, so the loop vectorizes (1 MiB of doubles: 66 against 232 µs with the copy it saves).
template <typename T, typename Op>
void combine(uint8_t* out, const uint8_t* a, const uint8_t* b, size_t bytes, Op op) {
  for (size_t at = 0; at < bytes; at += sizeof(T)) {
    T x, y;
    std::memcpy(&x, a + at, sizeof(T));
    std::memcpy(&y, b + at, sizeof(T));
    const T r = op(x, y);
    std::memcpy(out + at, &r, sizeof(T));
  }
}

template <typename T>
void combine(Reduce op, uint8_t* out, const uint8_t* a, const uint8_t* b, size_t bytes) {
  switch (op) {
    case Reduce::kSum: return combine<T>(out, a, b, bytes, [](T x, T y) { return wrapping(x, y, false); });
    case Reduce::kMin: return combine<T>(out, a, b, bytes, [](T x, T y) { return std::min(x, y); });
    case Reduce::kMax: return combine<T>(out, a, b, bytes, [](T x, T y) { return std::max(x, y); });
    case Reduce::kProd: return combine<T>(out, a, b, bytes, [](T x, T y) { return wrapping(x, y, true); });
    case Reduce::kNone: return;
  }
}

// out = in(0) (op) in(1) (op) ... (op) in(n - 1), element by element in that fixed order of
// operands, so floating-point sums are the same on every run. in(0) may lie at out; in(i) gives a
// span of p.bytes or why not.
template <typename Inputs>
Status reduce_all(const Post& p, size_t n, uint8_t* out, const Inputs& in) {
  OB_ASSIGN_OR_RETURN(std::span<const uint8_t> first, in(0));
  if (n == 1 && first.data() != out) std::memcpy(out, first.data(), p.bytes);
  for (size_t i = 1; i < n; ++i) {
    OB_ASSIGN_OR_RETURN(std::span<const uint8_t> next, in(i));
    const uint8_t* acc = i == 1 ? first.data() : out;
    switch (p.elem) {
      case Elem::kI32: combine<int32_t>(p.reduce, out, acc, next.data(), p.bytes); break;
      case Elem::kI64: combine<int64_t>(p.reduce, out, acc, next.data(), p.bytes); break;
      case Elem::kF32: combine<float>(p.reduce, out, acc, next.data(), p.bytes); break;
      case Elem::kF64: combine<double>(p.reduce, out, acc, next.data(), p.bytes); break;
      case Elem::kBytes: break;
    }
  }
  return {};
}

class Mpi final : public Service {
 public:
  explicit Mpi(MpiServiceConfig config) : config_(config) {}
  ~Mpi() override {
    for (auto& [address, t] : connecting_) t.join();
  }
  std::string name() const override { return "mpi"; }
  void attach(ServiceHost& host) override {
    host_ = &host;
    p2p_ = std::make_unique<MpiPointToPoint>(
        host, config_.p2p, [this](const std::string& address, const std::string& token, Buffer message,
                                  AgentAnswered answered, bool awaited) {
          to_agent(address, token, std::move(message), std::move(answered), awaited);
        });
  }

  void handle(ServiceRequest r) override {
    auto kind = kind_of(r.payload.span());
    if (!kind.ok()) return r.responder.fail(kind.status());
    if (*kind == Kind::kShare) return take_share(std::move(r));
    if (*kind == Kind::kSharePiece) return take_share_piece(std::move(r));
    if (*kind == Kind::kReach) return reach(std::move(r));
    if (*kind == Kind::kWatch) return hold_watch(std::move(r));
    if (*kind == Kind::kForward) {
      auto forward = decode_forward(r.payload.span());
      if (!forward.ok()) return r.responder.fail(forward.status());
      return p2p_->forwarded(std::move(r), std::move(forward).value());
    }
    if (*kind >= Kind::kSend) {
      auto message = decode_p2p(r.payload.span());
      if (!message.ok()) return r.responder.fail(message.status());
      return p2p_->handle(std::move(r), std::move(message).value());
    }
    auto decoded = decode(r.payload.span());
    if (!decoded.ok()) return r.responder.fail(decoded.status());
    Post post = std::move(decoded).value();
    const uint32_t conn = r.peer->id();
    if (auto kept = kept_.find(conn); kept != kept_.end())
      std::erase_if(kept->second, [&](const auto& k) {
        return std::find(post.freed.begin(), post.freed.end(), k.first) != post.freed.end();
      });
    if (in_flight_[conn] >= config_.max_pending)
      return r.responder.fail({Code::kTooBig, where(post) + ": this rank already has " +
                                                  std::to_string(in_flight_[conn]) +
                                                  " collectives waiting for their other ranks (limit " +
                                                  std::to_string(config_.max_pending) + ", agent option --mpi-max-pending)"});
    if (auto comm = comms_.find(post.comm); comm != comms_.end() && comm->second.left)
      return r.responder.fail(left(post, *comm->second.left));
    const Key key{post.comm, post.seq};
    Pending& op = pending_[key];
    const uint32_t me = post.agents.empty() ? 0 : post.agent_of[post.rank];
    if (op.ranks.empty()) {
      op.ranks.resize(post.size);
      op.me = me;
      op.local = post.agents.empty() ? post.size
                                     : static_cast<uint32_t>(std::count(post.agent_of.begin(), post.agent_of.end(), me));
    }
    if (op.ranks.size() != post.size || op.me != me)
      return r.responder.fail({Code::kInvalidArgument, where(post) + ": rank " + std::to_string(post.rank) + " counts " +
                                                           std::to_string(post.size) + " ranks served by agent " +
                                                           std::to_string(me) + ", an earlier rank " +
                                                           std::to_string(op.ranks.size()) + " by agent " +
                                                           std::to_string(op.me)});
    if (op.ranks[post.rank] || op.arrived == op.local)
      return r.responder.fail({Code::kInvalidArgument, where(post) + ": rank " + std::to_string(post.rank) +
                                                           (op.ranks[post.rank] ? " posted it twice"
                                                                                : " posted it after this agent's ranks")});
    comms_[post.comm].ranks[post.rank] = conn;
    ++in_flight_[conn];
    ++op.arrived;
    const bool spans = !post.agents.empty();
    op.ranks[post.rank] = Member{std::move(post), std::move(r.responder), std::move(r.peer), {}, {}};
    if (op.arrived < op.local) return;
    for (auto& m : op.ranks)
      if (m) --in_flight_[m->peer->id()];
    if (spans) {
      ready_.push_back({{}, key});
    } else {
      ready_.push_back({std::move(op.ranks), {}});
      host_->release_memory(op.reserved);  // pieces of a share sent for a collective no other agent serves
      pending_.erase(key);
    }
    drain();
  }

  // A rank that leaves fails every collective of its communicators that is waiting, and every one
  // posted on them later (its posts may overtake the others'): the others hear why instead of
  // waiting for it. When this agent's last rank leaves, its connections to other agents close
  // (each once the shares sent on it are answered).
  void on_disconnect(uint32_t conn) override {
    p2p_->on_disconnect(conn);
    std::erase_if(watches_, [&](const auto& w) { return w.first == conn; });
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
        if (op->second.busy || (op->second.local && op->second.arrived == op->second.local)) {
          ++op;  // running or waiting for other agents: its own reads, writes or answers fail
          continue;
        }
        for (auto& m : op->second.ranks) {
          if (!m || m->peer->id() == conn) continue;
          --in_flight_[m->peer->id()];
          m->responder.fail(left(m->post, *c.left));
        }
        for (auto& [from, got] : op->second.shares) got.responder.fail(left(got.share, *c.left));
        host_->release_memory(op->second.reserved);  // shares coming in pieces
        op = pending_.erase(op);
      }
      comm = c.ranks.empty() ? comms_.erase(comm) : std::next(comm);
    }
    if (ranks_gone()) close_idle_peers();
  }

 private:
  template <typename Message>
  static Status left(const Message& m, uint32_t rank) {
    return {Code::kConnectionReset,
            where(m) + ": rank " + std::to_string(rank) + " left (its connection closed) before the collective ran"};
  }

  static const Post& first(const std::vector<std::optional<Member>>& ranks) {
    return std::find_if(ranks.begin(), ranks.end(), [](auto& m) { return m.has_value(); })->value().post;
  }

  void drain() {
    if (running_) return;
    running_ = true;
    while (!ready_.empty()) {
      Work w = std::move(ready_.front());
      ready_.pop_front();
      if (w.ranks.empty()) {
        step(w.key);
        continue;
      }
      const Status st = run(w.ranks);
      for (auto& m : w.ranks) {
        if (st.ok()) m->responder.respond({});
        else m->responder.fail(st);
      }
    }
    running_ = false;
  }

  // Another agent's watch: held unanswered for as long as this service lives (its end fails it).
  void hold_watch(ServiceRequest r) {
    if (Status st = decode_watch(r.payload.span()); !st.ok()) return r.responder.fail(st);
    if (watches_.size() >= kMaxWatches)
      return r.responder.fail({Code::kTooBig, "mpi: " + std::to_string(watches_.size()) +
                                                  " watches held already (one per agent of the job, at most " +
                                                  std::to_string(kMaxWatches) + ")"});
    watches_.emplace_back(r.peer->id(), std::move(r.responder));
  }

  // Whether this agent reads the rank's memory through the region it names (its answer is the
  // rank's choice between handing over its buffers so and staging them).
  static void reach(ServiceRequest r) {
    auto decoded = decode_reach(r.payload.span());
    if (!decoded.ok()) return r.responder.fail(decoded.status());
    auto region = r.peer->import_region(decoded->region);
    if (!region.ok()) return r.responder.fail(region.status().with_context("mpi: reaching the rank's memory"));
    uint64_t seen = 0;
    const Status st =
        r.peer->get(*region, 0, {reinterpret_cast<uint8_t*>(&seen), sizeof seen}, Deadline::after_ms(kTransferTimeoutMs));
    if (!st.ok()) return r.responder.fail(st.with_context("mpi: reaching the rank's memory"));
    if (seen != decoded->value)
      return r.responder.fail({Code::kIoError, "mpi: reaching the rank's memory: read " + std::to_string(seen) +
                                                   " where the rank wrote " + std::to_string(decoded->value)});
    r.responder.respond({});
  }

  // Another agent's share: kept until this agent's ranks all posted and shared theirs.
  void take_share(ServiceRequest r) {
    auto decoded = decode_share(r.payload.span());
    if (!decoded.ok()) return r.responder.fail(decoded.status());
    Share share = std::move(decoded).value();
    const uint32_t conn = r.peer->id();
    if (in_flight_[conn] >= config_.max_pending)
      return r.responder.fail({Code::kTooBig, where(share) + ": agent " + std::to_string(share.from) + " already has " +
                                                  std::to_string(in_flight_[conn]) + " shares waiting here (limit " +
                                                  std::to_string(config_.max_pending) + ", agent option --mpi-max-pending)"});
    if (auto comm = comms_.find(share.comm); comm != comms_.end() && comm->second.left)
      return r.responder.fail(left(share, *comm->second.left));
    const Key key{share.comm, share.seq};
    if (auto failed = std::find_if(failed_.begin(), failed_.end(), [&](auto& f) { return f.first == key; });
        failed != failed_.end())
      return r.responder.fail(failed->second);
    Pending& op = pending_[key];
    if (op.shares.count(share.from) || op.pieces.count(share.from))
      return r.responder.fail({Code::kInvalidArgument, where(share) + ": agent " + std::to_string(share.from) + " shared it twice"});
    ++in_flight_[conn];
    if (share.first_piece) return begin_pieces(key, op, std::move(share), std::move(r.responder), conn);
    add_share(key, op, Received{std::move(share), std::move(r.payload), std::move(r.responder), conn});
  }

  void add_share(Key key, Pending& op, Received got) {
    const uint32_t from = got.share.from;
    OB_LOG_DBG("%s: share %zu from agent %u", where(got.share).c_str(), op.shares.size() + 1, from);
    op.shares.emplace(from, std::move(got));
    if (op.shared && !op.busy && all_shared(op)) {
      ready_.push_back({{}, key});
      drain();
    }
  }

  // The first piece of a share too large for one message: the whole share's memory is reserved
  // now (a failure fails the collective here too), and the share counts once its last piece is in.
  void begin_pieces(Key key, Pending& op, Share share, Responder responder, uint32_t conn) {
    uint64_t total = 0;
    for (uint64_t n : share.lengths) total += n;  // within 64 bits: decode_share checked
    if (Status st = host_->reserve_memory(total, "mpi share in pieces"); !st.ok()) {
      st = st.with_context(where(share) + ": agent " + std::to_string(share.from) + "'s share of " +
                           std::to_string(total) + " B");
      --in_flight_[conn];
      responder.fail(st);
      return finish(key, st);
    }
    op.reserved += total;
    Buffer whole(total);
    std::copy(share.data.begin(), share.data.end(), whole.data());
    const uint64_t came = share.data.size();
    share.data = whole.span();
    const uint32_t from = share.from;
    op.pieces.emplace(from, std::pair{Received{std::move(share), std::move(whole), {}, conn}, came});
    responder.respond({});
  }

  // The next piece of a share: in order after the last, within the share; the last one makes it whole.
  void take_share_piece(ServiceRequest r) {
    auto decoded = decode_share_piece(r.payload.span());
    if (!decoded.ok()) return r.responder.fail(decoded.status());
    const SharePiece& piece = *decoded;
    const Key key{piece.comm, piece.seq};
    if (auto failed = std::find_if(failed_.begin(), failed_.end(), [&](auto& f) { return f.first == key; });
        failed != failed_.end())
      return r.responder.fail(failed->second);
    auto op = pending_.find(key);
    auto partial = op == pending_.end() ? decltype(op->second.pieces)::iterator{} : op->second.pieces.find(piece.from);
    if (op == pending_.end() || partial == op->second.pieces.end())
      return r.responder.fail({Code::kInvalidArgument, "mpi: a piece of collective #" + std::to_string(piece.seq) +
                                                           " on communicator " + std::to_string(piece.comm) +
                                                           " from agent " + std::to_string(piece.from) +
                                                           ", which sent no share of it in pieces"});
    auto& [got, came] = partial->second;
    const uint64_t total = got.payload.size();
    if (piece.offset != came || piece.data.size() > total - came) {
      const Status st{Code::kInvalidArgument, where(got.share) + ": agent " + std::to_string(piece.from) + "'s piece of " +
                                                  std::to_string(piece.data.size()) + " B at " +
                                                  std::to_string(piece.offset) + ", where its share of " +
                                                  std::to_string(total) + " B had " + std::to_string(came) + " in"};
      r.responder.fail(st);
      return finish(key, st);
    }
    std::copy(piece.data.begin(), piece.data.end(), got.payload.data() + came);
    came += piece.data.size();
    if (came < total) return r.responder.respond({});
    Received whole = std::move(got);
    whole.responder = std::move(r.responder);  // answered as a whole share is
    op->second.pieces.erase(partial);
    add_share(key, op->second, std::move(whole));
  }

  static bool all_shared(const Pending& op) { return op.shares.size() + 1 >= first(op.ranks).agents.size(); }

  // The next step of a spanning collective: this agent's ranks' inputs staged and shared, or
  // (every other agent's share in) its ranks' results delivered.
  void step(Key key) {
    auto it = pending_.find(key);
    if (it == pending_.end()) return;  // failed meanwhile
    Pending& op = it->second;
    const bool delivering = op.shared;
    op.busy = true;
    Status st = delivering ? deliver_spanning(op) : share_out(key, op);
    op.busy = false;
    if (st.ok() && op.failed) st = *op.failed;
    if (!st.ok() || delivering) return finish(key, st);
    op.shared = true;
    if (all_shared(op)) ready_.push_back({{}, key});
  }

  // Answers this agent's ranks and the other agents' shares of a spanning collective, and forgets it.
  void finish(Key key, const Status& st) {
    auto it = pending_.find(key);
    if (it == pending_.end()) return;
    Pending& op = it->second;
    if (op.busy) {  // a failure while a step runs: the step finishes it
      if (!op.failed) op.failed = st;
      return;
    }
    for (auto& m : op.ranks)
      if (m) st.ok() ? m->responder.respond({}) : m->responder.fail(st);
    for (auto& [from, got] : op.shares) {
      st.ok() ? got.responder.respond({}) : got.responder.fail(st);
      if (auto n = in_flight_.find(got.conn); n != in_flight_.end() && n->second) --n->second;
    }
    for (auto& [from, partial] : op.pieces)  // their pieces so far were answered
      if (auto n = in_flight_.find(partial.first.conn); n != in_flight_.end() && n->second) --n->second;
    host_->release_memory(op.reserved);
    pending_.erase(it);
    if (st.ok()) return;
    if (failed_.size() == kRememberedFailures) failed_.pop_front();
    failed_.emplace_back(key, st);
  }

  // Where the inputs are not mapped here (the ranks' own buffers, or regions UCX carries), and
  // none is in place and the collective no reduction: each block for another agent is read
  // straight into its share, which leaves first, and this agent's ranks' blocks go to them while
  // the shares travel (`early`): nothing staged, and only the other agents' blocks are left to
  // write when their shares come. Else every input is viewed or staged first.
  Status share_out(Key key, Pending& op) {
    OB_RETURN_IF_ERROR(agree(op.ranks));
    OB_RETURN_IF_ERROR(import_all(op.ranks));
    const Post& a = first(op.ranks);
    if (!view(op.ranks, op.views)) {
      op.early = a.coll != Coll::kAllreduce &&
                 std::none_of(op.ranks.begin(), op.ranks.end(), [](auto& m) { return m && m->post.in_place; });
      if (!op.early) {
        op.in.resize(op.ranks.size());
        OB_RETURN_IF_ERROR(stage(op.ranks, op.in, op.reserved));
      }
    }
    const bool pairs = a.coll == Coll::kAlltoall || a.coll == Coll::kAlltoallv;
    for (uint32_t to = 0; to < a.agents.size(); ++to) {
      if (to == op.me) continue;
      Share share{a.comm, a.seq, a.size, op.me, a.coll, a.elem, a.reduce, a.root, a.bytes, {}, {}};
      std::vector<std::pair<uint32_t, uint32_t>> blocks;  // (from, to) ranks; `to` 0 unless pairs
      for (uint32_t i = 0; i < a.size; ++i) {
        if (a.agent_of[i] != op.me) continue;
        for (uint32_t j = 0; j < (pairs ? a.size : 1); ++j)
          if (!pairs || a.agent_of[j] == to) blocks.emplace_back(i, j);
      }
      uint64_t total = 0;
      for (auto [i, j] : blocks) {
        const uint64_t n = share.lengths.emplace_back(block_bytes(op, i, j));
        if (total + n < total)
          return {Code::kInvalidArgument, where(a) + ": its ranks' blocks for agent " + std::to_string(to) +
                                              " add up to more than 2^64 B"};
        total += n;
      }
      // Early, the lengths are the ranks' word, not yet checked against their memory.
      if (op.early) {
        if (Status st = host_->reserve_memory(total, "mpi share"); !st.ok()) return st.with_context(where(a));
        op.reserved += total;
      }
      // The header, then the blocks straight from the inputs (views, staging, or where early the
      // ranks' memory): one copy.
      share.first_piece = total > kMaxSharePiece;
      const std::vector<uint8_t> header = encode(share);
      Buffer message(header.size() + total);
      uint8_t* at = std::copy(header.begin(), header.end(), message.data());
      for (size_t k = 0; k < blocks.size(); at += share.lengths[k++]) {
        const auto [i, j] = blocks[k];
        if (!share.lengths[k]) continue;
        if (!op.early) {
          const auto b = input_block(op, i, j);
          std::copy(b.begin(), b.end(), at);
          continue;
        }
        const auto [from_recv, offset] = source_of(op.ranks[i]->post, j);
        OB_RETURN_IF_ERROR(read(*op.ranks[i], from_recv, offset, {at, share.lengths[k]}));
      }
      send_share(a, to, share, std::move(message), header.size(), key);
    }
    if (op.early) return copy_across(op.ranks);
    return {};
  }

  // Sends agent `to` its share, `message` (the header, `header_bytes` of it, then the blocks):
  // whole, or where it goes in pieces (share.first_piece) the header with the first piece, then
  // the rest in SharePieces. One connection carries them in order.
  void send_share(const Post& a, uint32_t to, const Share& share, Buffer message, size_t header_bytes, Key key) {
    auto answered = [this, key](Result<Buffer> answer) {
      if (!answer.ok()) finish(key, answer.status());
    };
    if (!share.first_piece) return to_agent(a.agents[to], a.token, std::move(message), answered);
    const std::span<const uint8_t> blocks = message.span().subspan(header_bytes);
    for (uint64_t at = 0; at < blocks.size(); at += kMaxSharePiece) {
      const auto data = blocks.subspan(at, std::min<uint64_t>(kMaxSharePiece, blocks.size() - at));
      const std::vector<uint8_t> head =
          at == 0 ? std::vector<uint8_t>(message.data(), message.data() + header_bytes)
                  : encode(SharePiece{share.comm, share.seq, share.from, at, {}});
      Buffer piece(head.size() + data.size());
      std::copy(data.begin(), data.end(), std::copy(head.begin(), head.end(), piece.data()));
      to_agent(a.agents[to], a.token, std::move(piece), answered);
    }
  }

  // Bytes of what this agent's rank i gives rank j (alltoall(v)), else of its whole input.
  static uint64_t block_bytes(const Pending& op, uint64_t i, uint64_t j) {
    const Post& p = op.ranks[i]->post;
    if (p.coll == Coll::kBcast && i != p.root) return 0;
    if (!op.early) return input_block(op, i, j).size();
    return p.coll == Coll::kAlltoallv ? p.send_counts[j] : p.bytes;
  }

  // Where rank `p.rank`'s block for rank j (alltoall(v)), else its whole input, lies: its receive
  // buffer or its send buffer, at what offset. Not in place.
  static std::pair<bool, uint64_t> source_of(const Post& p, uint64_t j) {
    switch (p.coll) {
      case Coll::kAlltoall: return {false, j * p.bytes};
      case Coll::kAlltoallv: return {false, p.send_displs[j]};
      case Coll::kBcast: return {true, 0};
      default: return {false, 0};
    }
  }

  // Checks each share against this agent's ranks' posts, then delivers every block to them.
  Status deliver_spanning(Pending& op) {
    const Post& a = first(op.ranks);
    const uint64_t n = a.size;
    const bool pairs = a.coll == Coll::kAlltoall || a.coll == Coll::kAlltoallv;
    std::vector<std::vector<std::span<const uint8_t>>> got(n);  // another agent's rank i: by j, or [0]
    for (auto& [from, r] : op.shares) {
      const Share& sh = r.share;
      auto agent = [&, from = from] {  // error text only
        return where(a) + ": agent " + std::to_string(from) + " (" +
               (from < a.agents.size() ? a.agents[from] : std::string("unknown")) + ")";
      };
      if (from >= a.agents.size() || from == op.me)
        return {Code::kInvalidArgument, agent() + " is not another of the " + std::to_string(a.agents.size()) +
                                            " agents this agent's ranks name"};
      if (sh.size != a.size || sh.coll != a.coll || sh.elem != a.elem || sh.reduce != a.reduce ||
          sh.root != a.root || (a.coll != Coll::kAlltoallv && sh.bytes != a.bytes))
        return {Code::kInvalidArgument,
                agent() + " shared " + std::string(coll_name(sh.coll)) + " of " + std::to_string(sh.bytes) +
                    " B over " + std::to_string(sh.size) + " ranks (element " + std::to_string(int(sh.elem)) +
                    ", op " + std::to_string(int(sh.reduce)) + ", root " + std::to_string(sh.root) + "), rank " +
                    std::to_string(a.rank) + " posted " + std::string(coll_name(a.coll)) + " of " +
                    std::to_string(a.bytes) + " B over " + std::to_string(a.size) + " (element " +
                    std::to_string(int(a.elem)) + ", op " + std::to_string(int(a.reduce)) + ", root " +
                    std::to_string(a.root) + ")"};
      size_t block = 0;
      uint64_t at = 0;
      auto take = [&](uint64_t i, uint64_t j, uint64_t expected) -> Result<std::span<const uint8_t>> {
        if (block == sh.lengths.size())
          return Status{Code::kInvalidArgument, agent() + " shared " + std::to_string(block) + " blocks, too few"};
        const uint64_t len = sh.lengths[block++];
        if (len != expected)
          return Status{Code::kInvalidArgument, agent() + ": rank " + std::to_string(i) + " sends " + std::to_string(len) +
                                                    " B to rank " + std::to_string(j) + ", which expects " +
                                                    std::to_string(expected) + " B"};
        auto b = sh.data.subspan(at, len);
        at += len;
        return b;
      };
      for (uint64_t i = 0; i < n; ++i) {
        if (a.agent_of[i] != from) continue;
        got[i].resize(pairs ? n : 1);
        if (!pairs) {
          const uint64_t expected = a.coll == Coll::kBcast && i != a.root ? 0 : a.bytes;
          OB_ASSIGN_OR_RETURN(got[i][0], take(i, a.rank, expected));
          continue;
        }
        for (uint64_t j = 0; j < n; ++j)
          if (op.ranks[j]) {
            const uint64_t expected = a.coll == Coll::kAlltoall ? a.bytes : op.ranks[j]->post.recv_counts[i];
            OB_ASSIGN_OR_RETURN(got[i][j], take(i, j, expected));
          }
      }
      if (block != sh.lengths.size())
        return {Code::kInvalidArgument, agent() + " shared " + std::to_string(sh.lengths.size()) + " blocks, " +
                                            std::to_string(block) + " expected"};
    }
    for (uint64_t i = 0; i < n; ++i)
      if (!op.ranks[i] && got[i].empty())
        return {Code::kInvalidArgument, where(a) + ": no agent shared rank " + std::to_string(i) + "'s input"};
    return deliver(
        op.ranks, [&](uint64_t i, uint64_t j) { return op.ranks[i] ? input_block(op, i, j) : got[i][pairs ? j : 0]; },
        op.early);
  }

  // Every input of this agent's ranks as a view of its mapped region, where each is mapped and none
  // would be overwritten before it is read (in place, only allreduce, which reads all first); false
  // (nothing viewed): they are staged.
  static bool view(std::vector<std::optional<Member>>& ranks, std::vector<std::span<const uint8_t>>& views) {
    const Post& a = first(ranks);
    std::vector<std::span<const uint8_t>> out(ranks.size());
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (!ranks[i]) continue;
      const Member& m = *ranks[i];
      if (m.post.in_place && a.coll != Coll::kAllreduce) return false;
      const bool from_recv = m.post.in_place || a.coll == Coll::kBcast;
      uint64_t extent = a.bytes;
      switch (a.coll) {
        case Coll::kAlltoall: extent = a.bytes * a.size; break;
        case Coll::kAlltoallv:
          extent = 0;
          for (uint32_t j = 0; j < a.size; ++j)
            if (const uint64_t c = sends_of(m.post)[j]; c) {
              const uint64_t d = send_displs_of(m.post)[j];
              if (d > UINT64_MAX - c) return false;  // staging names it
              extent = std::max(extent, d + c);
            }
          break;
        case Coll::kBcast: extent = i == a.root ? a.bytes : 0; break;
        default: break;
      }
      if (extent == 0) continue;
      const auto& region = from_recv ? m.recv : m.send;
      if (!region || !region->mapped()) return false;
      auto span = region->mapped_span(from_recv ? m.post.recv_offset : m.post.send_offset, extent);
      if (!span.ok()) return false;  // staging names it
      out[i] = span.value();
    }
    views = std::move(out);
    return true;
  }

  // What this agent's rank i gives rank j (alltoall(v)), else its whole input.
  static std::span<const uint8_t> input_block(const Pending& op, uint64_t i, uint64_t j) {
    if (op.views.empty()) return staged_block(op.ranks, op.in, i, j);
    const Post& p = op.ranks[i]->post;
    switch (p.coll) {
      case Coll::kAlltoall: return op.views[i].subspan(j * p.bytes, p.bytes);
      case Coll::kAlltoallv:  // a zero count's displacement may lie anywhere
        return sends_of(p)[j] ? op.views[i].subspan(send_displs_of(p)[j], sends_of(p)[j]) : std::span<const uint8_t>();
      default: return op.views[i];
    }
  }

  // Sends another agent serving the job a request (a share, a forwarded send, a watch) over this
  // agent's one connection to it, in the order asked (while connecting: queued). `answered` runs
  // with its answer, or the failure to connect or send, unless this service is gone by then. An
  // `awaited` request keeps the connection open until answered; a watch does not.
  void to_agent(const std::string& address, const std::string& token, Buffer message, AgentAnswered answered,
                bool awaited = true) {
    Peer& p = peers_[address];
    if (p.conn) return submit(address, p.conn, std::move(message), std::move(answered), awaited);
    p.waiting.push_back({std::move(message), std::move(answered), awaited});
    if (p.connecting) return;
    p.connecting = true;
    // Connecting waits for the other agent's welcome, which may be connecting to this one at the
    // same time: off the progress thread, the result handed back to it.
    ChannelConfig config;
    config.session = token;
    config.network_only = true;
    config.spin_us = 0;
    config.secure = config_.secure;  // the agent's own certificate serves as a client's too
    // The previous attempt for this address handed its result back, so its thread has ended.
    if (auto done = connecting_.find(address); done != connecting_.end()) {
      done->second.join();
      connecting_.erase(done);
    }
    connecting_[address] = std::thread([this, alive = std::weak_ptr<bool>(alive_), address, config] {
      auto conn = std::make_shared<Result<std::unique_ptr<Connection>>>(Connection::connect(address, config));
      host_->post([this, alive, address, conn] {
        if (!alive.expired()) connected(address, std::move(*conn));
      });
    });
  }

  void connected(const std::string& address, Result<std::unique_ptr<Connection>> conn) {
    OB_LOG_DBG("agent %s: %s", address.c_str(), conn.ok() ? "connected" : conn.status().to_string().c_str());
    auto it = peers_.find(address);
    if (it == peers_.end()) return;  // this agent's ranks all left meanwhile
    auto waiting = std::move(it->second.waiting);
    it->second.waiting.clear();
    it->second.connecting = false;
    if (!conn.ok()) {
      peers_.erase(it);
      for (auto& w : waiting) w.answered(conn.status().with_context("mpi: reaching agent " + address));
      return;
    }
    std::shared_ptr<Connection> c = std::move(conn).value();
    it->second.conn = c;
    for (auto& w : waiting) submit(address, c, std::move(w.message), std::move(w.answered), w.awaited);
  }

  // The other agent answers once it ran the collective (or holds the forwarded send): a failure
  // there, or its end, fails it here. Until then the connection stays open, even after this
  // agent's ranks all left: the other agent may still be reading the request (a large one is
  // fetched by the receiver).
  void submit(const std::string& address, std::shared_ptr<Connection> conn, Buffer message, AgentAnswered answered,
              bool awaited) {
    auto on_answer = [this, alive = std::weak_ptr<bool>(alive_), address, awaited,
                      answered = std::move(answered)](Result<Buffer> answer) {
      if (alive.expired()) return;
      if (awaited) unanswered_less(address);
      answered(answer.ok() ? Result<Buffer>(std::move(answer).value())
                           : Result<Buffer>(answer.status().with_context("mpi: agent " + address)));
      // Not here: the connection is inside its own callback.
      if (ranks_gone()) host_->post([this, alive] {
          if (!alive.expired() && ranks_gone()) close_idle_peers();
        });
    };
    if (awaited) ++peers_[address].unanswered;  // before: the answer may come while submit() waits for credit
    // A failure to send calls on_answer, which names the agent.
    const Status st = conn->submit("mpi", std::move(message), Deadline::after_ms(kShareTimeoutMs), on_answer,
                                   Connection::Credit::kWait);
    if (!st.ok()) on_answer(st);
  }

  void unanswered_less(const std::string& address) {
    if (auto peer = peers_.find(address); peer != peers_.end() && peer->second.unanswered) --peer->second.unanswered;
  }

  // No rank of this agent's takes part in a collective or point-to-point any more.
  bool ranks_gone() const { return comms_.empty() && !p2p_->serving(); }

  // This agent's ranks all left: connections to other agents close once no share of theirs is
  // unanswered (closing progresses the channel, which may call back in here: erased first).
  void close_idle_peers() {
    std::vector<std::shared_ptr<Connection>> closing;
    for (auto p = peers_.begin(); p != peers_.end();) {
      if (p->second.unanswered || p->second.connecting) {
        ++p;
        continue;
      }
      closing.push_back(std::move(p->second.conn));
      p = peers_.erase(p);
    }
  }

  // Every rank posted the same collective; alltoallv's sent and received counts pair up (between
  // this agent's ranks: the shares carry the rest).
  static Status agree(std::vector<std::optional<Member>>& ranks) {
    for (auto& m : ranks)
      if (m && !m->post.failure.empty())
        return {Code::kFailed, where(m->post) + ": rank " + std::to_string(m->post.rank) + " could not take part: " +
                                   printable(m->post.failure, kMaxFailureBytes)};
    const Post& a = first(ranks);
    for (auto& m : ranks) {
      if (!m) continue;
      const Post& b = m->post;
      if (b.agents != a.agents || b.agent_of != a.agent_of || b.token != a.token)
        return {Code::kInvalidArgument, where(b) + ": rank " + std::to_string(b.rank) + " names other agents or " +
                                            "another session than rank " + std::to_string(a.rank)};
      if (b.coll != a.coll || b.elem != a.elem || b.reduce != a.reduce || b.root != a.root ||
          (a.coll != Coll::kAlltoallv && b.bytes != a.bytes))
        return {Code::kInvalidArgument,
                where(b) + ": rank " + std::to_string(b.rank) + " posted " + std::string(coll_name(b.coll)) + " of " +
                    std::to_string(b.bytes) + " B (element " + std::to_string(int(b.elem)) + ", op " +
                    std::to_string(int(b.reduce)) + ", root " + std::to_string(b.root) + "), rank " +
                    std::to_string(a.rank) + " " +
                    std::string(coll_name(a.coll)) + " of " + std::to_string(a.bytes) + " B (element " +
                    std::to_string(int(a.elem)) + ", op " + std::to_string(int(a.reduce)) + ", root " +
                    std::to_string(a.root) + ")"};
    }
    if (a.coll != Coll::kAlltoallv) return {};
    for (auto& from : ranks)
      for (auto& to : ranks) {
        if (!from || !to) continue;
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
  // oldest of kKeptImportsPerConnection goes first, and those a post says the rank freed go as it
  // comes), the rest for this collective only.
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

  Status import_all(std::vector<std::optional<Member>>& ranks) {
    for (auto& m : ranks) {
      if (!m) continue;
      if (!m->post.send_region.empty()) {
        OB_ASSIGN_OR_RETURN(m->send, imported(*m, m->post.send_region));
      }
      if (!m->post.recv_region.empty()) {
        OB_ASSIGN_OR_RETURN(m->recv, imported(*m, m->post.recv_region));
      }
    }
    return {};
  }

  // A collective whose ranks this agent serves alone.
  Status run(std::vector<std::optional<Member>>& ranks) {
    OB_RETURN_IF_ERROR(agree(ranks));
    OB_RETURN_IF_ERROR(import_all(ranks));
    if (direct(ranks)) return ranks[0]->post.coll == Coll::kAllreduce ? reduce_across(ranks) : copy_across(ranks);
    std::vector<std::vector<uint8_t>> in(ranks.size());
    uint64_t reserved = 0;
    Status st = stage(ranks, in, reserved);
    if (st.ok()) st = deliver(ranks, [&](uint64_t i, uint64_t j) { return staged_block(ranks, in, i, j); });
    host_->release_memory(reserved);
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
    OB_RETURN_IF_ERROR(reduce_all(a, ranks.size(), sum.data(), [&](size_t i) -> Result<std::span<const uint8_t>> {
      Member& m = *ranks[i];
      auto in = m.post.in_place ? output(m, 0, a.bytes) : m.send->mapped_span(m.post.send_offset, a.bytes);
      if (!in.ok()) return in.status().with_context(where(m.post) + ": rank " + std::to_string(m.post.rank) + "'s input");
      return std::span<const uint8_t>(*in);
    }));
    for (size_t j = 1; j < ranks.size(); ++j) {
      OB_ASSIGN_OR_RETURN(std::span<uint8_t> out, output(*ranks[j], 0, a.bytes));
      std::memcpy(out.data(), sum.data(), a.bytes);
    }
    return {};
  }

  // `bytes` of `from`'s input at `offset` (its receive buffer where `from_recv`: bcast's root)
  // into `to`'s output at `at`: straight into it where it is mapped here, else through `bounce`,
  // kBounceBytes at a time.
  static Status copy(Member& from, bool from_recv, uint64_t offset, Member& to, uint64_t at, uint64_t bytes,
                     std::vector<uint8_t>& bounce) {
    if (bytes == 0) return {};
    if (to.recv->mapped()) {
      OB_ASSIGN_OR_RETURN(std::span<uint8_t> out, output(to, at, bytes));
      return read(from, from_recv, offset, out);
    }
    for (uint64_t done = 0; done < bytes;) {
      const uint64_t piece = std::min(bytes - done, kBounceBytes);
      bounce.resize(piece);
      OB_RETURN_IF_ERROR(read(from, from_recv, offset + done, bounce));
      OB_RETURN_IF_ERROR(write(to, at + done, bounce));
      done += piece;
    }
    return {};
  }

  // Every block between the ranks present (this agent's), straight from input to output. Not in
  // place (a copy would overwrite inputs not yet read), nor allreduce.
  static Status copy_across(std::vector<std::optional<Member>>& ranks) {
    const Post& a = first(ranks);
    const uint64_t n = ranks.size();
    std::vector<uint8_t> bounce;
    for (uint64_t j = 0; j < n; ++j)
      for (uint64_t i = 0; i < n; ++i) {
        if (!ranks[i] || !ranks[j] || (i == j && ranks[j]->post.own_block)) continue;
        Member &from = *ranks[i], &to = *ranks[j];
        auto copy = [&](bool from_recv, uint64_t offset, uint64_t at, uint64_t bytes) {
          return Mpi::copy(from, from_recv, offset, to, at, bytes, bounce);
        };
        switch (a.coll) {
          case Coll::kAlltoall: OB_RETURN_IF_ERROR(copy(false, j * a.bytes, i * a.bytes, a.bytes)); break;
          case Coll::kAlltoallv:
            OB_RETURN_IF_ERROR(copy(false, from.post.send_displs[j], to.post.recv_displs[i], from.post.send_counts[j]));
            break;
          case Coll::kAllgather: OB_RETURN_IF_ERROR(copy(false, 0, i * a.bytes, a.bytes)); break;
          case Coll::kBcast:
            if (i == a.root && j != a.root) OB_RETURN_IF_ERROR(copy(true, 0, 0, a.bytes));
            break;
          case Coll::kAllreduce: break;  // never here
        }
      }
    return {};
  }

  // Reads every input of this agent's ranks (before any result is written: in place, the result
  // overwrites it), `reserved` of the agent's memory for them.
  Status stage(std::vector<std::optional<Member>>& ranks, std::vector<std::vector<uint8_t>>& in, uint64_t& reserved) {
    const Post& a = first(ranks);
    const uint64_t n = ranks.size();
    uint64_t staged = 0;
    for (auto& m : ranks) {
      if (!m) continue;
      switch (a.coll) {
        case Coll::kAlltoall: staged += n * a.bytes; break;
        case Coll::kAlltoallv: for (uint64_t c : sends_of(m->post)) staged += c; break;
        case Coll::kAllgather: case Coll::kAllreduce: staged += a.bytes; break;
        case Coll::kBcast: staged = a.bytes; break;
      }
    }
    if (Status st = host_->reserve_memory(staged, "staging"); !st.ok()) return st.with_context(where(a));
    reserved = staged;
    for (uint64_t i = 0; i < n; ++i) {
      if (!ranks[i]) continue;
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

  // Rank i's block for rank j (alltoall(v)), else its whole input, from the staged inputs.
  static std::span<const uint8_t> staged_block(const std::vector<std::optional<Member>>& ranks,
                                               const std::vector<std::vector<uint8_t>>& in, uint64_t i, uint64_t j) {
    const Post& p = ranks[i]->post;
    switch (p.coll) {
      case Coll::kAlltoall: return std::span(in[i]).subspan(j * p.bytes, p.bytes);
      case Coll::kAlltoallv: {
        const auto& sent = sends_of(p);
        uint64_t at = 0;
        for (uint64_t k = 0; k < j; ++k) at += sent[k];
        return std::span(in[i]).subspan(at, sent[j]);
      }
      default: return in[i];
    }
  }

  // Writes every result of this agent's ranks: `block(i, j)` is what rank i gives rank j; only
  // other agents' ranks' blocks where `early` (this agent's went when it shared them), and never
  // a block a rank gave itself (kOwnBlock).
  template <typename Blocks>
  static Status deliver(std::vector<std::optional<Member>>& ranks, const Blocks& block, bool early = false) {
    const Post& a = first(ranks);
    const uint64_t n = ranks.size();
    // Rank i's block for rank j at `at` of `to`'s output.
    auto write = [&](Member& to, uint64_t i, uint64_t j, uint64_t at) {
      if ((early && ranks[i]) || (i == to.post.rank && to.post.own_block)) return Status();
      return Mpi::write(to, at, block(i, j));
    };
    std::vector<uint8_t> sum;
    if (a.coll == Coll::kAllreduce) {
      sum.resize(a.bytes);
      OB_RETURN_IF_ERROR(reduce_all(a, n, sum.data(), [&](size_t i) -> Result<std::span<const uint8_t>> {
        return block(i, 0);
      }));
    }
    for (uint64_t j = 0; j < n; ++j) {
      if (!ranks[j]) continue;
      Member& to = *ranks[j];
      switch (a.coll) {
        case Coll::kAlltoall:
          for (uint64_t i = 0; i < n; ++i) OB_RETURN_IF_ERROR(write(to, i, j, i * a.bytes));
          break;
        case Coll::kAlltoallv:
          for (uint64_t i = 0; i < n; ++i) OB_RETURN_IF_ERROR(write(to, i, j, to.post.recv_displs[i]));
          break;
        case Coll::kAllgather:
          for (uint64_t i = 0; i < n; ++i) OB_RETURN_IF_ERROR(write(to, i, 0, i * a.bytes));
          break;
        case Coll::kBcast:
          if (j != a.root) OB_RETURN_IF_ERROR(write(to, a.root, 0, 0));
          break;
        case Coll::kAllreduce:
          OB_RETURN_IF_ERROR(Mpi::write(to, 0, sum));  // never early
          break;
      }
    }
    // The answers may overtake writes that UCX carries (a small answer goes through the ring):
    // every result is in place before any rank hears that it is. A mapped or exposed region was
    // written by copies already ordered before the answer's release store: no round trip for those.
    for (auto& m : ranks)
      if (m && m->recv && !m->recv->in_call())
        OB_RETURN_IF_ERROR(m->peer->flush(Deadline::after_ms(kTransferTimeoutMs))
                             .with_context(where(m->post) + ": completing rank " + std::to_string(m->post.rank) +
                                           "'s writes"));
    return {};
  }

  MpiServiceConfig config_;
  ServiceHost* host_ = nullptr;
  std::unique_ptr<MpiPointToPoint> p2p_;
  std::map<std::pair<uint64_t, uint64_t>, Pending> pending_;                     // (comm, seq) -> its posts
  struct Comm {
    std::unordered_map<uint32_t, uint32_t> ranks;  // rank -> connection, of the ranks still here
    std::optional<uint32_t> left;                  // the first of its ranks that left
  };
  std::unordered_map<uint64_t, Comm> comms_;  // by the job's name for the communicator
  std::unordered_map<uint32_t, uint32_t> in_flight_;                              // connection -> waiting posts
  std::deque<Work> ready_;  // complete collectives and steps, in order
  bool running_ = false;   // one of them is running
  std::map<std::string, Peer> peers_;          // other agents, by address
  std::vector<std::pair<uint32_t, Responder>> watches_;  // other agents' (their connection, the answer)
  std::deque<std::pair<Key, Status>> failed_;  // the last kRememberedFailures spanning failures
  std::map<std::string, std::thread> connecting_;  // the last connecting thread of each
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for what runs after this is gone
  std::unordered_map<uint32_t, std::vector<std::pair<std::vector<uint8_t>, std::shared_ptr<const RemoteRegion>>>>
      kept_;  // connection -> imports of its kept regions, oldest first
};

}  // namespace

std::unique_ptr<Service> make_mpi(MpiServiceConfig config) { return std::make_unique<Mpi>(config); }

}  // namespace outboard::services
