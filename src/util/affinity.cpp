#include "outboard/affinity.h"

#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

namespace outboard {

Result<std::vector<int>> parse_core_list(const std::string& text) {
  std::vector<int> cores;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, ',')) {
    int lo = 0, hi = 0;
    char dash = 0;
    std::stringstream ps(part);
    if (!(ps >> lo)) return Status(Code::kBadConfig, "core list '" + text + "': '" + part + "' is not a core");
    hi = lo;
    if (ps >> dash && (dash != '-' || !(ps >> hi)))
      return Status(Code::kBadConfig, "core list '" + text + "': '" + part + "' is not a range");
    if (lo < 0 || hi < lo) return Status(Code::kBadConfig, "core list '" + text + "': bad range '" + part + "'");
    for (int c = lo; c <= hi; ++c) cores.push_back(c);
  }
  return cores;
}

Status pin_to_cores(const std::vector<int>& cores) {
  if (cores.empty()) return {};
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cores) {
    if (c >= online)
      return {Code::kBadConfig, "core " + std::to_string(c) + " exceeds the " + std::to_string(online) +
                                    " online cores (option --cores)"};
    CPU_SET(c, &set);
  }
  if (sched_setaffinity(0, sizeof set, &set) != 0)
    return {Code::kIoError, std::string("sched_setaffinity: ") + std::strerror(errno)};
  return {};
}

}  // namespace outboard
