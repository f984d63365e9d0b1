// libFuzzer: arbitrary SentencePiece .model files (protobuf) load or fail
// with a Status; a loaded one encodes any valid text and decodes its ids.
#include "fuzz_common.h"
#include "outboard/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto t = outboard::Tokenizer::from_sentencepiece(outboard::fuzz::scratch("sp.model", data, size));
  if (t.ok()) {
    std::vector<int32_t> ids;
    outboard::EncodeOptions o;
    o.add_special_tokens = true;
    if (!t->encode("Fuzz me,  Tokens! 123 [INST] [REF]\xC3\xA9\xE6\x97\xA5 \xF0\x9F\x98\x80", ids, o).ok()) abort();
    if (!t->decode(ids).ok()) abort();
  }
  return 0;
}
