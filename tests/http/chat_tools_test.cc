// Tools on chat completions without a server: the request's tools, tool_choice and
// parallel_tool_calls read into the prompt's definitions and the turn's constraint (and
// every shape not served refused, naming it); tool calls and results in the history; the
// answer's tool_calls, whole and streamed as the SDKs accumulate them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/http/json_fields.h"
#include "server/http/openai_request.h"
#include "server/http/openai_response.h"
#include "server/http/responses_api.h"

namespace attnserve::http {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

const char kTools[] =
    R"("tools":[{"type":"function","function":{"name":"get_weather","description":"Weather",
        "parameters":{"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}},
        "required":["zeta","alpha"],"additionalProperties":false},"strict":true}},
       {"type":"function","function":{"name":"ping"}}])";

absl::StatusOr<OpenAiRequest> Chat(const std::string& more) {
  return ParseOpenAiRequest(
      Route::kChat, absl::StrCat(R"({"messages":[{"role":"user","content":"x"}],)", more, "}"), 1);
}

TEST(ChatToolsTest, AutoByDefaultWithTheParametersInDeclaredOrder) {
  auto r = Chat(kTools);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->tools.constraint.has_value());
  const v1::ToolCallConstraint& c = *r->tools.constraint;
  EXPECT_EQ(c.choice(), v1::ToolCallConstraint::CHOICE_AUTO);
  EXPECT_TRUE(c.parallel());
  ASSERT_EQ(c.functions_size(), 2);
  EXPECT_EQ(c.functions(0).name(), "get_weather");
  EXPECT_EQ(c.functions(0).parameters_schema(),
            R"({"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}},"required":["zeta","alpha"],"additionalProperties":false})");
  EXPECT_EQ(c.functions(1).parameters_schema(), "");  // any object
  ASSERT_EQ(r->tools.definitions.size(), 2u);
  EXPECT_EQ(r->tools.definitions[1], R"({"type": "function", "function": {"name": "ping"}})");
  EXPECT_THAT(r->tools.definitions[0],
              HasSubstr(R"("properties": {"zeta": {"type": "string"}, "alpha": {"type": "integer"}})"));
  EXPECT_FALSE(r->generate.sampling().has_constraint());  // the front sets it with the format
}

TEST(ChatToolsTest, RequiredNamedNoneAndParallel) {
  auto required = Chat(absl::StrCat(kTools, R"(,"tool_choice":"required","parallel_tool_calls":false)"));
  ASSERT_TRUE(required.ok()) << required.status();
  EXPECT_EQ(required->tools.constraint->choice(), v1::ToolCallConstraint::CHOICE_REQUIRED);
  EXPECT_FALSE(required->tools.constraint->parallel());
  auto named = Chat(absl::StrCat(kTools, R"(,"tool_choice":{"type":"function","function":{"name":"ping"}})"));
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->tools.constraint->choice(), v1::ToolCallConstraint::CHOICE_NAMED);
  EXPECT_EQ(named->tools.constraint->function_name(), "ping");
  // none: no calls, the tools still described.
  auto none = Chat(absl::StrCat(kTools, R"(,"tool_choice":"none")"));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->tools.constraint.has_value());
  EXPECT_EQ(none->tools.definitions.size(), 2u);
  auto empty = Chat(R"("tools":[],"tool_choice":"auto")");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_FALSE(empty->tools.constraint.has_value());
}

TEST(ChatToolsTest, RefusalsNameTheMember) {
  const std::string f = R"({"type":"function","function":{"name":"f"}})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("tools":[{"type":"code_interpreter"}])", "tools[0].type"},
      {R"("tools":{"a":1})", "tools"},
      {R"("tools":[{"type":"function","function":{"name":"f","examples":[]}}])", "tools[0].function.examples"},
      {R"("tools":[{"type":"function","function":{"name":"f"},"cache":true}])", "tools[0].cache"},
      {R"("tools":[{"type":"function","function":{"name":"f g"}}])", "tools[0].function.name"},
      {R"("tools":[{"type":"function","function":{"name":"f","parameters":"{}"}}])", "tools[0].function.parameters"},
      {R"("tools":[{"type":"function","function":{"name":"f","strict":"yes"}}])", "tools[0].function.strict"},
      {absl::StrCat(R"("tools":[)", f, ",", f, "]"), "tools[1].function.name"},
      {absl::StrCat(R"("tools":[)", f, R"(],"tool_choice":{"type":"function","function":{"name":"g"}})"),
       "tool_choice.function.name"},
      {absl::StrCat(R"("tools":[)", f, R"(],"tool_choice":"any")"), "tool_choice"},
      {absl::StrCat(R"("tools":[)", f, R"(],"tool_choice":{"type":"allowed_tools","mode":"auto"})"), "tool_choice.mode"},
      {R"("tool_choice":"required")", "tool_choice"},
      {absl::StrCat(R"("tools":[)", f, R"(],"parallel_tool_calls":"yes")"), "parallel_tool_calls"},
      {R"("functions":[{"name":"f"}])", "functions"},
  };
  for (const auto& [more, param] : cases) {
    auto r = Chat(more);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << more;
    EXPECT_EQ(ParamOf(r.status()), param) << more << ": " << r.status();
  }
  std::string many = R"("tools":[)";
  for (int i = 0; i < 129; ++i) absl::StrAppend(&many, i ? "," : "", R"({"type":"function","function":{"name":"f)", i, R"("}})");
  EXPECT_EQ(ParamOf(Chat(many + "]").status()), "tools");
}

// A member whose value is null is as if absent (json_fields.h's IsAbsent), as in
// response_format and messages: in a tool, its function, tool_choice and a message's
// tool_calls; the flat tools of /v1/responses too. Given a value, the member is refused.
TEST(ChatToolsTest, ANullMemberIsAbsent) {
  auto r = Chat(R"("tools":[{"type":"function","function":{"name":"f","description":null,
      "parameters":null,"strict":null,"extra":null},"extra":null}],
      "tool_choice":{"type":"function","function":{"name":"f","extra":null},"extra":null})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tools.constraint->choice(), v1::ToolCallConstraint::CHOICE_NAMED);
  EXPECT_EQ(r->tools.constraint->functions(0).parameters_schema(), "");
  auto history = ParseOpenAiRequest(Route::kChat, R"({"messages":[{"role":"user","content":"x"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","index":null,
       "function":{"name":"f","arguments":"{}","extra":null}}]},
      {"role":"tool","tool_call_id":"c","content":"ok"}]})", 1);
  ASSERT_TRUE(history.ok()) << history.status();
  EXPECT_EQ(history->messages[1].tool_calls.size(), 1u);
  auto flat = ParseResponsesRequest(R"({"input":[{"type":"function_call","call_id":"c","name":"f",
      "arguments":"{}","extra":null}],"tools":[{"type":"function","name":"f","extra":null}],
      "tool_choice":{"type":"function","name":"f","extra":null}})", 1);
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_EQ(ParamOf(Chat(R"("tools":[{"type":"function","function":{"name":"f"},"extra":1}])").status()),
            "tools[0].extra");
}

TEST(ChatToolsTest, HistoryCarriesCallsAndResults) {
  auto r = ParseOpenAiRequest(Route::kChat, R"({"messages":[
      {"role":"user","content":"Weather?"},
      {"role":"assistant","content":null,"refusal":null,"tool_calls":[
         {"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"zeta\": \"a\"}"}}]},
      {"role":"tool","tool_call_id":"call_1","content":[{"type":"text","text":"sunny"}]}]})", 1);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 3u);
  ASSERT_EQ(r->messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r->messages[1].tool_calls[0].id, "call_1");
  EXPECT_EQ(r->messages[1].tool_calls[0].name, "get_weather");
  EXPECT_EQ(r->messages[1].tool_calls[0].arguments, R"({"zeta": "a"})");
  EXPECT_EQ(r->messages[2].role, "tool");
  EXPECT_EQ(r->messages[2].tool_call_id, "call_1");
  EXPECT_EQ(r->messages[2].content, "sunny");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"role":"tool","content":"x"})", "messages[0].tool_call_id"},
      {R"({"role":"user","content":"x","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]})",
       "messages[0].tool_calls"},
      {R"({"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{}}}]})",
       "messages[0].tool_calls[0].function.arguments"},
      {R"({"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]})",
       "messages[0].tool_calls[0].id"},
      {R"({"role":"user","content":"x","tool_call_id":"c"})", "messages[0].tool_call_id"},
  };
  for (const auto& [message, param] : bad) {
    auto b = ParseOpenAiRequest(Route::kChat, absl::StrCat(R"({"messages":[)", message, "]}"), 1);
    EXPECT_EQ(ParamOf(b.status()), param) << message << ": " << b.status();
  }
}

scheduler::TokenEvent Token(std::string bytes) {
  scheduler::TokenEvent t;
  t.id = 1;
  t.bytes = std::move(bytes);
  return t;
}

scheduler::TurnResult Stopped(int64_t tokens) {
  scheduler::TurnResult r;
  r.reason = scheduler::FinishReason::kStop;
  r.prompt_tokens = 3;
  r.generated_tokens = tokens;
  return r;
}

const std::string kAnswer =
    "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"zeta\": \"a\", "
    "\"alpha\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n"
    "</tool_call>";

TEST(ToolAnswerTest, TheBodyCarriesTheCallsWithTheirArgumentsAsWritten) {
  auto request = Chat(kTools);
  ASSERT_TRUE(request.ok());
  request->tool_format = grammar::ToolCallFormat::kHermes;
  OpenAiAnswer answer(*request, "chatcmpl-1", absl::FromUnixSeconds(1700000000), "m");
  for (size_t i = 0; i < kAnswer.size(); i += 5) answer.Add({Token(kAnswer.substr(i, 5))});
  const json body = answer.Body(Stopped(20), "stop");
  const json& choice = body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["content"], "Checking.\n");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 2u);
  const json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_NE(call["id"], choice["message"]["tool_calls"][1]["id"]);
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["function"]["arguments"], "{\"zeta\": \"a\", \"alpha\": 1}");
  EXPECT_EQ(choice["message"]["tool_calls"][1]["function"]["arguments"], "{}");
  // Calls alone: content null. Cut short by max_tokens: "length", the call as written.
  OpenAiAnswer only(*request, "chatcmpl-2", absl::FromUnixSeconds(1700000000), "m");
  only.Add({Token(kAnswer.substr(10, 60))});
  const json cut = only.Body(Stopped(9), "length");
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(cut["choices"][0]["message"]["content"], nullptr);
  EXPECT_EQ(cut["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], "{\"zeta\": \"a");
  // No call: a plain answer.
  OpenAiAnswer text(*request, "chatcmpl-3", absl::FromUnixSeconds(1700000000), "m");
  text.Add({Token("Sunny.")});
  const json plain = text.Body(Stopped(2), "stop");
  EXPECT_EQ(plain["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(plain["choices"][0]["message"]["content"], "Sunny.");
  EXPECT_FALSE(plain["choices"][0]["message"].contains("tool_calls"));
}

TEST(ToolAnswerTest, StreamedAsTheSdksAccumulateThem) {
  auto request = Chat(absl::StrCat(kTools, R"(,"stream":true)"));
  ASSERT_TRUE(request.ok());
  request->tool_format = grammar::ToolCallFormat::kHermes;
  OpenAiAnswer answer(*request, "chatcmpl-1", absl::FromUnixSeconds(1700000000), "m");
  std::string events = answer.Start();
  for (size_t i = 0; i < kAnswer.size(); i += 3) events += answer.Tokens({Token(kAnswer.substr(i, 3))});
  events += answer.Finish(Stopped(30));
  std::vector<json> deltas;
  json last;
  for (absl::string_view e : absl::StrSplit(events, "\n\n", absl::SkipEmpty())) {
    ASSERT_EQ(e.substr(0, 6), "data: ");
    if (e == "data: [DONE]") continue;
    last = json::parse(e.substr(6));
    deltas.push_back(last["choices"][0]["delta"]);
    if (!last["choices"][0]["finish_reason"].is_null()) {
      EXPECT_EQ(last["choices"][0]["finish_reason"], "tool_calls");
    }
  }
  EXPECT_EQ(last["choices"][0]["finish_reason"], "tool_calls");
  std::string content;
  std::vector<json> calls;
  for (const json& d : deltas) {
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (!d.contains("tool_calls")) continue;
    ASSERT_EQ(d["tool_calls"].size(), 1u);
    const json& t = d["tool_calls"][0];
    const size_t index = t["index"].get<size_t>();
    if (index == calls.size()) {
      // The first delta of a call: index, id, type, name and empty arguments.
      EXPECT_EQ(t["type"], "function");
      EXPECT_EQ(t["function"]["arguments"], "");
      EXPECT_TRUE(t["id"].is_string());
      calls.push_back(t);
      continue;
    }
    ASSERT_EQ(index + 1, calls.size());
    EXPECT_FALSE(t.contains("id"));
    EXPECT_FALSE(t["function"].contains("name"));
    calls[index]["function"]["arguments"] =
        calls[index]["function"]["arguments"].get<std::string>() + t["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(content, "Checking.\n");
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(calls[0]["function"]["arguments"], "{\"zeta\": \"a\", \"alpha\": 1}");
  EXPECT_EQ(calls[1]["function"]["name"], "ping");
  EXPECT_EQ(calls[1]["function"]["arguments"], "{}");
}

scheduler::TurnResult AtLength(int64_t tokens) {
  scheduler::TurnResult r = Stopped(tokens);
  r.reason = scheduler::FinishReason::kLength;
  return r;
}

// The content and calls of streamed chat `events`, and the last finish_reason.
struct Streamed {
  std::string content;
  std::vector<json> calls;  // {name, arguments} accumulated by index
  json finish_reason;
};
Streamed ReadChatEvents(const std::string& events) {
  Streamed out;
  for (absl::string_view e : absl::StrSplit(events, "\n\n", absl::SkipEmpty())) {
    if (e == "data: [DONE]") continue;
    const json chunk = json::parse(e.substr(6));
    const json& choice = chunk["choices"][0];
    if (!choice["finish_reason"].is_null()) out.finish_reason = choice["finish_reason"];
    const json& d = choice["delta"];
    if (d.contains("content") && d["content"].is_string()) out.content += d["content"].get<std::string>();
    if (!d.contains("tool_calls")) continue;
    const json& t = d["tool_calls"][0];
    const size_t index = t["index"].get<size_t>();
    if (index == out.calls.size()) out.calls.push_back({{"name", t["function"]["name"]}, {"arguments", ""}});
    out.calls[index]["arguments"] =
        out.calls[index]["arguments"].get<std::string>() + t["function"]["arguments"].get<std::string>();
  }
  return out;
}

// max_tokens ends the answer inside a call's envelope: the envelope's bytes are never
// content, and the answer says "length", never "tool_calls" or "stop".
TEST(ToolAnswerTest, AnEnvelopeCutByMaxTokensIsNeverContent) {
  const std::string cuts[] = {"<tool_ca", "Checking.\n<tool_ca", "<tool_call>\n{\"name\": \"get_wea",
                              "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"zeta\""};
  for (const std::string& cut : cuts) {
    const bool text = cut.rfind("Checking.", 0) == 0;
    const bool call = cut.find("arguments") != std::string::npos;
    auto request = Chat(absl::StrCat(kTools, R"(,"tool_choice":"auto")"));
    ASSERT_TRUE(request.ok());
    request->tool_format = grammar::ToolCallFormat::kHermes;
    OpenAiAnswer whole(*request, "chatcmpl-1", absl::FromUnixSeconds(1700000000), "m");
    for (char c : cut) whole.Add({Token(std::string(1, c))});
    const json body = whole.Body(AtLength(int64_t(cut.size())), "length");
    const json& choice = body["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "length") << cut;
    EXPECT_EQ(choice["message"]["content"], text && !call ? json("Checking.\n") : call ? json(nullptr) : json(""))
        << cut << ": " << body.dump();
    EXPECT_EQ(choice["message"].contains("tool_calls"), call) << cut;
    if (call) {
      EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"], "{\"zeta\"");
    }

    auto streaming = Chat(absl::StrCat(kTools, R"(,"stream":true)"));
    ASSERT_TRUE(streaming.ok());
    streaming->tool_format = grammar::ToolCallFormat::kHermes;
    OpenAiAnswer stream(*streaming, "chatcmpl-2", absl::FromUnixSeconds(1700000000), "m");
    std::string events = stream.Start();
    for (char c : cut) events += stream.Tokens({Token(std::string(1, c))});
    events += stream.Finish(AtLength(int64_t(cut.size())));
    const Streamed got = ReadChatEvents(events);
    EXPECT_EQ(got.content, text ? "Checking.\n" : "") << cut;
    EXPECT_EQ(got.finish_reason, "length") << cut;
    EXPECT_EQ(got.calls.size(), call ? 1u : 0u) << cut;
  }
}

// tool_choice "auto" with stop strings: they end the free text before a call, and never
// cut a call (every stop string below is inside the calls' text).
TEST(ToolAnswerTest, UnderAutoStopStringsNeverCutACall) {
  for (const bool stream : {false, true}) {
    auto request = Chat(absl::StrCat(kTools, R"(,"stop":["}","\"","</tool_call>"])",
                                     stream ? R"(,"stream":true)" : ""));
    ASSERT_TRUE(request.ok()) << request.status();
    ASSERT_EQ(request->stop.size(), 3u);
    request->tool_format = grammar::ToolCallFormat::kHermes;
    OpenAiAnswer answer(*request, "chatcmpl-1", absl::FromUnixSeconds(1700000000), "m");
    std::string events = answer.Start();
    for (size_t i = 0; i < kAnswer.size(); i += 3) {
      if (stream) {
        events += answer.Tokens({Token(kAnswer.substr(i, 3))});
      } else {
        answer.Add({Token(kAnswer.substr(i, 3))});
      }
    }
    if (!stream) {
      const json body = answer.Body(Stopped(30), "stop");
      const json& message = body["choices"][0]["message"];
      EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
      EXPECT_EQ(message["content"], "Checking.\n");
      ASSERT_EQ(message["tool_calls"].size(), 2u) << body.dump();
      EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], "{\"zeta\": \"a\", \"alpha\": 1}");
      EXPECT_EQ(message["tool_calls"][1]["function"]["arguments"], "{}");
      continue;
    }
    events += answer.Finish(Stopped(30));
    const Streamed got = ReadChatEvents(events);
    EXPECT_EQ(got.finish_reason, "tool_calls");
    EXPECT_EQ(got.content, "Checking.\n");
    ASSERT_EQ(got.calls.size(), 2u);
    EXPECT_EQ(got.calls[0]["arguments"], "{\"zeta\": \"a\", \"alpha\": 1}");
  }
  // One in the free text ends the answer there, before any call.
  auto request = Chat(absl::StrCat(kTools, R"(,"stop":"ing")"));
  ASSERT_TRUE(request.ok());
  request->tool_format = grammar::ToolCallFormat::kHermes;
  OpenAiAnswer answer(*request, "chatcmpl-1", absl::FromUnixSeconds(1700000000), "m");
  for (size_t i = 0; i < kAnswer.size(); i += 3) answer.Add({Token(kAnswer.substr(i, 3))});
  const json body = answer.Body(Stopped(30), "stop");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Check");
  EXPECT_FALSE(body["choices"][0]["message"].contains("tool_calls"));
}

// Stop strings under a constraint that applies from the first byte would cut the
// constrained answer: refused naming `stop`, on chat and completions. Under "auto" (and
// with tools not called) they are served.
TEST(ChatToolsTest, StopUnderAConstraintFromTheFirstByteIsRefused) {
  const std::string schema =
      R"("response_format":{"type":"json_schema","json_schema":{"name":"p","schema":{"type":"object"}}})";
  const std::vector<std::string> refused = {
      absl::StrCat(kTools, R"(,"tool_choice":"required","stop":["}"])"),
      absl::StrCat(kTools, R"(,"tool_choice":{"type":"function","function":{"name":"ping"}},"stop":"x")"),
      absl::StrCat(schema, R"(,"stop":["\""])"),
      R"("response_format":{"type":"json_object"},"stop":"}")",
  };
  for (const std::string& more : refused) {
    auto r = Chat(more);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << more;
    EXPECT_EQ(ParamOf(r.status()), "stop") << more << ": " << r.status();
    EXPECT_THAT(r.status().message(), HasSubstr("would cut")) << r.status();
  }
  auto completion = ParseOpenAiRequest(
      Route::kCompletions, absl::StrCat(R"({"prompt":"a",)", schema, R"(,"stop":"\""})"), 1);
  EXPECT_EQ(ParamOf(completion.status()), "stop") << completion.status();
  for (const std::string& more :
       {absl::StrCat(kTools, R"(,"stop":["}"])"), absl::StrCat(kTools, R"(,"tool_choice":"none","stop":"}")"),
        std::string(R"("response_format":{"type":"text"},"stop":"}")")}) {
    auto r = Chat(more);
    EXPECT_TRUE(r.ok()) << more << ": " << r.status();
    EXPECT_EQ(r->stop, std::vector<std::string>{"}"});
  }
}


// --- /v1/responses ---

TEST(ResponsesToolsTest, FlatToolsFunctionItemsAndRefusals) {
  auto r = ParseResponsesRequest(R"({"input":[
      {"role":"user","content":"Weather?"},
      {"type":"message","role":"assistant","content":[{"type":"output_text","text":"On it."}]},
      {"type":"function_call","id":"fc_1","call_id":"call_1","name":"get_weather","arguments":"{}","status":"completed"},
      {"type":"function_call_output","call_id":"call_1","output":"sunny"}],
    "tools":[{"type":"function","name":"get_weather","description":"W","parameters":{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"string"}}},"strict":true}],
    "tool_choice":{"type":"function","name":"get_weather"},"parallel_tool_calls":false})", 1);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->input.size(), 3u);
  EXPECT_EQ(r->input[1].content, "On it.");  // the call joins its turn's text
  ASSERT_EQ(r->input[1].tool_calls.size(), 1u);
  EXPECT_EQ(r->input[1].tool_calls[0].id, "call_1");
  EXPECT_EQ(r->input[1].tool_calls[0].arguments, "{}");
  EXPECT_EQ(r->input[2].role, "tool");
  EXPECT_EQ(r->input[2].content, "sunny");
  ASSERT_TRUE(r->tools.constraint.has_value());
  EXPECT_EQ(r->tools.constraint->choice(), v1::ToolCallConstraint::CHOICE_NAMED);
  EXPECT_FALSE(r->tools.constraint->parallel());
  EXPECT_EQ(r->tools.constraint->functions(0).parameters_schema(),
            R"({"type":"object","properties":{"b":{"type":"string"},"a":{"type":"string"}}})");
  // Shown to the model in the chat shape.
  EXPECT_EQ(r->tools.definitions[0].rfind(R"({"type": "function", "function": {"name": "get_weather", )", 0), 0u)
      << r->tools.definitions[0];
  EXPECT_EQ(r->tool_choice_echo["name"], "get_weather");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"("input":"x","tools":[{"type":"function","function":{"name":"f"}}])", "tools[0].function"},
      {R"("input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"})", "tool_choice.name"},
      {R"("input":[{"type":"function_call","call_id":"c","name":"f"}])", "input[0].arguments"},
      {R"("input":[{"type":"function_call_output","call_id":"c","output":"x","extra":1}])", "input[0].extra"},
  };
  for (const auto& [more, param] : bad) {
    auto b = ParseResponsesRequest(absl::StrCat("{", more, "}"), 1);
    EXPECT_EQ(ParamOf(b.status()), param) << more << ": " << b.status();
  }
  // Tools and function items in a conversation are served.
  auto in_conversation = ParseResponsesRequest(
      R"({"input":[{"type":"function_call_output","call_id":"c","output":"x"}],)"
      R"("conversation":"conv_1","tools":[{"type":"function","name":"f"}]})", 1);
  ASSERT_TRUE(in_conversation.ok()) << in_conversation.status();
  EXPECT_EQ(in_conversation->conversation, "conv_1");
  EXPECT_EQ(in_conversation->input[0].role, "tool");
}

// The events of a streamed tool-mode response, in order, and the final output they built.
TEST(ResponsesToolsTest, StreamsMessageThenFunctionCallItems) {
  auto request = ParseResponsesRequest(absl::StrCat(R"({"input":"x","stream":true,"tools":[
      {"type":"function","name":"get_weather"},{"type":"function","name":"ping"}]})"), 1);
  ASSERT_TRUE(request.ok()) << request.status();
  request->tool_format = grammar::ToolCallFormat::kHermes;
  ResponsesAnswer answer(*request, "resp_1", 1700000000, "m", 0);
  std::string events = answer.Start();
  for (size_t i = 0; i < kAnswer.size(); i += 4) events += answer.Tokens({Token(kAnswer.substr(i, 4))});
  const json response = answer.Complete(Stopped(30), "stop");
  events += answer.Finish(response);
  std::vector<std::string> types;
  std::string arguments0;
  for (absl::string_view e : absl::StrSplit(events, "\n\n", absl::SkipEmpty())) {
    const size_t data = e.find("\ndata: ");
    ASSERT_NE(data, absl::string_view::npos);
    const json j = json::parse(e.substr(data + 7));
    const std::string type = j["type"];
    if (types.empty() || types.back() != type) types.push_back(type);
    if (type == "response.function_call_arguments.delta" && j["output_index"] == 1) {
      arguments0 += j["delta"].get<std::string>();
    }
  }
  const std::vector<std::string> want = {
      "response.created", "response.in_progress", "response.output_item.added",
      "response.content_part.added", "response.output_text.delta", "response.output_text.done",
      "response.content_part.done", "response.output_item.done", "response.output_item.added",
      "response.function_call_arguments.delta", "response.function_call_arguments.done",
      "response.output_item.done", "response.output_item.added",
      "response.function_call_arguments.delta", "response.function_call_arguments.done",
      "response.output_item.done", "response.completed"};
  EXPECT_EQ(types, want);
  const json& output = response["output"];
  ASSERT_EQ(output.size(), 3u);
  EXPECT_EQ(output[0]["type"], "message");
  EXPECT_EQ(output[0]["content"][0]["text"], "Checking.\n");
  EXPECT_EQ(output[1]["type"], "function_call");
  EXPECT_EQ(output[1]["status"], "completed");
  EXPECT_EQ(output[1]["name"], "get_weather");
  EXPECT_EQ(output[1]["arguments"], "{\"zeta\": \"a\", \"alpha\": 1}");
  EXPECT_EQ(output[1]["arguments"], arguments0);
  EXPECT_EQ(output[1]["call_id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(output[2]["name"], "ping");
  EXPECT_EQ(response["parallel_tool_calls"], true);
  EXPECT_EQ(response["tools"].size(), 2u);
  // Unstreamed, the same output.
  auto plain = ParseResponsesRequest(R"({"input":"x","tools":[{"type":"function","name":"get_weather"}]})", 1);
  ASSERT_TRUE(plain.ok());
  plain->tool_format = grammar::ToolCallFormat::kHermes;
  ResponsesAnswer whole(*plain, "resp_2", 1700000000, "m", 0);
  whole.Add({Token(kAnswer.substr(10))});
  const json only_calls = whole.Complete(Stopped(30), "stop");
  ASSERT_EQ(only_calls["output"].size(), 2u);
  EXPECT_EQ(only_calls["output"][0]["type"], "function_call");
  EXPECT_EQ(only_calls["output"][0]["arguments"], "{\"zeta\": \"a\", \"alpha\": 1}");
}

// max_output_tokens ends the answer inside a call's envelope: its bytes are no message
// text, and the response is incomplete (max_output_tokens), as the API says.
TEST(ResponsesToolsTest, AnEnvelopeCutByMaxOutputTokensIsNeverText) {
  for (const bool stream : {false, true}) {
    auto request = ParseResponsesRequest(absl::StrCat(R"({"input":"x","max_output_tokens":8,"tools":[
        {"type":"function","name":"get_weather"}])", stream ? R"(,"stream":true})" : "}"), 1);
    ASSERT_TRUE(request.ok()) << request.status();
    request->tool_format = grammar::ToolCallFormat::kHermes;
    ResponsesAnswer answer(*request, "resp_1", 1700000000, "m", 0);
    std::string events = answer.Start();
    for (char c : std::string("<tool_ca")) {
      if (stream) {
        events += answer.Tokens({Token(std::string(1, c))});
      } else {
        answer.Add({Token(std::string(1, c))});
      }
    }
    const json response = answer.Complete(AtLength(8), "length");
    events += answer.Finish(response);
    EXPECT_EQ(response["status"], "incomplete");
    EXPECT_EQ(response["incomplete_details"]["reason"], "max_output_tokens");
    ASSERT_EQ(response["output"].size(), 1u) << response.dump();
    EXPECT_EQ(response["output"][0]["type"], "message");
    EXPECT_EQ(response["output"][0]["content"][0]["text"], "");
    EXPECT_EQ(events.find("<tool"), std::string::npos) << events;
    EXPECT_NE(events.find("response.incomplete"), std::string::npos);
  }
}

}  // namespace
}  // namespace attnserve::http
