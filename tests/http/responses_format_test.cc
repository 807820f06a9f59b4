// The Responses API's request parsing, stored records and event stream, and the prefix
// cache's records, without a server.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_split.h"
#include "server/http/json_fields.h"
#include "server/http/prefix_cache.h"
#include "server/http/responses_api.h"
#include "server/store/checkpoint_store.h"

namespace attnserve::http {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

scheduler::TokenEvent Token(int32_t id, std::string bytes) {
  scheduler::TokenEvent t;
  t.id = id;
  t.bytes = std::move(bytes);
  return t;
}

TEST(ParseResponsesRequestTest, ReadsInputInstructionsAndSampling) {
  auto r = ParseResponsesRequest(R"({"model":"m","instructions":"Be brief.","input":"Hi",
      "previous_response_id":"resp_x","store":false,"stream":true,"max_output_tokens":7,
      "temperature":0,"top_p":0.5,"seed":3,"metadata":{"k":"v"}})", 99);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.model(), "m");
  ASSERT_EQ(r->input.size(), 2u);
  EXPECT_EQ(r->input[0].role, "system");
  EXPECT_EQ(r->input[0].content, "Be brief.");
  EXPECT_EQ(r->input[1].role, "user");
  EXPECT_EQ(r->input[1].content, "Hi");
  EXPECT_EQ(*r->previous_response_id, "resp_x");
  EXPECT_FALSE(r->store);
  EXPECT_TRUE(r->stream);
  EXPECT_EQ(r->generate.sampling().max_tokens(), 7);
  EXPECT_EQ(r->generate.sampling().temperature(), 0.0f);
  EXPECT_EQ(r->generate.sampling().seed(), 3u);
  EXPECT_EQ(r->metadata, json({{"k", "v"}}));

  auto items = ParseResponsesRequest(R"({"input":[{"type":"message","role":"user",
      "content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},
      {"role":"assistant","content":[{"type":"output_text","text":"c"}]}]})", 5);
  ASSERT_TRUE(items.ok()) << items.status();
  ASSERT_EQ(items->input.size(), 2u);
  EXPECT_EQ(items->input[0].content, "ab");
  EXPECT_EQ(items->input[1].role, "assistant");
  EXPECT_TRUE(items->store);                               // the default
  EXPECT_EQ(items->generate.sampling().seed(), 5u);        // none given: the random one
  EXPECT_EQ(items->generate.sampling().temperature(), 1.0f);
}

TEST(ParseResponsesRequestTest, RefusalsNameTheField) {
  auto param = [](const std::string& body) {
    auto r = ParseResponsesRequest(body, 0);
    EXPECT_FALSE(r.ok()) << body;
    auto p = r.status().GetPayload(kParamPayload);
    return p ? std::string(*p) : std::string("(none) ") + std::string(r.status().message());
  };
  EXPECT_EQ(param(R"({})"), "input");
  EXPECT_EQ(param(R"({"input":[]})"), "input");
  EXPECT_EQ(param(R"({"input":[{"type":"web_search_call","id":"x"}]})"), "input[0].type");
  EXPECT_EQ(param(R"({"input":[{"role":"user","content":[{"type":"input_image"}]}]})"),
            "input[0].content");
  EXPECT_EQ(param(R"({"input":"x","tools":[{"type":"function"}]})"), "tools[0].name");
  EXPECT_EQ(param(R"({"input":"x","conversation":7})"), "conversation");
  EXPECT_EQ(param(R"({"input":"x","conversation":{"name":"c"}})"), "conversation");
  EXPECT_EQ(param(R"({"input":"x","conversation":"conv_1","previous_response_id":"resp_1"})"),
            "conversation");
  EXPECT_EQ(param(R"({"input":"x","conversation":"conv_1","store":false})"), "store");
  EXPECT_EQ(param(R"({"input":"x","max_output_tokens":0})"), "max_output_tokens");
  EXPECT_EQ(param(R"({"input":"x","store":"yes"})"), "store");
  EXPECT_EQ(param(R"({"input":"x","previous_response_id":7})"), "previous_response_id");
  EXPECT_FALSE(ParseResponsesRequest("[1]", 0).ok());
}

TEST(ParseResponsesRequestTest, ReadsTheConversationInBothForms) {
  auto a = ParseResponsesRequest(R"({"input":"x","conversation":"conv_1"})", 0);
  auto b = ParseResponsesRequest(R"({"input":"x","conversation":{"id":"conv_1"}})", 0);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a->conversation, "conv_1");
  EXPECT_EQ(*b->conversation, "conv_1");
  ResponsesAnswer answer(*a, "resp_0", 0, "m", 0);
  EXPECT_EQ(answer.Complete({}, "stop")["conversation"], json({{"id", "conv_1"}}));
}

TEST(ResponseRecordTest, RoundTripsAndRefusesWhatIsNotOne) {
  ResponseRecord r;
  r.tenant = "alice";
  r.model = "m";
  r.position = 42;
  r.ended_with_eos = true;
  r.response = {{"id", "resp_1"}, {"output", json::array()}};
  r.state = std::make_shared<const std::string>(std::string("\0snapshot\xff", 10));
  const auto stored = std::make_shared<const std::string>(EncodeResponseRecord(r));
  const std::string& bytes = *stored;
  auto back = DecodeResponseRecord(stored);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->tenant, "alice");
  EXPECT_EQ(back->model, "m");
  EXPECT_EQ(back->position, 42);
  EXPECT_TRUE(back->ended_with_eos);
  EXPECT_EQ(back->response, r.response);
  EXPECT_EQ(back->state.view(), r.state.view());
  // The state read back is the record's tail, not a copy of it (a state of tens of MiB
  // is read at every turn of a conversation).
  EXPECT_EQ(back->state.view().data(), bytes.data() + bytes.size() - 10);
  EXPECT_EQ(*back->state.Whole(), std::string("\0snapshot\xff", 10));
  for (size_t cut : {size_t(0), size_t(5), size_t(25), size_t(40)}) {
    EXPECT_FALSE(
        DecodeResponseRecord(std::make_shared<const std::string>(bytes.substr(0, cut))).ok())
        << cut;
  }
  EXPECT_THAT(DecodeResponseRecord(std::make_shared<const std::string>("snapshot bytes"))
                  .status()
                  .message(),
              HasSubstr("not a response record"));
  EXPECT_TRUE(IsResponseId("resp_" + std::string(32, 'a')));
  EXPECT_FALSE(IsResponseId("resp_" + std::string(32, 'A')));
  EXPECT_FALSE(IsResponseId("resp_../" + std::string(29, 'a')));
  EXPECT_FALSE(IsResponseId(std::string(32, 'a')));  // a session's id is not a response's
}

// The streamed events in the order the SDKs accumulate, numbered, and the stored object.
TEST(ResponsesAnswerTest, StreamsTheEventSequenceAndTheFinalObject) {
  auto request = ParseResponsesRequest(R"({"input":"x","max_output_tokens":3})", 1);
  ASSERT_TRUE(request.ok());
  ResponsesAnswer answer(*request, "resp_1", 1700000000, "m", /*cached_tokens=*/10);
  std::string events = answer.Start();
  events += answer.Tokens({Token(1, "h\xC3")});  // "h"; half of "é" is held
  events += answer.Tokens({Token(2, "\xA9")});
  events += answer.Tokens({Token(3, "!")});
  scheduler::TurnResult result;
  result.reason = scheduler::FinishReason::kLength;
  result.prompt_tokens = 5;
  result.generated_tokens = 3;
  const json response = answer.Complete(result, "length");
  events += answer.Finish(response);
  std::vector<std::string> types;
  std::string deltas;
  int expected_sequence = 0;
  for (absl::string_view event : absl::StrSplit(events, "\n\n", absl::SkipEmpty())) {
    std::vector<std::string> lines = absl::StrSplit(event, '\n');
    ASSERT_EQ(lines.size(), 2u) << event;
    ASSERT_EQ(lines[0].rfind("event: ", 0), 0u);
    json data = json::parse(lines[1].substr(6));
    EXPECT_EQ(lines[0].substr(7), data["type"]);
    EXPECT_EQ(data["sequence_number"], expected_sequence++);
    types.push_back(data["type"]);
    if (data["type"] == "response.output_text.delta") deltas += data["delta"];
  }
  EXPECT_THAT(types, ElementsAre("response.created", "response.in_progress",
                                 "response.output_item.added", "response.content_part.added",
                                 "response.output_text.delta", "response.output_text.delta",
                                 "response.output_text.delta", "response.output_text.done", "response.content_part.done",
                                 "response.output_item.done", "response.incomplete"));
  EXPECT_EQ(deltas, "h\xC3\xA9!");
  EXPECT_EQ(response["status"], "incomplete");
  EXPECT_EQ(response["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(response["output"][0]["content"][0]["text"], "h\xC3\xA9!");
  EXPECT_EQ(response["usage"]["input_tokens"], 15);
  EXPECT_EQ(response["usage"]["input_tokens_details"]["cached_tokens"], 10);
  EXPECT_EQ(response["usage"]["total_tokens"], 18);
  EXPECT_EQ(response["max_output_tokens"], 3);
  EXPECT_TRUE(answer.ended_with_eos({3}));
  EXPECT_FALSE(answer.ended_with_eos({2}));
  EXPECT_THAT(answer.Error(absl::UnavailableError("store down")),
              HasSubstr("event: error\ndata: {\"code\""));
}

TEST(PrefixCacheTest, AHitNeedsTheSameKeyAndEveryId) {
  store::CheckpointStore::Options o;
  o.kind = store::RecordKind::kPrefixState;
  o.disposable = true;
  o.memory_bytes = 1 << 20;
  store::CheckpointStore checkpoints(std::move(o));
  PrefixCache cache(&checkpoints, absl::Minutes(5));
  const PrefixKey alice{"alice", "m", "plain"};
  const std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6};
  auto state = std::make_shared<const std::string>("state after 4");
  ASSERT_TRUE(cache.Save(alice, absl::MakeConstSpan(ids).subspan(0, 4), state).ok());
  auto hit = cache.Lookup(alice, ids, {2, 4, 6});
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, 4u);
  EXPECT_EQ(hit->state.view(), "state after 4");
  // The hit's state is the stored record's tail, not a copy of it.
  auto kept =
      checkpoints.Get("alice", PrefixCache::KeyOf(alice, absl::MakeConstSpan(ids).subspan(0, 4)));
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(hit->state.view().data(), (*kept)->data() + (*kept)->size() - state->size());
  // Another tenant, model fingerprint or template, or other ids: no hit.
  EXPECT_FALSE(cache.Lookup({"bob", "m", "plain"}, ids, {4}).has_value());
  EXPECT_FALSE(cache.Lookup({"alice", "n", "plain"}, ids, {4}).has_value());
  EXPECT_FALSE(cache.Lookup({"alice", "m", "chatml"}, ids, {4}).has_value());
  EXPECT_FALSE(cache.Lookup(alice, std::vector<int32_t>{1, 2, 3, 9, 5}, {4}).has_value());
  EXPECT_FALSE(cache.Lookup(alice, ids, {2, 6}).has_value());
  // Field boundaries are part of the key: ("ab","c") and ("a","bc") differ.
  EXPECT_NE(PrefixCache::KeyOf({"ab", "c", "plain"}, ids), PrefixCache::KeyOf({"a", "bc", "plain"}, ids));
  // A record found under a key is still checked id by id (a hash collision stays a miss).
  const std::string record = PrefixCache::Encode(alice, ids, "s");
  EXPECT_EQ(PrefixCache::Match(record, alice, ids), "s");
  EXPECT_FALSE(PrefixCache::Match(record, alice, std::vector<int32_t>{1, 2, 3, 4, 5, 7}).has_value());
  EXPECT_FALSE(PrefixCache::Match(record, {"bob", "m", "plain"}, ids).has_value());
  EXPECT_FALSE(PrefixCache::Match(record.substr(0, 30), alice, ids).has_value());
}

}  // namespace
}  // namespace attnserve::http
