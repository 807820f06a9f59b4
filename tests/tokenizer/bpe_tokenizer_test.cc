// BpeTokenizer on small in-memory vocabularies: the byte-level alphabet, the splits,
// merges by rank, added tokens, ignore_merges, invalid UTF-8, and every refusal of Create.
// (bpe_oracle_test.py compares the ids with Hugging Face's tokenizers.js on GPT-2's
// vocabulary.)
#include "server/tokenizer/bpe_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "server/tokenizer/bpe_split.h"

namespace attnserve::tokenizer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Ids 0..255: the alphabet in byte order; then the merges' results in order.
BpeTokenizer::Vocabulary Tiny(std::vector<std::pair<std::string, std::string>> merges) {
  BpeTokenizer::Vocabulary v;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(ByteLevelSymbol(uint8_t(b)));
  for (const auto& [a, b] : merges) v.tokens.push_back(a + b);
  v.merges = std::move(merges);
  return v;
}

BpeTokenizer::Options Eos(int32_t eos) {
  BpeTokenizer::Options o;
  o.eos_ids = {eos};
  return o;
}

std::vector<std::string> Pieces(const std::string& pattern, const std::string& text) {
  auto split = internal::SplitPattern::Create(pattern);
  EXPECT_TRUE(split.ok()) << split.status();
  std::vector<std::string_view> pieces;
  EXPECT_TRUE((*split)->Split(text, pieces).ok());
  return std::vector<std::string>(pieces.begin(), pieces.end());
}

std::string DecodeAll(const BpeTokenizer& t, const std::vector<int32_t>& ids) {
  auto text = Decode(t, ids);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.value_or("");
}

TEST(ByteLevelAlphabet, IsGpt2sBytesToUnicode) {
  EXPECT_EQ(ByteLevelSymbol(' '), "Ġ");
  EXPECT_EQ(ByteLevelSymbol('\n'), "Ċ");
  EXPECT_EQ(ByteLevelSymbol('\t'), "ĉ");
  EXPECT_EQ(ByteLevelSymbol(0), "Ā");
  EXPECT_EQ(ByteLevelSymbol('A'), "A");
  EXPECT_EQ(ByteLevelSymbol(0x7F), "ġ");
  EXPECT_EQ(ByteLevelSymbol(0xAD), "Ń");
  EXPECT_EQ(ByteLevelSymbol(0xE9), "é");
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(ByteLevelBytes(ByteLevelSymbol(uint8_t(b))), std::string(1, char(b)));
  }
  EXPECT_EQ(ByteLevelBytes("ĠthereĊ"), " there\n");
  EXPECT_EQ(ByteLevelBytes("中"), std::nullopt);
  EXPECT_EQ(ByteLevelBytes("Ń"), "\xAD");  // U+0143, the alphabet's last
  EXPECT_EQ(ByteLevelBytes("ń"), std::nullopt);  // U+0144, past its end
  EXPECT_EQ(ByteLevelBytes("\xC4"), std::nullopt);
}

TEST(SplitPattern, Gpt2SplitsContractionsWordsNumbersPunctuationAndSpaces) {
  EXPECT_THAT(Pieces(kGpt2SplitPattern, "I'm  fine, they'll go!! 12345 x\n\n  end  "),
              ElementsAre("I", "'m", " ", " fine", ",", " they", "'ll", " go", "!!", " 12345",
                          " x", "\n\n ", " end", "  "));
  EXPECT_THAT(Pieces(kGpt2SplitPattern, "I'M Ünïcödé 中文"),
              ElementsAre("I", "'", "M", " Ünïcödé", " 中文"));
}

TEST(SplitPattern, Llama3SplitsNumbersInThreesAndFoldsContractions) {
  EXPECT_THAT(Pieces(kLlama3SplitPattern, "I'M 1234567 ok...\n\n  (x)"),
              ElementsAre("I", "'M", " ", "123", "456", "7", " ok", "...\n\n", " ", " (", "x",
                          ")"));
}

TEST(SplitPattern, InvalidUtf8IsNeverMatchedAndKeptBetweenMatches) {
  EXPECT_THAT(Pieces(kGpt2SplitPattern, "ab\xff\xfe cd\xc3"),
              ElementsAre("ab", "\xff\xfe", " cd", "\xc3"));
  EXPECT_THAT(Pieces("x", "axbxx"), ElementsAre("a", "x", "b", "x", "x"));
  EXPECT_THAT(Pieces("a*", "bab"), ElementsAre("b", "a", "b"));  // never an empty match
}

TEST(SplitPattern, RefusesAPatternPcre2CannotCompile) {
  EXPECT_THAT(internal::SplitPattern::Create("(a").status().message(),
              HasSubstr("split pattern (a does not compile (PCRE2, at offset 2): missing "
                        "closing parenthesis"));
}

TEST(BpeTokenizer, MergesByRankNotByPosition) {
  // "the": (h, e) has the lowest rank, so "t" + "he", then "the".
  auto t = BpeTokenizer::Create(Tiny({{"h", "e"}, {"t", "h"}, {"t", "he"}}), Eos(0));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->kind(), "bpe");
  EXPECT_EQ((*t)->vocab_size(), 259);
  EXPECT_THAT((*t)->Encode("the", false).value(), ElementsAre(258));
  EXPECT_THAT((*t)->Encode("th", false).value(), ElementsAre(257));
  EXPECT_THAT((*t)->Encode("thhe", false).value(), ElementsAre(257, 256));
  EXPECT_EQ((*t)->Token(258), "the");
  // Without the last merge, "the" stays "t" + "he" although "th" has a rank.
  t = BpeTokenizer::Create(Tiny({{"h", "e"}, {"t", "h"}}), Eos(0));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT((*t)->Encode("the", false).value(), ElementsAre('t', 256));
}

TEST(BpeTokenizer, MergesRunsLeftmostFirst) {
  auto t = BpeTokenizer::Create(Tiny({{"a", "a"}}), Eos(0));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT((*t)->Encode("aaa", false).value(), ElementsAre(256, 'a'));
  EXPECT_THAT((*t)->Encode("aaaa", false).value(), ElementsAre(256, 256));
}

TEST(BpeTokenizer, WordsAreMergedSeparately) {
  auto t = BpeTokenizer::Create(Tiny({{"a", "Ġ"}, {"Ġ", "a"}}), Eos(0));
  ASSERT_TRUE(t.ok()) << t.status();
  // "a a": split into "a" and " a"; the "aĠ" merge never crosses the split.
  EXPECT_THAT((*t)->Encode("a a", false).value(), ElementsAre('a', 257));
  BpeTokenizer::Vocabulary v = Tiny({{"a", "Ġ"}, {"Ġ", "a"}});
  v.split_patterns.clear();  // one word
  t = BpeTokenizer::Create(std::move(v), Eos(0));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT((*t)->Encode("a a", false).value(), ElementsAre(256, 'a'));
}

TEST(BpeTokenizer, IgnoreMergesTakesAWordThatIsAToken) {
  // "abc" is a token but no merge makes it: BPE gives "ab" + "c" unless ignore_merges.
  BpeTokenizer::Vocabulary v = Tiny({{"a", "b"}});
  v.tokens.push_back("abc");
  auto t = BpeTokenizer::Create(v, Eos(0));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT((*t)->Encode("abc", false).value(), ElementsAre(256, 'c'));
  v.ignore_merges = true;
  t = BpeTokenizer::Create(v, Eos(0));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT((*t)->Encode("abc,abc abc", false).value(),
              ElementsAre(257, ',', 257, ' ', 256, 'c'));  // "Ġabc" is not a token
}

TEST(BpeTokenizer, AddedTokensAreCutOutFirstLongestMatchWins) {
  BpeTokenizer::Vocabulary v = Tiny({{"a", "b"}});
  v.added = {{"<|end|>", 300, /*special=*/true, /*normalized=*/false},
             {"<|end|>x", 301, true, false},
             {"ab", 302, /*special=*/false, /*normalized=*/true},
             {"\n\n", 303, false, true}};
  BpeTokenizer::Options o = Eos(300);
  o.bos_id = 301;
  o.add_bos = true;
  auto t = BpeTokenizer::Create(v, o);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocab_size(), 304);
  EXPECT_THAT((*t)->Encode("x<|end|>xab<|end|>\n\nb", true).value(),
              ElementsAre('x', 301, 302, 300, 303, 'b'));
  EXPECT_THAT((*t)->Encode("ab", false).value(), ElementsAre(301, 302));
  // Special tokens add nothing to the stream, other added tokens their content.
  EXPECT_EQ(DecodeAll(**t, {'x', 301, 302, 300, 303, 'b'}), "xab\n\nb");
  bool at_start = true;
  EXPECT_EQ((*t)->StreamBytes(300, at_start), "");
  EXPECT_TRUE(at_start);
  EXPECT_EQ((*t)->StreamBytes(303, at_start), "\n\n");
  EXPECT_FALSE(at_start);
  EXPECT_EQ((*t)->Token(300), "<|end|>");
  EXPECT_EQ((*t)->TokenBytes(299), "");  // an id without a token
}

TEST(BpeTokenizer, NonNormalizedAddedTokensAreCutBeforeNormalizedOnes) {
  BpeTokenizer::Vocabulary v = Tiny({{"a", "b"}});
  v.added = {{"xab", 300, false, /*normalized=*/true}, {"ab", 301, true, /*normalized=*/false}};
  auto t = BpeTokenizer::Create(v, Eos(301));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT((*t)->Encode("xab", false).value(), ElementsAre('x', 301));
}

TEST(BpeTokenizer, EveryByteStringRoundTripsInvalidUtf8Included) {
  auto t = BpeTokenizer::Create(Tiny({{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"Ã", "©"}}),
                                Eos(0));
  ASSERT_TRUE(t.ok()) << t.status();
  std::mt19937 rng(11);
  const std::string alphabet = std::string("the \n\t'sé中😀\xff\xc3\xa9\x80", 20);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text;
    const int n = int(rng() % 24);
    for (int i = 0; i < n; ++i) {
      text += trial % 2 ? char(rng() % 256) : alphabet[rng() % alphabet.size()];
    }
    auto ids = (*t)->Encode(text, false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    ASSERT_EQ(DecodeAll(**t, *ids), text) << trial;
  }
  EXPECT_THAT((*t)->Encode(" the\xff", false).value(), ElementsAre(258, 0xFF - 0));
}

TEST(BpeTokenizer, RefusesWhatCannotBeServed) {
  const auto refusal = [](BpeTokenizer::Vocabulary v, BpeTokenizer::Options o) {
    return std::string(BpeTokenizer::Create(std::move(v), o).status().message());
  };
  EXPECT_EQ(refusal({}, Eos(0)), "the vocabulary has no tokens");
  BpeTokenizer::Vocabulary v = Tiny({{"a", "b"}});
  v.tokens[' '] = "";
  EXPECT_EQ(refusal(v, Eos(0)),
            "the vocabulary has no token for byte 0x20 (\"Ġ\"), which byte-level BPE needs "
            "for every byte");
  v = Tiny({{"a", "b"}});
  v.tokens.push_back("a");
  EXPECT_EQ(refusal(v, Eos(0)), "tokens 97 and 257 are both \"a\"");
  v = Tiny({});
  EXPECT_EQ(refusal(v, Eos(0)), "there are no merges");
  v = Tiny({{"a", "b"}});
  v.merges.push_back({"a", "c"});
  EXPECT_EQ(refusal(v, Eos(0)), "merge 1 (\"a\" \"c\"): \"ac\" is not in the vocabulary");
  v.merges.back() = {"ab", "x y"};
  EXPECT_EQ(refusal(v, Eos(0)), "merge 1 (\"ab\" \"x y\"): \"x y\" is not in the vocabulary");
  v = Tiny({{"a", "b"}});
  v.added = {{"", 300, true, false}};
  EXPECT_EQ(refusal(v, Eos(0)), "added token 300 is empty");
  v.added = {{"<s>", -2, true, false}};
  EXPECT_EQ(refusal(v, Eos(0)), "added token \"<s>\" has id -2");
  v = Tiny({{"a", "b"}});
  v.split_patterns = {"[a"};
  EXPECT_THAT(refusal(v, Eos(0)), HasSubstr("split pattern [a does not compile"));
  v = Tiny({{"a", "b"}});
  EXPECT_EQ(refusal(v, {}), "there is no end-of-sequence id");
  EXPECT_EQ(refusal(v, Eos(257)), "the EOS id 257 is outside the vocabulary's 257 tokens");
  BpeTokenizer::Options o = Eos(0);
  o.bos_id = 1000;
  EXPECT_EQ(refusal(v, o), "the BOS id 1000 is outside the vocabulary's 257 tokens");
  o.bos_id = -1;
  o.add_bos = true;
  EXPECT_EQ(refusal(v, o), "BOS is to be added but there is no BOS id");
}

}  // namespace
}  // namespace attnserve::tokenizer
