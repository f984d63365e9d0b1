// Vocabulary loaders. Every error names the file and the line or key.
#include <array>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "tokenize/model.h"
#include "tokenize/unicode.h"

namespace outboard {
namespace {

constexpr int32_t kMaxTokens = 1 << 24;  // a sanity bound on ids in vocabulary files

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(Code::kNotFound, "cannot read vocabulary file '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool base64_decode(std::string_view in, std::string& out) {
  static const std::array<int8_t, 256> table = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(alphabet[i])] = static_cast<int8_t>(i);
    return t;
  }();
  out.clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  uint32_t acc = 0;
  int bits = 0;
  size_t pad = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '=') {
      if (i + 2 < in.size()) return false;
      ++pad;
      continue;
    }
    if (pad) return false;
    int8_t v = table[static_cast<uint8_t>(c)];
    if (v < 0) return false;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return !out.empty();
}

Status finish_specials(tokenize::Gpt2Bpe& m, std::vector<std::pair<std::string, int32_t>> specials,
                       const std::string& path) {
  for (auto& [text, id] : specials) {
    if (text.empty()) return {Code::kInvalidArgument, "empty special token for '" + path + "'"};
    if (id < 0) id = static_cast<int32_t>(m.vocab.max_id() + 1);
    if (!m.vocab.bytes_of(id).empty())
      return {Code::kInvalidArgument, "special token '" + text + "' reuses id " + std::to_string(id) +
                                          " of an ordinary token in '" + path + "'"};
    m.specials.emplace_back(text, id);
  }
  return {};
}

// GPT-2's bytes_to_unicode(): printable bytes map to themselves, the other
// 68 to U+0100 onward, in order.
std::array<char32_t, 256> bytes_to_unicode() {
  std::array<char32_t, 256> map{};
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    map[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return map;
}

// vocab.json keys are byte-to-unicode strings: back to bytes.
bool unicode_to_bytes(const std::string& key, const std::unordered_map<char32_t, uint8_t>& decoder, std::string& out) {
  out.clear();
  const auto* s = reinterpret_cast<const uint8_t*>(key.data());
  for (size_t i = 0; i < key.size();) {
    int bad;
    int len = tokenize::utf8_sequence(s + i, key.size() - i, bad);
    if (len == 0) return false;
    int l2;
    char32_t cp = tokenize::decode_valid(s + i, l2);
    auto it = decoder.find(cp);
    if (it == decoder.end()) return false;
    out.push_back(static_cast<char>(it->second));
    i += len;
  }
  return !out.empty();
}

}  // namespace

Result<Tokenizer> Tokenizer::from_tiktoken(const std::string& path,
                                           std::vector<std::pair<std::string, int32_t>> specials) {
  OB_ASSIGN_OR_RETURN(std::string text, read_file(path));
  auto model = std::make_shared<tokenize::Gpt2Bpe>();
  std::istringstream lines(text);
  std::string line, token;
  size_t number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (line.empty()) continue;
    auto where = [&] { return "'" + path + "' line " + std::to_string(number); };
    auto space = line.find(' ');
    if (space == std::string::npos || !base64_decode(std::string_view(line).substr(0, space), token))
      return Status(Code::kInvalidArgument, where() + ": expected '<base64 token> <rank>'");
    char* end = nullptr;
    long rank = std::strtol(line.c_str() + space + 1, &end, 10);
    if (*end != '\0' || end == line.c_str() + space + 1 || rank < 0 || rank >= kMaxTokens)
      return Status(Code::kInvalidArgument, where() + ": rank is not an integer in 0.." + std::to_string(kMaxTokens - 1));
    Status st = model->vocab.add(token, static_cast<int32_t>(rank), static_cast<uint32_t>(rank));
    if (!st.ok()) return st.with_context(where());
  }
  if (model->vocab.size() < 256)
    return Status(Code::kInvalidArgument, "'" + path + "' has " + std::to_string(model->vocab.size()) +
                                              " tokens; a byte-level vocabulary needs at least the 256 bytes");
  OB_RETURN_IF_ERROR(model->vocab.finalize().with_context("'" + path + "'"));
  if (specials.empty()) specials.emplace_back("<|endoftext|>", -1);
  OB_RETURN_IF_ERROR(finish_specials(*model, std::move(specials), path));
  return Tokenizer(std::move(model));
}

Result<Tokenizer> Tokenizer::from_vocab_merges(const std::string& vocab_json, const std::string& merges_txt) {
  OB_ASSIGN_OR_RETURN(std::string vocab_text, read_file(vocab_json));
  OB_ASSIGN_OR_RETURN(std::string merges_text, read_file(merges_txt));
  nlohmann::json vocab = nlohmann::json::parse(vocab_text, nullptr, false);
  if (vocab.is_discarded() || !vocab.is_object())
    return Status(Code::kInvalidArgument, "'" + vocab_json + "' is not a JSON object of token -> id");
  std::unordered_map<char32_t, uint8_t> decoder;
  auto encoder = bytes_to_unicode();
  for (int b = 0; b < 256; ++b) decoder[encoder[b]] = static_cast<uint8_t>(b);

  std::map<std::string, int32_t> ids;  // token bytes -> id
  std::vector<std::pair<std::string, int32_t>> specials;
  std::string bytes;
  for (auto& [key, value] : vocab.items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() >= kMaxTokens)
      return Status(Code::kInvalidArgument, "'" + vocab_json + "' key '" + key + "': id must be an integer in 0.." +
                                                std::to_string(kMaxTokens - 1));
    auto id = static_cast<int32_t>(value.get<int64_t>());
    if (!unicode_to_bytes(key, decoder, bytes)) {
      specials.emplace_back(key, id);  // not byte-level: e.g. "<|endoftext|>" stays text
      continue;
    }
    ids.emplace(bytes, id);
  }

  std::map<std::string, uint32_t> priority;
  std::istringstream lines(merges_text);
  std::string line, a, b;
  size_t number = 0;
  uint32_t rank = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (line.empty() || (number == 1 && line.rfind("#version", 0) == 0)) continue;
    auto where = [&] { return "'" + merges_txt + "' line " + std::to_string(number); };
    auto space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
      return Status(Code::kInvalidArgument, where() + ": expected two tokens separated by one space");
    if (!unicode_to_bytes(line.substr(0, space), decoder, a) || !unicode_to_bytes(line.substr(space + 1), decoder, b))
      return Status(Code::kInvalidArgument, where() + ": a token is not byte-level (GPT-2 byte-to-unicode) text");
    if (!ids.count(a + b))
      return Status(Code::kInvalidArgument, where() + ": the merge result is not in '" + vocab_json + "'");
    priority.emplace(a + b, rank++);
  }
  auto model = std::make_shared<tokenize::Gpt2Bpe>();
  for (const auto& [token, id] : ids) {
    auto it = priority.find(token);
    if (token.size() > 1 && it == priority.end()) {
      // Reachable by no merge: BPE never produces it, so it can only be special.
      specials.emplace_back(std::string(token), id);
      continue;
    }
    uint32_t p = it == priority.end() ? tokenize::BpeVocab::kNoPriority : it->second;
    OB_RETURN_IF_ERROR(model->vocab.add(token, id, p).with_context("'" + vocab_json + "'"));
  }
  OB_RETURN_IF_ERROR(model->vocab.finalize().with_context("'" + vocab_json + "'"));
  OB_RETURN_IF_ERROR(finish_specials(*model, std::move(specials), vocab_json));
  return Tokenizer(std::move(model));
}

}  // namespace outboard
