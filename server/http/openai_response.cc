#include "server/http/openai_response.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/common/random_id.h"
#include "server/http/chat_tools.h"
#include "server/http/http_errors.h"
#include "server/http/utf8.h"

namespace attnserve::http {
namespace {

using nlohmann::json;

json Bytes(const std::string& s) {
  json out = json::array();
  for (unsigned char c : s) out.push_back(int(c));
  return out;
}

json EmptyCompletionLogprobs() {
  return {{"tokens", json::array()},
          {"token_logprobs", json::array()},
          {"top_logprobs", json::array()},
          {"text_offset", json::array()}};
}

}  // namespace

std::string SseEvent(const std::string& data) { return absl::StrCat("data: ", data, "\n\n"); }

std::optional<std::string> FinishReasonOf(const scheduler::TurnResult& result,
                                          absl::Status* error) {
  switch (result.reason) {
    case scheduler::FinishReason::kStop:
      return "stop";
    case scheduler::FinishReason::kLength:
      return "length";
    case scheduler::FinishReason::kCancelled:
      *error = absl::CancelledError("the turn was cancelled");
      return std::nullopt;
    case scheduler::FinishReason::kShutdown:
      *error = absl::UnavailableError(absl::StrCat(
          "the server is shutting down; the turn stopped after ", result.generated_tokens,
          " tokens"));
      return std::nullopt;
    case scheduler::FinishReason::kError:
      *error = result.error.ok() ? absl::InternalError("the turn failed") : result.error;
      return std::nullopt;
  }
  *error = absl::InternalError("unknown finish reason");
  return std::nullopt;
}

json Timings(const scheduler::TurnResult& result, absl::Duration total) {
  const bool any = result.generated_tokens > 0;
  const absl::Duration decode = total - result.time_to_first_token;
  const bool rate = result.generated_tokens > 1 && decode > absl::ZeroDuration();
  return {{"time_to_first_token_ms",
           any ? json(absl::ToDoubleMilliseconds(result.time_to_first_token)) : json(nullptr)},
          {"total_ms", absl::ToDoubleMilliseconds(total)},
          {"output_tokens_per_second",
           rate ? json((result.generated_tokens - 1) / absl::ToDoubleSeconds(decode))
                : json(nullptr)}};
}

OpenAiAnswer::OpenAiAnswer(const OpenAiRequest& request, std::string id, absl::Time arrival,
                           std::string model)
    : route_(request.route),
      logprobs_(request.generate.logprobs()),
      include_usage_(request.stream && request.include_usage),
      id_(std::move(id)),
      arrival_(arrival),
      created_(absl::ToUnixSeconds(arrival)),
      model_(std::move(model)),
      stops_(request.stop, request.route == Route::kChat && request.tool_format.has_value()
                               ? std::string(grammar::kToolCallOpening)
                               : ""),
      completion_logprobs_(EmptyCompletionLogprobs()),
      tool_format_(request.route == Route::kChat ? request.tool_format : std::nullopt) {
  if (tool_format_.has_value() && request.stream) tool_parser_.emplace(*tool_format_);
}

std::string OpenAiAnswer::Absorb(std::vector<scheduler::TokenEvent> tokens, bool final) {
  std::string text;
  for (scheduler::TokenEvent& t : tokens) {
    if (logprobs_) {
      const std::string token = ValidUtf8(t.bytes);
      const float logprob = t.logprob.value_or(0.0f);
      if (route_ == Route::kChat) {
        json top = json::array();
        for (size_t i = 0; i < t.top_logprobs.size(); ++i) {
          top.push_back({{"token", ValidUtf8(t.top_logprob_bytes[i])},
                         {"logprob", t.top_logprobs[i].logprob},
                         {"bytes", Bytes(t.top_logprob_bytes[i])}});
        }
        chat_logprobs_.push_back(
            {{"token", token}, {"logprob", logprob}, {"bytes", Bytes(t.bytes)}, {"top_logprobs", top}});
      } else {
        json top = json::object();
        for (size_t i = 0; i < t.top_logprobs.size(); ++i) {
          const std::string alternative = ValidUtf8(t.top_logprob_bytes[i]);
          if (!top.contains(alternative)) top[alternative] = t.top_logprobs[i].logprob;
        }
        completion_logprobs_["tokens"].push_back(token);
        completion_logprobs_["token_logprobs"].push_back(logprob);
        completion_logprobs_["top_logprobs"].push_back(top);
        completion_logprobs_["text_offset"].push_back(text_offset_);
        text_offset_ += t.bytes.size();
      }
    }
    text += TakeWholeCharacters(&held_, stops_.Pass(t.bytes), /*final=*/false);
  }
  if (final) {
    // A turn that ended otherwise (length, EOS) gives back what looked like a stop's start.
    text += TakeWholeCharacters(&held_, stops_.Rest(), /*final=*/true);
  }
  return text;
}

json OpenAiAnswer::TakeLogprobs() {
  if (!logprobs_) return nullptr;
  json out;
  if (route_ == Route::kChat) {
    out = {{"content", chat_logprobs_}};
    chat_logprobs_ = json::array();
  } else {
    out = completion_logprobs_;
    completion_logprobs_ = EmptyCompletionLogprobs();
  }
  return out;
}

json OpenAiAnswer::Envelope(const char* object) const {
  json j = {{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}};
  if (include_usage_) j["usage"] = nullptr;  // every chunk but the last, as OpenAI does
  return j;
}

json OpenAiAnswer::Chunk(const std::string& content, const json& finish_reason) {
  json choice = {{"index", 0}, {"logprobs", TakeLogprobs()}, {"finish_reason", finish_reason}};
  json j;
  if (route_ == Route::kChat) {
    j = Envelope("chat.completion.chunk");
    choice["delta"] = finish_reason.is_null() ? json{{"content", content}} : json::object();
  } else {
    j = Envelope("text_completion");
    choice["text"] = content;
  }
  j["choices"] = json::array({choice});
  return j;
}

json OpenAiAnswer::DeltaChunk(json delta, const json& finish_reason) {
  json j = Envelope("chat.completion.chunk");
  j["choices"] = json::array({{{"index", 0},
                               {"delta", std::move(delta)},
                               {"logprobs", TakeLogprobs()},
                               {"finish_reason", finish_reason}}});
  return j;
}

std::string OpenAiAnswer::ToolChunks(const std::string& text, bool final) {
  using Kind = grammar::ToolCallStreamParser::Event::Kind;
  std::vector<grammar::ToolCallStreamParser::Event> events;
  tool_parser_->Feed(text, &events);
  if (final) FinishToolAnswer(*tool_parser_, &events);
  std::string out;
  for (grammar::ToolCallStreamParser::Event& e : events) {
    json delta;
    if (e.kind == Kind::kContent) {
      delta = {{"content", std::move(e.text)}};
    } else if (e.kind == Kind::kCallStart) {
      call_ids_.push_back(absl::StrCat("call_", RandomId128()));
      delta = {{"tool_calls", json::array({{{"index", e.index},
                                            {"id", call_ids_.back()},
                                            {"type", "function"},
                                            {"function", {{"name", std::move(e.text)},
                                                          {"arguments", ""}}}}})}};
    } else if (e.kind == Kind::kArguments) {
      delta = {{"tool_calls", json::array({{{"index", e.index},
                                            {"function", {{"arguments", std::move(e.text)}}}}})}};
    } else {
      continue;  // kCallEnd: the client knows a call is whole from the next one or the end
    }
    out += SseEvent(Dump(DeltaChunk(std::move(delta), nullptr)));
  }
  return out;
}

std::string OpenAiAnswer::ToolFinishReason(const std::string& reason, size_t calls) const {
  return reason == "stop" && calls > 0 ? "tool_calls" : reason;
}

json OpenAiAnswer::Usage(const scheduler::TurnResult& r) const {
  const int64_t prompt = cached_tokens_ + r.prompt_tokens;
  return {{"prompt_tokens", prompt},
          {"completion_tokens", r.generated_tokens},
          {"total_tokens", prompt + r.generated_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens_}}}};
}

std::string OpenAiAnswer::Start() {
  if (route_ != Route::kChat) return "";
  json j = Envelope("chat.completion.chunk");
  j["choices"] = json::array({{{"index", 0},
                               {"delta", {{"role", "assistant"}, {"content", ""}}},
                               {"logprobs", nullptr},
                               {"finish_reason", nullptr}}});
  return SseEvent(Dump(j));
}

std::string OpenAiAnswer::Tokens(std::vector<scheduler::TokenEvent> tokens) {
  const std::string text = Absorb(std::move(tokens), /*final=*/false);
  if (text.empty()) return "";  // logprob entries wait for the character's last byte
  if (tool_parser_) return ToolChunks(text, /*final=*/false);
  return SseEvent(Dump(Chunk(text, nullptr)));
}

std::string OpenAiAnswer::Finish(const scheduler::TurnResult& result) {
  absl::Status error;
  const std::optional<std::string> reason = FinishReasonOf(result, &error);
  if (!reason.has_value()) return SseEvent(Dump(ErrorBody(error)));
  std::string out;
  const std::string rest = Absorb({}, /*final=*/true);
  if (tool_parser_) out += ToolChunks(rest, /*final=*/true);
  const bool pending_logprobs =
      logprobs_ && (route_ == Route::kChat ? !chat_logprobs_.empty()
                                           : !completion_logprobs_["tokens"].empty());
  if ((!rest.empty() && !tool_parser_) || pending_logprobs) {
    out += SseEvent(Dump(Chunk(tool_parser_ ? "" : rest, nullptr)));
  }
  // The last choice chunk: chat's empty delta, completions' empty text.
  out += SseEvent(Dump(Chunk("", tool_parser_ ? ToolFinishReason(*reason, call_ids_.size()) : *reason)));
  if (include_usage_) {
    json j = Envelope(route_ == Route::kChat ? "chat.completion.chunk" : "text_completion");
    j["choices"] = json::array();
    j["usage"] = Usage(result);
    j["timings"] = Timings(result, absl::Now() - arrival_);
    out += SseEvent(Dump(j));
  }
  out += SseEvent("[DONE]");
  return out;
}

void OpenAiAnswer::Add(std::vector<scheduler::TokenEvent> tokens) {
  content_ += Absorb(std::move(tokens), /*final=*/false);
}

json OpenAiAnswer::Body(const scheduler::TurnResult& result, const std::string& finish_reason) {
  content_ += Absorb({}, /*final=*/true);
  json choice = {{"index", 0}, {"logprobs", TakeLogprobs()}, {"finish_reason", finish_reason}};
  json j;
  if (route_ == Route::kChat) {
    j = {{"id", id_}, {"object", "chat.completion"}, {"created", created_}, {"model", model_}};
    choice["message"] = {{"role", "assistant"}, {"content", content_}};
    if (tool_format_.has_value()) {
      grammar::ParsedAnswer a = ReadToolAnswer(*tool_format_, content_);
      choice["message"]["content"] = a.content;
      if (!a.calls.empty()) {
        json calls = json::array();
        for (grammar::ToolCall& c : a.calls) {
          calls.push_back({{"id", absl::StrCat("call_", RandomId128())},
                           {"type", "function"},
                           {"function", {{"name", std::move(c.name)},
                                         {"arguments", std::move(c.arguments)}}}});
        }
        choice["message"]["content"] = a.content.empty() ? json(nullptr) : json(a.content);
        choice["message"]["tool_calls"] = std::move(calls);
        choice["finish_reason"] = ToolFinishReason(finish_reason, a.calls.size());
      }
    }
  } else {
    j = {{"id", id_}, {"object", "text_completion"}, {"created", created_}, {"model", model_}};
    choice["text"] = content_;
  }
  j["choices"] = json::array({choice});
  j["usage"] = Usage(result);
  j["timings"] = Timings(result, absl::Now() - arrival_);
  return j;
}

}  // namespace attnserve::http
