// libFuzzer: arbitrary bytes through BERT WordPiece under both UTF-8 policies,
// and the offsets of what encodes.
#include <cstdlib>

#include "fuzz_common.h"
#include "outboard/tokenizer.h"

using namespace outboard;

static const Tokenizer* tok = nullptr;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tok = &fuzz::load_or_abort(Tokenizer::bert_wordpiece(fuzz::vocab_path("bert-base-uncased-vocab.txt")));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<int32_t> ids;
  EncodeOptions strict;
  strict.allow_special = true;
  Status st = tok->encode(text, ids, strict);
  if (!st.ok() && !ids.empty()) abort();
  if (st.ok()) {  // valid text: each id lies in it, in order (pieces of one character, a Hangul syllable's jamo, share it)
    auto spans = tok->char_offsets(text, ids);
    if (!spans.ok() || spans->size() != ids.size()) abort();
    size_t chars = 0;
    for (size_t i = 0; i < text.size(); ++i) chars += (static_cast<uint8_t>(text[i]) & 0xC0) != 0x80;
    for (size_t i = 0; i < spans->size(); ++i) {
      const auto [begin, end] = (*spans)[i];
      if (begin > end || end > chars) abort();
      if (i > 0 && (begin < (*spans)[i - 1][0] || end < (*spans)[i - 1][1])) abort();
    }
  }
  EncodeOptions replace = strict;
  replace.utf8 = Utf8Policy::kReplace;
  replace.add_special_tokens = true;
  ids.clear();
  if (!tok->encode(text, ids, replace).ok()) abort();
  for (int32_t id : ids)
    if (id < 0 || static_cast<size_t>(id) >= tok->vocab_size()) abort();
  if (!tok->decode(ids).ok()) abort();
  return 0;
}
