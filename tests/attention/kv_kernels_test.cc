// The KV-cache kernels (server/attention/kv_kernels.h) against their formulas: ExpShifted
// against std::exp in double, KvBlockAttend against a plain causal softmax loop.
#include "server/attention/kv_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace attnserve::attention {
namespace {

TEST(ExpShifted, MatchesStdExpAcrossTheRange) {
  // Shifted values from -87 (the clamp) to 0, a few thousand of them, in one call; the
  // odd length exercises the tail after the 16-lane sum.
  const float shift = 3.25f;
  std::vector<float> x;
  for (double y = -87.0; y <= 0.0; y += 0.0213) x.push_back(float(y + shift));
  x.push_back(shift);  // exactly exp(0)
  ASSERT_NE(x.size() % 16, 0u);
  std::vector<float> y = x;
  const float sum = ExpShifted(y.data(), int64_t(y.size()), shift);
  double want_sum = 0, worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(double(x[i] - shift));  // the argument as the kernel sees it
    want_sum += want;
    worst = std::max(worst, std::abs(y[i] - want) / want);
  }
  EXPECT_LE(worst, 2e-7);
  EXPECT_EQ(y.back(), 1.0f);
  EXPECT_NEAR(sum, want_sum, 1e-5 * want_sum);
}

TEST(ExpShifted, FarBelowTheShiftIsNegligibleNotGarbage) {
  std::vector<float> x = {-1e30f, -200.0f, -88.0f, 0.0f};
  const float sum = ExpShifted(x.data(), 4, 0.0f);
  for (int i = 0; i < 3; ++i) {
    EXPECT_GE(x[i], 0.0f);
    EXPECT_LE(x[i], 1e-37f);
  }
  EXPECT_EQ(x[3], 1.0f);
  EXPECT_NEAR(sum, 1.0f, 1e-6);
}

TEST(KvBlockAttend, MatchesACausalSoftmaxLoop) {
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  const int64_t first = 37, rows = 11, d = 8, dv = 5, keys = first + rows;
  const int64_t ldq = 3 * d, ldo = 2 * dv;  // rows inside wider buffers, as in prefill
  std::vector<float> q(rows * ldq), k(keys * d), v(keys * dv);
  for (auto* buf : {&q, &k, &v}) {
    for (float& f : *buf) f = normal(gen);
  }
  std::vector<float> scores(rows * keys), out(rows * ldo, -7.0f), sums(rows);
  KvBlockAttend(q.data(), ldq, k.data(), v.data(), first, rows, d, dv, scores.data(),
                out.data(), ldo, sums.data());
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t seen = first + i + 1;
    std::vector<double> s(seen);
    for (int64_t j = 0; j < seen; ++j) {
      for (int64_t c = 0; c < d; ++c) s[j] += double(q[i * ldq + c]) * k[j * d + c];
    }
    const double top = *std::max_element(s.begin(), s.end());
    double total = 0;
    std::vector<double> o(dv);
    for (int64_t j = 0; j < seen; ++j) {
      const double w = std::exp(s[j] - top);
      total += w;
      for (int64_t c = 0; c < dv; ++c) o[c] += w * v[j * dv + c];
    }
    EXPECT_NEAR(sums[i], total, 1e-5 * total) << "row " << i;
    for (int64_t c = 0; c < dv; ++c) {
      EXPECT_NEAR(out[i * ldo + c], o[c], 1e-4 * (1 + std::abs(o[c]))) << "row " << i;
    }
    for (int64_t c = dv; c < ldo; ++c) EXPECT_EQ(out[i * ldo + c], -7.0f);  // untouched
  }
}

}  // namespace
}  // namespace attnserve::attention
