// StopMatcher on the bytes tokens stream: byte tokens, multi-byte SentencePiece pieces
// and byte-fallback pieces that split a UTF-8 character.
#include "server/scheduler/stop_matcher.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "server/tokenizer/sentencepiece_tokenizer.h"
#include "tests/testing/spm_model.h"

namespace attnserve::scheduler {
namespace {

// The index of the token after which the matcher fires, or -1.
int StopsAfter(const std::vector<std::string>& tokens, std::vector<std::string> stops) {
  StopMatcher matcher(std::move(stops));
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (matcher.Add(tokens[i])) return int(i);
  }
  return -1;
}

TEST(StopMatcher, MatchesWithinAndAcrossTokens) {
  const std::vector<std::string> tokens = {"In", " the", " begin", "ning", "\n", "God"};
  EXPECT_EQ(StopsAfter(tokens, {"the"}), 1);
  EXPECT_EQ(StopsAfter(tokens, {"t"}), 1);          // inside a token, not at its end
  EXPECT_EQ(StopsAfter(tokens, {"inni"}), 3);       // across a boundary
  EXPECT_EQ(StopsAfter(tokens, {"In the beginning\nGod"}), 5);  // across all of them
  EXPECT_EQ(StopsAfter(tokens, {"xyz", "g\n"}), 4);  // the first of several to occur
  EXPECT_EQ(StopsAfter(tokens, {"Good"}), -1);
  EXPECT_EQ(StopsAfter(tokens, {""}), -1);  // never matches
  EXPECT_EQ(StopsAfter({"", "ab", ""}, {"ab"}), 1);
}

TEST(StopMatcher, AStopStringDoesNotMatchTwice) {
  StopMatcher matcher({"ab"});
  EXPECT_TRUE(matcher.Add("xab"));
  EXPECT_FALSE(matcher.Add("c"));  // "ab" lies wholly in what came before
  EXPECT_FALSE(matcher.Add("a"));
  EXPECT_TRUE(matcher.Add("b"));  // a second occurrence
  EXPECT_FALSE(matcher.Add(""));
}

TEST(StopMatcher, MatchesInsideByteFallbackCharactersOfSentencePieceStreams) {
  ATTNSERVE_SKIP_WITHOUT_SENTENCEPIECE();
  const std::string dir = test_util::MakeTempDir("spm");
  const std::string model = test_util::ReadBytes(test_util::TrainSpm(
      dir, "m", "--normalization_rule_name=identity --remove_extra_whitespaces=false"));
  tokenizer::SentencePieceTokenizer::Options options;
  options.bos_token_id = 1;
  options.eos_token_ids = {2};
  auto t = tokenizer::SentencePieceTokenizer::Create(model, options).value();
  const std::string text = "the earth 😀 was void";
  tokenizer::StreamDecoder decoder(*t, /*text_started=*/false);
  std::vector<std::string> tokens;
  std::vector<std::string> pieces;
  const std::vector<int32_t> ids = t->Encode(text, false).value();
  for (int32_t id : ids) {
    tokens.push_back(decoder.Next(id));
    pieces.push_back(t->Piece(id));
  }
  std::string joined;
  for (const std::string& b : tokens) joined += b;
  ASSERT_EQ(joined, text);
  // 😀 is F0 9F 98 80: four byte-fallback pieces.
  const auto at = [&](const std::string& piece) {
    return int(std::find(pieces.begin(), pieces.end(), piece) - pieces.begin());
  };
  ASSERT_LT(at("<0x98>"), int(pieces.size())) << testing::PrintToString(pieces);
  EXPECT_EQ(StopsAfter(tokens, {"\x9F\x98"}), at("<0x98>"));  // inside the character
  EXPECT_EQ(StopsAfter(tokens, {"😀"}), at("<0x80>"));          // the whole character
  EXPECT_EQ(StopsAfter(tokens, {"h \xF0"}), at("<0xF0>"));    // text, then its first byte
  EXPECT_EQ(StopsAfter(tokens, {"\x80 w"}), at("<0x80>") + 1);  // its last byte, then text
}

}  // namespace
}  // namespace attnserve::scheduler
