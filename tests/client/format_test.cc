#include "client/format.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace attnserve::client {
namespace {

TEST(HumanBytesTest, UsesBinaryUnitsWithOneDecimal) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(int64_t{3} << 20), "3.0 MiB");
  EXPECT_EQ(HumanBytes(int64_t{5} << 40), "5.0 TiB");
}

TEST(HumanCountTest, UsesDecimalSuffixes) {
  EXPECT_EQ(HumanCount(999), "999");
  EXPECT_EQ(HumanCount(12345), "12.3K");
  EXPECT_EQ(HumanCount(1234567), "1.23M");
  EXPECT_EQ(HumanCount(2000000000), "2.00G");
}

TEST(FormatTimestampTest, PrintsUtcAndACoarseAge) {
  const absl::Time now = absl::FromUnixSeconds(1700000000);
  EXPECT_EQ(FormatTimestamp(0, now), "-");
  EXPECT_EQ(FormatTimestamp(1700000000000 - 42000, now),
            "2023-11-14 22:12:38 UTC (42s ago)");
  EXPECT_EQ(FormatTimestamp(1700000000000 - 192500, now),
            "2023-11-14 22:10:07 UTC (3m12s ago)");
  EXPECT_EQ(FormatTimestamp(1700000000000 - (26 * 3600 + 60) * 1000, now),
            "2023-11-13 20:12:20 UTC (1d2h ago)");
  EXPECT_EQ(FormatTimestamp(1700000005000, now),
            "2023-11-14 22:13:25 UTC");  // future
}

TEST(FormatAgoTest, PrintsOnlyTheAge) {
  const absl::Time now = absl::FromUnixSeconds(1700000000);
  EXPECT_EQ(FormatAgo(0, now), "-");
  EXPECT_EQ(FormatAgo(1700000000000 - 5 * 3600 * 1000 - 7 * 60 * 1000, now),
            "5h7m ago");
  EXPECT_EQ(FormatAgo(1700000005000, now), "0s ago");
}

TEST(FormatAttentionTest, ShowsTheOrderOnlyForTaylorModules) {
  EXPECT_EQ(FormatAttention("taylor", 4), "taylor (order 4)");
  EXPECT_EQ(FormatAttention("taylor_norm", 3), "taylor_norm (order 3)");
  EXPECT_EQ(FormatAttention("taylor", 0), "taylor");
  EXPECT_EQ(FormatAttention("softmax", 2), "softmax");
}

TEST(PrintTableTest, AlignsColumnsTwoSpacesApart) {
  std::FILE* out = std::tmpfile();
  PrintTable(out, {{"ID", "MODEL"}, {"s123", "tiny"}, {"s", "x"}});
  std::rewind(out);
  char buffer[256] = {};
  const size_t n = std::fread(buffer, 1, sizeof(buffer) - 1, out);
  std::fclose(out);
  EXPECT_EQ(std::string(buffer, n), "ID    MODEL\ns123  tiny\ns     x\n");
}

}  // namespace
}  // namespace attnserve::client
