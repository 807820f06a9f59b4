// The one gate every OpenAI-style request body passes before anything is built from it
// (rendered, encoded, imported, stored or sent to a session): the JSON's nesting depth is
// checked while scanning the bytes, without recursion, before the JSON is parsed; then the
// counts and lengths of its lists and maps; then which fields it names, so that a field
// this server does not honour is refused (400 naming it) rather than answered 200 and
// ignored. Admission's token limits on the rendered prompt come after, in the service.
//
// Torch- and httplib-free; the request decoders (openai_request.h, responses_api.h,
// conversations_api.h) call it, and tests/fuzz/request_fuzz.cc drives them through it.
#pragma once

#include <cstddef>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace attnserve::http {

// The shape every request body must keep. OpenAI's own metadata limits are 16 keys of at
// most 64 characters with values of at most 512.
struct RequestShapeLimits {
  static constexpr int kMaxDepth = 32;               // nested arrays and objects
  static constexpr size_t kMaxMessages = 1024;       // messages, input or items
  static constexpr size_t kMaxContentParts = 64;     // parts of one message's content
  static constexpr size_t kMaxStopStrings = 16;      // admission's default limit
  static constexpr size_t kMaxMetadataKeys = 16;
  static constexpr size_t kMaxMetadataKeyChars = 64;
  static constexpr size_t kMaxMetadataValueChars = 512;
  static constexpr size_t kMaxFields = 64;           // members of the body object
  static constexpr size_t kMaxTools = 128;           // tools (OpenAI's limit)
  static constexpr size_t kMaxToolCalls = 128;       // tool_calls of one message
};

// What a body is for: decides which fields it may name.
enum class RequestKind {
  kCompletions,
  kChat,
  kResponses,
  kConversationCreate,
  kConversationUpdate,
  kConversationFork,
};

// The deepest nesting of arrays and objects in `text` read as JSON, counted over the
// bytes (strings skipped, escapes honoured) without recursion and stopping as soon as it
// passes `limit` (then it returns limit + 1). Malformed JSON is the parser's to refuse.
int JsonNestingDepth(std::string_view text, int limit);

// Parses `text` as the body of a `kind` request and checks its shape:
//   INVALID_ARGUMENT "the request body must be a JSON object" (not JSON, or not an
//     object), "... nests deeper than 32 levels", a list or map over its count limit
//     (naming the field), metadata over OpenAI's limits (naming it);
//   INVALID_ARGUMENT naming the field (the OpenAI error's param) for a field the server
//     does not honour: one it does not know ("unrecognized request argument"), or one it
//     knows but does not implement with a value that would change the answer (tools
//     on completions, a non-zero penalty, logit_bias, ...).
//     Such fields at their no-op values (tools: [], frequency_penalty: 0, user: "...")
//     are accepted, as SDKs send them. response_format and text are the decoders'
//     (response_format.h), which refuse any member they do not honour.
// Returns the parsed object. Error messages never echo more than a few dozen bytes of
// the input.
absl::StatusOr<nlohmann::json> ParseRequestBody(std::string_view text, RequestKind kind);

// OK if `metadata` is an object within OpenAI's limits (RequestShapeLimits), else
// INVALID_ARGUMENT with param "metadata".
absl::Status CheckMetadata(const nlohmann::json& metadata);

}  // namespace attnserve::http
