// The one mapping from absl::Status to an HTTP status and an OpenAI error body,
// {"error":{"message","type","param","code"}}.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace attnserve::http {

// The type URL of a payload (decimal seconds) telling the client when to retry a refusal
// that is not 429 or 503: a conversation with a response in progress (409).
inline constexpr char kRetryAfterPayload[] = "attnserve/retry-after-seconds";

struct HttpError {
  int status = 500;
  nlohmann::json body;
  // Set for 429 and 503, and from kRetryAfterPayload: the client may retry after this
  // many seconds.
  int retry_after_seconds = 0;
};

// INVALID_ARGUMENT and OUT_OF_RANGE 400 (a prompt over the server's limit 413),
// UNAUTHENTICATED 401, PERMISSION_DENIED 403, NOT_FOUND 404, FAILED_PRECONDITION (a
// session with a turn in flight), ABORTED and ALREADY_EXISTS 409, RESOURCE_EXHAUSTED 429,
// CANCELLED 499 (the client went away; nobody reads it), UNAVAILABLE 503,
// DEADLINE_EXCEEDED 504, anything else 500. A deterministic failure is never 5xx: the
// SDKs retry those.
HttpError ToHttpError(const absl::Status& status);

// The error body alone: {"error":{...}} for `status` (not OK).
nlohmann::json ErrorBody(const absl::Status& status);

// JSON text as the front writes it: compact, invalid UTF-8 replaced by U+FFFD (tokens'
// bytes may be any bytes; the JSON must stay valid).
std::string Dump(const nlohmann::json& j);

}  // namespace attnserve::http
