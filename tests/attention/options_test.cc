#include "server/attention/options.h"

#include <gtest/gtest.h>

#include <limits>

namespace attnserve::attention {
namespace {

AttentionOptions Taylor(int order, int head_dim = 16) {
  AttentionOptions o;
  o.module = "taylor";
  o.order = order;
  o.head_dim = head_dim;
  o.value_dim = head_dim;
  return o;
}

TEST(ValidateAttentionOptions, AcceptsEveryModuleWithDefaults) {
  for (const std::string& name : ModuleNames()) {
    AttentionOptions o;
    o.module = name;
    EXPECT_TRUE(ValidateAttentionOptions(o).ok()) << name;
  }
}

TEST(ValidateAttentionOptions, UnknownModuleListsValidNames) {
  AttentionOptions o;
  o.module = "flash";
  absl::Status s = ValidateAttentionOptions(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'flash'"), std::string::npos) << s;
  for (const char* name : {"softmax", "softmax_norm", "taylor", "taylor_norm", "linear"}) {
    EXPECT_NE(s.message().find(name), std::string::npos) << s;
  }
}

TEST(ValidateAttentionOptions, RejectsOddOrderWithSumNormaliser) {
  absl::Status s = ValidateAttentionOptions(Taylor(3));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("even order"), std::string::npos) << s;
  EXPECT_NE(s.message().find("taylor_norm"), std::string::npos) << s;
}

TEST(ValidateAttentionOptions, AcceptsOddOrderWithNormNormaliser) {
  AttentionOptions o = Taylor(3);
  o.module = "taylor_norm";
  EXPECT_TRUE(ValidateAttentionOptions(o).ok());
}

TEST(ValidateAttentionOptions, RejectsOrderOverStateBudget) {
  // d = 64, N = 8: C(72, 8) ~ 1.2e10 features per head.
  absl::Status s = ValidateAttentionOptions(Taylor(8, 64));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("budget"), std::string::npos) << s;
  EXPECT_NE(s.message().find("lower the order"), std::string::npos) << s;
}

TEST(ValidateAttentionOptions, RejectsBadShapesAndOptionsNamingTheField) {
  AttentionOptions o = Taylor(2);
  o.head_dim = 15;
  EXPECT_NE(ValidateAttentionOptions(o).message().find("head_dim"), std::string::npos);
  o = Taylor(2);
  o.chunk_size = 0;
  EXPECT_NE(ValidateAttentionOptions(o).message().find("chunk_size"), std::string::npos);
  o = Taylor(0);
  EXPECT_NE(ValidateAttentionOptions(o).message().find("attention.order"),
            std::string::npos);
  o = Taylor(2);
  o.learn_temperature = true;
  EXPECT_NE(ValidateAttentionOptions(o).message().find("qk_norm"), std::string::npos);
}

TEST(ValidateAttentionOptions, DecayOnFixedStateModulesWithHorizonsOfTwoOrMore) {
  AttentionOptions o = Taylor(2);  // 4 heads: horizons decay_horizon / 8 .. decay_horizon
  o.decay_horizon = 16;
  EXPECT_TRUE(ValidateAttentionOptions(o).ok());
  o.decay_horizon = 15;  // first head 1.875 tokens
  absl::Status s = ValidateAttentionOptions(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("at least 16"), std::string::npos) << s;
  o.decay_horizon = -1;
  EXPECT_NE(ValidateAttentionOptions(o).message().find("decay_horizon"), std::string::npos);
  o.decay_horizon = std::numeric_limits<float>::infinity();
  EXPECT_NE(ValidateAttentionOptions(o).message().find("decay_horizon"), std::string::npos);
  for (const char* kv : {"softmax", "softmax_norm"}) {
    AttentionOptions k;
    k.module = kv;
    k.decay_horizon = 64;
    s = ValidateAttentionOptions(k);
    EXPECT_NE(s.message().find("fixed-state modules"), std::string::npos) << s;
  }
  for (const char* fixed : {"taylor_norm", "linear"}) {
    o = Taylor(2);
    o.module = fixed;
    o.decay_horizon = 64;
    EXPECT_TRUE(ValidateAttentionOptions(o).ok()) << fixed;
  }
}

TEST(HeadDecays, HalveTheHorizonFromTheLastHeadDown) {
  AttentionOptions o = Taylor(2);
  EXPECT_TRUE(HeadDecays(o).empty());
  o.decay_horizon = 64;  // horizons 8, 16, 32, 64
  const std::vector<float> g = HeadDecays(o);
  ASSERT_EQ(g.size(), 4u);
  EXPECT_FLOAT_EQ(g[0], 1 - 1.0f / 8);
  EXPECT_FLOAT_EQ(g[1], 1 - 1.0f / 16);
  EXPECT_FLOAT_EQ(g[2], 1 - 1.0f / 32);
  EXPECT_FLOAT_EQ(g[3], 1 - 1.0f / 64);
}

TEST(FeatureCount, IsBinomialForTaylorAndHeadDimForLinear) {
  EXPECT_EQ(FeatureCount(Taylor(2, 16)), 153);
  EXPECT_EQ(FeatureCount(Taylor(4, 16)), 4845);
  EXPECT_EQ(FeatureCount(Taylor(2, 64)), 2145);
  AttentionOptions lin;
  lin.module = "linear";
  EXPECT_EQ(FeatureCount(lin), 16);
  AttentionOptions soft;
  EXPECT_EQ(FeatureCount(soft), 0);
}

TEST(StateBytesPerLayer, FixedForTaylorAndLinearInContextForKvCaches) {
  AttentionOptions t = Taylor(2);  // 4 heads, d = d_v = 16
  EXPECT_EQ(StateBytesPerLayer(t, 0), 153 * 17 * 4 * 4);
  EXPECT_EQ(StateBytesPerLayer(t, 16384), StateBytesPerLayer(t, 0));
  t.module = "taylor_norm";  // no denominator state
  EXPECT_EQ(StateBytesPerLayer(t, 0), 153 * 16 * 4 * 4);
  AttentionOptions s;
  EXPECT_EQ(StateBytesPerLayer(s, 1000), 1000 * 32 * 4 * 4);
}

TEST(CheckServableAs, QkNormSoftmaxMaySwitchToTaylorOthersMayNot) {
  AttentionOptions softmax;
  EXPECT_TRUE(CheckServableAs(softmax, "softmax", 0).ok());
  absl::Status s = CheckServableAs(softmax, "taylor", 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("qk_norm"), std::string::npos) << s;
  softmax.qk_norm = true;
  EXPECT_TRUE(CheckServableAs(softmax, "taylor", 4).ok());
  EXPECT_FALSE(CheckServableAs(softmax, "linear", 0).ok());
  EXPECT_FALSE(CheckServableAs(softmax, "taylor_norm", 4).ok());
  AttentionOptions norm;
  norm.module = "softmax_norm";
  norm.qk_norm = true;
  EXPECT_TRUE(CheckServableAs(norm, "taylor_norm", 3).ok());
  AttentionOptions taylor = Taylor(2);
  EXPECT_TRUE(CheckServableAs(taylor, "taylor", 2).ok());
  absl::Status t = CheckServableAs(taylor, "taylor", 4);
  EXPECT_FALSE(t.ok());
  EXPECT_NE(t.message().find("compatible: taylor"), std::string::npos) << t;
}

TEST(BreakEvenContext, MatchesDesignFigures) {
  // m (d_v + 1) / (2 d), rounded up: 153 * 17 / 32 = 81.3; 4845 * 17 / 32 = 2573.9.
  EXPECT_EQ(BreakEvenContext(Taylor(2, 16)), 82);
  EXPECT_EQ(BreakEvenContext(Taylor(4, 16)), 2574);
  EXPECT_EQ(BreakEvenContext(AttentionOptions{}), 0);
}

}  // namespace
}  // namespace attnserve::attention
