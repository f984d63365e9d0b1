#include "services/vocabulary_request.h"

#include <fstream>
#include <sstream>

#include "outboard/tokenizer.h"

namespace outboard::services {

Status put_vocabulary_request(codec::Writer& w, const std::string& name) {
  if (name.find('/') == std::string::npos) {
    w.put(kOpenByName);
    w.put_bytes(name);
    return {};
  }
  const std::optional<VocabFormat> format = Tokenizer::vocab_format_of(name);
  if (!format)
    return {Code::kInvalidArgument, "vocabulary file '" + name + "' is not a .tiktoken, tokenizer .json or vocab .txt"};
  std::ifstream in(name, std::ios::binary);
  if (!in) return {Code::kNotFound, "cannot read vocabulary file '" + name + "'"};
  std::ostringstream contents;
  contents << in.rdbuf();
  w.put(kOpenUpload);
  w.put(static_cast<uint8_t>(*format));
  w.put_bytes(contents.view());
  return {};
}

}  // namespace outboard::services
