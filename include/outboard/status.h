// Status and Result: every fallible call returns one of these (no exceptions
// cross a module, thread or the C boundary).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace outboard {

/// Error codes, grouped by what the failure destroys. Each says whether a
/// retry of the same call can succeed.
enum class Code : int8_t {
  kOk = 0,
  kInvalidArgument = -1,   ///< Caller error; do not retry.
  kTooBig = -2,            ///< A size over a configured limit; nothing was sent.
  kNotFound = -3,          ///< Named item (service, key, file) does not exist.
  kBadConfig = -4,         ///< Configuration rejected; fix the option.
  kUnsupported = -5,       ///< Feature unavailable here.
  kAgain = -6,             ///< Transient (no credit, queue full): retry after progress.
  kTimedOut = -7,          ///< Deadline passed; the call may be retried.
  kNoMemory = -8,          ///< Allocation or registration failed.
  kIoError = -9,           ///< Operating-system or transport I/O failure.
  kOutOfRange = -10,       ///< Access outside a registered region.
  kBadState = -11,         ///< Wrong state for the call (frozen graph, run in flight): change it first.
  kFailed = -12,           ///< A task failed (its error or exception is in the message).
  kNotConnected = -40,     ///< No connection (never made, or closed locally).
  kConnectionReset = -41,  ///< Peer died or reset: drop the connection.
  kAuthentication = -42,   ///< The peer's keys, certificate or a sealed frame did not authenticate: connection ended.
  kShutDown = -60,         ///< Agent is shutting down: reconnect elsewhere.
};

/// Stable lowercase name of a code, e.g. "too big".
std::string_view code_name(Code code);
/// Whether `value` (from the wire) is one of the codes above.
bool known_code(int value);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  [[nodiscard]] bool ok() const { return code_ == Code::kOk; }
  [[nodiscard]] Code code() const { return code_; }
  [[nodiscard]] const std::string& message() const { return message_; }
  /// "too big: message of 70000 B exceeds max_msg_size 65536 B".
  [[nodiscard]] std::string to_string() const;
  /// Prefixes context while an error propagates upward.
  [[nodiscard]] Status with_context(std::string_view context) const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status ok_status() { return {}; }

namespace detail {
/// Prints "check failed: <condition> at <file>:<line>: <message>" and aborts.
[[noreturn]] void check_failed(const char* condition, const char* file, int line, std::string_view message = {});
}  // namespace detail

/// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}                // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}         // NOLINT
  Result(Code code, std::string msg) : v_(Status(code, std::move(msg))) {}

  [[nodiscard]] bool ok() const { return std::holds_alternative<T>(v_); }
  [[nodiscard]] Status status() const { return ok() ? Status() : std::get<Status>(v_); }
  /// The value; a Result that holds an error is misuse (OB_CHECK).
  T& value() & { return check_value(), std::get<T>(v_); }
  const T& value() const& { return check_value(), std::get<T>(v_); }
  T&& value() && { return check_value(), std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  T& operator*() & { return value(); }

 private:
  void check_value() const {
    if (!ok()) [[unlikely]]
      detail::check_failed("ok()", __FILE__, __LINE__, "value() of " + std::get<Status>(v_).to_string());
  }
  std::variant<T, Status> v_;
};

}  // namespace outboard

/// A broken precondition, which only a programming error can cause (a
/// moved-from handle, value() of an error), aborts naming file:line. Bad
/// input and lost peers return a Status instead: misuse aborts, failure
/// returns. `OB_CHECK(cond)` or `OB_CHECK(cond, message)`.
#define OB_CHECK(cond, ...)                                                                  \
  do {                                                                                       \
    if (!(cond)) [[unlikely]]                                                                \
      ::outboard::detail::check_failed(#cond, __FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)

#define OB_CONCAT_INNER(a, b) a##b
#define OB_CONCAT(a, b) OB_CONCAT_INNER(a, b)

/// Returns the Status of `expr` from the enclosing function if it is an error.
#define OB_RETURN_IF_ERROR(expr)                      \
  do {                                                \
    ::outboard::Status ob_status_ = (expr);           \
    if (!ob_status_.ok()) return ob_status_;          \
  } while (0)

/// `OB_ASSIGN_OR_RETURN(auto x, make_x());`
#define OB_ASSIGN_OR_RETURN(decl, expr) \
  OB_ASSIGN_OR_RETURN_IMPL(OB_CONCAT(ob_result_, __LINE__), decl, expr)
#define OB_ASSIGN_OR_RETURN_IMPL(tmp, decl, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  decl = std::move(tmp).value()
