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

// Loss by position along 4k-byte stretches, in the buckets both long-context tests read.
const std::vector<int64_t> kEdges = {0, 128, 512, 1024, 4096};
constexpr int64_t kStretch = 4096;
// Stretches the bf16-state comparison reads (the first ones of the validation text): a
// paired comparison, the same text through both models, so two stretches resolve it
// (measured: at most 0.06% in any bucket of the four models, against the 1% bound).
constexpr int kBf16Stretches = 2;
// Stretches the default's own context test reads (issue 13's target).
constexpr int kContextStretches = 8;

// Buckets as LossByPosition fills them over `stretches` consecutive stretches of `text`
// starting at stretch `first`.
PositionBuckets Buckets(const model::Model& model, const std::string& text, int first,
                        int stretches) {
  auto b = PositionBuckets::Create(kEdges).value();
  PositionEvalOptions o;
  o.length = kStretch;
  o.stretches = stretches;
  const size_t from = size_t(first) * (kStretch + 1), bytes = size_t(stretches) * (kStretch + 1);
  if (text.size() < from + bytes) {
    ADD_FAILURE() << "the validation text holds " << text.size() << " bytes, not "
                  << first + stretches << " stretches";
    return b;
  }
  const auto n = LossByPosition(model, text.substr(from, bytes), o, {&b});
  EXPECT_TRUE(n.ok() && *n == stretches) << n.status();
  return b;
}

// The default's fp32 loss by position over its first kContextStretches stretches, kept
// as two parts: the first kBf16Stretches (the bf16-state test's fp32 reference) and the
// rest. Both tests read the same pass, made once per process (nullptr if the model or the
// corpus does not load).
struct DefaultFp32 {
  PositionBuckets head, rest;
  // Mean of bucket k over all kContextStretches stretches.
  double mean(int k) const {
    return (head.mean(k) * head.count(k) + rest.mean(k) * rest.count(k)) /
           double(head.count(k) + rest.count(k));
  }
};
const DefaultFp32* TheDefaultFp32() {
  static const DefaultFp32* const d = []() -> const DefaultFp32* {
    const std::string dir = (fs::path(ATTNSERVE_MODELS_DIR) / "kjv-taylor2-decay").string();
    auto model = model::Model::Load(dir);
    EXPECT_TRUE(model.ok()) << model.status();
    auto corpus = LoadCorpus(ATTNSERVE_CORPUS, kStretch + 1);
    EXPECT_TRUE(corpus.ok()) << corpus.status();
    if (!model.ok() || !corpus.ok()) return nullptr;
    auto head = Buckets(**model, corpus->validation, 0, kBf16Stretches);
    auto rest = Buckets(**model, corpus->validation, kBf16Stretches,
                        kContextStretches - kBf16Stretches);
    return new DefaultFp32{std::move(head), std::move(rest)};
  }();
  return d;
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
  // Eight 4k stretches, each fed continuously into one session.
  const DefaultFp32* const fp32 = TheDefaultFp32();
  ASSERT_NE(fp32, nullptr);
  const DefaultFp32& b = *fp32;
  const double bits = 1.0 / std::log(2.0);
  const double ratio = b.mean(3) / b.mean(1);
  std::printf("kjv-taylor2-decay: bits/byte over %d stretches 0-128 %.3f, 128-512 %.3f, "
              "512-1k %.3f, 1k-4k %.3f; 1k-4k / 128-512 = %.3f\n", kContextStretches,
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
//  - bits/byte along the first kBf16Stretches 4k-byte stretches fed through
//    Model::Prefill (rounding once per 64-token chunk): within 1% of fp32's in each
//    bucket for every model. The default's fp32 side is the pass its context test reads.
// Every figure is printed (tests/bench/README.md "bf16 states" quotes them).
TEST(ShippedModels, Bf16StatesDecodeLikeFp32) {
  auto corpus = LoadCorpus(ATTNSERVE_CORPUS, kStretch + 1);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  const double bits = 1.0 / std::log(2.0);
  for (const char* name : {"kjv-taylor2-decay", "kjv-taylor2", "kjv-linear", "kjv-taylor-norm4"}) {
    SCOPED_TRACE(name);
    const bool is_default = std::string(name) == "kjv-taylor2-decay";
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
    if (is_default) {
      ASSERT_NE(TheDefaultFp32(), nullptr);
    }
    const PositionBuckets b32 =
        is_default ? TheDefaultFp32()->head
                   : Buckets(**fp32, corpus->validation, 0, kBf16Stretches);
    const PositionBuckets b16 = Buckets(**bf16, corpus->validation, 0, kBf16Stretches);
    std::printf("%s, bf16 states against fp32: %d steps after a 256-byte prompt: max |logit "
                "difference| %.4f (%.4f over the first 256; logit range %.1f), same argmax %d, "
                "bits/byte fp32 %.4f bf16 %.4f; prefill over %d stretches, bits/byte fp32 / "
                "bf16 at 0-128 %.4f / %.4f, 128-512 %.4f / %.4f, 512-1k %.4f / %.4f, 1k-4k "
                "%.4f / %.4f\n",
                name, steps, worst, worst256, range, same, nll32 / steps * bits,
                nll16 / steps * bits, kBf16Stretches, b32.mean(0) * bits, b16.mean(0) * bits,
                b32.mean(1) * bits, b16.mean(1) * bits, b32.mean(2) * bits, b16.mean(2) * bits,
                b32.mean(3) * bits, b16.mean(3) * bits);
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(b16.count(k), b32.count(k)) << k;
      EXPECT_NEAR(b16.mean(k), b32.mean(k), 0.01 * b32.mean(k)) << k;
    }
    if (!is_default) continue;
    EXPECT_LE(worst, 0.5);
    EXPECT_GE(same, steps * 99 / 100);
    EXPECT_NEAR(nll16, nll32, 0.01 * nll32);
  }
}

// The shipped softmax model with its KV cache stored in 16 bits (--kv_cache_type, f16 the
// server's default; bf16) against f32: 768 bytes of validation text, the first 256
// prefilled (chunked, through the flash kernel), then 512 steps of one token, each
// reading every cached row in its stored type. The logits stay within 0.1 of f32's
// (f16) and 0.5 (bf16), the most likely next byte is the same at least 99% of the time,
// bits/byte over the steps within 0.5% of f32's; the state is half the bytes. (Past its
// 128-byte training window this model's loss is high, about 5.8 bits/byte: what is
// compared is the arithmetic over a long cache, not the model.) Figures printed
// (tests/bench/README.md, "16-bit KV caches", quotes them).
TEST(ShippedModels, SixteenBitKvCachesDecodeLikeF32) {
  auto corpus = LoadCorpus(ATTNSERVE_CORPUS, kStretch + 1);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  const std::string dir = (fs::path(ATTNSERVE_MODELS_DIR) / "kjv-softmax").string();
  auto fp32 = model::Model::Load(dir);
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  const auto byte = [&](int i) -> int32_t {
    return static_cast<unsigned char>(corpus->validation[i]);
  };
  std::vector<int32_t> prompt;
  for (int i = 0; i < 256; ++i) prompt.push_back(byte(i));
  for (const auto type : {attention::KvCacheType::kF16, attention::KvCacheType::kBF16}) {
    SCOPED_TRACE(attention::KvCacheTypeName(type));
    model::LoadOptions o;
    o.kv_cache_type = type;
    auto narrow = model::Model::Load(dir, o);
    ASSERT_TRUE(narrow.ok()) << narrow.status();
    EXPECT_EQ((*narrow)->Fingerprint(), (*fp32)->Fingerprint());  // a serving choice
    EXPECT_EQ(2 * (*narrow)->StateBytes(1024), (*fp32)->StateBytes(1024));
    auto s32 = (*fp32)->NewState(), s16 = (*narrow)->NewState();
    ASSERT_TRUE((*fp32)->Prefill(*s32, prompt).ok() && (*narrow)->Prefill(*s16, prompt).ok());
    model::DecodeState* one32[] = {s32.get()};
    model::DecodeState* one16[] = {s16.get()};
    double worst = 0, nll32 = 0, nll16 = 0;
    int same = 0;
    const int steps = 512;
    for (int i = 256; i < 256 + steps; ++i) {
      auto l32 = (*fp32)->Step(one32, {byte(i)});
      auto l16 = (*narrow)->Step(one16, {byte(i)});
      ASSERT_TRUE(l32.ok() && l16.ok());
      worst = std::max(worst, (*l16 - *l32).abs().max().item<double>());
      same += l16->argmax().item<int64_t>() == l32->argmax().item<int64_t>();
      const int64_t next = byte(i + 1);
      nll32 -= at::log_softmax(l32->reshape({-1}), 0)[next].item<double>();
      nll16 -= at::log_softmax(l16->reshape({-1}), 0)[next].item<double>();
    }
    EXPECT_EQ(2 * s16->Bytes(), s32->Bytes());
    const double bits = 1.0 / std::log(2.0);
    std::printf("kjv-softmax %s KV cache against f32 over %d steps after 256 prefilled: max "
                "|logit difference| %.4f, same argmax %d, bits/byte %.4f against %.4f\n",
                attention::KvCacheTypeName(type), steps, worst, same, nll16 / steps * bits,
                nll32 / steps * bits);
    EXPECT_LE(worst, type == attention::KvCacheType::kF16 ? 0.1 : 0.5);
    EXPECT_GE(same, steps * 99 / 100);
    EXPECT_NEAR(nll16 / nll32, 1.0, 0.005);
  }
}

}  // namespace
}  // namespace attnserve::trainer
