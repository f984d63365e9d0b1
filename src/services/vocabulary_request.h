// How a client names a vocabulary to the tokenize and detokenize services
// (the two wires share these ops): 'O' and a name the agent resolves in its
// own vocabulary directory, or, for a file of this machine (a name holding a
// '/'), 'L', its format byte and its bytes. The agent may be on a DPU or
// another node, which sees none of our files.
#pragma once

#include <string>

#include "outboard/status.h"
#include "util/codec.h"

namespace outboard::services {

inline constexpr char kOpenByName = 'O';
inline constexpr char kOpenUpload = 'L';

/// Writes the open request for `name` into `w`.
[[nodiscard]] Status put_vocabulary_request(codec::Writer& w, const std::string& name);

}  // namespace outboard::services
