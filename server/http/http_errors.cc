#include "server/http/http_errors.h"

#include "absl/strings/numbers.h"
#include "server/http/openai_request.h"
#include "server/service/admission.h"

namespace attnserve::http {
namespace {

struct Kind {
  int status;
  const char* type;
  const char* code;
  int retry_after_seconds;
};

Kind KindOf(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
      if (service::IsPromptOverLimit(s)) {
        return {413, "invalid_request_error", "prompt_too_long", 0};
      }
      return {400, "invalid_request_error", "invalid_value", 0};
    case absl::StatusCode::kOutOfRange:
      return {400, "invalid_request_error", "context_length_exceeded", 0};
    case absl::StatusCode::kUnauthenticated:
      // OpenAI's own answer to a bad key; the SDKs raise AuthenticationError from the 401.
      return {401, "invalid_request_error", "invalid_api_key", 0};
    case absl::StatusCode::kPermissionDenied:
      return {403, "permission_error", "permission_denied", 0};
    case absl::StatusCode::kNotFound:
      return {404, "invalid_request_error", "not_found", 0};
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kAlreadyExists:
      return {409, "invalid_request_error", "conflict", 0};
    case absl::StatusCode::kResourceExhausted:
      return {429, "rate_limit_error", "rate_limit_exceeded", 1};
    case absl::StatusCode::kCancelled:
      return {499, "invalid_request_error", "cancelled", 0};
    case absl::StatusCode::kUnavailable:
      return {503, "server_error", "unavailable", 1};
    case absl::StatusCode::kDeadlineExceeded:
      return {504, "server_error", "timeout", 0};
    default:
      return {500, "server_error", "internal_error", 0};
  }
}

}  // namespace

nlohmann::json ErrorBody(const absl::Status& status) {
  const Kind kind = KindOf(status);
  nlohmann::json error = {{"message", std::string(status.message())},
                          {"type", kind.type},
                          {"param", nullptr},
                          {"code", kind.code}};
  if (auto param = status.GetPayload(kParamPayload)) error["param"] = std::string(*param);
  return {{"error", error}};
}

HttpError ToHttpError(const absl::Status& status) {
  const Kind kind = KindOf(status);
  int retry_after = kind.retry_after_seconds;
  if (auto seconds = status.GetPayload(kRetryAfterPayload)) {
    int parsed = 0;
    if (absl::SimpleAtoi(std::string(*seconds), &parsed) && parsed > 0) retry_after = parsed;
  }
  return {kind.status, ErrorBody(status), retry_after};
}

std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

}  // namespace attnserve::http
