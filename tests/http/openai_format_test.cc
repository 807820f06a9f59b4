// UTF-8 holding, request parsing and the SSE events of an answer, without a server.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/http/http_errors.h"
#include "server/http/openai_request.h"
#include "server/http/openai_response.h"
#include "server/http/utf8.h"
#include "server/service/admission.h"

namespace attnserve::http {
namespace {

using ::testing::HasSubstr;

TEST(Utf8Test, HoldsAPartialCharacterUntilItCompletes) {
  std::string pending;
  EXPECT_EQ(TakeWholeCharacters(&pending, "a\xE2\x82", false), "a");
  EXPECT_EQ(pending, "\xE2\x82");
  EXPECT_EQ(TakeWholeCharacters(&pending, "\xAC!", false), "\xE2\x82\xAC!");
  EXPECT_EQ(pending, "");
}

TEST(Utf8Test, ReplacesInvalidBytesAndAnUnfinishedEnd) {
  std::string pending;
  EXPECT_EQ(TakeWholeCharacters(&pending, "\xFF" "a\x80", false),
            "\xEF\xBF\xBD" "a\xEF\xBF\xBD");
  EXPECT_EQ(TakeWholeCharacters(&pending, "\xF0\x9F", true), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(pending, "");
  EXPECT_EQ(ValidUtf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong
  EXPECT_EQ(ValidUtf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
}

TEST(ParseOpenAiRequestTest, MapsFieldsToTheGenerateRequest) {
  auto r = ParseOpenAiRequest(Route::kCompletions, R"({"model":"m","prompt":["hi"],
      "max_tokens":7,"temperature":0,"top_p":0.5,"seed":3,"stop":"\n","logprobs":2,
      "stream":true,"stream_options":{"include_usage":true},"user":"ignored"})", 99);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.model(), "m");
  EXPECT_EQ(r->generate.text(), "hi");
  EXPECT_EQ(r->generate.sampling().max_tokens(), 7);
  EXPECT_EQ(r->generate.sampling().temperature(), 0.0f);
  EXPECT_EQ(r->generate.sampling().top_p(), 0.5f);
  EXPECT_EQ(r->generate.sampling().seed(), 3u);
  ASSERT_EQ(r->generate.sampling().stop_size(), 1);
  EXPECT_EQ(r->generate.sampling().stop(0), "\n");
  EXPECT_TRUE(r->generate.logprobs());
  EXPECT_EQ(r->generate.top_logprobs(), 2);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
}

TEST(ParseOpenAiRequestTest, ChatDefaultsAndContentParts) {
  auto r = ParseOpenAiRequest(Route::kChat, R"({"messages":[{"role":"user","content":
      [{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"max_completion_tokens":4,
      "logprobs":true,"top_logprobs":1})", 99);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 1u);
  EXPECT_EQ(r->messages[0].content, "ab");
  EXPECT_EQ(r->generate.sampling().temperature(), 1.0f);  // OpenAI's default
  EXPECT_EQ(r->generate.sampling().seed(), 99u);          // none given: the random one
  EXPECT_EQ(r->generate.sampling().max_tokens(), 4);
  EXPECT_EQ(r->generate.top_logprobs(), 1);
}

TEST(ParseOpenAiRequestTest, ErrorsNameTheParam) {
  auto param = [](Route route, const std::string& body) {
    auto r = ParseOpenAiRequest(route, body, 0);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << body;
    return ErrorBody(r.status())["error"]["param"];
  };
  EXPECT_EQ(param(Route::kCompletions, R"({"prompt":"x","n":2})"), "n");
  EXPECT_EQ(param(Route::kCompletions, R"({"prompt":"x","temperature":"hot"})"), "temperature");
  EXPECT_EQ(param(Route::kCompletions, R"({"prompt":["a","b"]})"), "prompt");
  EXPECT_EQ(param(Route::kCompletions, R"({"prompt":"x","max_tokens":0})"), "max_tokens");
  EXPECT_EQ(param(Route::kChat, R"({"messages":[]})"), "messages");
  EXPECT_EQ(param(Route::kChat, R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})"),
            "messages[0].content");
  EXPECT_EQ(param(Route::kChat, R"({"messages":[{"role":"user"}]})"), "messages[0].content");
  EXPECT_TRUE(ParseOpenAiRequest(Route::kChat, R"({"messages":[{"role":"user","content":"a"},
      {"role":"assistant","content":null},{"role":"user","content":"b"}]})", 0).ok());
  EXPECT_FALSE(ParseOpenAiRequest(Route::kChat, "{not json", 0).ok());
}

TEST(ToHttpErrorTest, StatusesAndRetryAfter) {
  EXPECT_EQ(ToHttpError(absl::InvalidArgumentError("x")).status, 400);
  EXPECT_EQ(ToHttpError(absl::OutOfRangeError("x")).status, 400);
  EXPECT_EQ(ToHttpError(absl::UnauthenticatedError("x")).status, 401);
  EXPECT_EQ(ToHttpError(absl::NotFoundError("x")).status, 404);
  EXPECT_EQ(ToHttpError(absl::FailedPreconditionError("busy")).status, 409);
  EXPECT_EQ(ToHttpError(absl::FailedPreconditionError("busy")).retry_after_seconds, 0);
  absl::Status busy = absl::FailedPreconditionError("a response in progress");
  busy.SetPayload(kRetryAfterPayload, absl::Cord("1"));
  EXPECT_EQ(ToHttpError(busy).status, 409);
  EXPECT_EQ(ToHttpError(busy).retry_after_seconds, 1);
  busy.SetPayload(kRetryAfterPayload, absl::Cord("soon"));
  EXPECT_EQ(ToHttpError(busy).retry_after_seconds, 0);
  EXPECT_EQ(ToHttpError(absl::ResourceExhaustedError("x")).retry_after_seconds, 1);
  EXPECT_EQ(ToHttpError(absl::ResourceExhaustedError("x")).status, 429);
  EXPECT_EQ(ToHttpError(absl::UnavailableError("x")).status, 503);
  EXPECT_EQ(ToHttpError(absl::UnavailableError("x")).retry_after_seconds, 1);
  absl::Status over = absl::InvalidArgumentError("prompt too long");
  over.SetPayload(service::kPromptOverLimitPayload, absl::Cord("max_prompt_tokens"));
  EXPECT_EQ(ToHttpError(over).status, 413);
}

TEST(TimingsTest, FirstTokenTotalAndTheRateAfterTheFirst) {
  scheduler::TurnResult result;
  result.generated_tokens = 11;
  result.time_to_first_token = absl::Milliseconds(40);
  EXPECT_EQ(Timings(result, absl::Milliseconds(540)),
            nlohmann::json({{"time_to_first_token_ms", 40.0},
                  {"total_ms", 540.0},
                  {"output_tokens_per_second", 20.0}}));  // 10 tokens in 0.5 s
  result.generated_tokens = 1;
  EXPECT_EQ(Timings(result, absl::Milliseconds(40))["output_tokens_per_second"], nullptr);
  result.generated_tokens = 0;
  result.time_to_first_token = absl::ZeroDuration();
  const nlohmann::json none = Timings(result, absl::Milliseconds(7));
  EXPECT_EQ(none["time_to_first_token_ms"], nullptr);
  EXPECT_EQ(none["total_ms"], 7.0);
}

scheduler::TokenEvent Token(int32_t id, std::string bytes) {
  scheduler::TokenEvent t;
  t.id = id;
  t.bytes = std::move(bytes);
  return t;
}

TEST(OpenAiAnswerTest, ChatEventsHoldSplitCharactersAndEndWithUsageAndDone) {
  auto request = ParseOpenAiRequest(
      Route::kChat,
      R"({"messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true}})",
      0);
  ASSERT_TRUE(request.ok());
  OpenAiAnswer answer(*request, "chatcmpl-1", absl::FromUnixSeconds(1700000000), "m");
  EXPECT_EQ(answer.Start(),
            "data: {\"choices\":[{\"delta\":{\"content\":\"\",\"role\":\"assistant\"},"
            "\"finish_reason\":null,\"index\":0,\"logprobs\":null}],\"created\":1700000000,"
            "\"id\":\"chatcmpl-1\",\"model\":\"m\",\"object\":\"chat.completion.chunk\","
            "\"usage\":null}\n\n");
  EXPECT_EQ(answer.Tokens({Token(1, "\xE2\x82")}), "");  // half a euro sign: nothing yet
  EXPECT_THAT(answer.Tokens({Token(2, "\xAC")}), HasSubstr("\"delta\":{\"content\":\"\xE2\x82\xAC\"}"));
  EXPECT_EQ(answer.Tokens({Token(3, "\xE2")}), "");
  scheduler::TurnResult r;
  r.reason = scheduler::FinishReason::kLength;
  r.prompt_tokens = 5;
  r.generated_tokens = 3;
  r.time_to_first_token = absl::Milliseconds(5);
  const std::string end = answer.Finish(r);
  const std::string chunks =
      "data: {\"choices\":[{\"delta\":{\"content\":\"\xEF\xBF\xBD\"},\"finish_reason\":null,"
      "\"index\":0,\"logprobs\":null}],\"created\":1700000000,\"id\":\"chatcmpl-1\","
      "\"model\":\"m\",\"object\":\"chat.completion.chunk\",\"usage\":null}\n\n"
      "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\",\"index\":0,"
      "\"logprobs\":null}],\"created\":1700000000,\"id\":\"chatcmpl-1\",\"model\":\"m\","
      "\"object\":\"chat.completion.chunk\",\"usage\":null}\n\n";
  ASSERT_EQ(end.substr(0, chunks.size()), chunks);
  const std::string done = "data: [DONE]\n\n";
  ASSERT_GT(end.size(), chunks.size() + done.size());
  ASSERT_EQ(end.substr(end.size() - done.size()), done);
  // The usage chunk, with the server's timings (from the arrival: measured, so only their
  // shape is fixed here).
  const std::string usage = end.substr(chunks.size(), end.size() - chunks.size() - done.size());
  ASSERT_EQ(usage.rfind("data: ", 0), 0u);
  nlohmann::json j = nlohmann::json::parse(usage.substr(6));
  EXPECT_EQ(j["timings"]["time_to_first_token_ms"], 5.0);
  EXPECT_GT(j["timings"]["total_ms"].get<double>(), 5.0);
  EXPECT_GT(j["timings"]["output_tokens_per_second"].get<double>(), 0.0);
  j.erase("timings");
  EXPECT_EQ(j, nlohmann::json::parse(
                   R"({"choices":[],"created":1700000000,"id":"chatcmpl-1","model":"m",
                       "object":"chat.completion.chunk","usage":{"completion_tokens":3,
                       "prompt_tokens":5,"prompt_tokens_details":{"cached_tokens":0},
                       "total_tokens":8}})"));
}

// As in the OpenAI API, the stop string is not content: bytes that may start it are held,
// given back if the text goes another way, and cut where it completes.
TEST(OpenAiAnswerTest, AStopStringIsNotContent) {
  auto request = ParseOpenAiRequest(Route::kCompletions,
                                    R"({"prompt":"x","stream":true,"stop":["the end","\n\n"]})", 0);
  ASSERT_TRUE(request.ok()) << request.status();
  OpenAiAnswer answer(*request, "cmpl-1", absl::FromUnixSeconds(1), "m");
  std::string text;
  auto take = [&](const std::string& bytes) {
    const std::string events = answer.Tokens({Token(1, bytes)});
    if (events.empty()) return std::string();
    auto j = nlohmann::json::parse(events.substr(6));
    std::string t = j["choices"][0]["text"];
    text += t;
    return t;
  };
  EXPECT_EQ(take("so the"), "so ");       // "the" may begin "the end": held
  EXPECT_EQ(take("re"), "there");         // it did not
  EXPECT_EQ(take(" was the e"), " was ");  // held again
  EXPECT_EQ(take("nd of it"), "");        // "the end" matched: nothing of it or after
  EXPECT_EQ(text, "so there was ");
  scheduler::TurnResult r;
  r.reason = scheduler::FinishReason::kStop;
  EXPECT_THAT(answer.Finish(r), ::testing::Not(HasSubstr("end")));

  // A turn that ends for another reason gives back a held tail that never became a stop.
  OpenAiAnswer other(*request, "cmpl-2", absl::FromUnixSeconds(1), "m");
  other.Add({Token(1, "a\n")});
  r.reason = scheduler::FinishReason::kLength;
  EXPECT_EQ(other.Body(r, "length")["choices"][0]["text"], "a\n");
}

TEST(OpenAiAnswerTest, ATurnThatDidNotEndNormallyEndsWithAnErrorEventAndNoDone) {
  auto request = ParseOpenAiRequest(Route::kCompletions, R"({"prompt":"x","stream":true})", 0);
  ASSERT_TRUE(request.ok());
  OpenAiAnswer answer(*request, "cmpl-1", absl::FromUnixSeconds(1), "m");
  scheduler::TurnResult r;
  r.reason = scheduler::FinishReason::kShutdown;
  const std::string end = answer.Finish(r);
  EXPECT_THAT(end, HasSubstr("data: {\"error\":{"));
  EXPECT_THAT(end, HasSubstr("shutting down"));
  EXPECT_THAT(end, ::testing::Not(HasSubstr("[DONE]")));
}

TEST(OpenAiAnswerTest, CompletionLogprobsCarryTokensOffsetsAndAlternatives) {
  auto request = ParseOpenAiRequest(Route::kCompletions, R"({"prompt":"x","logprobs":1})", 0);
  ASSERT_TRUE(request.ok());
  OpenAiAnswer answer(*request, "cmpl-1", absl::FromUnixSeconds(1), "m");
  scheduler::TokenEvent a = Token(97, "a");
  a.logprob = -0.5f;
  a.top_logprobs = {{97, -0.5f}};
  a.top_logprob_bytes = {"a"};
  scheduler::TokenEvent b = Token(98, "bc");
  b.logprob = -1.0f;
  b.top_logprobs = {{99, -0.25f}};
  b.top_logprob_bytes = {"z"};
  answer.Add({a, b});
  scheduler::TurnResult r;
  r.reason = scheduler::FinishReason::kStop;
  nlohmann::json body = answer.Body(r, "stop");
  EXPECT_EQ(body["choices"][0]["text"], "abc");
  EXPECT_TRUE(body["timings"].is_object());  // no token timed: first token null
  EXPECT_EQ(body["timings"]["time_to_first_token_ms"], nullptr);
  const nlohmann::json& lp = body["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], nlohmann::json({"a", "bc"}));
  EXPECT_EQ(lp["token_logprobs"], nlohmann::json({-0.5, -1.0}));
  EXPECT_EQ(lp["text_offset"], nlohmann::json({0, 1}));
  EXPECT_EQ(lp["top_logprobs"][1], nlohmann::json({{"z", -0.25}}));
}

}  // namespace
}  // namespace attnserve::http
