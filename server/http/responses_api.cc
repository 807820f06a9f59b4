#include "server/http/responses_api.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/common/random_id.h"
#include "server/http/conversations_api.h"
#include "server/http/http_errors.h"
#include "server/http/json_fields.h"
#include "server/http/openai_response.h"
#include "server/http/request_gate.h"
#include "server/http/response_format.h"
#include "server/http/utf8.h"
#include "server/store/record_kind.h"

namespace attnserve::http {
namespace {

using nlohmann::json;

constexpr char kRecordMagic[] = "attnserve-response/1\n";
constexpr size_t kMagicBytes = sizeof(kRecordMagic) - 1;

// The string member `key` of `item`, or an error naming it.
absl::Status StringMember(const json& item, const std::string& param, const char* key,
                          std::string* out) {
  const json* v = Field(item, key);
  if (v == nullptr || !v->is_string()) return WrongType(absl::StrCat(param, ".", key), "a string");
  *out = v->get<std::string>();
  return absl::OkStatus();
}

// A function_call item (the assistant's call, as a response's output gave it) or a
// function_call_output item (its result) at `param` into `input`.
absl::Status ReadFunctionItem(const json& item, const std::string& param, bool call,
                              std::vector<ChatMessage>* input) {
  absl::Status members =
      call ? OnlyMembers(item, param, {"type", "id", "status", "call_id", "name", "arguments"})
           : OnlyMembers(item, param, {"type", "id", "status", "call_id", "output"});
  if (!members.ok()) return members;
  std::string call_id;
  if (absl::Status s = StringMember(item, param, "call_id", &call_id); !s.ok()) return s;
  if (!call) {
    std::string output;
    if (absl::Status s = StringMember(item, param, "output", &output); !s.ok()) return s;
    input->push_back({"tool", std::move(output), {}, std::move(call_id)});
    return absl::OkStatus();
  }
  ChatToolCall c{std::move(call_id), "", ""};
  if (absl::Status s = StringMember(item, param, "name", &c.name); !s.ok()) return s;
  if (absl::Status s = StringMember(item, param, "arguments", &c.arguments); !s.ok()) return s;
  AddToolCall(std::move(c), input);  // after its turn's text, the message item before it
  return absl::OkStatus();
}

absl::Status ReadInput(const json& body, ResponsesRequest* out) {
  const json* input = Field(body, "input");
  if (input == nullptr) return InvalidParam("input", "is required");
  if (input->is_string()) {
    out->input.push_back({"user", input->get<std::string>()});
    return absl::OkStatus();
  }
  if (!input->is_array() || input->empty()) {
    return WrongType("input", "a string or a non-empty list of message items");
  }
  for (size_t i = 0; i < input->size(); ++i) {
    const json& item = (*input)[i];
    const std::string param = absl::StrCat("input[", i, "]");
    const json* type = item.is_object() ? Field(item, "type") : nullptr;
    if (type != nullptr && (*type == "function_call" || *type == "function_call_output")) {
      if (absl::Status s = ReadFunctionItem(item, param, *type == "function_call", &out->input);
          !s.ok()) {
        return s;
      }
      continue;
    }
    ChatMessage m;
    if (absl::Status s = ReadMessage(item, param, "input", &m); !s.ok()) return s;
    out->input.push_back(std::move(m));
  }
  return absl::OkStatus();
}

absl::Status ReadSampling(const json& body, uint64_t random_seed, ResponsesRequest* out) {
  std::optional<double> temperature, top_p;
  std::optional<int64_t> max_output_tokens, seed, top_k;
  for (absl::Status st :
       {ReadNumber(body, "temperature", &temperature), ReadNumber(body, "top_p", &top_p),
        ReadInt(body, "max_output_tokens", &max_output_tokens), ReadInt(body, "seed", &seed),
        ReadInt(body, "top_k", &top_k)}) {
    if (!st.ok()) return st;
  }
  v1::SamplingParams* s = out->generate.mutable_sampling();
  // OpenAI's defaults: temperature 1, top_p 1.
  out->temperature = temperature.value_or(1.0);
  out->top_p = top_p.value_or(1.0);
  s->set_temperature(float(out->temperature));
  s->set_top_p(float(out->top_p));
  if (top_k.has_value()) s->set_top_k(ClampToInt32(*top_k));
  if (max_output_tokens.has_value()) {
    if (*max_output_tokens < 1) return InvalidParam("max_output_tokens", "must be at least 1");
    s->set_max_tokens(ClampToInt32(*max_output_tokens));
    out->max_output_tokens = *max_output_tokens;
  }
  s->set_seed(seed.has_value() ? uint64_t(*seed) : random_seed);
  return absl::OkStatus();
}

json Usage(const scheduler::TurnResult& r, int64_t cached_tokens) {
  const int64_t input = cached_tokens + r.prompt_tokens;
  return {{"input_tokens", input},
          {"input_tokens_details", {{"cached_tokens", cached_tokens}}},
          {"output_tokens", r.generated_tokens},
          {"output_tokens_details", {{"reasoning_tokens", 0}}},
          {"total_tokens", input + r.generated_tokens}};
}

}  // namespace

absl::StatusOr<ResponsesRequest> ParseResponsesRequest(const std::string& body_text,
                                                       uint64_t random_seed) {
  auto parsed = ParseRequestBody(body_text, RequestKind::kResponses);
  if (!parsed.ok()) return parsed.status();
  const json& body = *parsed;
  ResponsesRequest out;
  if (const json* model = Field(body, "model")) {
    if (!model->is_string()) return WrongType("model", "a string");
    out.generate.set_model(model->get<std::string>());
  }
  if (const json* instructions = Field(body, "instructions")) {
    if (!instructions->is_string()) return WrongType("instructions", "a string");
    out.instructions = *instructions;
    out.input.push_back({"system", instructions->get<std::string>()});
  }
  if (absl::Status s = ReadInput(body, &out); !s.ok()) return s;
  if (const json* previous = Field(body, "previous_response_id")) {
    if (!previous->is_string()) return WrongType("previous_response_id", "a string");
    out.previous_response_id = previous->get<std::string>();
  }
  if (absl::Status s = ReadBool(body, "store", &out.store); !s.ok()) return s;
  if (const json* conversation = Field(body, "conversation")) {
    const json* id = conversation->is_object() ? Field(*conversation, "id") : conversation;
    if (id == nullptr || !id->is_string()) {
      return WrongType("conversation", "a conversation id or {\"id\": ...}");
    }
    if (out.previous_response_id.has_value()) {
      return InvalidParam("conversation",
                          "give previous_response_id or conversation, not both");
    }
    if (!out.store) {
      return InvalidParam("store", "a response in a conversation is stored; store must be true");
    }
    out.conversation = id->get<std::string>();
  }
  if (absl::Status s = ReadBool(body, "stream", &out.stream); !s.ok()) return s;
  out.metadata = json::object();
  if (const json* metadata = Field(body, "metadata")) {
    out.metadata = *metadata;  // within OpenAI's limits (ParseRequestBody)
  }
  if (absl::Status s = ReadSampling(body, random_seed, &out); !s.ok()) return s;
  if (absl::Status s = ReadTextFormat(body, body_text, out.generate.mutable_sampling(),
                                     &out.text);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ReadTools(body, body_text, /*flat=*/true, &out.tools); !s.ok()) return s;
  if (const json* tools = Field(body, "tools")) out.tools_echo = *tools;
  if (const json* choice = Field(body, "tool_choice")) out.tool_choice_echo = *choice;
  if (absl::Status s = ReadBool(body, "parallel_tool_calls", &out.parallel_tool_calls); !s.ok()) {
    return s;
  }
  return out;
}

bool IsResponseId(const std::string& id) {
  return absl::StartsWith(id, "resp_") && IsRandomId128(std::string_view(id).substr(5));
}

std::string EncodeResponseRecord(const ResponseRecord& record) {
  const std::string header = json{{"tenant", record.tenant},
                                  {"model", record.model},
                                  {"position", record.position},
                                  {"ended_with_eos", record.ended_with_eos},
                                  {"response", record.response}}
                                 .dump();
  std::string out(kRecordMagic, kMagicBytes);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(char((n >> (8 * i)) & 0xff));
  out += header;
  if (record.state) out += record.state.view();
  return out;
}

absl::StatusOr<ResponseRecord> DecodeResponseRecord(std::shared_ptr<const std::string> owned) {
  const std::string& bytes = *owned;
  auto bad = [](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("stored response: ", why));
  };
  if (bytes.size() < kMagicBytes + 8 || bytes.compare(0, kMagicBytes, kRecordMagic) != 0) {
    return bad("not a response record");
  }
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(bytes[kMagicBytes + i])) << (8 * i);
  const size_t start = kMagicBytes + 8;
  if (n > bytes.size() - start) return bad("header length past the end");
  json header = json::parse(bytes.substr(start, n), nullptr, /*allow_exceptions=*/false);
  if (!header.is_object()) return bad("header is not a JSON object");
  ResponseRecord r;
  try {
    r.tenant = header.at("tenant").get<std::string>();
    r.model = header.at("model").get<std::string>();
    r.position = header.at("position").get<int64_t>();
    r.ended_with_eos = header.at("ended_with_eos").get<bool>();
    r.response = header.at("response");
  } catch (const json::exception& e) {
    return bad(absl::StrCat("header: ", e.what()));
  }
  r.state = snapshot::SnapshotBytes(std::move(owned), start + n);
  return r;
}

absl::StatusOr<StoredResponse> ReadStoredResponse(store::CheckpointStore& responses,
                                                  const std::string& tenant,
                                                  const std::string& id) {
  auto not_found = [&] {
    return absl::NotFoundError(absl::StrCat("response '", id, "' not found"));
  };
  if (!IsResponseId(id)) return not_found();
  StoredResponse out;
  out.key = store::ResponseKey(tenant, id);
  auto bytes = responses.Get(tenant, out.key);
  if (absl::IsNotFound(bytes.status())) {
    out.key = id;  // a record of the first version
    bytes = responses.Get(tenant, out.key);
  }
  if (absl::IsNotFound(bytes.status())) return not_found();
  if (!bytes.ok()) return bytes.status();
  auto record = DecodeResponseRecord(*std::move(bytes));
  if (!record.ok()) return out.key == id ? not_found() : record.status();
  if (record->tenant != tenant) return not_found();
  out.record = *std::move(record);
  return out;
}

ResponsesAnswer::ResponsesAnswer(const ResponsesRequest& request, std::string id,
                                 int64_t created_at, std::string model, int64_t cached_tokens)
    : request_(request),
      id_(std::move(id)),
      message_id_(absl::StrCat("msg_", RandomId128())),
      created_at_(created_at),
      model_(std::move(model)),
      cached_tokens_(cached_tokens) {
  if (request_.tool_format.has_value()) tool_parser_.emplace(*request_.tool_format);
}

json ResponsesAnswer::Object(const std::string& status) const {
  return {{"id", id_},
          {"object", "response"},
          {"created_at", created_at_},
          {"status", status},
          {"background", false},
          {"error", nullptr},
          {"incomplete_details", nullptr},
          {"instructions", request_.instructions},
          {"max_output_tokens", request_.max_output_tokens},
          {"model", model_},
          {"output", json::array()},
          {"parallel_tool_calls", request_.parallel_tool_calls},
          {"conversation", request_.conversation.has_value()
                               ? json{{"id", *request_.conversation}}
                               : json(nullptr)},
          {"previous_response_id", request_.previous_response_id.has_value()
                                       ? json(*request_.previous_response_id)
                                       : json(nullptr)},
          {"store", request_.store},
          {"temperature", request_.temperature},
          {"text", request_.text},
          {"tool_choice", request_.tool_choice_echo},
          {"tools", request_.tools_echo},
          {"top_p", request_.top_p},
          {"truncation", "disabled"},
          {"usage", nullptr},
          {"metadata", request_.metadata}};
}

json ResponsesAnswer::Item(const std::string& status) const {
  json content = json::array();
  if (status != "in_progress") {
    content.push_back(
        {{"type", "output_text"}, {"text", text_}, {"annotations", json::array()}});
  }
  return {{"id", message_id_},
          {"type", "message"},
          {"status", status},
          {"role", "assistant"},
          {"content", content}};
}

std::string ResponsesAnswer::Event(const char* type, json data) {
  data["type"] = type;
  data["sequence_number"] = sequence_++;
  return absl::StrCat("event: ", type, "\ndata: ", Dump(data), "\n\n");
}

std::string ResponsesAnswer::Start() {
  std::string out = Event("response.created", {{"response", Object("in_progress")}});
  out += Event("response.in_progress", {{"response", Object("in_progress")}});
  if (tool_parser_) return out;  // items are added as the answer shows what they are
  out += Event("response.output_item.added", {{"output_index", 0}, {"item", Item("in_progress")}});
  out += Event("response.content_part.added",
               {{"item_id", message_id_},
                {"output_index", 0},
                {"content_index", 0},
                {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}});
  return out;
}

void ResponsesAnswer::Add(std::vector<scheduler::TokenEvent> tokens) {
  for (const scheduler::TokenEvent& t : tokens) {
    last_token_ = t.id;
    text_ += TakeWholeCharacters(&held_, t.bytes, /*final=*/false);
  }
}

std::string ResponsesAnswer::Delta() {
  if (text_.size() == streamed_) return "";
  std::string delta = text_.substr(streamed_);
  streamed_ = text_.size();
  return Event("response.output_text.delta", {{"item_id", message_id_},
                                              {"output_index", 0},
                                              {"content_index", 0},
                                              {"delta", delta},
                                              {"logprobs", json::array()}});
}

std::string ResponsesAnswer::Tokens(std::vector<scheduler::TokenEvent> tokens) {
  Add(std::move(tokens));
  if (!tool_parser_) return Delta();
  return FeedTools(/*final=*/false);
}

std::string ResponsesAnswer::FeedTools(bool final) {
  std::vector<grammar::ToolCallStreamParser::Event> events;
  tool_parser_->Feed(std::string_view(text_).substr(parsed_), &events);
  parsed_ = text_.size();
  if (final) FinishToolAnswer(*tool_parser_, &events);
  return ToolEvents(std::move(events));
}

std::string ResponsesAnswer::ToolEvents(std::vector<grammar::ToolCallStreamParser::Event> events) {
  using Kind = grammar::ToolCallStreamParser::Event::Kind;
  std::string out;
  for (grammar::ToolCallStreamParser::Event& e : events) {
    const int index = int(items_.size()) - 1;
    if (e.kind == Kind::kContent) {
      if (!message_open_) {
        items_.push_back({{"id", absl::StrCat("msg_", RandomId128())},
                          {"type", "message"},
                          {"status", "in_progress"},
                          {"role", "assistant"},
                          {"content", json::array()}});
        message_open_ = true;
        const int at = int(items_.size()) - 1;
        out += Event("response.output_item.added", {{"output_index", at}, {"item", items_.back()}});
        out += Event("response.content_part.added",
                     {{"item_id", items_.back()["id"]},
                      {"output_index", at},
                      {"content_index", 0},
                      {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}});
        items_.back()["content"].push_back(
            {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}});
      }
      if (e.text.empty()) continue;
      json& text = items_.back()["content"][0]["text"];
      text = text.get<std::string>() + e.text;
      out += Event("response.output_text.delta", {{"item_id", items_.back()["id"]},
                                                  {"output_index", int(items_.size()) - 1},
                                                  {"content_index", 0},
                                                  {"delta", e.text},
                                                  {"logprobs", json::array()}});
    } else if (e.kind == Kind::kCallStart) {
      out += CloseMessage();
      items_.push_back(FunctionCallItem({absl::StrCat("call_", RandomId128()), e.text, ""},
                                        "in_progress"));
      out += Event("response.output_item.added",
                   {{"output_index", int(items_.size()) - 1}, {"item", items_.back()}});
    } else if (e.kind == Kind::kArguments) {
      json& arguments = items_.back()["arguments"];
      arguments = arguments.get<std::string>() + e.text;
      out += Event("response.function_call_arguments.delta",
                   {{"item_id", items_.back()["id"]}, {"output_index", index}, {"delta", e.text}});
    } else {  // kCallEnd
      out += CloseCall("completed");
    }
  }
  return out;
}

std::string ResponsesAnswer::CloseMessage() {
  if (!message_open_) return "";
  message_open_ = false;
  json& item = items_.back();
  const int index = int(items_.size()) - 1;
  item["status"] = "completed";
  const json& part = item["content"][0];
  std::string out = Event("response.output_text.done", {{"item_id", item["id"]},
                                                         {"output_index", index},
                                                         {"content_index", 0},
                                                         {"text", part["text"]},
                                                         {"logprobs", json::array()}});
  out += Event("response.content_part.done",
               {{"item_id", item["id"]}, {"output_index", index}, {"content_index", 0}, {"part", part}});
  out += Event("response.output_item.done", {{"output_index", index}, {"item", item}});
  return out;
}

std::string ResponsesAnswer::CloseCall(const char* status) {
  json& item = items_.back();
  const int index = int(items_.size()) - 1;
  item["status"] = status;
  std::string out = Event("response.function_call_arguments.done", {{"item_id", item["id"]},
                                                                     {"output_index", index},
                                                                     {"name", item["name"]},
                                                                     {"arguments", item["arguments"]}});
  out += Event("response.output_item.done", {{"output_index", index}, {"item", item}});
  return out;
}

json ResponsesAnswer::Complete(const scheduler::TurnResult& result,
                               const std::string& finish_reason) {
  text_ += TakeWholeCharacters(&held_, "", /*final=*/true);
  const bool incomplete = finish_reason == "length";
  json o = Object(incomplete ? "incomplete" : "completed");
  if (incomplete) o["incomplete_details"] = {{"reason", "max_output_tokens"}};
  o["output"] = json::array({Item(incomplete ? "incomplete" : "completed")});
  if (tool_parser_) {
    closing_ = FeedTools(/*final=*/true);
    // No text and no call: an empty message, as a free-text answer would have.
    if (items_.empty()) closing_ += ToolEvents({{grammar::ToolCallStreamParser::Event::Kind::kContent, -1, ""}});
    closing_ += CloseMessage();
    if (items_.back()["status"] == "in_progress") {  // a call cut short by max_output_tokens
      closing_ += CloseCall("incomplete");
    }
    o["output"] = items_;
  }
  o["usage"] = Usage(result, cached_tokens_);
  return o;
}

bool ResponsesAnswer::ended_with_eos(const std::vector<int32_t>& eos_ids) const {
  return last_token_.has_value() &&
         std::find(eos_ids.begin(), eos_ids.end(), *last_token_) != eos_ids.end();
}

std::string ResponsesAnswer::Finish(const json& response) {
  const bool incomplete = response["status"] == "incomplete";
  if (tool_parser_) {
    return closing_ + Event(incomplete ? "response.incomplete" : "response.completed",
                            {{"response", response}});
  }
  const json& item = response["output"][0];
  const json& part = item["content"][0];
  std::string out = Delta();  // what Complete's final flush added
  out += Event("response.output_text.done", {{"item_id", message_id_},
                                                        {"output_index", 0},
                                                        {"content_index", 0},
                                                        {"text", part["text"]},
                                                        {"logprobs", json::array()}});
  out += Event("response.content_part.done", {{"item_id", message_id_},
                                              {"output_index", 0},
                                              {"content_index", 0},
                                              {"part", part}});
  out += Event("response.output_item.done", {{"output_index", 0}, {"item", item}});
  out += Event(incomplete ? "response.incomplete" : "response.completed",
               {{"response", response}});
  return out;
}

std::string ResponsesAnswer::Error(const absl::Status& status) {
  json body = ErrorBody(status);
  return Event("error", {{"error", body["error"]},
                         {"code", body["error"]["code"]},
                         {"message", body["error"]["message"]},
                         {"param", body["error"]["param"]}});
}

}  // namespace attnserve::http
