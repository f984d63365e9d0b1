// libFuzzer: arbitrary .tiktoken files load or fail with a Status, never crash.
#include "fuzz_common.h"
#include "outboard/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto t = outboard::Tokenizer::from_tiktoken(outboard::fuzz::scratch("tiktoken", data, size));
  if (t.ok()) {
    std::vector<int32_t> ids;
    (void)t->encode("fuzz me, tokens!", ids);
  }
  return 0;
}
