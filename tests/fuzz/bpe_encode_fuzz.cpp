// libFuzzer: arbitrary bytes through byte-level BPE with each pre-tokenizer
// (r50k, cl100k) under both UTF-8 policies. Never a crash or hang; valid
// text decodes back to itself.
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "fuzz_common.h"
#include "outboard/tokenizer.h"

using namespace outboard;

static const Tokenizer* r50k = nullptr;
static const Tokenizer* cl100k = nullptr;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  r50k = &fuzz::load_or_abort(Tokenizer::from_tiktoken(fuzz::vocab_path("gpt2.tiktoken")));
  cl100k = &fuzz::load_or_abort(
      Tokenizer::from_tiktoken(fuzz::vocab_path("cl100k_base.tiktoken"), {}, Pretokenizer::kCl100k));
  return 0;
}

static void check(const Tokenizer* tok, std::string_view text) {
  std::vector<int32_t> ids;
  EncodeOptions strict;
  Status st = tok->encode(text, ids, strict);
  if (!st.ok() && ids.size() != 0) abort();  // failed encodes leave no partial output
  EncodeOptions replace;
  replace.utf8 = Utf8Policy::kReplace;
  replace.ordinary = true;
  ids.clear();
  if (!tok->encode(text, ids, replace).ok()) abort();  // replace accepts any bytes
  auto back = tok->decode(ids);
  if (!back.ok()) abort();
  if (st.ok() && back.value() != text) abort();  // valid input round-trips exactly
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  check(r50k, text);
  check(cl100k, text);
  return 0;
}
