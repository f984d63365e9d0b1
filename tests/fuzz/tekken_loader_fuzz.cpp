// libFuzzer: arbitrary Tekken (tekken_*.json) files load or fail with a Status.
#include "fuzz_common.h"
#include "outboard/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto t = outboard::Tokenizer::from_tekken_json(outboard::fuzz::scratch("tekken.json", data, size));
  if (t.ok()) {
    std::vector<int32_t> ids;
    outboard::EncodeOptions o;
    o.add_special_tokens = true;
    if (!t->encode("Fuzz me, Tokens! 123 [INST]", ids).ok()) abort();  // a loaded Tekken encodes any valid text
    if (!t->decode(ids).ok()) abort();
  }
  return 0;
}
