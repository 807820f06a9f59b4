// Models with recurrent layers (server/DESIGN.md §11, §14): Mamba-2, short-conv and Gated
// DeltaNet mixers, alone and interleaved with grouped-query softmax attention (Qwen3.5's
// gated attention with partial, sectioned RoPE among them), and mixture-of-experts FFNs
// (every routing variant, shared experts gated and not), built in-process with
// Model::Create. The fused paths (model_step.cc: server/mixer's chunked prefill and
// batched step beside the attention modules' raw kernels) against the LibTorch reference
// (Model::Run with the mixers' plain token-by-token kernels, the model created with
// ATTNSERVE_REFERENCE_STEP=1) and against Forward; a prefill's recurrent state against
// the same tokens stepped one at a time; snapshots (Tensors, StateShapes, RestoreState)
// continuing exactly.
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
  std::string name;
  std::vector<std::string> mixers;
  bool mlp = true;
  bool rope = true;
  bool qk_head_norm = false;
  // Granite's multipliers (1: none) and attention scale (0: 1/sqrt(head_dim)).
  float embedding_scale = 1, residual_scale = 1, logit_scale = 1, attention_scale = 0;
  // Qwen3.5's attention: the q projection's gate, RoPE on 8 of 16 dimensions, sections.
  bool qwen35_attention = false;
  // A MoE FFN: 6 experts of 32, 2 per token, this routing; a shared expert of 48 (0:
  // none), gated or not.
  std::string routing;
  bool renormalize = true;
  int shared_expert = 0;
  bool shared_gate = false;
  // Qwen3-Next's Gated DeltaNet head order (ModelConfig::gdn_grouped_heads).
  bool grouped_heads = false;
};

std::string VariantName(const testing::TestParamInfo<Variant>& info) { return info.param.name; }

ModelConfig HybridConfig(const Variant& v) {
  ModelConfig c;
  c.dim = 64;
  c.num_layers = int(v.mixers.size());
  c.mixers = v.mixers;
  c.mlp_hidden = 96;
  c.mlp = v.mlp;
  c.rope = v.rope;
  c.qk_head_norm = v.qk_head_norm;
  // Grouped-query attention: 4 query heads on 2 KV heads of 16, a query width (64) that
  // is the model's, KV width 32.
  c.attention.module = "softmax";
  c.attention.num_heads = 4;
  c.attention.num_kv_heads = 2;
  c.attention.head_dim = 16;
  c.attention.value_dim = 16;
  // Mamba-2: inner 128 = 8 heads of 16 in 2 groups (4 heads each), state 16; 4 taps,
  // for the short conv too.
  c.ssm_inner = 128;
  c.ssm_state = 16;
  c.ssm_heads = 8;
  c.ssm_groups = 2;
  c.conv_kernel = 4;
  c.embedding_scale = v.embedding_scale;
  c.residual_scale = v.residual_scale;
  c.logit_scale = v.logit_scale;
  c.attention_scale = v.attention_scale;
  if (v.qwen35_attention) {
    c.attention_gate = true;
    c.rope_dims = 8;
    c.rope_sections = {2, 1, 0, 0};  // pair 2 of 4 is not rotated
  }
  if (!v.routing.empty()) {
    c.experts = 6;
    c.experts_used = 2;
    c.expert_hidden = 32;
    c.expert_routing = v.routing;
    c.expert_renormalize = v.renormalize;
    c.shared_expert_hidden = v.shared_expert;
    c.shared_expert_gate = v.shared_gate;
  }
  c.gdn_grouped_heads = v.grouped_heads;
  return c;
}

// The model of `v` with seed 11, fused or (ATTNSERVE_REFERENCE_STEP=1 while it is created)
// the LibTorch reference. Matrices scaled up so logits vary by O(1) and a mismatch shows;
// dt_bias -3 so that dt = softplus(dt_raw - 3) is mostly well below 1 and the Mamba-2
// state decays over several tokens rather than forgetting each one.
std::unique_ptr<Model> MakeModel(const Variant& v, bool reference) {
  if (reference) setenv("ATTNSERVE_REFERENCE_STEP", "1", 1);
  auto m = Model::Create(HybridConfig(v), 11);
  if (reference) unsetenv("ATTNSERVE_REFERENCE_STEP");
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return nullptr;
  EXPECT_EQ((*m)->UsesFusedStep(), !reference);
  c10::NoGradGuard no_grad;
  for (auto& [name, t] : (*m)->NamedParameters()) {
    if (name.find("norm") != std::string::npos || name.find("ssm_a") != std::string::npos ||
        name.find("ssm_d") != std::string::npos || name.find("conv_") != std::string::npos) {
      continue;
    }
    if (name.find("dt_bias") != std::string::npos) {
      t.fill_(-3.0);
    } else {
      t.mul_(10);
    }
  }
  return std::move(m).value();
}

std::vector<int32_t> Text(int n, int offset) {
  const std::string s = "And God said, Let there be light: and there was light. ";
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((unsigned char)s[(i + offset) % s.size()]);
  return ids;
}

double MaxDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

// Every tensor of every layer of `a` within `tol` x (1 + b's largest magnitude) of b's;
// the same names and shapes, the same positions.
void ExpectSameState(const DecodeState& a, const DecodeState& b, double tol,
                     const std::string& what) {
  ASSERT_EQ(a.position(), b.position()) << what;
  ASSERT_EQ(a.num_layers(), b.num_layers()) << what;
  for (int l = 0; l < a.num_layers(); ++l) {
    EXPECT_EQ(a.layer(l).Position(), b.layer(l).Position()) << what << " layer " << l;
    const auto ta = a.layer(l).Tensors(), tb = b.layer(l).Tensors();
    ASSERT_EQ(ta.size(), tb.size()) << what << " layer " << l;
    for (size_t i = 0; i < ta.size(); ++i) {
      ASSERT_EQ(ta[i].first, tb[i].first) << what << " layer " << l;
      ASSERT_EQ(ta[i].second.sizes(), tb[i].second.sizes()) << what << " layer " << l;
      const double scale = 1 + tb[i].second.abs().max().item<double>();
      EXPECT_LE(MaxDiff(ta[i].second, tb[i].second), tol * scale)
          << what << " layer " << l << " tensor " << ta[i].first;
    }
  }
}

// How close two paths' states must be (ExpectSameState's tol): 1e-5, or 2e-5 with Gated
// DeltaNet layers, whose chunked prefill (a triangular solve per chunk, then products)
// rounds otherwise than the token-by-token reference and, through 10x matrices, moves a
// later attention layer's values by up to 1.2e-5 of their scale (measured).
double StateTol(const ModelConfig& c) {
  for (int l = 0; l < c.num_layers; ++l) {
    if (c.Mixer(l) == kGatedDeltaNetMixer) return 2e-5;
  }
  return 1e-5;
}

class RecurrentModel : public testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    fused_ = MakeModel(GetParam(), /*reference=*/false);
    reference_ = MakeModel(GetParam(), /*reference=*/true);
    ASSERT_NE(fused_, nullptr);
    ASSERT_NE(reference_, nullptr);
  }
  std::unique_ptr<Model> fused_, reference_;
};

TEST_P(RecurrentModel, RecurrentStateHasTheMixersShapes) {
  auto state = fused_->NewState();
  const ModelConfig& c = fused_->config();
  for (int l = 0; l < c.num_layers; ++l) {
    const attention::TensorShapes shapes = fused_->StateShapes(l, 0);
    if (c.Mixer(l) == kMamba2Mixer) {
      // conv over x, B, C: I + 2 G N channels, K - 1 taps; ssm (H, P, N).
      ASSERT_EQ(shapes.size(), 2u);
      EXPECT_EQ(shapes[0].first, "conv");
      EXPECT_EQ(shapes[0].second, (std::vector<int64_t>{128 + 2 * 2 * 16, 3}));
      EXPECT_EQ(shapes[1].first, "ssm");
      EXPECT_EQ(shapes[1].second, (std::vector<int64_t>{8, 16, 16}));
    } else if (c.Mixer(l) == kShortConvMixer) {
      ASSERT_EQ(shapes.size(), 1u);
      EXPECT_EQ(shapes[0].second, (std::vector<int64_t>{64, 3}));
    } else if (c.Mixer(l) == kGatedDeltaNetMixer) {
      // conv over q | k | v: 2 n_k d_k + n_v d_v = 2 * 2 * 16 + 128 channels; S per value
      // head (n_v, d_v, d_k).
      ASSERT_EQ(shapes.size(), 2u);
      EXPECT_EQ(shapes[0].second, (std::vector<int64_t>{64 + 128, 3}));
      EXPECT_EQ(shapes[1].first, "ssm");
      EXPECT_EQ(shapes[1].second, (std::vector<int64_t>{8, 16, 16}));
    }
    const attention::NamedTensors tensors = state->layer(l).Tensors();
    ASSERT_EQ(tensors.size(), shapes.size()) << "layer " << l;
    for (size_t i = 0; i < shapes.size(); ++i) {
      EXPECT_EQ(tensors[i].first, shapes[i].first);
      EXPECT_EQ(tensors[i].second.sizes().vec(), shapes[i].second);
    }
  }
}

// The fused prefill against the reference's and against Forward: prompts of 1 token, of
// several SSD chunks (150: 64 + 64 + 22) and of 600 (two prefill blocks of the fused
// path), each from a fresh state and again on top of it; then a step.
TEST_P(RecurrentModel, FusedPrefillMatchesReference) {
  for (int first : {1, 150, 600}) {
    auto sf = fused_->NewState(), sr = reference_->NewState();
    double worst = 0, spread = 0;
    for (int round = 0; round < 2; ++round) {
      const std::vector<int32_t> prompt = Text(round == 0 ? first : 23, 5 * round + first);
      auto lf = fused_->Prefill(*sf, prompt);
      auto lr = reference_->Prefill(*sr, prompt);
      ASSERT_TRUE(lf.ok()) << lf.status();
      ASSERT_TRUE(lr.ok()) << lr.status();
      ASSERT_EQ(lf->sizes(), lr->sizes());
      worst = std::max(worst, MaxDiff(*lf, *lr));
      spread = std::max(spread, lr->std().item<double>());
      if (round == 0) {  // Forward: the parallel path from a fresh state
        const std::vector<int64_t> ids(prompt.begin(), prompt.end());
        at::Tensor forward = fused_->Forward(at::tensor(ids, at::kLong).unsqueeze(0))[0];
        worst = std::max(worst, MaxDiff(*lf, forward));
      }
    }
    std::vector<DecodeState*> one_f = {sf.get()}, one_r = {sr.get()};
    auto nf = fused_->Step(one_f, Text(1, 9)), nr = reference_->Step(one_r, Text(1, 9));
    ASSERT_TRUE(nf.ok() && nr.ok());
    worst = std::max(worst, MaxDiff(*nf, *nr));
    if (first > 1) {
      EXPECT_GT(spread, 0.5) << "logits too flat to compare";
    }
    EXPECT_LE(worst, 1e-4 * std::max(1.0, spread)) << "prompt of " << first;
    ExpectSameState(*sf, *sr, StateTol(fused_->config()), "prompt " + std::to_string(first));
  }
}

// Steps of four sessions at positions 0, 10, 27 and 44 at once, five in a row: the fused
// step against the reference's, logits and the states left behind.
TEST_P(RecurrentModel, FusedStepOfSessionsAtDifferentPositionsMatchesReference) {
  std::vector<std::unique_ptr<DecodeState>> own_f, own_r;
  std::vector<DecodeState*> states_f, states_r;
  for (int s = 0; s < 4; ++s) {
    own_f.push_back(fused_->NewState());
    own_r.push_back(reference_->NewState());
    const int prefill = s == 0 ? 0 : 9 + 16 * (s - 1) + s;
    if (prefill > 0) {
      ASSERT_TRUE(fused_->Prefill(*own_f.back(), Text(prefill, s)).ok());
      ASSERT_TRUE(reference_->Prefill(*own_r.back(), Text(prefill, s)).ok());
    }
    states_f.push_back(own_f.back().get());
    states_r.push_back(own_r.back().get());
  }
  double worst = 0, spread = 0;
  for (int step = 0; step < 5; ++step) {
    const std::vector<int32_t> next = Text(4, 3 * step + 1);
    auto lf = fused_->Step(states_f, next);
    auto lr = reference_->Step(states_r, next);
    ASSERT_TRUE(lf.ok()) << lf.status();
    ASSERT_TRUE(lr.ok()) << lr.status();
    worst = std::max(worst, MaxDiff(*lf, *lr));
    spread = std::max(spread, lr->std().item<double>());
  }
  EXPECT_GT(spread, 0.5) << "logits too flat to compare";
  EXPECT_LE(worst, 1e-4 * std::max(1.0, spread));
  for (int s = 0; s < 4; ++s) {
    ExpectSameState(*states_f[s], *states_r[s], StateTol(fused_->config()),
                    "session " + std::to_string(s));
  }
}

// One engine step of two decoding sessions and two prefilling ones (the fused Batch's row
// groups) against the reference Batch (Step and Prefill), and against each session run
// alone on the fused path.
TEST_P(RecurrentModel, FusedBatchOfDecodeAndPrefillSegmentsMatchesReference) {
  const std::vector<int> before = {12, 0, 30, 7};
  const std::vector<std::vector<int32_t>> appended = {Text(1, 2), Text(70, 4), Text(1, 6),
                                                      Text(9, 8)};
  const std::vector<std::vector<int32_t>> second = {Text(70, 11), Text(1, 12), Text(1, 13),
                                                    Text(1, 14)};
  std::vector<std::unique_ptr<DecodeState>> sf, sr, alone;
  for (size_t s = 0; s < before.size(); ++s) {
    sf.push_back(fused_->NewState());
    sr.push_back(reference_->NewState());
    alone.push_back(fused_->NewState());
    if (before[s] > 0) {
      for (auto* st : {sf.back().get(), alone.back().get()}) {
        ASSERT_TRUE(fused_->Prefill(*st, Text(before[s], int(s))).ok());
      }
      ASSERT_TRUE(reference_->Prefill(*sr.back(), Text(before[s], int(s))).ok());
    }
  }
  std::vector<Model::Segment> seg_f, seg_r;
  for (size_t s = 0; s < before.size(); ++s) {
    seg_f.push_back({sf[s].get(), appended[s]});
    seg_r.push_back({sr[s].get(), appended[s]});
  }
  for (int round = 0; round < 2; ++round) {
    auto bf = fused_->Batch(seg_f);
    auto br = reference_->Batch(seg_r);
    ASSERT_TRUE(bf.ok()) << bf.status();
    ASSERT_TRUE(br.ok()) << br.status();
    const double spread = br->std().item<double>();
    EXPECT_GT(spread, 0.5) << "logits too flat to compare";
    EXPECT_LE(MaxDiff(*bf, *br), 1e-4 * std::max(1.0, spread)) << "round " << round;
    for (size_t s = 0; s < before.size(); ++s) {
      auto own = fused_->Prefill(*alone[s], seg_f[s].tokens);
      ASSERT_TRUE(own.ok()) << own.status();
      EXPECT_LE(MaxDiff((*bf)[int64_t(s)], (*own)[-1]), 1e-4 * std::max(1.0, spread))
          << "segment " << s << " round " << round;
      const double tol = StateTol(fused_->config());
      ExpectSameState(*sf[s], *sr[s], tol, "segment " + std::to_string(s));
      ExpectSameState(*sf[s], *alone[s], tol, "segment alone " + std::to_string(s));
    }
    // Round 2: the other way round (session 0 prefills, the others decode).
    for (size_t s = 0; s < before.size(); ++s) seg_f[s].tokens = seg_r[s].tokens = second[s];
  }
}

// A session's state after a prefill of T tokens equals the state after the same tokens
// stepped one at a time (the chunked prefill and the batched step are the same
// recurrence), and so do the logits after each token.
TEST_P(RecurrentModel, PrefillStateEqualsTokensSteppedOneAtATime) {
  for (auto* m : {fused_.get(), reference_.get()}) {
    const std::vector<int32_t> prompt = Text(140, 3);
    auto prefilled = m->NewState(), stepped = m->NewState();
    auto logits = m->Prefill(*prefilled, prompt);
    ASSERT_TRUE(logits.ok()) << logits.status();
    double worst = 0;
    std::vector<DecodeState*> one = {stepped.get()};
    for (size_t i = 0; i < prompt.size(); ++i) {
      auto l = m->Step(one, {prompt[i]});
      ASSERT_TRUE(l.ok()) << l.status();
      worst = std::max(worst, MaxDiff((*l)[0], (*logits)[int64_t(i)]));
    }
    const double spread = logits->std().item<double>();
    EXPECT_LE(worst, 1e-4 * std::max(1.0, spread)) << (m == fused_.get() ? "fused" : "reference");
    // The reference's chunked prefill sums the SSM updates through LibTorch's matmuls, in
    // another order than 140 steps, with OpenBLAS kernels picked by the CPU: on an AVX-512
    // EPYC its pure Mamba-2 state is 1.6e-5 of its scale from the stepped one (Mamba-2's
    // state sums every token, decayed): held to 4e-5 there, 1e-5 for the fused loops.
    ExpectSameState(*prefilled, *stepped, m == fused_.get() ? 1e-5 : 4e-5,
                    m == fused_.get() ? "fused" : "reference");
  }
}

// A snapshot's tensors (each layer's Tensors(), names and shapes StateShapes(l, position))
// restored through RestoreState continue exactly as the original: the same logits, bit
// for bit, step after step; and the restore is a copy (the original moves on alone).
TEST_P(RecurrentModel, RestoredStateContinuesExactly) {
  auto original = fused_->NewState();
  ASSERT_TRUE(fused_->Prefill(*original, Text(45, 1)).ok());
  std::vector<attention::NamedTensors> layers;
  for (int l = 0; l < original->num_layers(); ++l) {
    const attention::TensorShapes shapes = fused_->StateShapes(l, original->position());
    attention::NamedTensors tensors;
    for (auto& [name, t] : original->layer(l).Tensors()) tensors.emplace_back(name, t.clone());
    ASSERT_EQ(tensors.size(), shapes.size()) << "layer " << l;
    for (size_t i = 0; i < shapes.size(); ++i) {
      ASSERT_EQ(tensors[i].first, shapes[i].first) << "layer " << l;
      ASSERT_EQ(tensors[i].second.sizes().vec(), shapes[i].second) << "layer " << l;
    }
    layers.push_back(std::move(tensors));
  }
  auto restored = fused_->RestoreState(original->position(), layers);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ((*restored)->position(), 45);
  EXPECT_EQ((*restored)->Bytes(), original->Bytes());
  ExpectSameState(**restored, *original, 0.0, "restored");
  for (int step = 0; step < 4; ++step) {
    const std::vector<int32_t> next = Text(step == 0 ? 6 : 1, step);
    auto a = fused_->Prefill(*original, next);
    auto b = fused_->Prefill(**restored, next);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_TRUE(at::equal(*a, *b)) << "step " << step;
  }
  // A wrong shape is refused with a status, not a crash.
  layers[0][0].second = at::zeros({1, 1});
  EXPECT_FALSE(fused_->RestoreState(45, layers).ok());
}

// Save writes Llama / Qwen directories only: every variant here (recurrent layers,
// experts, Qwen3.5's attention) is refused with a status before anything is written.
TEST_P(RecurrentModel, IsRefusedBySaveWithAStatus) {
  const std::string dir = testing::TempDir() + "/recurrent_save_" + GetParam().name;
  const absl::Status s = fused_->Save(dir);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
}

INSTANTIATE_TEST_SUITE_P(
    Mixers, RecurrentModel,
    testing::Values(
        // LFM2-like and more: every mixer kind, RoPE and per-head q/k norms.
        Variant{"hybrid", {"mamba2", "attention", "shortconv", "mamba2", "attention"}, true,
                true, true},
        // Granite 4.0-H-like: Mamba-2 and attention without RoPE, the multipliers.
        Variant{"granite", {"mamba2", "attention", "mamba2"}, true, false, false, 2.0f, 0.5f,
                1.5f, 0.2f},
        // Pure Mamba-2, no MLP.
        Variant{"mamba2", {"mamba2", "mamba2", "mamba2"}, false, false},
        // Short convolutions alone and beside attention.
        Variant{"shortconv", {"shortconv", "attention", "shortconv"}, true, true, true},
        // Qwen3.5-like: Gated DeltaNet (2 key heads, 8 value heads of 16) and gated
        // attention with per-head q/k norms and partial sectioned RoPE.
        Variant{"qwen35", {"gated_deltanet", "gated_deltanet", "attention", "gated_deltanet"},
                true, true, true, 1, 1, 1, 0, /*qwen35_attention=*/true},
        // Qwen3-MoE-like: attention and experts (softmax, top 2, renormalised).
        Variant{"qwen3moe", {"attention", "attention"}, true, true, true, 1, 1, 1, 0, false,
                "softmax"},
        // Qwen3.5-MoE-like: and a sigmoid-gated shared expert.
        Variant{"qwen35moe", {"gated_deltanet", "attention", "gated_deltanet"}, true, true, true,
                1, 1, 1, 0, true, "softmax", true, 48, true},
        // Qwen3-Next-like: value head h reads key head h / 4, experts, a gated shared one.
        Variant{"qwen3next", {"gated_deltanet", "attention"}, true, true, true, 1, 1, 1, 0,
                true, "softmax", true, 48, true, /*grouped_heads=*/true},
        // The other routings: top-k then softmax (Mixtral) with an ungated shared expert,
        // sigmoid scores (LFM2-MoE, Granite) beside Mamba-2, unnormalised.
        Variant{"moe_topk_softmax", {"attention", "shortconv"}, true, true, true, 1, 1, 1, 0,
                false, "softmax_topk", false, 48, false},
        Variant{"moe_sigmoid", {"mamba2", "attention"}, true, true, false, 1, 1, 1, 0, false,
                "sigmoid", true}),
    VariantName);

}  // namespace
}  // namespace attnserve::model
