#include "gpu/gpu_tokenizer.h"

#include <string>

#include "tokenize/unicode.h"

namespace outboard::gpu {

Status check_batch(std::span<const std::string_view> texts, bool ordinary,
                   const std::vector<std::pair<std::string, int32_t>>& specials) {
  size_t total = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string_view text = texts[i];
    total += text.size();
    if (const size_t bad = tokenize::first_invalid_utf8(text); bad < text.size())
      return {Code::kInvalidArgument,
              "text " + std::to_string(i) + " is not valid UTF-8 at byte offset " + std::to_string(bad)};
    if (ordinary) continue;
    for (const auto& [special, id] : specials)
      if (const size_t at = text.find(special); !special.empty() && at != std::string_view::npos)
        return {Code::kInvalidArgument, "text " + std::to_string(i) + " contains the special token '" + special +
                                            "' at byte offset " + std::to_string(at) +
                                            "; the GPU tokenizer encodes it only as ordinary text"};
  }
  if (total > kMaxBatchBytes)
    return {Code::kTooBig, "batch of " + std::to_string(total) + " bytes: over the GPU tokenizer's limit of " +
                               std::to_string(kMaxBatchBytes) + " (kMaxBatchBytes)"};
  return {};
}

}  // namespace outboard::gpu
