// Structured outputs on the OpenAI routes (server/DESIGN.md §12): chat and completions'
// `response_format` and /v1/responses' `text.format`, read into the turn's
// SamplingParams.constraint, which admission compiles (and refuses, naming the schema
// keyword and its path) like any gRPC request's.
//
//   {"type": "text"}                      free text (no constraint)
//   {"type": "json_object"}               any JSON object
//   chat, completions:
//   {"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ...}}
//   /v1/responses (text.format, flattened):
//   {"type": "json_schema", "name": ..., "schema": {...}, "strict": ...}
//
// `strict` may be true or false: the schema is enforced either way. Any other member
// (`description`, which OpenAI shows the model and this server would ignore) is refused,
// naming it, rather than accepted and ignored.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "attnserve/v1/attnserve.pb.h"
#include "nlohmann/json.hpp"

namespace attnserve::http {

// `body`'s response_format (absent or null: free text) into `sampling`'s constraint.
// `body_text` is what `body` was parsed from (by ParseRequestBody): the schema is taken
// from it with its members in the order given, since the grammar writes an object's
// properties in declared order. INVALID_ARGUMENT with the param payload naming the member
// for an unknown type or member, a member of the wrong type, or json_schema without a
// schema object.
absl::Status ReadResponseFormat(const nlohmann::json& body, std::string_view body_text,
                                v1::SamplingParams* sampling);

// `body`'s text (absent or null: free text; only `format` is read) into `sampling`'s
// constraint, and `*echo` set to the `text` object the response repeats
// ({"format": {"type": "text"}} when absent). Errors as ReadResponseFormat's, naming
// "text.format...".
absl::Status ReadTextFormat(const nlohmann::json& body, std::string_view body_text,
                            v1::SamplingParams* sampling, nlohmann::json* echo);

// `status` as the client should see it: a constraint admission refused
// (service::kConstraintErrorPayload) named after the request field it came from,
// "PARAM: <the compiler's message>" with the param payload, where PARAM is `param`
// ("response_format", "text.format") or "tools" for a tool list. `flat_tools`: the
// request's tools have the Responses API's flat shape, so a path into a function's
// parameters is "/tools/N/parameters/..." (the compiler names the chat shape's
// "/tools/N/function/parameters/..."). Any other status as it is.
absl::Status NameConstraintError(const absl::Status& status, const std::string& param,
                                 bool flat_tools = false);

}  // namespace attnserve::http
