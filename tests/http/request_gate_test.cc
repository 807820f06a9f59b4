// The request gate (server/http/request_gate.h) through the decoders that call it: deep
// nesting, oversized lists and fields the server does not honour are refused before
// anything is built from the body; the no-op values SDKs send are accepted.
#include "server/http/request_gate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "server/http/conversations_api.h"
#include "server/http/http_errors.h"
#include "server/http/openai_request.h"
#include "server/http/responses_api.h"

namespace attnserve::http {
namespace {

using ::testing::HasSubstr;

std::string Nested(int depth, const std::string& inner = "1") {
  return std::string(size_t(depth), '[') + inner + std::string(size_t(depth), ']');
}

// The OpenAI error's param of a refusal, or "" for none.
std::string BodyParam(const absl::Status& s) {
  const nlohmann::json body = ErrorBody(s);
  return body["error"]["param"].is_string() ? body["error"]["param"].get<std::string>() : "";
}

TEST(JsonNestingDepthTest, CountsBracketsOutsideStrings) {
  EXPECT_EQ(JsonNestingDepth(R"({"a":[1,{"b":[]}]})", 32), 4);
  EXPECT_EQ(JsonNestingDepth(R"({"a":"[[[[\"[[[["})", 32), 1);
  EXPECT_EQ(JsonNestingDepth("", 32), 0);
  // Stops as soon as the limit is passed.
  EXPECT_EQ(JsonNestingDepth(Nested(100000), 32), 33);
}

TEST(RequestGateTest, RefusesDeepNestingInEveryDecoder) {
  const std::string deep = Nested(100000);
  const std::string metadata = absl::StrCat(R"({"input":"hi","metadata":{"k":)", deep, "}}");
  for (const absl::Status& s :
       {ParseResponsesRequest(metadata, 1).status(),
        ParseResponsesRequest(absl::StrCat(R"({"input":[{"role":"user","content":)", deep, "}]}"), 1)
            .status(),
        ParseOpenAiRequest(Route::kChat,
                           absl::StrCat(R"({"messages":[{"role":"user","content":"x","x":)", deep,
                                        "}]})"),
                           1)
            .status(),
        ParseConversationCreate(absl::StrCat(R"({"items":)", deep, "}")).status(),
        ParseForkRequest(absl::StrCat(R"({"item_id":)", deep, "}")).status()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("nests deeper than 32 levels"));
  }
  // At the limit it parses.
  EXPECT_TRUE(ParseRequestBody(absl::StrCat(R"({"metadata":{}, "input":)", Nested(31, "\"x\""), "}"),
                               RequestKind::kResponses)
                  .ok());
}

TEST(RequestGateTest, RefusesSixtyThousandEmptyAssistantMessages) {
  std::string body = R"({"messages":[{"role":"user","content":"hi"})";
  for (int i = 0; i < 60000; ++i) body += R"(,{"role":"assistant"})";
  body += "]}";
  auto r = ParseOpenAiRequest(Route::kChat, body, 1);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BodyParam(r.status()), "messages");
  EXPECT_THAT(r.status().message(), HasSubstr("at most 1024 items (60001 given)"));
}

TEST(RequestGateTest, RefusesOverlongListsAndMetadata) {
  std::string parts = R"({"input":[{"role":"user","content":[)";
  for (int i = 0; i < 65; ++i) parts += absl::StrCat(i ? "," : "", R"({"type":"input_text","text":"a"})");
  parts += "]}]}";
  EXPECT_EQ(BodyParam(ParseResponsesRequest(parts, 1).status()), "input[0].content");
  std::string stops = R"({"prompt":"a","stop":[)";
  for (int i = 0; i < 17; ++i) stops += absl::StrCat(i ? "," : "", "\"s\"");
  stops += "]}";
  EXPECT_EQ(BodyParam(ParseOpenAiRequest(Route::kCompletions, stops, 1).status()), "stop");
  std::string keys = R"({"input":"a","metadata":{)";
  for (int i = 0; i < 17; ++i) keys += absl::StrCat(i ? "," : "", "\"k", i, "\":\"v\"");
  keys += "}}";
  auto r = ParseResponsesRequest(keys, 1);
  EXPECT_EQ(BodyParam(r.status()), "metadata");
  EXPECT_THAT(r.status().message(), HasSubstr("at most 16 keys"));
  const std::string long_value = absl::StrCat(R"({"input":"a","metadata":{"k":")",
                                              std::string(513, 'v'), "\"}}");
  EXPECT_THAT(ParseResponsesRequest(long_value, 1).status().message(),
              HasSubstr("longer than 512 characters"));
}

TEST(RequestGateTest, RefusesFieldsItWouldIgnore) {
  struct Case {
    RequestKind kind;
    std::string body;
    std::string param;
  };
  const std::string tool =
      R"([{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])";
  const std::vector<Case> cases = {
      {RequestKind::kCompletions, absl::StrCat(R"({"prompt":"a","tools":)", tool, "}"), "tools"},
      {RequestKind::kCompletions, R"({"prompt":"a","tool_choice":"required"})", "tool_choice"},
      {RequestKind::kChat, R"({"messages":[],"frequency_penalty":0.5})", "frequency_penalty"},
      {RequestKind::kChat, R"({"messages":[],"logit_bias":{"50256":-100}})", "logit_bias"},
      {RequestKind::kChat, R"({"messages":[],"no_such_field":1})", "no_such_field"},
      {RequestKind::kChat, R"({"messages":[{"role":"user","content":"x","name":"bob"}]})",
       "messages[0].name"},
      {RequestKind::kResponses,
       R"({"input":[{"role":"assistant","tool_calls":[{"id":"c","type":"function"}]}]})",
       "input[0].tool_calls"},
      {RequestKind::kCompletions, R"({"prompt":"a","echo":true})", "echo"},
      {RequestKind::kCompletions, R"({"prompt":"a","suffix":"z"})", "suffix"},
      {RequestKind::kChat, R"({"messages":[],"functions":[{"name":"f"}]})", "functions"},
      {RequestKind::kResponses, R"({"input":"a","reasoning":{"effort":"high"}})", "reasoning"},
      {RequestKind::kConversationCreate, R"({"items":[],"extra":1})", "extra"},
      {RequestKind::kConversationFork, R"({"item_id":"x","at":2})", "at"},
  };
  for (const Case& c : cases) {
    auto r = ParseRequestBody(c.body, c.kind);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.body;
    EXPECT_EQ(BodyParam(r.status()), c.param) << c.body << ": " << r.status();
  }
  // Through the decoders the HTTP routes call, the same.
  auto completion = ParseOpenAiRequest(
      Route::kCompletions, absl::StrCat(R"({"prompt":"x","tools":)", tool, "}"), 1);
  EXPECT_EQ(BodyParam(completion.status()), "tools");
  EXPECT_THAT(completion.status().message(), HasSubstr("not supported"));
}

TEST(RequestGateTest, AcceptsTheNoOpValuesSdksSend) {
  auto chat = ParseOpenAiRequest(Route::kChat, R"({"model":"m",
      "messages":[{"role":"user","content":"x"},
                  {"role":"assistant","content":"y","refusal":null,"annotations":[],"tool_calls":[]}],
      "tools":[],"tool_choice":"auto","parallel_tool_calls":true,"response_format":{"type":"text"},
      "frequency_penalty":0,"presence_penalty":0,"logit_bias":{},"n":1,"user":"u",
      "store":false,"service_tier":"auto","modalities":["text"],"top_logprobs":null})", 1);
  EXPECT_TRUE(chat.ok()) << chat.status();
  auto responses = ParseResponsesRequest(R"({"input":[{"type":"message","role":"assistant",
      "id":"msg_1","status":"completed",
      "content":[{"type":"output_text","text":"y","annotations":[],"logprobs":[]}]}],
      "text":{"format":{"type":"text"}},"tools":[],"tool_choice":"auto","truncation":"disabled",
      "include":[],"background":false,"parallel_tool_calls":false,"user":"u"})", 1);
  EXPECT_TRUE(responses.ok()) << responses.status();
  auto completions = ParseOpenAiRequest(
      Route::kCompletions, R"({"prompt":"a","echo":false,"best_of":1,"suffix":null})", 1);
  EXPECT_TRUE(completions.ok()) << completions.status();
}

// A member whose value is null is as if absent (json_fields.h's IsAbsent), as in
// response_format and tools: a message's name, a content part's member, a body field the
// server does not know. Given a value, each is refused by name.
TEST(RequestGateTest, ANullMemberIsAbsent) {
  auto chat = ParseOpenAiRequest(Route::kChat, R"({"messages":[
      {"role":"user","name":null,"content":[{"type":"text","text":"x","cache_control":null}]}],
      "no_such_field":null})", 1);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->messages[0].content, "x");
  auto responses = ParseResponsesRequest(
      R"({"input":[{"type":"message","role":"user","name":null,"content":"x"}]})", 1);
  EXPECT_TRUE(responses.ok()) << responses.status();
  EXPECT_EQ(BodyParam(ParseOpenAiRequest(Route::kChat,
                R"({"messages":[{"role":"user","content":"x","name":"bob"}]})", 1).status()),
            "messages[0].name");
  EXPECT_EQ(BodyParam(ParseOpenAiRequest(Route::kChat, R"({"messages":[{"role":"user",
                "content":[{"type":"text","text":"x","cache_control":{}}]}]})", 1).status()),
            "messages[0].content[0].cache_control");
}

TEST(RequestGateTest, ErrorMessagesDoNotEchoTheInput) {
  const std::string name(100000, 'x');
  auto r = ParseRequestBody(absl::StrCat("{\"", name, "\":1}"), RequestKind::kChat);
  ASSERT_FALSE(r.ok());
  EXPECT_LT(r.status().message().size(), 200u);
}

}  // namespace
}  // namespace attnserve::http
