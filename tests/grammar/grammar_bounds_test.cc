// Grammar work is bounded by construction (server/grammar/matcher.h): the request bodies
// that froze the engine before (issue 36) cost work linear in the grammar, an ambiguous
// grammar whose stacks really grow is refused within its budget, and the admission's dry
// run refuses it before a turn starts. Work is counted, not timed: the figures hold on
// a loaded machine as on an idle one.
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/grammar/constraint.h"
#include "server/grammar/grammar.h"
#include "server/grammar/json_schema.h"
#include "server/grammar/mask_cache.h"
#include "server/grammar/matcher.h"
#include "server/grammar/vocabulary.h"

namespace attnserve::grammar {
namespace {

using json = nlohmann::ordered_json;

// Every 1- and 2-byte string over `alphabet`, and an end-of-sequence id.
Vocabulary SmallVocabulary(const std::string& alphabet) {
  std::vector<std::string> bytes;
  for (char a : alphabet) bytes.push_back(std::string(1, a));
  for (char a : alphabet)
    for (char c : alphabet) bytes.push_back(std::string{a, c});
  const int32_t eos = int32_t(bytes.size());
  bytes.push_back("");
  return Vocabulary(bytes, {eos});
}

// root ::= e e ... e "x" (n times), e ::= ε | ε: 2^n paths to the one stack before "x".
std::shared_ptr<const Grammar> EmptyChoices(int n) {
  GrammarBuilder b;
  const int e = b.NewRule("e");
  b.AddAlternative(e, {});
  b.AddAlternative(e, {});
  Sequence seq;
  for (int i = 0; i < n; ++i) seq.push_back(Symbol::Ref(e));
  seq.push_back(Symbol::Byte('x'));
  auto g = b.Build(b.RuleOf("root", seq));
  EXPECT_TRUE(g.ok()) << g.status();
  return *g;
}

// d0 ::= d1 | d1, ..., d(n-1) ::= dn | dn, dn ::= "a": 2^n paths to the same byte.
std::shared_ptr<const Grammar> NestedEqualChoices(int n) {
  GrammarBuilder b;
  std::vector<int> d;
  for (int i = 0; i <= n; ++i) d.push_back(b.NewRule(absl::StrCat("d", i)));
  for (int i = 0; i < n; ++i) {
    b.AddAlternative(d[size_t(i)], {Symbol::Ref(d[size_t(i) + 1])});
    b.AddAlternative(d[size_t(i)], {Symbol::Ref(d[size_t(i) + 1])});
  }
  b.AddAlternative(d[size_t(n)], Literal("a"));
  auto g = b.Build(d[0]);
  EXPECT_TRUE(g.ok()) << g.status();
  return *g;
}

// x ::= "a" x "b" | "a" x "c" | "z": after k bytes "a", 2^k distinct stacks (each a
// different sequence of closing bytes still owed). Ambiguous for real: no merging helps.
std::shared_ptr<const Grammar> GrowingStacks() {
  GrammarBuilder b;
  const int x = b.NewRule("x");
  b.AddAlternative(x, {Symbol::Byte('a'), Symbol::Ref(x), Symbol::Byte('b')});
  b.AddAlternative(x, {Symbol::Byte('a'), Symbol::Ref(x), Symbol::Byte('c')});
  b.AddAlternative(x, Literal("z"));
  auto g = b.Build(x);
  EXPECT_TRUE(g.ok()) << g.status();
  return *g;
}

TEST(MatcherBoundsTest, EmptyAlternativesMergeAsTheyAreEntered) {
  // Before the merge, n = 27 held the engine 44 s; n = 64 would never end.
  for (int n : {27, 64, 1000}) {
    auto g = EmptyChoices(n);
    Matcher m(g);
    ASSERT_TRUE(m.start_status().ok()) << m.start_status();
    EXPECT_EQ(m.state().size(), 1) << n;
    Work work;
    ASSERT_TRUE(m.Accept("x", &work).ok()) << n;
    EXPECT_TRUE(m.MustEnd());
    EXPECT_LT(work.spent(), 16 * n) << n;  // linear in the grammar
  }
}

TEST(MatcherBoundsTest, NestedEqualChoicesCostLinearWork) {
  for (int n : {24, 40, 1000}) {
    auto g = NestedEqualChoices(n);
    Matcher m(g);
    ASSERT_TRUE(m.start_status().ok()) << m.start_status();
    Work work;
    ASSERT_TRUE(m.Accept("a", &work).ok()) << n;
    EXPECT_TRUE(m.MustEnd());
    const Vocabulary v = SmallVocabulary("abz");
    Matcher fresh(g);
    Work mask_work;
    absl::StatusOr<TokenMask> mask = v.ComputeMask(fresh, mask_work);
    ASSERT_TRUE(mask.ok()) << mask.status();
    EXPECT_TRUE(MaskAllows(*mask, 0));   // "a"
    EXPECT_FALSE(MaskAllows(*mask, 1));  // "b"
    EXPECT_LT(mask_work.spent(), 64 * n) << n;
    EXPECT_TRUE(DryRun(*g).ok());
  }
}

TEST(MatcherBoundsTest, GrowingStacksAreRefusedWithinTheBudget) {
  auto g = GrowingStacks();
  Matcher m(g);
  // 3 * 2^k stacks after k bytes "a" (each owed sequence, under either "a" or "z"):
  // k = 10 is allowed; 15 is past kMaxStacks.
  ASSERT_TRUE(m.Accept(std::string(10, 'a')).ok());
  EXPECT_EQ(m.state().size(), 3 * 1024);
  Work work;
  const absl::Status refused = m.Accept(std::string(5, 'a'), &work);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_LE(work.spent(), work.limit() + GrammarBudget::kByteWork);
  ASSERT_TRUE(m.Accept("zbcbc").ok());  // the state is unchanged by the refusal

  // A mask of a state that grows past the budget: refused, its work bounded.
  Matcher deep(g);
  ASSERT_TRUE(deep.Accept(std::string(12, 'a')).ok());
  const Vocabulary v = SmallVocabulary("abcz");
  Work mask_work;
  absl::StatusOr<TokenMask> mask = v.ComputeMask(deep, mask_work);
  EXPECT_EQ(mask.status().code(), absl::StatusCode::kResourceExhausted) << mask.status();
  EXPECT_LE(mask_work.spent(), mask_work.limit() + GrammarBudget::kByteWork);

  // The sampling step says so (the scheduler ends the turn with it), as a turn that
  // cannot go on (409 over HTTP), not as a busy server a client would retry (429).
  ConstraintState state(Constraint{g, ""});
  ASSERT_TRUE(state.Advance(std::string(12, 'a')).ok());
  std::vector<float> logits(size_t(v.size()), 0.0f);
  const absl::Status step = state.ApplyMask(logits.data(), int64_t(logits.size()), v);
  EXPECT_EQ(step.code(), absl::StatusCode::kFailedPrecondition) << step;
  EXPECT_NE(step.message().find("more work"), std::string::npos) << step;
  EXPECT_EQ(state.Advance("aaa").code(), absl::StatusCode::kFailedPrecondition);

  // The dry run finds it before any turn starts, naming the bytes that reach it.
  const absl::Status dry = DryRun(*g);
  EXPECT_EQ(dry.code(), absl::StatusCode::kInvalidArgument) << dry;
  EXPECT_NE(dry.message().find("\"aaaaaaaaaaaaa\""), std::string::npos) << dry;
}

TEST(SchemaBoundsTest, TheAttacksOfIssue36AreServed) {
  // The pattern that held the engine 44 s at {27} and threw bad_alloc at {40}.
  for (int n : {27, 40}) {
    const json schema = {{"type", "string"}, {"pattern", absl::StrCat("^(?:|){", n, "}$")}};
    auto g = CompileJsonSchema(schema);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_TRUE(DryRun(**g).ok());
    Matcher m(*g);
    Work work;
    ASSERT_TRUE(m.Accept("\"\"", &work).ok());
    EXPECT_TRUE(m.MustEnd());
    EXPECT_LT(work.spent(), 100000) << n;
  }
  // $defs d0..d39, each an anyOf of two $refs to the next.
  json defs = json::object();
  for (int i = 0; i < 40; ++i) {
    const std::string next = absl::StrCat("#/$defs/d", i + 1);
    defs[absl::StrCat("d", i)] = {{"anyOf", {{{"$ref", next}}, {{"$ref", next}}}}};
  }
  defs["d40"] = {{"type", "integer"}};
  const json schema = {{"$ref", "#/$defs/d0"}, {"$defs", defs}};
  auto g = CompileJsonSchema(schema);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(DryRun(**g).ok());
  Matcher m(*g);
  Work work;
  ASSERT_TRUE(m.Accept("123", &work).ok());
  EXPECT_TRUE(m.CanEnd());
  EXPECT_LT(work.spent(), 100000);
}

TEST(SchemaBoundsTest, AnObjectOfManyOptionalPropertiesIsAnswerable) {
  // 1,101 optional properties: one parse stack per property that may come next. Under
  // the old cap of 1,024 stacks every answer was refused after `{"`.
  json properties = json::object();
  for (int i = 0; i < 1101; ++i) properties[absl::StrCat("p", i)] = {{"type", "integer"}};
  const json schema = {{"type", "object"}, {"properties", properties},
                       {"additionalProperties", false}};
  auto g = CompileJsonSchema(schema);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(DryRun(**g).ok());
  for (const char* text : {"{\"p0\":1}", "{\"p1100\":7}", "{\"p3\":1,\"p999\":2}", "{}"}) {
    Matcher m(*g);
    ASSERT_TRUE(m.Accept(text).ok()) << text;
    EXPECT_TRUE(m.CanEnd()) << text;
  }
  Matcher m(*g);
  ASSERT_TRUE(m.Accept("{\"p").ok());
  const Vocabulary v = SmallVocabulary("{}\"p0123456789:,");
  absl::StatusOr<TokenMask> mask = v.ComputeMask(m);
  ASSERT_TRUE(mask.ok()) << mask.status();
  EXPECT_TRUE(MaskAllows(*mask, 5));   // "1" after {"p
  EXPECT_FALSE(MaskAllows(*mask, 3));  // "p"
}

TEST(SchemaBoundsTest, AWideCharacterClassCompilesInOnePass) {
  // 15,000 members, every other code point, last first: 15,000 ranges that do not merge
  // (a sort per member made this seconds of compile).
  std::string members;
  for (char32_t c = 0x4e01 + 30000; c > 0x4e00; c -= 2) {
    members += char(0xe0 | (c >> 12));
    members += char(0x80 | ((c >> 6) & 0x3f));
    members += char(0x80 | (c & 0x3f));
  }
  const json schema = {{"type", "string"}, {"pattern", "^[" + members + "]+$"}};
  auto g = CompileJsonSchema(schema);
  ASSERT_TRUE(g.ok()) << g.status();
  Matcher m(*g);
  ASSERT_TRUE(m.Accept("\"\xe4\xb8\x81\xe4\xb8\x83\"").ok());  // U+4E01 U+4E03
  EXPECT_TRUE(m.MustEnd());
  Matcher out(*g);
  EXPECT_FALSE(out.Accepts("\"\xe4\xb8\x82"));  // U+4E02, between two members
}

TEST(MaskCacheBoundsTest, AllGrammarsTogetherHoldAtMostTheTotal) {
  // 48 grammars (the constraint cache keeps 16; the others as held by running turns),
  // each filling its own cache to its 16 MiB: 768 MiB unbounded. One 4 MiB mask object
  // stands for every entry (the cache counts each as its size).
  auto big = std::make_shared<const TokenMask>((size_t(4) << 20) / sizeof(uint64_t), 0);
  const Vocabulary v = SmallVocabulary("ab");
  const size_t before = Grammar::MaskCache::total_bytes();
  std::vector<std::shared_ptr<const Grammar>> alive;
  for (int i = 0; i < 48; ++i) {
    alive.push_back(EmptyChoices(1));
    Grammar::MaskCache& cache = alive.back()->mask_cache();
    for (int32_t k = 0; k < 5; ++k) {
      StackSet state;
      state.data = {1, k};
      cache.Put(&v, state, big);
      ASSERT_LE(Grammar::MaskCache::total_bytes(), Grammar::MaskCache::kMaxTotalBytes);
    }
  }
  EXPECT_GT(Grammar::MaskCache::total_bytes(), Grammar::MaskCache::kMaxTotalBytes / 2);
  alive.clear();
  EXPECT_EQ(Grammar::MaskCache::total_bytes(), before);  // freed with their grammars
}

}  // namespace
}  // namespace attnserve::grammar
