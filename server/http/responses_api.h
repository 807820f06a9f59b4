// The Responses API (POST /v1/responses, GET and DELETE /v1/responses/{id}) without the
// server: the request body, the stored record, and the response object with its stream
// events.
//
// A stored response is a checkpoint: the response object beside the snapshot of the
// session's state right after it (server/store/checkpoint_store.h keeps the record).
// `previous_response_id` imports that snapshot into a new session and prefills only the
// new input, rendered as what follows the previous answer in the model's chat template
// (RenderAfterAssistant); the record itself never changes, so two continuations of one
// response fork.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "attnserve/v1/attnserve.pb.h"
#include "nlohmann/json.hpp"
#include "server/grammar/tool_calls.h"
#include "server/http/chat_template.h"
#include "server/http/chat_tools.h"
#include "server/scheduler/turn.h"
#include "server/snapshot/snapshot_bytes.h"
#include "server/store/checkpoint_store.h"

namespace attnserve::http {

struct ResponsesRequest {
  // model, sampling (max_output_tokens as max_tokens; temperature, top_p, seed); text and
  // session_id are set by the front.
  v1::GenerateRequest generate;
  // `instructions` (as a system message, first) and `input` (a string is one user
  // message; message items keep their roles).
  std::vector<ChatMessage> input;
  std::optional<std::string> previous_response_id;
  // `conversation`: its id (given as a string or as {"id": ...}).
  std::optional<std::string> conversation;
  bool store = true;
  bool stream = false;
  // Fields the response object repeats as the request gave them.
  nlohmann::json instructions;       // string or null
  nlohmann::json max_output_tokens;  // integer or null
  nlohmann::json metadata;           // object ({} when absent)
  double temperature = 1.0;
  double top_p = 1.0;
  // `text` as the response repeats it: {"format": {...}} as given (its format read into
  // generate's constraint: response_format.h), {"format": {"type": "text"}} by default.
  nlohmann::json text = {{"format", {{"type", "text"}}}};
  // tools, tool_choice and parallel_tool_calls (chat_tools.h's flat shapes), and as the
  // response repeats them.
  ChatTools tools;
  nlohmann::json tools_echo = nlohmann::json::array();
  nlohmann::json tool_choice_echo = "auto";
  bool parallel_tool_calls = true;
  // The turn runs under a tool-call constraint: the envelope its answer is read in (set
  // by the front once the model's template is known).
  std::optional<grammar::ToolCallFormat> tool_format;
};

// Parses a /v1/responses body. INVALID_ARGUMENT naming the field (with the param payload)
// for a body that is not a JSON object, a field of the wrong type, an input item that is
// not a text message, a function_call ({call_id, name, arguments}: the assistant's, after
// its message) or a function_call_output ({call_id, output}: a tool result), tools not
// served (chat_tools.h), a text.format not served (response_format.h), `conversation`
// beside previous_response_id or with store false, or max_output_tokens < 1. Fields
// attnserve does not use are ignored. `seed` absent draws `random_seed`.
absl::StatusOr<ResponsesRequest> ParseResponsesRequest(const std::string& body,
                                                       uint64_t random_seed);

// "resp_" + 32 hex characters: a valid checkpoint key.
bool IsResponseId(const std::string& id);

// What a stored response holds.
struct ResponseRecord {
  std::string tenant;  // who may read, continue or delete it
  std::string model;   // the served model or variant it ran on
  int64_t position = 0;  // the session's tokens after it
  // The turn ended on an end-of-sequence token (in the state, not in the text).
  bool ended_with_eos = false;
  nlohmann::json response;  // the response object GET answers
  // The session's snapshot after it (read back: the record's tail, shared, not copied).
  snapshot::SnapshotBytes state;
};

// "attnserve-response/1\n", the header's length (8 bytes, little-endian), the header
// (JSON: everything but the state), the state's snapshot bytes. The snapshot is verified
// on import like any other; the header's integrity is the store's.
std::string EncodeResponseRecord(const ResponseRecord& record);
// DATA_LOSS naming what is wrong for bytes that are not a record. The state is a view
// into `bytes`.
absl::StatusOr<ResponseRecord> DecodeResponseRecord(std::shared_ptr<const std::string> bytes);

// A stored response as read back, and the store key it was found under (for Delete).
struct StoredResponse {
  ResponseRecord record;
  std::string key;
};
// `tenant`'s stored response `id` from `responses` (a store of RecordKind::kResponse).
// NOT_FOUND "response '<id>' not found", exactly as for an id that never existed, for
// another tenant's, a deleted, an expired or a malformed id. The record's key holds its
// tenant (store::ResponseKey), so another tenant's lookup names another key and reads
// nothing. A record of the first version (keyed by the id alone, its tenant inside) is
// read when no keyed one exists, until it expires: for those the tenant is compared
// after the read. UNAVAILABLE when the store cannot be read; DATA_LOSS for a damaged
// record of this tenant.
absl::StatusOr<StoredResponse> ReadStoredResponse(store::CheckpointStore& responses,
                                                  const std::string& tenant,
                                                  const std::string& id);

// One response, built as its turn's tokens arrive: the response object and, streaming,
// the events the SDKs parse ("event: TYPE\ndata: {...}\n\n", each with a
// sequence_number): response.created, response.in_progress, response.output_item.added,
// response.content_part.added, response.output_text.delta..., then
// response.output_text.done, response.content_part.done, response.output_item.done and
// response.completed (or response.incomplete when max_output_tokens ended it). Text
// carries whole UTF-8 characters only (utf8.h).
//
// Under a tool-call constraint (ResponsesRequest::tool_format) the answer is read for
// calls (grammar::ToolCallStreamParser): text before the first call is a message item,
// each call a function_call item {id "fc_...", call_id "call_...", name, arguments as
// written}, streamed as response.output_item.added, response.function_call_arguments.delta
// ..., response.function_call_arguments.done and response.output_item.done; a message item
// is added only once text comes (or empty at the end when nothing did). An envelope cut
// short is never text (FinishToolAnswer); a call cut short by max_output_tokens is an
// item of status "incomplete" in a response of status "incomplete".
class ResponsesAnswer {
 public:
  // `cached_tokens`: the tokens of the previous response's state, which are input the
  // model sees but nobody prefills again.
  ResponsesAnswer(const ResponsesRequest& request, std::string id, int64_t created_at,
                  std::string model, int64_t cached_tokens);

  const std::string& id() const { return id_; }

  // --- streaming ---
  std::string Start();
  std::string Tokens(std::vector<scheduler::TokenEvent> tokens);
  // The closing events for the final object (Complete's).
  std::string Finish(const nlohmann::json& response);
  // An `error` event (the SDK raises it): the turn failed, or it could not be stored.
  std::string Error(const absl::Status& status);

  // --- both ---
  void Add(std::vector<scheduler::TokenEvent> tokens);
  // The response object for a turn that ended normally ("stop" or "length"), with all
  // the text.
  nlohmann::json Complete(const scheduler::TurnResult& result, const std::string& finish_reason);
  // The last token was one of `eos_ids` (the tokenizer's end-of-sequence ids).
  bool ended_with_eos(const std::vector<int32_t>& eos_ids) const;

 private:
  nlohmann::json Object(const std::string& status) const;
  nlohmann::json Item(const std::string& status) const;
  std::string Event(const char* type, nlohmann::json data);
  // A response.output_text.delta event for the text not streamed yet ("" if none).
  std::string Delta();

  const ResponsesRequest request_;  // a copy: the answer outlives the handler
  const std::string id_;
  const std::string message_id_;
  const int64_t created_at_;
  const std::string model_;
  const int64_t cached_tokens_;
  // Tool mode: the parser's events as stream events, output items_ kept up to date.
  std::string ToolEvents(std::vector<grammar::ToolCallStreamParser::Event> events);
  // Tool mode: text_ not read yet through the parser (`final`: and the end), as events.
  std::string FeedTools(bool final);
  // Tool mode: the events closing the open message item ("" if none).
  std::string CloseMessage();
  // Tool mode: the events closing the last item, a function call, with `status`
  // ("completed"; "incomplete": cut short by max_output_tokens).
  std::string CloseCall(const char* status);

  int sequence_ = 0;
  std::optional<grammar::ToolCallStreamParser> tool_parser_;  // tool mode
  nlohmann::json items_ = nlohmann::json::array();  // tool mode: the output so far
  bool message_open_ = false;  // tool mode: items_.back() is a message taking text
  std::string closing_;        // tool mode: Complete's events, for Finish
  size_t parsed_ = 0;          // tool mode: bytes of text_ fed to tool_parser_
  std::string held_;  // bytes of an incomplete character
  std::string text_;  // everything so far
  size_t streamed_ = 0;  // bytes of text_ sent as deltas
  std::optional<int32_t> last_token_;
};

}  // namespace attnserve::http
