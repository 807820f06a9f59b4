// Human-readable rendering shared by the commands. No gRPC or Protobuf here.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace attnserve::client {

// 512 -> "512 B", 1536 -> "1.5 KiB", 3 << 20 -> "3.0 MiB".
std::string HumanBytes(int64_t bytes);

// 999 -> "999", 12345 -> "12.3K", 1234567 -> "1.23M", 2e9 -> "2.00G".
std::string HumanCount(int64_t count);

// 42s, 3m12s, 5h7m, 12d3h: two units at most, rounded down.
std::string FormatAge(absl::Duration age);

// "3m12s ago"; "-" for 0 (unset); "0s ago" for times after `now` (clock skew).
std::string FormatAgo(int64_t unix_ms, absl::Time now);

// "2025-06-01 12:00:00 UTC (3m12s ago)"; "-" for 0 (unset). The age is left out
// for times after `now` (clock skew).
std::string FormatTimestamp(int64_t unix_ms, absl::Time now);

// "taylor (order 4)" for the Taylor modules (taylor, taylor_norm) when `order`
// is non-zero; the bare module name otherwise, since order means nothing to the
// others.
std::string FormatAttention(const std::string& module, int64_t order);

// Prints rows as left-aligned columns two spaces apart; the first row is the
// header.
void PrintTable(std::FILE* out,
                const std::vector<std::vector<std::string>>& rows);

}  // namespace attnserve::client
