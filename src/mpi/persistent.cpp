#include "mpi/persistent.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <unordered_map>

#include "mpi/offload.h"

namespace outboard::mpi {
namespace {

struct Standin {
  PersistentOp op;
  bool owns_type = false;  // a derived datatype, duplicated: the program may free its own
  MPI_Request current = MPI_REQUEST_NULL;
};

struct Table {
  std::mutex mu;  // MPI_THREAD_MULTIPLE programs start and complete from several threads
  std::unordered_map<MPI_Request, Standin> standins;
  std::atomic<size_t> size{0};  // read without the lock: completion calls' fast path
};

Table& table() {
  static Table t;
  return t;
}

bool predefined(MPI_Datatype type) {
  int ints = 0, addresses = 0, types = 0, combiner = 0;
  PMPI_Type_get_envelope(type, &ints, &addresses, &types, &combiner);
  return combiner == MPI_COMBINER_NAMED;
}

}  // namespace

int persistent_init(PersistentOp op, MPI_Request* request) {
  const int rc = PMPI_Send_init(nullptr, 0, MPI_BYTE, MPI_PROC_NULL, 0, MPI_COMM_SELF, request);
  if (rc != MPI_SUCCESS) return rc;
  Standin s{op};
  if (!predefined(op.type)) {
    PMPI_Type_dup(op.type, &s.op.type);
    s.owns_type = true;
  }
  Table& t = table();
  std::lock_guard lock(t.mu);
  t.standins.emplace(*request, std::move(s));
  t.size.store(t.standins.size(), std::memory_order_release);
  return MPI_SUCCESS;
}

bool persistent(MPI_Request request) {
  Table& t = table();
  if (request == MPI_REQUEST_NULL || t.size.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard lock(t.mu);
  return t.standins.count(request) != 0;
}

int persistent_start(MPI_Request request) {
  Table& t = table();
  std::lock_guard lock(t.mu);
  Standin& s = t.standins.at(request);
  if (s.current != MPI_REQUEST_NULL) {
    std::fprintf(stderr, "outboard-mpi: MPI_Start of a persistent request whose last start has not completed\n");
    return MPI_ERR_REQUEST;
  }
  const PersistentOp& op = s.op;
  return p2p_post(op.message, op.comm, op.buf, op.count, op.type, op.contiguous, &s.current);
}

int persistent_free(MPI_Request* request) {
  Table& t = table();
  std::lock_guard lock(t.mu);
  auto it = t.standins.find(*request);
  Standin& s = it->second;
  if (s.current != MPI_REQUEST_NULL) PMPI_Request_free(&s.current);
  if (s.owns_type) PMPI_Type_free(&s.op.type);
  t.standins.erase(it);
  t.size.store(t.standins.size(), std::memory_order_release);
  return PMPI_Request_free(request);
}

int persistent_cancel(MPI_Request* request) {
  Table& t = table();
  std::lock_guard lock(t.mu);
  Standin& s = t.standins.at(*request);
  return s.current != MPI_REQUEST_NULL ? PMPI_Cancel(&s.current) : PMPI_Cancel(request);
}

SeeThrough::SeeThrough(std::span<MPI_Request> requests) : program_(requests) {
  Table& t = table();
  if (t.size.load(std::memory_order_acquire) == 0) return;
  std::lock_guard lock(t.mu);
  for (size_t i = 0; i < requests.size(); ++i) {
    auto it = requests[i] == MPI_REQUEST_NULL ? t.standins.end() : t.standins.find(requests[i]);
    if (it == t.standins.end() || it->second.current == MPI_REQUEST_NULL) continue;
    if (swapped_.empty()) copy_.assign(requests.begin(), requests.end());
    copy_[i] = it->second.current;
    swapped_.push_back(i);
  }
}

void SeeThrough::finish() {
  if (swapped_.empty()) return;
  Table& t = table();
  std::lock_guard lock(t.mu);
  for (size_t i = 0, next = 0; i < program_.size(); ++i) {
    if (next < swapped_.size() && swapped_[next] == i) {
      ++next;
      if (copy_[i] == MPI_REQUEST_NULL) t.standins.at(program_[i]).current = MPI_REQUEST_NULL;
    } else {
      program_[i] = copy_[i];
    }
  }
}

}  // namespace outboard::mpi
