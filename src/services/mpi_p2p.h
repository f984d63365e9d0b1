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

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <set>
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
};

class MpiPointToPoint {
 public:
  MpiPointToPoint(ServiceHost& host, MpiP2pConfig config) : host_(host), config_(config) {}
  ~MpiPointToPoint();
  void handle(ServiceRequest r, mpi_wire::P2p message);
  /// A rank that leaves: what it posted goes (except messages buffered here, still deliverable),
  /// and what waits for it specifically fails naming it: sends to it, receives from it, now and
  /// later.
  void on_disconnect(uint32_t conn);

 private:
  // One send or receive the agent holds. Shared: reading or writing a rank's memory progresses the
  // connections, so other messages are handled meanwhile and may match, or drop, an op whose
  // read is under way (`taken` then tells that read its op is gone).
  struct Op {
    mpi_wire::P2p message;
    Responder responder;
    std::shared_ptr<Connection> peer;
    std::vector<uint8_t> data;  // a buffered send's bytes
    bool buffered = false;      // its sender was answered
    bool reading = false;       // being buffered now
    bool taken = false;         // out of its queue: matched, or its rank left
  };
  using OpPtr = std::shared_ptr<Op>;
  struct Queues {  // of one receiving rank of one communicator
    std::list<OpPtr> unexpected;  // sends, in arrival order
    std::list<OpPtr> posted;      // receives, in posting order
  };
  using Key = std::pair<uint64_t, uint32_t>;  // (communicator, receiving rank)

  void send(OpPtr s);
  void receive(OpPtr r);
  void probe(const ServiceRequest& r, const mpi_wire::P2p& m);
  void cancel(const ServiceRequest& r, const mpi_wire::P2p& m);
  void take(OpPtr& op);
  void buffer(const OpPtr& s);
  void refill();
  Status transfer(const Op& s, const Op& r, uint64_t n);
  void deliver(Op& s, Op& r);
  Status departed(const mpi_wire::P2p& m, uint32_t rank) const;

  ServiceHost& host_;
  MpiP2pConfig config_;
  std::map<Key, Queues> queues_;
  std::unordered_map<uint32_t, uint32_t> held_;  // connection -> its sends and receives held here
  uint64_t buffered_bytes_ = 0;  // unexpected messages' bytes read here, or being read
  bool refilling_ = false, refill_again_ = false;
  std::map<uint64_t, std::unordered_map<uint32_t, uint32_t>> ranks_;  // comm -> rank -> connection
  // comm -> ranks that left, kept for the session: a rank may leave before another first posts.
  std::map<uint64_t, std::set<uint32_t>> left_;
};

}  // namespace outboard::services
