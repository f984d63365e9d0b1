// Wire format of the `detokenize` service. Little-endian; every request
// starts with an op byte.
//
//   'O' name bytes            -> u32 tokenizer, u32 vocab size (as tokenize's)
//   'L' u8 format, the bytes  -> as 'O' (a vocabulary the client uploads)
//   'D' u32 tokenizer, u32 n, Step[n], then each step's ids (i32) back to back
//       -> StepResult[n], each step's text back to back, then for each
//          failed step a u32 length and its message. A step fails alone
//          and leaves its stream as it was.
//   'C' u32 tokenizer, u32 stream -> empty; the stream is closed, what it held dropped
//
// Streams (one sequence's decode state each) are named by the client, each
// tokenizer's apart: a step flagged kBegin begins its stream, of the
// request's tokenizer, unless it is open, so a new sequence costs no round
// trip. A client flags every
// step of a stream it has open: then no answer needs to tell it whether a
// stream was begun.
#pragma once

#include <cstdint>

#include "services/vocabulary_request.h"
#include "util/codec.h"

namespace outboard::detokenize_wire {

inline constexpr char kOpen = services::kOpenByName;
inline constexpr char kUpload = services::kOpenUpload;
inline constexpr char kStep = 'D';
inline constexpr char kClose = 'C';

enum StepFlags : uint8_t {
  /// After the ids: the bytes held back (U+FFFD where broken), and the stream is closed (even if
  /// the ids fail: the client forgets it as it sends the step).
  kFinish = 1,
  /// Before the ids: the stream is begun where it is not open (even if the ids then fail).
  kBegin = 2,
};

struct Step {
  uint32_t stream = 0;
  uint32_t ids = 0;
  uint8_t flags = 0;
  uint8_t pad[3] = {};
};

struct StepResult {
  uint32_t length = 0;  ///< bytes of text (UTF-8, complete characters)
  int32_t code = 0;     ///< outboard::Code; 0 = ok
};

using codec::Reader;
using codec::Writer;

}  // namespace outboard::detokenize_wire
