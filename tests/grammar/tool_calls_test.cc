// Tool calls (server/grammar/tool_calls.h): the envelope grammar of each format and
// choice, and the answer read back whole and as it streams. The envelope texts are
// Hermes / Qwen's, as their chat templates document them.
#include "server/grammar/tool_calls.h"

#include <random>

#include "gtest/gtest.h"
#include "server/grammar/matcher.h"

namespace attnserve::grammar {
namespace {

using nlohmann::json;
using Kind = ToolCallStreamParser::Event::Kind;

const nlohmann::ordered_json kWeather = nlohmann::ordered_json::parse(R"({
  "type": "object",
  "properties": {"city": {"type": "string", "enum": ["Paris", "Tokyo"]},
                 "celsius": {"type": "boolean"}},
  "required": ["city", "celsius"], "additionalProperties": false})");
const nlohmann::ordered_json kTime = nlohmann::ordered_json::parse(R"({
  "type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
  "required": ["zone"], "additionalProperties": false})");

ToolCallSpec Spec(ToolChoice choice, bool parallel, ToolCallFormat format) {
  ToolCallSpec s;
  s.functions = {{"get_weather", kWeather}, {"get_time", kTime}};
  s.choice = choice;
  s.parallel = parallel;
  s.format = format;
  return s;
}

// Whether `text` is a whole sentence of the constraint's grammar.
bool Whole(const Constraint& c, const std::string& text) {
  Matcher m(c.grammar);
  return m.Accept(text).ok() && m.CanEnd();
}

const std::string kParisCall =
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
    "\"celsius\": true}}\n</tool_call>";

TEST(WriteToolCallsTest, WritesTheHermesAndPlainEnvelopes) {
  const std::vector<ToolCall> calls = {
      {"get_weather", R"({"city": "Paris", "celsius": true})"}, {"get_time", R"({"zone":"UTC"})"}};
  EXPECT_EQ(WriteToolCalls(ToolCallFormat::kHermes, {calls[0]}), kParisCall);
  EXPECT_EQ(WriteToolCalls(ToolCallFormat::kHermes, calls),
            kParisCall +
                "\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\":\"UTC\"}}\n"
                "</tool_call>");
  EXPECT_EQ(WriteToolCalls(ToolCallFormat::kPlain, calls),
            "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
            "\"celsius\": true}}</tool_call> <tool_call>{\"name\": \"get_time\", "
            "\"arguments\": {\"zone\":\"UTC\"}}</tool_call>");
}

TEST(CompileToolCallsTest, RequiredAcceptsDeclaredCallsFromTheFirstByte) {
  for (ToolCallFormat format : {ToolCallFormat::kHermes, ToolCallFormat::kPlain}) {
    auto c = CompileToolCalls(Spec(ToolChoice::kRequired, /*parallel=*/true, format));
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(c->trigger.empty());
    const ToolCall paris{"get_weather", R"({"city":"Paris","celsius":false})"};
    const ToolCall utc{"get_time", R"({"zone":"UTC"})"};
    EXPECT_TRUE(Whole(*c, WriteToolCalls(format, {paris})));
    EXPECT_TRUE(Whole(*c, WriteToolCalls(format, {paris, utc, paris})));
    // Free text first, an undeclared name, arguments outside the schema: refused.
    EXPECT_FALSE(Whole(*c, "Sure. " + WriteToolCalls(format, {paris})));
    EXPECT_FALSE(Whole(*c, WriteToolCalls(format, {{"get_wether", paris.arguments}})));
    EXPECT_FALSE(Whole(*c, WriteToolCalls(format, {{"get_weather", R"({"city":"Rome","celsius":false})"}})));
    EXPECT_FALSE(Whole(*c, WriteToolCalls(format, {{"get_time", paris.arguments}})));
    // Nothing after the last call but another call.
    Matcher m(c->grammar);
    ASSERT_TRUE(m.Accept(WriteToolCalls(format, {utc})).ok());
    EXPECT_TRUE(m.CanEnd());
    EXPECT_FALSE(m.MustEnd());  // another call may follow
    EXPECT_FALSE(m.Accepts("x"));
    EXPECT_FALSE(m.Accept(std::string(1, format == ToolCallFormat::kHermes ? '\n' : ' ') + "<tool_call>").ok() && m.CanEnd());
  }
}

TEST(CompileToolCallsTest, OneCallUnlessParallel) {
  auto c = CompileToolCalls(Spec(ToolChoice::kRequired, /*parallel=*/false, ToolCallFormat::kHermes));
  ASSERT_TRUE(c.ok()) << c.status();
  Matcher m(c->grammar);
  ASSERT_TRUE(m.Accept(kParisCall).ok());
  EXPECT_TRUE(m.MustEnd());
  EXPECT_FALSE(Whole(*c, kParisCall + "\n" + kParisCall));
}

TEST(CompileToolCallsTest, NamedAllowsOnlyThatFunction) {
  ToolCallSpec spec = Spec(ToolChoice::kNamed, /*parallel=*/false, ToolCallFormat::kHermes);
  spec.function_name = "get_time";
  auto c = CompileToolCalls(spec);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->trigger.empty());
  EXPECT_TRUE(Whole(*c, WriteToolCalls(ToolCallFormat::kHermes, {{"get_time", R"({"zone":"CET"})"}})));
  EXPECT_FALSE(Whole(*c, kParisCall));
}

TEST(CompileToolCallsTest, AutoIsLazyFromTheOpeningTag) {
  auto c = CompileToolCalls(Spec(ToolChoice::kAuto, /*parallel=*/true, ToolCallFormat::kHermes));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->trigger, "<tool_call>");
  EXPECT_TRUE(Whole(*c, kParisCall));  // the grammar covers the trigger onwards
  // Through the per-turn state: free text, then the call, then the end.
  ConstraintState state(*c);
  ASSERT_TRUE(state.Advance("Let me look that up.\n").ok());
  EXPECT_FALSE(state.active());
  ASSERT_TRUE(state.Advance(kParisCall.substr(0, 20)).ok());
  EXPECT_TRUE(state.active());
  ASSERT_TRUE(state.Advance(kParisCall.substr(20)).ok());
  EXPECT_TRUE(state.CanEnd());
  EXPECT_FALSE(state.Advance("\nMore text").ok());
}

TEST(CompileToolCallsTest, ParametersNullIsAnyObject) {
  ToolCallSpec spec;
  spec.functions = {{"ping", nullptr}};
  spec.choice = ToolChoice::kRequired;
  auto c = CompileToolCalls(spec);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(Whole(*c, WriteToolCalls(ToolCallFormat::kHermes, {{"ping", R"({"any": [1, {"x": null}]})"}})));
  EXPECT_FALSE(Whole(*c, WriteToolCalls(ToolCallFormat::kHermes, {{"ping", "[1]"}})));
}

TEST(CompileToolCallsTest, RefusalsNameWhatIsWrong) {
  auto message = [](const ToolCallSpec& s) {
    auto c = CompileToolCalls(s);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(c.status().message());
  };
  ToolCallSpec s = Spec(ToolChoice::kRequired, true, ToolCallFormat::kHermes);
  s.functions.clear();
  EXPECT_NE(message(s).find("no functions"), std::string::npos);
  s = Spec(ToolChoice::kRequired, true, ToolCallFormat::kHermes);
  s.functions[1].name = "get_weather";
  EXPECT_NE(message(s).find("/tools/1/function/name"), std::string::npos);
  s.functions[1].name = "get time";
  EXPECT_NE(message(s).find("/tools/1/function/name"), std::string::npos);
  s = Spec(ToolChoice::kNamed, true, ToolCallFormat::kHermes);
  s.function_name = "get_date";
  EXPECT_NE(message(s).find("get_date"), std::string::npos);
  s = Spec(ToolChoice::kRequired, true, ToolCallFormat::kHermes);
  s.functions[1].parameters = nlohmann::ordered_json::parse(
      R"({"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}})");
  EXPECT_NE(message(s).find("/tools/1/function/parameters"), std::string::npos) << message(s);
  EXPECT_FALSE(ToolCallFormatByName("llama3").ok());
  EXPECT_EQ(*ToolCallFormatByName(""), ToolCallFormat::kHermes);
  EXPECT_EQ(*ToolCallFormatByName("plain"), ToolCallFormat::kPlain);
}

TEST(ParseToolCallsTest, ContentThenCallsWithArgumentsAsWritten) {
  const std::string args0 = "{ \"city\" :\"Tokyo\",\n  \"celsius\": false }";
  const std::string args1 = R"({"zone":"UTC"})";
  const std::string text =
      "Checking.\n" + WriteToolCalls(ToolCallFormat::kHermes, {{"get_weather", args0}, {"get_time", args1}});
  ParsedAnswer a = ParseToolCalls(ToolCallFormat::kHermes, text);
  EXPECT_EQ(a.content, "Checking.\n");
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.calls[0].name, "get_weather");
  EXPECT_EQ(a.calls[0].arguments, args0);
  EXPECT_EQ(a.calls[1].name, "get_time");
  EXPECT_EQ(a.calls[1].arguments, args1);
  EXPECT_TRUE(a.complete);
  // Written back, the same text.
  EXPECT_EQ(a.content + WriteToolCalls(ToolCallFormat::kHermes, a.calls), text);
}

TEST(ParseToolCallsTest, ThePlainCloseTagInsideAStringIsArguments) {
  const std::string args = R"({"q": "a}</tool_call> b", "n": [1, {"x": "}"}]})";
  ParsedAnswer a = ParseToolCalls(ToolCallFormat::kPlain, WriteToolCalls(ToolCallFormat::kPlain, {{"search", args}}));
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].arguments, args);
  EXPECT_EQ(a.content, "");
  // Scalars as arguments, with the whitespace around them.
  a = ParseToolCalls(ToolCallFormat::kPlain, WriteToolCalls(ToolCallFormat::kPlain, {{"f", " -1.5e3 "}, {"g", "\"s\\\"}\""}}));
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.calls[0].arguments, " -1.5e3 ");
  EXPECT_EQ(a.calls[1].arguments, "\"s\\\"}\"");
}

TEST(ParseToolCallsTest, TextThatOnlyLooksLikeAnEnvelopeIsContent) {
  for (const std::string& text :
       {std::string("a <tool_cal b"), std::string("<tool_call> not json"),
        std::string("x <tool_call>\n{\"name\": \"bad name\"}"), std::string("ends with <tool_")}) {
    ParsedAnswer a = ParseToolCalls(ToolCallFormat::kHermes, text);
    EXPECT_EQ(a.content, text);
    EXPECT_TRUE(a.calls.empty()) << text;
  }
  // A failed envelope, then a real one.
  const std::string text = "<tool_call><tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
  ParsedAnswer a = ParseToolCalls(ToolCallFormat::kHermes, text);
  EXPECT_EQ(a.content, "<tool_call>");
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].arguments, "{}");
}

TEST(ParseToolCallsTest, ACallCutShortKeepsWhatWasWritten) {
  ParsedAnswer a = ParseToolCalls(ToolCallFormat::kHermes, kParisCall.substr(0, 60));
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_FALSE(a.complete);
  EXPECT_EQ(a.calls[0].name, "get_weather");
  const size_t args = kParisCall.find("{\"city");
  EXPECT_EQ(a.calls[0].arguments, kParisCall.substr(args, 60 - args));
  // Cut inside the closing tag: the arguments are whole.
  a = ParseToolCalls(ToolCallFormat::kHermes, kParisCall.substr(0, kParisCall.size() - 4));
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_FALSE(a.complete);
  EXPECT_EQ(a.calls[0].arguments, R"({"city": "Paris", "celsius": true})");
  // Cut inside the name: no call yet, the bytes are content.
  a = ParseToolCalls(ToolCallFormat::kHermes, kParisCall.substr(0, 25));
  EXPECT_TRUE(a.calls.empty());
  EXPECT_EQ(a.content, kParisCall.substr(0, 25));
}

// Fed in random pieces, the parser says the same as fed whole; a call's start comes
// before any of its arguments, and only once its name is whole.
TEST(ToolCallStreamParserTest, PiecesSayWhatTheWholeSays) {
  const std::string text =
      "Let me <tool check.\n" +
      WriteToolCalls(ToolCallFormat::kHermes,
                     {{"get_weather", R"({"city": "Paris", "celsius": true})"}, {"get_time", R"( {"zone": "UTC"} )"}});
  const ParsedAnswer whole = ParseToolCalls(ToolCallFormat::kHermes, text);
  ASSERT_EQ(whole.calls.size(), 2u);
  EXPECT_EQ(whole.content, "Let me <tool check.\n");
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    ToolCallStreamParser parser(ToolCallFormat::kHermes);
    std::vector<ToolCallStreamParser::Event> events;
    std::string content;
    std::vector<ToolCall> calls;
    int ends = 0;
    for (size_t at = 0; at < text.size();) {
      const size_t n = std::min(text.size() - at, size_t(rng() % 7 + 1));
      events.clear();
      parser.Feed(std::string_view(text).substr(at, n), &events);
      at += n;
      for (auto& e : events) {
        if (e.kind == Kind::kContent) content += e.text;
        if (e.kind == Kind::kCallStart) {
          ASSERT_EQ(e.index, int(calls.size()));
          calls.push_back({e.text, ""});
        }
        if (e.kind == Kind::kArguments) {
          ASSERT_EQ(e.index, int(calls.size()) - 1);
          calls.back().arguments += e.text;
        }
        if (e.kind == Kind::kCallEnd) ++ends;
      }
    }
    events.clear();
    parser.Finish(&events);
    EXPECT_TRUE(events.empty());
    EXPECT_EQ(content, whole.content);
    ASSERT_EQ(calls.size(), 2u);
    EXPECT_EQ(ends, 2);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(calls[i].name, whole.calls[i].name);
      EXPECT_EQ(calls[i].arguments, whole.calls[i].arguments);
    }
  }
  EXPECT_EQ(whole.calls[1].arguments, R"( {"zone": "UTC"} )");
}

// Answers sampled from the grammar itself (a random byte among those the matcher accepts,
// ending where it may): read back, each is its calls exactly (written again they give the
// same text), every call a declared function whose arguments parse as JSON.
TEST(ToolCallsGrammarTest, SampledAnswersReadBackAsTheirCalls) {
  std::mt19937 rng(11);
  for (ToolCallFormat format : {ToolCallFormat::kHermes, ToolCallFormat::kPlain}) {
    ToolCallSpec spec = Spec(ToolChoice::kRequired, /*parallel=*/true, format);
    spec.functions.push_back({"any", nullptr});
    auto c = CompileToolCalls(spec);
    ASSERT_TRUE(c.ok()) << c.status();
    int sampled = 0;
    for (int trial = 0; trial < 40; ++trial) {
      Matcher m(c->grammar);
      std::string text;
      while (text.size() < 2000 && !m.MustEnd()) {
        if (m.CanEnd() && rng() % 4 == 0) break;
        std::vector<char> allowed;
        for (int b = 0; b < 256; ++b) {
          if (m.Accepts(std::string(1, char(b)))) allowed.push_back(char(b));
        }
        ASSERT_FALSE(allowed.empty()) << text;
        // Favour closing what is open, so that most answers finish.
        char next = allowed[rng() % allowed.size()];
        for (char b : allowed) {
          if ((b == '}' || b == ']' || b == '"') && rng() % 3 == 0) next = b;
        }
        ASSERT_TRUE(m.Accept(std::string(1, next)).ok());
        text += next;
      }
      if (!m.CanEnd()) continue;  // cut at the length bound
      ++sampled;
      const ParsedAnswer a = ParseToolCalls(format, text);
      EXPECT_TRUE(a.complete) << text;
      EXPECT_EQ(a.content, "") << text;
      ASSERT_FALSE(a.calls.empty()) << text;
      EXPECT_EQ(WriteToolCalls(format, a.calls), text);
      for (const ToolCall& call : a.calls) {
        EXPECT_TRUE(call.name == "get_weather" || call.name == "get_time" || call.name == "any") << text;
        EXPECT_TRUE(json::accept(call.arguments)) << call.arguments;
      }
    }
    EXPECT_GE(sampled, 20) << ToolCallFormatName(format);
  }
}

}  // namespace
}  // namespace attnserve::grammar
