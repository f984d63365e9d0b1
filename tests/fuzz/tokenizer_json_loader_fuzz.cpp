// libFuzzer: arbitrary tokenizer.json files load or fail with a Status.
#include "fuzz_common.h"
#include "outboard/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto t = outboard::Tokenizer::from_tokenizer_json(outboard::fuzz::scratch("tokenizer.json", data, size));
  if (t.ok()) {
    std::vector<int32_t> ids;
    outboard::EncodeOptions o;
    o.allow_special = true;
    (void)t->encode("Fuzz me, Tokens!", ids, o);
  }
  return 0;
}
