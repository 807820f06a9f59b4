#include "server/trainer/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "server/model/hf_config.h"
#include "server/trainer/corpus.h"

namespace attnserve::trainer {
namespace {

namespace fs = std::filesystem;

model::ModelConfig Tiny() {
  model::ModelConfig c;
  c.name = "tiny";
  c.dim = 32;
  c.num_layers = 1;
  c.mlp_hidden = 64;
  c.attention.module = "taylor";
  c.attention.order = 2;
  c.attention.num_heads = 2;
  c.attention.num_kv_heads = 2;
  c.attention.head_dim = 16;
  c.attention.value_dim = 16;
  return c;
}

class TrainerTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("attnserve_trainer_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  TrainOptions Options(int steps) {
    TrainOptions o;
    o.out_dir = (dir_ / "model").string();
    o.corpus_path = ATTNSERVE_CORPUS;
    o.steps = steps;
    o.batch = 8;
    o.seq_len = 64;
    o.warmup = 20;
    o.lr = 1e-2;
    o.eval_every = steps;
    o.eval_batches = 4;
    o.checkpoint_every = 50;
    o.threads = 1;
    o.command = "trainer_test";
    return o;
  }
  fs::path dir_;
};

TEST_F(TrainerTest, ShortRunLearnsTheRealCorpusWellBelowUniform) {
  TrainOptions o = Options(300);
  int last_step = 0;
  ASSERT_TRUE(Train(Tiny(), o, [&](const Progress& p) { last_step = p.step; }).ok());
  EXPECT_EQ(last_step, 300);
  auto model = model::Model::Load(o.out_dir);
  ASSERT_TRUE(model.ok()) << model.status();
  auto corpus = LoadCorpus(o.corpus_path, 65).value();
  const double val = Evaluate(**model, corpus.validation, 64, 4, 8);
  // Uniform bytes cost ln 256 = 5.545 nats; a few hundred steps must do far better.
  EXPECT_LT(val, 3.0) << "validation loss " << val;
  for (const char* f : {"config.json", "model.safetensors", "train_log.csv", "report.txt",
                        "train_command.txt", "checkpoint.safetensors"}) {
    EXPECT_TRUE(fs::exists(fs::path(o.out_dir) / f)) << f;
  }
}

TEST_F(TrainerTest, ResumingContinuesTheSameRun) {
  TrainOptions o = Options(60);
  o.checkpoint_every = 30;
  ASSERT_TRUE(Train(Tiny(), o, nullptr).ok());
  const std::string straight = (dir_ / "straight").string();
  fs::rename(o.out_dir, straight);
  // The same run interrupted after step 30 (its checkpoint), then resumed to 60.
  TrainOptions first = Options(60);
  first.checkpoint_every = 30;
  int resumed_from = -1;
  first.stop_after = 30;
  ASSERT_TRUE(Train(Tiny(), first, nullptr).ok());
  EXPECT_FALSE(fs::exists(fs::path(first.out_dir) / "model.safetensors"));
  first.stop_after = 0;
  first.resume = true;
  ASSERT_TRUE(Train(Tiny(), first, [&](const Progress& p) {
                if (resumed_from < 0) resumed_from = p.step;
              }).ok());
  EXPECT_EQ(resumed_from, 31);
  auto a = model::Model::Load(straight).value();
  auto b = model::Model::Load(first.out_dir).value();
  auto corpus = LoadCorpus(o.corpus_path, 65).value();
  EXPECT_NEAR(Evaluate(*a, corpus.validation, 64, 2, 8),
              Evaluate(*b, corpus.validation, 64, 2, 8), 1e-5);
}

TEST_F(TrainerTest, CurriculumTrainsShortWindowsFirstThenTheFullLength) {
  TrainOptions o = Options(6);
  o.short_seq_len = 16;
  o.short_steps = 3;
  std::vector<int> lengths;
  ASSERT_TRUE(Train(Tiny(), o, [&](const Progress& p) { lengths.push_back(p.seq_len); }).ok());
  EXPECT_EQ(lengths, (std::vector<int>{16, 16, 16, 64, 64, 64}));
  std::ifstream report(fs::path(o.out_dir) / "report.txt");
  std::stringstream text;
  text << report.rdbuf();
  EXPECT_NE(text.str().find("short_seq_len 16\nshort_steps 3\n"), std::string::npos)
      << text.str();

  o.short_seq_len = 65;  // longer than the windows it leads to
  EXPECT_EQ(Train(Tiny(), o, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(TrainerTest, CheckpointOfAnUnfinishedRunLoadsWithTheConfigWrittenAtTheStart) {
  TrainOptions o = Options(40);
  o.checkpoint_every = 20;
  o.stop_after = 20;
  ASSERT_TRUE(Train(Tiny(), o, nullptr).ok());
  const fs::path out(o.out_dir);
  EXPECT_FALSE(fs::exists(out / "model.safetensors"));
  auto config = model::ReadHfConfigFile((out / "config.json").string(), "unused");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->tokenizer_class, model::kByteTokenizerClass);
  auto partial = LoadCheckpoint(*config, (out / kCheckpointFile).string());
  ASSERT_TRUE(partial.ok()) << partial.status();
  // Run to the end: the final checkpoint holds exactly the shipped weights.
  o.stop_after = 0;
  o.resume = true;
  ASSERT_TRUE(Train(Tiny(), o, nullptr).ok());
  auto final_weights = LoadCheckpoint(*config, (out / kCheckpointFile).string()).value();
  auto shipped = model::Model::Load(o.out_dir).value();
  auto corpus = LoadCorpus(o.corpus_path, 65).value();
  const double shipped_loss = Evaluate(*shipped, corpus.validation, 64, 2, 8);
  EXPECT_NEAR(Evaluate(*final_weights, corpus.validation, 64, 2, 8), shipped_loss, 1e-6);
  EXPECT_GT(Evaluate(**partial, corpus.validation, 64, 2, 8), shipped_loss);

  model::ModelConfig wider = *config;
  wider.mlp_hidden = 96;
  auto misfit = LoadCheckpoint(wider, (out / kCheckpointFile).string());
  EXPECT_EQ(misfit.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(misfit.status().message().find("w_gate"), std::string::npos) << misfit.status();
}

// --init_from reads a model directory (config.json + model.safetensors): a run at a
// negligible learning rate ends where it started, and weights of another shape are
// refused naming the tensor.
TEST_F(TrainerTest, InitFromStartsFromTheWeightsOfAModelDirectory) {
  TrainOptions o = Options(20);
  ASSERT_TRUE(Train(Tiny(), o, nullptr).ok());
  TrainOptions tune = Options(1);
  tune.out_dir = (dir_ / "tuned").string();
  tune.init_from = o.out_dir;
  tune.lr = 1e-12;
  ASSERT_TRUE(Train(Tiny(), tune, nullptr).ok());
  auto base = model::Model::Load(o.out_dir).value();
  auto tuned = model::Model::Load(tune.out_dir).value();
  auto corpus = LoadCorpus(o.corpus_path, 65).value();
  EXPECT_NEAR(Evaluate(*tuned, corpus.validation, 64, 2, 8),
              Evaluate(*base, corpus.validation, 64, 2, 8), 1e-6);

  model::ModelConfig wider = Tiny();
  wider.mlp_hidden = 96;
  tune.out_dir = (dir_ / "wider").string();
  const absl::Status s = Train(wider, tune, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("w_gate"), std::string::npos) << s;
}

TEST_F(TrainerTest, RejectsMissingAndEmptyCorpusAndBadConfig) {
  TrainOptions o = Options(10);
  o.corpus_path = (dir_ / "missing.txt").string();
  absl::Status s = Train(Tiny(), o, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("missing.txt"), std::string::npos);

  o.corpus_path = (dir_ / "empty.txt").string();
  std::ofstream(o.corpus_path).close();
  s = Train(Tiny(), o, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("empty"), std::string::npos);

  o.corpus_path = (dir_ / "short.txt").string();
  std::ofstream(o.corpus_path) << "too short";
  s = Train(Tiny(), o, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("too short"), std::string::npos);

  model::ModelConfig bad = Tiny();
  bad.attention.order = 3;
  o.corpus_path = ATTNSERVE_CORPUS;
  s = Train(bad, o, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("odd"), std::string::npos);
}

TEST(LoadCorpus, SplitIsDeterministicAndSpreadOverTheText) {
  auto c = LoadCorpus(ATTNSERVE_CORPUS, 1000).value();
  auto again = LoadCorpus(ATTNSERVE_CORPUS, 1000).value();
  EXPECT_EQ(c.validation, again.validation);
  const double share = double(c.validation.size()) / (c.validation.size() + c.train.size());
  EXPECT_NEAR(share, 0.05, 0.002);
  EXPECT_NE(c.validation.find("Ge"), std::string::npos);   // from the start ...
  EXPECT_NE(c.validation.find("Rev"), std::string::npos);  // ... to the end
}

}  // namespace
}  // namespace attnserve::trainer
