// Every model shipped in deploy/models/ loads, and its validation loss on the fixed
// windows its report.txt describes matches the figure recorded there within 1%. The
// long-window default (kjv-taylor2-long) also meets the targets of issue 13.
#include <gtest/gtest.h>

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

// Until its training has finished (deploy/models/train_default.sh writes report.txt at
// the end) the default is not shipped and this test is skipped.
TEST(ShippedModels, LongWindowDefaultReachesItsTargetAndHoldsAlongTheContext) {
  const fs::path dir = fs::path(ATTNSERVE_MODELS_DIR) / "kjv-taylor2-long";
  if (!fs::exists(dir / "report.txt")) GTEST_SKIP() << "kjv-taylor2-long is still training";
  auto kv = ReadReport(dir / "report.txt");
  EXPECT_EQ(kv.at("seq_len"), "512");
  EXPECT_LE(std::stod(kv.at("val_bpb")), 1.50);
  auto model = model::Model::Load(dir.string());
  ASSERT_TRUE(model.ok()) << model.status();
  auto corpus = LoadCorpus(ATTNSERVE_CORPUS, 4097);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  // Four 4k stretches through the serving path: the 1k-4k bucket, 2-8x the training
  // window, within 5% of the 128-512 bucket.
  auto b = PositionBuckets::Create({0, 128, 512, 1024, 4096}).value();
  PositionEvalOptions o;
  o.length = 4096;
  o.stretches = 4;
  ASSERT_TRUE(LossByPosition(**model, corpus->validation, o, {&b}).ok());
  EXPECT_LE(b.mean(3), 1.05 * b.mean(1)) << "1k-4k " << b.mean(3) << " vs 128-512 " << b.mean(1);
}

}  // namespace
}  // namespace attnserve::trainer
