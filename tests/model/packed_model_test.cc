// A model whose weights stay packed (server/weights/packed_matrix.h): a model directory
// loaded with LoadOptions::quantize for every packed type, on the Llama layout and on
// Qwen2's (q/k/v biases) and Qwen3's (per-head q/k RMSNorm, a head width other than
// dim / heads). The fused path (weights::PackedLinear: int8 activations, integer block
// dots) is held to the LibTorch reference on the same packed weights (Run: each matrix
// dequantized, fp32 activations): the only difference is the activations' rounding to
// 8 bits per block of 32, so logits agree within a small share of their range and greedy
// ids agree wherever the reference's top-1 margin is above that. Decode steps of several
// sessions equal each session's own prefill (the same kernels over more rows). Memory: the
// weight bytes are the packed rows' bytes. Packed weights are not saved as fp32.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "server/model/model.h"
#include "server/weights/packed_matrix.h"

namespace attnserve::model {
namespace {

struct Case {
  std::string quantize;  // LoadOptions::quantize
  std::string family;    // llama, qwen2, qwen3
};

std::string CaseName(const testing::TestParamInfo<Case>& info) {
  return info.param.quantize + "_" + info.param.family;
}

// Rows of 256 (K-quant blocks): dim 256, q width 4 x 64 = 256 (qwen3: 4 x 128 = 512),
// SwiGLU 512, 2 KV heads.
ModelConfig PackedConfig(const std::string& family) {
  ModelConfig c;
  c.vocab_size = 320;
  c.dim = 256;
  c.num_layers = 2;
  c.mlp_hidden = 512;
  c.attention.module = "softmax";
  c.attention.num_heads = 4;
  c.attention.num_kv_heads = 2;
  c.attention.head_dim = family == "qwen3" ? 128 : 64;
  c.attention.value_dim = c.attention.head_dim;
  c.attention.chunk_size = 16;
  c.attention_bias = family == "qwen2";
  c.qk_head_norm = family == "qwen3";
  return c;
}

std::vector<int32_t> Text(int n, int offset) {
  const std::string s = "And God said, Let there be light: and there was light. ";
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((unsigned char)s[(i + offset) % s.size()]);
  return ids;
}

class PackedModel : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    at::set_num_threads(1);
    at::manual_seed(11);  // the scaling below draws from the default generator
    dir_ = std::filesystem::temp_directory_path() /
           ("attnserve_packed_" + CaseName({GetParam(), 0}) + std::to_string(::getpid()));
    const ModelConfig c = PackedConfig(GetParam().family);
    auto created = Model::Create(c, 11);
    ASSERT_TRUE(created.ok()) << created.status();
    // Weights scaled so logits spread over several units (a mismatch shows); biases and
    // norm gains away from 0 and 1 so that a dropped one shows too.
    for (auto& [name, t] : (*created)->NamedParameters()) {
      if (name.find("norm") != std::string::npos) {
        t.uniform_(0.5, 1.5);
      } else if (absl::EndsWith(name, ".bq") || absl::EndsWith(name, ".bk") ||
                 absl::EndsWith(name, ".bv")) {
        t.normal_(0, 0.5);
      } else {
        t.mul_(4);
      }
    }
    ASSERT_TRUE((*created)->Save(dir_.string()).ok());
    fp32_ = std::move(created).value();
    LoadOptions load;
    load.quantize = GetParam().quantize;
    auto packed = Model::Load(dir_.string(), load);
    ASSERT_TRUE(packed.ok()) << packed.status();
    packed_ = std::move(packed).value();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
  std::unique_ptr<Model> fp32_, packed_;
};

TEST_P(PackedModel, EveryMatrixIsPackedAndTheBytesAreTheRows) {
  ASSERT_TRUE(packed_->HasPackedWeights());
  ASSERT_TRUE(packed_->UsesFusedStep());
  const auto matrices = packed_->PackedParameters();
  // The embedding, 7 matrices per layer and the (untied) head.
  EXPECT_EQ(matrices.size(), size_t(1 + 7 * packed_->config().num_layers + 1));
  int64_t packed_bytes = 0;
  for (const auto& [name, m] : matrices) {
    EXPECT_EQ(absl::AsciiStrToLower(weights::WeightTypeName(m->type())), GetParam().quantize)
        << name;
    EXPECT_EQ(m->bytes(), m->out() * weights::RowBytes(m->type(), m->in())) << name;
    packed_bytes += m->bytes();
  }
  int64_t dense_bytes = 0;  // norms, biases
  for (const auto& [name, t] : packed_->NamedParameters()) dense_bytes += int64_t(t.nbytes());
  EXPECT_EQ(packed_->WeightBytes(), packed_bytes + dense_bytes);
  EXPECT_LT(packed_->WeightBytes(), fp32_->WeightBytes() * 0.3);  // <= 1.06 / 4 + norms
  EXPECT_EQ(packed_->ParameterCount(), fp32_->ParameterCount());
  EXPECT_NE(packed_->Fingerprint(), fp32_->Fingerprint());
  EXPECT_EQ(packed_->Save((dir_ / "again").string()).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_P(PackedModel, FusedPathIsTheReferenceUpToTheActivationRounding) {
  const std::vector<int32_t> prompt = Text(40, 3);
  auto state = packed_->NewState();
  auto fused = packed_->Prefill(*state, prompt);  // (T, V), PackedLinear
  ASSERT_TRUE(fused.ok()) << fused.status();
  at::Tensor ids = at::tensor(std::vector<int64_t>(prompt.begin(), prompt.end()), at::kLong);
  at::Tensor reference = packed_->Forward(ids.unsqueeze(0))[0];  // dequantized, fp32
  const double range = (reference.max() - reference.min()).item<double>();
  const double worst = (*fused - reference).abs().max().item<double>();
  // The activations' 8-bit rounding: about 0.4% of each block's largest value per
  // product, a few tenths of a percent of the logits' range after the layers.
  EXPECT_GT(range, 4.0);
  EXPECT_LE(worst, 0.03 * range) << "logit range " << range;
  // Greedy ids agree wherever the reference is not near a tie.
  at::Tensor top2 = std::get<0>(reference.topk(2, -1));  // (T, 2)
  at::Tensor margin = top2.select(1, 0) - top2.select(1, 1);
  at::Tensor agree = fused->argmax(-1) == reference.argmax(-1);
  const int64_t clear = (margin > 2 * worst).sum().item<int64_t>();
  EXPECT_GE(clear, 10);
  EXPECT_EQ(((margin > 2 * worst) & ~agree).sum().item<int64_t>(), 0);
  // And the packed model is the fp32 model up to the weights' rounding: 8 bits keep within
  // a few percent of the range, 4 to 6 bits (random weights: no outliers to spare) within
  // a third.
  at::Tensor exact = fp32_->Forward(ids.unsqueeze(0))[0];
  const double rounding = (reference - exact).abs().max().item<double>();
  std::cerr << GetParam().quantize << " " << GetParam().family << ": range " << range
            << ", fused - reference " << worst << ", packed - fp32 " << rounding
            << ", clear steps " << clear << " of " << prompt.size() << "\n";
  EXPECT_LE(rounding, (GetParam().quantize == "q8_0" ? 0.05 : 0.35) * range);
}

TEST_P(PackedModel, StepsOfSeveralSessionsEqualEachOnesPrefill) {
  // Three sessions at different positions step together for 4 tokens (one PackedLinear
  // over 3 rows); each session alone prefills the same tokens (rows of one prompt). Each
  // row's activations are quantized alone, so the two agree up to float summation order
  // before the rounding to 8 bits; where that order moves a value across a rounding
  // boundary, the difference is one activation step, the fused path's own bound.
  std::vector<std::unique_ptr<DecodeState>> together, alone;
  std::vector<DecodeState*> batch;
  std::vector<std::vector<int32_t>> texts;
  for (int s = 0; s < 3; ++s) {
    texts.push_back(Text(7 + 5 * s + 4, s));
    together.push_back(packed_->NewState());
    ASSERT_TRUE(packed_->Prefill(*together.back(), {texts[s].data(), texts[s].size() - 4}).ok());
    batch.push_back(together.back().get());
  }
  std::vector<at::Tensor> stepped(3);
  for (int step = 0; step < 4; ++step) {
    std::vector<int32_t> next;
    for (int s = 0; s < 3; ++s) next.push_back(texts[s][texts[s].size() - 4 + step]);
    auto logits = packed_->Step(batch, next);
    ASSERT_TRUE(logits.ok()) << logits.status();
    for (int s = 0; s < 3; ++s) stepped[s] = (*logits)[s];
  }
  for (int s = 0; s < 3; ++s) {
    auto state = packed_->NewState();
    auto whole = packed_->Prefill(*state, texts[s]);
    ASSERT_TRUE(whole.ok());
    at::Tensor last = (*whole)[int64_t(texts[s].size()) - 1];
    const double range = (last.max() - last.min()).item<double>();
    EXPECT_LE((stepped[s] - last).abs().max().item<double>(), 0.02 * range) << s;
    EXPECT_EQ(stepped[s].argmax().item<int64_t>(), last.argmax().item<int64_t>()) << s;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Types, PackedModel,
    testing::Values(Case{"q8_0", "llama"}, Case{"q4_0", "llama"}, Case{"q4_k", "llama"},
                    Case{"q5_k", "llama"}, Case{"q6_k", "llama"}, Case{"q4_k", "qwen2"},
                    Case{"q8_0", "qwen3"}, Case{"q6_k", "qwen3"}),
    CaseName);

TEST(PackedModelLoad, AnUnknownQuantizationIsRefusedNamingTheChoices) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("attnserve_packed_refuse" + std::to_string(::getpid()));
  auto created = Model::Create(PackedConfig("llama"), 1);
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE((*created)->Save(dir.string()).ok());
  LoadOptions load;
  load.quantize = "q2_k";
  auto refused = Model::Load(dir.string(), load);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("q4_k"), std::string::npos) << refused.status();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace attnserve::model
