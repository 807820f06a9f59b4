#include "server/tokenizer/bpe_split.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#include "absl/strings/str_cat.h"

namespace attnserve::tokenizer::internal {
namespace {

std::string ErrorMessage(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof(buffer)) < 0) {
    return absl::StrCat("PCRE2 error ", code);
  }
  return reinterpret_cast<const char*>(buffer);
}

struct MatchDataFree {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};

}  // namespace

absl::StatusOr<std::unique_ptr<SplitPattern>> SplitPattern::Create(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error,
                                   &offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("split pattern ", pattern,
                                                   " does not compile (PCRE2, at offset ",
                                                   offset, "): ", ErrorMessage(error)));
  }
  // Without JIT (not built in, or no executable memory) the interpreter matches the same.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<SplitPattern>(new SplitPattern(code));
}

SplitPattern::~SplitPattern() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

absl::Status SplitPattern::Split(std::string_view text,
                                 std::vector<std::string_view>& pieces) const {
  const auto* code = static_cast<const pcre2_code*>(code_);
  std::unique_ptr<pcre2_match_data, MatchDataFree> data(
      pcre2_match_data_create_from_pattern(code, nullptr));
  if (data == nullptr) return absl::ResourceExhaustedError("PCRE2 match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t done = 0;  // text[0, done) is in `pieces`
  while (done < text.size()) {
    // PCRE2_NOTEMPTY: a pattern that can match "" finds the next non-empty match.
    const int rc = pcre2_match(code, subject, text.size(), done, PCRE2_NOTEMPTY, data.get(),
                               nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return absl::InternalError(
          absl::StrCat("split pattern at byte ", done, ": ", ErrorMessage(rc)));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    const size_t begin = ovector[0], end = ovector[1];
    if (begin < done || end <= begin || end > text.size()) {  // \K tricks
      return absl::InvalidArgumentError(absl::StrCat(
          "split pattern matched [", begin, ", ", end, ") from byte ", done,
          ": not a split of the text"));
    }
    if (begin > done) pieces.push_back(text.substr(done, begin - done));
    pieces.push_back(text.substr(begin, end - begin));
    done = end;
  }
  if (done < text.size()) pieces.push_back(text.substr(done));
  return absl::OkStatus();
}

}  // namespace attnserve::tokenizer::internal
