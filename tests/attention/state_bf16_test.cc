// Fixed states kept in bf16 (AttentionOptions::state_bf16): the fused paths (the batched
// Step's loop, StepRaw, PrefillRaw) against the plain ATen reference
// (reference_kernels), which reads the bf16 state into fp32, runs its ops and stores it
// back with LibTorch's own rounding; the rounding itself against at::BFloat16; half the
// bytes; snapshots (Tensors / RestoreState) exact.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "server/attention/bf16.h"
#include "server/attention/feature_kernels.h"
#include "server/attention/registry.h"

namespace attnserve::attention {
namespace {

constexpr int kDim = 16;

struct Case {
  std::string module;
  int order;
  bool qk_norm = false;
  float decay_horizon = 0;
  int heads = 2;
  int kv_heads = 2;
};

std::string CaseName(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return c.module + std::to_string(c.order) + (c.qk_norm ? "_qknorm" : "") +
         (c.decay_horizon > 0 ? "_decay" + std::to_string(int(c.decay_horizon)) : "") +
         "_h" + std::to_string(c.heads) + "kv" + std::to_string(c.kv_heads);
}

AttentionOptions Options(const Case& c, bool bf16, bool reference) {
  AttentionOptions o;
  o.module = c.module;
  o.order = c.order;
  o.qk_norm = c.qk_norm;
  o.decay_horizon = c.decay_horizon;
  o.num_heads = c.heads;
  o.num_kv_heads = c.kv_heads;
  o.head_dim = kDim;
  o.value_dim = kDim;
  o.chunk_size = 16;
  o.state_bf16 = bf16;
  o.reference_kernels = reference;
  return o;
}

std::unique_ptr<Attention> Make(const Case& c, bool bf16, bool reference) {
  auto a = CreateAttention(Options(c, bf16, reference));
  EXPECT_TRUE(a.ok()) << a.status();
  return std::move(a).value();
}

double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

// (H, T, D) -> the raw paths' row-major (T, H, D) floats.
std::vector<float> Rows(const at::Tensor& x) {
  at::Tensor r = x.transpose(0, 1).contiguous();
  return std::vector<float>(r.data_ptr<float>(), r.data_ptr<float>() + r.numel());
}

// PrefillRaw of q (H, T, D), k (Hkv, T, D), v (Hkv, T, Dv) onto `state` -> (H, T, Dv).
at::Tensor PrefillRaw(const Attention& attn, AttentionState& state, const at::Tensor& q,
                      const at::Tensor& k, const at::Tensor& v) {
  const int64_t t = q.size(1), h = q.size(0), dv = v.size(2);
  std::vector<float> rq = Rows(q), rk = Rows(k), rv = Rows(v);
  std::vector<float> out(t * h * dv), scratch(attn.PrefillScratchFloats(t));
  attn.PrefillRaw(state, t, rq.data(), rk.data(), rv.data(), out.data(), scratch.data());
  return at::from_blob(out.data(), {t, h, dv}).transpose(0, 1).clone();
}

// Every value of `t` (fp32) is a bf16 value: bf16 -> fp32 widening loses nothing.
bool AllBf16(const at::Tensor& t) {
  return at::equal(t, t.to(at::kBFloat16).to(at::kFloat));
}

// States a (fused) and b (reference), which rounded fp32 sums to bf16 in different
// kernels: every element within one bf16 step (2^-7 of its magnitude: 8 significant
// bits) of the other, plus the fp32 noise the fp32 paths are held to (1e-5 of the
// tensor's largest magnitude, plus one: model_step_test's bound; the kernels sum in other
// orders, and an element that is a small difference of large terms can sit next to a
// rounding boundary); and at least `share` of the elements bit-equal.
void ExpectSameBf16State(const AttentionState& a, const AttentionState& b, double share,
                         const std::string& what) {
  const NamedTensors ta = a.Tensors(), tb = b.Tensors();
  ASSERT_EQ(ta.size(), tb.size());
  for (size_t i = 0; i < ta.size(); ++i) {
    const at::Tensor& x = ta[i].second;
    const at::Tensor& y = tb[i].second;
    ASSERT_EQ(x.scalar_type(), at::kFloat) << what;
    EXPECT_TRUE(AllBf16(x) && AllBf16(y)) << what << ": " << ta[i].first << " not bf16";
    const double noise = 1e-5 * (1 + y.abs().max().item<double>());
    at::Tensor excess = (x - y).abs() - at::maximum(x.abs(), y.abs()) * std::ldexp(1.0, -7);
    EXPECT_LE(excess.max().item<double>(), noise) << what << " " << ta[i].first;
    const double equal = (x == y).to(at::kDouble).mean().item<double>();
    EXPECT_GE(equal, share) << what << " " << ta[i].first;
  }
}

class StateBf16 : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

// The reference's state `from` as a state of `attn` (a bf16 -> fp32 -> bf16 copy: exact).
std::unique_ptr<AttentionState> Copy(const Attention& attn, const AttentionState& from) {
  return attn.RestoreState(from.Position(), from.Tensors());
}

// Each operation of the fused paths from the reference's state of the moment: three
// sessions prefilled (20, 40, 60 tokens) one chunk of 16 at a time (the last ragged)
// through Prefill and PrefillRaw, then stepped together 60 times through the fused Step
// and StepRaw. Every output equals the reference's (1e-4), every state left behind is
// the reference's (ExpectSameBf16State; at least 99% of elements bit-equal).
TEST_P(StateBf16, FusedAndRawPathsMatchTheReferenceThatRoundsAlike) {
  const Case c = GetParam();
  auto fused = Make(c, true, false);
  auto reference = Make(c, true, true);
  ASSERT_TRUE(fused->HasRawStep());
  const int64_t b = 3, t = 120, dv = kDim, chunk = 16;
  at::manual_seed(31);
  at::Tensor q = at::randn({b, c.heads, t, kDim}), k = at::randn({b, c.kv_heads, t, kDim});
  at::Tensor v = at::randn({b, c.kv_heads, t, kDim});
  std::vector<std::unique_ptr<AttentionState>> rs;
  std::vector<AttentionState*> rp;
  double prefill_worst = 0;
  for (int64_t s = 0; s < b; ++s) {
    const int64_t n = 20 * (s + 1);
    rs.push_back(reference->NewState());
    rp.push_back(rs.back().get());
    for (int64_t at = 0; at < n; at += chunk) {
      const int64_t len = std::min(chunk, n - at);
      at::Tensor qs = q[s].narrow(1, at, len), ks = k[s].narrow(1, at, len);
      at::Tensor vs = v[s].narrow(1, at, len);
      auto fs = Copy(*fused, *rs.back()), raws = Copy(*fused, *rs.back());
      at::Tensor want = reference->Prefill(*rs.back(), qs, ks, vs);
      prefill_worst = std::max(prefill_worst, MaxAbsDiff(fused->Prefill(*fs, qs, ks, vs), want));
      prefill_worst = std::max(prefill_worst, MaxAbsDiff(PrefillRaw(*fused, *raws, qs, ks, vs), want));
      const std::string what = "session " + std::to_string(s) + " at " + std::to_string(at);
      ExpectSameBf16State(*fs, *rs.back(), 0.99, "prefill, " + what);
      ExpectSameBf16State(*raws, *rs.back(), 0.99, "raw prefill, " + what);
    }
  }
  EXPECT_LE(prefill_worst, 1e-4);
  double step_worst = 0;
  std::vector<float> scratch(fused->StepScratchFloats(b)), out(b * c.heads * dv);
  for (int64_t i = 60; i < t; ++i) {
    std::vector<std::unique_ptr<AttentionState>> fs, raws;
    std::vector<AttentionState*> fp, rawp;
    for (int64_t s = 0; s < b; ++s) {
      fs.push_back(Copy(*fused, *rs[s]));
      raws.push_back(Copy(*fused, *rs[s]));
      fp.push_back(fs.back().get());
      rawp.push_back(raws.back().get());
    }
    at::Tensor qi = q.select(2, i).contiguous(), ki = k.select(2, i).contiguous();
    at::Tensor vi = v.select(2, i).contiguous();
    at::Tensor want = reference->Step(rp, qi, ki, vi);
    step_worst = std::max(step_worst, MaxAbsDiff(fused->Step(fp, qi, ki, vi), want));
    fused->StepRaw(rawp, qi.clone().data_ptr<float>(), ki.clone().data_ptr<float>(),
                   vi.data_ptr<float>(), out.data(), scratch.data());
    step_worst = std::max(step_worst, MaxAbsDiff(at::from_blob(out.data(), {b, c.heads, dv}), want));
    for (int64_t s = 0; s < b; ++s) {
      const std::string what = "session " + std::to_string(s) + " token " + std::to_string(i);
      EXPECT_EQ(fs[s]->Position(), rs[s]->Position());
      ExpectSameBf16State(*fs[s], *rs[s], 0.99, "step, " + what);
      ExpectSameBf16State(*raws[s], *rs[s], 0.99, "raw step, " + what);
    }
  }
  EXPECT_LE(step_worst, 1e-4);
}

// The bf16 state is the fp32 one rounded once per store: after one prefill chunk from
// a fresh state (Prefill, the reference; PrefillRaw), exactly the fp32 state rounded to
// nearest even (the same sum, then one rounding); the outputs of that chunk, which read
// the fp32 values, equal fp32's.
TEST_P(StateBf16, OneChunkLeavesTheFp32StateRounded) {
  const Case c = GetParam();
  for (const bool raw : {false, true}) {
    SCOPED_TRACE(raw ? "PrefillRaw" : "Prefill");
    auto bf16 = Make(c, true, false);
    auto fp32 = Make(c, false, false);
    at::manual_seed(5);
    at::Tensor q = at::randn({c.heads, 16, kDim}), k = at::randn({c.kv_heads, 16, kDim});
    at::Tensor v = at::randn({c.kv_heads, 16, kDim});
    auto s16 = bf16->NewState(), s32 = fp32->NewState();
    at::Tensor o16 = raw ? PrefillRaw(*bf16, *s16, q, k, v) : bf16->Prefill(*s16, q, k, v);
    at::Tensor o32 = raw ? PrefillRaw(*fp32, *s32, q, k, v) : fp32->Prefill(*s32, q, k, v);
    EXPECT_TRUE(at::equal(o16, o32));
    const NamedTensors t16 = s16->Tensors(), t32 = s32->Tensors();
    for (size_t i = 0; i < t16.size(); ++i) {
      EXPECT_TRUE(at::equal(t16[i].second, t32[i].second.to(at::kBFloat16).to(at::kFloat)))
          << t16[i].first;
      EXPECT_FALSE(at::equal(t16[i].second, t32[i].second)) << t16[i].first << ": not rounded";
    }
  }
}

// Bytes: the slot, s and z in bf16, is half the fp32 one, as StateBytesPerLayer says.
TEST_P(StateBf16, StateBytesAreHalfTheFp32Ones) {
  const Case c = GetParam();
  auto bf16 = Make(c, true, false);
  auto fp32 = Make(c, false, false);
  const int64_t bytes16 = bf16->NewState()->Bytes(), bytes32 = fp32->NewState()->Bytes();
  EXPECT_EQ(2 * bytes16, bytes32);
  EXPECT_EQ(bytes16, StateBytesPerLayer(bf16->options(), 1000));
  EXPECT_EQ(bytes32, StateBytesPerLayer(fp32->options(), 1000));
  EXPECT_EQ(bf16->NewState()->Clone()->Bytes(), bytes16);
  EXPECT_EQ(bf16->StateShapes(7), fp32->StateShapes(7));  // same tensors, other element
}

// A snapshot's fp32 tensors restore to the same bf16 state (a bf16 -> fp32 -> bf16
// round trip is exact), and the restored state and a clone continue exactly as the
// original does; fp32 tensors from elsewhere are rounded to nearest even.
TEST_P(StateBf16, TensorsRestoreExactlyAndForeignFp32IsRounded) {
  const Case c = GetParam();
  auto attn = Make(c, true, false);
  at::manual_seed(9);
  at::Tensor q = at::randn({c.heads, 40, kDim}), k = at::randn({c.kv_heads, 40, kDim});
  at::Tensor v = at::randn({c.kv_heads, 40, kDim});
  auto st = attn->NewState();
  attn->Prefill(*st, q.narrow(1, 0, 30), k.narrow(1, 0, 30), v.narrow(1, 0, 30));
  const NamedTensors saved = st->Tensors();
  NamedTensors copies;
  for (const auto& [name, t] : saved) copies.push_back({name, t.clone()});
  auto restored = attn->RestoreState(30, copies);
  auto clone = st->Clone();
  for (AttentionState* other : {restored.get(), clone.get()}) {
    const NamedTensors again = other->Tensors();
    for (size_t i = 0; i < saved.size(); ++i) {
      EXPECT_TRUE(at::equal(again[i].second, saved[i].second)) << saved[i].first;
    }
  }
  at::Tensor rest_q = q.narrow(1, 30, 10), rest_k = k.narrow(1, 30, 10);
  at::Tensor rest_v = v.narrow(1, 30, 10);
  at::Tensor a = attn->Prefill(*st, rest_q, rest_k, rest_v);
  at::Tensor b = attn->Prefill(*restored, rest_q, rest_k, rest_v);
  at::Tensor d = attn->Prefill(*clone, rest_q, rest_k, rest_v);
  EXPECT_TRUE(at::equal(a, b) && at::equal(a, d));
  NamedTensors foreign;
  for (const auto& [name, shape] : attn->StateShapes(0)) {
    foreign.push_back({name, at::randn(shape) * 100});
  }
  auto rounded = attn->RestoreState(0, foreign);
  const NamedTensors got = rounded->Tensors();
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(at::equal(got[i].second, foreign[i].second.to(at::kBFloat16).to(at::kFloat)));
  }
}

INSTANTIATE_TEST_SUITE_P(
    FixedStateModules, StateBf16,
    testing::Values(Case{"taylor", 2}, Case{"taylor", 4}, Case{"taylor", 2, true},
                    Case{"taylor_norm", 4}, Case{"taylor_norm", 3, true}, Case{"linear", 0},
                    Case{"taylor", 2, false, 8}, Case{"linear", 0, false, 16},
                    // Grouped-query: 4 query heads on 2 KV heads, or on 1.
                    Case{"taylor", 2, false, 0, 4, 2}, Case{"taylor_norm", 4, false, 8, 4, 1},
                    Case{"linear", 0, false, 0, 4, 2}),
    CaseName);

// KV-cache modules ignore state_bf16: fp32 caches, the same bytes.
TEST(StateBf16KvCache, IsIgnored) {
  for (const char* module : {"softmax", "softmax_norm"}) {
    Case c{module, 0};
    auto bf16 = Make(c, true, false);
    auto fp32 = Make(c, false, false);
    EXPECT_EQ(StateBytesPerLayer(bf16->options(), 100), StateBytesPerLayer(fp32->options(), 100));
    auto st = bf16->NewState();
    at::manual_seed(2);
    bf16->Prefill(*st, at::randn({2, 5, kDim}), at::randn({2, 5, kDim}), at::randn({2, 5, kDim}));
    for (const auto& [name, t] : st->Tensors()) EXPECT_EQ(t.scalar_type(), at::kFloat) << name;
  }
}

// StateUpdateAndReadBf16 (on AVX-512 with dv of 16 to 64, rows in registers) against
// the plain loops it falls back to, from the same bf16 state: 20 tokens in a row, with
// and without decay, one and three queries per KV head, dv with and without the
// AVX-512 loop (24). Outputs within 1e-5 (relative), states within one bf16 step of each
// other and at least 99% of s bit-equal (the loops may contract g x + k v into an FMA
// differently).
TEST(StateBf16Kernel, MatchesThePlainLoops) {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal;
  auto fill = [&](std::vector<float>& x, float scale) {
    for (float& f : x) f = scale * normal(rng);
  };
  for (const int64_t dv : {16, 24, 32, 48, 64}) {
    for (const int64_t group : {1, 3}) {
      for (const bool decayed : {false, true}) {
        SCOPED_TRACE(testing::Message() << "dv " << dv << " group " << group
                                        << (decayed ? " decay" : ""));
        const int64_t kv = 2, m = 37, h = kv * group;
        std::vector<uint16_t> s_fast(kv * m * dv), z_fast(kv * m);
        std::vector<float> init(kv * m * dv);
        fill(init, 3.0f);
        for (size_t i = 0; i < s_fast.size(); ++i) s_fast[i] = RoundToBf16(init[i]);
        for (size_t i = 0; i < z_fast.size(); ++i) z_fast[i] = RoundToBf16(std::abs(init[i]));
        std::vector<uint16_t> s_plain = s_fast, z_plain = z_fast;
        const std::vector<float> decay = {0.9f, 0.99f};
        for (int token = 0; token < 20; ++token) {
          std::vector<float> pq(h * m), pk(kv * m), v(kv * dv);
          fill(pq, 1.0f);
          fill(pk, 1.0f);
          fill(v, 1.0f);
          std::vector<float> num_fast(h * dv), den_fast(h), num_plain(h * dv), den_plain(h);
          StateUpdateAndReadBf16(s_fast.data(), z_fast.data(), pq.data(), pk.data(), v.data(),
                                 decayed ? decay.data() : nullptr, kv, group, m, dv,
                                 num_fast.data(), den_fast.data());
          StateUpdateAndReadBf16Plain(s_plain.data(), z_plain.data(), pq.data(), pk.data(),
                                      v.data(), decayed ? decay.data() : nullptr, kv, group, m,
                                      dv, num_plain.data(), den_plain.data());
          for (int64_t i = 0; i < h * dv; ++i) {
            ASSERT_NEAR(num_fast[i], num_plain[i], 1e-5 * (1 + std::abs(num_plain[i]))) << i;
          }
          for (int64_t i = 0; i < h; ++i) {
            ASSERT_NEAR(den_fast[i], den_plain[i], 1e-5 * (1 + std::abs(den_plain[i]))) << i;
          }
          int64_t equal = 0;
          for (size_t i = 0; i < s_fast.size(); ++i) {
            const float a = Bf16ToFloat(s_fast[i]), b = Bf16ToFloat(s_plain[i]);
            ASSERT_LE(std::abs(a - b), std::ldexp(std::max(std::abs(a), std::abs(b)), -7) + 1e-6)
                << i;
            equal += s_fast[i] == s_plain[i];
            s_plain[i] = s_fast[i];  // the next token from the same state again
          }
          EXPECT_GE(equal, int64_t(0.99 * double(s_fast.size())));
          for (size_t i = 0; i < z_fast.size(); ++i) {
            const float a = Bf16ToFloat(z_fast[i]), b = Bf16ToFloat(z_plain[i]);
            ASSERT_LE(std::abs(a - b), std::ldexp(std::max(std::abs(a), std::abs(b)), -7)) << i;
            z_plain[i] = z_fast[i];
          }
        }
      }
    }
  }
}

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// RoundToBf16 (the fused loops) rounds as at::BFloat16 (the reference's copy_) does, on
// ties, near ties, subnormals, the largest values, infinities and NaN, and on random bit
// patterns; Bf16ToFloat widens exactly.
TEST(Bf16Rounding, AgreesWithLibTorch) {
  std::vector<float> values = {0.0f, -0.0f, 1.0f, -96.0f,
                               1.0f + std::ldexp(1.0f, -8),       // tie: down to even
                               1.0f + std::ldexp(3.0f, -8),       // tie: up to even
                               1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20),  // above
                               std::numeric_limits<float>::max(),  // rounds to infinity
                               std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN(), FromBits(0x7F800001u),
                               FromBits(0xFFC00001u)};
  std::mt19937 rng(3);
  for (int i = 0; i < 200000; ++i) values.push_back(FromBits(rng()));
  for (float f : values) {
    const uint16_t ours = RoundToBf16(f);
    const uint16_t torch = c10::BFloat16(f).x;
    ASSERT_EQ(ours, torch) << f;
    const float back = Bf16ToFloat(ours);
    ASSERT_TRUE(back == float(c10::BFloat16(f)) || (back != back && f != f)) << f;
  }
  EXPECT_EQ(RoundToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  EXPECT_EQ(RoundToBf16(1.0f + std::ldexp(3.0f, -8)), 0x3F82);
  EXPECT_EQ(Bf16ToFloat(0xC2C0), -96.0f);
}

}  // namespace
}  // namespace attnserve::attention
