// PackedLinear's SIMD paths against PackedLinearScalar (the same integer block dots, so
// equal up to float summation order), and PackedLinearScalar against
// PackedLinearReference (fp32 weights, double sums) within the activations' rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "server/weights/linear_internal.h"
#include "server/weights/packed_matrix.h"

namespace attnserve::weights {
namespace {

constexpr WeightType kTypes[] = {WeightType::kF32,  WeightType::kF16,  WeightType::kBF16,
                                 WeightType::kQ8_0, WeightType::kQ4_0, WeightType::kQ4_K,
                                 WeightType::kQ5_K, WeightType::kQ6_K};

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

struct Problem {
  PackedMatrix w;
  std::vector<float> wf;  // W dequantized (out, in)
  std::vector<float> x;   // (rows, in)
  std::vector<float> y0;  // what y holds before the call
};

Problem Make(WeightType type, int64_t rows, int64_t out, int64_t in, uint32_t seed) {
  Problem p;
  std::vector<float> w = Random(size_t(out * in), seed, 0.05f);
  // Rows of very different sizes, and an outlier per row, as real weights have.
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) w[o * in + i] *= 1.0f + float(o % 5);
    w[o * in + (o * 37) % in] = 0.9f;
  }
  p.w = *PackedMatrix::Quantize(type, out, in, w.data());
  p.wf.resize(size_t(out * in));
  for (int64_t o = 0; o < out; ++o) p.w.DequantizeRowTo(o, p.wf.data() + o * in);
  p.x = Random(size_t(rows * in), seed + 1);
  for (int64_t r = 0; r < rows; ++r) p.x[r * in + (r * 13) % in] = 25.0f;  // activation outlier
  p.y0 = Random(size_t(rows * out), seed + 2);
  return p;
}

// sum_i |w_i x_i| for row r, output o.
double AbsDot(const Problem& p, int64_t r, int64_t o, int64_t in) {
  double s = 0;
  for (int64_t i = 0; i < in; ++i) s += std::fabs(double(p.wf[o * in + i]) * p.x[r * in + i]);
  return s;
}

bool PathRuns(LinearPath path) {
  if (path == LinearPath::kAvx512) return BestLinearPath() == LinearPath::kAvx512;
  if (path == LinearPath::kAvx2) return BestLinearPath() != LinearPath::kScalar;
  return true;
}

class PackedLinearPaths : public testing::TestWithParam<LinearPath> {
 protected:
  void TearDown() override { SetLinearPathForTesting(LinearPath::kAuto); }
};

TEST_P(PackedLinearPaths, EqualsScalarUpToSummationOrder) {
  if (!PathRuns(GetParam())) GTEST_SKIP() << "CPU lacks this path";
  SetLinearPathForTesting(GetParam());
  const int64_t in = 768, out = 37;
  LinearScratch scratch;  // reused across calls of different sizes
  for (WeightType type : kTypes) {
    for (int64_t rows : {1, 3, 8, 33, 512}) {
      for (float beta : {0.0f, 1.0f}) {
        const Problem p = Make(type, rows, out, in, uint32_t(rows * 7 + int(beta)));
        std::vector<float> want = p.y0, got = p.y0;
        PackedLinearScalar(p.x.data(), rows, p.w, want.data(), beta);
        PackedLinear(p.x.data(), rows, p.w, got.data(), beta, scratch);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t o = 0; o < out; ++o) {
            const double tol = 1e-5 * AbsDot(p, r, o, in) + 1e-6 * std::fabs(p.y0[r * out + o]);
            ASSERT_NEAR(got[r * out + o], want[r * out + o], tol)
                << WeightTypeName(type) << " rows " << rows << " beta " << beta << " at (" << r
                << ", " << o << ")";
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, PackedLinearPaths,
                         testing::Values(LinearPath::kAvx512, LinearPath::kAvx2,
                                         LinearPath::kScalar),
                         [](const testing::TestParamInfo<LinearPath>& info) {
                           switch (info.param) {
                             case LinearPath::kAvx512: return std::string("Avx512Vnni");
                             case LinearPath::kAvx2: return std::string("Avx2");
                             default: return std::string("Scalar");
                           }
                         });

TEST(PackedLinearPaths, OddShapesAndLargeRowCounts) {
  // Outputs that do not fill a panel or a row tile, in = one K-quant super-block.
  LinearScratch scratch;
  for (WeightType type : kTypes) {
    for (int64_t out : {1, 3, 65}) {
      // An odd number of blocks of 32 (Q8_0, Q4_0) and a ragged end for the float types.
      const int64_t rows = 7, bv = BlockValues(type);
      const int64_t in = bv == 256 ? 256 : bv == 32 ? 96 : 100;
      const Problem p = Make(type, rows, out, in, uint32_t(out));
      std::vector<float> want(size_t(rows * out)), got(size_t(rows * out), NAN);
      PackedLinearScalar(p.x.data(), rows, p.w, want.data(), 0.0f);
      PackedLinear(p.x.data(), rows, p.w, got.data(), 0.0f, scratch);  // beta 0 ignores NaN
      for (int64_t i = 0; i < rows * out; ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-5 * AbsDot(p, i / out, i % out, in))
            << WeightTypeName(type) << " out " << out << " at " << i;
      }
    }
  }
}

TEST(PackedLinearPaths, SimdKernelsExistForEveryType) {
  for (WeightType type : kTypes) {
    if (BestLinearPath() == LinearPath::kAvx512) {
      EXPECT_NE(Avx512Kernels(type).rows[0], nullptr) << WeightTypeName(type);
    }
    if (BestLinearPath() != LinearPath::kScalar) {
      EXPECT_NE(Avx2Kernels(type).rows[0], nullptr) << WeightTypeName(type);
    }
  }
}

// PackedLinearScalar differs from the reference only by the activations' rounding: each
// x_i moves by at most d/2 of its block (d = max|x| / 127), so |error| <= sum_i |w_i| d_i / 2
// (plus fp32 summation).
TEST(PackedLinearScalar, WithinActivationRoundingOfReference) {
  const int64_t rows = 3, out = 19, in = 512;
  for (WeightType type : kTypes) {
    for (float beta : {0.0f, 1.0f}) {
      const Problem p = Make(type, rows, out, in, 5);
      std::vector<float> ref = p.y0, got = p.y0;
      PackedLinearReference(p.x.data(), rows, p.w, ref.data(), beta);
      PackedLinearScalar(p.x.data(), rows, p.w, got.data(), beta);
      const bool quantized = BlockValues(type) > 1;
      double worst_ratio = 0;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t o = 0; o < out; ++o) {
          double bound = 0;
          for (int64_t b = 0; quantized && b < in / 32; ++b) {
            double amax = 0, wsum = 0;
            for (int64_t i = 32 * b; i < 32 * b + 32; ++i) {
              amax = std::max(amax, double(std::fabs(p.x[r * in + i])));
              wsum += std::fabs(p.wf[o * in + i]);
            }
            bound += wsum * amax / 127 / 2;
          }
          const double slack = 1e-5 * AbsDot(p, r, o, in) + 1e-6 * std::fabs(p.y0[r * out + o]);
          const double err = std::fabs(double(got[r * out + o]) - ref[r * out + o]);
          ASSERT_LE(err, bound + slack)
              << WeightTypeName(type) << " beta " << beta << " at (" << r << ", " << o << ")";
          if (quantized) worst_ratio = std::max(worst_ratio, err / bound);
          if (beta == 0.0f) {
            ASSERT_NE(got[r * out + o], p.y0[r * out + o]);
          }
        }
      }
      // The activations are really rounded (so the bound is what this test checks).
      if (quantized) {
        EXPECT_GT(worst_ratio, 0.01) << WeightTypeName(type);
      }
    }
  }
}

}  // namespace
}  // namespace attnserve::weights
