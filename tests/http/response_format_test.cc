// response_format and text.format read into SamplingParams.constraint through the
// decoders the routes call (ParseOpenAiRequest, ParseResponsesRequest), and refusals
// naming the member that would be ignored.
#include "server/http/response_format.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "server/http/json_fields.h"
#include "server/http/openai_request.h"
#include "server/http/responses_api.h"
#include "server/service/constraints.h"

namespace attnserve::http {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

absl::StatusOr<OpenAiRequest> Chat(const std::string& format) {
  return ParseOpenAiRequest(
      Route::kChat,
      absl::StrCat(R"({"messages":[{"role":"user","content":"x"}],"response_format":)", format,
                   "}"),
      1);
}

TEST(ResponseFormatTest, JsonSchemaOnChatAndCompletionsBecomesTheConstraint) {
  const std::string format =
      R"({"type":"json_schema","json_schema":{"name":"p","strict":true,
          "schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}})";
  auto chat = Chat(format);
  ASSERT_TRUE(chat.ok()) << chat.status();
  const v1::Constraint& c = chat->generate.sampling().constraint();
  ASSERT_EQ(c.kind_case(), v1::Constraint::kJsonSchema);
  EXPECT_EQ(json::parse(c.json_schema()),
            json::parse(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})"));
  auto completion = ParseOpenAiRequest(
      Route::kCompletions, absl::StrCat(R"({"prompt":"a","response_format":)", format, "}"), 1);
  ASSERT_TRUE(completion.ok()) << completion.status();
  EXPECT_EQ(completion->generate.sampling().constraint().json_schema(), c.json_schema());
}

TEST(ResponseFormatTest, SchemaKeepsTheDeclaredOrderOfMembers) {
  auto chat = Chat(R"({"type":"json_schema","json_schema":{"name":"p","schema":
      {"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}}}}})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->generate.sampling().constraint().json_schema(),
            R"({"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}}})");
  auto responses = ParseResponsesRequest(R"({"input":"x","text":{"format":{"type":"json_schema",
      "name":"p","schema":{"required":["b","a"],"properties":{"b":{},"a":{}}}}}})", 1);
  ASSERT_TRUE(responses.ok()) << responses.status();
  EXPECT_EQ(responses->generate.sampling().constraint().json_schema(),
            R"({"required":["b","a"],"properties":{"b":{},"a":{}}})");
}

// A member whose value is null is as if absent (json_fields.h's IsAbsent), here as in
// tools and messages; given a value, the same member is refused by name.
TEST(ResponseFormatTest, ANullMemberIsAbsent) {
  auto chat = Chat(R"({"type":"json_schema","json_schema":{"name":"p","schema":{"type":"object"},
      "strict":null,"description":null,"extra":null},"extra":null})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->generate.sampling().constraint().json_schema(), R"({"type":"object"})");
  auto responses = ParseResponsesRequest(
      R"({"input":"x","text":{"format":{"type":"json_object","name":null},"verbosity":null}})", 1);
  ASSERT_TRUE(responses.ok()) << responses.status();
  EXPECT_TRUE(responses->generate.sampling().constraint().json_object());
  EXPECT_EQ(ParamOf(Chat(R"({"type":"json_object","extra":1})").status()), "response_format.extra");
}

TEST(ResponseFormatTest, JsonObjectAndTextAndAbsent) {
  auto object = Chat(R"({"type":"json_object"})");
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_TRUE(object->generate.sampling().constraint().json_object());
  auto null_members = Chat(
      R"({"type":"json_schema","json_schema":{"name":"p","description":null,"schema":{}}})");
  ASSERT_TRUE(null_members.ok()) << null_members.status();  // null is as if absent
  EXPECT_EQ(null_members->generate.sampling().constraint().json_schema(), "{}");
  for (const std::string& free : {R"({"type":"text"})", "null"}) {
    auto text = Chat(free);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_FALSE(text->generate.sampling().has_constraint()) << free;
  }
}

TEST(ResponseFormatTest, RefusesWhatItWouldIgnoreNamingTheMember) {
  struct Case {
    std::string format;
    std::string param;
  };
  const std::vector<Case> cases = {
      {R"({"type":"json_schema","json_schema":{"name":"p","description":"d","schema":{}}})",
       "response_format.json_schema.description"},
      {R"({"type":"json_schema","json_schema":{"name":"p"}})", "response_format.json_schema.schema"},
      {R"({"type":"json_schema"})", "response_format.json_schema"},
      {R"({"type":"json_schema","json_schema":{"schema":{},"strict":"yes"}})",
       "response_format.json_schema.strict"},
      {R"({"type":"json_schema","json_schema":{"schema":"{}"}})", "response_format.json_schema.schema"},
      {R"({"type":"json_object","schema":{}})", "response_format.schema"},
      {R"({"type":"text","extra":1})", "response_format.extra"},
      {R"({"type":"grammar","grammar":"root ::= x"})", "response_format.type"},
      {R"({"json_schema":{"schema":{}}})", "response_format.type"},
      {R"("json_object")", "response_format"},
  };
  for (const Case& c : cases) {
    auto r = Chat(c.format);
    ASSERT_FALSE(r.ok()) << c.format;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.format;
    EXPECT_EQ(ParamOf(r.status()), c.param) << c.format << ": " << r.status();
  }
}

TEST(ResponseFormatTest, TextFormatOnResponsesIsReadAndEchoed) {
  const json format = json::parse(R"({"type":"json_schema","name":"p","strict":true,
      "schema":{"type":"array","items":{"enum":["a","b"]},"maxItems":2}})");
  auto r = ParseResponsesRequest(
      json{{"input", "x"}, {"text", {{"format", format}}}}.dump(), 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(json::parse(r->generate.sampling().constraint().json_schema()), format["schema"]);
  EXPECT_EQ(r->text, json({{"format", format}}));
  ResponsesAnswer answer(*r, "resp_x", 0, "m", 0);
  EXPECT_EQ(answer.Complete(scheduler::TurnResult{}, "stop")["text"], r->text);

  auto object = ParseResponsesRequest(R"({"input":"x","text":{"format":{"type":"json_object"}}})", 1);
  ASSERT_TRUE(object.ok()) << object.status();
  EXPECT_TRUE(object->generate.sampling().constraint().json_object());
  auto plain = ParseResponsesRequest(R"({"input":"x"})", 1);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->generate.sampling().has_constraint());
  EXPECT_EQ(plain->text, json::parse(R"({"format":{"type":"text"}})"));

  for (const auto& [body, param] : std::vector<std::pair<std::string, std::string>>{
           {R"({"input":"x","text":{"format":{"type":"json_schema","name":"p","schema":{},"description":"d"}}})",
            "text.format.description"},
           {R"({"input":"x","text":{"format":{"type":"json_schema","name":"p"}}})", "text.format.schema"},
           {R"({"input":"x","text":{"verbosity":"low"}})", "text.verbosity"},
           {R"({"input":"x","text":"json"})", "text"}}) {
    auto refused = ParseResponsesRequest(body, 1);
    ASSERT_FALSE(refused.ok()) << body;
    EXPECT_EQ(ParamOf(refused.status()), param) << body << ": " << refused.status();
  }
}

TEST(ResponseFormatTest, ConstraintRefusalsAreNamedAfterTheRequestField) {
  absl::Status refused = absl::InvalidArgumentError(
      "sampling.constraint.json_schema: unsupported keyword 'patternProperties' at /properties/a");
  refused.SetPayload(service::kConstraintErrorPayload, absl::Cord("json_schema"));
  const absl::Status named = NameConstraintError(refused, "text.format");
  EXPECT_EQ(named.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(named.message(),
            "text.format: unsupported keyword 'patternProperties' at /properties/a");
  EXPECT_EQ(ParamOf(named), "text.format");
  refused.SetPayload(service::kConstraintErrorPayload, absl::Cord("tool_calls"));
  EXPECT_EQ(ParamOf(NameConstraintError(refused, "response_format")), "tools");
  // A function's schema is named in the shape the request sent its tools in.
  absl::Status in_tool = absl::InvalidArgumentError(
      "sampling.constraint.tool_calls: unsupported keyword 'not' at /tools/12/function/parameters/properties/a");
  in_tool.SetPayload(service::kConstraintErrorPayload, absl::Cord("tool_calls"));
  EXPECT_EQ(NameConstraintError(in_tool, "response_format").message(),
            "tools: unsupported keyword 'not' at /tools/12/function/parameters/properties/a");
  EXPECT_EQ(NameConstraintError(in_tool, "text.format", /*flat_tools=*/true).message(),
            "tools: unsupported keyword 'not' at /tools/12/parameters/properties/a");
  const absl::Status other = absl::InvalidArgumentError("prompt: empty");
  EXPECT_EQ(NameConstraintError(other, "response_format"), other);
}

}  // namespace
}  // namespace attnserve::http
