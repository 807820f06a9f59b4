#include "server/model/model.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "server/model/hf_config.h"

namespace attnserve::model {
namespace {

ModelConfig TinyConfig(const std::string& module, int order = 2) {
  ModelConfig c;
  c.name = "tiny-" + module;
  c.dim = 32;
  c.num_layers = 2;
  c.mlp_hidden = 64;
  c.attention.module = module;
  c.attention.order = order;
  c.attention.num_heads = 2;
  c.attention.num_kv_heads = 2;
  c.attention.head_dim = 16;
  c.attention.value_dim = 16;
  c.attention.chunk_size = 16;
  return c;
}

std::vector<int32_t> Text(int n, int offset = 0) {
  const std::string s = "In the beginning God created the heaven and the earth. ";
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((unsigned char)s[(i + offset) % s.size()]);
  return ids;
}

at::Tensor AsTensor(const std::vector<int32_t>& ids) {
  return at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong).unsqueeze(0);
}

double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

// Scaled-up weights make logits vary by O(1) so the comparisons below are not trivially
// met by near-constant outputs of a freshly initialised model.
std::unique_ptr<Model> MakeModel(const ModelConfig& c, uint64_t seed = 1) {
  auto m = Model::Create(c, seed);
  EXPECT_TRUE(m.ok()) << m.status();
  for (auto& [name, t] : (*m)->NamedParameters()) {
    if (name.find("norm") == std::string::npos) t.mul_(10);
  }
  return std::move(m).value();
}

class ModelPaths : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

TEST_P(ModelPaths, IncrementalDecodeReproducesForward) {
  auto model = MakeModel(TinyConfig(GetParam()));
  const std::vector<int32_t> ids = Text(90);
  at::Tensor full = model->Forward(AsTensor(ids))[0];  // (T, V)
  ASSERT_GT(full.std().item<double>(), 0.1);
  auto state = model->NewState();
  const int prefill = 37;  // not a multiple of chunk_size 16
  auto pre = model->Prefill(*state, absl::MakeSpan(ids).subspan(0, prefill));
  ASSERT_TRUE(pre.ok()) << pre.status();
  EXPECT_LE(MaxAbsDiff(*pre, full.narrow(0, 0, prefill)), 1e-4);
  DecodeState* states[] = {state.get()};
  double worst = 0;
  for (int i = prefill; i < int(ids.size()); ++i) {
    auto logits = model->Step(states, {ids[i]});
    ASSERT_TRUE(logits.ok()) << logits.status();
    worst = std::max(worst, MaxAbsDiff((*logits)[0], full[i]));
  }
  EXPECT_LE(worst, 1e-4);
  EXPECT_EQ(state->position(), int64_t(ids.size()));
}

TEST_P(ModelPaths, BatchedStepMatchesEachSessionAlone) {
  auto model = MakeModel(TinyConfig(GetParam()));
  // Three sessions at positions 5, 23 and 40 decode together.
  const std::vector<int> prefill = {5, 23, 40};
  std::vector<std::vector<int32_t>> texts;
  std::vector<std::unique_ptr<DecodeState>> owned;
  std::vector<DecodeState*> states;
  for (size_t s = 0; s < prefill.size(); ++s) {
    texts.push_back(Text(prefill[s] + 12, int(7 * s)));
    owned.push_back(model->NewState());
    states.push_back(owned.back().get());
    ASSERT_TRUE(model->Prefill(*owned.back(),
                               absl::MakeSpan(texts[s]).subspan(0, prefill[s])).ok());
  }
  double worst = 0;
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> next;
    for (size_t s = 0; s < prefill.size(); ++s) next.push_back(texts[s][prefill[s] + i]);
    auto logits = model->Step(states, next);
    ASSERT_TRUE(logits.ok()) << logits.status();
    for (size_t s = 0; s < prefill.size(); ++s) {
      at::Tensor full = model->Forward(AsTensor(texts[s]))[0];
      worst = std::max(worst, MaxAbsDiff((*logits)[s], full[prefill[s] + i]));
    }
  }
  EXPECT_LE(worst, 1e-4);
}

TEST_P(ModelPaths, StateBytesAreFixedOrGrow) {
  auto model = MakeModel(TinyConfig(GetParam()));
  auto state = model->NewState();
  ASSERT_TRUE(model->Prefill(*state, Text(64)).ok());
  const int64_t at64 = state->Bytes();
  ASSERT_TRUE(model->Prefill(*state, Text(960)).ok());
  if (model->BreakEvenContext() > 0) {
    EXPECT_EQ(state->Bytes(), at64);
    EXPECT_EQ(state->Bytes(), model->StateBytes(1024));
  } else {
    EXPECT_GE(state->Bytes(), model->StateBytes(1024));
    EXPECT_GT(state->Bytes(), 8 * at64);
  }
}

INSTANTIATE_TEST_SUITE_P(Modules, ModelPaths,
                         testing::Values("softmax", "softmax_norm", "taylor", "taylor_norm",
                                         "linear"));

// Grouped-query attention against an independent reference: the multi-head model whose
// wk, wv rows are those of the grouped model repeated for every query head of their
// group (Hugging Face's repeat_kv) computes the same function, so its Forward logits are
// what every path of the grouped model (fused and LibTorch prefill, step, batch) must
// give. 4 query heads of 16 on a width of 32 (head_dim independent of dim), on 2 KV
// heads or 1. Its state is H / Hkv times smaller.
struct GqaCase {
  std::string module;
  int kv_heads;
  bool unscaled_query = false;
};

class GroupedQueryModel : public testing::TestWithParam<GqaCase> {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

ModelConfig GqaConfig(const GqaCase& g, int kv_heads, bool reference) {
  ModelConfig c = TinyConfig(g.module);
  c.attention.num_heads = 4;
  c.attention.num_kv_heads = kv_heads;
  c.attention.unscaled_query = g.unscaled_query;
  c.attention.reference_kernels = reference;
  return c;
}

TEST_P(GroupedQueryModel, EqualsTheMultiHeadModelWithRepeatedKeyValueRows) {
  const GqaCase g = GetParam();
  const int64_t heads = 4, group = heads / g.kv_heads, d = 16;
  auto mha = MakeModel(GqaConfig(g, 4, false));
  std::unique_ptr<Model> gqa[2] = {MakeModel(GqaConfig(g, g.kv_heads, false), 5),
                                   MakeModel(GqaConfig(g, g.kv_heads, true), 5)};
  ASSERT_TRUE(gqa[0]->UsesFusedStep());
  ASSERT_FALSE(gqa[1]->UsesFusedStep());
  // The MHA model takes the GQA weights; wk, wv (Hkv*D, dim) -> (H*D, dim) by repeating
  // each KV head's D rows G times.
  std::map<std::string, at::Tensor> source;
  for (auto& [name, t] : gqa[0]->NamedParameters()) source[name] = t;
  for (auto& [name, t] : mha->NamedParameters()) {
    at::Tensor from = source.at(name);
    const bool kv = name.find(".wk") != std::string::npos || name.find(".wv") != std::string::npos;
    if (kv) from = from.view({g.kv_heads, d, -1}).repeat_interleave(group, 0).reshape({heads * d, -1});
    ASSERT_EQ(t.sizes(), from.sizes()) << name;
    t.copy_(from);
  }
  EXPECT_EQ(mha->StateBytes(512), group * gqa[0]->StateBytes(512));
  const std::vector<int32_t> ids = Text(60);
  const at::Tensor want = mha->Forward(AsTensor(ids))[0];  // (T, V)
  ASSERT_GT(want.std().item<double>(), 0.1);
  const double tol = 1e-4 * (1 + want.abs().max().item<double>());
  for (int path = 0; path < 2; ++path) {
    SCOPED_TRACE(path == 0 ? "fused" : "LibTorch");
    const Model& m = *gqa[path];
    EXPECT_LE(MaxAbsDiff(m.Forward(AsTensor(ids))[0], want), tol) << "forward";
    // Session a: prefill 21 (not a multiple of the chunk), step to 30; session b: 9.
    auto a = m.NewState(), b = m.NewState();
    auto pre = m.Prefill(*a, absl::MakeSpan(ids).subspan(0, 21));
    ASSERT_TRUE(pre.ok()) << pre.status();
    EXPECT_LE(MaxAbsDiff(*pre, want.narrow(0, 0, 21)), tol) << "prefill";
    ASSERT_TRUE(m.Prefill(*b, absl::MakeSpan(ids).subspan(0, 9)).ok());
    for (int i = 21; i < 30; ++i) {
      std::vector<DecodeState*> both = {a.get(), b.get()};
      auto logits = m.Step(both, {ids[i], ids[i - 12]});
      ASSERT_TRUE(logits.ok()) << logits.status();
      EXPECT_LE(MaxAbsDiff((*logits)[0], want[i]), tol) << "step " << i;
      EXPECT_LE(MaxAbsDiff((*logits)[1], want[i - 12]), tol) << "step " << i - 12;
    }
    // One batch: a prefills 30..59 while b decodes token 18.
    std::vector<Model::Segment> segs = {{a.get(), absl::MakeSpan(ids).subspan(30, 30)},
                                        {b.get(), absl::MakeSpan(ids).subspan(18, 1)}};
    auto batch = m.Batch(segs);
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_LE(MaxAbsDiff((*batch)[0], want[59]), tol) << "batch prefill";
    EXPECT_LE(MaxAbsDiff((*batch)[1], want[18]), tol) << "batch step";
    // The state holds KV heads only, H / Hkv times fewer bytes than the MHA one.
    for (const auto& [name, dims] : m.StateShapes(0, 60)) EXPECT_EQ(dims[0], g.kv_heads) << name;
    if (m.BreakEvenContext() > 0) {
      EXPECT_EQ(a->Bytes() * group, mha->NewState()->Bytes());
      EXPECT_EQ(a->Bytes(), m.StateBytes(60));
    } else {
      EXPECT_EQ(a->Clone()->Bytes() * group, mha->StateBytes(60));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modules, GroupedQueryModel,
    testing::Values(GqaCase{"softmax", 2}, GqaCase{"softmax", 1}, GqaCase{"softmax_norm", 2},
                    GqaCase{"taylor", 2}, GqaCase{"taylor", 1}, GqaCase{"taylor_norm", 2},
                    GqaCase{"linear", 2}, GqaCase{"linear", 1, true}),
    [](const testing::TestParamInfo<GqaCase>& info) {
      return info.param.module + "_kv" + std::to_string(info.param.kv_heads) +
             (info.param.unscaled_query ? "_unscaled" : "");
    });

class ModelFiles : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("attnserve_model_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(ModelFiles, SaveThenLoadGivesIdenticalLogits) {
  ModelConfig c = TinyConfig("taylor", 4);
  c.attention.qk_norm = true;
  c.attention.learn_temperature = true;
  auto model = MakeModel(c, 5);
  model->NamedParameters().back().second.add_(0);  // parameters are the model's own
  ASSERT_TRUE(model->Save(dir_.string()).ok());
  auto loaded = Model::Load(dir_.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(ModelConfigToText((*loaded)->config()), ModelConfigToText(c));
  at::Tensor ids = AsTensor(Text(40));
  EXPECT_EQ(MaxAbsDiff(model->Forward(ids), (*loaded)->Forward(ids)), 0.0);
  EXPECT_EQ((*loaded)->ParameterCount(), ParameterCount(c));
  // A different seed gives a different model, so the equality above is not vacuous.
  EXPECT_GT(MaxAbsDiff(MakeModel(c, 6)->Forward(ids), model->Forward(ids)), 1e-3);
}

TEST_F(ModelFiles, LoadRejectsMissingCorruptAndMismatchedFiles) {
  auto missing = Model::Load(dir_.string());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("config.json"), std::string::npos);

  auto model = MakeModel(TinyConfig("linear"));
  ASSERT_TRUE(model->Save(dir_.string()).ok());
  const std::string weights = (dir_ / "model.safetensors").string();
  {  // Break the header's JSON (safetensors has no checksum over the data).
    std::fstream f(weights, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.put('[');
  }
  auto corrupt = Model::Load(dir_.string());
  EXPECT_EQ(corrupt.status().code(), absl::StatusCode::kDataLoss) << corrupt.status();
  EXPECT_NE(corrupt.status().message().find("model.safetensors"), std::string::npos);
  ASSERT_TRUE(model->Save(dir_.string()).ok());
  std::filesystem::resize_file(weights, std::filesystem::file_size(weights) - 4);
  EXPECT_EQ(Model::Load(dir_.string()).status().code(), absl::StatusCode::kDataLoss);

  // Weights of one shape under a config of another.
  ASSERT_TRUE(model->Save(dir_.string()).ok());
  ModelConfig wider = TinyConfig("linear");
  wider.mlp_hidden = 80;
  std::ofstream(dir_ / "config.json") << HfConfigToJson(wider);
  auto mismatch = Model::Load(dir_.string());
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.status().message().find("gate_proj"), std::string::npos) << mismatch.status();

  std::ofstream(dir_ / "config.json") << "{\"hidden_size\": [";
  auto malformed = Model::Load(dir_.string());
  EXPECT_EQ(malformed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(malformed.status().message().find("config.json: not valid JSON"), std::string::npos)
      << malformed.status();
}

TEST_F(ModelFiles, LoadsAQkNormSoftmaxCheckpointAsTaylor) {
  ModelConfig c = TinyConfig("softmax");
  c.attention.qk_norm = true;
  c.attention.qk_temperature = 1.5f;
  c.attention.learn_temperature = true;
  // Unscaled weights: the temperature (a parameter here) must stay at 1.5.
  auto model = std::move(Model::Create(c, 8)).value();
  ASSERT_TRUE(model->Save(dir_.string()).ok());
  at::Tensor ids = AsTensor(Text(64));
  at::Tensor exact = at::log_softmax(model->Forward(ids), -1);
  double previous = INFINITY;
  for (int order : {2, 4, 6, 8}) {
    LoadOptions as_taylor{"taylor", order, int64_t{1} << 30};  // order 8: 100 MB a layer
    auto taylor = Model::Load(dir_.string(), as_taylor);
    ASSERT_TRUE(taylor.ok()) << taylor.status();
    EXPECT_EQ((*taylor)->config().attention.module, "taylor");
    EXPECT_EQ((*taylor)->config().attention.order, order);
    const double err =
        MaxAbsDiff(at::log_softmax((*taylor)->Forward(ids), -1), exact);
    EXPECT_LT(err, previous) << "order " << order;  // higher orders approach softmax
    previous = err;
  }
  EXPECT_LT(previous, 1e-5);
  auto linear = Model::Load(dir_.string(), {"linear"});
  EXPECT_EQ(linear.status().code(), absl::StatusCode::kInvalidArgument);
  auto odd = Model::Load(dir_.string(), {"taylor", 3});
  EXPECT_EQ(odd.status().code(), absl::StatusCode::kInvalidArgument);
  auto huge = Model::Load(dir_.string(), {"taylor", 8});  // default budget
  EXPECT_NE(huge.status().message().find("budget"), std::string::npos);
}

TEST(Model, RejectsBadInputWithoutTouchingState) {
  ModelConfig c = TinyConfig("taylor");
  c.max_context = 50;
  auto model = MakeModel(c);
  auto state = model->NewState();
  EXPECT_EQ(model->Prefill(*state, {}).status().code(), absl::StatusCode::kInvalidArgument);
  auto bad = model->Prefill(*state, {65, 300});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("position 1"), std::string::npos);
  EXPECT_EQ(model->Prefill(*state, Text(51)).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(state->position(), 0);
  ASSERT_TRUE(model->Prefill(*state, Text(50)).ok());
  DecodeState* one[] = {state.get()};
  EXPECT_EQ(model->Step(one, {65}).status().code(), absl::StatusCode::kOutOfRange);

  auto a = model->NewState();
  DecodeState* twice[] = {a.get(), a.get()};
  EXPECT_EQ(model->Step(twice, {65, 66}).status().code(), absl::StatusCode::kInvalidArgument);
  DecodeState* pair[] = {a.get()};
  EXPECT_EQ(model->Step(pair, {65, 66}).status().code(), absl::StatusCode::kInvalidArgument);
  auto other = MakeModel(c);
  auto foreign = other->NewState();
  EXPECT_EQ(model->Prefill(*foreign, {65}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a->position(), 0);
}

TEST(Model, CreateRejectsInvalidConfig) {
  ModelConfig c = TinyConfig("taylor", 3);
  auto m = Model::Create(c, 0);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("odd"), std::string::npos);
}

}  // namespace
}  // namespace attnserve::model
