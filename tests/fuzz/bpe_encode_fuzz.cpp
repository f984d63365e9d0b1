// libFuzzer: arbitrary bytes through byte-level BPE with each pre-tokenizer
// (r50k, cl100k, o200k, Tekken) and SentencePiece BPE (Mistral 7B's) under
// both UTF-8 policies. Never a crash or hang; valid text decodes back to
// itself (but SentencePiece's "▁", U+2581, which decodes as a space),
// and its ids' offsets cover it; each pre-tokenizer's 64-byte windows split
// valid text as its scanner does.
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "outboard/tokenizer.h"
#include "tokenize/cl100k_split.h"
#include "tokenize/gpt2_split.h"
#include "tokenize/o200k_split.h"
#include "tokenize/unicode.h"

using namespace outboard;

static std::vector<const Tokenizer*> tokenizers;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  for (const char* file :
       {"gpt2.tiktoken", "cl100k_base.tiktoken", "o200k_base.tiktoken", "tekken_240911.json", "tokenizer.model.v1"})
    tokenizers.push_back(&fuzz::load_or_abort(Tokenizer::from_file(fuzz::vocab_path(file))));
  return 0;
}

static void check(const Tokenizer* tok, std::string_view text) {
  std::vector<int32_t> ids;
  EncodeOptions strict;
  Status st = tok->encode(text, ids, strict);
  if (!st.ok() && ids.size() != 0) abort();  // failed encodes leave no partial output
  if (st.ok()) {  // valid text: its ids' offsets cover it, in order
    auto spans = tok->char_offsets(text, ids);
    if (!spans.ok()) abort();
    for (size_t i = 1; i < spans->size(); ++i)
      if ((*spans)[i][0] < (*spans)[i - 1][0] || (*spans)[i][1] < (*spans)[i - 1][1]) abort();
  }
  EncodeOptions replace;
  replace.utf8 = Utf8Policy::kReplace;
  replace.ordinary = true;
  ids.clear();
  if (!tok->encode(text, ids, replace).ok()) abort();  // replace accepts any bytes
  auto back = tok->decode(ids);
  if (!back.ok()) abort();
  if (st.ok() && back.value() != text && text.find("\xE2\x96\x81") == std::string_view::npos)
    abort();  // valid input round-trips exactly
}

template <typename Windows, typename Scanner>
static void same_pieces(std::string_view text, Windows windows, Scanner scanner) {
  std::vector<size_t> a, b;
  windows(text, [&](size_t begin, size_t end) { a.insert(a.end(), {begin, end}); });
  scanner(text, [&](size_t begin, size_t end) { b.insert(b.end(), {begin, end}); });
  if (a != b) abort();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const Tokenizer* tok : tokenizers) check(tok, text);
  if (tokenize::first_invalid_utf8(text) == text.size()) {
    same_pieces(text, [](auto t, auto&& e) { tokenize::split_gpt2(t, e); },
                [](auto t, auto&& e) { tokenize::split_gpt2_scanner(t, e); });
    same_pieces(text, [](auto t, auto&& e) { tokenize::split_cl100k(t, e); },
                [](auto t, auto&& e) { tokenize::split_cl100k_scanner(t, e); });
    same_pieces(text, [](auto t, auto&& e) { tokenize::split_o200k<tokenize::kO200kRules>(t, e); },
                [](auto t, auto&& e) { tokenize::split_o200k_scanner<tokenize::kO200kRules>(t, e); });
    same_pieces(text, [](auto t, auto&& e) { tokenize::split_o200k<tokenize::kTekkenRules>(t, e); },
                [](auto t, auto&& e) { tokenize::split_o200k_scanner<tokenize::kTekkenRules>(t, e); });
  }
  return 0;
}
