// server/mixer/conv_kernels.h: the causal conv and LFM2's short conv against the numpy
// reference's values (make_mixer_fixtures.py), the fast prefill against the plain
// reference, and the batched step against a prefill of each session.
#include "server/mixer/conv_kernels.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tests/mixer/fixtures.h"

namespace attnserve::mixer {
namespace {

using testing::Fixture;
using testing::MaxRelDiff;

std::vector<float> Random(std::mt19937& rng, size_t n, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& e : v) e = dist(rng);
  return v;
}

using PrefillFn = void (*)(const ConvWeights&, const float*, int64_t, int64_t, float*,
                           float*, int64_t);

// One numpy case through one prefill path: outputs and the state left behind.
void CheckConvCase(const std::string& name, PrefillFn prefill) {
  const std::vector<float> dims = Fixture(name + ".dims");
  ASSERT_EQ(dims.size(), 5u);
  const int64_t ch = int64_t(dims[0]), k = int64_t(dims[1]), t = int64_t(dims[2]);
  const bool has_bias = dims[3] != 0;
  const std::vector<float> x = Fixture(name + ".x"), w = Fixture(name + ".w");
  const std::vector<float> want_y = Fixture(name + ".y"),
                           want_s = Fixture(name + ".state1");
  const std::vector<float> bias = has_bias ? Fixture(name + ".bias") : std::vector<float>();
  std::vector<float> state = Fixture(name + ".state0");
  ASSERT_EQ(want_y.size(), size_t(t * ch));
  const ConvWeights cw{w.data(), has_bias ? bias.data() : nullptr, ch, k, dims[4] != 0};
  ASSERT_EQ(int64_t(state.size()), ConvStateFloats(cw));  // numpy's (channels, K-1)
  std::vector<float> y(t * ch);
  prefill(cw, x.data(), ch, t, state.data(), y.data(), ch);
  EXPECT_LE(MaxRelDiff(y.data(), want_y.data(), t * ch), 1e-6) << name;
  EXPECT_LE(MaxRelDiff(state.data(), want_s.data(), ch * (k - 1)), 0.0) << name;
}

TEST(CausalConv1d, PrefillMatchesNumpyReference) {
  CheckConvCase("conv_silu", CausalConv1dPrefill);
  CheckConvCase("conv_plain", CausalConv1dPrefill);
}

TEST(CausalConv1d, ReferenceMatchesNumpyReference) {
  CheckConvCase("conv_silu", CausalConv1dPrefillReference);
  CheckConvCase("conv_plain", CausalConv1dPrefillReference);
}

TEST(CausalConv1d, PrefillInPiecesEqualsOnePrefillAndTheReference) {
  std::mt19937 rng(7);
  const int64_t ch = 37, k = 4, t = 23, ld = 41;  // rows wider than the channels
  const std::vector<float> w = Random(rng, ch * k), bias = Random(rng, ch);
  const std::vector<float> x = Random(rng, t * ld), s0 = Random(rng, ch * (k - 1));
  const ConvWeights cw{w.data(), bias.data(), ch, k, true};
  std::vector<float> s_ref = s0, y_ref(t * ch);
  CausalConv1dPrefillReference(cw, x.data(), ld, t, s_ref.data(), y_ref.data(), ch);
  std::vector<float> s = s0, y(t * ch);
  // pieces of 1, 2 (shorter than K-1: the state is partly old, partly new), 0, then 20
  int64_t done = 0;
  for (int64_t n : {1, 2, 0, 20}) {
    CausalConv1dPrefill(cw, x.data() + done * ld, ld, n, s.data(), y.data() + done * ch,
                        ch);
    done += n;
  }
  ASSERT_EQ(done, t);
  EXPECT_LE(MaxRelDiff(y.data(), y_ref.data(), t * ch), 1e-6);
  EXPECT_EQ(s, s_ref);
}

TEST(CausalConv1d, StepOfEachSessionEqualsItsPrefill) {
  std::mt19937 rng(8);
  const int64_t ch = 29, k = 4, t = 6, sessions = 3;
  const std::vector<float> w = Random(rng, ch * k), bias = Random(rng, ch);
  const ConvWeights cw{w.data(), bias.data(), ch, k, true};
  std::vector<std::vector<float>> x, s, s_ref, y_ref;
  for (int64_t b = 0; b < sessions; ++b) {
    x.push_back(Random(rng, t * ch));
    s.push_back(Random(rng, ch * (k - 1)));
    s_ref.push_back(s.back());
    y_ref.emplace_back(t * ch);
    CausalConv1dPrefillReference(cw, x[b].data(), ch, t, s_ref[b].data(), y_ref[b].data(),
                                 ch);
  }
  std::vector<float*> states;
  for (auto& st : s) states.push_back(st.data());
  const int64_t ld = ch + 3;
  std::vector<float> rows(sessions * ld), out(sessions * ld);
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t b = 0; b < sessions; ++b) {
      std::copy_n(x[b].data() + i * ch, ch, rows.data() + b * ld);
    }
    CausalConv1dStep(cw, rows.data(), ld, sessions, states.data(), out.data(), ld);
    for (int64_t b = 0; b < sessions; ++b) {
      EXPECT_LE(MaxRelDiff(out.data() + b * ld, y_ref[b].data() + i * ch, ch), 1e-6)
          << "token " << i << " session " << b;
    }
  }
  for (int64_t b = 0; b < sessions; ++b) EXPECT_EQ(s[b], s_ref[b]) << "session " << b;
}

TEST(ShortConv, PrefillReferenceAndStepMatchNumpyReference) {
  const std::vector<float> dims = Fixture("short_conv.dims");
  ASSERT_EQ(dims.size(), 3u);
  const int64_t ch = int64_t(dims[0]), k = int64_t(dims[1]), t = int64_t(dims[2]);
  const std::vector<float> bcx = Fixture("short_conv.bcx"), w = Fixture("short_conv.w");
  const std::vector<float> s0 = Fixture("short_conv.state0");
  const std::vector<float> want_y = Fixture("short_conv.y");
  const std::vector<float> want_s = Fixture("short_conv.state1");
  ASSERT_EQ(bcx.size(), size_t(t * 3 * ch));
  ASSERT_EQ(want_y.size(), size_t(t * ch));

  std::vector<float> s = s0, y(t * ch);
  ShortConvPrefill(w.data(), ch, k, bcx.data(), 3 * ch, t, s.data(), y.data(), ch);
  EXPECT_LE(MaxRelDiff(y.data(), want_y.data(), t * ch), 1e-6);
  EXPECT_LE(MaxRelDiff(s.data(), want_s.data(), ch * (k - 1)), 1e-7);

  s = s0;
  std::fill(y.begin(), y.end(), 0.0f);
  ShortConvPrefillReference(w.data(), ch, k, bcx.data(), 3 * ch, t, s.data(), y.data(), ch);
  EXPECT_LE(MaxRelDiff(y.data(), want_y.data(), t * ch), 1e-6);
  EXPECT_LE(MaxRelDiff(s.data(), want_s.data(), ch * (k - 1)), 1e-7);

  // Token by token through the step, beside a second session (zero state, the tokens in
  // reverse order) that must not disturb it.
  s = s0;
  std::vector<float> other(ch * (k - 1), 0.0f), other_ref = other;
  std::vector<float*> states = {s.data(), other.data()};
  std::vector<float> rows(2 * 3 * ch), out(2 * ch), other_y(ch);
  for (int64_t i = 0; i < t; ++i) {
    std::copy_n(bcx.data() + i * 3 * ch, 3 * ch, rows.data());
    std::copy_n(bcx.data() + (t - 1 - i) * 3 * ch, 3 * ch, rows.data() + 3 * ch);
    ShortConvStep(w.data(), ch, k, rows.data(), 3 * ch, 2, states.data(), out.data(), ch);
    EXPECT_LE(MaxRelDiff(out.data(), want_y.data() + i * ch, ch), 1e-6) << "token " << i;
    ShortConvPrefillReference(w.data(), ch, k, rows.data() + 3 * ch, 3 * ch, 1,
                              other_ref.data(), other_y.data(), ch);
    EXPECT_LE(MaxRelDiff(out.data() + ch, other_y.data(), ch), 1e-6) << "token " << i;
  }
  EXPECT_LE(MaxRelDiff(s.data(), want_s.data(), ch * (k - 1)), 1e-7);
  EXPECT_EQ(other, other_ref);
}

}  // namespace
}  // namespace attnserve::mixer
