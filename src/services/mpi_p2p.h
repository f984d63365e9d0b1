#pragma once
// The `mpi` service's point-to-point half: the ranks' sends and receives matched as MPI matches
// them (per communicator and receiving rank: a receive takes the first message in arrival order
// whose source and tag it accepts), the data copied by the agent straight from the sender's
// buffer into the receiver's, through the regions each names.
//
// A send nobody waits for yet is an unexpected message. While the session's unexpected bytes stay
// within their budget, the agent reads it into its own memory and answers the sender at once (as
// an MPI library's eager protocol: MPI_Send returns before the receive is posted). Over the
// budget, or for a synchronous send, only the envelope stays here and the sender's request stays
// open until a receive matches it (the data is read from its buffer then): flow control, never
// loss. Unexpected messages held so are buffered, in order, as the budget frees up.
//
// Where another agent serves the receiver (the job has an agent per node), the sender's agent
// reads the message and forwards it to the receiver's over its one connection to that agent, in
// the order its ranks sent them, at most a window of bytes unanswered per agent (the rest waits
// in the senders' memory). The receiver's agent matches forwarded sends as its own ranks' and
// answers each once it holds it within its unexpected budget, or once a receive took it (a
// synchronous send, or over the budget): the sender's send completes with that answer. So an
// agent holds beyond its budget at most the other agents' windows. A receive from a rank another
// agent serves has this agent watch that one: when it ends, what waits for its ranks fails.

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "outboard/service.h"
#include "services/mpi_wire.h"

namespace outboard::services {

/// How long one read or write of a rank's memory may take (a rank that stops reading its end
/// fails that operation instead of holding the agent).
inline constexpr int64_t kMpiTransferTimeoutMs = 10'000;

struct MpiP2pConfig {
  /// --mpi-unexpected-bytes: unexpected messages the agent buffers for a job's ranks.
  uint64_t unexpected_bytes = 64ull << 20;
  /// --mpi-max-messages: a rank's sends and receives held unmatched.
  uint32_t max_messages = 4096;
  /// --mpi-forward-window-bytes: sends forwarded to another agent and not yet answered by it, per
  /// agent (one larger message goes alone).
  uint64_t forward_window_bytes = 16ull << 20;
};

/// The answer of another agent to a request, or why there is none.
using AgentAnswered = std::function<void(Result<Buffer>)>;
/// Sends another agent of the job (address, the job's session token) a request, in order. The
/// link to it stays open while the request is unanswered if `awaited` (else it closes with this
/// agent's ranks, failing the request).
using ToAgent =
    std::function<void(const std::string& address, const std::string& token, Buffer, AgentAnswered, bool awaited)>;

class MpiPointToPoint {
 public:
  MpiPointToPoint(ServiceHost& host, MpiP2pConfig config, ToAgent to_agent)
      : host_(host), config_(config), to_agent_(std::move(to_agent)) {}
  ~MpiPointToPoint();
  void handle(ServiceRequest r, mpi_wire::P2p message);
  /// A send another agent forwards to one of this agent's ranks.
  void forwarded(ServiceRequest r, mpi_wire::Forward forward);
  /// Whether a rank of this agent's takes part in point-to-point.
  bool serving() const { return !ranks_.empty(); }
  /// A rank that leaves: what it posted goes (except messages buffered here, still deliverable),
  /// and what waits for it specifically fails naming it: sends to it, receives from it, now and
  /// later.
  void on_disconnect(uint32_t conn);

 private:
  // One send or receive the agent holds. Shared: reading or writing a rank's memory progresses the
  // connections, so other messages are handled meanwhile and may match, or drop, an op whose
  // read is under way (`taken` then tells that read its op is gone).
  enum class Hold : uint8_t { kNone, kBudget, kOver };  // where an op's bytes held here count
  struct Op {
    mpi_wire::P2p message;
    Responder responder;
    std::shared_ptr<Connection> peer;
    std::vector<uint8_t> data;  // a buffered or forwarded send's bytes
    bool buffered = false;      // its sender was answered
    bool reading = false;       // being buffered or forwarded now
    bool taken = false;         // out of its queue: matched, or its rank left
    bool remote = false;        // forwarded here by another agent (`peer`)
    bool later = false;         // remote, its data still with that agent (asked for once `fetching`)
    bool fetching = false;
    Hold hold = Hold::kNone;
    uint64_t id = 0;                 // remote: the sending agent's number for it
    uint64_t came = 0;               // remote, fetched: its data's bytes come so far (in pieces)
    std::shared_ptr<Op> matched;     // the receive a fetched send goes to
  };
  using OpPtr = std::shared_ptr<Op>;
  struct Queues {  // of one receiving rank of one communicator
    std::list<OpPtr> unexpected;  // sends, in arrival order
    std::list<OpPtr> posted;      // receives, in posting order
  };
  using Key = std::pair<uint64_t, uint32_t>;  // (communicator, receiving rank)
  struct Outbox {  // sends to the ranks of one other agent
    std::deque<OpPtr> queue;  // not yet forwarded, in the order sent
    uint64_t in_flight = 0;   // bytes forwarded, not yet answered
    uint64_t next_id = 0;
    bool pumping = false, again = false;
  };

  void send(OpPtr s);
  void receive(OpPtr r);
  void probe(const ServiceRequest& r, const mpi_wire::P2p& m);
  void cancel(const ServiceRequest& r, const mpi_wire::P2p& m);
  void take(OpPtr& op);
  void buffer(const OpPtr& s);
  void refill();
  void pump(const std::string& address);
  void forward(const std::string& address, OpPtr s, uint64_t id);
  void send_later(const std::string& address, const OpPtr& s, uint64_t id);
  void send_data(const std::string& address, OpPtr s, uint64_t id, uint64_t offset);
  void send_data_soon(const std::string& address, OpPtr s, uint64_t id, uint64_t offset);
  void forward_answered(OpPtr op, const Result<Buffer>& answer);
  Result<Buffer> read_forward(const OpPtr& s, const mpi_wire::Forward& head, uint64_t n);
  void fetch(const OpPtr& s, OpPtr r);
  void data_came(ServiceRequest r, const mpi_wire::Forward& f);
  void complete(const OpPtr& s, OpPtr r);
  bool hold(Op& s, Hold where);
  void release(Op& s);
  void rank_left(uint64_t comm, uint32_t gone, std::optional<uint32_t> conn, std::string why);
  void watch(const mpi_wire::P2p& m);
  void agent_gone(const std::string& address);
  Status transfer(const Op& s, const Op& r, uint64_t n);
  void deliver(Op& s, Op& r);
  Status departed(const mpi_wire::P2p& m, uint32_t rank) const;

  ServiceHost& host_;
  MpiP2pConfig config_;
  ToAgent to_agent_;
  std::map<Key, Queues> queues_;
  std::unordered_map<uint32_t, uint32_t> held_;  // connection -> its sends and receives held here
  uint64_t buffered_bytes_ = 0;  // unexpected messages' bytes read here, or being read
  uint64_t held_remote_bytes_ = 0;  // forwarded sends here not buffered (their senders wait)
  uint64_t following_bytes_ = 0;    // data of sends forwarded later, sent, not yet answered
  std::map<std::string, Outbox> outboxes_;  // by the other agent's address
  // Another agent's connection -> the (communicator, rank)s whose sends it forwarded: they leave
  // with it.
  std::unordered_map<uint32_t, std::set<std::pair<uint64_t, uint32_t>>> remote_;
  // Other agents watched, by address -> the (communicator, rank)s this agent's receives wait for
  // there: they leave when it ends.
  std::map<std::string, std::set<std::pair<uint64_t, uint32_t>>> watched_;
  // Forwarded sends whose data this agent asked for, by (the sending agent's connection, id).
  std::map<std::pair<uint32_t, uint64_t>, OpPtr> awaiting_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for what the host runs later
  bool refilling_ = false, refill_again_ = false;
  std::map<uint64_t, std::unordered_map<uint32_t, uint32_t>> ranks_;  // comm -> rank -> connection
  // comm -> ranks that left and why, kept for the session: a rank may leave before another first
  // posts.
  std::map<uint64_t, std::map<uint32_t, std::string>> left_;
};

}  // namespace outboard::services
