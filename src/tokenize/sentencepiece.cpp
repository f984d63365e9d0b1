#include "tokenize/sentencepiece.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <unordered_map>

#include "tokenize/unicode.h"

namespace outboard::tokenize {
namespace {

constexpr std::string_view kMark = "\xE2\x96\x81";  // U+2581 "▁", which stands for a space
constexpr size_t kMaxPieces = size_t{1} << 20;      // a bound on a model's pieces (the largest known: 256k)

// A protobuf wire-format reader, just what a ModelProto needs. Every error
// says where in the file and which field.
class Wire {
 public:
  Wire(std::string_view bytes, size_t base) : p_(bytes), base_(base) {}
  bool done() const { return at_ == p_.size(); }
  size_t offset() const { return base_ + at_; }
  Status field(uint32_t& number, uint32_t& type) {
    uint64_t key;
    OB_RETURN_IF_ERROR(varint(key));
    number = static_cast<uint32_t>(key >> 3);
    type = static_cast<uint32_t>(key & 7);
    if (number == 0 || key >> 32 != 0) return bad("a field number of 0 or over 2^29");
    return {};
  }
  Status varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_ == p_.size()) return bad("a varint cut short");
      const auto b = static_cast<uint8_t>(p_[at_++]);
      v |= uint64_t{b & 0x7Fu} << shift;
      if (!(b & 0x80)) return {};
    }
    return bad("a varint longer than 10 bytes");
  }
  Status bytes(std::string_view& v, size_t& at) {
    uint64_t n;
    OB_RETURN_IF_ERROR(varint(n));
    if (n > p_.size() - at_) return bad("a length of " + std::to_string(n) + " past the end");
    at = offset();
    v = p_.substr(at_, n);
    at_ += n;
    return {};
  }
  Status fixed32(uint32_t& v) {
    if (p_.size() - at_ < 4) return bad("a fixed32 cut short");
    std::memcpy(&v, p_.data() + at_, 4);  // little-endian, as the hosts we build for
    at_ += 4;
    return {};
  }
  Status skip(uint32_t type) {
    uint64_t v;
    std::string_view s;
    size_t at;
    switch (type) {
      case 0: return varint(v);
      case 1:
        if (p_.size() - at_ < 8) return bad("a fixed64 cut short");
        at_ += 8;
        return {};
      case 2: return bytes(s, at);
      case 5: {
        uint32_t f;
        return fixed32(f);
      }
    }
    return bad("wire type " + std::to_string(type));
  }
  Status bad(const std::string& what) const {
    return {Code::kInvalidArgument, "at byte " + std::to_string(offset()) + ": " + what};
  }

 private:
  std::string_view p_;
  size_t base_;
  size_t at_ = 0;
};

// The ModelProto fields we read (sentencepiece_model.proto), proto2 defaults.
struct Piece {
  std::string_view text;
  float score = 0;
  uint32_t type = 1;  // NORMAL
};
enum PieceType : uint32_t { kNormal = 1, kUnknownType = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
struct Spec {
  uint64_t model_type = 1;  // UNIGRAM
  bool byte_fallback = false, whitespace_suffix = false;
  int32_t unk_id = 0, bos_id = 1;
  std::string unk_surface = " \xE2\x81\x87 ";  // " ⁇ "
  std::string normalizer;
  size_t charsmap_bytes = 0;
  bool dummy_prefix = true, remove_extra_whitespaces = true, escape_whitespaces = true;
};

// Reads the fields of one message; `on(number, type, wire)` reads a field it
// knows and returns true, else the field is skipped.
template <typename On>
Status read_message(std::string_view bytes, size_t base, const std::string& where, On on) {
  Wire w(bytes, base);
  while (!w.done()) {
    uint32_t number, type;
    Status st = w.field(number, type);
    bool known = false;
    if (st.ok()) st = on(number, type, w, known);
    if (st.ok() && !known) st = w.skip(type);
    if (!st.ok()) return st.with_context(where);
  }
  return {};
}

Status expect(uint32_t type, uint32_t want, const Wire& w, const char* field) {
  if (type == want) return {};
  return w.bad(std::string(field) + " has wire type " + std::to_string(type) + ", not " + std::to_string(want));
}

Status read_piece(std::string_view bytes, size_t base, const std::string& where, Piece& piece) {
  return read_message(bytes, base, where, [&](uint32_t number, uint32_t type, Wire& w, bool& known) -> Status {
    known = number <= 3;
    size_t at;
    uint64_t v;
    uint32_t f = 0;
    switch (number) {
      case 1: OB_RETURN_IF_ERROR(expect(type, 2, w, "piece")); return w.bytes(piece.text, at);
      case 2:
        OB_RETURN_IF_ERROR(expect(type, 5, w, "score"));
        OB_RETURN_IF_ERROR(w.fixed32(f));
        std::memcpy(&piece.score, &f, 4);
        return {};
      case 3:
        OB_RETURN_IF_ERROR(expect(type, 0, w, "type"));
        OB_RETURN_IF_ERROR(w.varint(v));
        piece.type = static_cast<uint32_t>(std::min<uint64_t>(v, UINT32_MAX));
        return {};
    }
    return {};
  });
}

Status read_spec(std::string_view bytes, size_t base, const std::string& where, bool trainer, Spec& spec) {
  return read_message(bytes, base, where, [&](uint32_t number, uint32_t type, Wire& w, bool& known) -> Status {
    uint64_t v = 0;
    std::string_view s;
    size_t at;
    auto number_field = [&](const char* name) -> Status {
      known = true;
      OB_RETURN_IF_ERROR(expect(type, 0, w, name));
      return w.varint(v);
    };
    auto string_field = [&](const char* name) -> Status {
      known = true;
      OB_RETURN_IF_ERROR(expect(type, 2, w, name));
      return w.bytes(s, at);
    };
    if (trainer) {
      switch (number) {
        case 3: OB_RETURN_IF_ERROR(number_field("model_type")); spec.model_type = v; break;
        case 24: OB_RETURN_IF_ERROR(number_field("treat_whitespace_as_suffix")); spec.whitespace_suffix = v; break;
        case 35: OB_RETURN_IF_ERROR(number_field("byte_fallback")); spec.byte_fallback = v; break;
        case 40: OB_RETURN_IF_ERROR(number_field("unk_id")); spec.unk_id = static_cast<int32_t>(v); break;
        case 41: OB_RETURN_IF_ERROR(number_field("bos_id")); spec.bos_id = static_cast<int32_t>(v); break;
        case 44: OB_RETURN_IF_ERROR(string_field("unk_surface")); spec.unk_surface = s; break;
      }
      return {};
    }
    switch (number) {
      case 1: OB_RETURN_IF_ERROR(string_field("name")); spec.normalizer = s; break;
      case 2: OB_RETURN_IF_ERROR(string_field("precompiled_charsmap")); spec.charsmap_bytes = s.size(); break;
      case 3: OB_RETURN_IF_ERROR(number_field("add_dummy_prefix")); spec.dummy_prefix = v; break;
      case 4: OB_RETURN_IF_ERROR(number_field("remove_extra_whitespaces")); spec.remove_extra_whitespaces = v; break;
      case 5: OB_RETURN_IF_ERROR(number_field("escape_whitespaces")); spec.escape_whitespaces = v; break;
    }
    return {};
  });
}

size_t char_length(std::string_view s) {
  int len;
  decode_valid(reinterpret_cast<const uint8_t*>(s.data()), len);
  return static_cast<size_t>(len);
}

bool all_spaces(std::string_view s) {
  for (size_t i = 0; i < s.size(); i += kMark.size())
    if (s.substr(i, kMark.size()) != kMark) return false;
  return true;
}

// "<0x41>" -> 0x41, or -1.
int byte_of(std::string_view s) {
  if (s.size() != 6 || !s.starts_with("<0x") || s[5] != '>') return -1;
  int v = 0;
  for (char c : s.substr(3, 2)) {
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

Result<Tokenizer> build(const std::vector<Piece>& pieces, const Spec& spec, const std::string& src) {
  auto bad = [&](const std::string& field, const std::string& what) {
    return Status(Code::kInvalidArgument, src + " " + field + " " + what);
  };
  auto unsupported = [&](const std::string& field, const std::string& what) {
    return Status(Code::kUnsupported, src + " " + field + " " + what);
  };
  if (spec.model_type != 2)
    return unsupported("trainer_spec.model_type", "is " + std::to_string(spec.model_type) +
                                                      "; only BPE (2) is supported (1 is UNIGRAM)");
  if (!spec.byte_fallback) return unsupported("trainer_spec.byte_fallback", "is false; only byte-fallback models are supported");
  if (spec.whitespace_suffix) return unsupported("trainer_spec.treat_whitespace_as_suffix", "is true; not supported");
  if (spec.charsmap_bytes != 0)
    return unsupported("normalizer_spec.precompiled_charsmap",
                       "has " + std::to_string(spec.charsmap_bytes) + " bytes (normalizer '" + spec.normalizer +
                           "'); only the identity normalizer is supported");
  if (spec.remove_extra_whitespaces) return unsupported("normalizer_spec.remove_extra_whitespaces", "is true; not supported");
  if (!spec.escape_whitespaces) return unsupported("normalizer_spec.escape_whitespaces", "is false; not supported");
  const auto n = static_cast<int32_t>(pieces.size());
  if (n < 256 + 1) return bad("pieces", "holds " + std::to_string(n) + " pieces; a byte-fallback model needs over 256");

  auto model = std::make_shared<SentencePieceBpe>();
  model->pieces = n;
  model->stops[' '] = true;
  model->dummy_prefix = spec.dummy_prefix;
  model->specials_in_text = false;  // as sentencepiece: control-token text is ordinary text
  model->kinds.resize(n);
  model->texts.resize(n);
  std::fill(std::begin(model->byte_ids), std::end(model->byte_ids), -1);
  std::unordered_map<std::string_view, int32_t> seen;
  std::vector<int32_t> merged;  // NORMAL pieces of two characters or more
  std::map<std::string, int32_t> chars;  // single-character NORMAL pieces
  for (int32_t id = 0; id < n; ++id) {
    const Piece& p = pieces[id];
    const std::string field = "pieces[" + std::to_string(id) + "]";
    if (p.text.empty()) return bad(field + ".piece", "is empty");
    if (first_invalid_utf8(p.text) != p.text.size()) return bad(field + ".piece", "is not valid UTF-8");
    if (std::isnan(p.score)) return bad(field + ".score", "is NaN");
    if (auto [it, fresh] = seen.emplace(p.text, id); !fresh)
      return bad(field + ".piece", "'" + std::string(p.text) + "' repeats pieces[" + std::to_string(it->second) + "]");
    const bool one_char = char_length(p.text) == p.text.size();
    std::string text(p.text);
    for (size_t at; (at = text.find(kMark)) != std::string::npos;) text.replace(at, kMark.size(), " ");
    switch (p.type) {
      case kNormal:
        if (one_char) chars.emplace(p.text, id);
        else merged.push_back(id);
        model->kinds[id] = SentencePieceBpe::Kind::kText;
        model->texts[id] = std::move(text);
        break;
      case kUserDefined:
        if (p.text.find(kMark) != std::string_view::npos || p.text.find(' ') != std::string_view::npos)
          return unsupported(field + ".piece", "is a user-defined piece with a space; not supported");
        model->user_defined.insert(p.text, id);
        model->stops[static_cast<uint8_t>(p.text[0])] = true;
        model->kinds[id] = SentencePieceBpe::Kind::kText;
        model->texts[id] = std::move(text);
        break;
      case kByte: {
        const int b = byte_of(p.text);
        if (b < 0) return bad(field + ".piece", "is a byte piece but not of the form <0xHH>");
        if (model->byte_ids[b] >= 0) return bad(field + ".piece", "repeats the byte piece " + std::string(p.text));
        model->byte_ids[b] = id;
        model->kinds[id] = SentencePieceBpe::Kind::kByte;
        model->texts[id] = std::string(1, static_cast<char>(b));
        break;
      }
      case kControl:
      case kUnknownType:
        // A one-character control piece would capture that character (sentencepiece looks these up first).
        if (one_char) return unsupported(field + ".piece", "is a control piece of one character; not supported");
        model->kinds[id] = p.type == kControl ? SentencePieceBpe::Kind::kControl : SentencePieceBpe::Kind::kUnknown;
        if (p.type == kControl) model->specials.emplace_back(p.text, id);
        else model->unknown_piece = p.text;
        break;
      case kUnused: return unsupported(field + ".type", "is UNUSED (5); not supported");
      default: return bad(field + ".type", "is " + std::to_string(p.type) + ", not a SentencePiece type (1..6)");
    }
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    if (model->byte_ids[b] < 0) return bad("pieces", std::string("lack the byte piece ") + name);
  }
  if (spec.unk_id < 0 || spec.unk_id >= n || model->kinds[spec.unk_id] != SentencePieceBpe::Kind::kUnknown)
    return bad("trainer_spec.unk_id", std::to_string(spec.unk_id) + " is not an UNKNOWN piece");
  model->user_defined.finalize();
  model->unknown_surface = spec.unk_surface;
  if (spec.bos_id >= 0) {
    if (spec.bos_id >= n || model->kinds[spec.bos_id] != SentencePieceBpe::Kind::kControl)
      return bad("trainer_spec.bos_id", std::to_string(spec.bos_id) + " is not a CONTROL piece");
    model->cls_id = spec.bos_id;  // add_special_tokens: BOS, as sentencepiece's add_bos
  }

  // Merge priorities. Characters first (every one before any real merge,
  // as SentencePiece starts from them), shorter byte strings before longer
  // so a character's prefixes come before it; then the merged pieces by
  // score, highest first.
  std::map<std::string, int32_t> prefixes;  // partial characters: the steps that form a 3- or 4-byte one
  int32_t next_id = n;
  for (const auto& [c, id] : chars)
    for (size_t k = 2; k < c.size(); ++k)
      if (prefixes.emplace(c.substr(0, k), next_id).second) ++next_id;
  std::vector<std::pair<std::string_view, int32_t>> char_steps;
  for (const auto& [c, id] : chars) char_steps.emplace_back(c, id);
  for (const auto& [c, id] : prefixes) char_steps.emplace_back(c, id);
  std::stable_sort(char_steps.begin(), char_steps.end(),
                   [](const auto& a, const auto& b) { return a.first.size() < b.first.size(); });
  for (int32_t id : merged)
    for (size_t i = 0; i < pieces[id].text.size(); i += char_length(pieces[id].text.substr(i)))
      if (!chars.contains(std::string(pieces[id].text.substr(i, char_length(pieces[id].text.substr(i))))))
        return unsupported("pieces[" + std::to_string(id) + "].piece",
                           "holds a character that is no piece of its own; not a BPE vocabulary");
  // Pieces of spaces alone ("▁▁".."▁"x16 in Mistral's) scored below every
  // other merge tie, and sentencepiece merges the leftmost pair of a tie: it
  // joins the spaces a word left alone only after everything else, from the
  // left. encode_normalized does that step itself (runs of "▁" in the
  // output); a space run then more would break it.
  auto is_run = [&](int32_t id) { return all_spaces(pieces[id].text); };
  const auto runs_end = std::stable_partition(merged.begin(), merged.end(), [&](int32_t id) { return !is_run(id); });
  float others_lowest = INFINITY, runs_highest = -INFINITY;
  for (auto it = merged.begin(); it != runs_end; ++it) others_lowest = std::min(others_lowest, pieces[*it].score);
  for (auto it = runs_end; it != merged.end(); ++it) runs_highest = std::max(runs_highest, pieces[*it].score);
  if (runs_end != merged.end() && runs_highest <= others_lowest && chars.contains(std::string(kMark))) {
    for (auto it = merged.begin(); it != runs_end; ++it)
      if (pieces[*it].text.starts_with(std::string(kMark) + std::string(kMark)))
        return unsupported("pieces[" + std::to_string(*it) + "].piece", "starts with two spaces then more; not supported");
    model->space_runs.assign(2, -1);
    model->space_runs[1] = chars.at(std::string(kMark));
    for (auto it = runs_end; it != merged.end(); ++it) {
      const size_t m = pieces[*it].text.size() / kMark.size();
      if (m >= model->space_runs.size()) model->space_runs.resize(m + 1, -1);
      model->space_runs[m] = *it;
    }
    merged.erase(runs_end, merged.end());
  }
  std::sort(merged.begin(), merged.end(), [&](int32_t a, int32_t b) {
    return pieces[a].score != pieces[b].score ? pieces[a].score > pieces[b].score : a < b;
  });
  for (size_t i = 0; i + 1 < merged.size(); ++i)
    if (pieces[merged[i]].score == pieces[merged[i + 1]].score)
      return unsupported("pieces[" + std::to_string(merged[i]) + "].score",
                         "ties with pieces[" + std::to_string(merged[i + 1]) + "]'s; ties are supported only among "
                         "pieces of spaces scored below all others");
  // Which characters stand side by side in the pieces the merges form.
  std::vector<std::pair<uint64_t, uint8_t>> joins;
  std::unordered_map<char32_t, uint8_t> sides;  // kJoinsRight | kJoinsLeft
  for (int32_t id : merged) {
    const auto* t = reinterpret_cast<const uint8_t*>(pieces[id].text.data());
    int len;
    char32_t a = decode_valid(t, len);
    for (size_t i = static_cast<size_t>(len); i < pieces[id].text.size(); i += static_cast<size_t>(len)) {
      const char32_t b = decode_valid(t + i, len);
      if ((a | b) < 0x80) model->ascii_joins[a][b >> 6] |= uint64_t{1} << (b & 63);
      else joins.emplace_back(uint64_t{a} << 21 | b, 1);
      sides[a] |= SentencePieceBpe::kJoinsRight;
      sides[b] |= SentencePieceBpe::kJoinsLeft;
      a = b;
    }
  }
  std::sort(joins.begin(), joins.end());
  joins.erase(std::unique(joins.begin(), joins.end()), joins.end());
  model->joins.build(joins);
  std::vector<std::pair<uint64_t, SentencePieceBpe::CharInfo>> infos;
  for (const auto& [c, id] : chars) {
    int len;
    const char32_t cp = decode_valid(reinterpret_cast<const uint8_t*>(c.data()), len);
    const SentencePieceBpe::CharInfo info{id, sides.contains(cp) ? sides[cp] : uint8_t{0}};
    if (cp < 0x80) model->ascii_info[cp] = info;
    else infos.emplace_back(cp, info);
  }
  model->char_info.build(infos);
  for (int b = 0; b < 0x80; ++b)
    if (model->ascii_info[b].id < 0) model->ascii_info[b].id = model->byte_ids[b];  // its byte piece
  uint32_t priority = 0;
  for (const auto& [bytes, id] : char_steps)
    OB_RETURN_IF_ERROR(model->vocab.add(bytes, id, priority++).with_context(src));
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    if (!chars.contains(std::string(1, c)))  // a byte no character piece holds: its fallback id
      OB_RETURN_IF_ERROR(model->vocab.add(std::string_view(&c, 1), model->byte_ids[b], 0).with_context(src));
  }
  for (int32_t id : merged) OB_RETURN_IF_ERROR(model->vocab.add(pieces[id].text, id, priority++).with_context(src));
  OB_RETURN_IF_ERROR(model->vocab.finalize().with_context(src));
  return Tokenizer(std::move(model));
}

}  // namespace

Result<Tokenizer> parse_sentencepiece(std::string_view bytes, const std::string& src) {
  std::vector<Piece> pieces;
  Spec spec;
  Status st = read_message(bytes, 0, src, [&](uint32_t number, uint32_t type, Wire& w, bool& known) -> Status {
    if (number < 1 || number > 3) return {};
    known = true;
    static constexpr const char* kNames[] = {"", "pieces", "trainer_spec", "normalizer_spec"};
    OB_RETURN_IF_ERROR(expect(type, 2, w, kNames[number]));
    std::string_view body;
    size_t at;
    OB_RETURN_IF_ERROR(w.bytes(body, at));
    if (number == 1) {
      if (pieces.size() == kMaxPieces) return w.bad("more than " + std::to_string(kMaxPieces) + " pieces");
      pieces.emplace_back();
      return read_piece(body, at, "pieces[" + std::to_string(pieces.size() - 1) + "]", pieces.back());
    }
    return read_spec(body, at, kNames[number], number == 2, spec);
  });
  if (!st.ok()) return st;
  if (pieces.empty()) return Status(Code::kInvalidArgument, src + " is not a SentencePiece model: no pieces");
  return build(pieces, spec, src);
}

// The text splits between two characters no piece holds side by side;
// most parts are one character (its piece from a table), the rest go
// through the vocabulary, the cache and the merges — in batches, hashed
// and prefetched first so their cache misses overlap.
Status SentencePieceBpe::encode_normalized(std::string_view norm, std::vector<int32_t>& out,
                                           const PieceCache* cache) const {
  if (norm.empty()) return {};
  const size_t from = out.size();
  const auto* s = reinterpret_cast<const uint8_t*>(norm.data());
  const size_t n = norm.size();
  constexpr int32_t kFallback = -1, kMerge = -2;
  constexpr size_t kBatch = 16;
  struct Part {
    size_t begin, end;
    int32_t id;  // a character's piece, kFallback (its bytes) or kMerge
    uint64_t hash;
  } batch[kBatch];
  size_t parts = 0;
  Status st;
  auto flush = [&] {
    for (size_t j = 0; j < parts && st.ok(); ++j) {
      const Part& p = batch[j];
      if (p.id >= 0) out.push_back(p.id);
      else if (p.id == kFallback) for (size_t b = p.begin; b < p.end; ++b) out.push_back(byte_ids[s[b]]);
      else if (Status r = vocab.encode_piece(s + p.begin, p.end - p.begin, p.hash, out, cache); !r.ok())
        st = std::move(r);  // assigned only on error: a Status's string costs per piece
    }
    parts = 0;
  };
  size_t begin = 0, chars = 0;
  char32_t a = 0;
  CharInfo ia;
  for (size_t i = 0;;) {
    char32_t b = 0;
    int len = 0;
    CharInfo ib;
    if (i < n) {
      if (s[i] < 0x80) {
        b = s[i];
        len = 1;
        ib = ascii_info[b];
      } else {
        b = decode_valid(s + i, len);
        if (const CharInfo* found = char_info.find(b)) ib = *found;
      }
    }
    if (i == n || (chars > 0 && !join(a, ia, b, ib))) {
      Part& p = batch[parts++];
      p = {begin, i, chars == 1 ? (ia.id >= 0 ? ia.id : kFallback) : kMerge, 0};
      if (p.id == kMerge) {
        p.hash = BpeVocab::hash(s + begin, i - begin);
        vocab.prefetch(p.hash);
        if (cache) cache->prefetch(p.hash, i - begin);
      }
      if (parts == kBatch || i == n) flush();
      OB_RETURN_IF_ERROR(st);
      if (i == n) break;
      begin = i;
      chars = 0;
    }
    a = b;
    ia = ib;
    ++chars;
    i += static_cast<size_t>(len);
  }
  if (!space_runs.empty()) join_space_runs(out, from);
  return {};
}

// Runs of "▁" take their last merges: leftmost first, so a stack of the
// blocks so far, none of whose neighbours merge; each next "▁" merges into
// it as far as it goes.
void SentencePieceBpe::join_space_runs(std::vector<int32_t>& out, size_t from) const {
  const int32_t mark = space_runs[1];
  size_t w = from;
  std::vector<size_t> blocks;
  for (size_t r = from; r < out.size();) {
    if (out[r] != mark || r + 1 == out.size() || out[r + 1] != mark) {
      out[w++] = out[r++];
      continue;
    }
    blocks.clear();
    for (; r < out.size() && out[r] == mark; ++r) {
      size_t b = 1;
      while (!blocks.empty() && blocks.back() + b < space_runs.size() && space_runs[blocks.back() + b] >= 0) {
        b += blocks.back();
        blocks.pop_back();
      }
      blocks.push_back(b);
    }
    for (size_t b : blocks) out[w++] = space_runs[b];  // fewer ids than the run: w stays behind r
  }
  out.resize(w);
}

// sentencepiece's normalizer (identity; spaces become "▁", "▁" first) and
// its user-defined pieces, matched whole where they appear.
Status SentencePieceBpe::encode_ordinary(std::string_view text, std::vector<int32_t>& out,
                                         const PieceCache* cache) const {
  if (text.empty()) return {};
  std::string norm;
  norm.reserve(text.size() + text.size() / 4 + kMark.size());
  if (dummy_prefix) norm += kMark;
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  size_t copied = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!stops[s[i]]) continue;  // neither a space nor how a user-defined piece begins
    int32_t id = -1;
    const size_t len = text[i] == ' ' ? 0 : user_defined.longest(s + i, s + text.size(), id);
    if (text[i] != ' ' && len == 0) continue;
    norm.append(text.substr(copied, i - copied));
    copied = i + (len ? len : 1);
    if (len == 0) {
      norm += kMark;
      continue;
    }
    OB_RETURN_IF_ERROR(encode_normalized(norm, out, cache));
    norm.clear();
    out.push_back(id);
    i += len - 1;
  }
  norm.append(text.substr(copied));
  return encode_normalized(norm, out, cache);
}

// sentencepiece's decode: control pieces are invisible, <unk> shows its
// surface, and the first piece's "▁" (the dummy prefix) is dropped.
Status SentencePieceBpe::decode_one(int32_t id, std::string& out, bool& at_start) const {
  if (id < 0 || id >= pieces) return {Code::kNotFound, "token id " + std::to_string(id) + " is not in the vocabulary"};
  switch (kinds[id]) {
    case Kind::kControl: return {};
    case Kind::kUnknown:
      out += unknown_surface;
      at_start = false;
      return {};
    case Kind::kByte:
      out += texts[id];
      at_start = false;
      return {};
    case Kind::kText: break;
  }
  std::string_view t = texts[id];
  if (at_start && dummy_prefix && t.starts_with(' ')) t.remove_prefix(1);
  out += t;
  at_start = false;  // text came, or the dummy prefix was dropped
  return {};
}

Result<std::string> SentencePieceBpe::token_text(int32_t id) const {
  if (id < 0 || id >= pieces) return Status(Code::kNotFound, "token id " + std::to_string(id) + " is not in the vocabulary");
  switch (kinds[id]) {
    case Kind::kUnknown: return unknown_piece;
    case Kind::kByte: {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", static_cast<uint8_t>(texts[id][0]));
      return std::string(name);
    }
    case Kind::kControl:  // every control piece is a special token, spelled there
    case Kind::kText: break;
  }
  std::string out;
  for (char c : texts[id]) {
    if (c == ' ') out += kMark;
    else out.push_back(c);
  }
  return out;
}

}  // namespace outboard::tokenize
