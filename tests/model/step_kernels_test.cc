// The fused step's loops and BLAS calls against their formulas, written out plainly
// (double accumulation). Torch-free.
#include "server/model/step_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace attnserve::model {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

TEST(StepKernels, LinearIsXTimesWTransposedPlusBetaY) {
  const int64_t in = 37, out = 23;
  const std::vector<float> w = Random(out * in, 1);
  for (int64_t rows : {1, 5, 32}) {
    const std::vector<float> x = Random(rows * in, 2);
    for (float beta : {0.0f, 1.0f}) {
      std::vector<float> y = Random(rows * out, 3), before = y, scratch(rows * out);
      Linear(x.data(), rows, in, w.data(), out, y.data(), beta, scratch.data());
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t o = 0; o < out; ++o) {
          double want = beta * before[r * out + o];
          for (int64_t i = 0; i < in; ++i) want += double(x[r * in + i]) * w[o * in + i];
          EXPECT_NEAR(y[r * out + o], want, 1e-4) << rows << " rows, beta " << beta;
        }
      }
    }
  }
}

// bf16 weights: each rounds to the nearest bf16 (relative error <= 2^-8: 8 significant bits), and LinearBf16
// (AVX-512 where the CPU has it) computes with them what the plain loops compute, for
// outputs that do not fill the last block of 64 and rows that do not fill a group of 4.
TEST(StepKernels, LinearBf16IsLinearOnTheRoundedWeights) {
  const int64_t in = 45, out = 150;
  const std::vector<float> w = Random(out * in, 4);
  const Bf16Matrix packed = PackBf16(w.data(), out, in);
  std::vector<float> ones(in, 0.0f), col(out);
  for (int64_t i = 0; i < in; ++i) {  // read W back one input at a time: x = e_i
    ones.assign(in, 0.0f);
    ones[i] = 1.0f;
    LinearBf16Reference(ones.data(), 1, packed, col.data(), 0.0f);
    for (int64_t o = 0; o < out; ++o) {
      EXPECT_NEAR(col[o], w[o * in + i], std::abs(w[o * in + i]) * 0x1p-8f) << o << ", " << i;
    }
  }
  for (int64_t rows : {1, 3, 4, 7}) {
    const std::vector<float> x = Random(rows * in, 5);
    for (float beta : {0.0f, 1.0f}) {
      std::vector<float> y = Random(rows * out, 6), want = y;
      LinearBf16(x.data(), rows, packed, y.data(), beta);
      LinearBf16Reference(x.data(), rows, packed, want.data(), beta);
      for (int64_t i = 0; i < rows * out; ++i) {
        EXPECT_NEAR(y[i], want[i], 1e-4f * (1 + std::abs(want[i]))) << rows << " rows, " << i;
      }
    }
  }
}

TEST(StepKernels, RmsNormScalesEachRowToUnitRms) {
  const int64_t rows = 3, dim = 19;
  const std::vector<float> x = Random(rows * dim, 4), g = Random(dim, 5);
  std::vector<float> out(rows * dim);
  RmsNormRows(x.data(), rows, dim, g.data(), 1e-5f, out.data());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
    const double scale = 1 / std::sqrt(ss / dim + 1e-5);
    for (int64_t i = 0; i < dim; ++i) {
      EXPECT_NEAR(out[r * dim + i], x[r * dim + i] * scale * g[i], 1e-5);
    }
  }
}

TEST(StepKernels, RopeRotatesHalfPairsByEachRowsAngles) {
  const int64_t rows = 2, heads = 3, d = 8, half = d / 2;
  std::vector<float> x = Random(rows * heads * d, 6);
  const std::vector<float> before = x;
  std::vector<float> cos(rows * half), sin(rows * half);
  for (int64_t i = 0; i < rows * half; ++i) {
    cos[i] = std::cos(0.3f * float(i + 1));
    sin[i] = std::sin(0.3f * float(i + 1));
  }
  RopeRows(x.data(), rows, heads, d, cos.data(), sin.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < half; ++i) {
        const int64_t base = (r * heads + h) * d;
        const float a = before[base + i], b = before[base + half + i];
        const float c = cos[r * half + i], s = sin[r * half + i];
        EXPECT_NEAR(x[base + i], a * c - b * s, 1e-6);
        EXPECT_NEAR(x[base + half + i], a * s + b * c, 1e-6);
      }
    }
  }
}

TEST(StepKernels, SiluMulIsSiluOfGateTimesUp) {
  std::vector<float> gate = Random(50, 7);
  const std::vector<float> up = Random(50, 8), before = gate;
  SiluMul(gate.data(), up.data(), 50);
  for (int i = 0; i < 50; ++i) {
    const double g = before[i];
    EXPECT_NEAR(gate[i], g / (1 + std::exp(-g)) * up[i], 1e-6);
  }
}

}  // namespace
}  // namespace attnserve::model
