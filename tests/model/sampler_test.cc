#include "server/model/sampler.h"

#include <gtest/gtest.h>

#include <cmath>

namespace attnserve::model {
namespace {

std::unique_ptr<Sampler> Make(float temperature, int top_k = 0, float top_p = 1,
                              uint64_t seed = 1) {
  auto s = Sampler::Create({temperature, top_k, top_p, seed});
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(s).value();
}

const std::vector<float> kLogits = {1.0f, 3.0f, 2.0f, 0.5f, 3.0f - 1e-3f};

TEST(Sampler, GreedyAtTemperatureZeroTakesFirstMaximum) {
  auto s = Make(0);
  EXPECT_EQ(s->Sample(kLogits), 1);
  EXPECT_EQ(s->Sample(std::vector<float>{2, 5, 5}), 1);
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferent) {
  auto a = Make(1, 0, 1, 42), b = Make(1, 0, 1, 42), c = Make(1, 0, 1, 43);
  std::vector<int32_t> ta, tb, tc;
  for (int i = 0; i < 200; ++i) {
    ta.push_back(a->Sample(kLogits));
    tb.push_back(b->Sample(kLogits));
    tc.push_back(c->Sample(kLogits));
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
}

TEST(Sampler, FrequenciesFollowTemperatureScaledSoftmax) {
  for (float temperature : {0.5f, 1.0f, 2.0f}) {
    auto s = Make(temperature);
    std::vector<int> counts(kLogits.size());
    const int n = 40000;
    for (int i = 0; i < n; ++i) counts[s->Sample(kLogits)]++;
    double z = 0;
    for (float l : kLogits) z += std::exp(l / temperature);
    for (size_t i = 0; i < kLogits.size(); ++i) {
      const double p = std::exp(kLogits[i] / temperature) / z;
      // 5 standard deviations of a binomial proportion.
      EXPECT_NEAR(double(counts[i]) / n, p, 5 * std::sqrt(p * (1 - p) / n) + 1e-3)
          << "token " << i << " at temperature " << temperature;
    }
  }
}

TEST(Sampler, TopKKeepsOnlyTheKMostLikely) {
  auto s = Make(5.0f, /*top_k=*/2);
  std::vector<int> counts(kLogits.size());
  for (int i = 0; i < 2000; ++i) counts[s->Sample(kLogits)]++;
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[4], 0);
  EXPECT_EQ(counts[0] + counts[2] + counts[3], 0);
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  // Probabilities 0.5, 0.3, 0.2: top_p 0.7 keeps the first two, top_p 0.4 only the first.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  auto two = Make(1.0f, 0, 0.7f);
  std::vector<int> counts(3);
  for (int i = 0; i < 4000; ++i) counts[two->Sample(logits)]++;
  EXPECT_EQ(counts[2], 0);
  EXPECT_NEAR(counts[0] / 4000.0, 0.625, 0.04);  // 0.5 / 0.8 after renormalising
  auto one = Make(1.0f, 0, 0.4f);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(one->Sample(logits), 0);
}

TEST(Sampler, RejectsInvalidParametersNamingTheField) {
  auto msg = [](SamplingParams p) {
    auto s = Sampler::Create(p);
    EXPECT_FALSE(s.ok());
    return std::string(s.status().message());
  };
  EXPECT_NE(msg({-0.1f, 0, 1, 0}).find("temperature"), std::string::npos);
  EXPECT_NE(msg({NAN, 0, 1, 0}).find("temperature"), std::string::npos);
  EXPECT_NE(msg({1, -1, 1, 0}).find("top_k"), std::string::npos);
  EXPECT_NE(msg({1, 0, 0, 0}).find("top_p"), std::string::npos);
  EXPECT_NE(msg({1, 0, 1.5f, 0}).find("top_p"), std::string::npos);
}

}  // namespace
}  // namespace attnserve::model
