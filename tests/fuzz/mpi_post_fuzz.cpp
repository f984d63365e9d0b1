// libFuzzer: a rank's collective post to the agent's `mpi` service (services/mpi_wire.h), decoded
// before anything else reads it. What decodes encodes back to the same bytes, and its counts and
// ranks are within the bounds the service indexes by.
#include <cstdlib>
#include <cstring>

#include "services/mpi_wire.h"

using namespace outboard::services::mpi_wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto post = decode({data, size});
  if (!post.ok()) return 0;
  const Post& p = post.value();
  if (p.rank >= p.size || p.size > kMaxRanks) __builtin_trap();
  if (p.coll == Coll::kAlltoallv &&
      (p.send_counts.size() != p.size || p.send_displs.size() != p.size || p.recv_counts.size() != p.size ||
       p.recv_displs.size() != p.size))
    __builtin_trap();
  const auto again = encode(p);
  if (again.size() != size || std::memcmp(again.data(), data, size) != 0) __builtin_trap();
  return 0;
}
