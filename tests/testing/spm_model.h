// Tiny SentencePiece vocabularies for tests, trained at test time with Debian's
// spm_train (deterministic: one thread, a fixed generated text). SPM_TRAIN is the
// program's path, set by CMake.
#pragma once

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "server/tokenizer/sentencepiece_tokenizer.h"

namespace attnserve::test_util {

// A small deterministic training text: English-like lines and some non-ASCII words,
// so that the vocabulary has multi-byte pieces and emoji fall back to bytes.
inline std::string SpmTrainingText() {
  static const char* kWords[] = {
      "in", "the", "beginning", "god", "created", "heaven", "and", "earth", "was",
      "without", "form", "void", "darkness", "upon", "face", "of", "deep", "spirit",
      "moved", "waters", "said", "let", "there", "be", "light", "café", "naïve", "über"};
  std::mt19937 rng(7);
  std::string text;
  for (int line = 0; line < 400; ++line) {
    const int n = 4 + int(rng() % 10);
    for (int w = 0; w < n; ++w) {
      if (w > 0) text += ' ';
      text += kWords[rng() % (sizeof(kWords) / sizeof(kWords[0]))];
    }
    text += ".,;:!?"[rng() % 6];
    text += '\n';
  }
  return text;
}

// Trains `dir`/`name`.model (vocab 320, BPE, byte fallback) and returns its path;
// `flags` are extra spm_train flags. Fails the test if spm_train fails.
inline std::string TrainSpm(const std::string& dir, const std::string& name,
                            const std::string& flags = "") {
  const std::string input = dir + "/spm_train.txt";
  {
    std::ofstream out(input, std::ios::binary);
    out << SpmTrainingText();
  }
  const std::string command =
      std::string(SPM_TRAIN) + " --input=" + input + " --model_prefix=" + dir + "/" + name +
      " --vocab_size=320 --model_type=bpe --byte_fallback=true --character_coverage=1.0"
      " --num_threads=1 --hard_vocab_limit=false " + flags + " > " + dir + "/" + name +
      ".log 2>&1";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  return dir + "/" + name + ".model";
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Skips the test where SentencePiece cannot run (sanitizer builds).
#define ATTNSERVE_SKIP_WITHOUT_SENTENCEPIECE()                                      \
  do {                                                                              \
    if (absl::Status available = ::attnserve::tokenizer::SentencePieceAvailable();  \
        !available.ok()) {                                                          \
      GTEST_SKIP() << available.message();                                          \
    }                                                                               \
  } while (0)

// A fresh directory under the test's temp dir.
inline std::string MakeTempDir(const std::string& tag) {
  std::string pattern = testing::TempDir() + "/" + tag + "XXXXXX";
  char* made = mkdtemp(pattern.data());
  EXPECT_NE(made, nullptr);
  return pattern;
}

}  // namespace attnserve::test_util
