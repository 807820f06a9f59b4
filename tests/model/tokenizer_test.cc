#include "server/model/tokenizer.h"

#include <gtest/gtest.h>

#include <random>

namespace attnserve::model {
namespace {

TEST(Tokenizer, RoundTripsEveryByteValue) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(char(b));
  std::vector<int32_t> ids = Encode(all);
  ASSERT_EQ(ids.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[b], b);
  EXPECT_EQ(Decode(ids, 259).value(), all);
}

TEST(Tokenizer, RoundTripsInvalidUtf8AndRandomBytes) {
  const std::string invalid = "ok \xC3\x28 \xE2\x82 \xFF\xFE \xF0\x9F\x98\x80 end";
  EXPECT_EQ(Decode(Encode(invalid), 259).value(), invalid);
  std::mt19937 rng(1);
  for (int trial = 0; trial < 100; ++trial) {
    std::string s(rng() % 300, '\0');
    for (char& c : s) c = char(rng());
    EXPECT_EQ(Decode(Encode(s), 259).value(), s);
  }
}

TEST(Tokenizer, SpecialIdsDecodeToNothing) {
  EXPECT_EQ(Decode({'h', kBosToken, 'i', kEosToken, kPadToken}, 259).value(), "hi");
  EXPECT_TRUE(IsSpecialToken(kEosToken));
  EXPECT_FALSE(IsSpecialToken('a'));
  EXPECT_EQ(TokenBytes('a'), "a");
  EXPECT_EQ(TokenBytes(kEosToken), "");
}

TEST(Tokenizer, RejectsIdsOutsideVocabularyNamingThePosition) {
  auto bad = Decode({'a', 300}, 259);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("position 1"), std::string::npos);
  EXPECT_FALSE(Decode({-1}, 259).ok());
}

}  // namespace
}  // namespace attnserve::model
