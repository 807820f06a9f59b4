// The HTTP front's conversation routes (conversations_api.h says what a conversation is;
// a response in one runs in responses_front.cc).
#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "server/common/random_id.h"
#include "server/http/conversation_store.h"
#include "server/http/conversations_api.h"
#include "server/http/http_front.h"
#include "server/http/json_fields.h"
#include "server/http/responses_api.h"

namespace attnserve::http {
namespace {

using nlohmann::json;

std::optional<std::string> Query(const httplib::Request& req, const char* name) {
  if (!req.has_param(name)) return std::nullopt;
  return req.get_param_value(name);
}

}  // namespace

void HttpFront::CreateConversation(const httplib::Request& req, httplib::Response& res) {
  const std::string route_name = "POST /v1/conversations";
  auto tenant = deps_.keys->AuthenticateHeader(Header(req, "authorization"));
  if (!tenant.ok()) return Fail(route_name, tenant.status(), res);
  auto create = ParseConversationCreate(req.body);
  if (!create.ok()) return Fail(route_name, create.status(), res);
  ConversationRecord record;
  record.id = absl::StrCat("conv_", RandomId128());
  record.tenant = *tenant;
  record.created_at = absl::ToUnixSeconds(absl::Now());
  record.updated_at = record.created_at;
  record.metadata = create->metadata;
  for (const ChatMessage& m : create->items) {
    record.items.push_back(MessageItem(absl::StrCat("msg_", RandomId128()), m, "completed"));
  }
  if (absl::Status s = deps_.conversations->Create(record); !s.ok()) {
    return Fail(route_name, s, res);
  }
  Answer(res, 200, ConversationObject(record));
  Record(route_name, 200, "");
}

void HttpFront::ListConversations(const httplib::Request& req, httplib::Response& res) {
  const std::string route_name = "GET /v1/conversations";
  auto tenant = deps_.keys->AuthenticateHeader(Header(req, "authorization"));
  if (!tenant.ok()) return Fail(route_name, tenant.status(), res);
  auto query = ParsePageQuery(Query(req, "limit"), std::nullopt, std::nullopt);
  if (!query.ok()) return Fail(route_name, query.status(), res);
  auto records = deps_.conversations->List(*tenant, query->limit + 1);
  if (!records.ok()) return Fail(route_name, records.status(), res);
  const bool has_more = int(records->size()) > query->limit;
  if (has_more) records->pop_back();
  json data = json::array();
  for (const ConversationRecord& r : *records) data.push_back(ConversationObject(r));
  Answer(res, 200,
         {{"object", "list"},
          {"data", data},
          {"first_id", data.empty() ? json(nullptr) : data.front()["id"]},
          {"last_id", data.empty() ? json(nullptr) : data.back()["id"]},
          {"has_more", has_more}});
  Record(route_name, 200, "");
}

void HttpFront::GetConversation(const httplib::Request& req, httplib::Response& res) {
  const std::string route_name = "GET /v1/conversations/{id}";
  auto tenant = deps_.keys->AuthenticateHeader(Header(req, "authorization"));
  if (!tenant.ok()) return Fail(route_name, tenant.status(), res);
  auto record = deps_.conversations->Get(*tenant, req.matches[1]);
  if (!record.ok()) return Fail(route_name, record.status(), res);
  Answer(res, 200, ConversationObject(*record));
  Record(route_name, 200, record->model);
}

void HttpFront::UpdateConversation(const httplib::Request& req, httplib::Response& res) {
  const std::string route_name = "POST /v1/conversations/{id}";
  auto tenant = deps_.keys->AuthenticateHeader(Header(req, "authorization"));
  if (!tenant.ok()) return Fail(route_name, tenant.status(), res);
  auto body = ParseRequestBody(req.body, RequestKind::kConversationUpdate);
  if (!body.ok()) return Fail(route_name, body.status(), res);
  const json* metadata = Field(*body, "metadata");
  if (metadata == nullptr) return Fail(route_name, InvalidParam("metadata", "is required"), res);
  if (absl::Status s = CheckMetadata(*metadata); !s.ok()) return Fail(route_name, s, res);
  auto change = deps_.conversations->Begin(*tenant, req.matches[1]);
  if (!change.ok()) return Fail(route_name, change.status(), res);
  ConversationRecord next = (*change)->record();
  next.metadata = *metadata;
  next.updated_at = absl::ToUnixSeconds(absl::Now());
  if (absl::Status s = (*change)->Commit(next, json::array()); !s.ok()) {
    return Fail(route_name, s, res);
  }
  Answer(res, 200, ConversationObject(next));
  Record(route_name, 200, next.model);
}

void HttpFront::DeleteConversation(const httplib::Request& req, httplib::Response& res) {
  const std::string route_name = "DELETE /v1/conversations/{id}";
  auto tenant = deps_.keys->AuthenticateHeader(Header(req, "authorization"));
  if (!tenant.ok()) return Fail(route_name, tenant.status(), res);
  const std::string id = req.matches[1];
  if (absl::Status s = deps_.conversations->Delete(*tenant, id); !s.ok()) {
    return Fail(route_name, s, res);
  }
  Answer(res, 200, {{"id", id}, {"object", "conversation.deleted"}, {"deleted", true}});
  Record(route_name, 200, "");
}

void HttpFront::ListConversationItems(const httplib::Request& req, httplib::Response& res) {
  const std::string route_name = "GET /v1/conversations/{id}/items";
  auto tenant = deps_.keys->AuthenticateHeader(Header(req, "authorization"));
  if (!tenant.ok()) return Fail(route_name, tenant.status(), res);
  auto record = deps_.conversations->Get(*tenant, req.matches[1]);
  if (!record.ok()) return Fail(route_name, record.status(), res);
  if (absl::Status s = deps_.conversations->ReadItems(&*record); !s.ok()) {
    return Fail(route_name, s, res, record->model);
  }
  auto query = ParsePageQuery(Query(req, "limit"), Query(req, "order"), Query(req, "after"));
  if (!query.ok()) return Fail(route_name, query.status(), res, record->model);
  auto page = ListPage(record->items, *query);
  if (!page.ok()) return Fail(route_name, page.status(), res, record->model);
  Answer(res, 200, *page);
  Record(route_name, 200, record->model);
}

void HttpFront::ForkConversation(const httplib::Request& req, httplib::Response& res) {
  const std::string route_name = "POST /v1/conversations/{id}/fork";
  auto tenant = deps_.keys->AuthenticateHeader(Header(req, "authorization"));
  if (!tenant.ok()) return Fail(route_name, tenant.status(), res);
  auto source = deps_.conversations->Get(*tenant, req.matches[1]);
  if (!source.ok()) return Fail(route_name, source.status(), res);
  if (absl::Status s = deps_.conversations->ReadItems(&*source); !s.ok()) {
    return Fail(route_name, s, res, source->model);
  }
  auto item = ParseForkRequest(req.body);
  if (!item.ok()) return Fail(route_name, item.status(), res, source->model);
  auto fork = ForkAt(*source, *item, absl::StrCat("conv_", RandomId128()),
                     absl::ToUnixSeconds(absl::Now()));
  if (!fork.ok()) return Fail(route_name, fork.status(), res, source->model);
  // The fork continues from that item's stored state: it must still be there.
  if (auto state = ReadStoredResponse(*deps_.checkpoints, *tenant, fork->head); !state.ok()) {
    absl::Status s = state.status();
    if (absl::IsNotFound(s)) {
      s = absl::FailedPreconditionError(absl::StrCat(
          "the state after item '", *item, "' (response '", fork->head,
          "') has expired or was evicted from this server's memory"));
    }
    return Fail(route_name, s, res, source->model);
  }
  if (absl::Status s = deps_.conversations->Create(*fork); !s.ok()) {
    return Fail(route_name, s, res, source->model);
  }
  Answer(res, 200, ConversationObject(*fork));
  Record(route_name, 200, fork->model);
}

}  // namespace attnserve::http
