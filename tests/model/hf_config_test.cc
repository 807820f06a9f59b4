#include "server/model/hf_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace attnserve::model {
namespace {

using Json = nlohmann::json;

// What save_pretrained writes for a small LlamaForCausalLM (transformers 4.4x).
Json Llama() {
  return Json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02,
    "intermediate_size": 172, "max_position_embeddings": 512, "mlp_bias": false,
    "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
    "pretraining_tp": 1, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 10000.0,
    "tie_word_embeddings": true, "torch_dtype": "float32", "transformers_version": "4.44.0",
    "use_cache": true, "vocab_size": 320})");
}

absl::StatusOr<ModelConfig> Parse(const Json& j) { return ParseHfConfig(j.dump(), "dir-name"); }

std::string Refusal(const Json& j) {
  auto c = Parse(j);
  EXPECT_FALSE(c.ok()) << j.dump();
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(c.status().message());
}

TEST(HfConfig, ReadsLlamaConfigFields) {
  auto c = Parse(Llama());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "dir-name");
  EXPECT_EQ(c->vocab_size, 320);
  EXPECT_EQ(c->dim, 64);
  EXPECT_EQ(c->mlp_hidden, 172);
  EXPECT_EQ(c->num_layers, 2);
  EXPECT_EQ(c->attention.num_heads, 4);
  EXPECT_EQ(c->attention.num_kv_heads, 2);
  EXPECT_EQ(c->attention.head_dim, 16);  // hidden / heads
  EXPECT_EQ(c->attention.value_dim, 16);
  EXPECT_FLOAT_EQ(c->norm_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c->rope_theta, 10000.0f);
  EXPECT_EQ(c->max_context, 512);
  EXPECT_TRUE(c->tie_embeddings);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_ids, std::vector<int>{2});
  EXPECT_EQ(c->attention.module, "softmax");  // no "attention": softmax
  EXPECT_TRUE(c->tokenizer_class.empty());
}

TEST(HfConfig, ReadsDefaultsForAbsentOptionalFields) {
  Json j = Llama();
  for (const char* key : {"num_key_value_heads", "rms_norm_eps", "rope_theta",
                          "max_position_embeddings", "tie_word_embeddings", "bos_token_id",
                          "eos_token_id", "hidden_act", "attention_bias", "mlp_bias"}) {
    j.erase(key);
  }
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->attention.num_kv_heads, 4);
  EXPECT_FLOAT_EQ(c->norm_eps, 1e-6f);
  EXPECT_EQ(c->max_context, 2048);
  EXPECT_FALSE(c->tie_embeddings);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_ids, std::vector<int>{2});
  j.erase("hidden_size");
  EXPECT_EQ(Refusal(j), "hidden_size is missing");
}

TEST(HfConfig, ReadsRopeThetaInsideRopeParametersAndAnEosList) {
  Json j = Llama();
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  j["eos_token_id"] = {2, 7};
  j["bos_token_id"] = nullptr;
  j["head_dim"] = 16;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FLOAT_EQ(c->rope_theta, 500000.0f);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int>{2, 7}));
  EXPECT_EQ(c->bos_token_id, -1);
}

TEST(HfConfig, ReadsTheAttentionObjectNameMaxContextAndTokenizerClass) {
  Json j = Llama();
  j["attention"] = {{"module", "taylor"},      {"order", 4},          {"qk_norm", true},
                    {"qk_temperature", 2.5},   {"learn_temperature", true},
                    {"chunk_size", 32},        {"decay_horizon", 128.0}};
  j["name"] = "mine";
  j["max_context"] = 65536;
  j["tokenizer_class"] = "LlamaTokenizer";
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "mine");
  EXPECT_EQ(c->max_context, 65536);  // max_context overrides max_position_embeddings
  EXPECT_EQ(c->tokenizer_class, "LlamaTokenizer");
  EXPECT_EQ(c->attention.module, "taylor");
  EXPECT_EQ(c->attention.order, 4);
  EXPECT_TRUE(c->attention.qk_norm);
  EXPECT_FLOAT_EQ(c->attention.qk_temperature, 2.5f);
  EXPECT_TRUE(c->attention.learn_temperature);
  EXPECT_EQ(c->attention.chunk_size, 32);
  EXPECT_FLOAT_EQ(c->attention.decay_horizon, 128.0f);
}

TEST(HfConfig, MapsThePapersAttentionTypes) {
  Json j = Llama();
  j["attention_type"] = "softmax";
  EXPECT_EQ(Parse(j)->attention.module, "softmax");
  j["attention_type"] = "gated_softmax_no_gate_L2norm_nodivS_noclamp";
  EXPECT_EQ(Parse(j)->attention.module, "softmax_norm");
  j["attention_type"] = "linear_elu";
  auto linear = Parse(j);
  ASSERT_TRUE(linear.ok()) << linear.status();
  EXPECT_EQ(linear->attention.module, "linear");
  EXPECT_TRUE(linear->attention.unscaled_query);
  j["attention_type"] = "gated_softmax_clamp";
  EXPECT_EQ(Refusal(j),
            "attention_type 'gated_softmax_clamp' is not served; served: softmax, "
            "gated_softmax_no_gate_L2norm_nodivS_noclamp (as softmax_norm), linear_elu (as "
            "linear with unscaled_query)");
}

TEST(HfConfig, RefusesWhatItDoesNotImplementNamingTheField) {
  Json j = Llama();
  j["attention_bias"] = true;
  EXPECT_EQ(Refusal(j),
            "attention_bias is true: biases are not supported (attnserve's projections have none, "
            "except Qwen2's on q, k and v)");
  j = Llama();
  j["mlp_bias"] = true;
  EXPECT_NE(Refusal(j).find("mlp_bias is true"), std::string::npos);
  j = Llama();
  j["hidden_act"] = "gelu";
  EXPECT_EQ(Refusal(j), "hidden_act 'gelu' is not supported: attnserve's MLP is SwiGLU with silu");
  j = Llama();
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(Refusal(j),
            "rope_scaling.rope_type \"linear\" is not supported: attnserve implements plain "
            "RoPE (rope_type \"default\") only");
  j["rope_scaling"] = {{"factor", 2.0}};
  EXPECT_NE(Refusal(j).find("rope_scaling is not supported"), std::string::npos);
  j = Llama();
  j["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}};
  EXPECT_NE(Refusal(j).find("rope_parameters.rope_type \"llama3\" is not supported"),
            std::string::npos);
  j = Llama();
  j["sliding_window"] = 4096;
  EXPECT_EQ(Refusal(j), "sliding_window 4096 is not supported: attnserve's attention sees the "
                        "whole context");
  j["sliding_window"] = nullptr;
  EXPECT_TRUE(Parse(j).ok());
  j = Llama();
  j["attention"] = {{"module", "taylor"}, {"oder", 2}};
  EXPECT_NE(Refusal(j).find("attention.oder is not an attention field (known: module, order"),
            std::string::npos);
  j = Llama();
  j["attention"] = {{"module", "taylor"}, {"order", "two"}};
  EXPECT_EQ(Refusal(j), "attention.order must be an integer, got \"two\"");
  j = Llama();
  j["hidden_size"] = 64.5;
  EXPECT_EQ(Refusal(j), "hidden_size must be an integer, got 64.5");
  j = Llama();
  j["tie_word_embeddings"] = "yes";
  EXPECT_EQ(Refusal(j), "tie_word_embeddings must be true or false, got \"yes\"");
  j = Llama();
  j["num_key_value_heads"] = 3;
  EXPECT_EQ(Refusal(j), "num_key_value_heads must divide num_attention_heads 4, got 3");
  j = Llama();
  j["eos_token_id"] = "</s>";
  EXPECT_NE(Refusal(j).find("eos_token_id must be an integer or a list of integers"),
            std::string::npos);
  j = Llama();
  j["attention"] = {{"module", "flash"}};
  EXPECT_NE(Refusal(j).find("flash"), std::string::npos);  // ValidateAttentionOptions
  EXPECT_NE(ParseHfConfig("{\"a\": ", "x").status().message().find("not valid JSON"),
            std::string::npos);
}

TEST(HfConfig, WriterReadsBackToTheSameConfig) {
  ModelConfig c;
  c.name = "kjv-x";
  c.dim = 96;
  c.attention.num_heads = 6;
  c.attention.num_kv_heads = 6;
  c.attention.head_dim = 16;
  c.attention.value_dim = 16;
  c.attention.module = "taylor";
  c.attention.order = 2;
  c.attention.decay_horizon = 128;
  c.norm_eps = 1e-5f;
  c.max_context = 65536;
  c.tokenizer_class = kByteTokenizerClass;
  const std::string text = HfConfigToJson(c);
  const Json j = Json::parse(text);
  EXPECT_EQ(j["architectures"], Json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(j["model_type"], "llama");
  EXPECT_EQ(j["rms_norm_eps"].dump(), "1e-05");  // the float's shortest decimal
  EXPECT_EQ(j["eos_token_id"], 257);
  EXPECT_EQ(j["tokenizer_class"], "AttnServeByteTokenizer");
  EXPECT_EQ(j["max_position_embeddings"], 65536);
  auto back = ParseHfConfig(text, "other");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->name, "kjv-x");
  EXPECT_EQ(ModelConfigToText(*back), ModelConfigToText(c));
  EXPECT_EQ(back->tokenizer_class, c.tokenizer_class);
  EXPECT_EQ(back->max_context, 65536);

  c.tie_embeddings = true;
  c.bos_token_id = -1;
  c.eos_token_ids = {2, 3};
  back = ParseHfConfig(HfConfigToJson(c), "other");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->tie_embeddings);
  EXPECT_EQ(back->bos_token_id, -1);
  EXPECT_EQ(back->eos_token_ids, (std::vector<int>{2, 3}));
  EXPECT_EQ(ModelConfigToText(*back), ModelConfigToText(c));
}

// The recurrent families (hf_config.h): what a real directory's config.json carries, the
// defaults of their configuration classes where it does not.
TEST(HfConfig, ReadsMamba2WithPythonsInfinity) {
  // As Python's json writes Mamba2Config (time_step_limit (0.0, inf)): not JSON until read.
  const std::string text = R"({"model_type": "mamba2", "vocab_size": 320, "hidden_size": 64,
      "num_hidden_layers": 3, "num_heads": 8, "head_dim": 16, "expand": 2, "state_size": 16,
      "n_groups": 1, "conv_kernel": 4, "time_step_limit": [0.0, Infinity],
      "layer_norm_epsilon": 1e-05, "name": "with \"Infinity\" and NaN inside a string"})";
  auto c = ParseHfConfig(text, "dir");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "with \"Infinity\" and NaN inside a string");
  EXPECT_EQ(c->mixers, std::vector<std::string>(3, kMamba2Mixer));
  EXPECT_FALSE(c->mlp);
  EXPECT_FALSE(c->rope);
  EXPECT_FALSE(c->tie_embeddings);  // Mamba2Config's default
  EXPECT_EQ(c->ssm_inner, 128);
  EXPECT_EQ(c->ssm_heads, 8);
  EXPECT_EQ(c->ssm_state, 16);
  EXPECT_EQ(c->ssm_groups, 1);
  EXPECT_EQ(c->conv_kernel, 4);
  EXPECT_EQ(c->bos_token_id, 0);  // Mamba2Config's ids
  HfLayout layout;
  ASSERT_TRUE(ParseHfConfig(text, "dir", &layout).ok());
  EXPECT_EQ(layout.model_type, "mamba2");
  EXPECT_TRUE(layout.conv_bias);  // use_conv_bias defaults to true
  // n_groups absent is Mamba2Config's 8: refused like any other count but 1.
  Json j = Json::parse(R"({"model_type": "mamba2", "vocab_size": 320, "hidden_size": 64,
      "num_hidden_layers": 1, "num_heads": 8, "head_dim": 16})");
  EXPECT_NE(Refusal(j).find("n_groups 8 is not supported"), std::string::npos);
  j["n_groups"] = 1;
  j["head_dim"] = 32;
  EXPECT_NE(Refusal(j).find("head_dim 32 x num_heads 8 is not the inner width 128"),
            std::string::npos);
  j["head_dim"] = 16;
  j["time_step_limit"] = Json::array({0.0, 100.0});
  EXPECT_NE(Refusal(j).find("time_step_limit [0.0,100.0] is not supported"), std::string::npos);
}

TEST(HfConfig, ReadsGraniteMoeHybridDense) {
  Json j = Json::parse(R"({"model_type": "granitemoehybrid", "vocab_size": 320,
      "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
      "num_key_value_heads": 2, "shared_intermediate_size": 96, "num_local_experts": 0,
      "layer_types": ["mamba", "attention", "mamba"], "mamba_n_heads": 8,
      "mamba_d_head": "auto", "mamba_d_state": 16, "mamba_conv_bias": false,
      "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "logits_scaling": 6.0,
      "attention_multiplier": 0.015625, "position_embedding_type": "nope"})");
  HfLayout layout;
  auto c = ParseHfConfig(j.dump(), "dir", &layout);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->mixers, (std::vector<std::string>{kMamba2Mixer, kAttentionMixer, kMamba2Mixer}));
  EXPECT_TRUE(c->mlp);
  EXPECT_EQ(c->mlp_hidden, 96);
  EXPECT_FALSE(c->rope);
  EXPECT_EQ(c->ssm_inner, 128);  // mamba_expand 2 (its default) x 64
  EXPECT_EQ(c->ssm_heads, 8);
  EXPECT_EQ(c->conv_kernel, 4);  // mamba_d_conv's default
  EXPECT_FLOAT_EQ(c->embedding_scale, 12.0f);
  EXPECT_FLOAT_EQ(c->residual_scale, 0.22f);
  EXPECT_FLOAT_EQ(c->logit_scale, 6.0f);
  EXPECT_FLOAT_EQ(c->attention_scale, 0.015625f);
  EXPECT_FLOAT_EQ(c->norm_eps, 1e-6f);  // rms_norm_eps's default
  EXPECT_FALSE(layout.conv_bias);
  j["position_embedding_type"] = "rope";
  EXPECT_TRUE(ParseHfConfig(j.dump(), "dir")->rope);
  j.erase("layer_types");  // absent: every layer mamba
  EXPECT_EQ(ParseHfConfig(j.dump(), "dir")->mixers, std::vector<std::string>(3, kMamba2Mixer));
  j.erase("num_local_experts");  // absent: GraniteMoeHybridConfig's 8 experts
  EXPECT_NE(Refusal(j).find("num_local_experts 8: mixtures of experts are not supported"),
            std::string::npos);
}

TEST(HfConfig, ReadsLfm2) {
  Json j = Json::parse(R"({"model_type": "lfm2", "vocab_size": 320, "hidden_size": 64,
      "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
      "block_ff_dim": 6656, "block_multiple_of": 256, "block_ffn_dim_multiplier": 1.0,
      "conv_L_cache": 3, "layer_types": ["conv", "full_attention", "conv", "conv"],
      "rope_theta": 1000000.0, "norm_eps": 1e-05})");
  auto c = ParseHfConfig(j.dump(), "dir");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->mixers, (std::vector<std::string>{kShortConvMixer, kAttentionMixer,
                                                 kShortConvMixer, kShortConvMixer}));
  EXPECT_EQ(c->mlp_hidden, 4608);  // LFM2-350M's: 2/3 of 6656 = 4437, up to a multiple of 256
  EXPECT_TRUE(c->qk_head_norm);
  EXPECT_TRUE(c->tie_embeddings);  // Lfm2Config's default
  EXPECT_EQ(c->conv_kernel, 3);
  EXPECT_FLOAT_EQ(c->rope_theta, 1e6f);
  // A null multiplier skips the multiplier and the rounding, as Lfm2MLP does.
  j["block_ffn_dim_multiplier"] = nullptr;
  EXPECT_EQ(ParseHfConfig(j.dump(), "dir")->mlp_hidden, 4437);
  j["block_auto_adjust_ff_dim"] = false;
  EXPECT_EQ(ParseHfConfig(j.dump(), "dir")->mlp_hidden, 6656);
  // full_attn_idxs in place of layer_types; neither: every layer attention.
  j.erase("layer_types");
  j["full_attn_idxs"] = Json::array({1, 3});
  EXPECT_EQ(ParseHfConfig(j.dump(), "dir")->mixers,
            (std::vector<std::string>{kShortConvMixer, kAttentionMixer, kShortConvMixer,
                                      kAttentionMixer}));
  j.erase("full_attn_idxs");
  EXPECT_TRUE(ParseHfConfig(j.dump(), "dir")->mixers.empty());
  j["conv_bias"] = true;
  EXPECT_NE(Refusal(j).find("conv_bias is true"), std::string::npos);
}

}  // namespace
}  // namespace attnserve::model
