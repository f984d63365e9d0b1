#include "outboard/config.h"

#include <charconv>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "outboard/log.h"

namespace outboard::config {
namespace {

std::string_view type_name(Type t) {
  switch (t) {
    case Type::kBool: return "boolean";
    case Type::kInt: return "integer";
    case Type::kSize: return "size (integer bytes or a string such as \"64MiB\")";
    case Type::kString: return "string";
  }
  return "?";
}

Result<bool> parse_bool(std::string_view v) {
  if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  return Status(Code::kBadConfig, "'" + std::string(v) + "' is not a boolean");
}

Result<int64_t> parse_int(std::string_view v) {
  int64_t x = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || end != v.data() + v.size() || v.empty())
    return Status(Code::kBadConfig, "'" + std::string(v) + "' is not an integer");
  return x;
}

}  // namespace

Result<uint64_t> parse_size(std::string_view text) {
  uint64_t x = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
  if (ec != std::errc() || end == text.data())
    return Status(Code::kBadConfig, "'" + std::string(text) + "' is not a size");
  std::string unit(end, text.data() + text.size());
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (!unit.empty() && unit.back() == 'b') unit.pop_back();
  if (!unit.empty() && unit.back() == 'i') unit.pop_back();
  int shift = 0;
  if (unit.empty()) shift = 0;
  else if (unit == "k") shift = 10;
  else if (unit == "m") shift = 20;
  else if (unit == "g") shift = 30;
  else if (unit == "t") shift = 40;
  else if (unit == "p") shift = 50;
  else
    return Status(Code::kBadConfig, "'" + std::string(text) + "' has an unknown size unit '" + unit +
                                        "' (k, m, g, t or p, with or without i and B)");
  if (shift && x > (UINT64_MAX >> shift))
    return Status(Code::kBadConfig, "'" + std::string(text) + "' overflows 64 bits");
  return x << shift;
}

Options::Options(std::string program, std::vector<Option> table)
    : program_(std::move(program)), table_(std::move(table)) {
  table_.push_back({"log-level", Type::kString, "warning",
                    "10 disable, 20 critical, 30 error, 40 warning, 50 info, 60 debug, 70 trace"});
  table_.push_back({"json", Type::kString, "", "read options from a JSON file (keys = long names)"});
  for (const auto& o : table_) values_[o.name] = o.default_value;
}

const Option* Options::find(std::string_view name) const {
  for (const auto& o : table_)
    if (o.name == name) return &o;
  return nullptr;
}

Status Options::check_value(const Option& opt, std::string_view value,
                            std::string_view source) const {
  Status st;
  switch (opt.type) {
    case Type::kBool: st = parse_bool(value).status(); break;
    case Type::kInt: st = parse_int(value).status(); break;
    case Type::kSize: st = parse_size(value).status(); break;
    case Type::kString: break;
  }
  if (st.ok() && opt.name == "log-level") st = log::parse_level(value).status();
  if (!st.ok())
    return {Code::kBadConfig, "option '" + opt.name + "' from " + std::string(source) +
                                  ": expected " + std::string(type_name(opt.type)) + ", " +
                                  st.message()};
  return {};
}

Status Options::set(std::string_view name, std::string_view value, std::string_view source) {
  const Option* opt = find(name);
  if (!opt)
    return {Code::kBadConfig,
            "unknown option '" + std::string(name) + "' from " + std::string(source)};
  OB_RETURN_IF_ERROR(check_value(*opt, value, source));
  values_[opt->name] = std::string(value);
  return {};
}

Status Options::apply_json(std::string_view text, std::string_view source) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // the message names the line and column
    return {Code::kBadConfig, std::string(source) + " is not valid JSON: " + e.what()};
  }
  if (!doc.is_object()) return {Code::kBadConfig, std::string(source) + " is not a JSON object"};
  // DOCA argp groups options under these two keys; accept both shapes.
  nlohmann::json flat = nlohmann::json::object();
  for (auto& [key, value] : doc.items()) {
    if ((key == "doca_general_flags" || key == "doca_program_flags") && value.is_object())
      for (auto& [k, v] : value.items()) flat[k] = v;
    else
      flat[key] = value;
  }
  for (auto& [key, value] : flat.items()) {
    const Option* opt = find(key);
    if (!opt || key == "json")
      return {Code::kBadConfig, "unknown key '" + key + "' in " + std::string(source)};
    std::string text_value;
    bool type_ok = false;
    switch (opt->type) {
      case Type::kBool:
        type_ok = value.is_boolean();
        if (type_ok) text_value = value.get<bool>() ? "true" : "false";
        break;
      case Type::kInt:
        type_ok = value.is_number_integer();
        if (type_ok) text_value = std::to_string(value.get<int64_t>());
        break;
      case Type::kSize:
        type_ok = value.is_number_unsigned() || value.is_string();
        if (type_ok)
          text_value = value.is_string() ? value.get<std::string>()
                                         : std::to_string(value.get<uint64_t>());
        break;
      case Type::kString:
        // Log levels are numbers in DOCA's JSON files.
        type_ok = value.is_string() || (key == "log-level" && value.is_number_integer());
        if (type_ok)
          text_value = value.is_string() ? value.get<std::string>()
                                         : std::to_string(value.get<int64_t>());
        break;
    }
    if (!type_ok)
      return {Code::kBadConfig, "key '" + key + "' in " + std::string(source) + ": expected " +
                                    std::string(type_name(opt->type)) + ", got " +
                                    std::string(value.type_name())};
    OB_RETURN_IF_ERROR(set(key, text_value, source));
  }
  return {};
}

Status Options::parse(int argc, const char* const* argv) {
  // Pass 1 finds --json so the command line can override the file.
  std::vector<std::pair<std::string, std::string>> args;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "-h" || a == "--help") {
      help_ = true;
      continue;
    }
    if (a.substr(0, 2) != "--")
      return {Code::kBadConfig, "unexpected argument '" + std::string(a) + "'"};
    a.remove_prefix(2);
    std::string name, value;
    if (auto eq = a.find('='); eq != std::string_view::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
    } else {
      name = a;
      const Option* opt = find(name);
      if (opt && opt->type == Type::kBool) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return {Code::kBadConfig, "option '--" + name + "' needs a value"};
      }
    }
    args.emplace_back(std::move(name), std::move(value));
  }
  for (const auto& [name, value] : args) {
    if (name != "json") continue;
    std::ifstream in(value);
    if (!in) return {Code::kBadConfig, "cannot read --json file '" + value + "'"};
    std::stringstream ss;
    ss << in.rdbuf();
    OB_RETURN_IF_ERROR(apply_json(ss.str(), "'" + value + "'"));
  }
  for (const auto& [name, value] : args)
    if (name != "json") OB_RETURN_IF_ERROR(set(name, value, "the command line"));
  return {};
}

const std::string& Options::str(std::string_view name) const {
  auto it = values_.find(name);
  if (it == values_.end()) {
    static const std::string empty;
    return empty;
  }
  return it->second;
}
int64_t Options::integer(std::string_view name) const { return parse_int(str(name)).value(); }
uint64_t Options::size(std::string_view name) const { return parse_size(str(name)).value(); }
bool Options::flag(std::string_view name) const { return parse_bool(str(name)).value(); }

std::string Options::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& o : table_) {
    if (o.name == "json") continue;
    const std::string& v = str(o.name);
    switch (o.type) {
      case Type::kBool: j[o.name] = parse_bool(v).value(); break;
      case Type::kInt: j[o.name] = parse_int(v).value(); break;
      case Type::kSize:
      case Type::kString: j[o.name] = v; break;
    }
  }
  return j.dump();
}

std::string Options::usage() const {
  std::ostringstream os;
  os << "usage: " << program_ << " [options]\n\noptions (also accepted as keys of --json FILE):\n";
  for (const auto& o : table_) {
    os << "  --" << o.name;
    if (o.type != Type::kBool) os << " " << (o.type == Type::kString ? "TEXT" : o.type == Type::kInt ? "N" : "SIZE");
    os << "\n      " << o.help;
    if (!o.default_value.empty()) os << " (default: " << o.default_value << ")";
    os << "\n";
  }
  return os.str();
}

}  // namespace outboard::config
