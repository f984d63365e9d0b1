// Wire format of the `tokenize` service, shared by the service and its
// client. Little-endian; every request starts with an op byte.
//
//   'O' name bytes                      -> u32 tokenizer, u32 vocab size
//       (a name the agent resolves in its vocabulary directory only)
//   'L' u8 format, the vocabulary's bytes -> as 'O' (a vocabulary the
//       client uploads: outboard::VocabFormat, cached by its sha256)
//   'B' region descriptor               -> u32 output (the client's region, imported)
//   'U' u32 output                      -> empty; the output is forgotten
//   'E' EncodeHeader, u64 length[n], texts back to back
//       -> the ids are put into the output region first, then
//          ResultHeader, TextResult[n], then for each failed text a u32
//          length and its message. With kIdsInBand (a sealed connection,
//          where one-sided writes are refused) no output is named and the
//          ids come in the answer instead, after TextResult[n]: i32[ids].
#pragma once

#include <cstdint>

#include "services/vocabulary_request.h"
#include "util/codec.h"

namespace outboard::tokenize_wire {

inline constexpr char kOpen = services::kOpenByName;
inline constexpr char kUpload = services::kOpenUpload;
inline constexpr char kBind = 'B';
inline constexpr char kEncode = 'E';
inline constexpr char kUnbind = 'U';

enum Flags : uint8_t {
  kAllowSpecial = 1,
  kOrdinary = 2,
  kUtf8Replace = 4,
  kAddSpecialTokens = 8,
  kIdsInBand = 16,
};

struct EncodeHeader {
  uint32_t tokenizer = 0;
  uint32_t output = 0;
  uint64_t out_offset = 0;    ///< first id slot of the output region to write
  uint64_t out_capacity = 0;  ///< id slots available from out_offset
  uint32_t texts = 0;
  uint32_t max_len = 0;       ///< ids per text; 0: no limit
  uint8_t flags = 0;
  uint8_t pad[7] = {};
};

struct ResultHeader {
  uint32_t texts = 0;
  uint32_t queued_before = 0;  ///< jobs ahead of this one when it arrived
  uint64_t queue_ns = 0;       ///< arrival to a worker picking it up
  uint64_t tokenize_ns = 0;    ///< the worker's wall time on the batch
  uint64_t cpu_ns = 0;         ///< the worker's thread CPU time on the batch
  uint64_t put_ns = 0;         ///< one-sided write of the ids and its flush
  uint64_t ids = 0;            ///< ids written
};

struct TextResult {
  uint64_t offset = 0;  ///< first id, relative to out_offset
  uint32_t length = 0;  ///< ids
  int32_t code = 0;     ///< outboard::Code; 0 = ok
};

using codec::Reader;
using codec::Writer;

}  // namespace outboard::tokenize_wire
