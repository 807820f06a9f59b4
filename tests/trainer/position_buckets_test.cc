#include "server/trainer/position_buckets.h"

#include <gtest/gtest.h>

#include <cmath>

namespace attnserve::trainer {
namespace {

TEST(PositionBuckets, TableBucketsHaveTheIssuesLabels) {
  auto b = PositionBuckets::Create(PositionBuckets::TableBounds()).value();
  ASSERT_EQ(b.size(), 5);
  EXPECT_EQ(b.Label(0), "0-128");
  EXPECT_EQ(b.Label(1), "128-512");
  EXPECT_EQ(b.Label(2), "512-1k");
  EXPECT_EQ(b.Label(3), "1k-4k");
  EXPECT_EQ(b.Label(4), "4k-16k");
}

TEST(PositionBuckets, EachPositionLandsInTheBucketWhoseLowerBoundItReaches) {
  auto b = PositionBuckets::Create({0, 128, 512}).value();
  b.Add(0, 1.0);
  b.Add(127, 3.0);  // last position of the first bucket
  b.Add(128, 10.0);  // first position of the second
  b.Add(511, 20.0);
  EXPECT_EQ(b.count(0), 2);
  EXPECT_EQ(b.count(1), 2);
  EXPECT_DOUBLE_EQ(b.mean(0), 2.0);
  EXPECT_DOUBLE_EQ(b.mean(1), 15.0);
}

TEST(PositionBuckets, PositionsOutsideTheBoundsAreNotCounted) {
  auto b = PositionBuckets::Create({16, 32}).value();
  b.Add(15, 100.0);
  b.Add(32, 100.0);
  b.Add(-1, 100.0);
  b.Add(20, 4.0);
  EXPECT_EQ(b.count(0), 1);
  EXPECT_DOUBLE_EQ(b.mean(0), 4.0);
}

TEST(PositionBuckets, EmptyBucketMeanIsNaN) {
  auto b = PositionBuckets::Create({0, 1}).value();
  EXPECT_TRUE(std::isnan(b.mean(0)));
}

TEST(PositionBuckets, EveryPositionOfAStretchIsCountedOnce) {
  auto b = PositionBuckets::Create(PositionBuckets::TableBounds()).value();
  for (int64_t p = 0; p < 16384; ++p) b.Add(p, 1.0);
  const int64_t expected[] = {128, 384, 512, 3072, 12288};
  for (int i = 0; i < b.size(); ++i) EXPECT_EQ(b.count(i), expected[i]) << b.Label(i);
}

TEST(PositionBuckets, PowerOfTwoBoundsStartAtZeroThenSixteen) {
  EXPECT_EQ(PositionBuckets::PowerOfTwoBounds(128),
            (std::vector<int64_t>{0, 16, 32, 64, 128}));
  auto b = PositionBuckets::Create(PositionBuckets::PowerOfTwoBounds(16384)).value();
  EXPECT_EQ(b.Label(b.size() - 1), "8k-16k");
}

TEST(PositionBuckets, RejectsBoundsThatAreNotStrictlyAscending) {
  EXPECT_FALSE(PositionBuckets::Create({0}).ok());
  EXPECT_FALSE(PositionBuckets::Create({0, 128, 128}).ok());
  EXPECT_FALSE(PositionBuckets::Create({-1, 5}).ok());
  EXPECT_FALSE(PositionBuckets::Parse("0,12x").ok());
  auto parsed = PositionBuckets::Parse("0,128,1024");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->Label(1), "128-1k");
}

}  // namespace
}  // namespace attnserve::trainer
