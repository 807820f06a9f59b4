// Value parsers for command-line flags and environment variables. On error
// each returns InvalidArgument with a short reason ("expected an integer",
// "must be at least 1") and leaves *out unchanged; callers add the flag name
// and where the value came from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace attnserve::config {

// A decimal integer (optional sign, surrounding whitespace allowed) that is
// at least `min`.
absl::Status ParseIntAtLeast(absl::string_view text, int min, int* out);

// A positive byte count: plain digits, or digits followed by one of the
// suffixes KiB/MiB/GiB (powers of 1024) or KB/MB/GB (powers of 1000), in any
// case, e.g. "536870912", "512MiB", "2GiB". Fails on overflow of int64_t.
absl::Status ParseByteSize(absl::string_view text, int64_t* out);

// Renders `bytes` with the largest unit that divides it exactly ("2GiB",
// "2GB", "1500KB"), or as plain digits. For b > 0,
// ParseByteSize(FormatByteSize(b)) gives back b.
std::string FormatByteSize(int64_t bytes);

// A finite duration in absl::ParseDuration syntax ("90s", "30m", "1h30m")
// that is at least `min`.
absl::Status ParseDurationAtLeast(absl::string_view text, absl::Duration min,
                                  absl::Duration* out);

// An address with a port: anything containing ':' ("127.0.0.1:50051", "[::]:0",
// "unix:/tmp/sock"); resolution is left to the server that binds it.
absl::Status ParseHostPort(absl::string_view text, std::string* out);

// Splits on commas, trimming whitespace and dropping empty entries:
// " a, ,b" gives {"a", "b"}.
std::vector<std::string> SplitCommaList(absl::string_view text);

}  // namespace attnserve::config
