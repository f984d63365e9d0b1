#include "outboard/log.h"

#include <atomic>
#include <cctype>
#include <charconv>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <string>
#include <sys/time.h>

namespace outboard::log {
namespace {

std::atomic<int> g_level{static_cast<int>(Level::kWarning)};

struct Named {
  std::string_view name;
  Level level;
};
constexpr Named kNames[] = {
    {"disable", Level::kDisable}, {"critical", Level::kCritical}, {"crit", Level::kCritical},
    {"error", Level::kError},     {"err", Level::kError},         {"warning", Level::kWarning},
    {"warn", Level::kWarning},    {"info", Level::kInfo},         {"debug", Level::kDebug},
    {"dbg", Level::kDebug},       {"trace", Level::kTrace},       {"trc", Level::kTrace},
};

}  // namespace

Result<Level> parse_level(std::string_view text) {
  int number = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (ec == std::errc() && end == text.data() + text.size()) {
    if (number % 10 == 0 && number >= 10 && number <= 70) return static_cast<Level>(number);
  } else {
    std::string lower;
    for (char c : text) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    for (const auto& n : kNames)
      if (n.name == lower) return n.level;
  }
  return Status(Code::kBadConfig,
                "log level '" + std::string(text) +
                    "' is not one of 10 disable, 20 critical, 30 error, 40 warning, 50 info, "
                    "60 debug, 70 trace");
}

std::string_view level_name(Level level) {
  switch (level) {
    case Level::kDisable: return "DISABLE";
    case Level::kCritical: return "CRIT";
    case Level::kError: return "ERROR";
    case Level::kWarning: return "WARN";
    case Level::kInfo: return "INFO";
    case Level::kDebug: return "DEBUG";
    case Level::kTrace: return "TRACE";
  }
  return "?";
}

void set_level(Level level) { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }
Level level() { return static_cast<Level>(g_level.load(std::memory_order_relaxed)); }

void write(Level lvl, const char* module, const char* fmt, ...) {
  timeval tv{};
  gettimeofday(&tv, nullptr);
  tm local{};
  localtime_r(&tv.tv_sec, &local);
  char line[2048];
  int n = static_cast<int>(strftime(line, sizeof line, "%Y-%m-%d %H:%M:%S", &local));
  n += snprintf(line + n, sizeof line - n, ".%06ld %-5s [%s] ", static_cast<long>(tv.tv_usec),
                level_name(lvl).data(), module);
  va_list args;
  va_start(args, fmt);
  int m = vsnprintf(line + n, sizeof line - n - 1, fmt, args);
  va_end(args);
  n = std::min<int>(n + std::max(m, 0), sizeof line - 2);
  line[n++] = '\n';
  fwrite(line, 1, n, stderr);
}

}  // namespace outboard::log
