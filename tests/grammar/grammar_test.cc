// The grammar engine on hand-written grammars: what a matcher accepts, ends and refuses,
// and the vocabulary mask against a brute-force check of every token.
#include <algorithm>
#include <cmath>
#include <random>

#include "gtest/gtest.h"
#include "server/grammar/constraint.h"
#include "server/grammar/grammar.h"
#include "server/grammar/mask_cache.h"
#include "server/grammar/matcher.h"
#include "server/grammar/vocabulary.h"

namespace attnserve::grammar {
namespace {

// digits ::= [0-9]+ ; list ::= "[" ( digits ( "," digits )* )? "]"
std::shared_ptr<const Grammar> ListGrammar() {
  GrammarBuilder b;
  const int digits = b.Plus("digits", {Symbol::Range('0', '9')});
  const int more = b.Star("more", Concat(Literal(","), {Symbol::Ref(digits)}));
  const int items = b.Optional("items", {Symbol::Ref(digits), Symbol::Ref(more)});
  const int list = b.RuleOf("list", Concat(Concat(Literal("["), {Symbol::Ref(items)}), Literal("]")));
  auto g = b.Build(list);
  EXPECT_TRUE(g.ok()) << g.status();
  return *g;
}

TEST(MatcherTest, AcceptsTheLanguageAndNothingElse) {
  auto g = ListGrammar();
  for (const char* ok : {"[]", "[1]", "[12,3,456]"}) {
    Matcher m(g);
    EXPECT_TRUE(m.Accept(ok).ok()) << ok;
    EXPECT_TRUE(m.CanEnd()) << ok;
    EXPECT_TRUE(m.MustEnd()) << ok;
  }
  for (const char* bad : {"[,]", "[1,]x", "]", "[1]]", "[a]"}) {
    Matcher m(g);
    const bool whole = m.Accept(bad).ok() && m.CanEnd();
    EXPECT_FALSE(whole) << bad;
  }
  Matcher m(g);
  ASSERT_TRUE(m.Accept("[1,2").ok());
  EXPECT_FALSE(m.CanEnd());
  EXPECT_TRUE(m.Accepts("3]"));
  EXPECT_FALSE(m.Accepts("]]"));
  const absl::Status refused = m.Accept(",x");
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("byte 1"), std::string::npos) << refused;
  EXPECT_TRUE(m.Accepts("]"));  // unchanged by the refused Accept
}

TEST(MatcherTest, RightRecursionRunsInConstantDepth) {
  auto g = ListGrammar();
  Matcher m(g);
  ASSERT_TRUE(m.Accept("[1").ok());
  const size_t size = m.state().data.size();
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(m.Accept(",7").ok());
  EXPECT_EQ(m.state().data.size(), size);
}

TEST(GrammarBuilderTest, RefusesLeftRecursionAndEmptyRules) {
  GrammarBuilder b;
  const int e = b.NewRule("expr");
  const int opt = b.Optional("ws", Literal(" "));
  b.AddAlternative(e, {Symbol::Ref(opt), Symbol::Ref(e), Symbol::Byte('+')});
  b.AddAlternative(e, Literal("1"));
  auto g = b.Build(e);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("'expr' is left-recursive"), std::string::npos)
      << g.status();
  GrammarBuilder c;
  const int none = c.NewRule("none");
  const int root = c.RuleOf("root", {Symbol::Ref(none)});
  EXPECT_NE(c.Build(root).status().message().find("'none' has no alternatives"),
            std::string::npos);
  GrammarLimits limits;
  limits.max_symbols = 3;
  GrammarBuilder d;
  EXPECT_NE(d.Build(d.RuleOf("r", Literal("abcd")), limits).status().message().find("limit"),
            std::string::npos);
}

TEST(GrammarBuilderTest, RepeatCountsExactly) {
  for (int min : {0, 1, 2}) {
    for (int max : {-1, 0, 1, 3}) {
      if (max >= 0 && max < min) continue;
      GrammarBuilder b;
      const int r = b.Repeat("r", Literal("a"), min, max, Literal(","));
      auto g = b.Build(b.RuleOf("root", Concat(Concat(Literal("<"), {Symbol::Ref(r)}), Literal(">"))));
      ASSERT_TRUE(g.ok()) << g.status();
      for (int n = 0; n <= 6; ++n) {
        std::string text = "<";
        for (int i = 0; i < n; ++i) text += i ? ",a" : "a";
        text += ">";
        Matcher m(*g);
        const bool whole = m.Accept(text).ok() && m.CanEnd();
        EXPECT_EQ(whole, n >= min && (max < 0 || n <= max))
            << "min " << min << " max " << max << " n " << n;
      }
    }
  }
}

// A vocabulary of every 1- and 2-byte string over a small alphabet, some 3-byte ones, a
// special (empty) id and an end-of-sequence id.
struct SmallVocabulary {
  std::vector<std::string> bytes;
  int32_t eos;
  SmallVocabulary() {
    const std::string alphabet = "[],0123x";
    for (char a : alphabet) bytes.push_back(std::string(1, a));
    for (char a : alphabet)
      for (char c : alphabet) bytes.push_back(std::string{a, c});
    bytes.push_back("[1,");
    bytes.push_back(",22");
    bytes.push_back("]]]");
    bytes.push_back("");  // special
    eos = int32_t(bytes.size());
    bytes.push_back("");
  }
};

TEST(VocabularyTest, MaskIsExactlyTheTokensTheMatcherAccepts) {
  auto g = ListGrammar();
  SmallVocabulary v;
  Vocabulary vocabulary(v.bytes, {v.eos});
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    Matcher m(g);
    for (int step = 0; step < 12; ++step) {
      absl::StatusOr<TokenMask> computed_or = vocabulary.ComputeMask(m);
      ASSERT_TRUE(computed_or.ok()) << computed_or.status();
      const TokenMask& computed = *computed_or;
      Work work;
      const auto cached = vocabulary.Mask(m, work);
      ASSERT_TRUE(cached.ok()) << cached.status();
      ASSERT_EQ(computed, **cached);
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < int32_t(v.bytes.size()); ++id) {
        const bool expect = id == v.eos ? m.CanEnd()
                                        : !v.bytes[size_t(id)].empty() && m.Accepts(v.bytes[size_t(id)]);
        ASSERT_EQ(MaskAllows(computed, id), expect) << "id " << id << " '" << v.bytes[size_t(id)] << "'";
        if (expect && id != v.eos) allowed.push_back(id);
      }
      if (allowed.empty()) break;
      ASSERT_TRUE(m.Accept(v.bytes[size_t(allowed[rng() % allowed.size()])]).ok());
    }
  }
  EXPECT_GT(g->mask_cache().hits(), 0);
}

TEST(ConstraintStateTest, MasksLogitsEndsAndWaitsForItsTrigger) {
  auto g = ListGrammar();
  SmallVocabulary v;
  Vocabulary vocabulary(v.bytes, {v.eos});
  const int64_t n = int64_t(v.bytes.size());
  ConstraintState eager(Constraint{g, ""});
  std::vector<float> logits(size_t(n), 0.0f);
  ASSERT_TRUE(eager.ApplyMask(logits.data(), n, vocabulary).ok());
  EXPECT_EQ(logits[0], 0.0f);  // "["
  EXPECT_TRUE(std::isinf(logits[1]));  // "]"
  EXPECT_TRUE(std::isinf(logits[size_t(v.eos)]));
  ASSERT_TRUE(eager.Advance("[1").ok());
  EXPECT_FALSE(eager.MustEnd());
  ASSERT_TRUE(eager.Advance("]").ok());
  EXPECT_TRUE(eager.MustEnd());
  EXPECT_FALSE(eager.Advance("x").ok());

  ConstraintState lazy(Constraint{g, "[1"});
  EXPECT_FALSE(lazy.active());
  std::vector<float> free(size_t(n), 0.0f);
  ASSERT_TRUE(lazy.ApplyMask(free.data(), n, vocabulary).ok());
  for (float f : free) EXPECT_EQ(f, 0.0f);
  ASSERT_TRUE(lazy.Advance("xx[").ok());
  EXPECT_FALSE(lazy.active());
  ASSERT_TRUE(lazy.Advance("1,").ok());  // the trigger spans two tokens
  EXPECT_TRUE(lazy.active());
  EXPECT_FALSE(lazy.CanEnd());
  ASSERT_TRUE(lazy.Advance("2]").ok());
  EXPECT_TRUE(lazy.MustEnd());
}

TEST(ConstraintStateTest, ALazyTriggersTokenMustGoOnAsTheGrammarDoes) {
  // A token may complete the trigger and carry more bytes: those must be the grammar's.
  GrammarBuilder b;
  auto g = b.Build(b.RuleOf("call", Concat(Literal("<tag>"), Literal("!")))).value();
  const std::vector<std::string> bytes = {"<t", "ag>", "ag>!", "ag>x", "x", "!", "<tag>x", ""};
  Vocabulary vocabulary(bytes, {7});
  const int64_t n = int64_t(bytes.size());
  ConstraintState lazy(Constraint{g, "<tag>"});
  std::vector<float> logits(size_t(n), 0.0f);
  ASSERT_TRUE(lazy.ApplyMask(logits.data(), n, vocabulary).ok());
  EXPECT_TRUE(std::isinf(logits[6]));  // "<tag>x": the trigger, then what the grammar refuses
  for (int i : {0, 1, 2, 3, 4, 5, 7}) EXPECT_EQ(logits[size_t(i)], 0.0f) << bytes[size_t(i)];
  ASSERT_TRUE(lazy.Advance("<t").ok());
  std::fill(logits.begin(), logits.end(), 0.0f);
  ASSERT_TRUE(lazy.ApplyMask(logits.data(), n, vocabulary).ok());
  EXPECT_TRUE(std::isinf(logits[3]));  // "ag>x"
  for (int i : {0, 1, 2, 4, 5, 7}) EXPECT_EQ(logits[size_t(i)], 0.0f) << bytes[size_t(i)];
  ASSERT_TRUE(lazy.Advance("ag>!").ok());
  EXPECT_TRUE(lazy.active());
  EXPECT_TRUE(lazy.MustEnd());
}

}  // namespace
}  // namespace attnserve::grammar
