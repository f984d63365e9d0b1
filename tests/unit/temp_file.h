// A file in the temp directory for one test, removed when it goes out of
// scope: thousands of test runs must not leave thousands of files behind.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

namespace outboard::testing {

class TempFile {
 public:
  // Named per process: ctest runs tests as parallel processes, and a shared
  // file would be truncated under a reader.
  TempFile(std::string_view name, std::string_view content)
      : path_(std::filesystem::temp_directory_path() /
              ("outboard_" + std::to_string(getpid()) + "_" + std::string(name))) {
    std::ofstream(path_, std::ios::binary) << content;
  }
  ~TempFile() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  [[nodiscard]] std::string string() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace outboard::testing
