// Real vocabularies, from the cache `make test` fills first (outboard vocab
// fetch): the directory an agent opens names in by default.
#pragma once

#include <string>
#include <string_view>

#include "outboard/agent.h"

namespace outboard::testing {

inline std::string cached_vocab(std::string_view file) { return default_vocab_dir() + "/" + std::string(file); }

}  // namespace outboard::testing
