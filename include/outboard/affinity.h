#pragma once

#include <string>
#include <vector>

#include "outboard/status.h"

namespace outboard {

/// Parses a core list such as "0,2-3" (kBadConfig naming the bad part).
Result<std::vector<int>> parse_core_list(const std::string& text);
/// Pins the calling thread to `cores` (kBadConfig for cores not on this machine).
Status pin_to_cores(const std::vector<int>& cores);

}  // namespace outboard
