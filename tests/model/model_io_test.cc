// Model::Load / Save on Hugging Face model directories (server/model/model_io.cc).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "server/model/hf_config.h"
#include "server/model/model.h"
#include "server/model/safetensors.h"

namespace attnserve::model {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

ModelConfig Small(const std::string& module) {
  ModelConfig c;
  c.name = "small";
  c.dim = 32;
  c.num_layers = 2;
  c.mlp_hidden = 64;
  c.attention.module = module;
  c.attention.num_heads = 2;
  c.attention.num_kv_heads = 2;
  c.attention.head_dim = 16;
  c.attention.value_dim = 16;
  c.tokenizer_class = kByteTokenizerClass;
  return c;
}

at::Tensor Ids() {
  const std::string s = "In the beginning God created the heaven";
  return at::tensor(std::vector<int64_t>(s.begin(), s.end()), at::kLong).unsqueeze(0);
}

double MaxAbsDiff(const Model& a, const Model& b) {
  return (a.Forward(Ids()) - b.Forward(Ids())).abs().max().item<double>();
}

// A directory's tensors as (shape, fp32 values) by name.
using Tensors = std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>>;

class ModelDir : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("attnserve_model_io_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }

  Tensors Read() const {
    auto reader = SafetensorsReader::OpenDir(dir());
    EXPECT_TRUE(reader.ok()) << reader.status();
    Tensors out;
    for (const SafetensorsEntry& e : (*reader)->tensors()) {
      out[e.name] = {e.shape, ToFloat32(e).value()};
    }
    return out;
  }
  void Write(const Tensors& tensors, SafetensorsDtype dtype = SafetensorsDtype::kF32) const {
    std::vector<SafetensorsTensor> views;
    for (const auto& [name, t] : tensors) views.push_back({name, t.first, t.second.data()});
    ASSERT_TRUE(WriteSafetensors(dir() + "/" + kSafetensorsFile, views, dtype).ok());
  }
  Json Config() const {
    std::ifstream f(dir_ / kHfConfigFile);
    return Json::parse(f);
  }
  void SetConfig(const Json& j) const { std::ofstream(dir_ / kHfConfigFile) << j.dump(2); }
  std::string LoadError() const {
    auto m = Model::Load(dir());
    EXPECT_FALSE(m.ok());
    return m.ok() ? "" : std::string(m.status().message());
  }

  fs::path dir_;
};

TEST_F(ModelDir, SavesHuggingFaceNamesAndLoadsTheSameModel) {
  ModelConfig c = Small("taylor");
  c.attention.qk_norm = true;
  c.attention.learn_temperature = true;
  auto model = Model::Create(c, 3).value();
  ASSERT_TRUE(model->Save(dir()).ok());
  std::vector<std::string> names;
  for (const auto& [name, t] : Read()) names.push_back(name);
  std::vector<std::string> expected = {"lm_head.weight", "model.embed_tokens.weight",
                                       "model.norm.weight"};
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* n : {"input_layernorm.weight", "mlp.down_proj.weight", "mlp.gate_proj.weight",
                          "mlp.up_proj.weight", "post_attention_layernorm.weight",
                          "self_attn.k_proj.weight", "self_attn.o_proj.weight",
                          "self_attn.q_proj.weight", "self_attn.temperature",
                          "self_attn.v_proj.weight"}) {
      expected.push_back(p + n);
    }
  }
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(names, expected);
  auto loaded = Model::Load(dir());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(MaxAbsDiff(*model, **loaded), 0.0);
  EXPECT_EQ((*loaded)->Fingerprint(), model->Fingerprint());
  EXPECT_EQ((*loaded)->config().tokenizer_class, kByteTokenizerClass);
}

TEST_F(ModelDir, TiedHeadIsTheEmbeddingStoredOnce) {
  ModelConfig c = Small("linear");
  c.tie_embeddings = true;
  auto model = Model::Create(c, 4).value();
  for (const auto& [name, t] : model->NamedParameters()) EXPECT_NE(name, "head");
  EXPECT_EQ(model->ParameterCount(), ParameterCount(c));
  EXPECT_EQ(ParameterCount(c), ParameterCount(Small("linear")) - 259 * 32);
  ASSERT_TRUE(model->Save(dir()).ok());
  EXPECT_EQ(Read().count("lm_head.weight"), 0u);
  EXPECT_EQ(Config()["tie_word_embeddings"], true);
  auto loaded = Model::Load(dir());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(MaxAbsDiff(*model, **loaded), 0.0);
  EXPECT_EQ((*loaded)->Fingerprint(), model->Fingerprint());
  // One tensor: changing the embedding changes the head's logits too.
  at::Tensor before = (*loaded)->Forward(Ids());
  for (auto& [name, t] : (*loaded)->NamedParameters()) {
    if (name == "embed") t.select(0, 65).mul_(3);  // 'A' (not in the input)
  }
  at::Tensor after = (*loaded)->Forward(Ids());
  EXPECT_GT((after - before).select(2, 65).abs().max().item<double>(), 1e-4);

  // Untied without lm_head.weight: missing.
  Json j = Config();
  j["tie_word_embeddings"] = false;
  SetConfig(j);
  EXPECT_NE(LoadError().find("tensor 'lm_head.weight' is missing (the config needs shape "
                             "[259, 32])"),
            std::string::npos);
}

// A checkpoint as the paper's code saves it: attention_type instead of "attention", no
// attnserve keys, a positional buffer per layer and RoPE's inv_freq, bf16 weights.
TEST_F(ModelDir, LoadsAPaperStyleDirectorySkippingBuffersThatAreNotWeights) {
  auto model = Model::Create(Small("softmax_norm"), 5).value();
  ASSERT_TRUE(model->Save(dir()).ok());
  Tensors t = Read();
  for (int l = 0; l < 2; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    t[p + "abs_pos_enc.pe"] = {{1, 8, 32}, std::vector<float>(8 * 32, 0.5f)};
    t[p + "rotary_emb.inv_freq"] = {{8}, std::vector<float>(8, 1.0f)};
  }
  Write(t, SafetensorsDtype::kBF16);
  Json j = Config();
  for (const char* key : {"attention", "name", "tokenizer_class"}) j.erase(key);
  j["attention_type"] = "gated_softmax_no_gate_L2norm_nodivS_noclamp";
  j["torch_dtype"] = "bfloat16";
  SetConfig(j);
  testing::internal::CaptureStderr();
  auto loaded = Model::Load(dir());
  const std::string log = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->config().attention.module, "softmax_norm");
  EXPECT_EQ((*loaded)->config().name, dir_.filename().string());
  EXPECT_NE(log.find("ignored 4 tensors that are not weights: "
                     "model.layers.0.self_attn.abs_pos_enc.pe, "
                     "model.layers.0.self_attn.rotary_emb.inv_freq, "
                     "model.layers.1.self_attn.abs_pos_enc.pe"),
            std::string::npos)
      << log;
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;
  // bf16 weights: the same model up to bf16 rounding of each weight.
  const double diff = MaxAbsDiff(*model, **loaded);
  EXPECT_GT(diff, 0.0);
  EXPECT_LT(diff, 0.05);
}

TEST_F(ModelDir, LoadsShardsThroughTheIndex) {
  auto model = Model::Create(Small("taylor"), 6).value();
  ASSERT_TRUE(model->Save(dir()).ok());
  Tensors all = Read();
  fs::remove(dir_ / kSafetensorsFile);
  Json index = {{"metadata", Json::object()}, {"weight_map", Json::object()}};
  std::vector<SafetensorsTensor> shard[2];
  int i = 0;
  for (const auto& [name, t] : all) {
    const int s = i++ % 2;
    shard[s].push_back({name, t.first, t.second.data()});
    index["weight_map"][name] = "model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
  }
  for (int s = 0; s < 2; ++s) {
    ASSERT_TRUE(WriteSafetensors(dir() + "/model-0000" + std::to_string(s + 1) +
                                     "-of-00002.safetensors",
                                 shard[s], SafetensorsDtype::kF32)
                    .ok());
  }
  std::ofstream(dir_ / kSafetensorsIndexFile) << index.dump();
  auto loaded = Model::Load(dir());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(MaxAbsDiff(*model, **loaded), 0.0);
}

TEST_F(ModelDir, RefusesMissingMisshapenAndUnknownTensorsNamingThem) {
  EXPECT_NE(LoadError().find("cannot open model config"), std::string::npos);
  auto model = Model::Create(Small("linear"), 7).value();
  ASSERT_TRUE(model->Save(dir()).ok());
  const Tensors good = Read();

  Tensors t = good;
  t.erase("model.layers.1.mlp.up_proj.weight");
  Write(t);
  EXPECT_NE(LoadError().find("tensor 'model.layers.1.mlp.up_proj.weight' is missing (the config "
                             "needs shape [64, 32])"),
            std::string::npos);

  t = good;
  t["model.layers.0.self_attn.k_proj.weight"] = {{16, 32}, std::vector<float>(16 * 32)};
  Write(t);
  EXPECT_NE(LoadError().find("tensor 'model.layers.0.self_attn.k_proj.weight' has shape "
                             "[16, 32], the config needs [32, 32]"),
            std::string::npos);

  t = good;
  t["model.layers.0.self_attn.q_proj.bias"] = {{32}, std::vector<float>(32)};
  Write(t);
  EXPECT_NE(LoadError().find("tensor 'model.layers.0.self_attn.q_proj.bias' is not a parameter "
                             "of this model"),
            std::string::npos);

  Write(good);
  Json j = Config();
  // Biases are Qwen2's only (on q, k, v); a Llama's attention_bias would put one on
  // o_proj too, and biases on the MLP are refused as well.
  j["attention_bias"] = true;
  SetConfig(j);
  const std::string bias = LoadError();
  EXPECT_NE(bias.find("config.json: attention_bias is true"), std::string::npos) << bias;
  j["attention_bias"] = false;
  j["mlp_bias"] = true;
  SetConfig(j);
  const std::string mlp_bias = LoadError();
  EXPECT_NE(mlp_bias.find("config.json: mlp_bias is true"), std::string::npos) << mlp_bias;
  j["mlp_bias"] = false;
  j["attention"]["module"] = "flash";
  SetConfig(j);
  EXPECT_NE(LoadError().find("flash"), std::string::npos);
}

TEST_F(ModelDir, TakesTheVocabularyFromTheEmbeddingRows) {
  auto model = Model::Create(Small("taylor"), 8).value();
  ASSERT_TRUE(model->Save(dir()).ok());
  Json j = Config();
  j["vocab_size"] = 300;  // configs pad or add tokens; the weights say 259
  SetConfig(j);
  testing::internal::CaptureStderr();
  auto loaded = Model::Load(dir());
  const std::string log = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->config().vocab_size, 259);
  EXPECT_NE(log.find("config.json says vocab_size 300, the embedding has 259 rows"),
            std::string::npos)
      << log;
}

}  // namespace
}  // namespace attnserve::model
