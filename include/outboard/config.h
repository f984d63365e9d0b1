// Option tables (UCX style): each option is declared once with its type,
// default and help; values come from defaults, then `--json FILE` (keys are
// the long option names, as in DOCA argp), then the command line.
// Thread mode: single.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "outboard/status.h"

namespace outboard::config {

enum class Type { kBool, kInt, kSize, kString };

/// One row of an option table. `default_value` is text in the option's own
/// syntax ("64MiB", "true", "127.0.0.1:0").
struct Option {
  std::string name;
  Type type;
  std::string default_value;
  std::string help;
};

/// Parses "65536", "64k", "64KiB", "64MiB", "1g" into bytes.
Result<uint64_t> parse_size(std::string_view text);

class Options {
 public:
  /// `--log-level`, `--json` and `--help` are appended to every table.
  Options(std::string program, std::vector<Option> table);

  /// Defaults, then the --json file if given, then the other arguments.
  Status parse(int argc, const char* const* argv);
  /// Applies a JSON object; `source` names it in errors.
  Status apply_json(std::string_view text, std::string_view source);
  Status set(std::string_view name, std::string_view value, std::string_view source);

  [[nodiscard]] const std::string& str(std::string_view name) const;
  [[nodiscard]] int64_t integer(std::string_view name) const;
  [[nodiscard]] uint64_t size(std::string_view name) const;
  [[nodiscard]] bool flag(std::string_view name) const;
  [[nodiscard]] bool help_requested() const { return help_; }
  /// Every option's value as a JSON object that apply_json() reads back
  /// (sizes as text, so units stay exact). Leaves out --json.
  [[nodiscard]] std::string to_json() const;
  [[nodiscard]] std::string usage() const;

 private:
  const Option* find(std::string_view name) const;
  Status check_value(const Option& opt, std::string_view value, std::string_view source) const;

  std::string program_;
  std::vector<Option> table_;
  std::map<std::string, std::string, std::less<>> values_;
  bool help_ = false;
};

}  // namespace outboard::config
