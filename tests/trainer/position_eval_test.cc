#include "server/trainer/position_eval.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

namespace attnserve::trainer {
namespace {

model::ModelConfig Tiny(const std::string& module) {
  model::ModelConfig c;
  c.name = "tiny";
  c.dim = 32;
  c.num_layers = 2;
  c.mlp_hidden = 64;
  c.attention.module = module;
  c.attention.order = module.rfind("taylor", 0) == 0 ? 2 : 0;
  c.attention.num_heads = 2;
  c.attention.num_kv_heads = 2;
  c.attention.head_dim = 16;
  c.attention.value_dim = 16;
  c.attention.chunk_size = 8;
  return c;
}

std::string Text(int n) {
  std::string t;
  for (int i = 0; t.size() < size_t(n); ++i) t += "In the beginning " + std::to_string(i) + ". ";
  return t.substr(0, n);
}

// Mean cross-entropy of the parallel path over positions [from, to) of one window.
double ParallelMean(const model::Model& m, const std::string& window, int from, int to) {
  const int n = int(window.size()) - 1;
  at::Tensor ids = at::empty({1, n + 1}, at::kLong);
  for (int i = 0; i <= n; ++i) ids[0][i] = int64_t(static_cast<unsigned char>(window[i]));
  at::Tensor logits = m.Forward(ids.narrow(1, 0, n))[0];  // (n, V)
  at::Tensor loss = at::cross_entropy_loss(logits, ids[0].narrow(0, 1, n), {},
                                           at::Reduction::None);
  return loss.narrow(0, from, to - from).mean().item<double>();
}

class PositionEvalTest : public testing::TestWithParam<std::string> {};

// Pieces of 24 bytes over chunks of 8: the state carries the context across Prefill
// calls, so the losses are the parallel path's on the whole window.
TEST_P(PositionEvalTest, ContinuousFeedingMatchesTheParallelPathPerBucket) {
  auto m = model::Model::Create(Tiny(GetParam()), 7).value();
  const std::string text = Text(3 * 65 + 10);
  auto b = PositionBuckets::Create({0, 16, 40, 64}).value();
  PositionEvalOptions o;
  o.length = 64;
  o.piece = 24;
  auto stretches = LossByPosition(*m, text, o, {&b});
  ASSERT_TRUE(stretches.ok()) << stretches.status();
  EXPECT_EQ(*stretches, 3);
  for (int i = 0; i < b.size(); ++i) {
    double expected = 0;
    for (int s = 0; s < 3; ++s) {
      expected += ParallelMean(*m, text.substr(s * 65, 65), int(b.lower(i)), int(b.upper(i)));
    }
    EXPECT_NEAR(b.mean(i), expected / 3, 1e-4) << GetParam() << " " << b.Label(i);
    EXPECT_EQ(b.count(i), 3 * (b.upper(i) - b.lower(i)));
  }
}

INSTANTIATE_TEST_SUITE_P(Modules, PositionEvalTest,
                         testing::Values("softmax", "taylor", "taylor_norm", "linear"));

// Overlapping stretches: starts every 20 bytes, each fed from a fresh state, so each one's
// losses are the parallel path's on its own window.
TEST(LossByPosition, StrideStartsAStretchEveryStrideBytes) {
  auto m = model::Model::Create(Tiny("taylor"), 7).value();
  const std::string text = Text(65 + 2 * 20 + 5);  // starts 0, 20, 40 fit; 60 does not
  auto b = PositionBuckets::Create({0, 64}).value();
  PositionEvalOptions o;
  o.length = 64;
  o.stride = 20;
  auto stretches = LossByPosition(*m, text, o, {&b});
  ASSERT_TRUE(stretches.ok()) << stretches.status();
  EXPECT_EQ(*stretches, 3);
  double expected = 0;
  for (int s = 0; s < 3; ++s) expected += ParallelMean(*m, text.substr(s * 20, 65), 0, 64);
  EXPECT_NEAR(b.mean(0), expected / 3, 1e-4);
  EXPECT_EQ(b.count(0), 3 * 64);
}

TEST(LossByPosition, RejectsTextShorterThanOneStretch) {
  auto m = model::Model::Create(Tiny("taylor"), 1).value();
  auto b = PositionBuckets::Create({0, 64}).value();
  PositionEvalOptions o;
  o.length = 64;
  EXPECT_EQ(LossByPosition(*m, Text(64), o, {&b}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace attnserve::trainer
