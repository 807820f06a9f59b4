// attnserve_init_model run as a user runs it: flags in, model directory out. The written
// config.json is read as plain JSON (not through our own config reader), so a flag the
// tool drops shows up as the field a loader would see.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace {

namespace fs = std::filesystem;

class AttnserveInitModel : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("attnserve_init_model_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs the tool with `flags` into dir_/`name`; returns its exit status.
  int Run(const std::string& name, const std::string& flags) {
    const std::string command = std::string(ATTNSERVE_INIT_MODEL) + " --out=" +
                                (dir_ / name).string() + " --dim=32 --layers=1 " +
                                "--mlp_hidden=32 " + flags + " >/dev/null 2>&1";
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  // config.json of dir_/`name`.
  nlohmann::json Config(const std::string& name) {
    std::ifstream in(dir_ / name / "config.json");
    EXPECT_TRUE(in.good()) << "no config.json in " << (dir_ / name);
    return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  }
  fs::path dir_;
};

TEST_F(AttnserveInitModel, WritesKvHeadsFromTheFlag) {
  ASSERT_EQ(Run("gqa", "--heads=4 --kv_heads=2"), 0);
  const nlohmann::json config = Config("gqa");
  EXPECT_EQ(config.value("num_attention_heads", -1), 4);
  EXPECT_EQ(config.value("num_key_value_heads", -1), 2);
  EXPECT_EQ(config.value("head_dim", -1), 8);
}

TEST_F(AttnserveInitModel, KvHeadsDefaultToTheHeads) {
  ASSERT_EQ(Run("mha", "--heads=4"), 0);
  const nlohmann::json config = Config("mha");
  EXPECT_EQ(config.value("num_attention_heads", -1), 4);
  EXPECT_EQ(config.value("num_key_value_heads", -1), 4);
}

TEST_F(AttnserveInitModel, RefusesKvHeadsThatDoNotDivideTheHeads) {
  EXPECT_NE(Run("bad", "--heads=4 --kv_heads=3"), 0);
  EXPECT_FALSE(fs::exists(dir_ / "bad" / "config.json"));
}

}  // namespace
