#include "tokenize/wordpiece.h"

#include <array>
#include <utility>

#include "tokenize/unicode.h"

namespace outboard::tokenize {
namespace {

bool is_whitespace(char32_t c) { return c == '\t' || c == '\n' || c == '\r' || (char_class(c) & kSpace); }

// HF: \t \n \r are whitespace, not control; other Cc Cf Co (and Cs) are.
bool is_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  return char_class(c) & kControl;
}

bool is_punctuation(char32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
  return char_class(c) & kPunct;
}

}  // namespace

BertWordPiece::CharKind BertWordPiece::char_kind(char32_t c) {
  return is_whitespace(c) ? CharKind::kWhitespace : is_punctuation(c) ? CharKind::kPunctuation : CharKind::kOther;
}

Status BertWordPiece::build(std::vector<std::string> vocab, const std::string& source) {
  tokens = std::move(vocab);
  const std::string& prefix = options.continuing_prefix;
  for (size_t id = 0; id < tokens.size(); ++id) {
    const std::string& t = tokens[id];
    if (t.empty()) continue;
    if (!prefix.empty() && t.size() > prefix.size() && t.compare(0, prefix.size(), prefix) == 0)
      continuing.insert(std::string_view(t).substr(prefix.size()), static_cast<int32_t>(id));
    initial.insert(t, static_cast<int32_t>(id));
    if (t == options.unk_token && unk_id < 0) unk_id = static_cast<int32_t>(id);
  }
  if (unk_id < 0)
    return {Code::kInvalidArgument, source + " has no unknown token '" + options.unk_token + "'"};
  initial.finalize();
  continuing.finalize();
  bmp_.assign(0x10000, 0);
  for (char32_t c = 0x80; c < 0x10000; ++c) {
    if (c >= 0xD800 && c < 0xE000) continue;  // surrogates: never in valid UTF-8
    const size_t offset = bmp_bytes_.size();
    normalize_char(c, bmp_bytes_);
    bmp_[c] = static_cast<uint32_t>(offset << 8 | (bmp_bytes_.size() - offset));
  }
  return {};
}

void BertWordPiece::normalize_char(char32_t c, std::string& out) const {
  if (options.clean_text) {
    if (c == 0 || c == 0xFFFD || is_control(c)) return;
    if (is_whitespace(c)) c = ' ';
  }
  bool cjk = options.handle_chinese_chars && (char_class(c) & kCjk);
  if (cjk) out.push_back(' ');
  // Strip accents (NFD, then drop Mn), then lowercase, per character.
  char32_t one[1] = {c};
  const char32_t* parts = one;
  size_t n = 1;
  if (options.strip_accents) decompose(c, parts, n);
  for (size_t k = 0; k < n; ++k) {
    char32_t d = parts[k];
    if (options.strip_accents && (char_class(d) & kMarkNonspacing)) continue;
    const char32_t* lower;
    size_t m;
    if (options.lowercase && lowercase(d, lower, m)) {
      for (size_t j = 0; j < m; ++j) append_utf8(lower[j], out);
    } else {
      append_utf8(d, out);
    }
  }
  if (cjk) out.push_back(' ');
}

// One character of valid UTF-8 at s[i], normalized onto `out`; i moves past it.
inline void BertWordPiece::normalize_next(const uint8_t* s, size_t& i, std::string& out) const {
  if (s[i] < 0x80) {  // ASCII: no decomposition, no CJK, lowercase by arithmetic
    const uint8_t c = s[i++];
    if (c == '\t' || c == '\n' || c == '\r' || c == ' ') {
      out.push_back(options.clean_text ? ' ' : static_cast<char>(c));
    } else if (!options.clean_text || (c >= 0x20 && c != 0x7F)) {  // else a control: dropped
      out.push_back(static_cast<char>(options.lowercase && c >= 'A' && c <= 'Z' ? c + 32 : c));
    }
    return;
  }
  int len;
  const char32_t c = decode_valid(s + i, len);
  i += static_cast<size_t>(len);
  if (c < bmp_.size()) {
    out.append(bmp_bytes_, bmp_[c] >> 8, bmp_[c] & 0xFF);
  } else {
    normalize_char(c, out);
  }
}

void BertWordPiece::normalize(std::string_view text, std::string& out) const {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  out.reserve(out.size() + text.size() + text.size() / 8);
  for (size_t i = 0; i < text.size();) normalize_next(s, i, out);
}

void BertWordPiece::encode_word(const uint8_t* p, size_t n, size_t chars, std::vector<int32_t>& out,
                                ByteSpans* spans, size_t at) const {
  const size_t mark = out.size(), span_mark = spans ? spans->size() : 0;
  auto unknown = [&] {  // the whole word becomes [UNK]
    out.resize(mark);
    out.push_back(unk_id);
    if (spans) {
      spans->resize(span_mark);
      spans->push_back({at, at + n});
    }
  };
  if (chars > options.max_input_chars_per_word) return unknown();
  const uint8_t* end = p + n;
  for (const uint8_t* q = p; q < end;) {
    int32_t id = -1;
    size_t len = (q == p ? initial : continuing).longest(q, end, id);
    if (len == 0) return unknown();  // one unmatched part spoils the word
    out.push_back(id);
    if (spans) spans->push_back({at + (q - p), at + (q - p) + len});
    q += len;
  }
}

Status BertWordPiece::encode_ordinary(std::string_view text, std::vector<int32_t>& out, const PieceCache*) const {
  std::string norm;
  normalize(text, norm);
  encode_normalized(norm, out, nullptr);
  return {};
}

Status BertWordPiece::encode_spans(std::string_view text, std::vector<int32_t>& out, ByteSpans& spans) const {
  // Each normalized byte keeps the text's character it came from.
  std::string norm;
  std::vector<std::array<size_t, 2>> source;
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = 0; i < text.size();) {
    const size_t begin = i;
    normalize_next(s, i, norm);
    source.resize(norm.size(), {begin, i});
  }
  const size_t mark = spans.size();
  encode_normalized(norm, out, &spans);
  for (size_t k = mark; k < spans.size(); ++k) spans[k] = {source[spans[k][0]][0], source[spans[k][1] - 1][1]};
  return {};
}

void BertWordPiece::encode_normalized(std::string_view norm, std::vector<int32_t>& out, ByteSpans* spans) const {
  // BertPreTokenizer: split on whitespace (dropped) and punctuation (kept alone).
  const auto* s = reinterpret_cast<const uint8_t*>(norm.data());
  size_t word = 0, chars = 0;
  auto flush = [&](size_t end) {
    if (end > word) encode_word(s + word, end - word, chars, out, spans, word);
    chars = 0;
  };
  static const auto kAsciiKind = [] {
    std::array<CharKind, 128> kinds{};
    for (char32_t c = 0; c < 128; ++c) kinds[c] = char_kind(c);
    return kinds;
  }();
  for (size_t i = 0; i < norm.size();) {
    int len = 1;
    const CharKind kind = s[i] < 0x80 ? kAsciiKind[s[i]] : char_kind(decode_valid(s + i, len));
    if (kind == CharKind::kWhitespace) {
      flush(i);
      word = i + static_cast<size_t>(len);
    } else if (kind == CharKind::kPunctuation) {
      flush(i);
      word = i;
      chars = 1;
      flush(i + static_cast<size_t>(len));
      word = i + static_cast<size_t>(len);
    } else {
      ++chars;
    }
    i += static_cast<size_t>(len);
  }
  flush(norm.size());
}

Status BertWordPiece::decode_one(int32_t id, std::string& out, bool& at_start) const {
  const bool first = std::exchange(at_start, false);
  if (decode_special(id, out)) return {};
  if (id < 0 || static_cast<size_t>(id) >= tokens.size())
    return {Code::kNotFound, "token id " + std::to_string(id) + " is not in the vocabulary"};
  const std::string& t = tokens[id];
  const std::string& prefix = options.continuing_prefix;
  if (!prefix.empty() && t.size() > prefix.size() && t.compare(0, prefix.size(), prefix) == 0) {
    out += t.substr(prefix.size());
  } else {
    if (!first) out.push_back(' ');
    out += t;
  }
  return {};
}

Result<std::string> BertWordPiece::token_text(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens.size())
    return Status(Code::kNotFound, "token id " + std::to_string(id) + " is not in the vocabulary");
  return tokens[id];
}

}  // namespace outboard::tokenize
