// What the pre-tokenizers' 64-byte windows are tested against: their own scanner, piece for
// piece, on texts drawn from what makes the rules differ — contractions in both cases and their
// look-alikes, runs of each kind of whitespace and line break, letters, digits and other ASCII,
// characters of each UTF-8 length — at every length and offset around a window's edge.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace outboard::tokenize::testing {

using Pieces = std::vector<std::pair<size_t, size_t>>;

template <typename Split>
Pieces pieces_of(Split split, std::string_view text) {
  Pieces out;
  split(text, [&](size_t b, size_t e) { out.emplace_back(b, e); });
  return out;
}

/// `windows` and `scanner` (each called as split(text, emit)) agree on `rounds` random texts.
template <typename Windows, typename Scanner>
void expect_windows_agree(Windows windows, Scanner scanner, int rounds = 20000) {
  const std::vector<std::string> parts = {"'", "s", "t", "re", "ve", "m", "ll", "d", "l", "v", "r", "e", "S", "LL",
                                          "Ve", "AB", "Cd", " ", "  ", "\t", "\n", "\r", "\r\n", "\n\n", "\x0b", "\f", "a", "Zq",
                                          "word", "7", "123", "4567", "!", "?!", ".", "/", "@", "[", "`", "{", "\x01",
                                          "\u00e9", "\u00a0", "\u00b2", "\u4e2d", "\U0001F600", "\u0301", "\u2028",
                                          "\u017f"};
  std::mt19937 rng(2026);
  for (int round = 0; round < rounds; ++round) {
    std::string text;
    const size_t want = rng() % 200;
    const bool ascii = round % 2 == 0;  // half the texts ASCII only, where the windows run throughout
    while (text.size() < want) {
      const std::string& part = parts[rng() % parts.size()];
      if (ascii && static_cast<unsigned char>(part[0]) >= 0x80) continue;
      text += part;
    }
    ASSERT_EQ(pieces_of(windows, text), pieces_of(scanner, text))
        << "text of " << text.size() << " B: " << ::testing::PrintToString(text);
  }
}

}  // namespace outboard::tokenize::testing
