// The Conversations API (POST /v1/conversations, GET / DELETE /v1/conversations/{id},
// GET /v1/conversations/{id}/items, `conversation` on /v1/responses) without the server:
// the stored records, their JSON objects and the request bodies. attnserve's extensions:
// GET /v1/conversations (the caller's conversations, newest first), POST
// /v1/conversations/{id}/fork, and `response_id` on assistant items.
//
// A conversation is a session that lives in the store between turns. Its items (the
// turns' text, for listing) are stored as immutable pages, one per change that adds
// items; its head record is the only part that changes: the counts of items and pages,
// and `head`, the stored response (a checkpoint: responses_api.h) whose state holds the
// first `in_state` items. A response in the conversation continues from head's state,
// prefills only the items after it and its own input, writes one page and moves head to
// itself. A fork is a new conversation whose head is an earlier assistant item's
// response: nothing is prefilled again. Records are small JSON texts
// (conversation_store.h says where they live).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "server/http/chat_template.h"
#include "server/http/request_gate.h"

namespace attnserve::http {

// "conv_" + 32 hex characters: a valid store key.
bool IsConversationId(const std::string& id);
// NOT_FOUND "conversation 'ID' not found" with the param payload `param` (if not empty).
absl::Status ConversationNotFound(const std::string& id, const std::string& param = "");

struct ConversationRecord {
  std::string id;
  std::string tenant;  // who may read, continue, fork or delete it
  int64_t created_at = 0;
  int64_t updated_at = 0;  // the last change: creation, metadata, a response's turn
  nlohmann::json metadata = nlohmann::json::object();
  std::string model;  // "" until its first response
  std::string head;   // the response whose state holds items[0, in_state); "" none
  size_t in_state = 0;
  size_t item_count = 0;  // items in its pages
  int64_t pages = 0;      // item pages stored: 0 .. pages - 1
  // The first `inherited` items are a fork's copy of its source's: their responses are
  // the source's (deleting this conversation leaves them alone).
  size_t inherited = 0;
  // A fork's source: {"conversation_id", "item_id"}; null for a conversation created as
  // itself.
  nlohmann::json forked_from = nullptr;
  // Its items, oldest first, when read (ConversationStore::ReadItems) or made (creation,
  // ForkAt); not part of the head record: message items, and the function_call items of
  // a response that called tools and the function_call_output items that answered them.
  nlohmann::json items = nlohmann::json::array();
};

// The head record, {"format": "attnserve-conversation/2", ...} as JSON text (items
// excluded).
std::string EncodeConversation(const ConversationRecord& record);
// DATA_LOSS naming what is wrong for bytes that are not a head record.
absl::StatusOr<ConversationRecord> DecodeConversation(const std::string& bytes);
// A page of items (a JSON array of message, function_call and function_call_output items)
// as JSON text, and back: DATA_LOSS for bytes that are not one.
std::string EncodeItemPage(const nlohmann::json& items);
absl::StatusOr<nlohmann::json> DecodeItemPage(const std::string& bytes);

// {id, object: "conversation", created_at, metadata}, and attnserve's: `model` (the last
// response's; null before the first), `updated_at`, `forked_from` (null, or the source
// conversation and item of a fork).
nlohmann::json ConversationObject(const ConversationRecord& record);

// A message item {type: "message", id, status, role, content: [one text part]}: the part
// is output_text for the assistant, input_text otherwise; `response_id` (not empty) is
// added to it.
nlohmann::json MessageItem(const std::string& id, const ChatMessage& message,
                           const std::string& status, const std::string& response_id = "");
// A function_call item {type: "function_call", id "fc_..." (new), status, call_id, name,
// arguments}: a response's output as it streams, and an echoed call in a turn's input.
nlohmann::json FunctionCallItem(const ChatToolCall& call, const std::string& status);
// The items of a turn's input messages, as the Responses API lists them: a message item
// each (ids "msg_..."), but a tool result is a function_call_output item {type, id
// "fco_...", status, call_id, output} and an assistant's calls (after its message item,
// when it has text) function_call items {type, id "fc_...", status, call_id, name,
// arguments}.
nlohmann::json InputItems(const std::vector<ChatMessage>& input);
// The messages of items[in_state:], the part of the conversation not in head's state
// (its items must have been read); function items read back as InputItems wrote them.
std::vector<ChatMessage> MessagesNotInState(const ConversationRecord& record);

// The body of POST /v1/conversations: `metadata` and `items` (message items, which the
// first response prefills before its own input).
struct ConversationCreate {
  nlohmann::json metadata = nlohmann::json::object();
  std::vector<ChatMessage> items;
};
absl::StatusOr<ConversationCreate> ParseConversationCreate(const std::string& body);

// The `item_id` of POST /v1/conversations/{id}/fork's body.
absl::StatusOr<std::string> ParseForkRequest(const std::string& body);
// `source` (its items read) forked at the item `item_id` a response ended with (its
// assistant message, or its last function_call): a new record `id` (created now) with the
// items up to and including it, all inherited, continuing from that item's response, and
// `forked_from` naming source and item. NOT_FOUND (param "item_id") when the
// conversation has no such item; INVALID_ARGUMENT when it is not a response's item, or
// not the last of its response's items (the response's state holds them all).
absl::StatusOr<ConversationRecord> ForkAt(const ConversationRecord& source,
                                          const std::string& item_id, std::string id,
                                          int64_t created_at);

// A list page: {object: "list", data, first_id, last_id, has_more}. `limit` 1..100,
// `order` "asc" or "desc", items after the one with id `after` in that order (empty: from
// the start). INVALID_ARGUMENT naming the query parameter for a bad value, NOT_FOUND for
// an unknown `after`.
struct PageQuery {
  int limit = 20;
  bool ascending = false;
  std::string after;
};
absl::StatusOr<PageQuery> ParsePageQuery(const std::optional<std::string>& limit,
                                         const std::optional<std::string>& order,
                                         const std::optional<std::string>& after);
absl::StatusOr<nlohmann::json> ListPage(const nlohmann::json& all, const PageQuery& query);

}  // namespace attnserve::http
