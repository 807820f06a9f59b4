// server/mixer/gdn_kernels.h: the Gated DeltaNet recurrence's three paths (token-by-token
// reference, chunked prefill, batched step) against the numpy reference's values
// (make_mixer_fixtures.py: hybrid_reference's l2_norm and gated_delta_rule) and against
// each other, with inputs read in place from one q | k | v row as the model will pass
// them; prefill then step; the gated RMSNorm; and a whole GDN mixer chained from these
// kernels and conv_kernels.h as a layer will chain them.
#include "server/mixer/gdn_kernels.h"

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

// A numpy case with its inputs packed the way a GDN layer holds them: q | k | v in one
// conv-output row of 2 n_k d_k + n_v d_v (and a spare column), b | alpha in a row of
// their own with two spare columns. The spare columns hold NaN: never read.
struct GdnCase {
  int64_t nk = 0, nv = 0, dk = 0, dv = 0, t = 0;
  float eps = 0;
  bool tiled = true;
  std::vector<float> qkv, ba, dt_bias, ssm_a, state0, o, state1;
  int64_t ld = 0, ldba = 0;

  explicit GdnCase(const std::string& name) {
    const std::vector<float> dims = Fixture(name + ".dims");
    if (dims.size() != 5) return;
    nk = int64_t(dims[0]), nv = int64_t(dims[1]), dk = int64_t(dims[2]);
    dv = int64_t(dims[3]), t = int64_t(dims[4]);
    eps = Fixture(name + ".eps").at(0);
    tiled = Fixture(name + ".tiled").at(0) != 0.0f;
    const std::vector<float> q = Fixture(name + ".q"), k = Fixture(name + ".k");
    const std::vector<float> v = Fixture(name + ".v"), b = Fixture(name + ".b");
    const std::vector<float> alpha = Fixture(name + ".alpha");
    dt_bias = Fixture(name + ".dt_bias"), ssm_a = Fixture(name + ".ssm_a");
    state0 = Fixture(name + ".state0"), o = Fixture(name + ".o");
    state1 = Fixture(name + ".state1");
    ld = 2 * nk * dk + nv * dv + 1, ldba = 2 * nv + 2;
    qkv.assign(t * ld, NAN);
    ba.assign(t * ldba, NAN);
    for (int64_t i = 0; i < t; ++i) {
      std::copy_n(q.data() + i * nk * dk, nk * dk, qkv.data() + i * ld);
      std::copy_n(k.data() + i * nk * dk, nk * dk, qkv.data() + i * ld + nk * dk);
      std::copy_n(v.data() + i * nv * dv, nv * dv, qkv.data() + i * ld + 2 * nk * dk);
      std::copy_n(b.data() + i * nv, nv, ba.data() + i * ldba);
      std::copy_n(alpha.data() + i * nv, nv, ba.data() + i * ldba + nv);
    }
  }
  bool ok() const { return t > 0 && o.size() == size_t(t * nv * dv); }
  GdnWeights weights() const {
    return {ssm_a.data(), dt_bias.data(), nk, nv, dk, dv, eps, tiled};
  }
  // The inputs from token i on, rows of `qkv_rows` and `ba_rows` (this case's by default).
  GdnInputs inputs(int64_t i = 0, const float* qkv_rows = nullptr,
                   const float* ba_rows = nullptr) const {
    const float* row = (qkv_rows ? qkv_rows : qkv.data()) + i * ld;
    const float* bar = (ba_rows ? ba_rows : ba.data()) + i * ldba;
    return {row, row + nk * dk, row + 2 * nk * dk, ld, bar, ldba, bar + nv, ldba};
  }
  int64_t width() const { return nv * dv; }
  int64_t state_size() const { return nv * dv * dk; }
};

// fp32 against float64 over up to 70 tokens with states of O(1): the worst seen is 7.5e-8
// (reference), 1.2e-7 (step), 2.2e-6 (chunked), 7.7e-7 (the whole mixer, through the
// norm); a wrong key head, decay order or state transpose gives ~1.
constexpr double kTol = 2e-5;

TEST(Gdn, ReferenceMatchesNumpyReference) {
  for (const std::string name : {"gdn_tiled", "gdn_grouped", "gdn_d64", "gdn_long"}) {
    const GdnCase k(name);
    ASSERT_TRUE(k.ok()) << name;
    ASSERT_EQ(int64_t(k.state0.size()), GdnStateFloats(k.weights()));
    std::vector<float> s = k.state0, o(k.t * k.width());
    GdnPrefillReference(k.weights(), k.inputs(), k.t, s.data(), o.data(), k.width());
    EXPECT_LE(MaxRelDiff(o.data(), k.o.data(), o.size()), kTol) << name;
    EXPECT_LE(MaxRelDiff(s.data(), k.state1.data(), s.size()), kTol) << name;
  }
}

TEST(Gdn, ChunkedPrefillMatchesNumpyReferenceForAnyChunk) {
  for (const std::string name : {"gdn_tiled", "gdn_grouped", "gdn_d64", "gdn_long"}) {
    const GdnCase k(name);
    ASSERT_TRUE(k.ok()) << name;
    const int64_t ldo = k.width() + 5;
    // chunks of 1 and 2 run as steps; from 5 on the WY form, remainders under 5 as steps
    for (int64_t chunk : {1, 2, 5, 6, 16, 64, 200}) {
      std::vector<float> s = k.state0, o(k.t * ldo, NAN);
      GdnPrefill(k.weights(), k.inputs(), k.t, chunk, s.data(), o.data(), ldo);
      double worst = 0;
      for (int64_t i = 0; i < k.t; ++i) {
        worst = std::max(
            worst, MaxRelDiff(o.data() + i * ldo, k.o.data() + i * k.width(), k.width()));
        for (int64_t c = k.width(); c < ldo; ++c) ASSERT_TRUE(std::isnan(o[i * ldo + c]));
      }
      EXPECT_LE(worst, kTol) << name << " chunk " << chunk;
      EXPECT_LE(MaxRelDiff(s.data(), k.state1.data(), s.size()), kTol)
          << name << " chunk " << chunk;
    }
  }
}

TEST(Gdn, ChunkedPrefillInPiecesEqualsOnePrefill) {
  const GdnCase k("gdn_long");
  ASSERT_TRUE(k.ok());
  std::vector<float> s_whole = k.state0, o_whole(k.t * k.width());
  GdnPrefill(k.weights(), k.inputs(), k.t, 16, s_whole.data(), o_whole.data(), k.width());
  std::vector<float> s = k.state0, o(k.t * k.width());
  int64_t done = 0;
  for (int64_t n : {3, 0, 1, 29, 37}) {  // message boundaries anywhere, not at chunks
    GdnPrefill(k.weights(), k.inputs(done), n, 16, s.data(), o.data() + done * k.width(),
               k.width());
    done += n;
  }
  ASSERT_EQ(done, k.t);
  EXPECT_LE(MaxRelDiff(o.data(), o_whole.data(), o.size()), kTol);
  EXPECT_LE(MaxRelDiff(s.data(), s_whole.data(), s.size()), kTol);
}

TEST(Gdn, StepOfEachSessionMatchesNumpyReference) {
  // Three sessions in one batch, all of gdn_tiled's weights: one from the fixture's state,
  // one from zeros fed the tokens in reverse (against the reference kernel), one from the
  // fixture's state again, a token behind.
  const GdnCase k("gdn_tiled");
  ASSERT_TRUE(k.ok());
  const int64_t w = k.width();
  std::vector<float> s0 = k.state0, s1(k.state_size(), 0.0f), s2 = k.state0;
  std::vector<float> s1_ref = s1, o1_ref(w);
  std::vector<float*> states = {s0.data(), s1.data(), s2.data()};
  std::vector<float> qkv(3 * k.ld), ba(3 * k.ldba), o(3 * w);
  for (int64_t i = 0; i < k.t; ++i) {
    const int64_t rows[3] = {i, k.t - 1 - i, std::max<int64_t>(i - 1, 0)};
    const int64_t batch = i == 0 ? 2 : 3;  // the third session starts a token late
    for (int64_t b = 0; b < batch; ++b) {
      std::copy_n(k.qkv.data() + rows[b] * k.ld, k.ld, qkv.data() + b * k.ld);
      std::copy_n(k.ba.data() + rows[b] * k.ldba, k.ldba, ba.data() + b * k.ldba);
    }
    GdnStep(k.weights(), k.inputs(0, qkv.data(), ba.data()), batch, states.data(), o.data(),
            w);
    EXPECT_LE(MaxRelDiff(o.data(), k.o.data() + i * w, w), kTol) << "token " << i;
    GdnPrefillReference(k.weights(), k.inputs(rows[1]), 1, s1_ref.data(), o1_ref.data(), w);
    EXPECT_LE(MaxRelDiff(o.data() + w, o1_ref.data(), w), 1e-6) << "token " << i;
    if (batch == 3) {
      EXPECT_LE(MaxRelDiff(o.data() + 2 * w, k.o.data() + rows[2] * w, w), kTol)
          << "token " << i;
    }
  }
  EXPECT_LE(MaxRelDiff(s0.data(), k.state1.data(), s0.size()), kTol);
  EXPECT_LE(MaxRelDiff(s1.data(), s1_ref.data(), s1.size()), 1e-6);
}

TEST(Gdn, PrefillThenStepContinuesTheSequence) {
  // A prompt by the chunked prefill, then the rest token by token, as a session serves it.
  for (const std::string name : {"gdn_tiled", "gdn_grouped", "gdn_d64", "gdn_long"}) {
    const GdnCase k(name);
    ASSERT_TRUE(k.ok()) << name;
    const int64_t w = k.width(), prompt = k.t / 2 + 3;
    std::vector<float> s = k.state0, o(k.t * w);
    GdnPrefill(k.weights(), k.inputs(), prompt, 8, s.data(), o.data(), w);
    float* state = s.data();
    for (int64_t i = prompt; i < k.t; ++i) {
      GdnStep(k.weights(), k.inputs(i), 1, &state, o.data() + i * w, w);
    }
    EXPECT_LE(MaxRelDiff(o.data(), k.o.data(), o.size()), kTol) << name;
    EXPECT_LE(MaxRelDiff(s.data(), k.state1.data(), s.size()), kTol) << name;
  }
}

TEST(Gdn, ThreePathsAgreeOnALongRandomSequenceAtQwenHeadSize) {
  // Qwen3.5's head size (d_k = d_v = 128), 4 value heads on 2 key heads, 300 tokens, from
  // zeros: the chunked prefill and the step against the reference kernel.
  std::mt19937 rng(38);
  const int64_t nk = 2, nv = 4, dk = 128, dv = 128, t = 300;
  const int64_t ld = 2 * nk * dk + nv * dv, width = nv * dv;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, std::log(16.0f));
  std::vector<float> qkv(t * ld), ba(t * 2 * nv), dt_bias(nv), ssm_a(nv);
  for (float& v : qkv) v = normal(rng);
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t h = 0; h < nv; ++h) {
      ba[i * 2 * nv + h] = normal(rng);             // beta around 1/2
      ba[i * 2 * nv + nv + h] = normal(rng) - 4.0f;  // decays near 1: a long memory
    }
  }
  for (int64_t h = 0; h < nv; ++h) {
    dt_bias[h] = 0.5f * normal(rng), ssm_a[h] = -std::exp(uniform(rng));
  }
  const GdnWeights w{ssm_a.data(), dt_bias.data(), nk, nv, dk, dv, 1e-6f};
  const GdnInputs in{qkv.data(), qkv.data() + nk * dk, qkv.data() + 2 * nk * dk, ld,
                     ba.data(), 2 * nv, ba.data() + nv, 2 * nv};
  std::vector<float> s_ref(GdnStateFloats(w), 0.0f), o_ref(t * width);
  GdnPrefillReference(w, in, t, s_ref.data(), o_ref.data(), width);
  std::vector<float> s(GdnStateFloats(w), 0.0f), o(t * width);
  GdnPrefill(w, in, t, 64, s.data(), o.data(), width);
  EXPECT_LE(MaxRelDiff(o.data(), o_ref.data(), o.size()), 1e-5);
  EXPECT_LE(MaxRelDiff(s.data(), s_ref.data(), s.size()), 1e-5);
  std::vector<float> s_step(GdnStateFloats(w), 0.0f), o_step(t * width);
  float* state = s_step.data();
  for (int64_t i = 0; i < t; ++i) {
    const GdnInputs row{in.q + i * ld, in.k + i * ld, in.v + i * ld, ld,
                        in.b + i * 2 * nv, 2 * nv, in.alpha + i * 2 * nv, 2 * nv};
    GdnStep(w, row, 1, &state, o_step.data() + i * width, width);
  }
  EXPECT_LE(MaxRelDiff(o_step.data(), o_ref.data(), o.size()), 1e-5);
  EXPECT_LE(MaxRelDiff(s_step.data(), s_ref.data(), s.size()), 1e-5);
}

TEST(Gdn, StepAndChunkedPrefillMatchTheReferenceAtAnyKeyDim) {
  // Key dims off the vector widths: 24 (no full block of 32 lanes), 40 (one and a tail of
  // 8), 48 (in qwen3next's grouped head order); 64 and 128 (the AVX-512 step's sizes).
  for (int64_t dk : {24, 40, 48, 64, 128}) {
    std::mt19937 rng(static_cast<uint32_t>(dk));
    const int64_t nk = 2, nv = 4, dv = 24, t = 20, batch = 3;
    const int64_t ld = 2 * nk * dk + nv * dv, width = nv * dv;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> qkv(t * ld), ba(t * 2 * nv), dt_bias(nv), ssm_a(nv);
    for (float& v : qkv) v = normal(rng);
    for (float& v : ba) v = normal(rng);
    for (int64_t h = 0; h < nv; ++h) dt_bias[h] = normal(rng), ssm_a[h] = -1.0f - h;
    const GdnWeights w{ssm_a.data(), dt_bias.data(), nk, nv, dk, dv, 1e-6f, dk != 48};
    const GdnInputs in{qkv.data(), qkv.data() + nk * dk, qkv.data() + 2 * nk * dk, ld,
                       ba.data(), 2 * nv, ba.data() + nv, 2 * nv};
    // the reference from three different states, one per session of the step's batch
    std::vector<std::vector<float>> ref(batch), step(batch);
    std::vector<float> o_ref(t * width);
    for (int64_t b = 0; b < batch; ++b) {
      ref[b].resize(GdnStateFloats(w));
      for (float& v : ref[b]) v = 0.3f * normal(rng);
      step[b] = ref[b];
    }
    std::vector<float> chunked = ref[0], o(t * width);
    GdnPrefill(w, in, t, 7, chunked.data(), o.data(), width);
    GdnPrefillReference(w, in, t, ref[0].data(), o_ref.data(), width);
    EXPECT_LE(MaxRelDiff(o.data(), o_ref.data(), o.size()), 1e-5) << "d_k " << dk;
    EXPECT_LE(MaxRelDiff(chunked.data(), ref[0].data(), chunked.size()), 1e-5) << "d_k " << dk;
    for (int64_t b = 1; b < batch; ++b) {
      GdnPrefillReference(w, in, t, ref[b].data(), o_ref.data(), width);
    }
    // each token of the batch: session b reads token i of the same rows
    std::vector<float*> states = {step[0].data(), step[1].data(), step[2].data()};
    std::vector<float> rows(batch * ld), ba_rows(batch * 2 * nv), o_step(batch * width);
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t b = 0; b < batch; ++b) {
        std::copy_n(qkv.data() + i * ld, ld, rows.data() + b * ld);
        std::copy_n(ba.data() + i * 2 * nv, 2 * nv, ba_rows.data() + b * 2 * nv);
      }
      const GdnInputs row{rows.data(), rows.data() + nk * dk, rows.data() + 2 * nk * dk, ld,
                          ba_rows.data(), 2 * nv, ba_rows.data() + nv, 2 * nv};
      GdnStep(w, row, batch, states.data(), o_step.data(), width);
    }
    EXPECT_LE(MaxRelDiff(o_step.data() + 2 * width, o_ref.data() + (t - 1) * width, width),
              1e-5)
        << "d_k " << dk;
    for (int64_t b = 0; b < batch; ++b) {
      EXPECT_LE(MaxRelDiff(step[b].data(), ref[b].data(), ref[b].size()), 1e-5)
          << "d_k " << dk << " session " << b;
    }
  }
}

TEST(GdnGatedRmsNorm, MatchesNumpyReferenceAndWorksInPlace) {
  const std::vector<float> dims = Fixture("gdn_norm.dims");
  ASSERT_EQ(dims.size(), 3u);
  const int64_t t = int64_t(dims[0]), heads = int64_t(dims[1]), dv = int64_t(dims[2]);
  const float eps = Fixture("gdn_norm.eps").at(0);
  std::vector<float> o = Fixture("gdn_norm.o");
  const std::vector<float> z = Fixture("gdn_norm.z"), w = Fixture("gdn_norm.w");
  const std::vector<float> want = Fixture("gdn_norm.out");
  const int64_t width = heads * dv;
  ASSERT_EQ(want.size(), size_t(t * width));
  std::vector<float> out(t * width);
  GdnGatedRmsNorm(o.data(), width, z.data(), width, w.data(), t, heads, dv, eps, out.data(),
                  width);
  EXPECT_LE(MaxRelDiff(out.data(), want.data(), out.size()), 1e-6);
  GdnGatedRmsNorm(o.data(), width, z.data(), width, w.data(), t, heads, dv, eps, o.data(),
                  width);
  EXPECT_EQ(o, out);
}

TEST(GdnMixer, ChainedKernelsMatchNumpyReferenceByPrefillAndByStep) {
  // From the projections (q | k | v, z, b, alpha) to ssm_out's input: conv + SiLU over the
  // q | k | v row, the delta rule reading q, k, v from the conv output, then the gated
  // norm with z, in place.
  const std::vector<float> dims = Fixture("gdn_chain.dims");
  ASSERT_EQ(dims.size(), 6u);
  const int64_t nk = int64_t(dims[0]), nv = int64_t(dims[1]), dk = int64_t(dims[2]);
  const int64_t dv = int64_t(dims[3]), kernel = int64_t(dims[4]), t = int64_t(dims[5]);
  const int64_t channels = 2 * nk * dk + nv * dv, width = nv * dv;
  const float eps = Fixture("gdn_chain.eps").at(0);
  const std::vector<float> qkv = Fixture("gdn_chain.qkv"), z = Fixture("gdn_chain.z");
  const std::vector<float> b = Fixture("gdn_chain.b"), alpha = Fixture("gdn_chain.alpha");
  const std::vector<float> conv_w = Fixture("gdn_chain.conv_w");
  const std::vector<float> dt_bias = Fixture("gdn_chain.dt_bias");
  const std::vector<float> ssm_a = Fixture("gdn_chain.ssm_a");
  const std::vector<float> norm_w = Fixture("gdn_chain.norm_w");
  const std::vector<float> want_y = Fixture("gdn_chain.y");
  const std::vector<float> want_conv = Fixture("gdn_chain.conv_state1");
  const std::vector<float> want_state = Fixture("gdn_chain.state1");
  ASSERT_EQ(qkv.size(), size_t(t * channels));
  ASSERT_EQ(want_y.size(), size_t(t * width));
  const ConvWeights cw{conv_w.data(), nullptr, channels, kernel, true};
  const GdnWeights gw{ssm_a.data(), dt_bias.data(), nk, nv, dk, dv, eps};
  auto inputs = [&](const float* conv_out, int64_t i) {
    return GdnInputs{conv_out, conv_out + nk * dk, conv_out + 2 * nk * dk, channels,
                     b.data() + i * nv, nv, alpha.data() + i * nv, nv};
  };

  // prefill
  std::vector<float> conv = Fixture("gdn_chain.conv_state0");
  std::vector<float> state = Fixture("gdn_chain.state0");
  std::vector<float> conv_out(t * channels), y(t * width);
  CausalConv1dPrefill(cw, qkv.data(), channels, t, conv.data(), conv_out.data(), channels);
  GdnPrefill(gw, inputs(conv_out.data(), 0), t, 8, state.data(), y.data(), width);
  GdnGatedRmsNorm(y.data(), width, z.data(), width, norm_w.data(), t, nv, dv, eps, y.data(),
                  width);
  EXPECT_LE(MaxRelDiff(y.data(), want_y.data(), y.size()), kTol);
  EXPECT_LE(MaxRelDiff(conv.data(), want_conv.data(), conv.size()), 0.0);
  EXPECT_LE(MaxRelDiff(state.data(), want_state.data(), state.size()), kTol);

  // token by token
  conv = Fixture("gdn_chain.conv_state0");
  state = Fixture("gdn_chain.state0");
  float* conv_state = conv.data();
  float* gdn_state = state.data();
  std::vector<float> row(channels), y_row(width);
  for (int64_t i = 0; i < t; ++i) {
    CausalConv1dStep(cw, qkv.data() + i * channels, channels, 1, &conv_state, row.data(),
                     channels);
    GdnStep(gw, inputs(row.data(), i), 1, &gdn_state, y_row.data(), width);
    GdnGatedRmsNorm(y_row.data(), width, z.data() + i * width, width, norm_w.data(), 1, nv,
                    dv, eps, y_row.data(), width);
    EXPECT_LE(MaxRelDiff(y_row.data(), want_y.data() + i * width, width), kTol)
        << "token " << i;
  }
  EXPECT_LE(MaxRelDiff(conv.data(), want_conv.data(), conv.size()), 0.0);
  EXPECT_LE(MaxRelDiff(state.data(), want_state.data(), state.size()), kTol);
}

}  // namespace
}  // namespace attnserve::mixer
