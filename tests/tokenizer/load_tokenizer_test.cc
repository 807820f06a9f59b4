// LoadTokenizer: which tokenizer a model directory gets, the BOS rule from
// tokenizer_config.json, EOS from the config, and every refusal with its message.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "server/tokenizer/bpe_tokenizer.h"
#include "server/tokenizer/byte_tokenizer.h"
#include "server/tokenizer/tokenizer.h"
#include "tests/testing/spm_model.h"

namespace attnserve::tokenizer {
namespace {

namespace fs = std::filesystem;

class LoadTokenizerTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    spm_dir_ = new std::string(test_util::MakeTempDir("spm"));
    model_path_ = new std::string(test_util::TrainSpm(
        *spm_dir_, "m", "--normalization_rule_name=identity --remove_extra_whitespaces=false"));
  }
  static void TearDownTestSuite() {
    delete spm_dir_;
    delete model_path_;
  }

  // A model directory with tokenizer.model and, when not empty, tokenizer_config.json.
  std::string SpmDir(const std::string& tokenizer_config) {
    const std::string dir = test_util::MakeTempDir("model");
    fs::copy_file(*model_path_, dir + "/tokenizer.model");
    if (!tokenizer_config.empty()) Write(dir + "/tokenizer_config.json", tokenizer_config);
    return dir;
  }
  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  }
  static model::ModelConfig Llama() {
    model::ModelConfig config;
    config.vocab_size = 384;  // padded beyond the 320 pieces: fine
    config.bos_token_id = 1;
    config.eos_token_ids = {2};
    return config;
  }

  static std::string* spm_dir_;
  static std::string* model_path_;
};

std::string* LoadTokenizerTest::spm_dir_;
std::string* LoadTokenizerTest::model_path_;

TEST_F(LoadTokenizerTest, ByteModelsByClassOrByTheAbsenceOfTokenizerFiles) {
  const std::string dir = test_util::MakeTempDir("bytes");
  model::ModelConfig config;
  auto t = LoadTokenizer(dir, config);  // a directory from before tokenizer files
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->kind(), "bytes");
  config.tokenizer_class = kByteTokenizerClass;
  t = LoadTokenizer(SpmDir(""), config);  // the class wins over stray files
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->kind(), "bytes");
  EXPECT_EQ((*t)->eos_ids(), std::vector<int32_t>{kByteEos});
}

TEST_F(LoadTokenizerTest, SentencePieceAddsBosPerTokenizerConfig) {
  ATTNSERVE_SKIP_WITHOUT_SENTENCEPIECE();
  const auto add_bos = [&](const std::string& tokenizer_config) {
    auto t = LoadTokenizer(SpmDir(tokenizer_config), Llama());
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return false;
    EXPECT_EQ((*t)->kind(), "sentencepiece");
    EXPECT_EQ((*t)->vocab_size(), 320);
    EXPECT_EQ((*t)->bos_id(), 1);
    auto ids = (*t)->Encode("the", false);
    EXPECT_EQ(!ids->empty() && ids->front() == 1, (*t)->add_bos());
    return (*t)->add_bos();
  };
  EXPECT_TRUE(add_bos(""));  // no tokenizer_config.json
  EXPECT_TRUE(add_bos(R"({"tokenizer_class": "LlamaTokenizer"})"));
  EXPECT_TRUE(add_bos(R"({"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": null})"));
  EXPECT_TRUE(add_bos(R"({"add_bos_token": true, "tokenizer_class": "T5Tokenizer"})"));
  EXPECT_FALSE(add_bos(R"({"add_bos_token": false, "tokenizer_class": "LlamaTokenizer"})"));
  EXPECT_FALSE(add_bos(R"({"tokenizer_class": "T5Tokenizer"})"));
}

TEST_F(LoadTokenizerTest, EosIdsComeFromTheConfig) {
  ATTNSERVE_SKIP_WITHOUT_SENTENCEPIECE();
  model::ModelConfig config = Llama();
  config.eos_token_ids = {2, 0};  // 0 is <unk>, not special: dropped
  auto t = LoadTokenizer(SpmDir(""), config);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->eos_ids(), std::vector<int32_t>{2});
  config.eos_token_ids = {1, 2};
  t = LoadTokenizer(SpmDir(""), config);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->eos_ids(), (std::vector<int32_t>{1, 2}));
}

// A byte-level BPE tokenizer.json: the 256 byte tokens (id = byte), "he" 256, and
// <|endoftext|> 257 (special).
std::string BpeJson() {
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    const std::string symbol = ByteLevelSymbol(uint8_t(b));
    vocab += "\"" + (symbol == "\"" || symbol == "\\" ? "\\" + symbol : symbol) + "\": " +
             std::to_string(b) + ", ";
  }
  return R"({"added_tokens": [{"id": 257, "content": "<|endoftext|>", "special": true}],
             "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false},
             "decoder": {"type": "ByteLevel"},
             "model": {"type": "BPE", "merges": ["h e"], "vocab": {)" +
         vocab + R"("he": 256}}})";
}

TEST_F(LoadTokenizerTest, ByteLevelBpeFromTokenizerJson) {
  const std::string dir = test_util::MakeTempDir("bpe");
  Write(dir + "/tokenizer.json", BpeJson());
  model::ModelConfig config = Llama();
  config.eos_token_ids = {257};
  auto t = LoadTokenizer(dir, config);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->kind(), "bpe");
  EXPECT_EQ((*t)->vocab_size(), 258);
  EXPECT_FALSE((*t)->add_bos());
  EXPECT_EQ((*t)->Encode("hhee", false).value(), (std::vector<int32_t>{'h', 256, 'e'}));
  Write(dir + "/tokenizer_config.json", R"({"add_bos_token": true, "bos_token": "<|endoftext|>"})");
  t = LoadTokenizer(dir, config);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->Encode("he", false).value(), (std::vector<int32_t>{257, 256}));
  // tokenizer.model wins over tokenizer.json.
  if (SentencePieceAvailable().ok()) {
    fs::copy_file(*model_path_, dir + "/tokenizer.model");
    t = LoadTokenizer(dir, config);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ((*t)->kind(), "sentencepiece");
  }
}

TEST_F(LoadTokenizerTest, RefusesAMalformedTokenizerJsonNamingTheFile) {
  const std::string dir = test_util::MakeTempDir("bpe");
  Write(dir + "/tokenizer.json", "{}");
  EXPECT_EQ(LoadTokenizer(dir, Llama()).status().message(),
            dir + "/tokenizer.json: model: missing or not an object");
  Write(dir + "/tokenizer.json", BpeJson());
  model::ModelConfig config = Llama();
  config.eos_token_ids = {257};
  config.vocab_size = 257;
  EXPECT_EQ(LoadTokenizer(dir, config).status().message(),
            dir + ": the bpe tokenizer has 258 tokens but the model's vocab_size is 257 (the "
                  "embedding needs a row for every token)");
  config.vocab_size = 300;
  Write(dir + "/tokenizer_config.json", "{");
  EXPECT_EQ(LoadTokenizer(dir, config).status().message(),
            dir + "/tokenizer_config.json: not a JSON object");
}

TEST_F(LoadTokenizerTest, RefusesADirectoryWithoutTokenizerNamingTheFiles) {
  const std::string dir = test_util::MakeTempDir("none");
  model::ModelConfig config = Llama();
  config.tokenizer_class = "LlamaTokenizer";
  EXPECT_EQ(LoadTokenizer(dir, config).status().message(),
            dir + ": no tokenizer: expected tokenizer.model (SentencePiece), tokenizer.json "
                  "(byte-level BPE), or "
                  "\"tokenizer_class\": \"AttnServeByteTokenizer\" in config.json for a "
                  "byte model (config.json names tokenizer_class \"LlamaTokenizer\")");
}

TEST_F(LoadTokenizerTest, RefusesAVocabularyLargerThanTheModels) {
  ATTNSERVE_SKIP_WITHOUT_SENTENCEPIECE();
  model::ModelConfig config = Llama();
  config.vocab_size = 300;
  const std::string dir = SpmDir("");
  EXPECT_EQ(LoadTokenizer(dir, config).status().message(),
            dir + ": the sentencepiece tokenizer has 320 tokens but the model's vocab_size "
                  "is 300 (the embedding needs a row for every token)");
  config = {};
  config.vocab_size = 258;
  config.tokenizer_class = kByteTokenizerClass;
  const std::string bytes = test_util::MakeTempDir("bytes");
  EXPECT_EQ(LoadTokenizer(bytes, config).status().message(),
            bytes + ": vocab_size: 258 cannot hold the byte tokenizer's 259 ids (256 bytes, "
                    "BOS, EOS, PAD)");
}

TEST_F(LoadTokenizerTest, RefusesABadTokenizerConfig) {
  ATTNSERVE_SKIP_WITHOUT_SENTENCEPIECE();
  std::string dir = SpmDir(R"({"add_bos_token": "yes"})");
  EXPECT_EQ(LoadTokenizer(dir, Llama()).status().message(),
            dir + "/tokenizer_config.json: add_bos_token must be true or false, got \"yes\"");
  dir = SpmDir("{not json");
  EXPECT_EQ(LoadTokenizer(dir, Llama()).status().message(),
            dir + "/tokenizer_config.json: not a JSON object");
  dir = test_util::MakeTempDir("broken");
  Write(dir + "/tokenizer.model", "garbage bytes");
  EXPECT_EQ(LoadTokenizer(dir, Llama()).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace attnserve::tokenizer
