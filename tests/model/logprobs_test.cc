#include "server/model/logprobs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "server/model/sampler.h"
#include "server/model/config.h"

namespace attnserve::model {
namespace {

constexpr int32_t kEosToken = 257;  // the byte models' EOS

// The reference: log_softmax in double, term by term, with nothing shared with the code
// under test but the definition.
std::vector<double> ReferenceLogSoftmax(const std::vector<float>& logits) {
  double top = -INFINITY;
  for (float x : logits) top = std::max(top, double(x));
  double sum = 0;
  for (float x : logits) sum += std::exp(double(x) - top);
  std::vector<double> out;
  for (float x : logits) out.push_back(double(x) - top - std::log(sum));
  return out;
}

// The reference top n: every id sorted by (logprob descending, id ascending).
std::vector<int32_t> ReferenceTopIds(const std::vector<double>& logprobs, int n) {
  std::vector<int32_t> ids(logprobs.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return logprobs[a] > logprobs[b]; });
  ids.resize(std::min<size_t>(n, ids.size()));
  return ids;
}

std::vector<float> RandomLogits(int n, float scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> out(n);
  for (float& x : out) x = normal(rng);
  return out;
}

std::unique_ptr<Sampler> MakeSampler(float temperature, int top_k, float top_p) {
  auto s = Sampler::Create({temperature, top_k, top_p, /*seed=*/7});
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(s).value();
}

TEST(LogSoftmax, MatchesADoublePrecisionReference) {
  // A small row and a Llama-sized one with a wide spread of logits.
  for (const auto& [vocab, scale] : {std::pair{5, 1.0f}, std::pair{128256, 8.0f}}) {
    const std::vector<float> logits = RandomLogits(vocab, scale, vocab);
    const std::vector<double> reference = ReferenceLogSoftmax(logits);
    const LogSoftmax log_softmax(logits);
    double max_error = 0;
    for (int32_t id = 0; id < vocab; ++id) {
      max_error = std::max(max_error, std::abs(log_softmax.At(id) - reference[id]));
    }
    // Float rounding of values up to ~|60| is ~4e-6.
    EXPECT_LT(max_error, 2e-5) << "vocab " << vocab;
  }
}

TEST(LogSoftmax, LargeLogitsDoNotOverflow) {
  const std::vector<float> logits = {1000.0f, 999.0f, -1000.0f};
  const LogSoftmax log_softmax(logits);
  const std::vector<double> reference = ReferenceLogSoftmax(logits);
  for (int32_t id = 0; id < 3; ++id) {
    EXPECT_TRUE(std::isfinite(log_softmax.At(id))) << id;
    EXPECT_NEAR(log_softmax.At(id), reference[id], 1e-4) << id;
  }
}

TEST(LogSoftmax, GreedyTokenReportsLogOfItsProbabilityNotZero) {
  const std::vector<float> logits = {0.0f, std::log(3.0f)};  // p = 0.25, 0.75
  const int32_t id = MakeSampler(0, 0, 1)->Sample(logits);
  ASSERT_EQ(id, 1);
  EXPECT_NEAR(LogSoftmax(logits).At(id), std::log(0.75), 1e-6);
}

TEST(LogSoftmax, SamplingParametersChangeTheTokenNotItsLogprob) {
  // Temperature 0.3 with top_k 2 and top_p 0.9 gives the sampled token a much larger
  // probability than the model does; the reported logprob stays the model's.
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.5f, 2.9f};
  const std::vector<double> reference = ReferenceLogSoftmax(logits);
  auto sharp = MakeSampler(0.3f, 2, 0.9f);
  const LogSoftmax log_softmax(logits);
  for (int i = 0; i < 50; ++i) {
    const int32_t id = sharp->Sample(logits);
    ASSERT_TRUE(id == 1 || id == 4) << id;
    EXPECT_NEAR(log_softmax.At(id), reference[id], 1e-6);
  }
  // Under the sampling distribution token 1 has log p > -0.5; the model's is below -0.9.
  EXPECT_LT(log_softmax.At(1), -0.9f);
}

TEST(LogSoftmax, AMaskedCopyIsNotTheModelsDistribution) {
  // What ignore_eos does to the sampler's row must not reach the logprobs: the
  // scheduler takes them from the unmasked row. The masked row gives other numbers.
  std::vector<float> logits = RandomLogits(kMinVocabSize, 2.0f, 3);
  logits[kEosToken] = 4.0f;
  const std::vector<double> reference = ReferenceLogSoftmax(logits);
  std::vector<float> masked = logits;
  masked[kEosToken] = -std::numeric_limits<float>::infinity();
  const int32_t id = MakeSampler(0, 0, 1)->Sample(masked);
  ASSERT_NE(id, kEosToken);
  EXPECT_NEAR(LogSoftmax(logits).At(id), reference[id], 1e-5);
  EXPECT_GT(std::abs(LogSoftmax(masked).At(id) - reference[id]), 1e-3);
}

TEST(LogSoftmax, TopIsTheNMostLikelyInOrderWithTiesByLowerId) {
  std::vector<float> logits = RandomLogits(1000, 1.0f, 11);
  // Ties, including at the boundary of the top 5.
  logits[10] = logits[500] = logits[900] = 9.0f;
  logits[20] = logits[30] = logits[700] = 8.0f;
  const std::vector<double> reference = ReferenceLogSoftmax(logits);
  const LogSoftmax log_softmax(logits);
  for (int n : {1, 5, 20}) {
    const std::vector<TokenLogprob> top = log_softmax.Top(n);
    ASSERT_EQ(int(top.size()), n);
    const std::vector<int32_t> ids = ReferenceTopIds(reference, n);
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(top[i].id, ids[i]) << "n " << n << " rank " << i;
      EXPECT_NEAR(top[i].logprob, reference[ids[i]], 1e-5);
      // The same number as At: the chosen token's logprob and its entry agree exactly.
      EXPECT_EQ(top[i].logprob, log_softmax.At(top[i].id));
    }
  }
  EXPECT_EQ(log_softmax.Top(5)[3].id, 20);  // 20, 30 of the 8.0 tie make the top 5
  EXPECT_EQ(log_softmax.Top(5)[4].id, 30);
}

TEST(LogSoftmax, TopOfASmallVocabularyHasEveryTokenAndNoneForZero) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f};
  const LogSoftmax log_softmax(logits);
  const std::vector<TokenLogprob> top = log_softmax.Top(20);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].id, 1);
  EXPECT_EQ(top[1].id, 0);
  EXPECT_EQ(top[2].id, 2);
  double mass = 0;
  for (const TokenLogprob& t : top) mass += std::exp(double(t.logprob));
  EXPECT_NEAR(mass, 1.0, 1e-6);
  EXPECT_TRUE(log_softmax.Top(0).empty());
}

TEST(LogSoftmax, NanLogitsGiveNanLogprobsAndAWellOrderedTop) {
  const std::vector<float> logits = {1.0f, NAN, 2.0f};
  const LogSoftmax log_softmax(logits);
  EXPECT_TRUE(std::isnan(log_softmax.At(0)));
  const std::vector<TokenLogprob> top = log_softmax.Top(3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].id, 0);  // all NaN: by id
  EXPECT_EQ(top[2].id, 2);
}

}  // namespace
}  // namespace attnserve::model
