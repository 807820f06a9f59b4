#include "server/http/conversations_api.h"

#include <algorithm>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/common/random_id.h"
#include "server/http/json_fields.h"

namespace attnserve::http {
namespace {

using nlohmann::json;

constexpr char kFormat[] = "attnserve-conversation/2";

absl::Status Corrupt(const std::string& why) {
  return absl::DataLossError(absl::StrCat("stored conversation: ", why));
}

}  // namespace

bool IsConversationId(const std::string& id) {
  return absl::StartsWith(id, "conv_") && IsRandomId128(std::string_view(id).substr(5));
}

absl::Status ConversationNotFound(const std::string& id, const std::string& param) {
  absl::Status s = absl::NotFoundError(absl::StrCat("conversation '", id, "' not found"));
  if (!param.empty()) s.SetPayload(kParamPayload, absl::Cord(param));
  return s;
}

std::string EncodeConversation(const ConversationRecord& r) {
  return json{{"format", kFormat},
              {"id", r.id},
              {"tenant", r.tenant},
              {"created_at", r.created_at},
              {"updated_at", r.updated_at},
              {"metadata", r.metadata},
              {"model", r.model},
              {"head", r.head},
              {"in_state", r.in_state},
              {"item_count", r.item_count},
              {"pages", r.pages},
              {"inherited", r.inherited},
              {"forked_from", r.forked_from}}
      .dump();
}

absl::StatusOr<ConversationRecord> DecodeConversation(const std::string& bytes) {
  json j = json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Corrupt("not a JSON object");
  if (j.value("format", "") != kFormat) return Corrupt("not attnserve-conversation/2");
  for (const char* field : {"id", "tenant", "model", "head"}) {
    if (!j[field].is_string()) return Corrupt(absl::StrCat(field, " is not a string"));
  }
  for (const char* field : {"created_at", "updated_at"}) {
    if (!j[field].is_number_integer()) return Corrupt(absl::StrCat(field, " is not an integer"));
  }
  for (const char* field : {"in_state", "item_count", "pages", "inherited"}) {
    if (!j[field].is_number_unsigned()) return Corrupt(absl::StrCat(field, " is not a count"));
  }
  if (!j["metadata"].is_object()) return Corrupt("metadata is not an object");
  ConversationRecord r;
  r.id = j["id"].get<std::string>();
  r.tenant = j["tenant"].get<std::string>();
  r.created_at = j["created_at"].get<int64_t>();
  r.updated_at = j["updated_at"].get<int64_t>();
  r.metadata = j["metadata"];
  r.model = j["model"].get<std::string>();
  r.head = j["head"].get<std::string>();
  r.in_state = j["in_state"].get<size_t>();
  r.item_count = j["item_count"].get<size_t>();
  r.pages = j["pages"].get<int64_t>();
  r.inherited = j["inherited"].get<size_t>();
  if (r.in_state > r.item_count || r.inherited > r.item_count) {
    return Corrupt("in_state or inherited beyond the items");
  }
  const json& source = j["forked_from"];
  if (!source.is_null()) {
    const json* conversation = Field(source, "conversation_id");
    const json* item = Field(source, "item_id");
    if (conversation == nullptr || !conversation->is_string() || item == nullptr ||
        !item->is_string()) {
      return Corrupt("forked_from is not {conversation_id, item_id}");
    }
    r.forked_from = source;
  }
  return r;
}

std::string EncodeItemPage(const json& items) { return items.dump(); }

absl::StatusOr<json> DecodeItemPage(const std::string& bytes) {
  json items = json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (items.is_discarded() || !items.is_array()) return Corrupt("an item page is not a list");
  auto strings = [](const json& item, std::initializer_list<const char*> keys) {
    for (const char* key : keys) {
      auto it = item.find(key);
      if (it == item.end() || !it->is_string()) return false;
    }
    return true;
  };
  for (const json& item : items) {
    if (!item.is_object() || !strings(item, {"id"})) return Corrupt("an item has no id");
    const json type = item.value("type", json("message"));
    const json content = item.value("content", json());
    const bool ok =
        type == "function_call"          ? strings(item, {"call_id", "name", "arguments"})
        : type == "function_call_output" ? strings(item, {"call_id", "output"})
        : type == "message" && strings(item, {"role"}) && content.is_array() &&
              content.size() == 1 && content[0].is_object() && strings(content[0], {"text"});
    if (!ok) return Corrupt("an item is not a text message, a function call or its output");
  }
  return items;
}

json ConversationObject(const ConversationRecord& r) {
  return {{"id", r.id},
          {"object", "conversation"},
          {"created_at", r.created_at},
          {"metadata", r.metadata},
          {"model", r.model.empty() ? json(nullptr) : json(r.model)},
          {"updated_at", r.updated_at},
          {"forked_from", r.forked_from}};
}

json MessageItem(const std::string& id, const ChatMessage& message, const std::string& status,
                 const std::string& response_id) {
  const bool assistant = message.role == "assistant";
  json part = {{"type", assistant ? "output_text" : "input_text"}, {"text", message.content}};
  if (assistant) part["annotations"] = json::array();
  json item = {{"type", "message"},
               {"id", id},
               {"status", status},
               {"role", message.role},
               {"content", json::array({part})}};
  if (!response_id.empty()) item["response_id"] = response_id;
  return item;
}

json FunctionCallItem(const ChatToolCall& call, const std::string& status) {
  return {{"type", "function_call"},
          {"id", absl::StrCat("fc_", RandomId128())},
          {"status", status},
          {"call_id", call.id},
          {"name", call.name},
          {"arguments", call.arguments}};
}

json InputItems(const std::vector<ChatMessage>& input) {
  json items = json::array();
  for (const ChatMessage& m : input) {
    if (m.role == "tool") {
      items.push_back({{"type", "function_call_output"},
                       {"id", absl::StrCat("fco_", RandomId128())},
                       {"status", "completed"},
                       {"call_id", m.tool_call_id},
                       {"output", m.content}});
      continue;
    }
    if (m.tool_calls.empty() || !m.content.empty()) {
      items.push_back(MessageItem(absl::StrCat("msg_", RandomId128()), m, "completed"));
    }
    for (const ChatToolCall& c : m.tool_calls) items.push_back(FunctionCallItem(c, "completed"));
  }
  return items;
}

std::vector<ChatMessage> MessagesNotInState(const ConversationRecord& r) {
  std::vector<ChatMessage> out;
  for (size_t i = r.in_state; i < r.items.size(); ++i) {
    const json& item = r.items[i];
    const json type = item.value("type", json("message"));
    if (type == "function_call_output") {
      out.push_back({"tool", item["output"].get<std::string>(), {},
                     item["call_id"].get<std::string>()});
    } else if (type == "function_call") {
      AddToolCall({item["call_id"].get<std::string>(), item["name"].get<std::string>(),
                   item["arguments"].get<std::string>()},
                  &out);
    } else {
      out.push_back(
          {item["role"].get<std::string>(), item["content"][0]["text"].get<std::string>()});
    }
  }
  return out;
}

absl::StatusOr<ConversationCreate> ParseConversationCreate(const std::string& body_text) {
  ConversationCreate out;
  if (body_text.empty()) return out;  // the SDK's create() with no arguments
  auto parsed = ParseRequestBody(body_text, RequestKind::kConversationCreate);
  if (!parsed.ok()) return parsed.status();
  const json& body = *parsed;
  if (const json* metadata = Field(body, "metadata")) {
    if (absl::Status s = CheckMetadata(*metadata); !s.ok()) return s;
    out.metadata = *metadata;
  }
  if (const json* items = Field(body, "items")) {
    if (!items->is_array()) return WrongType("items", "a list of message items");
    if (items->size() > 20) return InvalidParam("items", "must have at most 20 items");
    if (absl::Status s = ReadMessageList(*items, "items", &out.items); !s.ok()) return s;
    for (size_t i = 0; i < out.items.size(); ++i) {
      const std::string& role = out.items[i].role;
      if (role != "user" && role != "assistant" && role != "system" && role != "developer") {
        return InvalidParam(absl::StrCat("items[", i, "].role"),
                            absl::StrCat("must be user, assistant, system or developer, not '",
                                         role, "'"));
      }
    }
  }
  return out;
}

absl::StatusOr<std::string> ParseForkRequest(const std::string& body_text) {
  auto parsed = ParseRequestBody(body_text, RequestKind::kConversationFork);
  if (!parsed.ok()) return parsed.status();
  const json& body = *parsed;
  const json* item = Field(body, "item_id");
  if (item == nullptr) return InvalidParam("item_id", "is required");
  if (!item->is_string()) return WrongType("item_id", "a string");
  return item->get<std::string>();
}

absl::StatusOr<ConversationRecord> ForkAt(const ConversationRecord& source,
                                          const std::string& item_id, std::string id,
                                          int64_t created_at) {
  for (size_t i = 0; i < source.items.size(); ++i) {
    const json& item = source.items[i];
    if (item["id"] != item_id) continue;
    const json* response = Field(item, "response_id");
    // (Items are const: a member read is value(), as a function item has no role.)
    const bool answer =
        item.value("role", "") == "assistant" || item.value("type", "") == "function_call";
    if (!answer || response == nullptr || !response->is_string()) {
      return InvalidParam("item_id", absl::StrCat("item '", item_id,
                                                  "' is not an answer of a response; a "
                                                  "conversation forks at an assistant item"));
    }
    size_t last = i;  // the response's last item
    while (last + 1 < source.items.size() &&
           source.items[last + 1].value("response_id", json()) == *response) {
      ++last;
    }
    if (last != i) {
      return InvalidParam("item_id",
                          absl::StrCat("item '", item_id, "' is not the last item of response '",
                                       response->get<std::string>(), "', whose state holds "
                                       "them all: fork at its last item '",
                                       source.items[last]["id"].get<std::string>(), "'"));
    }
    ConversationRecord fork;
    fork.id = std::move(id);
    fork.tenant = source.tenant;
    fork.created_at = created_at;
    fork.updated_at = created_at;
    fork.forked_from = {{"conversation_id", source.id}, {"item_id", item_id}};
    fork.metadata = source.metadata;
    fork.model = source.model;
    fork.head = response->get<std::string>();
    fork.in_state = i + 1;
    fork.item_count = i + 1;
    fork.inherited = i + 1;
    fork.items = json(std::vector<json>(source.items.begin(), source.items.begin() + i + 1));
    return fork;
  }
  absl::Status s = absl::NotFoundError(
      absl::StrCat("conversation '", source.id, "' has no item '", item_id, "'"));
  s.SetPayload(kParamPayload, absl::Cord("item_id"));
  return s;
}

absl::StatusOr<PageQuery> ParsePageQuery(const std::optional<std::string>& limit,
                                         const std::optional<std::string>& order,
                                         const std::optional<std::string>& after) {
  PageQuery q;
  if (limit.has_value()) {
    if (!absl::SimpleAtoi(*limit, &q.limit) || q.limit < 1 || q.limit > 100) {
      return InvalidParam("limit", absl::StrCat("must be an integer from 1 to 100, got '",
                                                *limit, "'"));
    }
  }
  if (order.has_value()) {
    if (*order != "asc" && *order != "desc") {
      return InvalidParam("order", absl::StrCat("must be asc or desc, got '", *order, "'"));
    }
    q.ascending = *order == "asc";
  }
  if (after.has_value()) q.after = *after;
  return q;
}

absl::StatusOr<json> ListPage(const json& all, const PageQuery& q) {
  std::vector<json> ordered(all.begin(), all.end());
  if (!q.ascending) std::reverse(ordered.begin(), ordered.end());
  size_t start = 0;
  if (!q.after.empty()) {
    auto it = std::find_if(ordered.begin(), ordered.end(),
                           [&](const json& x) { return x["id"] == q.after; });
    if (it == ordered.end()) {
      absl::Status s = absl::NotFoundError(absl::StrCat("no item '", q.after, "' to list after"));
      s.SetPayload(kParamPayload, absl::Cord("after"));
      return s;
    }
    start = size_t(it - ordered.begin()) + 1;
  }
  const size_t end = std::min(ordered.size(), start + size_t(q.limit));
  json data = json::array();
  for (size_t i = start; i < end; ++i) data.push_back(ordered[i]);
  return json{{"object", "list"},
              {"data", data},
              {"first_id", data.empty() ? json(nullptr) : data.front()["id"]},
              {"last_id", data.empty() ? json(nullptr) : data.back()["id"]},
              {"has_more", end < ordered.size()}};
}

}  // namespace attnserve::http
