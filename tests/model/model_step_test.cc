// The fused decode step (server/model/model_step.cc) against the LibTorch step, its
// reference: the same weights served twice, once with attention.reference_kernels (Run
// with the modules' plain ATen Step) and once fused; sessions at different positions,
// B = 1 and several, several steps in a row; logits and the states left behind agree.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "server/model/model.h"

namespace attnserve::model {
namespace {

struct Variant {
  std::string module;
  int order;
  bool qk_norm;
  // attention.decay_horizon: 16 gives the three heads horizons of 4, 8 and 16 tokens,
  // short next to the prompts, so a wrong power of gamma shows. (Per KV head.)
  float decay_horizon = 0;
  // Query and KV heads of 16: 6 on 2 is grouped-query attention with a query width (96)
  // other than the model's (48).
  int heads = 3;
  int kv_heads = 3;
  bool unscaled_query = false;
};

std::string VariantName(const testing::TestParamInfo<Variant>& info) {
  const Variant& v = info.param;
  return v.module + std::to_string(v.order) + (v.qk_norm ? "_qknorm" : "") +
         (v.decay_horizon > 0 ? "_decay" + std::to_string(int(v.decay_horizon)) : "") +
         (v.heads != 3 || v.kv_heads != 3
              ? "_h" + std::to_string(v.heads) + "kv" + std::to_string(v.kv_heads)
              : "") +
         (v.unscaled_query ? "_unscaled" : "");
}

ModelConfig StepConfig(const Variant& v, bool reference) {
  ModelConfig c;
  c.dim = 48;
  c.num_layers = 2;
  c.mlp_hidden = 80;
  c.attention.module = v.module;
  c.attention.order = v.order;
  c.attention.qk_norm = v.qk_norm;
  c.attention.decay_horizon = v.decay_horizon;
  c.attention.num_heads = v.heads;
  c.attention.num_kv_heads = v.kv_heads;
  c.attention.unscaled_query = v.unscaled_query;
  c.attention.head_dim = 16;
  c.attention.value_dim = 16;
  c.attention.chunk_size = 16;
  c.attention.reference_kernels = reference;
  return c;
}

// Weights scaled up (as in model_test.cc) so logits vary by O(1) and a mismatch shows.
std::unique_ptr<Model> MakeScaled(const ModelConfig& c) {
  auto m = Model::Create(c, 7);
  EXPECT_TRUE(m.ok()) << m.status();
  for (auto& [name, t] : (*m)->NamedParameters()) {
    if (name.find("norm") == std::string::npos) t.mul_(10);
  }
  return std::move(m).value();
}

std::vector<int32_t> Text(int n, int offset) {
  const std::string s = "And God said, Let there be light: and there was light. ";
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((unsigned char)s[(i + offset) % s.size()]);
  return ids;
}

// The fused path's state `f` against the reference's `r`: same position, and every tensor
// of every layer within 1e-5 of r's largest magnitude (plus one).
void ExpectSameState(const DecodeState& f, const DecodeState& r, const std::string& what) {
  ASSERT_EQ(f.position(), r.position()) << what;
  for (int l = 0; l < f.num_layers(); ++l) {
    const auto tf = f.layer(l).Tensors(), tr = r.layer(l).Tensors();
    ASSERT_EQ(tf.size(), tr.size()) << what << " layer " << l;
    for (size_t i = 0; i < tf.size(); ++i) {
      const double scale = 1 + tr[i].second.abs().max().item<double>();
      EXPECT_LE((tf[i].second - tr[i].second).abs().max().item<double>(), 1e-5 * scale)
          << what << " layer " << l << " tensor " << tf[i].first;
    }
  }
}

class FusedStep : public testing::TestWithParam<Variant> {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

TEST_P(FusedStep, MatchesLibTorchStep) {
  auto fused = MakeScaled(StepConfig(GetParam(), /*reference=*/false));
  auto reference = MakeScaled(StepConfig(GetParam(), /*reference=*/true));
  ASSERT_TRUE(fused->UsesFusedStep());
  ASSERT_FALSE(reference->UsesFusedStep());
  for (int batch : {1, 4}) {
    // Sessions start at positions 0, 10, 27, 44 (0: a fresh state, never prefilled).
    std::vector<std::unique_ptr<DecodeState>> own_f, own_r;
    std::vector<DecodeState*> states_f, states_r;
    for (int s = 0; s < batch; ++s) {
      own_f.push_back(fused->NewState());
      own_r.push_back(reference->NewState());
      const int prefill = s == 0 ? 0 : 9 + 16 * (s - 1) + s;
      if (prefill > 0) {
        ASSERT_TRUE(fused->Prefill(*own_f.back(), Text(prefill, s)).ok());
        ASSERT_TRUE(reference->Prefill(*own_r.back(), Text(prefill, s)).ok());
      }
      states_f.push_back(own_f.back().get());
      states_r.push_back(own_r.back().get());
    }
    double worst = 0, spread = 0;
    for (int step = 0; step < 5; ++step) {
      const std::vector<int32_t> next = Text(batch, 3 * step + 1);
      auto lf = fused->Step(states_f, next);
      auto lr = reference->Step(states_r, next);
      ASSERT_TRUE(lf.ok()) << lf.status();
      ASSERT_TRUE(lr.ok()) << lr.status();
      ASSERT_EQ(lf->sizes(), lr->sizes());
      worst = std::max(worst, (*lf - *lr).abs().max().item<double>());
      spread = std::max(spread, lr->std().item<double>());
    }
    EXPECT_GT(spread, 0.1) << "logits too flat for the comparison to mean anything";
    EXPECT_LE(worst, 1e-4) << "batch " << batch;
    for (int s = 0; s < batch; ++s) {
      ExpectSameState(*states_f[s], *states_r[s], "session " + std::to_string(s));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modules, FusedStep,
    testing::Values(Variant{"taylor", 2, false}, Variant{"taylor", 4, false},
                    Variant{"taylor", 2, true}, Variant{"taylor_norm", 2, false},
                    Variant{"taylor_norm", 4, true}, Variant{"linear", 2, false},
                    Variant{"softmax", 2, false}, Variant{"softmax", 2, true},
                    Variant{"softmax_norm", 2, false}, Variant{"taylor", 2, false, 16},
                    Variant{"taylor_norm", 2, true, 16}, Variant{"linear", 2, false, 16},
                    Variant{"taylor", 2, false, 0, 6, 2}, Variant{"taylor", 2, true, 0, 4, 1},
                    Variant{"taylor_norm", 2, false, 0, 6, 3}, Variant{"linear", 2, false, 0, 6, 2},
                    Variant{"linear", 2, false, 0, 6, 2, true}, Variant{"softmax", 2, false, 0, 6, 2},
                    Variant{"softmax", 2, true, 0, 4, 1}, Variant{"softmax_norm", 2, false, 0, 6, 3},
                    Variant{"taylor", 2, false, 16, 6, 2}),
    VariantName);

// The fused prefill (PrefillRaw of each module, prompts in blocks of 512) against the
// LibTorch prefill: prompts of 1 token, of several chunks, and of 700 tokens (two blocks,
// a partial last chunk), each from a fresh state and again after an earlier prefill;
// every logit row and the states left behind agree, and a step after them too.
class FusedPrefill : public testing::TestWithParam<Variant> {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

TEST_P(FusedPrefill, MatchesLibTorchPrefill) {
  auto fused = MakeScaled(StepConfig(GetParam(), /*reference=*/false));
  auto reference = MakeScaled(StepConfig(GetParam(), /*reference=*/true));
  for (int first : {1, 45, 700}) {
    auto sf = fused->NewState(), sr = reference->NewState();
    double worst = 0, spread = 0;
    for (int round = 0; round < 2; ++round) {  // fresh, then on top of the first prompt
      const std::vector<int32_t> prompt = Text(round == 0 ? first : 23, 5 * round + first);
      auto lf = fused->Prefill(*sf, prompt);
      auto lr = reference->Prefill(*sr, prompt);
      ASSERT_TRUE(lf.ok()) << lf.status();
      ASSERT_TRUE(lr.ok()) << lr.status();
      ASSERT_EQ(lf->sizes(), lr->sizes());
      worst = std::max(worst, (*lf - *lr).abs().max().item<double>());
      spread = std::max(spread, lr->std().item<double>());
    }
    std::vector<DecodeState*> one_f = {sf.get()}, one_r = {sr.get()};
    auto nf = fused->Step(one_f, Text(1, 9)), nr = reference->Step(one_r, Text(1, 9));
    ASSERT_TRUE(nf.ok() && nr.ok());
    worst = std::max(worst, (*nf - *nr).abs().max().item<double>());
    if (first > 1) {
      EXPECT_GT(spread, 0.1) << "logits too flat to compare";
    }
    EXPECT_LE(worst, 1e-4) << "prompt of " << first;
    ExpectSameState(*sf, *sr, "prompt " + std::to_string(first));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modules, FusedPrefill,
    testing::Values(Variant{"taylor", 2, false}, Variant{"taylor", 4, false},
                    Variant{"taylor", 2, true}, Variant{"taylor_norm", 2, false},
                    Variant{"linear", 2, false}, Variant{"softmax", 2, false},
                    Variant{"softmax", 2, true}, Variant{"softmax_norm", 2, false},
                    Variant{"taylor", 2, false, 16}, Variant{"taylor_norm", 2, false, 16},
                    Variant{"linear", 2, false, 16}, Variant{"taylor", 2, false, 0, 6, 2},
                    Variant{"taylor_norm", 2, true, 0, 4, 1},
                    Variant{"linear", 2, false, 0, 6, 2, true}, Variant{"softmax", 2, false, 0, 6, 2},
                    Variant{"softmax_norm", 2, false, 0, 4, 1}, Variant{"linear", 2, false, 16, 6, 2}),
    VariantName);

// One engine step over mixed segments (Model::Batch): decoding sessions (one token) and
// prefilling ones (chunks of several tokens) in the same fused pass, against the
// reference (Step for the one-token segments, Prefill for each other), three steps in a
// row with the roles changing; the last-token logits and the states agree.
class FusedBatch : public testing::TestWithParam<Variant> {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

TEST_P(FusedBatch, MatchesStepAndPrefill) {
  auto fused = MakeScaled(StepConfig(GetParam(), /*reference=*/false));
  auto reference = MakeScaled(StepConfig(GetParam(), /*reference=*/true));
  const std::vector<int> start = {0, 12, 30, 5, 0};
  std::vector<std::unique_ptr<DecodeState>> own_f, own_r;
  for (size_t s = 0; s < start.size(); ++s) {
    own_f.push_back(fused->NewState());
    own_r.push_back(reference->NewState());
    if (start[s] > 0) {
      ASSERT_TRUE(fused->Prefill(*own_f.back(), Text(start[s], int(s))).ok());
      ASSERT_TRUE(reference->Prefill(*own_r.back(), Text(start[s], int(s))).ok());
    }
  }
  // Tokens per session per step (0: the session sits the step out).
  const std::vector<std::vector<int>> plan = {{7, 1, 1, 40, 0}, {1, 1, 23, 1, 3}, {1, 0, 1, 1, 1}};
  double worst = 0, spread = 0;
  for (size_t step = 0; step < plan.size(); ++step) {
    std::vector<std::vector<int32_t>> text;
    std::vector<Model::Segment> seg_f, seg_r;
    for (size_t s = 0; s < start.size(); ++s) {
      if (plan[step][s] == 0) continue;
      text.push_back(Text(plan[step][s], int(3 * step + s)));
    }
    for (size_t s = 0, n = 0; s < start.size(); ++s) {
      if (plan[step][s] == 0) continue;
      seg_f.push_back({own_f[s].get(), text[n]});
      seg_r.push_back({own_r[s].get(), text[n]});
      ++n;
    }
    auto lf = fused->Batch(seg_f);
    auto lr = reference->Batch(seg_r);
    ASSERT_TRUE(lf.ok()) << lf.status();
    ASSERT_TRUE(lr.ok()) << lr.status();
    ASSERT_EQ(lf->sizes(), lr->sizes());
    ASSERT_EQ(lf->size(0), int64_t(seg_f.size()));
    worst = std::max(worst, (*lf - *lr).abs().max().item<double>());
    spread = std::max(spread, lr->std().item<double>());
  }
  EXPECT_GT(spread, 0.1) << "logits too flat to compare";
  EXPECT_LE(worst, 1e-4);
  for (size_t s = 0; s < start.size(); ++s) {
    ExpectSameState(*own_f[s], *own_r[s], "session " + std::to_string(s));
  }
}

TEST(FusedBatchChecks, EverySegmentIsCheckedBeforeAnyStateMoves) {
  auto m = MakeScaled(StepConfig({"taylor", 2, false}, false));
  auto a = m->NewState(), b = m->NewState();
  const std::vector<int32_t> ok = Text(4, 0), bad = {65, 900};
  std::vector<Model::Segment> segs = {{a.get(), ok}, {b.get(), bad}};
  EXPECT_EQ(m->Batch(segs).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<Model::Segment> twice = {{a.get(), ok}, {a.get(), ok}};
  EXPECT_EQ(m->Batch(twice).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<Model::Segment> empty = {{a.get(), {}}};
  EXPECT_EQ(m->Batch(empty).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a->position(), 0);
  EXPECT_EQ(b->position(), 0);
}

// A call that fails after a layer changed a state never leaves that state at its old
// position, so a caller can tell it from an untouched one (Model::Batch). Here layer 1's
// wq is made column-major (same values), which the fused path refuses once layer 0 has
// taken every segment's rows.
TEST(FusedBatchChecks, AStateALayerChangedIsNotLeftAtItsOldPosition) {
  auto m = MakeScaled(StepConfig({"taylor", 2, false}, false));
  ASSERT_TRUE(m->UsesFusedStep());
  auto a = m->NewState(), b = m->NewState();
  const std::vector<int32_t> prompt = Text(4, 0), token = {65};
  ASSERT_TRUE(m->Prefill(*a, prompt).ok());
  for (auto& [name, t] : m->NamedParameters()) {
    if (name == "layers.1.wq") t.set_(t.t().contiguous().t());
  }
  std::vector<Model::Segment> segs = {{a.get(), token}, {b.get(), prompt}};
  EXPECT_EQ(m->Batch(segs).status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(a->position(), 4) << "decode segment";
  EXPECT_NE(b->position(), 0) << "prompt segment";
}

INSTANTIATE_TEST_SUITE_P(
    Modules, FusedBatch,
    testing::Values(Variant{"taylor", 2, false}, Variant{"taylor_norm", 2, false},
                    Variant{"linear", 2, false}, Variant{"softmax", 2, false},
                    Variant{"softmax_norm", 2, true}, Variant{"taylor", 2, false, 16},
                    Variant{"taylor", 2, false, 0, 6, 2}, Variant{"linear", 2, false, 0, 4, 1, true},
                    Variant{"softmax", 2, false, 0, 6, 2}, Variant{"softmax_norm", 2, true, 0, 6, 3},
                    Variant{"taylor_norm", 2, false, 16, 6, 2}),
    VariantName);

TEST(FusedStepPath, TheEnvironmentForcesTheReference) {
  ASSERT_EQ(setenv("ATTNSERVE_REFERENCE_STEP", "1", 1), 0);
  auto forced = MakeScaled(StepConfig({"taylor", 2, false}, false));
  ASSERT_EQ(unsetenv("ATTNSERVE_REFERENCE_STEP"), 0);
  EXPECT_FALSE(forced->UsesFusedStep());
  auto served = forced->ServeAs("taylor", 2, int64_t{64} << 20);
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_TRUE((*served)->UsesFusedStep());
}

// bf16 weights (Model::UseBf16Weights) against fp32, the same prompts and tokens through
// both: steps of 1 and 8 sessions (the bf16 kernel; the short prompts too) stay within
// 1% of the logits' range and differ from fp32 at all (the step reads the bf16 copies);
// the fingerprint says bf16, and ServeAs variants share the copies.
TEST(Bf16Weights, StepLogitsStayWithinOnePercentOfFp32) {
  at::set_num_threads(1);
  // Multi-head, and grouped-query with a query width other than the model's.
  for (const Variant& v : {Variant{"taylor", 2, false}, Variant{"taylor", 2, false, 0, 6, 2}}) {
  SCOPED_TRACE(v.kv_heads);
  const ModelConfig c = StepConfig(v, /*reference=*/false);
  auto fp32 = MakeScaled(c);
  auto bf16 = MakeScaled(c);
  const Sha256Digest before = bf16->Fingerprint();
  auto variant_before = bf16->ServeAs("taylor", 0, c.attention.max_state_bytes_per_layer);
  ASSERT_TRUE(variant_before.ok());
  EXPECT_FALSE((*variant_before)->UsesBf16Weights());
  bf16 = MakeScaled(c);  // fresh: the fingerprint is computed once
  bf16->UseBf16Weights();
  ASSERT_TRUE(bf16->UsesBf16Weights());
  EXPECT_NE(bf16->Fingerprint(), before);
  auto variant = bf16->ServeAs("taylor", 0, c.attention.max_state_bytes_per_layer);
  ASSERT_TRUE(variant.ok());
  EXPECT_TRUE((*variant)->UsesBf16Weights());
  for (int batch : {1, 8}) {
    std::vector<std::unique_ptr<DecodeState>> own32, own16;
    std::vector<DecodeState*> s32, s16;
    for (int s = 0; s < batch; ++s) {
      own32.push_back(fp32->NewState());
      own16.push_back(bf16->NewState());
      ASSERT_TRUE(fp32->Prefill(*own32.back(), Text(5 + 3 * s, s)).ok());
      ASSERT_TRUE(bf16->Prefill(*own16.back(), Text(5 + 3 * s, s)).ok());
      s32.push_back(own32.back().get());
      s16.push_back(own16.back().get());
    }
    double worst = 0, range = 0;
    for (int step = 0; step < 4; ++step) {
      const std::vector<int32_t> next = Text(batch, 2 * step + 1);
      auto l32 = fp32->Step(s32, next);
      auto l16 = bf16->Step(s16, next);
      ASSERT_TRUE(l32.ok() && l16.ok());
      worst = std::max(worst, (*l16 - *l32).abs().max().item<double>());
      range = std::max(range, (l32->max() - l32->min()).item<double>());
    }
    EXPECT_GT(worst, 0) << batch << " sessions: the bf16 copies were not used";
    EXPECT_LE(worst, 0.01 * range) << batch << " sessions, logit range " << range;
  }
  }
}

}  // namespace
}  // namespace attnserve::model
