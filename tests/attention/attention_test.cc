// The three paths of every module agree: Prefill (chunked) + Step == Parallel.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include "server/attention/registry.h"

namespace attnserve::attention {
namespace {

constexpr int kHeads = 2;
constexpr int kDim = 16;

struct Case {
  std::string module;
  int order;
  bool qk_norm;
  // attention.decay_horizon: 8 gives the two heads horizons of 4 and 8 tokens.
  float decay_horizon = 0;
};

std::string CaseName(const testing::TestParamInfo<Case>& info) {
  return info.param.module + "_order" + std::to_string(info.param.order) +
         (info.param.qk_norm ? "_qknorm" : "") +
         (info.param.decay_horizon > 0
              ? "_decay" + std::to_string(int(info.param.decay_horizon))
              : "");
}

std::unique_ptr<Attention> Make(const Case& c, int chunk_size) {
  AttentionOptions o;
  o.module = c.module;
  o.order = c.order;
  o.qk_norm = c.qk_norm;
  o.chunk_size = chunk_size;
  o.decay_horizon = c.decay_horizon;
  o.num_heads = kHeads;
  o.head_dim = kDim;
  o.value_dim = kDim;
  auto a = CreateAttention(o);
  EXPECT_TRUE(a.ok()) << a.status();
  return std::move(a).value();
}

// Random q, k, v for B sequences of length T: (B, H, T, D).
struct Qkv {
  at::Tensor q, k, v;
};
Qkv RandomQkv(int64_t b, int64_t t, uint64_t seed) {
  at::manual_seed(seed);
  return {at::randn({b, kHeads, t, kDim}), at::randn({b, kHeads, t, kDim}),
          at::randn({b, kHeads, t, kDim})};
}

double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

class AttentionPaths : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

// Prefill `prefill_len` tokens with `chunk` per chunk, then step one token at a time to
// T; the concatenated outputs equal the parallel path over all T tokens.
void CheckPrefillThenStep(const Case& c, int chunk, int64_t prefill_len, int64_t t) {
  auto attn = Make(c, chunk);
  Qkv x = RandomQkv(1, t, 7);
  at::Tensor reference = attn->Parallel(x.q, x.k, x.v)[0];  // (H, T, Dv)
  auto state = attn->NewState();
  at::Tensor pre = attn->Prefill(*state, x.q[0].narrow(1, 0, prefill_len),
                                 x.k[0].narrow(1, 0, prefill_len),
                                 x.v[0].narrow(1, 0, prefill_len));
  ASSERT_EQ(state->Position(), prefill_len);
  EXPECT_LE(MaxAbsDiff(pre, reference.narrow(1, 0, prefill_len)), 1e-4)
      << "prefill, chunk " << chunk;
  AttentionState* states[] = {state.get()};
  double worst = 0;
  for (int64_t i = prefill_len; i < t; ++i) {
    // (1, H, D) slices for token i.
    at::Tensor out = attn->Step(states, x.q.select(2, i), x.k.select(2, i),
                                x.v.select(2, i));
    worst = std::max(worst, MaxAbsDiff(out[0], reference.select(1, i)));
  }
  EXPECT_LE(worst, 1e-4) << "step after prefill of " << prefill_len << ", chunk " << chunk;
  EXPECT_EQ(state->Position(), t);
}

TEST_P(AttentionPaths, PrefillThenStepMatchesParallelWithDividingChunks) {
  CheckPrefillThenStep(GetParam(), /*chunk=*/64, /*prefill_len=*/512, /*t=*/576);
}

TEST_P(AttentionPaths, PrefillThenStepMatchesParallelWithRaggedChunks) {
  CheckPrefillThenStep(GetParam(), /*chunk=*/48, /*prefill_len=*/300, /*t=*/560);
}

TEST_P(AttentionPaths, BatchedStepOverSessionsAtDifferentPositions) {
  const Case c = GetParam();
  auto attn = Make(c, 32);
  const std::vector<int64_t> prefill = {1, 100, 257, 480};
  const int64_t steps = 40;
  const int64_t t = 480 + steps;
  const int64_t b = int64_t(prefill.size());
  Qkv x = RandomQkv(b, t, 11);
  at::Tensor reference = attn->Parallel(x.q, x.k, x.v);  // (B, H, T, Dv)

  std::vector<std::unique_ptr<AttentionState>> owned;
  std::vector<AttentionState*> states;
  for (int64_t s = 0; s < b; ++s) {
    owned.push_back(attn->NewState());
    states.push_back(owned.back().get());
    attn->Prefill(*owned.back(), x.q[s].narrow(1, 0, prefill[s]),
                  x.k[s].narrow(1, 0, prefill[s]), x.v[s].narrow(1, 0, prefill[s]));
  }
  double worst = 0;
  for (int64_t i = 0; i < steps; ++i) {
    // Session s decodes its token at position prefill[s] + i: gather (B, H, D).
    std::vector<at::Tensor> q, k, v;
    for (int64_t s = 0; s < b; ++s) {
      q.push_back(x.q[s].select(1, prefill[s] + i));
      k.push_back(x.k[s].select(1, prefill[s] + i));
      v.push_back(x.v[s].select(1, prefill[s] + i));
    }
    at::Tensor out = attn->Step(states, at::stack(q), at::stack(k), at::stack(v));
    for (int64_t s = 0; s < b; ++s) {
      worst = std::max(worst, MaxAbsDiff(out[s], reference[s].select(1, prefill[s] + i)));
    }
  }
  EXPECT_LE(worst, 1e-4);
  for (int64_t s = 0; s < b; ++s) EXPECT_EQ(states[s]->Position(), prefill[s] + steps);
}

TEST_P(AttentionPaths, CloneIsIndependent) {
  auto attn = Make(GetParam(), 16);
  Qkv x = RandomQkv(1, 40, 3);
  auto state = attn->NewState();
  attn->Prefill(*state, x.q[0].narrow(1, 0, 20), x.k[0].narrow(1, 0, 20),
                x.v[0].narrow(1, 0, 20));
  auto copy = state->Clone();
  AttentionState* a[] = {state.get()};
  AttentionState* b[] = {copy.get()};
  at::Tensor first = attn->Step(a, x.q.select(2, 20), x.k.select(2, 20), x.v.select(2, 20));
  // A different token on the original must not disturb the copy.
  attn->Step(a, x.q.select(2, 30), x.k.select(2, 30), x.v.select(2, 30));
  at::Tensor again = attn->Step(b, x.q.select(2, 20), x.k.select(2, 20), x.v.select(2, 20));
  EXPECT_LE(MaxAbsDiff(first, again), 1e-6);
  EXPECT_EQ(state->Position(), 22);
  EXPECT_EQ(copy->Position(), 21);
}

TEST_P(AttentionPaths, StateBytesFixedOrGrowingAsReported) {
  const Case c = GetParam();
  auto attn = Make(c, 64);
  Qkv x = RandomQkv(1, 1024, 5);
  auto state = attn->NewState();
  attn->Prefill(*state, x.q[0].narrow(1, 0, 128), x.k[0].narrow(1, 0, 128),
                x.v[0].narrow(1, 0, 128));
  const int64_t at128 = state->Bytes();
  attn->Prefill(*state, x.q[0].narrow(1, 128, 896), x.k[0].narrow(1, 128, 896),
                x.v[0].narrow(1, 128, 896));
  if (HasFixedState(attn->options())) {
    EXPECT_EQ(state->Bytes(), at128);
    EXPECT_EQ(state->Bytes(), StateBytesPerLayer(attn->options(), 1024));
  } else {
    EXPECT_GE(state->Bytes(), StateBytesPerLayer(attn->options(), 1024));
    EXPECT_LE(state->Bytes(), 2 * StateBytesPerLayer(attn->options(), 1024));
    EXPECT_GT(state->Bytes(), 4 * at128);
  }
}

// What the memory budget charges before a step is what the state holds after it.
TEST_P(AttentionPaths, BytesAfterPredictsTheBytesAnAppendLeaves) {
  const Case c = GetParam();
  auto attn = Make(c, 64);
  Qkv x = RandomQkv(1, 300, 5);
  auto state = attn->NewState();
  int64_t at = 0;
  for (const int64_t n : {10, 6, 1, 20, 60, 3, 200}) {
    const int64_t predicted = state->BytesAfter(n);
    attn->Prefill(*state, x.q[0].narrow(1, at, n), x.k[0].narrow(1, at, n),
                  x.v[0].narrow(1, at, n));
    at += n;
    EXPECT_EQ(state->Bytes(), predicted) << "after " << at << " tokens";
  }
  // A copy holds only what it uses.
  if (!HasFixedState(attn->options())) {
    EXPECT_EQ(state->Clone()->Bytes(), StateBytesPerLayer(attn->options(), at));
  }
}

TEST_P(AttentionPaths, FusedStepMatchesReferenceStep) {
  Case c = GetParam();
  auto fused = Make(c, 32);
  AttentionOptions o = fused->options();
  o.reference_kernels = true;
  auto reference = std::move(CreateAttention(o)).value();
  Qkv x = RandomQkv(3, 120, 13);
  std::vector<std::unique_ptr<AttentionState>> fs, rs;
  std::vector<AttentionState*> fp, rp;
  for (int s = 0; s < 3; ++s) {
    fs.push_back(fused->NewState());
    rs.push_back(reference->NewState());
    fp.push_back(fs.back().get());
    rp.push_back(rs.back().get());
    const int64_t n = 20 * (s + 1);
    fused->Prefill(*fs.back(), x.q[s].narrow(1, 0, n), x.k[s].narrow(1, 0, n),
                   x.v[s].narrow(1, 0, n));
    reference->Prefill(*rs.back(), x.q[s].narrow(1, 0, n), x.k[s].narrow(1, 0, n),
                       x.v[s].narrow(1, 0, n));
  }
  double worst = 0;
  for (int64_t i = 60; i < 120; ++i) {
    at::Tensor a = fused->Step(fp, x.q.select(2, i), x.k.select(2, i), x.v.select(2, i));
    at::Tensor b = reference->Step(rp, x.q.select(2, i), x.k.select(2, i), x.v.select(2, i));
    worst = std::max(worst, MaxAbsDiff(a, b));
  }
  EXPECT_LE(worst, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Modules, AttentionPaths,
    testing::Values(Case{"softmax", 0, false}, Case{"softmax", 0, true},
                    Case{"softmax_norm", 0, false}, Case{"taylor", 2, false},
                    Case{"taylor", 4, false}, Case{"taylor", 2, true},
                    Case{"taylor_norm", 4, false}, Case{"taylor_norm", 3, true},
                    Case{"linear", 0, false}, Case{"taylor", 2, false, 8},
                    Case{"taylor", 2, true, 64}, Case{"taylor_norm", 4, false, 8},
                    Case{"linear", 0, false, 16}),
    CaseName);

// The decayed Taylor module against its definition, written out per query: token i
// attends to j <= i with weight gamma_h^(i-j) T_2(q_i . k_j / sqrt(d)), normalised by
// the weights' sum; gamma_h = 1 - 1/tau_h with tau = (4, 8) for decay_horizon 8.
TEST(DecayedAttention, ParallelMatchesTheDefinition) {
  const Case c{"taylor", 2, false, 8};
  auto attn = Make(c, 16);
  Qkv x = RandomQkv(1, 40, 5);
  at::Tensor got = attn->Parallel(x.q, x.k, x.v)[0];  // (H, T, Dv)
  const double gammas[kHeads] = {1 - 1.0 / 4, 1 - 1.0 / 8};
  double worst = 0;
  for (int h = 0; h < kHeads; ++h) {
    for (int64_t i = 0; i < 40; ++i) {
      at::Tensor num = at::zeros({kDim}, at::kDouble);
      double den = 0;
      for (int64_t j = 0; j <= i; ++j) {
        const double s =
            (x.q[0][h][i] * x.k[0][h][j]).sum().item<double>() / std::sqrt(double(kDim));
        const double w = std::pow(gammas[h], double(i - j)) * (1 + s + s * s / 2);
        num += w * x.v[0][h][j].to(at::kDouble);
        den += w;
      }
      worst = std::max(worst, MaxAbsDiff(got[h][i].to(at::kDouble), num / den));
    }
  }
  EXPECT_LE(worst, 1e-4);
  // Without the decay the same inputs give other outputs: the test sees the decay.
  auto plain = Make(Case{"taylor", 2, false}, 16);
  EXPECT_GT(MaxAbsDiff(plain->Parallel(x.q, x.k, x.v)[0], got), 1e-2);
}

}  // namespace
}  // namespace attnserve::attention
