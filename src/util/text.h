// Text from peers, made safe to put in a message: an agent's errors and
// logs quote what a client sent, and a client decodes them as UTF-8.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace outboard {

/// `bytes` with printable ASCII kept, \n \t \\ and every other byte escaped
/// as \xNN, cut to `max` input bytes (then "... (N B)" says how many there
/// were). Always valid UTF-8.
std::string printable(std::string_view bytes, size_t max = 64);

/// printable(bytes) in single quotes: the form messages name a peer's item in.
inline std::string quote(std::string_view bytes, size_t max = 64) { return "'" + printable(bytes, max) + "'"; }

}  // namespace outboard
