// Wire format of the `graph` service (offloaded task graphs), shared by the
// service and its client. Little-endian; every request starts with an op byte.
//
//   'B' region descriptor          -> u32 region (the client's memory, imported)
//   'G' string name, u64 agent_bytes, u32 nodes, {u8 NodeKind, string name}[nodes],
//       u32 edges, {u32 from, u32 to}[edges]
//                                  -> u32 graph
//   'I' u32 graph, Buffers[nodes]  -> u32 instance
//   'S' u32 count, {u32 instance, u32 writes, {u64 offset, u32 length, bytes}[writes]}[count]
//       -> Errors (the submits not listed started)
//   'H' u32 count, {u32 instance, u32 node, i32 code, string message}[count]
//       -> Errors (a host node's result that nobody waited for)
//   'X' u32 instance (one-way)     frees the instance once its run is over
//
// Events, one-way messages to the client: u8 'E', u32 count, then per event
// u8 EventKind, u32 instance, and u32 node (kHostReady) or i32 code, string
// message (kComplete). An event is sent only after the one-sided writes of
// the nodes before it are visible in the client's memory.
//
// Errors: u32 count, {u32 index in the batch, i32 code, string message}[count].
#pragma once

#include <cstdint>

#include "util/codec.h"

namespace outboard::graph_wire {

inline constexpr char kBind = 'B';
inline constexpr char kGraph = 'G';
inline constexpr char kInstance = 'I';
inline constexpr char kSubmit = 'S';
inline constexpr char kHostDone = 'H';
inline constexpr char kRelease = 'X';
inline constexpr char kEvents = 'E';

enum class NodeKind : uint8_t { kSha256 = 1, kDma = 2, kHost = 3 };
enum class EventKind : uint8_t { kHostReady = 1, kComplete = 2 };

/// A buffer an engine node uses: agent memory of the instance, or a region
/// the client bound.
struct Ref {
  uint8_t space = 0;  ///< 0 agent, 1 host
  uint8_t pad[3] = {};
  uint32_t region = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};
struct Buffers {
  Ref src;
  Ref dst;
};

using codec::Reader;
using codec::Writer;

}  // namespace outboard::graph_wire
