// libFuzzer: arbitrary bytes through GPT-2 encoding under both UTF-8 policies.
// Never a crash or hang; under 'replace' decoding gives back the repaired text.
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "fuzz_common.h"
#include "outboard/tokenizer.h"

using namespace outboard;

static const Tokenizer* tok = nullptr;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tok = &fuzz::load_or_abort(Tokenizer::from_tiktoken(fuzz::vocab_path("gpt2.tiktoken")));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
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
  return 0;
}
