#include "server/attention/options.h"

#include <gtest/gtest.h>

#include <limits>

#include "absl/strings/str_cat.h"

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

TEST(ValidateAttentionOptions, KvHeadsMustDivideTheQueryHeads) {
  AttentionOptions o = Taylor(2);  // 4 query heads
  for (int kv : {4, 2, 1}) {
    o.num_kv_heads = kv;
    EXPECT_TRUE(ValidateAttentionOptions(o).ok()) << kv;
  }
  for (int kv : {0, -1, 3, 8}) {
    o.num_kv_heads = kv;
    absl::Status s = ValidateAttentionOptions(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << kv;
    EXPECT_NE(s.message().find("num_kv_heads must be >= 1 and divide num_heads 4"),
              std::string::npos)
        << s;
  }
}

TEST(ValidateAttentionOptions, UnscaledQueryIsForLinearWithoutQkNorm) {
  AttentionOptions o;
  o.module = "linear";
  o.unscaled_query = true;
  EXPECT_TRUE(ValidateAttentionOptions(o).ok());
  for (const char* other : {"softmax", "softmax_norm", "taylor", "taylor_norm"}) {
    o.module = other;
    absl::Status s = ValidateAttentionOptions(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << other;
    EXPECT_NE(s.message().find("attention.unscaled_query applies to module 'linear' only"),
              std::string::npos)
        << s;
    EXPECT_NE(s.message().find(absl::StrCat("module '", other, "'")), std::string::npos) << s;
  }
  o.module = "linear";
  o.qk_norm = true;
  absl::Status s = ValidateAttentionOptions(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("attention.unscaled_query"), std::string::npos) << s;
  EXPECT_NE(s.message().find("attention.qk_norm"), std::string::npos) << s;
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

TEST(HeadDecays, ArePerKvHead) {
  AttentionOptions o = Taylor(2);  // 4 query heads on 2 KV heads: horizons 32, 64
  o.num_kv_heads = 2;
  o.decay_horizon = 64;
  const std::vector<float> g = HeadDecays(o);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_FLOAT_EQ(g[0], 1 - 1.0f / 32);
  EXPECT_FLOAT_EQ(g[1], 1 - 1.0f / 64);
  // The shortest horizon is the first KV head's: 4 / 2 = 2 tokens passes, 3.9 fails.
  o.decay_horizon = 4;
  EXPECT_TRUE(ValidateAttentionOptions(o).ok());
  o.decay_horizon = 3.9f;
  absl::Status s = ValidateAttentionOptions(o);
  EXPECT_NE(s.message().find("first of 2 KV heads"), std::string::npos) << s;
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

TEST(StateBytesPerLayer, CountKvHeadsNotQueryHeads) {
  // 8 query heads of 16; 8, 4, 2 KV heads: the state shrinks by num_heads / num_kv_heads.
  for (const char* module : {"taylor", "taylor_norm", "linear", "softmax"}) {
    AttentionOptions o = Taylor(2);
    o.module = module;
    o.num_heads = 8;
    o.num_kv_heads = 8;
    const int64_t mha = StateBytesPerLayer(o, 4096);
    for (int kv : {4, 2}) {
      o.num_kv_heads = kv;
      EXPECT_EQ(StateBytesPerLayer(o, 4096) * (8 / kv), mha) << module << " " << kv;
    }
  }
  AttentionOptions t = Taylor(2);
  t.num_heads = 8;
  t.num_kv_heads = 2;
  EXPECT_EQ(StateBytesPerLayer(t, 0), 153 * 17 * 4 * 2);
  AttentionOptions s;
  s.num_heads = 8;
  s.num_kv_heads = 2;
  EXPECT_EQ(KvBytesPerToken(s), 32 * 4 * 2);
  // Both sides of the break-even shrink alike.
  EXPECT_EQ(BreakEvenContext(t), 82);
}

TEST(StateBytesPerLayer, Bf16StatesHalveFixedStatesOnly) {
  for (const char* module : {"taylor", "taylor_norm", "linear"}) {
    AttentionOptions o = Taylor(2);
    o.module = module;
    const int64_t fp32 = StateBytesPerLayer(o, 0);
    EXPECT_EQ(StateElementBytes(o), 4);
    o.state_bf16 = true;
    EXPECT_EQ(StateElementBytes(o), 2);
    EXPECT_EQ(2 * StateBytesPerLayer(o, 0), fp32) << module;
  }
  AttentionOptions t = Taylor(2);
  t.state_bf16 = true;
  EXPECT_EQ(StateBytesPerLayer(t, 0), 153 * 17 * 2 * 4);
  // The break-even context halves with the state: 153 * 17 * 2 / (32 * 4) = 40.6.
  EXPECT_EQ(BreakEvenContext(t), 41);
  // KV caches stay fp32.
  AttentionOptions s;
  s.state_bf16 = true;
  EXPECT_EQ(StateElementBytes(s), 4);
  EXPECT_EQ(StateBytesPerLayer(s, 1000), 1000 * 32 * 4 * 4);
  EXPECT_EQ(BreakEvenContext(s), 0);
  // The per-layer budget counts the bf16 bytes: order 4 at d 16 (4845 features) needs
  // 1,317,840 bytes in fp32, 658,920 in bf16.
  AttentionOptions big = Taylor(4, 16);
  big.max_state_bytes_per_layer = 1000000;
  EXPECT_FALSE(ValidateAttentionOptions(big).ok());
  big.state_bf16 = true;
  EXPECT_TRUE(ValidateAttentionOptions(big).ok());
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
