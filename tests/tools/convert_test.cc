#include "server/tools/convert.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "server/model/model.h"
#include "server/tools/legacy_weights.h"

namespace attnserve::tools {
namespace {

namespace fs = std::filesystem;

class Convert : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("attnserve_convert_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "old");
  }
  void TearDown() override { fs::remove_all(dir_); }
  // An old-layout directory (config.pbtxt + weights.bin) of `config` with seed `seed`.
  std::unique_ptr<model::Model> WriteOld(const model::ModelConfig& config, uint64_t seed) {
    auto m = model::Model::Create(config, seed).value();
    std::ofstream(dir_ / "old" / "config.pbtxt") << model::ModelConfigToText(config);
    EXPECT_TRUE(WriteTensors((dir_ / "old" / "weights.bin").string(), m->NamedParameters()).ok());
    return m;
  }
  fs::path dir_;
};

model::ModelConfig Old(const std::string& module) {
  model::ModelConfig c;  // as the old ParseModelConfig gave it
  c.name = "old-" + module;
  c.dim = 32;
  c.num_layers = 2;
  c.mlp_hidden = 64;
  c.max_context = 65536;
  c.attention.module = module;
  c.attention.order = module == "taylor" ? 2 : 0;
  c.attention.num_heads = 2;
  c.attention.num_kv_heads = 2;
  c.attention.head_dim = 16;
  c.attention.value_dim = 16;
  c.attention.qk_norm = true;
  c.attention.learn_temperature = true;
  return c;
}

// The converted directory is the same model: fingerprint (so saved sessions stay valid)
// and logits (Forward on the same text) equal, max difference 0.
TEST_F(Convert, WritesTheSameModelInTheNewLayout) {
  for (const char* module : {"taylor", "softmax"}) {
    auto old = WriteOld(Old(module), 11);
    auto report = ConvertLegacyModelDir((dir_ / "old").string(), (dir_ / "new").string());
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(report->name, std::string("old-") + module);
    EXPECT_EQ(report->fingerprint_before, report->fingerprint_after);
    EXPECT_EQ(report->max_logit_difference, 0.0);
    EXPECT_TRUE(fs::exists(dir_ / "new" / "config.json"));
    EXPECT_TRUE(fs::exists(dir_ / "new" / "model.safetensors"));
    auto loaded = model::Model::Load((dir_ / "new").string());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ((*loaded)->Fingerprint(), old->Fingerprint());
    EXPECT_EQ((*loaded)->config().tokenizer_class, model::kByteTokenizerClass);
    EXPECT_EQ((*loaded)->config().max_context, 65536);
    const std::string s = "And God said, Let there be light";
    at::Tensor ids = at::tensor(std::vector<int64_t>(s.begin(), s.end()), at::kLong).unsqueeze(0);
    EXPECT_EQ((old->Forward(ids) - (*loaded)->Forward(ids)).abs().max().item<double>(), 0.0);
  }
}

TEST_F(Convert, RefusesAnOldDirectoryWhoseWeightsDoNotFit) {
  EXPECT_EQ(ConvertLegacyModelDir((dir_ / "old").string(), (dir_ / "new").string())
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  WriteOld(Old("taylor"), 1);
  model::ModelConfig wider = Old("taylor");
  wider.mlp_hidden = 96;
  std::ofstream(dir_ / "old" / "config.pbtxt") << model::ModelConfigToText(wider);
  auto report = ConvertLegacyModelDir((dir_ / "old").string(), (dir_ / "new").string());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(report.status().message().find("w_gate"), std::string::npos) << report.status();
  EXPECT_FALSE(fs::exists(dir_ / "new"));
}

}  // namespace
}  // namespace attnserve::tools
