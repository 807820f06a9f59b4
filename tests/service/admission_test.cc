// ParseGenerate's checks, without a server. Requests name a session, so the (empty)
// catalogue is never consulted.
#include "server/service/admission.h"

#include <gtest/gtest.h>

#include "server/grammar/matcher.h"
#include "server/service/constraints.h"

namespace attnserve::service {
namespace {

absl::StatusOr<ParsedGenerate> Parse(const v1::GenerateRequest& request) {
  static const catalogue::ModelCatalogue* const models = new catalogue::ModelCatalogue({});
  return ParseGenerate(request, *models, RequestLimits{});
}

v1::GenerateRequest Request(bool logprobs, int top_logprobs) {
  v1::GenerateRequest r;
  r.set_session_id("s");
  r.set_text("hello");
  r.set_logprobs(logprobs);
  r.set_top_logprobs(top_logprobs);
  return r;
}

TEST(ParseGenerate, TopLogprobsFromZeroToTwentyWithLogprobs) {
  for (int n : {0, 1, 20}) {
    auto parsed = Parse(Request(true, n));
    ASSERT_TRUE(parsed.ok()) << n << ": " << parsed.status();
    EXPECT_TRUE(parsed->turn.logprobs);
    EXPECT_EQ(parsed->turn.top_logprobs, n);
  }
  auto plain = Parse(Request(false, 0));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->turn.logprobs);
  EXPECT_EQ(plain->turn.top_logprobs, 0);
}

TEST(ParseGenerate, TopLogprobsOutOfRangeOrWithoutLogprobsIsInvalidNamingTheField) {
  struct Case {
    bool logprobs;
    int top_logprobs;
    std::string message;
  };
  for (const Case& c : {Case{true, 21, "top_logprobs must be in [0, 20], got 21"},
                        Case{true, -1, "top_logprobs must be in [0, 20], got -1"},
                        Case{false, 3, "top_logprobs: 3 alternatives need logprobs"}}) {
    auto parsed = Parse(Request(c.logprobs, c.top_logprobs));
    ASSERT_FALSE(parsed.ok()) << c.top_logprobs;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(c.message), std::string::npos)
        << parsed.status();
  }
}

v1::GenerateRequest WithSchema(const std::string& schema) {
  v1::GenerateRequest r = Request(false, 0);
  r.mutable_sampling()->mutable_constraint()->set_json_schema(schema);
  return r;
}

TEST(ParseGenerate, JsonSchemaBecomesTheTurnsGrammarInDeclaredOrder) {
  auto parsed = Parse(WithSchema(
      R"({"type":"object","properties":{"b":{"type":"integer"},"a":{"enum":["x"]}},)"
      R"("required":["b","a"],"additionalProperties":false})"));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->turn.constraint.has_value());
  grammar::Matcher matcher(parsed->turn.constraint->grammar);
  EXPECT_TRUE(matcher.Accepts(R"({"b": 12, "a": "x"})"));
  EXPECT_FALSE(matcher.Accepts(R"({"a": "x", "b": 12})"));  // properties in declared order
  EXPECT_FALSE(matcher.Accepts(R"({"b": 1.5)"));
  ASSERT_TRUE(matcher.Accept(R"({"b":7,"a":"x"})").ok());
  EXPECT_TRUE(matcher.MustEnd());
  EXPECT_TRUE(parsed->turn.constraint->trigger.empty());

  auto plain = Parse(Request(false, 0));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->turn.constraint.has_value());
}

TEST(ParseGenerate, JsonObjectAllowsAnyObjectOnly) {
  v1::GenerateRequest r = Request(false, 0);
  r.mutable_sampling()->mutable_constraint()->set_json_object(true);
  auto parsed = Parse(r);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  grammar::Matcher matcher(parsed->turn.constraint->grammar);
  EXPECT_TRUE(matcher.Accepts(R"({"k": [1, {"x": null}]})"));
  EXPECT_FALSE(matcher.Accepts("[1]"));
}

TEST(ParseGenerate, SchemaThatDoesNotCompileIsInvalidNamingFieldAndKeyword) {
  struct Case {
    std::string schema;
    std::vector<std::string> named;
  };
  for (const Case& c :
       {Case{"{\"type\":", {"sampling.constraint.json_schema", "not JSON"}},
        Case{R"({"type":"object","properties":{"a":{"type":"integer","multipleOf":3}}})",
             {"sampling.constraint.json_schema", "multipleOf", "/properties/a"}},
        Case{R"({"type":"strung"})", {"sampling.constraint.json_schema", "keyword 'type'"}}}) {
    auto parsed = Parse(WithSchema(c.schema));
    ASSERT_FALSE(parsed.ok()) << c.schema;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    for (const std::string& n : c.named) {
      EXPECT_NE(parsed.status().message().find(n), std::string::npos)
          << n << " in " << parsed.status();
    }
    EXPECT_TRUE(parsed.status().GetPayload(kConstraintErrorPayload).has_value());
  }
}

TEST(ParseGenerate, ToolCallsCompileFromTheProtoSpec) {
  v1::GenerateRequest r = Request(false, 0);
  v1::ToolCallConstraint* tools = r.mutable_sampling()->mutable_constraint()->mutable_tool_calls();
  v1::FunctionTool* f = tools->add_functions();
  f->set_name("get_weather");
  f->set_parameters_schema(
      R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})");
  tools->set_choice(v1::ToolCallConstraint::CHOICE_NAMED);
  tools->set_function_name("get_weather");
  tools->set_format("plain");
  auto parsed = Parse(r);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  grammar::Matcher matcher(parsed->turn.constraint->grammar);
  EXPECT_TRUE(
      matcher.Accepts(R"(<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}})"));
  EXPECT_FALSE(matcher.Accepts(R"(<tool_call>{"name": "other")"));

  tools->set_format("xml");
  auto format = Parse(r);
  ASSERT_FALSE(format.ok());
  EXPECT_NE(format.status().message().find("sampling.constraint.tool_calls.format"),
            std::string::npos)
      << format.status();
  tools->set_format("");
  f->set_parameters_schema("{oops");
  auto schema = Parse(r);
  ASSERT_FALSE(schema.ok());
  EXPECT_NE(schema.status().message().find(
                "sampling.constraint.tool_calls.functions[0].parameters_schema"),
            std::string::npos)
      << schema.status();
}

TEST(ParseGenerate, StopStringsAreRefusedUnderAConstraintFromTheFirstByte) {
  // A stop string would cut a constrained answer that then reports itself complete.
  v1::GenerateRequest schema = WithSchema(R"({"type":"object"})");
  schema.mutable_sampling()->add_stop("}");
  auto refused = Parse(schema);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("sampling.stop"), std::string::npos) << refused.status();
  EXPECT_NE(refused.status().message().find("json_schema"), std::string::npos) << refused.status();

  v1::GenerateRequest r = Request(false, 0);
  r.mutable_sampling()->add_stop("}");
  v1::ToolCallConstraint* tools = r.mutable_sampling()->mutable_constraint()->mutable_tool_calls();
  tools->add_functions()->set_name("ping");
  tools->set_choice(v1::ToolCallConstraint::CHOICE_REQUIRED);
  EXPECT_FALSE(Parse(r).ok());
  // Under tool_choice auto they end the free text before a call (the scheduler's rule).
  tools->set_choice(v1::ToolCallConstraint::CHOICE_AUTO);
  auto lazy = Parse(r);
  EXPECT_TRUE(lazy.ok()) << lazy.status();
}

TEST(ConstraintCache, CompilesEachDistinctConstraintOnceAndDropsTheLeastRecentlyUsed) {
  ConstraintCache cache(2);
  v1::Constraint a, b, c;
  a.set_json_schema(R"({"type":"integer"})");
  b.set_json_schema(R"({"type":"boolean"})");
  c.set_json_object(true);
  auto first = cache.Get(a);
  ASSERT_TRUE(first.ok()) << first.status();
  auto again = cache.Get(a);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(first->grammar, again->grammar);  // the same compiled grammar, shared
  EXPECT_EQ(cache.stats().misses, 1);
  EXPECT_EQ(cache.stats().hits, 1);
  ASSERT_TRUE(cache.Get(b).ok());
  ASSERT_TRUE(cache.Get(a).ok());  // a is now the most recently used
  ASSERT_TRUE(cache.Get(c).ok());  // b goes
  EXPECT_EQ(cache.stats().entries, 2u);
  EXPECT_EQ(cache.stats().misses, 3);
  ASSERT_TRUE(cache.Get(a).ok());
  EXPECT_EQ(cache.stats().misses, 3);
  ASSERT_TRUE(cache.Get(b).ok());
  EXPECT_EQ(cache.stats().misses, 4);

  // A refusal is kept as well, and answered the same.
  v1::Constraint bad;
  bad.set_json_schema(R"({"type":"integer","multipleOf":3})");
  const absl::Status refused = cache.Get(bad).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.Get(bad).status(), refused);
  EXPECT_EQ(cache.stats().misses, 5);
}

}  // namespace
}  // namespace attnserve::service
