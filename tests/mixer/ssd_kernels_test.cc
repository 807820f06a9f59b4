// server/mixer/ssd_kernels.h: the Mamba-2 recurrence's three paths (token-by-token
// reference, chunked prefill, batched step) against the numpy reference's values
// (make_mixer_fixtures.py) and against each other, with inputs read in place from one
// xBC row as the model will pass them; the gated grouped RMSNorm; and a whole Mamba-2
// mixer chained from these kernels and conv_kernels.h as a layer will chain them.
#include "server/mixer/ssd_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "server/mixer/conv_kernels.h"
#include "tests/mixer/fixtures.h"

namespace attnserve::mixer {
namespace {

using testing::Fixture;
using testing::MaxRelDiff;

// A numpy case with its inputs packed the way a Mamba-2 layer holds them: x | B | C in
// one conv-output row of H*P + 2*G*N, dt in a row of its own with two spare columns.
struct SsdCase {
  int64_t heads = 0, p = 0, groups = 0, n = 0, t = 0;
  std::vector<float> xbc, dt, dt_bias, a, d, state0, y, state1;
  int64_t ld = 0, lddt = 0;

  explicit SsdCase(const std::string& name) {
    const std::vector<float> dims = Fixture(name + ".dims");
    if (dims.size() != 5) return;
    heads = int64_t(dims[0]), p = int64_t(dims[1]), groups = int64_t(dims[2]);
    n = int64_t(dims[3]), t = int64_t(dims[4]);
    const std::vector<float> x = Fixture(name + ".x"), b = Fixture(name + ".b");
    const std::vector<float> c = Fixture(name + ".c"), dt_raw = Fixture(name + ".dt");
    dt_bias = Fixture(name + ".dt_bias"), a = Fixture(name + ".a"),
    d = Fixture(name + ".d");
    state0 = Fixture(name + ".state0"), y = Fixture(name + ".y");
    state1 = Fixture(name + ".state1");
    const int64_t hp = heads * p, gn = groups * n;
    ld = hp + 2 * gn, lddt = heads + 2;
    xbc.resize(t * ld);
    dt.assign(t * lddt, NAN);  // the spare columns must never be read
    for (int64_t i = 0; i < t; ++i) {
      std::copy_n(x.data() + i * hp, hp, xbc.data() + i * ld);
      std::copy_n(b.data() + i * gn, gn, xbc.data() + i * ld + hp);
      std::copy_n(c.data() + i * gn, gn, xbc.data() + i * ld + hp + gn);
      std::copy_n(dt_raw.data() + i * heads, heads, dt.data() + i * lddt);
    }
  }
  bool ok() const { return t > 0 && y.size() == size_t(t * heads * p); }
  SsdWeights weights() const {
    return {a.data(), d.data(), dt_bias.data(), heads, p, groups, n};
  }
  // The inputs from token i on.
  SsdInputs inputs(int64_t i = 0) const {
    const float* row = xbc.data() + i * ld;
    return {
        row, ld, row + heads * p, row + heads * p + groups * n, ld, dt.data() + i * lddt,
        lddt};
  }
  int64_t width() const { return heads * p; }
  int64_t state_size() const { return heads * p * n; }
};

// fp32 against float64 over up to 70 tokens, some with dt up to 30 (states of ~100):
// the worst seen is 1.8e-5, a wrong group, tap order or skip gives ~1.
constexpr double kTol = 1e-4;

TEST(Ssd, ReferenceMatchesNumpyReference) {
  for (const std::string name : {"ssd_groups", "ssd_long"}) {
    const SsdCase k(name);
    ASSERT_TRUE(k.ok()) << name;
    ASSERT_EQ(int64_t(k.state0.size()), SsdStateFloats(k.weights()));  // numpy's (H, P, N)
    std::vector<float> s = k.state0, y(k.t * k.width());
    SsdPrefillReference(k.weights(), k.inputs(), k.t, s.data(), y.data(), k.width());
    EXPECT_LE(MaxRelDiff(y.data(), k.y.data(), y.size()), kTol) << name;
    EXPECT_LE(MaxRelDiff(s.data(), k.state1.data(), s.size()), kTol) << name;
  }
}

TEST(Ssd, ChunkedPrefillMatchesNumpyReferenceForAnyChunk) {
  for (const std::string name : {"ssd_groups", "ssd_long"}) {
    const SsdCase k(name);
    ASSERT_TRUE(k.ok()) << name;
    for (int64_t chunk : {1, 4, 7, 16, 64, 200}) {
      std::vector<float> s = k.state0, y(k.t * (k.width() + 5), NAN);
      SsdPrefill(k.weights(), k.inputs(), k.t, chunk, s.data(), y.data(), k.width() + 5);
      double worst = 0;
      for (int64_t i = 0; i < k.t; ++i) {
        worst = std::max(worst, MaxRelDiff(y.data() + i * (k.width() + 5),
                                           k.y.data() + i * k.width(), k.width()));
      }
      EXPECT_LE(worst, kTol) << name << " chunk " << chunk;
      EXPECT_LE(MaxRelDiff(s.data(), k.state1.data(), s.size()), kTol)
          << name << " chunk " << chunk;
    }
  }
}

TEST(Ssd, ChunkedPrefillInPiecesEqualsOnePrefill) {
  const SsdCase k("ssd_long");
  ASSERT_TRUE(k.ok());
  std::vector<float> s_whole = k.state0, y_whole(k.t * k.width());
  SsdPrefill(k.weights(), k.inputs(), k.t, 16, s_whole.data(), y_whole.data(), k.width());
  std::vector<float> s = k.state0, y(k.t * k.width());
  int64_t done = 0;
  for (int64_t n : {3, 0, 1, 29, 37}) {  // message boundaries anywhere, not at chunks
    SsdPrefill(k.weights(), k.inputs(done), n, 16, s.data(), y.data() + done * k.width(),
               k.width());
    done += n;
  }
  ASSERT_EQ(done, k.t);
  EXPECT_LE(MaxRelDiff(y.data(), y_whole.data(), y.size()), kTol);
  EXPECT_LE(MaxRelDiff(s.data(), s_whole.data(), s.size()), kTol);
}

TEST(Ssd, StepOfEachSessionMatchesNumpyReference) {
  // Three sessions in one batch: the two numpy cases share no weights, so the batch is
  // three sessions of ssd_groups: one from the fixture's state, one from zeros fed the
  // tokens in reverse, one from the fixture's state again, a token behind.
  const SsdCase k("ssd_groups");
  ASSERT_TRUE(k.ok());
  const int64_t w = k.width();
  std::vector<float> s0 = k.state0, s1(k.state_size(), 0.0f), s2 = k.state0;
  std::vector<float> s1_ref = s1, y1_ref(w);
  std::vector<float*> states = {s0.data(), s1.data(), s2.data()};
  std::vector<float> xbc(3 * k.ld), dt(3 * k.lddt), y(3 * w);
  for (int64_t i = 0; i < k.t; ++i) {
    const int64_t rows[3] = {i, k.t - 1 - i, std::max<int64_t>(i - 1, 0)};
    const int64_t batch = i == 0 ? 2 : 3;  // the third session starts a token late
    for (int64_t b = 0; b < batch; ++b) {
      std::copy_n(k.xbc.data() + rows[b] * k.ld, k.ld, xbc.data() + b * k.ld);
      std::copy_n(k.dt.data() + rows[b] * k.lddt, k.lddt, dt.data() + b * k.lddt);
    }
    const SsdInputs in{
        xbc.data(), k.ld,      xbc.data() + w, xbc.data() + w + k.groups * k.n,
        k.ld,       dt.data(), k.lddt};
    SsdStep(k.weights(), in, batch, states.data(), y.data(), w);
    EXPECT_LE(MaxRelDiff(y.data(), k.y.data() + i * w, w), kTol) << "token " << i;
    SsdPrefillReference(k.weights(), k.inputs(rows[1]), 1, s1_ref.data(), y1_ref.data(), w);
    EXPECT_LE(MaxRelDiff(y.data() + w, y1_ref.data(), w), 1e-6) << "token " << i;
    if (batch == 3) {
      EXPECT_LE(MaxRelDiff(y.data() + 2 * w, k.y.data() + rows[2] * w, w), kTol)
          << "token " << i;
    }
  }
  EXPECT_LE(MaxRelDiff(s0.data(), k.state1.data(), s0.size()), kTol);
  EXPECT_LE(MaxRelDiff(s1.data(), s1_ref.data(), s1.size()), 1e-6);
}

TEST(Ssd, ChunkedPrefillEqualsTheRecurrenceOnALongRandomSequence) {
  // Mamba-2's own sizes (P 64, N 128; 8 heads in 2 groups) and 300 tokens: the three paths.
  std::mt19937 rng(31);
  const int64_t heads = 8, p = 64, groups = 2, n = 128, t = 300;
  const int64_t hp = heads * p, ld = hp + 2 * groups * n;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, std::log(16.0f));
  std::vector<float> xbc(t * ld), dt(t * heads), bias(heads), a(heads), d(heads);
  for (float& v : xbc) v = 0.5f * normal(rng);
  for (float& v : dt) v = normal(rng) - 3.0f;
  for (int64_t h = 0; h < heads; ++h) {
    bias[h] = 0.5f * normal(rng), a[h] = -std::exp(uniform(rng)), d[h] = 1.0f;
  }
  const SsdWeights w{a.data(), d.data(), bias.data(), heads, p, groups, n};
  const SsdInputs in{xbc.data(), ld,   xbc.data() + hp, xbc.data() + hp + groups * n, ld,
                     dt.data(),  heads};
  std::vector<float> s_ref(heads * p * n, 0.0f), y_ref(t * hp);
  SsdPrefillReference(w, in, t, s_ref.data(), y_ref.data(), hp);
  std::vector<float> s(heads * p * n, 0.0f), y(t * hp);
  SsdPrefill(w, in, t, 64, s.data(), y.data(), hp);
  EXPECT_LE(MaxRelDiff(y.data(), y_ref.data(), y.size()), 1e-4);
  EXPECT_LE(MaxRelDiff(s.data(), s_ref.data(), s.size()), 1e-4);
  std::vector<float> s_step(heads * p * n, 0.0f), y_step(t * hp);
  float* state = s_step.data();
  for (int64_t i = 0; i < t; ++i) {
    const SsdInputs row{in.x + i * ld,     ld,   in.b + i * ld, in.c + i * ld, ld,
                        in.dt + i * heads, heads};
    SsdStep(w, row, 1, &state, y_step.data() + i * hp, hp);
  }
  EXPECT_LE(MaxRelDiff(y_step.data(), y_ref.data(), y.size()), 1e-5);
  EXPECT_LE(MaxRelDiff(s_step.data(), s_ref.data(), s.size()), 1e-5);
}

TEST(GatedGroupRmsNorm, MatchesNumpyReferenceAndWorksInPlace) {
  const std::vector<float> dims = Fixture("gated_norm.dims");
  ASSERT_EQ(dims.size(), 3u);
  const int64_t t = int64_t(dims[0]), inner = int64_t(dims[1]), groups = int64_t(dims[2]);
  const float eps = Fixture("gated_norm.eps").at(0);
  std::vector<float> y = Fixture("gated_norm.y");
  const std::vector<float> z = Fixture("gated_norm.z"), w = Fixture("gated_norm.w");
  const std::vector<float> want = Fixture("gated_norm.out");
  ASSERT_EQ(want.size(), size_t(t * inner));
  std::vector<float> out(t * inner);
  GatedGroupRmsNorm(y.data(), inner, z.data(), inner, w.data(), t, inner, groups, eps,
                    out.data(), inner);
  EXPECT_LE(MaxRelDiff(out.data(), want.data(), out.size()), 1e-6);
  GatedGroupRmsNorm(y.data(), inner, z.data(), inner, w.data(), t, inner, groups, eps,
                    y.data(), inner);
  EXPECT_EQ(y, out);
}

TEST(Mamba2Mixer, ChainedKernelsMatchNumpyReferenceByPrefillAndByStep) {
  // From the in_proj output z | xBC | dt (one row of 2I + 2GN + H per token) to out_proj's
  // input: conv + SiLU over the xBC columns, SSD reading x, B, C from the conv output and
  // dt from the in_proj row, then the gated norm with z, all in place, no copies.
  const std::vector<float> dims = Fixture("mamba2_chain.dims");
  ASSERT_EQ(dims.size(), 6u);
  const int64_t heads = int64_t(dims[0]), p = int64_t(dims[1]), groups = int64_t(dims[2]);
  const int64_t n = int64_t(dims[3]), k = int64_t(dims[4]), t = int64_t(dims[5]);
  const int64_t inner = heads * p, conv_dim = inner + 2 * groups * n;
  const int64_t ld = inner + conv_dim + heads;
  const float eps = Fixture("mamba2_chain.eps").at(0);
  const std::vector<float> in_proj = Fixture("mamba2_chain.zxbcdt");
  const std::vector<float> conv_w = Fixture("mamba2_chain.conv_w");
  const std::vector<float> conv_b = Fixture("mamba2_chain.conv_b");
  const std::vector<float> dt_bias = Fixture("mamba2_chain.dt_bias");
  const std::vector<float> a = Fixture("mamba2_chain.a"), d = Fixture("mamba2_chain.d");
  const std::vector<float> norm_w = Fixture("mamba2_chain.norm_w");
  const std::vector<float> want_y = Fixture("mamba2_chain.y");
  const std::vector<float> want_conv = Fixture("mamba2_chain.conv_state1");
  const std::vector<float> want_ssm = Fixture("mamba2_chain.ssm_state1");
  ASSERT_EQ(in_proj.size(), size_t(t * ld));
  ASSERT_EQ(want_y.size(), size_t(t * inner));
  const ConvWeights cw{conv_w.data(), conv_b.data(), conv_dim, k, true};
  const SsdWeights sw{a.data(), d.data(), dt_bias.data(), heads, p, groups, n};

  // prefill
  std::vector<float> conv = Fixture("mamba2_chain.conv_state0");
  std::vector<float> ssm = Fixture("mamba2_chain.ssm_state0");
  std::vector<float> xbc(t * conv_dim), y(t * inner);
  CausalConv1dPrefill(cw, in_proj.data() + inner, ld, t, conv.data(), xbc.data(), conv_dim);
  const SsdInputs in{xbc.data(),
                     conv_dim,
                     xbc.data() + inner,
                     xbc.data() + inner + groups * n,
                     conv_dim,
                     in_proj.data() + inner + conv_dim,
                     ld};
  SsdPrefill(sw, in, t, 8, ssm.data(), y.data(), inner);
  GatedGroupRmsNorm(y.data(), inner, in_proj.data(), ld, norm_w.data(), t, inner, groups,
                    eps, y.data(), inner);
  EXPECT_LE(MaxRelDiff(y.data(), want_y.data(), y.size()), kTol);
  EXPECT_LE(MaxRelDiff(conv.data(), want_conv.data(), conv.size()), 0.0);
  EXPECT_LE(MaxRelDiff(ssm.data(), want_ssm.data(), ssm.size()), kTol);

  // token by token
  conv = Fixture("mamba2_chain.conv_state0");
  ssm = Fixture("mamba2_chain.ssm_state0");
  float* conv_state = conv.data();
  float* ssm_state = ssm.data();
  std::vector<float> xbc_row(conv_dim), y_row(inner);
  for (int64_t i = 0; i < t; ++i) {
    const float* row = in_proj.data() + i * ld;
    CausalConv1dStep(cw, row + inner, ld, 1, &conv_state, xbc_row.data(), conv_dim);
    const SsdInputs one{xbc_row.data(),
                        conv_dim,
                        xbc_row.data() + inner,
                        xbc_row.data() + inner + groups * n,
                        conv_dim,
                        row + inner + conv_dim,
                        ld};
    SsdStep(sw, one, 1, &ssm_state, y_row.data(), inner);
    GatedGroupRmsNorm(y_row.data(), inner, row, ld, norm_w.data(), 1, inner, groups, eps,
                      y_row.data(), inner);
    EXPECT_LE(MaxRelDiff(y_row.data(), want_y.data() + i * inner, inner), kTol)
        << "token " << i;
  }
  EXPECT_LE(MaxRelDiff(conv.data(), want_conv.data(), conv.size()), 0.0);
  EXPECT_LE(MaxRelDiff(ssm.data(), want_ssm.data(), ssm.size()), kTol);
}

}  // namespace
}  // namespace attnserve::mixer
