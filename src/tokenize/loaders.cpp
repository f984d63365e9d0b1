// Vocabulary loaders. Every error names the file and the line or key.
#include <array>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "tokenize/model.h"
#include "tokenize/sentencepiece.h"
#include "tokenize/wordpiece.h"
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

Status finish_specials(tokenize::ByteBpe& m, std::vector<std::pair<std::string, int32_t>> specials,
                       const std::string& path) {
  for (auto& [text, id] : specials) {
    if (text.empty()) return {Code::kInvalidArgument, "empty special token for " + path};
    if (id < 0) id = static_cast<int32_t>(m.vocab.max_id() + 1);
    if (!m.vocab.bytes_of(id).empty())
      return {Code::kInvalidArgument, "special token '" + text + "' reuses id " + std::to_string(id) +
                                          " of an ordinary token in " + path};
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

namespace {

// `src` names the vocabulary in errors: "'path'" or an uploaded one's name.
Result<Tokenizer> parse_tiktoken(std::string_view text, const std::string& src,
                                 std::vector<std::pair<std::string, int32_t>> specials, Pretokenizer pretokenizer) {
  const std::string& path = src;
  auto model = std::make_shared<tokenize::ByteBpe>();
  model->pretokenizer = pretokenizer;
  std::istringstream lines{std::string(text)};
  std::string line, token;
  size_t number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (line.empty()) continue;
    auto where = [&] { return path + " line " + std::to_string(number); };
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
    return Status(Code::kInvalidArgument, path + " has " + std::to_string(model->vocab.size()) +
                                              " tokens; a byte-level vocabulary needs at least the 256 bytes");
  OB_RETURN_IF_ERROR(model->vocab.finalize().with_context(path));
  if (specials.empty() && pretokenizer == Pretokenizer::kCl100k)  // tiktoken's cl100k_base
    specials = {{"<|endoftext|>", 100257}, {"<|fim_prefix|>", 100258}, {"<|fim_middle|>", 100259},
                {"<|fim_suffix|>", 100260}, {"<|endofprompt|>", 100276}};
  if (specials.empty() && pretokenizer == Pretokenizer::kO200k)  // tiktoken's o200k_base
    specials = {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}};
  if (specials.empty()) specials.emplace_back("<|endoftext|>", -1);
  OB_RETURN_IF_ERROR(finish_specials(*model, std::move(specials), path));
  return Tokenizer(std::move(model));
}

}  // namespace

Result<Tokenizer> Tokenizer::from_tiktoken(const std::string& path,
                                           std::vector<std::pair<std::string, int32_t>> specials,
                                           Pretokenizer pretokenizer) {
  OB_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_tiktoken(text, "'" + path + "'", std::move(specials), pretokenizer);
}

namespace {

struct Merge {
  std::string left, right, where;
};

// GPT-2 byte-level BPE from byte-to-unicode vocabulary strings and merges.
Result<std::shared_ptr<tokenize::ByteBpe>> build_bpe(const nlohmann::json& vocab, const std::vector<Merge>& merges,
                                                     const std::string& vocab_source) {
  if (!vocab.is_object()) return Status(Code::kInvalidArgument, vocab_source + " is not a JSON object of token -> id");
  std::unordered_map<char32_t, uint8_t> decoder;
  auto encoder = bytes_to_unicode();
  for (int b = 0; b < 256; ++b) decoder[encoder[b]] = static_cast<uint8_t>(b);

  std::map<std::string, int32_t> ids;  // token bytes -> id
  std::vector<std::pair<std::string, int32_t>> specials;
  std::string bytes;
  for (auto& [key, value] : vocab.items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() >= kMaxTokens)
      return Status(Code::kInvalidArgument, vocab_source + " key '" + key + "': id must be an integer in 0.." +
                                                std::to_string(kMaxTokens - 1));
    auto id = static_cast<int32_t>(value.get<int64_t>());
    if (!unicode_to_bytes(key, decoder, bytes)) {
      specials.emplace_back(key, id);  // not byte-level: e.g. "<|endoftext|>" stays text
      continue;
    }
    ids.emplace(bytes, id);
  }
  std::map<std::string, uint32_t> priority;
  std::string a, b;
  uint32_t rank = 0;
  for (const Merge& m : merges) {
    if (!unicode_to_bytes(m.left, decoder, a) || !unicode_to_bytes(m.right, decoder, b))
      return Status(Code::kInvalidArgument, m.where + ": a token is not byte-level (GPT-2 byte-to-unicode) text");
    if (!ids.count(a + b))
      return Status(Code::kInvalidArgument, m.where + ": the merge result is not in " + vocab_source);
    priority.emplace(a + b, rank++);
  }
  auto model = std::make_shared<tokenize::ByteBpe>();
  for (const auto& [token, id] : ids) {
    auto it = priority.find(token);
    if (token.size() > 1 && it == priority.end()) {
      // Reachable by no merge: BPE never produces it, so it can only be special.
      specials.emplace_back(std::string(token), id);
      continue;
    }
    uint32_t p = it == priority.end() ? tokenize::BpeVocab::kNoPriority : it->second;
    OB_RETURN_IF_ERROR(model->vocab.add(token, id, p).with_context(vocab_source));
  }
  OB_RETURN_IF_ERROR(model->vocab.finalize().with_context(vocab_source));
  OB_RETURN_IF_ERROR(finish_specials(*model, std::move(specials), vocab_source));
  return model;
}

// `src` names the document in errors; a syntax error names its position.
Result<nlohmann::json> parse_json(std::string_view text, const std::string& src) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // a syntax error, or a number out of range
    return Status(Code::kInvalidArgument, src + " is not valid JSON: " + e.what());
  }
}

Result<nlohmann::json> read_json(const std::string& path) {
  OB_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_json(text, "'" + path + "'");
}

}  // namespace

Result<Tokenizer> Tokenizer::from_vocab_merges(const std::string& vocab_json, const std::string& merges_txt) {
  OB_ASSIGN_OR_RETURN(nlohmann::json vocab, read_json(vocab_json));
  OB_ASSIGN_OR_RETURN(std::string merges_text, read_file(merges_txt));
  std::vector<Merge> merges;
  std::istringstream lines(merges_text);
  std::string line;
  size_t number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (line.empty() || (number == 1 && line.rfind("#version", 0) == 0)) continue;
    std::string where = "'" + merges_txt + "' line " + std::to_string(number);
    auto space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
      return Status(Code::kInvalidArgument, where + ": expected two tokens separated by one space");
    merges.push_back({line.substr(0, space), line.substr(space + 1), where});
  }
  OB_ASSIGN_OR_RETURN(auto model, build_bpe(vocab, merges, "'" + vocab_json + "'"));
  return Tokenizer(std::move(model));
}

namespace {

Result<std::shared_ptr<tokenize::BertWordPiece>> make_wordpiece(std::vector<std::string> vocab,
                                                                const tokenize::BertOptions& options,
                                                                const std::string& source) {
  auto model = std::make_shared<tokenize::BertWordPiece>();
  model->options = options;
  OB_RETURN_IF_ERROR(model->build(std::move(vocab), source));
  return model;
}

// Which of the vocabulary's bracketed tokens count as special, and [CLS]/[SEP].
void bert_specials(tokenize::BertWordPiece& m, const std::vector<std::string>& names) {
  for (const auto& name : names)
    for (size_t id = 0; id < m.tokens.size(); ++id)
      if (m.tokens[id] == name) {
        m.specials.emplace_back(name, static_cast<int32_t>(id));
        break;
      }
  for (const auto& [name, id] : m.specials) {
    if (name == "[CLS]") m.cls_id = id;
    if (name == "[SEP]") m.sep_id = id;
  }
}

}  // namespace

namespace {

Result<Tokenizer> parse_wordpiece_vocab(std::string_view text, const std::string& src, const WordPieceOptions& options) {
  std::vector<std::string> vocab;
  std::istringstream lines{std::string(text)};
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    vocab.push_back(line);
  }
  if (vocab.empty()) return Status(Code::kInvalidArgument, src + " holds no tokens");
  tokenize::BertOptions o;
  o.lowercase = options.lowercase;
  o.strip_accents = options.strip_accents < 0 ? options.lowercase : options.strip_accents != 0;
  o.clean_text = options.clean_text;
  o.handle_chinese_chars = options.handle_chinese_chars;
  OB_ASSIGN_OR_RETURN(auto model, make_wordpiece(std::move(vocab), o, src));
  bert_specials(*model, {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"});
  return Tokenizer(std::move(model));
}

Result<Tokenizer> tokenizer_json(std::string_view text, const std::string& src);

// nlohmann throws on a value of an unexpected type deep in the document;
// the error stops here, as a Status naming the vocabulary.
Result<Tokenizer> parse_tokenizer_json(std::string_view text, const std::string& src) {
  try {
    return tokenizer_json(text, src);
  } catch (const nlohmann::json::exception& e) {
    return Status(Code::kInvalidArgument, src + " is a malformed tokenizer.json: " + e.what());
  }
}

// Mistral's Tekken files carry this pattern (o200k's classes, one digit, no
// contractions); the scanner implements it, not the regex in the file.
constexpr std::string_view kTekkenPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?)"
    R"([\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// The special tokens of Tekken files that list none (mistral-common's
// DEPRECATED_SPECIAL_TOKENS), ranks 0.. in order; "<SPECIAL_n>" fill the rest.
constexpr const char* kTekkenDefaultSpecials[] = {
    "<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]", "[PREFIX]", "[MIDDLE]",
    "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]"};

Result<Tokenizer> tekken_json(std::string_view text, const std::string& src) {
  OB_ASSIGN_OR_RETURN(nlohmann::json doc, parse_json(text, src));
  auto bad = [&](const std::string& key, const std::string& what) {
    return Status(Code::kInvalidArgument, src + " key '" + key + "' " + what);
  };
  if (!doc.is_object() || !doc.contains("config") || !doc["config"].is_object() || !doc.contains("vocab") ||
      !doc["vocab"].is_array())
    return Status(Code::kInvalidArgument, src + " is not a Tekken tokenizer: no \"config\" object or \"vocab\" list");
  const nlohmann::json& config = doc["config"];
  const nlohmann::json pattern = config.value("pattern", nlohmann::json());
  if (!pattern.is_string() || pattern.get<std::string>() != kTekkenPattern)
    return Status(Code::kUnsupported, src + " key 'config.pattern' is not Tekken's pattern (the one supported)");
  auto count = [&](const char* key) -> Result<int64_t> {
    const nlohmann::json v = config.value(key, nlohmann::json());
    if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > kMaxTokens)
      return bad(std::string("config.") + key, "must be an integer in 1.." + std::to_string(kMaxTokens));
    return v.get<int64_t>();
  };
  OB_ASSIGN_OR_RETURN(const int64_t vocab_size, count("default_vocab_size"));
  OB_ASSIGN_OR_RETURN(const int64_t num_special, count("default_num_special_tokens"));
  const nlohmann::json& vocab = doc["vocab"];
  const int64_t inner = vocab_size - num_special;  // ranks in use: mistral-common cuts the list there
  if (inner < 256 || static_cast<int64_t>(vocab.size()) < inner)
    return bad("vocab", "holds " + std::to_string(vocab.size()) + " tokens; default_vocab_size " +
                            std::to_string(vocab_size) + " less default_num_special_tokens " +
                            std::to_string(num_special) + " needs at least " + std::to_string(std::max<int64_t>(inner, 256)));
  auto model = std::make_shared<tokenize::ByteBpe>();
  model->pretokenizer = Pretokenizer::kTekken;
  model->specials_in_text = false;
  std::string bytes;
  for (int64_t rank = 0; rank < inner; ++rank) {
    const nlohmann::json& t = vocab[rank];
    const std::string key = "vocab[" + std::to_string(rank) + "]";
    if (!t.is_object() || t.value("rank", nlohmann::json()) != rank)
      return bad(key + ".rank", "must be " + std::to_string(rank) + " (ranks in order)");
    const nlohmann::json b64 = t.value("token_bytes", nlohmann::json());
    if (!b64.is_string() || !base64_decode(b64.get<std::string>(), bytes))
      return bad(key + ".token_bytes", "is not base64 of the token's bytes");
    if (rank < 256 && (bytes.size() != 1 || static_cast<uint8_t>(bytes[0]) != rank))
      return bad(key + ".token_bytes", "must be the byte " + std::to_string(rank));
    OB_RETURN_IF_ERROR(model->vocab.add(bytes, static_cast<int32_t>(rank + num_special), static_cast<uint32_t>(rank))
                           .with_context(src + " " + key));
  }
  OB_RETURN_IF_ERROR(model->vocab.finalize().with_context(src));
  std::vector<std::string> names(static_cast<size_t>(num_special));
  const nlohmann::json listed = doc.value("special_tokens", nlohmann::json());
  if (listed.is_array()) {
    for (size_t i = 0; i < listed.size(); ++i) {
      const std::string key = "special_tokens[" + std::to_string(i) + "]";
      const nlohmann::json& t = listed[i];
      const nlohmann::json rank = t.is_object() ? t.value("rank", nlohmann::json()) : nlohmann::json();
      const nlohmann::json str = t.is_object() ? t.value("token_str", nlohmann::json()) : nlohmann::json();
      if (!rank.is_number_integer() || rank.get<int64_t>() < 0 || rank.get<int64_t>() >= num_special)
        return bad(key + ".rank", "must be an integer in 0.." + std::to_string(num_special - 1));
      if (!str.is_string() || str.get<std::string>().empty() || !names[rank.get<size_t>()].empty())
        return bad(key, "needs a non-empty token_str and a rank no other special token has");
      names[rank.get<size_t>()] = str.get<std::string>();
    }
  } else if (!listed.is_null()) {
    return bad("special_tokens", "must be a list");
  } else {
    for (size_t i = 0; i < std::size(kTekkenDefaultSpecials) && i < names.size(); ++i) names[i] = kTekkenDefaultSpecials[i];
  }
  for (size_t id = 0; id < names.size(); ++id) {
    if (names[id].empty()) names[id] = "<SPECIAL_" + std::to_string(id) + ">";
    if (names[id] == "<s>") model->cls_id = static_cast<int32_t>(id);  // add_special_tokens: BOS
    model->specials.emplace_back(std::move(names[id]), static_cast<int32_t>(id));
  }
  return Tokenizer(std::move(model));
}

Result<Tokenizer> parse_tekken(std::string_view text, const std::string& src) {
  try {
    return tekken_json(text, src);
  } catch (const nlohmann::json::exception& e) {
    return Status(Code::kInvalidArgument, src + " is a malformed Tekken file: " + e.what());
  }
}

}  // namespace

Result<Tokenizer> Tokenizer::bert_wordpiece(const std::string& vocab_txt, const WordPieceOptions& options) {
  OB_ASSIGN_OR_RETURN(std::string text, read_file(vocab_txt));
  return parse_wordpiece_vocab(text, "'" + vocab_txt + "'", options);
}

Result<Tokenizer> Tokenizer::from_tekken_json(const std::string& path) {
  OB_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_tekken(text, "'" + path + "'");
}

Result<Tokenizer> Tokenizer::from_sentencepiece(const std::string& path) {
  OB_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  return tokenize::parse_sentencepiece(bytes, "'" + path + "'");
}

Result<Tokenizer> Tokenizer::from_tokenizer_json(const std::string& path) {
  OB_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_tokenizer_json(text, "'" + path + "'");
}

std::optional<VocabFormat> Tokenizer::vocab_format_of(std::string_view path) {
  const std::string_view name = path.substr(path.find_last_of('/') + 1);  // npos + 1 == 0
  if (name.ends_with(".tiktoken"))
    return name.starts_with("cl100k") ? VocabFormat::kTiktokenCl100k
           : name.starts_with("o200k") ? VocabFormat::kTiktokenO200k
                                       : VocabFormat::kTiktoken;
  if (name.ends_with(".json")) return name.starts_with("tekken") ? VocabFormat::kTekkenJson : VocabFormat::kTokenizerJson;
  if (name.ends_with(".txt")) return VocabFormat::kWordPieceVocab;
  if (name.ends_with(".model") || name.find(".model.v") != std::string_view::npos)
    return VocabFormat::kSentencePieceModel;  // mistral-common ships "tokenizer.model.v1", "...model.v3"
  return std::nullopt;
}

Result<Tokenizer> Tokenizer::from_file(const std::string& path) {
  const std::optional<VocabFormat> format = vocab_format_of(path);
  if (!format)
    return Status(Code::kInvalidArgument,
                  "vocabulary file '" + path + "' is not a .tiktoken, tokenizer .json, vocab .txt or SentencePiece .model");
  OB_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return from_contents(*format, text, "'" + path + "'");
}

Result<Tokenizer> Tokenizer::from_contents(VocabFormat format, std::string_view contents, const std::string& label) {
  switch (format) {
    case VocabFormat::kTiktoken: return parse_tiktoken(contents, label, {}, Pretokenizer::kR50k);
    case VocabFormat::kTiktokenCl100k: return parse_tiktoken(contents, label, {}, Pretokenizer::kCl100k);
    case VocabFormat::kTiktokenO200k: return parse_tiktoken(contents, label, {}, Pretokenizer::kO200k);
    case VocabFormat::kTekkenJson: return parse_tekken(contents, label);
    case VocabFormat::kTokenizerJson: return parse_tokenizer_json(contents, label);
    case VocabFormat::kWordPieceVocab: return parse_wordpiece_vocab(contents, label, {});
    case VocabFormat::kSentencePieceModel: return tokenize::parse_sentencepiece(contents, label);
  }
  return Status(Code::kInvalidArgument, label + ": unknown vocabulary format " + std::to_string(static_cast<int>(format)));
}

namespace {

Result<Tokenizer> tokenizer_json(std::string_view text, const std::string& src) {
  using Model = Tokenizer::Model;
  OB_ASSIGN_OR_RETURN(nlohmann::json doc, parse_json(text, src));
  if (!doc.is_object() || !doc.contains("model") || !doc["model"].is_object())
    return Status(Code::kInvalidArgument, src + " has no \"model\" object");
  const nlohmann::json& model = doc["model"];
  std::string type = model.value("type", "");
  auto field = [&](const nlohmann::json& obj, const char* key, auto fallback, const std::string& where) {
    using T = decltype(fallback);
    if (!obj.contains(key) || obj[key].is_null()) return Result<T>(fallback);
    try {
      return Result<T>(obj[key].get<T>());
    } catch (const nlohmann::json::exception&) {
      return Result<T>(Status(Code::kInvalidArgument, src + " key '" + where + "." + key + "' has the wrong type"));
    }
  };
  nlohmann::json report = {{"padding", doc.value("padding", nlohmann::json())},
                           {"truncation", doc.value("truncation", nlohmann::json())},
                           {"applied", false}};
  std::shared_ptr<Model> result;
  if (type == "WordPiece") {
    if (!model.contains("vocab") || !model["vocab"].is_object())
      return Status(Code::kInvalidArgument, src + " key 'model.vocab' must be an object of token -> id");
    std::vector<std::string> vocab(model["vocab"].size());
    std::vector<bool> taken(vocab.size(), false);
    for (auto& [token, id] : model["vocab"].items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= static_cast<int64_t>(vocab.size()))
        return Status(Code::kInvalidArgument, src + " key 'model.vocab." + token + "': id must be 0.." +
                                                  std::to_string(vocab.size() - 1));
      if (token.empty() || taken[id.get<size_t>()])
        return Status(Code::kInvalidArgument, src + " key 'model.vocab." + token + "': empty token or id " +
                                                  std::to_string(id.get<int64_t>()) + " used twice");
      taken[id.get<size_t>()] = true;
      vocab[id.get<size_t>()] = token;
    }
    tokenize::BertOptions o;
    OB_ASSIGN_OR_RETURN(o.unk_token, field(model, "unk_token", o.unk_token, "model"));
    OB_ASSIGN_OR_RETURN(o.continuing_prefix, field(model, "continuing_subword_prefix", o.continuing_prefix, "model"));
    OB_ASSIGN_OR_RETURN(o.max_input_chars_per_word,
                        field(model, "max_input_chars_per_word", o.max_input_chars_per_word, "model"));
    const nlohmann::json norm = doc.value("normalizer", nlohmann::json());
    if (norm.is_object()) {
      if (norm.value("type", "") != "BertNormalizer")
        return Status(Code::kUnsupported, src + " normalizer '" + norm.value("type", "?") +
                                              "' (WordPiece supports BertNormalizer)");
      OB_ASSIGN_OR_RETURN(o.clean_text, field(norm, "clean_text", true, "normalizer"));
      OB_ASSIGN_OR_RETURN(o.handle_chinese_chars, field(norm, "handle_chinese_chars", true, "normalizer"));
      OB_ASSIGN_OR_RETURN(o.lowercase, field(norm, "lowercase", true, "normalizer"));
      OB_ASSIGN_OR_RETURN(o.strip_accents, field(norm, "strip_accents", o.lowercase, "normalizer"));
    } else {
      o.clean_text = o.handle_chinese_chars = o.strip_accents = o.lowercase = false;
    }
    const nlohmann::json pre = doc.value("pre_tokenizer", nlohmann::json());
    if (pre.is_object() && pre.value("type", "") != "BertPreTokenizer")
      return Status(Code::kUnsupported, src + " pre_tokenizer '" + pre.value("type", "?") +
                                            "' (WordPiece supports BertPreTokenizer)");
    OB_ASSIGN_OR_RETURN(auto wp, make_wordpiece(std::move(vocab), o, src));
    std::vector<std::string> specials;
    const nlohmann::json added = doc.value("added_tokens", nlohmann::json::array());
    for (size_t i = 0; i < added.size(); ++i) {
      const nlohmann::json& t = added[i];
      if (!t.is_object() || !t.value("special", false)) continue;
      std::string content = t.value("content", "");
      if (content.empty())
        return Status(Code::kInvalidArgument, src + " key 'added_tokens[" + std::to_string(i) + "].content' is missing or empty");
      specials.push_back(std::move(content));
    }
    bert_specials(*wp, specials);
    result = wp;
  } else if (type == "BPE") {
    if (!model.contains("vocab") || !model["vocab"].is_object())
      return Status(Code::kInvalidArgument, src + " key 'model.vocab' must be an object of token -> id");
    std::vector<Merge> merges;
    const nlohmann::json m = model.value("merges", nlohmann::json::array());
    for (size_t i = 0; i < m.size(); ++i) {
      std::string where = src + " model.merges[" + std::to_string(i) + "]";
      if (m[i].is_string()) {
        std::string line = m[i].get<std::string>();
        auto space = line.find(' ');
        if (space == std::string::npos) return Status(Code::kInvalidArgument, where + ": expected \"a b\"");
        merges.push_back({line.substr(0, space), line.substr(space + 1), where});
      } else if (m[i].is_array() && m[i].size() == 2 && m[i][0].is_string() && m[i][1].is_string()) {
        merges.push_back({m[i][0].get<std::string>(), m[i][1].get<std::string>(), where});
      } else {
        return Status(Code::kInvalidArgument, where + ": expected \"a b\" or [\"a\", \"b\"]");
      }
    }
    OB_ASSIGN_OR_RETURN(auto bpe, build_bpe(model["vocab"], merges, src + " model.vocab"));
    report["add_prefix_space"] = doc.value("pre_tokenizer", nlohmann::json()).value("add_prefix_space", false);
    result = bpe;
  } else {
    return Status(Code::kUnsupported, src + " model type '" + type + "' (supported: WordPiece, BPE)");
  }
  result->config_report = report.dump();
  return Tokenizer(std::move(result));
}

}  // namespace
}  // namespace outboard
