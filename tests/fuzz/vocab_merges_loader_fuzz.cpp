// libFuzzer: arbitrary vocab.json + merges.txt pairs (split at the first NUL).
#include <cstring>

#include "fuzz_common.h"
#include "outboard/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* nul = static_cast<const uint8_t*>(memchr(data, 0, size));
  size_t split = nul ? static_cast<size_t>(nul - data) : size;
  std::string vocab = outboard::fuzz::scratch("vocab.json", data, split);
  std::string merges = outboard::fuzz::scratch("merges.txt", nul ? nul + 1 : data + size, nul ? size - split - 1 : 0);
  auto t = outboard::Tokenizer::from_vocab_merges(vocab, merges);
  if (t.ok()) {
    std::vector<int32_t> ids;
    (void)t->encode("fuzz", ids);
  }
  return 0;
}
