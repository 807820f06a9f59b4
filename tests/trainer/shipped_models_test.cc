// Every model shipped in deploy/models/ loads, and its validation loss on the fixed
// windows its report.txt describes matches the figure recorded there within 1%. The
// default (kjv-taylor2-decay) also meets its bits/byte target along the context.
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

// The default (kjv-taylor2-decay, deploy/models/train_default.sh): at most 1.50 bits/byte
// on its 512-byte validation windows, and through the serving path (Model::Prefill, the
// chunked recurrent form) it uses its context inside the training window (128-512 better
// than 0-128, at most 1.50 bits) and holds it past the window: the 1k-4k bucket at most
// 5% above 128-512 (issue 13's target; the full 13 x 16k table is in
// deploy/models/README.md).
TEST(ShippedModels, DefaultHoldsItsLossPastItsTrainingWindow) {
  const fs::path dir = fs::path(ATTNSERVE_MODELS_DIR) / "kjv-taylor2-decay";
  ASSERT_TRUE(fs::exists(dir / "report.txt")) << "the default model is not shipped";
  auto kv = ReadReport(dir / "report.txt");
  EXPECT_EQ(kv.at("seq_len"), "512");
  EXPECT_LE(std::stod(kv.at("val_bpb")), 1.50);
  auto model = model::Model::Load(dir.string());
  ASSERT_TRUE(model.ok()) << model.status();
  auto corpus = LoadCorpus(ATTNSERVE_CORPUS, 4097);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  // Eight 4k stretches, each fed continuously into one session.
  auto b = PositionBuckets::Create({0, 128, 512, 1024, 4096}).value();
  PositionEvalOptions o;
  o.length = 4096;
  o.stretches = 8;
  ASSERT_TRUE(LossByPosition(**model, corpus->validation, o, {&b}).ok());
  const double bits = 1.0 / std::log(2.0);
  const double ratio = b.mean(3) / b.mean(1);
  std::printf("kjv-taylor2-decay: bits/byte 0-128 %.3f, 128-512 %.3f, 512-1k %.3f, 1k-4k "
              "%.3f; 1k-4k / 128-512 = %.3f\n",
              b.mean(0) * bits, b.mean(1) * bits, b.mean(2) * bits, b.mean(3) * bits, ratio);
  testing::Test::RecordProperty("ratio_1k_4k_over_128_512", std::to_string(ratio));
  EXPECT_LT(b.mean(1), b.mean(0)) << "128-512 should beat 0-128: the model uses its context";
  EXPECT_LE(b.mean(1) * bits, 1.50) << "128-512 bits/byte";
  EXPECT_LE(ratio, 1.05) << "1k-4k against 128-512: the model breaks past its window";
}

// The default served from bf16 weights (--weights_bf16): 400 bytes of validation text fed
// one token a step into a session of each (the bf16 kernel runs for steps of one row);
// the logits stay within 0.1 of fp32's everywhere and pick the same most likely next
// byte at least 99% of the time.
TEST(ShippedModels, DefaultWithBf16WeightsDecodesLikeFp32) {
  const std::string dir = (fs::path(ATTNSERVE_MODELS_DIR) / "kjv-taylor2-decay").string();
  auto fp32 = model::Model::Load(dir);
  model::LoadOptions o;
  o.weights_bf16 = true;
  auto bf16 = model::Model::Load(dir, o);
  ASSERT_TRUE(fp32.ok() && bf16.ok()) << fp32.status() << " " << bf16.status();
  ASSERT_TRUE((*bf16)->UsesBf16Weights());
  auto corpus = LoadCorpus(ATTNSERVE_CORPUS, 401);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  auto s32 = (*fp32)->NewState(), s16 = (*bf16)->NewState();
  model::DecodeState* one32[] = {s32.get()};
  model::DecodeState* one16[] = {s16.get()};
  double worst = 0;
  int same = 0;
  const int steps = 400;
  for (int i = 0; i < steps; ++i) {
    const int32_t token = static_cast<unsigned char>(corpus->validation[i]);
    auto l32 = (*fp32)->Step(one32, {token});
    auto l16 = (*bf16)->Step(one16, {token});
    ASSERT_TRUE(l32.ok() && l16.ok());
    worst = std::max(worst, (*l16 - *l32).abs().max().item<double>());
    same += l16->argmax().item<int64_t>() == l32->argmax().item<int64_t>();
  }
  std::printf("kjv-taylor2-decay bf16 against fp32 over %d steps: max |logit difference| "
              "%.4f, same argmax %d\n", steps, worst, same);
  EXPECT_LE(worst, 0.1);
  EXPECT_GE(same, steps * 99 / 100);
}

}  // namespace
}  // namespace attnserve::trainer
