#include "outboard/version.h"

namespace outboard {

const char* version() { return OUTBOARD_VERSION; }

}  // namespace outboard
