#include <algorithm>
#include <thread>

#include "tokenize/cl100k_split.h"
#include "tokenize/gpt2_split.h"
#include "tokenize/model.h"
#include "tokenize/o200k_split.h"
#include "tokenize/unicode.h"

namespace outboard {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// Appends text[0, end) to out, each maximal ill-formed subpart as U+FFFD
// (Python's errors="replace"), where `end` is where the valid prefix of a
// character that more bytes may complete begins (text.size() if none, or
// when `final`). Returns end.
size_t append_utf8(std::string_view text, bool final, std::string& out) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0, copied = 0;
  while ((i += tokenize::first_invalid_utf8(text.substr(i))) < n) {
    int bad;
    tokenize::utf8_sequence(s + i, n - i, bad);
    if (!final && i + bad == n && s[i] >= 0xC2 && s[i] <= 0xF4) break;  // a character begun, not ended
    out.append(text.substr(copied, i - copied)).append(kReplacement);
    i += bad;
    copied = i;
  }
  out.append(text.substr(copied, i - copied));
  return i;
}

// Validates `text`; under kReplace returns a repaired copy in `repaired`.
Status check_utf8(std::string_view text, Utf8Policy policy, std::string& repaired, bool& use_repaired) {
  const size_t at = tokenize::first_invalid_utf8(text);
  use_repaired = at < text.size();
  if (!use_repaired) return {};
  if (policy == Utf8Policy::kStrict) {
    char hex[8];
    snprintf(hex, sizeof hex, "0x%02X", static_cast<uint8_t>(text[at]));
    return {Code::kInvalidArgument, "invalid UTF-8 at byte offset " + std::to_string(at) + " (byte " + hex +
                                        "); use the 'replace' policy to substitute U+FFFD"};
  }
  append_utf8(text, true, repaired);
  return {};
}

}  // namespace

Tokenizer::Tokenizer(std::shared_ptr<Model> model) {
  std::sort(model->specials.begin(), model->specials.end(),
            [](const auto& a, const auto& b) { return a.second < b.second; });
  model_ = std::move(model);
  if (model_->uses_piece_cache()) cache_ = tokenize::PieceCache::create(kDefaultPieceCacheBytes);
}

Tokenizer Tokenizer::with_piece_cache(size_t max_bytes) const {
  Tokenizer t(*this);
  t.cache_ = max_bytes != 0 && model_->uses_piece_cache() ? tokenize::PieceCache::create(max_bytes) : nullptr;
  return t;
}

size_t Tokenizer::piece_cache_bytes() const { return cache_ ? cache_->capacity_bytes() : 0; }

std::string_view Tokenizer::unicode_version() { return tokenize::unicode_version(); }

size_t Tokenizer::vocab_size() const { return model_->vocab_size(); }

std::string_view Tokenizer::config_report() const { return model_->config_report; }

const std::vector<std::pair<std::string, int32_t>>& Tokenizer::special_tokens() const { return model_->specials; }

int32_t Tokenizer::special_id(std::string_view text) const {
  for (const auto& [s, id] : model_->specials)
    if (s == text) return id;
  return -1;
}

Status Tokenizer::encode(std::string_view text, std::vector<int32_t>& out, const EncodeOptions& options) const {
  return encode_spans(text, out, options, nullptr);
}

Status Tokenizer::encode_spans(std::string_view text, std::vector<int32_t>& out, const EncodeOptions& options,
                               std::vector<std::array<size_t, 2>>* spans) const {
  std::string repaired;
  bool use_repaired = false;
  OB_RETURN_IF_ERROR(check_utf8(text, options.utf8, repaired, use_repaired));
  if (use_repaired) text = repaired;
  const size_t mark = out.size();
  // ~0.3 tokens per byte on mixed text: usually one allocation. Grow
  // geometrically: batches append many texts to one vector.
  if (size_t need = mark + text.size() / 3 + 16; need > out.capacity())
    out.reserve(std::max(need, out.capacity() * 2));
  if (options.allow_special && !model_->specials_in_text)
    return {Code::kInvalidArgument, "this vocabulary reads special-token text as ordinary text (as mistral-common "
                                    "does); add control ids to the ids instead of allowing special tokens"};
  const bool wrap = options.add_special_tokens && model_->cls_id >= 0;
  // [CLS] and [SEP] stand nowhere in the text: Hugging Face spans them (0, 0).
  if (wrap) out.push_back(model_->cls_id);
  if (wrap && spans) spans->push_back({0, 0});
  auto fail = [&](Status st) {
    out.resize(mark);
    return st;
  };
  size_t pos = 0;
  while (true) {
    // The earliest special token at or after pos, unless specials are text.
    size_t found = std::string_view::npos;
    const std::pair<std::string, int32_t>* which = nullptr;
    if (!options.ordinary && model_->specials_in_text) {
      for (const auto& sp : model_->specials) {
        if (sp.first.empty()) continue;  // loaders refuse these; never loop on an empty match
        size_t at = text.find(sp.first, pos);
        if (at < found || (at == found && which && sp.first.size() > which->first.size())) {
          found = at;
          which = &sp;
        }
      }
    }
    if (which && !options.allow_special)
      return fail({Code::kInvalidArgument, "text contains the special token '" + which->first + "' at byte offset " +
                                               std::to_string(found) +
                                               "; allow special tokens to encode it as id " +
                                               std::to_string(which->second) + ", or encode it as ordinary text"});
    std::string_view segment = text.substr(pos, which ? found - pos : std::string_view::npos);
    const size_t first = spans ? spans->size() : 0;
    if (Status st = spans ? model_->encode_spans(segment, out, *spans) : model_->encode_ordinary(segment, out, cache_.get());
        !st.ok())
      return fail(st);
    if (spans)
      for (size_t k = first; k < spans->size(); ++k) (*spans)[k] = {(*spans)[k][0] + pos, (*spans)[k][1] + pos};
    if (!which) {
      if (wrap && model_->sep_id >= 0) {
        out.push_back(model_->sep_id);
        if (spans) spans->push_back({0, 0});
      }
      return {};
    }
    out.push_back(which->second);
    if (spans) spans->push_back({found, found + which->first.size()});
    pos = found + which->first.size();
  }
}

std::vector<Status> Tokenizer::encode_each(std::span<const std::string_view> texts, std::vector<int32_t>& ids,
                                           std::vector<uint64_t>& offsets, const EncodeOptions& options,
                                           const TextLimits& limits) const {
  std::vector<Status> statuses(texts.size());
  ids.clear();
  offsets.assign(1, 0);
  for (size_t i = 0; i < texts.size(); ++i) {
    const size_t before = ids.size();
    const auto item = [i] { return "text " + std::to_string(i); };  // named only when it fails
    Status& st = statuses[i];
    if (limits.max_text_bytes != 0 && texts[i].size() > limits.max_text_bytes) {
      const std::string source = limits.max_text_bytes_source.empty()
                                     ? std::string()
                                     : " (" + std::string(limits.max_text_bytes_source) + ")";
      st = {Code::kTooBig, item() + " of " + std::to_string(texts[i].size()) + " B exceeds max_text_bytes " +
                               std::to_string(limits.max_text_bytes) + source};
    } else if (st = encode(texts[i], ids, options); !st.ok()) {
      st = st.with_context(item());
    }
    const uint64_t n = ids.size() - before;
    if (st.ok() && limits.max_len != 0 && n > limits.max_len)
      st = {Code::kTooBig, item() + " has " + std::to_string(n) + " ids, over max_len " + std::to_string(limits.max_len)};
    if (st.ok() && limits.capacity && ids.size() > *limits.capacity)
      st = {Code::kTooBig, "output buffer too small: " + item() + " needs " + std::to_string(n) + " ids at id " +
                               std::to_string(before) + " but the buffer holds " + std::to_string(*limits.capacity) +
                               " ids"};
    if (!st.ok()) ids.resize(before);
    offsets.push_back(ids.size());
  }
  return statuses;
}

Status Tokenizer::encode_batch(std::span<const std::string_view> texts, std::vector<int32_t>& ids,
                               std::vector<uint64_t>& offsets, const EncodeOptions& options, unsigned threads) const {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = std::min<unsigned>(threads, std::max<size_t>(texts.size(), 1));
  std::vector<std::vector<int32_t>> part_ids(threads);
  std::vector<std::vector<uint64_t>> part_lengths(threads);
  std::vector<Status> errors(threads);
  // Contiguous slices keep each thread's output in order.
  auto work = [&](unsigned t) {
    size_t begin = texts.size() * t / threads, end = texts.size() * (t + 1) / threads;
    for (size_t i = begin; i < end; ++i) {
      size_t before = part_ids[t].size();
      Status st = encode(texts[i], part_ids[t], options);
      if (!st.ok()) {
        errors[t] = st.with_context("text " + std::to_string(i));
        return;
      }
      part_lengths[t].push_back(part_ids[t].size() - before);
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& th : pool) th.join();
  for (const Status& st : errors) OB_RETURN_IF_ERROR(st);
  offsets.assign(1, 0);
  ids.clear();
  for (unsigned t = 0; t < threads; ++t) {
    ids.insert(ids.end(), part_ids[t].begin(), part_ids[t].end());
    for (uint64_t len : part_lengths[t]) offsets.push_back(offsets.back() + len);
  }
  return {};
}

Status Tokenizer::decode_append(std::span<const int32_t> ids, std::string& out, bool& at_start) const {
  for (int32_t id : ids) OB_RETURN_IF_ERROR(model_->decode_one(id, out, at_start));
  return {};
}

Result<std::string> Tokenizer::token_text(int32_t id) const {
  if (const std::string* special = model_->special_text(id)) return *special;
  return model_->token_text(id);
}

namespace {

using ByteSpans = Tokenizer::Model::ByteSpans;

// Where each id lies in `text` when the ids' decoded bytes spell it.
Status spelled_spans(const Tokenizer::Model& model, const Tokenizer::Model::Spelling& spelling, std::string_view text,
                     std::span<const int32_t> ids, ByteSpans& spans) {
  constexpr std::string_view kMark = "\xE2\x96\x81";  // "▁"
  std::string piece;
  size_t at = 0;                                                    // in the text
  size_t prefix = text.empty() ? 0 : spelling.prefix_spaces;  // spaces still to come before it
  for (size_t i = 0; i < ids.size(); ++i) {
    piece.clear();
    // A special id stands in the text only where special text is found there
    // (tiktoken); elsewhere the encoding added it (BOS) and it spans nothing.
    const bool added = !model.specials_in_text && model.special_text(ids[i]) != nullptr;
    bool at_start = false;  // the dummy prefix is part of the spelling here
    if (!added) OB_RETURN_IF_ERROR(model.decode_one(ids[i], piece, at_start).with_context("ids[" + std::to_string(i) + "]"));
    const size_t begin = at;
    for (char c : piece) {
      if (prefix > 0 && c == ' ') {
        --prefix;
      } else if (prefix == 0 && at < text.size() && text[at] == c) {
        ++at;
      } else if (prefix == 0 && c == ' ' && spelling.space_is_mark && text.substr(at).starts_with(kMark)) {
        at += kMark.size();
      } else {
        return {Code::kInvalidArgument, "ids[" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
                                            " does not spell the text at byte " + std::to_string(at)};
      }
    }
    spans.push_back({begin, at});
  }
  if (at != text.size() || prefix > 0)
    return {Code::kInvalidArgument,
            "the ids spell " + std::to_string(at) + " of the text's " + std::to_string(text.size()) + " bytes"};
  return {};
}

}  // namespace

// Where the encoding put each id, for models whose ids do not spell the text
// (WordPiece normalizes it): `ids` must be what encoding `text` gives, with
// special text allowed or as ordinary text, with [CLS] and [SEP] or without.
Status Tokenizer::encoded_spans(std::string_view text, std::span<const int32_t> ids,
                                std::vector<std::array<size_t, 2>>& spans) const {
  // The likelier forms first: special text allowed; [CLS] ... [SEP] when the ids begin with
  // [CLS] (which may also be "[CLS]" found in the text).
  const bool may_wrap = !ids.empty() && ids.front() == model_->cls_id;
  std::optional<std::vector<int32_t>> likeliest;  // its ids name where the given ones differ
  std::vector<int32_t> got;
  for (const bool ordinary : {false, true}) {
    for (const bool wrap : {true, false}) {
      if (wrap && !may_wrap) continue;
      got.clear();
      spans.clear();
      const EncodeOptions options{.allow_special = !ordinary, .ordinary = ordinary, .add_special_tokens = wrap};
      OB_RETURN_IF_ERROR(encode_spans(text, got, options, &spans));
      if (std::ranges::equal(got, ids)) return {};
      if (!likeliest) likeliest = got;
    }
  }
  got = std::move(*likeliest);
  const size_t i = std::ranges::mismatch(got, ids).in2 - ids.begin();
  if (i == ids.size())
    return {Code::kInvalidArgument, "the ids end after " + std::to_string(ids.size()) + " of the text's " +
                                        std::to_string(got.size()) + " ids"};
  return {Code::kInvalidArgument, "ids[" + std::to_string(i) + "] = " + std::to_string(ids[i]) +
                                      " is not the text's encoding there" +
                                      (i < got.size() ? " (" + std::to_string(got[i]) + ")" : std::string(" (no more ids)"))};
}

Result<std::vector<std::array<uint32_t, 2>>> Tokenizer::char_offsets(std::string_view text,
                                                                     std::span<const int32_t> ids) const {
  ByteSpans spans;
  spans.reserve(ids.size());
  if (Result<Model::Spelling> spelling = model_->spelling(); spelling.ok()) {
    OB_RETURN_IF_ERROR(spelled_spans(*model_, *spelling, text, ids, spans));
  } else if (spelling.status().code() == Code::kUnsupported) {
    OB_RETURN_IF_ERROR(encoded_spans(text, ids, spans));
  } else {
    return spelling.status();
  }
  std::vector<uint32_t> chars_before(text.size() + 1, 0);  // code points before each byte
  for (size_t i = 0; i < text.size(); ++i)
    chars_before[i + 1] = chars_before[i] + ((static_cast<uint8_t>(text[i]) & 0xC0) != 0x80);
  std::vector<std::array<uint32_t, 2>> out;
  out.reserve(spans.size());
  for (const auto& [begin, end] : spans) {
    const bool mid_char = begin < end && (static_cast<uint8_t>(text[begin]) & 0xC0) == 0x80;
    out.push_back({chars_before[begin] - mid_char, chars_before[end]});
  }
  return out;
}

Result<std::string> Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  bool at_start = true;
  OB_RETURN_IF_ERROR(decode_append(ids, out, at_start));
  return out;
}

DecodeStream::DecodeStream(Tokenizer tokenizer) : tokenizer_(std::move(tokenizer)) {}

Status DecodeStream::step(std::span<const int32_t> ids, std::string& out) {
  std::string bytes = pending_;
  bool at_start = at_start_;
  OB_RETURN_IF_ERROR(tokenizer_.decode_append(ids, bytes, at_start));  // nothing changes on an unknown id
  at_start_ = at_start;
  pending_ = bytes.substr(append_utf8(bytes, false, out));
  return {};
}

void DecodeStream::finish(std::string& out) {
  append_utf8(pending_, true, out);
  pending_.clear();
  at_start_ = true;
}

namespace tokenize {

Status ByteBpe::encode_ordinary(std::string_view text, std::vector<int32_t>& out, const PieceCache* cache) const {
  switch (pretokenizer) {
    case Pretokenizer::kCl100k:
      return encode_split(vocab, text, [](auto t, auto&& emit) { split_cl100k(t, emit); }, out, cache);
    case Pretokenizer::kO200k:
      return encode_split(vocab, text, [](auto t, auto&& emit) { split_o200k<kO200kRules>(t, emit); }, out, cache);
    case Pretokenizer::kTekken:
      return encode_split(vocab, text, [](auto t, auto&& emit) { split_o200k<kTekkenRules>(t, emit); }, out, cache);
    case Pretokenizer::kR50k: break;
  }
  return encode_split(vocab, text, [](auto t, auto&& emit) { split_gpt2(t, emit); }, out, cache);
}

Result<std::string> ByteBpe::token_text(int32_t id) const {
  std::string_view b = vocab.bytes_of(id);
  if (b.empty()) return Status(Code::kNotFound, "token id " + std::to_string(id) + " is not in the vocabulary");
  // GPT-2's byte-to-unicode alphabet: printable Latin-1 bytes stand for
  // themselves, the others (controls, space, 0x7F..0xA0, 0xAD) for U+0100 on.
  std::string out;
  for (unsigned char c : b) {
    const bool printable = (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c != 0xAD);
    char32_t cp = c;
    if (!printable) cp = 0x100 + (c <= 0x20 ? c : c <= 0xA0 ? c - 0x7F + 0x21 : 0x43);
    append_utf8(cp, out);
  }
  return out;
}

Status ByteBpe::decode_one(int32_t id, std::string& out, bool&) const {
  // Special text decodes as text where the input finds it as text (tiktoken);
  // Tekken's control ids are invisible, as Tekkenizer.decode's default.
  if (const std::string* special = special_text(id)) {
    if (specials_in_text) out += *special;
    return {};
  }
  std::string_view b = vocab.bytes_of(id);
  if (b.empty()) return {Code::kNotFound, "token id " + std::to_string(id) + " is not in the vocabulary"};
  out += b;
  return {};
}

}  // namespace tokenize
}  // namespace outboard
