#include "server/model/config.h"

#include <gtest/gtest.h>

namespace attnserve::model {
namespace {

constexpr char kValid[] = R"pb(
  name: "tiny"
  vocab_size: 260
  dim: 32
  num_layers: 2
  num_heads: 2
  head_dim: 16
  mlp_hidden: 96
  attention { module: "taylor" order: 2 chunk_size: 32 }
)pb";

std::string Message(std::string_view text) {
  auto c = ParseModelConfig(text);
  EXPECT_FALSE(c.ok()) << text;
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(ParseModelConfig, ReadsFieldsAndDefaults) {
  auto c = ParseModelConfig(kValid);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "tiny");
  EXPECT_EQ(c->dim, 32);
  EXPECT_EQ(c->attention.module, "taylor");
  EXPECT_EQ(c->attention.order, 2);
  EXPECT_EQ(c->attention.num_heads, 2);
  EXPECT_EQ(c->attention.value_dim, 16);
  EXPECT_EQ(c->attention.chunk_size, 32);
  EXPECT_FLOAT_EQ(c->rope_theta, 10000.0f);  // omitted -> default
  EXPECT_EQ(c->max_context, int64_t{1} << 20);
}

TEST(ParseModelConfig, TextRoundTrips) {
  auto c = ParseModelConfig(kValid);
  ASSERT_TRUE(c.ok());
  auto again = ParseModelConfig(ModelConfigToText(*c));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(ModelConfigToText(*again), ModelConfigToText(*c));
}

TEST(ParseModelConfig, DecayHorizonReadsAndRoundTrips) {
  std::string text(kValid);
  const size_t at = text.find("chunk_size");
  ASSERT_NE(at, std::string::npos) << text;
  text.insert(at, "decay_horizon: 64 ");
  auto c = ParseModelConfig(text);
  ASSERT_TRUE(c.ok()) << c.status() << "\n" << text;
  EXPECT_FLOAT_EQ(c->attention.decay_horizon, 64);
  auto again = ParseModelConfig(ModelConfigToText(*c));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FLOAT_EQ(again->attention.decay_horizon, 64);
  auto plain = ParseModelConfig(kValid);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->attention.decay_horizon, 0);  // omitted: no decay
}

TEST(ParseModelConfig, RejectsMalformedTextWithLocation) {
  const std::string m = Message("dim: 32\nnum_layers: two\n");
  EXPECT_NE(m.find("line 2"), std::string::npos) << m;
  EXPECT_NE(Message("no_such_field: 1").find("no_such_field"), std::string::npos);
}

TEST(ParseModelConfig, RejectsInconsistentShapesNamingTheField) {
  std::string text = kValid;
  text.replace(text.find("dim: 32"), 7, "dim: 0");
  EXPECT_NE(Message(text).find("dim must be >= 1, got 0"), std::string::npos);
  text = kValid;
  text.replace(text.find("vocab_size: 260"), 15, "vocab_size: 100");
  EXPECT_NE(Message(text).find("vocab_size"), std::string::npos);
  text = kValid;
  text.replace(text.find("num_layers: 2"), 13, "num_layers: 0");
  EXPECT_NE(Message(text).find("num_layers"), std::string::npos);
  text = kValid;
  text.replace(text.find("head_dim: 16"), 12, "head_dim: 15");
  EXPECT_NE(Message(text).find("head_dim"), std::string::npos);
}

TEST(ParseModelConfig, RejectsBadAttentionWithValidChoices) {
  std::string text = kValid;
  text.replace(text.find("\"taylor\""), 8, "\"mamba\"");
  const std::string m = Message(text);
  EXPECT_NE(m.find("unknown module 'mamba'"), std::string::npos) << m;
  EXPECT_NE(m.find("softmax, softmax_norm, taylor, taylor_norm, linear"), std::string::npos);
  text = kValid;
  text.replace(text.find("order: 2"), 8, "order: 3");
  EXPECT_NE(Message(text).find("odd"), std::string::npos);
  text = kValid;
  text.replace(text.find("attention {"), 11, "unused {");
  EXPECT_FALSE(ParseModelConfig(text).ok());
}

TEST(ParseModelConfig, HeadDimIsIndependentOfDim) {
  std::string text = kValid;
  text.replace(text.find("dim: 32"), 7, "dim: 48");  // 2 heads of 16 from a width of 48
  auto c = ParseModelConfig(text);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->dim, 48);
  EXPECT_EQ(c->attention.num_heads * c->attention.head_dim, 32);
}

TEST(ParseModelConfig, KvHeadsDefaultToTheQueryHeadsAndRoundTrip) {
  auto mha = ParseModelConfig(kValid);
  ASSERT_TRUE(mha.ok());
  EXPECT_EQ(mha->attention.num_kv_heads, 2);  // omitted: multi-head
  // Printed as 0 (omitted) when equal to num_heads: a multi-head config's text, and so
  // its model's fingerprint, is what it was before grouped-query attention.
  EXPECT_EQ(ModelConfigToText(*mha).find("num_kv_heads"), std::string::npos);
  EXPECT_EQ(ModelConfigToText(*mha).find("unscaled_query"), std::string::npos);
  std::string text = kValid;
  text.insert(text.find("head_dim"), "num_kv_heads: 1 ");
  auto gqa = ParseModelConfig(text);
  ASSERT_TRUE(gqa.ok()) << gqa.status();
  EXPECT_EQ(gqa->attention.num_kv_heads, 1);
  EXPECT_NE(ModelConfigToText(*gqa).find("num_kv_heads: 1"), std::string::npos);
  auto again = ParseModelConfig(ModelConfigToText(*gqa));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->attention.num_kv_heads, 1);
  EXPECT_EQ(ModelConfigToText(*again), ModelConfigToText(*gqa));
}

// deploy/models/kjv-linear/config.pbtxt as ModelConfigToText wrote it before
// grouped-query attention: the text is the fingerprint's input, so it must not change.
TEST(ModelConfigToText, MultiHeadTextIsUnchanged) {
  constexpr char kShipped[] = R"pb(name: "kjv-linear"
vocab_size: 259
dim: 64
num_layers: 2
num_heads: 4
head_dim: 16
mlp_hidden: 192
rope_theta: 10000
norm_eps: 1e-05
max_context: 65536
attention {
  module: "linear"
  chunk_size: 64
}
)pb";
  auto c = ParseModelConfig(kShipped);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->attention.num_kv_heads, 4);
  EXPECT_EQ(ModelConfigToText(*c), kShipped);
}

TEST(ParseModelConfig, RejectsKvHeadsThatDoNotDivideTheHeads) {
  std::string text = kValid;
  text.insert(text.find("head_dim"), "num_kv_heads: 3 ");
  std::string m = Message(text);
  EXPECT_NE(m.find("num_kv_heads must be >= 1 and divide num_heads 2"), std::string::npos) << m;
  text = kValid;
  text.insert(text.find("head_dim"), "num_kv_heads: -2 ");
  m = Message(text);
  EXPECT_NE(m.find("num_kv_heads must be >= 0"), std::string::npos) << m;
}

TEST(ParseModelConfig, UnscaledQueryReadsForLinearAndIsRefusedElsewhere) {
  std::string text = kValid;
  text.replace(text.find("module: \"taylor\""), 16, "module: \"linear\" unscaled_query: true");
  auto c = ParseModelConfig(text);
  ASSERT_TRUE(c.ok()) << c.status() << "\n" << text;
  EXPECT_TRUE(c->attention.unscaled_query);
  auto again = ParseModelConfig(ModelConfigToText(*c));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->attention.unscaled_query);
  text = kValid;
  text.insert(text.find("chunk_size"), "unscaled_query: true ");
  const std::string m = Message(text);
  EXPECT_NE(m.find("attention.unscaled_query applies to module 'linear' only"),
            std::string::npos)
      << m;
}

TEST(ParameterCount, CountsGroupedProjectionsAndAWidthOtherThanTheHeads) {
  std::string text = kValid;
  text.replace(text.find("dim: 32"), 7, "dim: 40");
  text.insert(text.find("head_dim"), "num_kv_heads: 1 ");
  auto c = ParseModelConfig(text);
  ASSERT_TRUE(c.ok()) << c.status();
  // wq, wo: (32, 40); wk, wv: (16, 40); 2 * 260 * 40 embedding + head; norms 2 * 40 + 40.
  const int64_t per_layer = 2 * 40 + 2 * 32 * 40 + 2 * 16 * 40 + 3 * 40 * 96;
  EXPECT_EQ(ParameterCount(*c), 2 * 260 * 40 + 2 * per_layer + 40);
}

TEST(ParameterCount, CountsEveryTensor) {
  auto c = ParseModelConfig(kValid);
  ASSERT_TRUE(c.ok());
  // 2 * 260 * 32 + 2 * (2*32 + 4*32*32 + 3*32*96) + 32
  EXPECT_EQ(ParameterCount(*c), 16640 + 2 * (64 + 4096 + 9216) + 32);
  c->tie_embeddings = true;  // the head is the embedding: counted once
  EXPECT_EQ(ParameterCount(*c), 8320 + 2 * (64 + 4096 + 9216) + 32);
}

// The tokenizer fields print only where they differ from the byte tokenizer's, so the
// text (and the fingerprint) of the models from before they existed is unchanged.
TEST(ModelConfigToText, PrintsTokenizerFieldsOnlyWhereTheyDifferFromTheByteModels) {
  auto c = ParseModelConfig(kValid);
  ASSERT_TRUE(c.ok());
  const std::string before = ModelConfigToText(*c);
  for (const char* field : {"tie_embeddings", "bos_token_id", "eos_token_ids", "tokenizer_class"}) {
    EXPECT_EQ(before.find(field), std::string::npos) << field;
  }
  c->tokenizer_class = kByteTokenizerClass;
  EXPECT_EQ(ModelConfigToText(*c), before);
  c->tie_embeddings = true;
  c->bos_token_id = 1;
  c->eos_token_ids = {2, 3};
  c->tokenizer_class = "LlamaTokenizer";
  auto again = ParseModelConfig(ModelConfigToText(*c));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->tie_embeddings);
  EXPECT_EQ(again->bos_token_id, 1);
  EXPECT_EQ(again->eos_token_ids, (std::vector<int>{2, 3}));
  EXPECT_EQ(again->tokenizer_class, "LlamaTokenizer");
  c->bos_token_id = -1;
  c->eos_token_ids.clear();  // none: written as [-1]
  again = ParseModelConfig(ModelConfigToText(*c));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->bos_token_id, -1);
  EXPECT_TRUE(again->eos_token_ids.empty());
  c->eos_token_ids = {300};
  EXPECT_EQ(ValidateModelConfig(*c).message(), "eos_token_ids must be in [0, vocab_size 260), got 300");
}

}  // namespace
}  // namespace attnserve::model
