#include "client/format.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace attnserve::client {

std::string HumanBytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

std::string HumanCount(int64_t count) {
  if (count < 1000) return absl::StrCat(count);
  if (count < 1000000) return absl::StrFormat("%.1fK", count / 1e3);
  if (count < 1000000000) return absl::StrFormat("%.2fM", count / 1e6);
  return absl::StrFormat("%.2fG", count / 1e9);
}

std::string FormatAge(absl::Duration age) {
  const int64_t s = absl::ToInt64Seconds(age);
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return absl::StrCat(s / 60, "m", s % 60, "s");
  if (s < 86400) return absl::StrCat(s / 3600, "h", s % 3600 / 60, "m");
  return absl::StrCat(s / 86400, "d", s % 86400 / 3600, "h");
}

std::string FormatAgo(int64_t unix_ms, absl::Time now) {
  if (unix_ms == 0) return "-";
  const absl::Duration age = now - absl::FromUnixMillis(unix_ms);
  return absl::StrCat(FormatAge(std::max(age, absl::ZeroDuration())), " ago");
}

std::string FormatTimestamp(int64_t unix_ms, absl::Time now) {
  if (unix_ms == 0) return "-";
  const absl::Time time = absl::FromUnixMillis(unix_ms);
  std::string text =
      absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", time, absl::UTCTimeZone());
  if (now >= time) absl::StrAppend(&text, " (", FormatAge(now - time), " ago)");
  return text;
}

std::string FormatAttention(const std::string& module, int64_t order) {
  if (order == 0 || module.rfind("taylor", 0) != 0) return module;
  return absl::StrCat(module, " (order ", order, ")");
}

void PrintTable(std::FILE* out,
                const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t i = 0; i < row.size(); ++i)
      widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      absl::StrAppend(&line, row[i]);
      if (i + 1 < row.size()) line.append(widths[i] + 2 - row[i].size(), ' ');
    }
    absl::FPrintF(out, "%s\n", line);
  }
}

}  // namespace attnserve::client
