#include "server/config/flag_parsers.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace attnserve::config {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(ParseByteSizeTest, RejectsOverflowAndLeavesOutputUnchanged) {
  int64_t bytes = 7;
  // 8 EiB is one past int64_t's maximum.
  absl::Status status = ParseByteSize("8589934592GiB", &bytes);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("too large"));
  EXPECT_EQ(status.code(),
            ParseByteSize("99999999999999999999", &bytes).code());
  EXPECT_EQ(bytes, 7);
  ASSERT_TRUE(ParseByteSize("8589934591GiB", &bytes).ok());
  EXPECT_EQ(bytes, int64_t{8589934591} << 30);
}

TEST(FormatByteSizeTest, UsesTheLargestExactUnitAndRoundTrips) {
  EXPECT_EQ(FormatByteSize(int64_t{2} << 30), "2GiB");
  EXPECT_EQ(FormatByteSize(int64_t{1536} << 20), "1536MiB");
  EXPECT_EQ(FormatByteSize(2'000'000'000), "2GB");
  EXPECT_EQ(FormatByteSize(1'500'000), "1500KB");
  EXPECT_EQ(FormatByteSize(1023), "1023");
  for (int64_t bytes :
       {int64_t{1}, int64_t{1000}, int64_t{1024}, int64_t{3} << 20,
        int64_t{5'000'000'000}, std::numeric_limits<int64_t>::max()}) {
    int64_t parsed = 0;
    ASSERT_TRUE(ParseByteSize(FormatByteSize(bytes), &parsed).ok()) << bytes;
    EXPECT_EQ(parsed, bytes);
  }
}

TEST(ParseIntAtLeastTest, AcceptsTheMinimumAndRejectsBelowIt) {
  int value = 5;
  ASSERT_TRUE(ParseIntAtLeast("0", 0, &value).ok());
  EXPECT_EQ(value, 0);
  EXPECT_THAT(ParseIntAtLeast("-1", 0, &value).message(),
              HasSubstr("must be at least 0"));
  EXPECT_THAT(ParseIntAtLeast("99999999999", 0, &value).message(),
              HasSubstr("expected an integer"));
  EXPECT_EQ(value, 0);
}

TEST(ParseDurationAtLeastTest, RejectsBelowMinimumAndInfinity) {
  absl::Duration value = absl::Seconds(5);
  ASSERT_TRUE(ParseDurationAtLeast("1h30m", absl::Seconds(1), &value).ok());
  EXPECT_EQ(value, absl::Minutes(90));
  EXPECT_THAT(ParseDurationAtLeast("500ms", absl::Seconds(1), &value).message(),
              HasSubstr("must be at least 1s"));
  EXPECT_THAT(
      ParseDurationAtLeast("-inf", absl::ZeroDuration(), &value).message(),
      HasSubstr("must be finite"));
  EXPECT_THAT(
      ParseDurationAtLeast("30", absl::ZeroDuration(), &value).message(),
      HasSubstr("expected a duration"));
  EXPECT_EQ(value, absl::Minutes(90));
}

TEST(ParseHostPortTest, RequiresAColon) {
  std::string address = "unchanged";
  EXPECT_FALSE(ParseHostPort("localhost", &address).ok());
  EXPECT_EQ(address, "unchanged");
  ASSERT_TRUE(ParseHostPort("[::1]:0", &address).ok());
  EXPECT_EQ(address, "[::1]:0");
}

TEST(SplitCommaListTest, TrimsAndDropsEmptyEntries) {
  EXPECT_THAT(SplitCommaList(" a, ,b ,"), ElementsAre("a", "b"));
  EXPECT_THAT(SplitCommaList(""), IsEmpty());
}

}  // namespace
}  // namespace attnserve::config
