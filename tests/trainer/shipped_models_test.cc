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

// Recurrent states kept in bf16 (--state_bf16) against fp32, on the default and on the
// shipped fixed-state models without a decay (whose sums only grow, so bf16's 8
// significant bits keep less of each new token as the context lengthens):
//  - 768 bytes of validation text, the first 256 prefilled (chunked), then 512 steps of
//    one token (each step rounds the whole state): the default's logits stay within 0.5
//    of fp32's (measured 0.20 over the first 256 steps, 0.35 over 512; its logits span
//    about 32), its most likely next byte is the same at least 99% of the time, and its
//    bits/byte over the steps within 1% of fp32's;
//  - bits/byte along 4k-byte stretches fed through Model::Prefill (rounding once per
//    64-token chunk): within 1% of fp32's in each bucket for every model.
// Every figure is printed (tests/bench/README.md "bf16 states" quotes them).
TEST(ShippedModels, Bf16StatesDecodeLikeFp32) {
  auto corpus = LoadCorpus(ATTNSERVE_CORPUS, 4097);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  const double bits = 1.0 / std::log(2.0);
  for (const char* name : {"kjv-taylor2-decay", "kjv-taylor2", "kjv-linear", "kjv-taylor-norm4"}) {
    SCOPED_TRACE(name);
    const std::string dir = (fs::path(ATTNSERVE_MODELS_DIR) / name).string();
    auto fp32 = model::Model::Load(dir);
    model::LoadOptions o;
    o.state_bf16 = true;
    auto bf16 = model::Model::Load(dir, o);
    ASSERT_TRUE(fp32.ok() && bf16.ok()) << fp32.status() << " " << bf16.status();
    EXPECT_EQ(2 * (*bf16)->StateBytes(0), (*fp32)->StateBytes(0));
    EXPECT_NE((*bf16)->Fingerprint(), (*fp32)->Fingerprint());
    auto s32 = (*fp32)->NewState(), s16 = (*bf16)->NewState();
    EXPECT_EQ(2 * s16->Bytes(), s32->Bytes());
    const auto byte = [&](int i) -> int32_t {
      return static_cast<unsigned char>(corpus->validation[i]);
    };
    std::vector<int32_t> prompt;
    for (int i = 0; i < 256; ++i) prompt.push_back(byte(i));
    ASSERT_TRUE((*fp32)->Prefill(*s32, prompt).ok() && (*bf16)->Prefill(*s16, prompt).ok());
    model::DecodeState* one32[] = {s32.get()};
    model::DecodeState* one16[] = {s16.get()};
    double worst256 = 0, worst = 0, range = 0, nll32 = 0, nll16 = 0;
    int same = 0;
    const int steps = 512;
    for (int i = 256; i < 256 + steps; ++i) {
      auto l32 = (*fp32)->Step(one32, {byte(i)});
      auto l16 = (*bf16)->Step(one16, {byte(i)});
      ASSERT_TRUE(l32.ok() && l16.ok());
      worst = std::max(worst, (*l16 - *l32).abs().max().item<double>());
      if (i < 512) worst256 = worst;
      range = std::max(range, (l32->max() - l32->min()).item<double>());
      same += l16->argmax().item<int64_t>() == l32->argmax().item<int64_t>();
      nll32 -= l32->log_softmax(-1).view(-1)[byte(i + 1)].item<double>();
      nll16 -= l16->log_softmax(-1).view(-1)[byte(i + 1)].item<double>();
    }
    const std::vector<int64_t> edges = {0, 128, 512, 1024, 4096};
    auto b32 = PositionBuckets::Create(edges).value();
    auto b16 = PositionBuckets::Create(edges).value();
    PositionEvalOptions eval;
    eval.length = 4096;
    eval.stretches = 4;
    ASSERT_TRUE(LossByPosition(**fp32, corpus->validation, eval, {&b32}).ok());
    ASSERT_TRUE(LossByPosition(**bf16, corpus->validation, eval, {&b16}).ok());
    std::printf("%s, bf16 states against fp32: %d steps after a 256-byte prompt: max |logit "
                "difference| %.4f (%.4f over the first 256; logit range %.1f), same argmax %d, "
                "bits/byte fp32 %.4f bf16 %.4f; prefill bits/byte fp32 / bf16 at 0-128 "
                "%.4f / %.4f, 128-512 %.4f / %.4f, 512-1k %.4f / %.4f, 1k-4k %.4f / %.4f\n",
                name, steps, worst, worst256, range, same, nll32 / steps * bits,
                nll16 / steps * bits, b32.mean(0) * bits, b16.mean(0) * bits,
                b32.mean(1) * bits, b16.mean(1) * bits, b32.mean(2) * bits, b16.mean(2) * bits,
                b32.mean(3) * bits, b16.mean(3) * bits);
    for (int k = 0; k < 4; ++k) EXPECT_NEAR(b16.mean(k), b32.mean(k), 0.01 * b32.mean(k)) << k;
    if (std::string(name) != "kjv-taylor2-decay") continue;
    EXPECT_LE(worst, 0.5);
    EXPECT_GE(same, steps * 99 / 100);
    EXPECT_NEAR(nll16, nll32, 0.01 * nll32);
  }
}

}  // namespace
}  // namespace attnserve::trainer
