#include "services/vocabularies.h"

#include <sodium.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <filesystem>

#include "outboard/clock.h"
#include "outboard/log.h"
#include "util/text.h"

OB_LOG_MODULE("vocab");

namespace outboard::services {
namespace {

// Longest vocabulary name a client may give.
constexpr size_t kMaxVocabName = 128;

// One answer for every name the directory does not serve, whatever is on
// disk: a client learns nothing about the agent's files from it.
Status not_in_vocab_dir(std::string_view name) {
  return {Code::kNotFound, "vocabulary " + quote(name, kMaxVocabName) +
                               " is not in the agent's vocabulary directory (`outboard vocab fetch` there fills it; "
                               "a vocabulary file of the client's own is uploaded)"};
}

// A name the client gave, resolved in the vocabulary directory only: "gpt2",
// "cl100k_base", "o200k_base", "tekken", "mistral-v1", "mistral-v3",
// "bert-base-uncased", or a file name there (letters, digits, . _ -) whose
// name says its format (Tokenizer::vocab_format_of). Nothing outside the
// directory is opened.
Result<Tokenizer> load(const std::string& name, const std::string& vocab_dir) {
  const bool plain = !name.empty() && name.size() <= kMaxVocabName && name[0] != '.' &&
                     std::all_of(name.begin(), name.end(), [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
                     });
  if (!plain) return not_in_vocab_dir(name);
  const std::string file = name == "gpt2"                ? "gpt2.tiktoken"
                           : name == "cl100k_base"       ? "cl100k_base.tiktoken"
                           : name == "o200k_base"        ? "o200k_base.tiktoken"
                           : name == "tekken"            ? "tekken_240911.json"
                           : name == "mistral-v1"        ? "tokenizer.model.v1"
                           : name == "mistral-v3"        ? "mistral_instruct_tokenizer_240323.model.v3"
                           : name == "bert-base-uncased" ? "bert-base-uncased-vocab.txt"
                                                         : name;
  std::error_code ec;
  const auto dir = std::filesystem::canonical(vocab_dir, ec);
  if (ec) return not_in_vocab_dir(name);
  const auto path = std::filesystem::canonical(dir / file, ec);
  // A link in the directory may not lead out of it.
  if (ec || path.parent_path() != dir || !std::filesystem::is_regular_file(path, ec)) return not_in_vocab_dir(name);
  if (!Tokenizer::vocab_format_of(file)) return not_in_vocab_dir(name);
  return Tokenizer::from_file(dir / file);  // its format by the name asked for, a link's too
}

}  // namespace

Result<Vocabularies::Request> Vocabularies::upload(std::span<const uint8_t> body) const {
  if (body.empty()) return Status(Code::kInvalidArgument, "vocabulary upload names no format");
  const uint8_t format = body[0];
  if (format < static_cast<uint8_t>(VocabFormat::kTiktoken) || format > static_cast<uint8_t>(VocabFormat::kSentencePieceModel))
    return Status(Code::kInvalidArgument, "vocabulary format " + std::to_string(format) +
                                              " is not 1 (tiktoken), 2 (tokenizer.json), 3 (vocab.txt), "
                                              "4 (tiktoken, cl100k), 5 (tiktoken, o200k), 6 (Tekken) or "
                                              "7 (SentencePiece .model)");
  const auto contents = body.subspan(1);
  if (contents.size() > config_.max_upload_bytes)
    return Status(Code::kTooBig, "uploaded vocabulary of " + std::to_string(contents.size()) +
                                     " B exceeds max_vocab_bytes " + std::to_string(config_.max_upload_bytes) +
                                     " (agent option --max-vocab-bytes)");
  unsigned char digest[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(digest, contents.data(), contents.size());
  char hex[2 * sizeof digest + 1];
  sodium_bin2hex(hex, sizeof hex, digest, sizeof digest);
  // The same bytes read as another format are another tokenizer.
  return Request{"sha256:" + std::string(hex) + ":" + std::to_string(format), static_cast<VocabFormat>(format), contents};
}

Result<std::shared_ptr<const Tokenizer>> Vocabularies::open(const Request& request) {
  {
    std::lock_guard lock(mu_);
    if (auto it = loaded_.find(request.key); it != loaded_.end()) return it->second;
  }
  const auto t0 = Clock::now();
  auto loaded = request.contents.empty()
                    ? load(request.key, config_.dir)
                    : Tokenizer::from_contents(request.format,
                                               {reinterpret_cast<const char*>(request.contents.data()), request.contents.size()},
                                               "uploaded vocabulary " + request.key.substr(0, 19));
  if (!loaded.ok()) {
    OB_LOG_INFO("cannot open tokenizer: %s", loaded.status().to_string().c_str());
    return loaded.status();
  }
  OB_LOG_INFO("loaded tokenizer %s (%zu ids) in %.0f ms", quote(request.key).c_str(), loaded.value().vocab_size(),
              std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  std::lock_guard lock(mu_);
  auto& slot = loaded_[request.key];
  // A loaded tokenizer already has a default cache, unused: make another only for another size.
  if (!slot)
    slot = std::make_shared<const Tokenizer>(config_.cache_bytes == kDefaultPieceCacheBytes
                                                 ? std::move(loaded).value()
                                                 : loaded->with_piece_cache(config_.cache_bytes));
  return slot;
}

}  // namespace outboard::services
