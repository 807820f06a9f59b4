// Reading fields of an OpenAI request body (nlohmann::json) with errors that name the
// field: INVALID_ARGUMENT "PARAM: must be ..." carrying the param payload (InvalidParam).
// Shared by the completions, chat and responses parsers.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "server/http/chat_template.h"

namespace attnserve::http {

// The type URL of the payload naming the request field an error is about (the OpenAI
// error's "param").
inline constexpr char kParamPayload[] = "attnserve/openai-param";
// INVALID_ARGUMENT "PARAM: message" with the param payload.
absl::Status InvalidParam(const std::string& param, const std::string& message);
// The param payload of `status` ("" when it has none).
std::string ParamOf(const absl::Status& status);

// A member whose value is null is as if absent: the one rule for every field and member
// of a request read here (what Field finds, what OnlyMembers and the request gate refuse).
inline bool IsAbsent(const nlohmann::json& value) { return value.is_null(); }
// The field `key` of `body` when present and not absent (IsAbsent).
const nlohmann::json* Field(const nlohmann::json& body, const char* key);
// A member's name as an error shows it, in its message and as its param: at most 40
// bytes of it (then "..."), so no error echoes the input.
std::string ShownName(const std::string& name);
// OK if every member of `object` that is not absent (IsAbsent) is one of `allowed`; else
// InvalidParam("<param>.<name>") naming the first other one, with `why(name)` as the
// message when `why` is given and returns one, else "unrecognized member (not served
// here)".
absl::Status OnlyMembers(const nlohmann::json& object, const std::string& param,
                         std::initializer_list<const char*> allowed,
                         const std::function<const char*(const std::string&)>& why = nullptr);
// InvalidParam(param, "must be <expected>").
absl::Status WrongType(const std::string& param, const char* expected);
// Optional fields of one type: absent or null leaves `*out` as it is.
absl::Status ReadNumber(const nlohmann::json& body, const char* key, std::optional<double>* out);
absl::Status ReadInt(const nlohmann::json& body, const char* key, std::optional<int64_t>* out);
absl::Status ReadBool(const nlohmann::json& body, const char* key, bool* out);
// A token count as an int32; values out of range are clamped so that admission reports
// them against its limit.
int32_t ClampToInt32(int64_t v);

// A list of messages ({role, content}) at `param` ("messages", "input"): content is a
// string or a list of text parts (type "text", "input_text" or "output_text"); only an
// assistant message may have none. An assistant message's `tool_calls` ({id, type
// "function", function {name, arguments}}) and a tool message's `tool_call_id` are read
// (the request gate lets them through on chat messages only). Items with a "type" other
// than "message" (Responses' tool calls and their outputs) are refused, naming the item.
absl::Status ReadMessageList(const nlohmann::json& list, const std::string& param,
                             std::vector<ChatMessage>* out);
// One message of such a list: `item` names it in errors ("input[3]"), `param` the list.
absl::Status ReadMessage(const nlohmann::json& message, const std::string& item,
                         const std::string& param, ChatMessage* out);

}  // namespace attnserve::http
