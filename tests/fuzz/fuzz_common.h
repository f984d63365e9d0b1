#pragma once

#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "outboard/tokenizer.h"

namespace outboard::fuzz {

/// A vocabulary from the per-user cache (`outboard vocab fetch`).
inline std::string vocab_path(const char* name) {
  const char* dir = std::getenv("OUTBOARD_CACHE_DIR");
  const char* home = std::getenv("HOME");
  std::filesystem::path p = dir ? std::filesystem::path(dir) : std::filesystem::path(home ? home : "/") / ".cache/outboard";
  return (p / name).string();
}

/// A tokenizer for the whole run; aborts (the fuzzer cannot start) if it does not load.
inline const Tokenizer& load_or_abort(Result<Tokenizer> loaded) {
  static std::deque<Tokenizer> held;  // a deque: earlier tokenizers stay where they are
  if (!loaded.ok()) {
    fprintf(stderr, "%s (run `outboard vocab fetch`)\n", loaded.status().to_string().c_str());
    abort();
  }
  return held.emplace_back(std::move(loaded).value());
}

/// Writes `data` to a per-process scratch file (loaders read files).
inline std::string scratch(const char* tag, const uint8_t* data, size_t size) {
  std::string path = "/tmp/outboard-fuzz-" + std::to_string(getpid()) + "-" + tag;
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

}  // namespace outboard::fuzz
