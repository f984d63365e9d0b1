// Which Outboard this is.
#pragma once

namespace outboard {

/// Outboard's version: CMake's project version, which the Python package's metadata also reads.
const char* version();

}  // namespace outboard
