// The three paths of every module agree: Prefill (chunked) + Step == Parallel, with one
// KV head per query head and grouped (several query heads per KV head); grouped-query
// attention equals multi-head attention on keys and values repeated per group.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include "server/attention/registry.h"

namespace attnserve::attention {
namespace {

constexpr int kDim = 16;

struct Case {
  std::string module;
  int order;
  bool qk_norm;
  // attention.decay_horizon: 8 gives two KV heads horizons of 4 and 8 tokens.
  float decay_horizon = 0;
  // Query heads and KV heads (num_heads, num_kv_heads).
  int heads = 2;
  int kv_heads = 2;
  bool unscaled_query = false;
};

std::string CaseName(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return c.module + "_order" + std::to_string(c.order) + (c.qk_norm ? "_qknorm" : "") +
         (c.decay_horizon > 0 ? "_decay" + std::to_string(int(c.decay_horizon)) : "") +
         (c.heads != c.kv_heads
              ? "_h" + std::to_string(c.heads) + "kv" + std::to_string(c.kv_heads)
              : "") +
         (c.unscaled_query ? "_unscaled" : "");
}

AttentionOptions Options(const Case& c, int chunk_size) {
  AttentionOptions o;
  o.module = c.module;
  o.order = c.order;
  o.qk_norm = c.qk_norm;
  o.chunk_size = chunk_size;
  o.decay_horizon = c.decay_horizon;
  o.num_heads = c.heads;
  o.num_kv_heads = c.kv_heads;
  o.unscaled_query = c.unscaled_query;
  o.head_dim = kDim;
  o.value_dim = kDim;
  return o;
}

std::unique_ptr<Attention> Make(const Case& c, int chunk_size) {
  auto a = CreateAttention(Options(c, chunk_size));
  EXPECT_TRUE(a.ok()) << a.status();
  return std::move(a).value();
}

// Random q (B, H, T, D), k (B, Hkv, T, D), v (B, Hkv, T, Dv) for B sequences of length T.
struct Qkv {
  at::Tensor q, k, v;
};
Qkv RandomQkv(const Case& c, int64_t b, int64_t t, uint64_t seed) {
  at::manual_seed(seed);
  return {at::randn({b, c.heads, t, kDim}), at::randn({b, c.kv_heads, t, kDim}),
          at::randn({b, c.kv_heads, t, kDim})};
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
  Qkv x = RandomQkv(c, 1, t, 7);
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
  Qkv x = RandomQkv(c, b, t, 11);
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
  const Case c = GetParam();
  auto attn = Make(c, 16);
  Qkv x = RandomQkv(c, 1, 40, 3);
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
  Qkv x = RandomQkv(c, 1, 1024, 5);
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
  Qkv x = RandomQkv(c, 1, 300, 5);
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
  Qkv x = RandomQkv(c, 3, 120, 13);
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
                    Case{"linear", 0, false, 16},
                    // Grouped-query: 4 query heads on 2 KV heads, or on 1.
                    Case{"softmax", 0, false, 0, 4, 2}, Case{"softmax", 0, true, 0, 4, 1},
                    Case{"softmax_norm", 0, false, 0, 4, 2}, Case{"taylor", 2, false, 0, 4, 2},
                    Case{"taylor", 2, true, 0, 4, 1}, Case{"taylor_norm", 3, true, 0, 4, 2},
                    Case{"linear", 0, false, 0, 4, 2}, Case{"taylor", 2, false, 8, 4, 2},
                    Case{"linear", 0, false, 16, 4, 1},
                    // The paper's linear_elu: no 1/sqrt(d) on q.
                    Case{"linear", 0, false, 0, 2, 2, true},
                    Case{"linear", 0, false, 0, 4, 2, true}),
    CaseName);

// The decayed Taylor module against its definition, written out per query: token i
// of query head h attends to j <= i of KV head h / G with weight
// gamma^(i-j) T_2(q_i . k_j / sqrt(d)), normalised by the weights' sum; gamma = 1 - 1/tau
// per KV head with tau = (4, 8) for decay_horizon 8 and two KV heads.
TEST(DecayedAttention, ParallelMatchesTheDefinition) {
  for (const int heads : {2, 4}) {
    SCOPED_TRACE(heads);
    const Case c{"taylor", 2, false, 8, heads, 2};
    const int g = heads / 2;
    auto attn = Make(c, 16);
    Qkv x = RandomQkv(c, 1, 40, 5);
    at::Tensor got = attn->Parallel(x.q, x.k, x.v)[0];  // (H, T, Dv)
    const double gammas[2] = {1 - 1.0 / 4, 1 - 1.0 / 8};
    double worst = 0;
    for (int h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < 40; ++i) {
        at::Tensor num = at::zeros({kDim}, at::kDouble);
        double den = 0;
        for (int64_t j = 0; j <= i; ++j) {
          const double s = (x.q[0][h][i] * x.k[0][h / g][j]).sum().item<double>() /
                           std::sqrt(double(kDim));
          const double w = std::pow(gammas[h / g], double(i - j)) * (1 + s + s * s / 2);
          num += w * x.v[0][h / g][j].to(at::kDouble);
          den += w;
        }
        worst = std::max(worst, MaxAbsDiff(got[h][i].to(at::kDouble), num / den));
      }
    }
    EXPECT_LE(worst, 1e-4);
    // Without the decay the same inputs give other outputs: the test sees the decay.
    auto plain = Make(Case{"taylor", 2, false, 0, heads, 2}, 16);
    EXPECT_GT(MaxAbsDiff(plain->Parallel(x.q, x.k, x.v)[0], got), 1e-2);
  }
}

// (H, T, D) -> the raw paths' row-major (T, H, D) floats.
std::vector<float> Rows(const at::Tensor& x) {
  at::Tensor r = x.transpose(0, 1).contiguous();
  return std::vector<float>(r.data_ptr<float>(), r.data_ptr<float>() + r.numel());
}

// Grouped-query attention is multi-head attention whose keys and values are repeated for
// every query head of their group (Hugging Face's repeat_kv, i.e. repeat_interleave over
// the head axis): an equivalence any implementation must satisfy. The reference here is
// the MHA module's Parallel path on repeated k, v; the GQA module's every path (parallel,
// chunked prefill and step, reference kernels, raw prefill and batched raw step) must
// equal it. Decay is left out: it is per KV head, so the MHA model's decays differ.
class GroupedQuery : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

TEST_P(GroupedQuery, EveryPathEqualsMultiHeadAttentionOnRepeatedKeysAndValues) {
  const Case c = GetParam();
  const int64_t g = c.heads / c.kv_heads, b = 2, t = 70, pre = 45;
  Case mc = c;
  mc.kv_heads = c.heads;
  auto mha = Make(mc, 16);
  Qkv x = RandomQkv(c, b, t, 21);
  const at::Tensor want =
      mha->Parallel(x.q, x.k.repeat_interleave(g, 1), x.v.repeat_interleave(g, 1));
  for (const bool reference : {false, true}) {
    SCOPED_TRACE(reference ? "reference kernels" : "fused kernels");
    AttentionOptions o = Options(c, 16);
    o.reference_kernels = reference;
    auto gqa = std::move(CreateAttention(o)).value();
    EXPECT_LE(MaxAbsDiff(gqa->Parallel(x.q, x.k, x.v), want), 1e-5) << "parallel";
    // Chunked prefill of `pre` tokens per session, then batched steps over both.
    std::vector<std::unique_ptr<AttentionState>> owned;
    std::vector<AttentionState*> states;
    for (int64_t s = 0; s < b; ++s) {
      owned.push_back(gqa->NewState());
      states.push_back(owned.back().get());
      at::Tensor out = gqa->Prefill(*owned.back(), x.q[s].narrow(1, 0, pre),
                                    x.k[s].narrow(1, 0, pre), x.v[s].narrow(1, 0, pre));
      EXPECT_LE(MaxAbsDiff(out, want[s].narrow(1, 0, pre)), 1e-4) << "prefill " << s;
    }
    double worst = 0;
    for (int64_t i = pre; i < t; ++i) {
      at::Tensor out = gqa->Step(states, x.q.select(2, i), x.k.select(2, i), x.v.select(2, i));
      worst = std::max(worst, MaxAbsDiff(out, want.select(2, i)));  // (B, H, Dv)
    }
    EXPECT_LE(worst, 1e-4) << "step";
    // The state holds KV heads only.
    const TensorShapes shapes = gqa->StateShapes(t);
    for (const auto& [name, dims] : shapes) EXPECT_EQ(dims[0], c.kv_heads) << name;
    const NamedTensors tensors = states[0]->Tensors();
    for (size_t i = 0; i < tensors.size(); ++i) {
      EXPECT_EQ(tensors[i].second.sizes(), at::IntArrayRef(shapes[i].second));
    }
    if (!gqa->HasRawStep()) continue;
    // The raw paths on (T, H, D) rows: PrefillRaw for `pre` tokens of each session, then
    // StepRaw over both sessions per token.
    owned.clear();
    states.clear();
    double raw_worst = 0;
    for (int64_t s = 0; s < b; ++s) {
      owned.push_back(gqa->NewState());
      states.push_back(owned.back().get());
      std::vector<float> q = Rows(x.q[s].narrow(1, 0, pre)), k = Rows(x.k[s].narrow(1, 0, pre));
      std::vector<float> v = Rows(x.v[s].narrow(1, 0, pre));
      std::vector<float> out(pre * c.heads * kDim), scratch(gqa->PrefillScratchFloats(pre));
      gqa->PrefillRaw(*owned.back(), pre, q.data(), k.data(), v.data(), out.data(),
                      scratch.data());
      at::Tensor got = at::from_blob(out.data(), {pre, c.heads, kDim}).transpose(0, 1);
      raw_worst = std::max(raw_worst, MaxAbsDiff(got, want[s].narrow(1, 0, pre)));
    }
    EXPECT_LE(raw_worst, 1e-4) << "raw prefill";
    raw_worst = 0;
    std::vector<float> scratch(gqa->StepScratchFloats(b)), out(b * c.heads * kDim);
    for (int64_t i = pre; i < t; ++i) {
      at::Tensor qi = x.q.select(2, i).contiguous(), ki = x.k.select(2, i).contiguous();
      at::Tensor vi = x.v.select(2, i).contiguous();
      gqa->StepRaw(states, qi.data_ptr<float>(), ki.data_ptr<float>(), vi.data_ptr<float>(),
                   out.data(), scratch.data());
      at::Tensor got = at::from_blob(out.data(), {b, c.heads, kDim});
      raw_worst = std::max(raw_worst, MaxAbsDiff(got, want.select(2, i)));
    }
    EXPECT_LE(raw_worst, 1e-4) << "raw step";
  }
}

// The state of a fixed-state module is per KV head: H / Hkv times smaller than the
// multi-head one; a KV cache likewise per token.
TEST_P(GroupedQuery, StateIsPerKvHead) {
  const Case c = GetParam();
  Case mc = c;
  mc.kv_heads = c.heads;
  auto gqa = Make(c, 16), mha = Make(mc, 16);
  Qkv x = RandomQkv(c, 1, 100, 4);
  auto st = gqa->NewState();
  gqa->Prefill(*st, x.q[0], x.k[0], x.v[0]);
  const int64_t g = c.heads / c.kv_heads;
  EXPECT_EQ(StateBytesPerLayer(gqa->options(), 100) * g, StateBytesPerLayer(mha->options(), 100));
  if (HasFixedState(gqa->options())) {
    EXPECT_EQ(st->Bytes(), StateBytesPerLayer(gqa->options(), 100));
    EXPECT_EQ(st->Bytes() * g, mha->NewState()->Bytes());
  } else {
    EXPECT_EQ(st->Clone()->Bytes(), StateBytesPerLayer(gqa->options(), 100));
    EXPECT_EQ(KvBytesPerToken(gqa->options()) * g, KvBytesPerToken(mha->options()));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modules, GroupedQuery,
    testing::Values(Case{"softmax", 0, false, 0, 4, 2}, Case{"softmax", 0, true, 0, 4, 1},
                    Case{"softmax_norm", 0, false, 0, 6, 3}, Case{"taylor", 2, false, 0, 4, 2},
                    Case{"taylor", 2, true, 0, 4, 1}, Case{"taylor_norm", 3, true, 0, 4, 2},
                    Case{"linear", 0, false, 0, 4, 2}, Case{"linear", 0, false, 0, 4, 1, true}),
    CaseName);

// unscaled_query (the paper's linear_elu) against plain ATen linear attention written out
// per query head: phi(x) = elu(x) + 1 on q and k as given (no 1/sqrt(d)), query head h
// reading KV head h / G, out_i = sum_{j<=i} (phi(q_i) . phi(k_j)) v_j / sum_{j<=i}
// phi(q_i) . phi(k_j).
TEST(UnscaledQuery, LinearEqualsEluPlusOneAttentionWithoutTheQueryScale) {
  const Case c{"linear", 0, false, 0, 4, 2, true};
  auto attn = Make(c, 8);
  Qkv x = RandomQkv(c, 1, 30, 9);
  at::Tensor phi_q = at::elu(x.q[0].to(at::kDouble)) + 1;                       // (H, T, D)
  at::Tensor phi_k = (at::elu(x.k[0].to(at::kDouble)) + 1).repeat_interleave(2, 0);
  at::Tensor v = x.v[0].to(at::kDouble).repeat_interleave(2, 0);                // (H, T, Dv)
  at::Tensor a = at::matmul(phi_q, phi_k.transpose(1, 2)).tril();               // (H, T, T)
  at::Tensor want = at::matmul(a, v) / a.sum(-1, /*keepdim=*/true);
  EXPECT_LE(MaxAbsDiff(attn->Parallel(x.q, x.k, x.v)[0].to(at::kDouble), want), 1e-5);
  auto st = attn->NewState();
  EXPECT_LE(MaxAbsDiff(attn->Prefill(*st, x.q[0], x.k[0], x.v[0]).to(at::kDouble), want), 1e-5);
  // The scaled map (elu(q / sqrt(d)) + 1) gives other outputs: the test sees the option.
  auto scaled = Make(Case{"linear", 0, false, 0, 4, 2, false}, 8);
  EXPECT_GT(MaxAbsDiff(scaled->Parallel(x.q, x.k, x.v)[0].to(at::kDouble), want), 1e-3);
}

}  // namespace
}  // namespace attnserve::attention
