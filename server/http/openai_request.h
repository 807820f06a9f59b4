// The OpenAI completions and chat request bodies, parsed into the service's
// v1::GenerateRequest (which admission then validates like any gRPC request) and the
// few settings that only shape the HTTP answer (stream, usage, logprobs layout).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "attnserve/v1/attnserve.pb.h"
#include "server/grammar/tool_calls.h"
#include "server/http/chat_template.h"
#include "server/http/chat_tools.h"
#include "server/http/json_fields.h"

namespace attnserve::http {

enum class Route { kCompletions, kChat };

struct OpenAiRequest {
  Route route = Route::kCompletions;
  // The turn: model, prompt (completions: the prompt; chat: empty until the template
  // renders `messages`), sampling, stop strings, logprobs. session_id stays empty (the
  // caller sets it from x-session-id).
  v1::GenerateRequest generate;
  std::vector<ChatMessage> messages;  // chat
  ChatTools tools;                    // chat
  // Chat whose turn runs under a tool-call constraint: the envelope its answer is read
  // in for calls (set by the front once the model's template is known).
  std::optional<grammar::ToolCallFormat> tool_format;
  // `stop`, also in generate's sampling, where the scheduler ends the turn at one; the
  // front takes them out of it for a turn whose calls start lazily (tool_choice "auto"),
  // where they end only the text before a call (answer_stops.h).
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// Parses `body` for `route`. INVALID_ARGUMENT naming the field for: a body that is not a
// JSON object, a field of the wrong type, n other than 1, a prompt that is neither a
// string, a list of one string, nor a list of token ids, a chat without messages or with
// a message content that is not text, stop strings under a constraint that applies from
// the answer's first byte (CheckStopWithConstraint); and whatever ParseRequestBody (request_gate.h)
// refuses first: a body nested too deep or over a count limit, a field this server does
// not honour (never accepted and ignored).
// `seed` absent draws a random seed (`random_seed`), as OpenAI's sampling is random
// unless a seed is given.
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(Route route, const std::string& body,
                                                 uint64_t random_seed);

}  // namespace attnserve::http
