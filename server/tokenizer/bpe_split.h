// The pre-tokenizer split of byte-level BPE (bpe_tokenizer.h): a PCRE2 pattern matched
// with UTF + UCP (\p{L}, \s and \d by Unicode properties, as Oniguruma does for
// tokenizers) and PCRE2_MATCH_INVALID_UTF (invalid UTF-8 is never matched, never an
// error). Compiled once (JIT when PCRE2 has it); Split is const and keeps its match data
// on the stack, so any thread may call it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace attnserve::tokenizer::internal {

class SplitPattern {
 public:
  // INVALID_ARGUMENT with PCRE2's message and the offset when `pattern` does not compile.
  static absl::StatusOr<std::unique_ptr<SplitPattern>> Create(const std::string& pattern);
  ~SplitPattern();
  SplitPattern(const SplitPattern&) = delete;
  SplitPattern& operator=(const SplitPattern&) = delete;

  // Appends to `pieces` the non-empty matches of the pattern in `text` and the
  // stretches between them, in order: their concatenation is `text` (tokenizers'
  // Split with behavior "Isolated"). INTERNAL when PCRE2 fails (its match limit).
  absl::Status Split(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  explicit SplitPattern(void* code) : code_(code) {}
  void* code_;  // pcre2_code_8, owned
};

}  // namespace attnserve::tokenizer::internal
