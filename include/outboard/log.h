// Logging with DOCA-compatible numeric levels and per-module names.
// Thread mode: multi (each line is written with one fwrite).
#pragma once

#include <string_view>

#include "outboard/status.h"

namespace outboard::log {

enum class Level : int {
  kDisable = 10,
  kCritical = 20,
  kError = 30,
  kWarning = 40,
  kInfo = 50,
  kDebug = 60,
  kTrace = 70,
};

/// Accepts "50", "info", "INFO", "warn", "warning", "err", ... .
Result<Level> parse_level(std::string_view text);
std::string_view level_name(Level level);

void set_level(Level level);
Level level();
inline bool enabled(Level l) { return static_cast<int>(l) <= static_cast<int>(level()); }

/// Writes "<date> <time>.<µs> LEVEL [module] message" to stderr.
void write(Level level, const char* module, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

}  // namespace outboard::log

/// Per-file module name, as DOCA_LOG_REGISTER.
#define OB_LOG_MODULE(name) static constexpr const char* ob_log_module_ = name

#define OB_LOG(lvl, ...)                                                 \
  do {                                                                   \
    if (::outboard::log::enabled(lvl)) ::outboard::log::write(lvl, ob_log_module_, __VA_ARGS__); \
  } while (0)
#define OB_LOG_CRIT(...) OB_LOG(::outboard::log::Level::kCritical, __VA_ARGS__)
#define OB_LOG_ERR(...) OB_LOG(::outboard::log::Level::kError, __VA_ARGS__)
#define OB_LOG_WARN(...) OB_LOG(::outboard::log::Level::kWarning, __VA_ARGS__)
#define OB_LOG_INFO(...) OB_LOG(::outboard::log::Level::kInfo, __VA_ARGS__)
#define OB_LOG_DBG(...) OB_LOG(::outboard::log::Level::kDebug, __VA_ARGS__)
#define OB_LOG_TRC(...) OB_LOG(::outboard::log::Level::kTrace, __VA_ARGS__)
