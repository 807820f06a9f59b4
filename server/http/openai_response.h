// OpenAI answers from a turn's tokens: the completion and chat.completion bodies, and
// the server-sent events of a stream (chunks, the usage chunk, [DONE], an error event).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "server/grammar/tool_calls.h"
#include "server/http/answer_stops.h"
#include "server/http/openai_request.h"
#include "server/scheduler/turn.h"

namespace attnserve::http {

// "stop" or "length" for a turn that ended normally; nullopt with *error set otherwise
// (the client cancelled, the server is shutting down, the turn failed).
std::optional<std::string> FinishReasonOf(const scheduler::TurnResult& result,
                                          absl::Status* error);

// attnserve's `timings` on a response or a chat completion, as the server measured them
// from the request's arrival (`total`: to the end of the turn): {time_to_first_token_ms
// (queueing and prefill; null with no token), total_ms, output_tokens_per_second (the
// tokens after the first over the time after it; null with fewer than two)}. gRPC's usage
// carries the same time to first token.
nlohmann::json Timings(const scheduler::TurnResult& result, absl::Duration total);

// One turn's answer, built as its tokens arrive. Content carries whole UTF-8 characters
// only: the bytes of a character split between tokens are held until it completes; bytes
// that are not valid UTF-8, and an incomplete character at the end, become U+FFFD.
// As in the OpenAI API, a stop string is not part of the content: the turn ends after
// the token that completes it (the scheduler's rule, the same as gRPC's), and the text
// here ends before it. Bytes that may begin a stop string are held until they do not
// (AnswerStops; under tool_choice "auto" stop strings end only the text before a call).
//
// A chat turn under a tool-call constraint (OpenAiRequest::tool_format) is read for calls
// in its envelope (grammar::ToolCallStreamParser): the text before the first call is
// `content` (null when there is none and calls follow), each call a `tool_calls` entry
// {id "call_...", type "function", function {name, arguments}} with the arguments' exact
// text, and a turn that ended normally after a call finishes with "tool_calls" (one cut
// short by max_tokens with "length"). Streamed, a call's first delta carries index, id,
// type, function.name and arguments "", later deltas pieces of arguments (as the SDKs
// accumulate them). Bytes that may begin a call's envelope are held until they do or do
// not, and an envelope cut short is dropped (FinishToolAnswer): never content.
class OpenAiAnswer {
 public:
  // `id` is "chatcmpl-..." or "cmpl-...", `arrival` when the request came (`created`, and
  // where Timings starts), `model` the model's name; the request says the route, logprobs
  // and include_usage.
  OpenAiAnswer(const OpenAiRequest& request, std::string id, absl::Time arrival,
               std::string model);

  // Prompt tokens that were already in the session's state (a kept chat state): usage
  // counts them in prompt_tokens and reports them as prompt_tokens_details.cached_tokens.
  void set_cached_tokens(int64_t n) { cached_tokens_ = n; }

  // --- streaming: each returns SSE event text ("data: {...}\n\n"...) to write ---
  // The first event: chat's {"role":"assistant","content":""} delta; empty for completions.
  std::string Start();
  // Content chunks for `tokens` (none while only part of a character is known).
  std::string Tokens(std::vector<scheduler::TokenEvent> tokens);
  // The end: held bytes, the chunk with finish_reason, the usage chunk (with `timings`)
  // when asked, then
  // "data: [DONE]"; or, for a turn that did not end normally, one error event and no
  // [DONE].
  std::string Finish(const scheduler::TurnResult& result);

  // --- non-streaming ---
  void Add(std::vector<scheduler::TokenEvent> tokens);
  // The whole body for a turn that ended normally, with `timings`.
  nlohmann::json Body(const scheduler::TurnResult& result, const std::string& finish_reason);

 private:
  // Appends the tokens' bytes to the held text and logprob entries; returns the whole
  // characters now complete.
  std::string Absorb(std::vector<scheduler::TokenEvent> tokens, bool final);
  nlohmann::json Envelope(const char* object) const;
  nlohmann::json Chunk(const std::string& content, const nlohmann::json& finish_reason);
  nlohmann::json DeltaChunk(nlohmann::json delta, const nlohmann::json& finish_reason);
  // Chunks for `text` read by the tool-call parser (`final`: the answer is over).
  std::string ToolChunks(const std::string& text, bool final);
  // "tool_calls" for a turn that stopped after a call, else `reason`.
  std::string ToolFinishReason(const std::string& reason, size_t calls) const;
  nlohmann::json Usage(const scheduler::TurnResult& result) const;
  nlohmann::json TakeLogprobs();  // the entries gathered since the last chunk

  const Route route_;
  const bool logprobs_;
  const bool include_usage_;
  const std::string id_;
  const absl::Time arrival_;
  const int64_t created_;
  const std::string model_;
  int64_t cached_tokens_ = 0;
  AnswerStops stops_;    // the answer's bytes less a stop string and what follows it
  std::string held_;     // bytes of an incomplete character
  std::string content_;  // non-streaming: everything so far
  // Chat: logprobs.content entries; completions: tokens, token_logprobs, top_logprobs,
  // text_offset.
  nlohmann::json chat_logprobs_ = nlohmann::json::array();
  nlohmann::json completion_logprobs_;
  size_t text_offset_ = 0;  // completions: bytes of text before the next token
  const std::optional<grammar::ToolCallFormat> tool_format_;
  std::optional<grammar::ToolCallStreamParser> tool_parser_;  // streaming with tools
  std::vector<std::string> call_ids_;  // streamed calls' ids, by index
};

// "data: TEXT\n\n".
std::string SseEvent(const std::string& data);

}  // namespace attnserve::http
