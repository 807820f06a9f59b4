// The KV-cache kernels (server/attention/kv_kernels.h) against their formulas: ExpShifted
// against std::exp in double, KvBlockAttend and KvFlashAttend against a plain causal
// softmax loop, and KvFlashAttend against KvBlockAttend.
#include "server/attention/kv_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
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

// A block of `rows` queries at positions first.. against their cache: q (rows, ldq), k and
// v (first + rows, d / dv) contiguous; out (rows, ldo) and sums as the kernels write them.
struct Block {
  int64_t first, rows, d, dv, ldq, ldo;
  std::vector<float> q, k, v, out, sums;

  Block(int64_t first, int64_t rows, int64_t d, int64_t dv)
      : first(first), rows(rows), d(d), dv(dv), ldq(3 * d), ldo(2 * dv),  // as in prefill
        q(rows * ldq), k((first + rows) * d), v((first + rows) * dv),
        out(rows * ldo, -7.0f), sums(rows) {}
  int64_t Keys() const { return first + rows; }

  // Gaussian q, k, v (standard deviation `spread`); with `ramp`, key j's first component
  // also grows by ramp * j and every query's is 1, so a row's max keeps rising along the
  // keys (every new max rescales the partial sums of a tiled kernel).
  void Fill(uint32_t seed, float spread, float ramp) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> normal(0.0f, spread);
    for (auto* buf : {&q, &k, &v}) {
      for (float& f : *buf) f = normal(gen);
    }
    for (int64_t j = 0; j < Keys() && ramp != 0; ++j) k[j * d] = ramp * float(j);
    for (int64_t i = 0; i < rows && ramp != 0; ++i) q[i * ldq] = 1.0f;
  }

  void RunBlockAttend() {
    std::vector<float> scores(rows * Keys());  // (rows, keys)
    KvBlockAttend(q.data(), ldq, k.data(), v.data(), first, rows, d, dv, scores.data(),
                  out.data(), ldo, sums.data());
  }
  void RunFlashAttend() {
    KvFlashAttend(q.data(), ldq, k.data(), v.data(), first, rows, d, dv, out.data(), ldo,
                  sums.data());
  }

  // The relative error a float kernel may show in row i: a float score is off by a few
  // ulps of the row's largest sum_c |q_c k_c|, and a weight by as much relatively.
  double RowTolerance(int64_t i) const {
    double magnitude = 0;
    for (int64_t j = 0; j < first + i + 1; ++j) {
      double abs_sum = 0;
      for (int64_t c = 0; c < d; ++c) abs_sum += std::abs(double(q[i * ldq + c]) * k[j * d + c]);
      magnitude = std::max(magnitude, abs_sum);
    }
    return 1e-5 + 1e-6 * magnitude;
  }

  // out and sums against the causal softmax loop in double; the padding of out untouched.
  void ExpectMatchesFormula() const {
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
      const double rel = RowTolerance(i);
      ASSERT_NEAR(sums[i], total, rel * total) << "row " << i;
      for (int64_t c = 0; c < dv; ++c) {
        ASSERT_NEAR(out[i * ldo + c], o[c], 10 * rel * (1 + std::abs(o[c]))) << "row " << i;
      }
      for (int64_t c = dv; c < ldo; ++c) ASSERT_EQ(out[i * ldo + c], -7.0f);  // untouched
    }
  }
};

TEST(KvBlockAttend, MatchesACausalSoftmaxLoop) {
  Block b(/*first=*/37, /*rows=*/11, /*d=*/8, /*dv=*/5);
  b.Fill(5, 1.5f, 0.0f);
  b.RunBlockAttend();
  b.ExpectMatchesFormula();
}

// (first, rows): one row, a fresh session, a cache past one 128-key tile; none of the key
// counts a multiple of 16 except the last, which is one of 128.
constexpr std::pair<int64_t, int64_t> kFlashSizes[] = {
    {0, 1}, {9, 1}, {0, 37}, {37, 11}, {130, 77}, {301, 200}, {100, 156}};

TEST(KvFlashAttend, MatchesACausalSoftmaxLoop) {
  if (!KvFlashSupported(32, 32)) GTEST_SKIP() << "no AVX-512F";
  for (int64_t d : {16, 32, 64}) {
    for (auto [first, rows] : kFlashSizes) {
      for (float ramp : {0.0f, 0.5f, -0.5f}) {  // the max anywhere, rising, at the start
        SCOPED_TRACE(testing::Message() << "d " << d << " first " << first << " rows " << rows
                                        << " ramp " << ramp);
        Block b(first, rows, d, d);
        b.Fill(uint32_t(first + rows + d), 1.0f, ramp);  // scores spread over tens
        b.RunFlashAttend();
        b.ExpectMatchesFormula();
      }
    }
  }
}

TEST(KvFlashAttend, MatchesKvBlockAttend) {
  if (!KvFlashSupported(32, 32)) GTEST_SKIP() << "no AVX-512F";
  for (auto [first, rows] : kFlashSizes) {
    SCOPED_TRACE(testing::Message() << "first " << first << " rows " << rows);
    Block flash(first, rows, 32, 32), plain(first, rows, 32, 32);
    flash.Fill(7, 1.2f, 0.25f);
    plain.Fill(7, 1.2f, 0.25f);
    flash.RunFlashAttend();
    plain.RunBlockAttend();
    // Two float kernels that sum the scores in different orders: each score may be off by
    // a few ulps of the row's magnitude (RowTolerance), so the outputs may differ by that
    // much relatively. (A fixed 1e-5 failed on one AVX-512 machine: 4.0e-5 at row 76 of
    // (130, 77), where RowTolerance is 9.4e-5.)
    for (int64_t i = 0; i < rows; ++i) {
      const double rel = plain.RowTolerance(i);
      ASSERT_NEAR(flash.sums[i], plain.sums[i], rel * plain.sums[i]) << "row " << i;
      for (int64_t c = 0; c < 32; ++c) {
        const float want = plain.out[i * plain.ldo + c];
        ASSERT_NEAR(flash.out[i * flash.ldo + c], want, rel * (1 + std::abs(want)))
            << "row " << i;
      }
    }
  }
}

TEST(KvFlashAttend, FutureKeysWeighExactlyNothing) {
  // The last key is hidden from every row but the last; a value of 1e38 there would show
  // through any weight above zero (exp(-87) * 1e38 is about 1).
  if (!KvFlashSupported(16, 16)) GTEST_SKIP() << "no AVX-512F";
  Block plain(3, 20, 16, 16), loud(3, 20, 16, 16);
  plain.Fill(11, 1.0f, 0.0f);
  loud.Fill(11, 1.0f, 0.0f);
  std::fill(loud.v.end() - 16, loud.v.end(), 1e38f);
  plain.RunFlashAttend();
  loud.RunFlashAttend();
  for (int64_t i = 0; i + 1 < plain.rows; ++i) {
    ASSERT_EQ(loud.sums[i], plain.sums[i]) << "row " << i;
    for (int64_t c = 0; c < 16; ++c) {
      ASSERT_EQ(loud.out[i * loud.ldo + c], plain.out[i * plain.ldo + c]) << "row " << i;
    }
  }
}

TEST(KvFlashAttend, OnlyAvx512AndEqualSquareHeads) {
  EXPECT_FALSE(KvFlashSupported(32, 16));
  EXPECT_FALSE(KvFlashSupported(8, 8));
}

// A KV head's group of query heads in one call equals KvHeadAttend per query head (which
// the attention paths tie to the ATen softmax).
TEST(KvGroupAttend, EqualsKvHeadAttendPerQuery) {
  std::mt19937 gen(5);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  const int64_t d = 16, dv = 16, len = 37;
  for (const int64_t rows : {1, 2, 4}) {
    std::vector<float> q(rows * d), k(len * d), v(len * dv);
    for (auto* buf : {&q, &k, &v}) {
      for (float& f : *buf) f = normal(gen);
    }
    std::vector<float> scores(rows * len), out(rows * dv), sums(rows);
    KvGroupAttend(q.data(), k.data(), v.data(), rows, len, d, dv, scores.data(), out.data(),
                  sums.data());
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<float> one(dv), s(len);
      const float sum = KvHeadAttend(q.data() + r * d, k.data(), v.data(), len, d, dv,
                                     s.data(), one.data());
      EXPECT_NEAR(sums[r], sum, 1e-5f * sum) << rows << " " << r;
      for (int64_t c = 0; c < dv; ++c) {
        EXPECT_NEAR(out[r * dv + c], one[c], 1e-4f * sum) << rows << " " << r << " " << c;
      }
    }
  }
}

}  // namespace
}  // namespace attnserve::attention
