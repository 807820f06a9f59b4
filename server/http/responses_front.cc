// The HTTP front's Responses routes (responses_api.h says what a stored response is).
//
// A response runs as one turn on a session of its own: a new session, or one imported
// from the previous response's stored state. When the turn ends normally and `store` is
// true, the session's snapshot and the response object are written to the checkpoint
// store under the response id before the client is told the response is complete; the
// session is then closed (its state lives on in the record only).
#include <httplib.h>

#include <algorithm>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "server/common/random_id.h"
#include "server/http/http_errors.h"
#include "server/http/http_front.h"
#include "server/http/json_fields.h"
#include "server/http/conversation_store.h"
#include "server/http/openai_response.h"
#include "server/http/own_session.h"
#include "server/http/response_format.h"
#include "server/http/responses_api.h"
#include "server/http/turn_queue.h"
#include "server/store/record_kind.h"
#include "server/store/state_pages.h"

namespace attnserve::http {
namespace {

using nlohmann::json;
// A request's own session lives in this server's memory only: what outlives the request
// is the stored response or kept chat (CheckpointStore), never the session itself.
constexpr auto kLocal = session::SessionStore::Durability::kLocal;

// The session a response runs on lives only for its turn; this bounds how long it stays
// if the process dies before closing it (a durable store then expires it).
constexpr absl::Duration kResponseSessionTtl = absl::Minutes(10);

// `tenant`'s stored response `id` (ReadStoredResponse: another tenant's reads nothing).
absl::StatusOr<ResponseRecord> ReadResponse(store::CheckpointStore& checkpoints,
                                            const std::string& tenant, const std::string& id) {
  auto stored = ReadStoredResponse(checkpoints, tenant, id);
  if (!stored.ok()) return stored.status();
  return std::move(stored->record);
}

// What storing a turn's response may newly charge its tenant, at most, before the turn
// runs (a stored response's quota counts the pages it newly writes plus its stub:
// checkpoint_store.h). A turn from `position` adds `prompt_tokens` and at most
// `max_tokens`; its record holds:
//   - the state's fixed parts (recurrent, SSM, conv and Taylor states), whole;
//   - the KV rows of the new tokens, in new pages or the stub's partial last page, and
//     the previous state's partial last page again (one page at most: state_pages.h's
//     P tokens of rows, P x bytes per token <= the page target unless P is at its floor);
//   - the stub's page keys, the snapshot's and the record's headers, and the response
//     object (its output's text, and at most the request's echoes).
int64_t RecordBytesEstimate(const model::Model& m, int64_t position, int64_t prompt_tokens,
                            int64_t max_tokens, size_t request_bytes) {
  constexpr int64_t kHeaderBytes = 64 << 10;        // snapshot, stub, envelope, record
  constexpr int64_t kDigestBytes = 32;              // a page key in the stub
  constexpr int64_t kOutputBytesPerToken = 64;      // a token's text in JSON, escaped
  const int64_t context = m.config().max_context;
  const int64_t tokens =
      std::max<int64_t>(0, std::min(prompt_tokens + max_tokens, context - position));
  const int64_t fixed = m.StateBytes(0);
  const int64_t per_token = m.StateBytes(1) - fixed;
  const int64_t page = std::max(store::kMinPageTokens * per_token,
                                std::min(store::kMaxPageTokens * per_token,
                                         store::kPageTargetBytes));
  const int64_t keys = per_token > 0 ? (position + tokens) / store::kMinPageTokens * kDigestBytes
                                     : 0;
  return fixed + tokens * per_token + (per_token > 0 ? page : 0) + keys + kHeaderBytes +
         max_tokens * kOutputBytesPerToken + int64_t(request_bytes);
}

}  // namespace

void HttpFront::CreateResponse(const httplib::Request& req, httplib::Response& res) {
  const std::string route_name = "POST /v1/responses";
  const absl::Time arrival = absl::Now();
  auto tenant = deps_.keys->AuthenticateHeader(Header(req, "authorization"));
  if (!tenant.ok()) return Fail(route_name, tenant.status(), res);
  auto slot = TakeSlot();
  if (!slot.ok()) return Fail(route_name, slot.status(), res);
  auto request = ParseResponsesRequest(req.body, RandomSeed());
  if (!request.ok()) return Fail(route_name, request.status(), res);
  v1::GenerateRequest& generate = request->generate;

  // A conversation: held for this response until it ends (a second one meanwhile is
  // refused), continued from its head with its items not in that state yet.
  std::shared_ptr<ConversationStore::Change> conversation;
  std::vector<ChatMessage> messages = request->input;  // what this turn prefills
  std::optional<std::string> previous_id = request->previous_response_id;
  if (request->conversation.has_value()) {
    auto change = deps_.conversations->Begin(*tenant, *request->conversation, "conversation");
    if (!change.ok()) return Fail(route_name, change.status(), res);
    conversation = *std::move(change);
    const ConversationRecord& c = conversation->record();
    if (!c.model.empty()) {
      if (!generate.model().empty() && generate.model() != c.model) {
        return Fail(route_name,
                    InvalidParam("model", absl::StrCat("conversation '", c.id, "' runs on model '",
                                                       c.model, "'")),
                    res, c.model);
      }
      generate.set_model(c.model);
    }
    if (!c.head.empty()) previous_id = c.head;
    if (c.in_state < c.item_count) {  // items given at creation, not prefilled yet
      ConversationRecord read = c;
      if (absl::Status s = deps_.conversations->ReadItems(&read); !s.ok()) {
        return Fail(route_name, s, res, c.model);
      }
      messages = MessagesNotInState(read);
      messages.insert(messages.end(), request->input.begin(), request->input.end());
    }
  }

  // The state to continue from, and the model it ran on.
  std::optional<ResponseRecord> previous;
  if (previous_id.has_value()) {
    auto record = ReadResponse(*deps_.checkpoints, *tenant, *previous_id);
    if (!record.ok()) {
      absl::Status s = record.status();
      if (absl::IsNotFound(s) && conversation != nullptr) {
        s = absl::FailedPreconditionError(absl::StrCat(
            "conversation '", *request->conversation, "': the state after its last response ('",
            *previous_id, "') has expired or was evicted from this server's memory "
            "(--checkpoint_memory_bytes; a durable --session_store keeps it); start a new "
            "conversation"));
      } else if (absl::IsNotFound(s)) {
        s.SetPayload(kParamPayload, absl::Cord("previous_response_id"));
      }
      return Fail(route_name, s, res);
    }
    if (!generate.model().empty() && generate.model() != record->model) {
      return Fail(route_name,
                  InvalidParam("model", absl::StrCat("response '", *previous_id,
                                                     "' ran on model '", record->model,
                                                     "'; its continuation runs on the same model")),
                  res, record->model);
    }
    generate.set_model(record->model);
    previous = *std::move(record);
  }
  auto model = deps_.models->Find(generate.model());
  if (!model.ok()) return Fail(route_name, model.status(), res);
  const std::string& model_name = (*model)->name;
  auto kind = TemplateOf(model_name);
  if (!kind.ok()) return Fail(route_name, kind.status(), res, model_name);
  // The calls in the model's own envelope; its answer is read back in the same one.
  auto format = ConstrainToolCalls(request->tools, *kind, "text.format", &generate);
  if (!format.ok()) return Fail(route_name, format.status(), res, model_name);
  request->tool_format = *format;
  // (A continuation's tools were described when its conversation began: the state holds
  // that prompt.)
  auto text = previous.has_value()
                  ? RenderAfterAssistant(*kind, messages, previous->ended_with_eos)
                  : RenderChat(*kind, messages, request->tools.definitions);
  if (!text.ok()) {
    return Fail(route_name, InvalidParam("input", std::string(text.status().message())), res,
                model_name);
  }
  generate.set_text(*std::move(text));
  // Admission's limit on the prompt (its bytes bound its tokens), before a session is
  // made or imported for it.
  if (absl::Status s = service::CheckPromptSize(generate.text().size(), deps_.limits); !s.ok()) {
    return Fail(route_name, s, res, model_name);
  }

  // A tenant whose stored responses would not hold this turn's record is refused now,
  // as a plain 429, before a session is made or the turn runs (the Put after the turn
  // still decides: its refusal, for a race, ends the stream with an error event).
  if (request->store) {
    const int64_t position = previous.has_value() ? previous->position : 0;
    // The prompt's ids as admission will encode them (EncodePrompt): encoded twice, as
    // the kept-chat path does, so that the quota is asked about tokens, not bytes.
    auto ids = (*model)->tokenizer->Encode(generate.text(), /*continuation=*/position > 0);
    if (!ids.ok()) return Fail(route_name, ids.status(), res, model_name);
    const int64_t max_tokens =
        generate.sampling().max_tokens() > 0 ? generate.sampling().max_tokens()
                                             : deps_.limits.default_max_tokens;
    const int64_t estimate =
        RecordBytesEstimate(*(*model)->model, position, int64_t(ids->size()),
                            std::min<int64_t>(max_tokens, deps_.limits.max_generated_tokens),
                            req.body.size());
    if (absl::Status s = deps_.checkpoints->CheckRoom(*tenant, estimate); !s.ok()) {
      return Fail(route_name, s, res, model_name);
    }
  }

  // The turn's own session: the previous response's state, or a new one.
  auto session = previous.has_value()
                     ? deps_.store->Import(*tenant, previous->state, kResponseSessionTtl,
                                           kLocal)
                     : deps_.store->Create(*tenant, *model, kResponseSessionTtl, kLocal);
  if (!session.ok()) return Fail(route_name, session.status(), res, model_name);
  auto own = std::make_shared<OwnSession>(deps_.store, *tenant, (*session)->id());
  session->reset();  // the store owns it; the turn claims it by id
  generate.set_session_id(own->id());

  auto started = StartQueuedTurn(*tenant, generate, arrival);
  if (!started.ok()) {
    return Fail(route_name, NameConstraintError(started.status(), "text.format", /*flat_tools=*/true),
                res, model_name);
  }
  std::shared_ptr<TurnQueue> queue = *std::move(started);

  auto answer = std::make_shared<ResponsesAnswer>(
      *request, absl::StrCat("resp_", RandomId128()), absl::ToUnixSeconds(arrival), model_name,
      previous.has_value() ? previous->position : 0);
  // After the turn (its session released): the response object, stored with the
  // session's state when asked, before anyone is told it is complete.
  auto conclude = [this, answer, own, store = request->store, tenant = *tenant, model = *model,
                   conversation, input = request->input, arrival](
                      const scheduler::TurnResult& result) -> absl::StatusOr<json> {
    absl::Status error;
    const std::optional<std::string> reason = FinishReasonOf(result, &error);
    if (!reason.has_value()) return error;
    json response = answer->Complete(result, *reason);
    const std::string& model_name = model->name;
    // The state covers the last generated token too (pending: fed at the next turn).
    const int64_t position = result.session_position + (result.generated_tokens > 0 ? 1 : 0);
    // attnserve's: where the session is and what its state weighs there.
    response["session"] = {{"position", position},
                           {"state_bytes", model->model->StateBytes(position)}};
    response["timings"] = Timings(result, absl::Now() - arrival);
    if (store) {
      auto state = own->Export();
      if (!state.ok()) return state.status();
      ResponseRecord record;
      record.tenant = tenant;
      record.model = model_name;
      record.position = position;
      record.ended_with_eos = answer->ended_with_eos(model->tokenizer->eos_ids());
      record.response = response;
      record.state = *std::move(state);
      auto bytes = std::make_shared<const std::string>(EncodeResponseRecord(record));
      // A conversation's responses live as long as it may fork at them.
      const absl::Duration ttl =
          conversation != nullptr ? std::max(options_.response_ttl, deps_.conversations->held_ttl())
                                  : options_.response_ttl;
      absl::Status s = deps_.checkpoints->Put(tenant, store::ResponseKey(tenant, answer->id()),
                                              std::move(bytes), ttl, record.state.size());
      if (!s.ok()) {
        return absl::Status(s.code(),
                            absl::StrCat("the response could not be stored: ", s.message()));
      }
    }
    if (conversation != nullptr) {
      const ConversationRecord& last = conversation->record();
      json added = InputItems(input);
      for (json item : response["output"]) {  // its message, or its text and its calls
        item["response_id"] = answer->id();
        added.push_back(std::move(item));
      }
      ConversationRecord next = last;
      next.model = model_name;
      next.updated_at = absl::ToUnixSeconds(absl::Now());
      next.head = answer->id();
      next.in_state = last.item_count + added.size();
      if (absl::Status s = conversation->Commit(next, added); !s.ok()) {
        // Not in the conversation (deleted meanwhile, or the store failed): not kept.
        if (store) {
          deps_.checkpoints->Delete(store::ResponseKey(tenant, answer->id())).IgnoreError();
        }
        return absl::Status(s.code(), absl::StrCat("response '", answer->id(),
                                                   "' is not stored: ", s.message()));
      }
    }
    own->Close();
    return response;
  };

  if (!request->stream) {
    const scheduler::TurnResult result =
        CollectTurn(*queue, [&](std::vector<scheduler::TokenEvent> t) { answer->Add(std::move(t)); });
    auto response = conclude(result);
    if (!response.ok()) return Fail(route_name, response.status(), res, model_name);
    Answer(res, 200, *response);
    return Record(route_name, 200, model_name);
  }
  TurnWriter writer;
  writer.start = [answer] { return answer->Start(); };
  writer.tokens = [answer](std::vector<scheduler::TokenEvent> t) {
    return answer->Tokens(std::move(t));
  };
  writer.finish = [answer, conclude](const scheduler::TurnResult& result) {
    auto response = conclude(result);
    return response.ok() ? answer->Finish(*response) : answer->Error(response.status());
  };
  writer.after = [own] { own->Close(); };
  StreamTurn(route_name, std::move(queue), std::move(writer), *std::move(slot), res);
}

void HttpFront::GetResponse(const httplib::Request& req, httplib::Response& res) {
  const std::string route_name = "GET /v1/responses/{id}";
  auto tenant = deps_.keys->AuthenticateHeader(Header(req, "authorization"));
  if (!tenant.ok()) return Fail(route_name, tenant.status(), res);
  auto record = ReadResponse(*deps_.checkpoints, *tenant, req.matches[1]);
  if (!record.ok()) return Fail(route_name, record.status(), res);
  Answer(res, 200, record->response);
  Record(route_name, 200, record->model);
}

void HttpFront::DeleteResponse(const httplib::Request& req, httplib::Response& res) {
  const std::string route_name = "DELETE /v1/responses/{id}";
  auto tenant = deps_.keys->AuthenticateHeader(Header(req, "authorization"));
  if (!tenant.ok()) return Fail(route_name, tenant.status(), res);
  const std::string id = req.matches[1];
  auto stored = ReadStoredResponse(*deps_.checkpoints, *tenant, id);
  if (!stored.ok()) return Fail(route_name, stored.status(), res);
  const std::string& model = stored->record.model;
  if (absl::Status s = deps_.checkpoints->Delete(stored->key); !s.ok()) {
    return Fail(route_name, s, res, model);
  }
  Answer(res, 200, {{"id", id}, {"object", "response"}, {"deleted", true}});
  Record(route_name, 200, model);
}

}  // namespace attnserve::http
