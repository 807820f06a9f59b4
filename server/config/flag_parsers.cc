#include "server/config/flag_parsers.h"

#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace attnserve::config {
namespace {

struct ByteUnit {
  const char* suffix;
  int64_t multiplier;
};
constexpr ByteUnit kByteUnits[] = {
    {"GiB", int64_t{1} << 30}, {"MiB", int64_t{1} << 20},
    {"KiB", int64_t{1} << 10}, {"GB", 1000 * 1000 * 1000},
    {"MB", 1000 * 1000},       {"KB", 1000},
};

}  // namespace

absl::Status ParseIntAtLeast(absl::string_view text, int min, int* out) {
  int value = 0;
  if (!absl::SimpleAtoi(text, &value)) {
    return absl::InvalidArgumentError("expected an integer");
  }
  if (value < min) {
    return absl::InvalidArgumentError(absl::StrCat("must be at least ", min));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status ParseByteSize(absl::string_view text, int64_t* out) {
  text = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < text.size() && absl::ascii_isdigit(text[digits])) ++digits;
  const absl::string_view suffix =
      absl::StripLeadingAsciiWhitespace(text.substr(digits));
  int64_t multiplier = suffix.empty() ? 1 : 0;
  for (const ByteUnit& unit : kByteUnits) {
    if (absl::EqualsIgnoreCase(suffix, unit.suffix))
      multiplier = unit.multiplier;
  }
  int64_t count = 0;
  if (digits == 0 || multiplier == 0 ||
      !absl::SimpleAtoi(text.substr(0, digits), &count)) {
    return absl::InvalidArgumentError(
        "expected a byte count, optionally with a suffix KiB, MiB, GiB, KB, MB "
        "or GB "
        "(e.g. 536870912, 512MiB, 2GiB)");
  }
  if (count > std::numeric_limits<int64_t>::max() / multiplier) {
    return absl::InvalidArgumentError("too large");
  }
  if (count == 0) return absl::InvalidArgumentError("must be positive");
  *out = count * multiplier;
  return absl::OkStatus();
}

std::string FormatByteSize(int64_t bytes) {
  const ByteUnit* best = nullptr;  // The unit giving the shortest exact count.
  for (const ByteUnit& unit : kByteUnits) {
    if (bytes > 0 && bytes % unit.multiplier == 0 &&
        (best == nullptr || unit.multiplier > best->multiplier)) {
      best = &unit;
    }
  }
  if (best == nullptr) return absl::StrCat(bytes);
  return absl::StrCat(bytes / best->multiplier, best->suffix);
}

absl::Status ParseDurationAtLeast(absl::string_view text, absl::Duration min,
                                  absl::Duration* out) {
  absl::Duration value;
  if (!absl::ParseDuration(absl::StripAsciiWhitespace(text), &value)) {
    return absl::InvalidArgumentError(
        "expected a duration such as 90s, 30m or 1h30m");
  }
  if (value == absl::InfiniteDuration() || value == -absl::InfiniteDuration()) {
    return absl::InvalidArgumentError("must be finite");
  }
  if (value < min) {
    return absl::InvalidArgumentError(
        absl::StrCat("must be at least ", absl::FormatDuration(min)));
  }
  *out = value;
  return absl::OkStatus();
}

absl::Status ParseHostPort(absl::string_view text, std::string* out) {
  if (!absl::StrContains(text, ':')) {
    return absl::InvalidArgumentError("expected host:port");
  }
  *out = std::string(text);
  return absl::OkStatus();
}

std::vector<std::string> SplitCommaList(absl::string_view text) {
  std::vector<std::string> items;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (!item.empty()) items.emplace_back(item);
  }
  return items;
}

}  // namespace attnserve::config
