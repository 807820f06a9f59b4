// The Conversations API's records, items, forks and list pages, without a server.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/http/conversations_api.h"
#include "server/http/json_fields.h"

namespace attnserve::http {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// user, assistant (of resp_1), user, assistant (of resp_2): all in resp_2's state.
ConversationRecord TwoTurns() {
  ConversationRecord r;
  r.id = "conv_0123456789abcdef0123456789abcdef";
  r.tenant = "alice";
  r.created_at = 1700000000;
  r.updated_at = 1700000100;
  r.metadata = {{"title", "t"}};
  r.model = "m";
  r.items.push_back(MessageItem("msg_u1", {"user", "Hi"}, "completed"));
  r.items.push_back(MessageItem("msg_a1", {"assistant", "Hello"}, "completed", "resp_1"));
  r.items.push_back(MessageItem("msg_u2", {"user", "And?"}, "completed"));
  r.items.push_back(MessageItem("msg_a2", {"assistant", "Then"}, "incomplete", "resp_2"));
  r.head = "resp_2";
  r.in_state = 4;
  r.item_count = 4;
  r.pages = 2;
  return r;
}

TEST(ConversationRecordTest, RoundTripsAndRefusesWhatIsNotOne) {
  ConversationRecord r = TwoTurns();
  r.inherited = 2;
  auto back = DecodeConversation(EncodeConversation(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->id, r.id);
  EXPECT_EQ(back->tenant, "alice");
  EXPECT_EQ(back->created_at, r.created_at);
  EXPECT_EQ(back->updated_at, r.updated_at);
  EXPECT_EQ(back->forked_from, nullptr);
  EXPECT_EQ(back->metadata, r.metadata);
  EXPECT_EQ(back->model, "m");
  EXPECT_EQ(back->head, "resp_2");
  EXPECT_EQ(back->in_state, 4u);
  EXPECT_EQ(back->item_count, 4u);
  EXPECT_EQ(back->pages, 2);
  EXPECT_EQ(back->inherited, 2u);
  EXPECT_TRUE(back->items.empty());  // items live in pages, not in the head

  json j = json::parse(EncodeConversation(r));
  EXPECT_FALSE(j.contains("items"));
  for (const char* field : {"format", "id", "tenant", "created_at", "updated_at", "metadata",
                            "model", "head", "in_state", "item_count", "pages",
                            "inherited"}) {
    json broken = j;
    broken.erase(field);
    EXPECT_TRUE(absl::IsDataLoss(DecodeConversation(broken.dump()).status())) << field;
  }
  json beyond = j;
  beyond["in_state"] = 5;
  EXPECT_THAT(DecodeConversation(beyond.dump()).status().message(), HasSubstr("in_state"));
  EXPECT_TRUE(absl::IsDataLoss(DecodeConversation("attnserve-response/1\n").status()));
  for (const json& bad : {json("conv_x"), json({{"conversation_id", "conv_x"}}),
                          json({{"conversation_id", 1}, {"item_id", "msg_a"}})}) {
    json fork = j;
    fork["forked_from"] = bad;
    EXPECT_TRUE(absl::IsDataLoss(DecodeConversation(fork.dump()).status())) << bad;
  }
  json updated = j;
  updated["updated_at"] = "soon";
  EXPECT_TRUE(absl::IsDataLoss(DecodeConversation(updated.dump()).status()));
}

TEST(ConversationRecordTest, ItemPagesRoundTripAndRefuseWhatIsNotOne) {
  const ConversationRecord r = TwoTurns();
  auto back = DecodeItemPage(EncodeItemPage(r.items));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, r.items);
  json item = r.items;
  item[1]["content"] = "Hello";
  EXPECT_TRUE(absl::IsDataLoss(DecodeItemPage(item.dump()).status()));
  EXPECT_TRUE(absl::IsDataLoss(DecodeItemPage("{}").status()));
  EXPECT_TRUE(absl::IsDataLoss(DecodeItemPage("[").status()));
}

TEST(ConversationRecordTest, ObjectAndItemsAreOpenAIs) {
  const ConversationRecord r = TwoTurns();
  EXPECT_EQ(ConversationObject(r), json({{"id", r.id},
                                         {"object", "conversation"},
                                         {"created_at", r.created_at},
                                         {"metadata", {{"title", "t"}}},
                                         {"model", "m"},
                                         {"updated_at", 1700000100},
                                         {"forked_from", nullptr}}));
  ConversationRecord fresh = r;
  fresh.model = "";
  EXPECT_EQ(ConversationObject(fresh)["model"], nullptr);
  EXPECT_EQ(r.items[0], json::parse(R"({"type":"message","id":"msg_u1","status":"completed",
      "role":"user","content":[{"type":"input_text","text":"Hi"}]})"));
  EXPECT_EQ(r.items[1], json::parse(R"({"type":"message","id":"msg_a1","status":"completed",
      "role":"assistant","content":[{"type":"output_text","text":"Hello","annotations":[]}],
      "response_id":"resp_1"})"));
}

TEST(ConversationRecordTest, MessagesNotInStateAreTheItemsAfterIt) {
  ConversationRecord r = TwoTurns();
  EXPECT_TRUE(MessagesNotInState(r).empty());
  r.in_state = 2;
  auto m = MessagesNotInState(r);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].role, "user");
  EXPECT_EQ(m[0].content, "And?");
  EXPECT_EQ(m[1].role, "assistant");
  EXPECT_EQ(m[1].content, "Then");
}

TEST(ConversationForkTest, ForksAtAnAssistantItemOnItsState) {
  const ConversationRecord r = TwoTurns();
  auto fork = ForkAt(r, "msg_a1", "conv_ffffffffffffffffffffffffffffffff", 1800000000);
  ASSERT_TRUE(fork.ok()) << fork.status();
  EXPECT_EQ(fork->id, "conv_ffffffffffffffffffffffffffffffff");
  EXPECT_EQ(fork->tenant, "alice");
  EXPECT_EQ(fork->created_at, 1800000000);
  EXPECT_EQ(fork->updated_at, 1800000000);
  EXPECT_EQ(fork->forked_from, json({{"conversation_id", r.id}, {"item_id", "msg_a1"}}));
  EXPECT_EQ(ConversationObject(*fork)["forked_from"], fork->forked_from);
  EXPECT_EQ(fork->model, "m");
  EXPECT_EQ(fork->metadata, r.metadata);
  EXPECT_EQ(fork->head, "resp_1");
  EXPECT_EQ(fork->in_state, 2u);
  EXPECT_EQ(fork->item_count, 2u);
  EXPECT_EQ(fork->inherited, 2u);
  ASSERT_EQ(fork->items.size(), 2u);
  EXPECT_EQ(fork->items[1]["id"], "msg_a1");

  EXPECT_EQ(ParamOf(ForkAt(r, "msg_u2", "conv_x", 0).status()), "item_id");
  EXPECT_TRUE(absl::IsInvalidArgument(ForkAt(r, "msg_u2", "conv_x", 0).status()));
  EXPECT_TRUE(absl::IsNotFound(ForkAt(r, "msg_zz", "conv_x", 0).status()));
  EXPECT_EQ(ParamOf(ParseForkRequest("{}").status()), "item_id");
  EXPECT_EQ(ParamOf(ParseForkRequest(R"({"item_id":3})").status()), "item_id");
  EXPECT_EQ(*ParseForkRequest(R"({"item_id":"msg_a1"})"), "msg_a1");
}

// A tool turn's items: the input's tool results and echoed calls as function items, read
// back into the same messages; a page holding them decodes; a fork lands on a
// response's last item only.
TEST(ConversationRecordTest, FunctionItemsRoundTrip) {
  const std::vector<ChatMessage> input = {
      {"assistant", "Let me see.", {{"call_1", "get_weather", R"({"city": "Paris"})"}}},
      {"tool", "sunny", {}, "call_1"},
      {"assistant", "", {{"call_2", "f", "{}"}, {"call_3", "g", "[]"}}},
      {"tool", "ok", {}, "call_2"},
      {"user", "Thanks"}};
  const json items = InputItems(input);
  ASSERT_EQ(items.size(), 7u) << items.dump();
  EXPECT_EQ(items[0]["type"], "message");
  EXPECT_EQ(items[1]["type"], "function_call");
  EXPECT_EQ(items[1]["call_id"], "call_1");
  EXPECT_EQ(items[1]["name"], "get_weather");
  EXPECT_EQ(items[1]["arguments"], R"({"city": "Paris"})");
  EXPECT_TRUE(absl::StartsWith(items[1]["id"].get<std::string>(), "fc_"));
  EXPECT_EQ(items[2], json({{"type", "function_call_output"}, {"id", items[2]["id"]},
                            {"status", "completed"}, {"call_id", "call_1"}, {"output", "sunny"}}));
  EXPECT_TRUE(absl::StartsWith(items[2]["id"].get<std::string>(), "fco_"));
  EXPECT_EQ(items[3]["name"], "f");  // no message item for a turn of calls only
  EXPECT_EQ(items[4]["name"], "g");
  auto page = DecodeItemPage(EncodeItemPage(items));
  ASSERT_TRUE(page.ok()) << page.status();
  ConversationRecord r;
  r.items = *page;
  const std::vector<ChatMessage> back = MessagesNotInState(r);
  ASSERT_EQ(back.size(), input.size());
  for (size_t i = 0; i < input.size(); ++i) {
    EXPECT_EQ(back[i].role, input[i].role) << i;
    EXPECT_EQ(back[i].content, input[i].content) << i;
    EXPECT_EQ(back[i].tool_call_id, input[i].tool_call_id) << i;
    ASSERT_EQ(back[i].tool_calls.size(), input[i].tool_calls.size()) << i;
    for (size_t k = 0; k < input[i].tool_calls.size(); ++k) {
      EXPECT_EQ(back[i].tool_calls[k].id, input[i].tool_calls[k].id);
      EXPECT_EQ(back[i].tool_calls[k].name, input[i].tool_calls[k].name);
      EXPECT_EQ(back[i].tool_calls[k].arguments, input[i].tool_calls[k].arguments);
    }
  }
  EXPECT_FALSE(DecodeItemPage(R"([{"type":"function_call","id":"fc_1","call_id":"c"}])").ok());
  EXPECT_FALSE(DecodeItemPage(R"([{"type":"function_call_output","id":"x","output":1}])").ok());

  // A response that wrote text and two calls: its state holds all three.
  ConversationRecord tools = TwoTurns();
  json text = MessageItem("msg_a3", {"assistant", "On it."}, "completed", "resp_3");
  json call_a = {{"type", "function_call"}, {"id", "fc_a"}, {"status", "completed"},
                 {"call_id", "call_a"}, {"name", "f"}, {"arguments", "{}"}, {"response_id", "resp_3"}};
  json call_b = call_a;
  call_b["id"] = "fc_b";
  call_b["call_id"] = "call_b";
  tools.items.push_back(MessageItem("msg_u3", {"user", "Call"}, "completed"));
  for (const json& item : {text, call_a, call_b}) tools.items.push_back(item);
  auto at_last = ForkAt(tools, "fc_b", "conv_x", 0);
  ASSERT_TRUE(at_last.ok()) << at_last.status();
  EXPECT_EQ(at_last->head, "resp_3");
  EXPECT_EQ(at_last->in_state, tools.items.size());
  for (const char* early : {"msg_a3", "fc_a"}) {
    auto refused = ForkAt(tools, early, "conv_x", 0);
    EXPECT_EQ(ParamOf(refused.status()), "item_id") << early;
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("fork at its last item 'fc_b'"))
        << early;
  }
}

TEST(ConversationCreateTest, ReadsMetadataAndItemsAndNamesWhatIsWrong) {
  auto empty = ParseConversationCreate("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->items.empty());
  auto c = ParseConversationCreate(R"({"metadata":{"title":"x"},
      "items":[{"type":"message","role":"system","content":"Be brief."},
               {"role":"user","content":[{"type":"input_text","text":"Hi"}]}]})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->metadata, json({{"title", "x"}}));
  ASSERT_EQ(c->items.size(), 2u);
  EXPECT_EQ(c->items[1].content, "Hi");

  EXPECT_EQ(ParamOf(ParseConversationCreate(R"({"metadata":{"k":1}})").status()), "metadata");
  EXPECT_EQ(ParamOf(ParseConversationCreate(
                        absl::StrCat(R"({"metadata":{"k":")", std::string(513, 'v'), "\"}}"))
                        .status()),
            "metadata");
  json many = json::object();
  for (int i = 0; i < 17; ++i) many[absl::StrCat("k", i)] = "v";
  EXPECT_EQ(ParamOf(ParseConversationCreate(json{{"metadata", many}}.dump()).status()),
            "metadata");
  EXPECT_EQ(ParamOf(ParseConversationCreate(R"({"items":{}})").status()), "items");
  EXPECT_EQ(ParamOf(ParseConversationCreate(R"({"items":[{"role":"tool","content":"x"}]})")
                        .status()),
            "items[0].role");
  EXPECT_FALSE(ParseConversationCreate("[]").ok());
}

TEST(ConversationListTest, PagesInEitherOrderAfterAnId) {
  json all = json::array();
  for (int i = 0; i < 5; ++i) all.push_back({{"id", absl::StrCat("i", i)}});
  auto page = [&](std::optional<std::string> limit, std::optional<std::string> order,
                  std::optional<std::string> after) {
    auto q = ParsePageQuery(limit, order, after);
    EXPECT_TRUE(q.ok()) << q.status();
    auto p = ListPage(all, *q);
    EXPECT_TRUE(p.ok()) << p.status();
    return *p;
  };
  json desc = page(std::nullopt, std::nullopt, std::nullopt);
  EXPECT_EQ(desc["object"], "list");
  EXPECT_EQ(desc["first_id"], "i4");
  EXPECT_EQ(desc["last_id"], "i0");
  EXPECT_EQ(desc["has_more"], false);
  json asc = page("2", "asc", "i1");
  ASSERT_EQ(asc["data"].size(), 2u);
  EXPECT_EQ(asc["first_id"], "i2");
  EXPECT_EQ(asc["last_id"], "i3");
  EXPECT_EQ(asc["has_more"], true);
  EXPECT_EQ(page("2", "asc", "i4")["data"], json::array());

  EXPECT_EQ(ParamOf(ParsePageQuery("0", std::nullopt, std::nullopt).status()), "limit");
  EXPECT_EQ(ParamOf(ParsePageQuery("101", std::nullopt, std::nullopt).status()), "limit");
  EXPECT_EQ(ParamOf(ParsePageQuery("x", std::nullopt, std::nullopt).status()), "limit");
  EXPECT_EQ(ParamOf(ParsePageQuery(std::nullopt, "up", std::nullopt).status()), "order");
  auto q = ParsePageQuery(std::nullopt, std::nullopt, "nope");
  EXPECT_EQ(ParamOf(ListPage(all, *q).status()), "after");
}

TEST(ConversationIdTest, IsConvAnd32Hex) {
  EXPECT_TRUE(IsConversationId("conv_0123456789abcdef0123456789abcdef"));
  EXPECT_FALSE(IsConversationId("conv_0123456789abcdef0123456789abcdeF"));
  EXPECT_FALSE(IsConversationId("resp_0123456789abcdef0123456789abcdef"));
  EXPECT_FALSE(IsConversationId("conv_../../x"));
  EXPECT_EQ(ParamOf(ConversationNotFound("c", "conversation")), "conversation");
}

}  // namespace
}  // namespace attnserve::http
