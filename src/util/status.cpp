#include "outboard/status.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace outboard {

std::string_view code_name(Code code) {
  switch (code) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: return "invalid argument";
    case Code::kTooBig: return "too big";
    case Code::kNotFound: return "not found";
    case Code::kBadConfig: return "bad config";
    case Code::kUnsupported: return "unsupported";
    case Code::kAgain: return "again";
    case Code::kTimedOut: return "timed out";
    case Code::kNoMemory: return "no memory";
    case Code::kIoError: return "i/o error";
    case Code::kOutOfRange: return "out of range";
    case Code::kBadState: return "bad state";
    case Code::kFailed: return "failed";
    case Code::kNotConnected: return "not connected";
    case Code::kConnectionReset: return "connection reset";
    case Code::kAuthentication: return "authentication";
    case Code::kShutDown: return "shut down";
  }
  return "unknown";
}

bool known_code(int value) {
  return value >= INT8_MIN && value <= INT8_MAX && code_name(static_cast<Code>(value)) != "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  std::string s(code_name(code_));
  if (!message_.empty()) s.append(": ").append(message_);
  return s;
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  return {code_, std::string(context) + ": " + message_};
}

namespace detail {

void check_failed(const char* condition, const char* file, int line, std::string_view message) {
  std::fprintf(stderr, "outboard: check failed: %s at %s:%d%s%.*s\n", condition, file, line,
               message.empty() ? "" : ": ", static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
  std::abort();
}

}  // namespace detail

}  // namespace outboard
