#include "client/percentiles.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace attnserve::client {
namespace {

TEST(NearestRankPercentileTest, PicksTheSmallestSampleCoveringP) {
  // The textbook example: ranks ceil(p/100 * 5).
  const std::vector<double> sorted = {15, 20, 35, 40, 50};
  EXPECT_EQ(NearestRankPercentile(sorted, 0), 15);
  EXPECT_EQ(NearestRankPercentile(sorted, 5), 15);
  EXPECT_EQ(NearestRankPercentile(sorted, 30), 20);
  EXPECT_EQ(NearestRankPercentile(sorted, 40), 20);
  EXPECT_EQ(NearestRankPercentile(sorted, 50), 35);
  EXPECT_EQ(NearestRankPercentile(sorted, 100), 50);
}

TEST(NearestRankPercentileTest, ExactRanksDoNotRoundUp) {
  std::vector<double> sorted;
  for (int i = 1; i <= 100; ++i) sorted.push_back(i);
  EXPECT_EQ(NearestRankPercentile(sorted, 50), 50);
  EXPECT_EQ(NearestRankPercentile(sorted, 95), 95);
  EXPECT_EQ(NearestRankPercentile(sorted, 99), 99);
  std::vector<double> thousand;
  for (int i = 1; i <= 1000; ++i) thousand.push_back(i);
  EXPECT_EQ(NearestRankPercentile(thousand, 99.9), 999);
  EXPECT_EQ(NearestRankPercentile(thousand, 99.95), 1000);
}

TEST(NearestRankPercentileTest, SingleSampleAndEmpty) {
  EXPECT_EQ(NearestRankPercentile({7}, 1), 7);
  EXPECT_EQ(NearestRankPercentile({7}, 99), 7);
  EXPECT_TRUE(std::isnan(NearestRankPercentile({}, 50)));
}

TEST(SummarizeSamplesTest, SortsAndTakesP50P95P99) {
  std::vector<double> samples;
  for (int i = 20; i >= 1; --i) samples.push_back(i);  // descending on purpose
  const Percentiles p = SummarizeSamples(samples);
  EXPECT_EQ(p.count, 20u);
  EXPECT_EQ(p.p50, 10);
  EXPECT_EQ(p.p95, 19);
  EXPECT_EQ(p.p99, 20);
}

}  // namespace
}  // namespace attnserve::client
