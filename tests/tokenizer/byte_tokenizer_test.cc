#include "server/tokenizer/byte_tokenizer.h"

#include <gtest/gtest.h>

#include <random>

namespace attnserve::tokenizer {
namespace {

std::vector<int32_t> Ids(const Tokenizer& t, std::string_view text, bool continuation) {
  auto ids = t.Encode(text, continuation);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>();
}

TEST(ByteTokenizer, RoundTripsEveryByteValue) {
  ByteTokenizer t;
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(char(b));
  std::vector<int32_t> ids = Ids(t, all, false);
  ASSERT_EQ(ids.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[b], b);
  EXPECT_EQ(Decode(t, ids).value(), all);
}

TEST(ByteTokenizer, RoundTripsInvalidUtf8AndRandomBytes) {
  ByteTokenizer t;
  const std::string invalid = "ok \xC3\x28 \xE2\x82 \xFF\xFE \xF0\x9F\x98\x80 end";
  EXPECT_EQ(Decode(t, Ids(t, invalid, false)).value(), invalid);
  std::mt19937 rng(1);
  for (int trial = 0; trial < 100; ++trial) {
    std::string s(rng() % 300, '\0');
    for (char& c : s) c = char(rng());
    EXPECT_EQ(Decode(t, Ids(t, s, false)).value(), s);
  }
}

TEST(ByteTokenizer, NoBosAndContinuationIsTheSame) {
  ByteTokenizer t;
  EXPECT_EQ(t.kind(), "bytes");
  EXPECT_EQ(t.vocab_size(), 259);
  EXPECT_EQ(t.bos_id(), kByteBos);
  EXPECT_FALSE(t.add_bos());
  EXPECT_EQ(t.eos_ids(), std::vector<int32_t>{kByteEos});
  EXPECT_EQ(Ids(t, " a b", false), Ids(t, " a b", true));
  EXPECT_EQ(Ids(t, " a", false), (std::vector<int32_t>{' ', 'a'}));
}

TEST(ByteTokenizer, SpecialIdsDecodeToNothing) {
  ByteTokenizer t;
  EXPECT_EQ(Decode(t, {'h', kByteBos, 'i', kByteEos, kBytePad}).value(), "hi");
  EXPECT_TRUE(t.IsEos(kByteEos));
  EXPECT_FALSE(t.IsEos('a'));
  EXPECT_EQ(t.TokenBytes('a'), "a");
  EXPECT_EQ(t.TokenBytes(kByteEos), "");
  EXPECT_EQ(t.TokenBytes(-3), "");
  StreamDecoder stream(t, /*text_started=*/false);
  EXPECT_EQ(stream.Next(' '), " ");  // no leading-space rule for bytes
}

TEST(ByteTokenizer, RejectsIdsOutsideVocabularyNamingThePosition) {
  ByteTokenizer t;
  auto bad = Decode(t, {'a', 300});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("position 1"), std::string::npos);
  EXPECT_FALSE(Decode(t, {-1}).ok());
}

TEST(ByteTokenizer, CreateRefusesConfigsItCannotServe) {
  model::ModelConfig config;
  EXPECT_TRUE(ByteTokenizer::Create(config).ok());
  config.vocab_size = 258;
  EXPECT_EQ(ByteTokenizer::Create(config).status().message(),
            "vocab_size: 258 cannot hold the byte tokenizer's 259 ids (256 bytes, BOS, EOS, "
            "PAD)");
  config = {};
  config.bos_token_id = 1;
  EXPECT_EQ(ByteTokenizer::Create(config).status().message(),
            "bos_token_id: 1, but the byte tokenizer's BOS is 256");
  config = {};
  config.eos_token_ids = {2, 257};
  EXPECT_EQ(ByteTokenizer::Create(config).status().message(),
            "eos_token_id: [2, 257], but the byte tokenizer's EOS is 257");
}

}  // namespace
}  // namespace attnserve::tokenizer
