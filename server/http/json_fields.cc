#include "server/http/json_fields.h"

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace attnserve::http {

using nlohmann::json;

absl::Status InvalidParam(const std::string& param, const std::string& message) {
  absl::Status s = absl::InvalidArgumentError(absl::StrCat(param, ": ", message));
  s.SetPayload(kParamPayload, absl::Cord(param));
  return s;
}

std::string ParamOf(const absl::Status& status) {
  auto param = status.GetPayload(kParamPayload);
  return param.has_value() ? std::string(*param) : "";
}

const json* Field(const json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || IsAbsent(*it)) return nullptr;
  return &*it;
}

std::string ShownName(const std::string& name) {
  return name.size() <= 40 ? name : name.substr(0, 40) + "...";
}

absl::Status OnlyMembers(const json& object, const std::string& param,
                         std::initializer_list<const char*> allowed,
                         const std::function<const char*(const std::string&)>& why) {
  for (const auto& [key, value] : object.items()) {
    if (IsAbsent(value)) continue;
    bool known = false;
    for (const char* a : allowed) known = known || key == a;
    if (known) continue;
    const char* message = why ? why(key) : nullptr;
    return InvalidParam(absl::StrCat(param, ".", ShownName(key)),
                        message != nullptr ? message : "unrecognized member (not served here)");
  }
  return absl::OkStatus();
}

absl::Status WrongType(const std::string& param, const char* expected) {
  return InvalidParam(param, absl::StrCat("must be ", expected));
}

absl::Status ReadNumber(const json& body, const char* key, std::optional<double>* out) {
  const json* f = Field(body, key);
  if (f == nullptr) return absl::OkStatus();
  if (!f->is_number()) return WrongType(key, "a number");
  *out = f->get<double>();
  return absl::OkStatus();
}

absl::Status ReadInt(const json& body, const char* key, std::optional<int64_t>* out) {
  const json* f = Field(body, key);
  if (f == nullptr) return absl::OkStatus();
  if (!f->is_number_integer()) return WrongType(key, "an integer");
  *out = f->get<int64_t>();
  return absl::OkStatus();
}

absl::Status ReadBool(const json& body, const char* key, bool* out) {
  const json* f = Field(body, key);
  if (f == nullptr) return absl::OkStatus();
  if (!f->is_boolean()) return WrongType(key, "true or false");
  *out = f->get<bool>();
  return absl::OkStatus();
}

int32_t ClampToInt32(int64_t v) {
  if (v > INT32_MAX) return INT32_MAX;
  if (v < INT32_MIN) return INT32_MIN;
  return int32_t(v);
}

namespace {

bool IsEmptyList(const json& v) { return v.is_array() && v.empty(); }

// An assistant message's tool_calls (`list`, at `param`) into `out`: each {id, type
// "function", function {name, arguments}}, arguments a string (the JSON text as the
// answer gave it).
absl::Status ReadToolCalls(const json& list, const std::string& param,
                           std::vector<ChatToolCall>* out) {
  if (!list.is_array()) return WrongType(param, "a list of tool calls");
  for (size_t j = 0; j < list.size(); ++j) {
    const std::string call = absl::StrCat(param, "[", j, "]");
    const json& c = list[j];
    if (!c.is_object()) return WrongType(call, "an object");
    if (absl::Status s = OnlyMembers(c, call, {"id", "type", "function"}); !s.ok()) return s;
    const json* id = Field(c, "id");
    if (id == nullptr || !id->is_string()) return WrongType(call + ".id", "a string");
    if (const json* type = Field(c, "type"); type != nullptr && *type != "function") {
      return InvalidParam(call + ".type", "only \"function\" calls are supported");
    }
    const json* f = Field(c, "function");
    if (f == nullptr || !f->is_object()) return WrongType(call + ".function", "an object");
    if (absl::Status s = OnlyMembers(*f, call + ".function", {"name", "arguments"}); !s.ok()) {
      return s;
    }
    const json* name = Field(*f, "name");
    const json* arguments = Field(*f, "arguments");
    if (name == nullptr || !name->is_string()) return WrongType(call + ".function.name", "a string");
    if (arguments == nullptr || !arguments->is_string()) {
      return WrongType(call + ".function.arguments", "a string (the arguments' JSON text)");
    }
    out->push_back({id->get<std::string>(), name->get<std::string>(), arguments->get<std::string>()});
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadMessageList(const json& list, const std::string& param,
                             std::vector<ChatMessage>* out) {
  for (size_t i = 0; i < list.size(); ++i) {
    ChatMessage message;
    if (absl::Status s = ReadMessage(list[i], absl::StrCat(param, "[", i, "]"), param, &message);
        !s.ok()) {
      return s;
    }
    out->push_back(std::move(message));
  }
  return absl::OkStatus();
}

absl::Status ReadMessage(const json& message, const std::string& item, const std::string& param,
                         ChatMessage* out) {
  if (!message.is_object()) return WrongType(item, "an object");
  if (const json* type = Field(message, "type"); type != nullptr && *type != "message") {
    return InvalidParam(item + ".type", absl::StrCat("only message items are supported (not ",
                                                     type->dump(), ")"));
  }
  const json* role = Field(message, "role");
  if (role == nullptr || !role->is_string()) return WrongType(item + ".role", "a string");
  ChatMessage out_message{role->get<std::string>(), ""};
  if (const json* calls = Field(message, "tool_calls"); calls != nullptr && !IsEmptyList(*calls)) {
    if (out_message.role != "assistant") {
      return InvalidParam(item + ".tool_calls", "only an assistant message makes tool calls");
    }
    if (absl::Status s = ReadToolCalls(*calls, item + ".tool_calls", &out_message.tool_calls);
        !s.ok()) {
      return s;
    }
  }
  // Tool results are chat messages; the Responses API has items of its own for them.
  const json* call_id = Field(message, "tool_call_id");
  if (out_message.role == "tool") {
    if (param != "messages") {
      return InvalidParam(item + ".role", "\"tool\" messages are not served here");
    }
    if (call_id == nullptr || !call_id->is_string()) {
      return WrongType(item + ".tool_call_id", "a string (the call this result answers)");
    }
    out_message.tool_call_id = call_id->get<std::string>();
  } else if (call_id != nullptr) {
    return InvalidParam(item + ".tool_call_id", "only a tool message answers a call");
  }
  const json* content = Field(message, "content");
  if (content == nullptr) {
    // Only an assistant message may carry no content (it made tool calls).
    if (out_message.role != "assistant") {
      return InvalidParam(item + ".content",
                          absl::StrCat("is required for a '", out_message.role, "' message"));
    }
  } else if (content->is_string()) {
    out_message.content = content->get<std::string>();
  } else if (content->is_array()) {
    for (const json& part : *content) {
      const json* type = part.is_object() ? Field(part, "type") : nullptr;
      const json* text = part.is_object() ? Field(part, "text") : nullptr;
      const bool text_part = type != nullptr && (*type == "text" || *type == "input_text" ||
                                                 *type == "output_text");
      if (!text_part || text == nullptr || !text->is_string()) {
        return InvalidParam(item + ".content", "only text content parts are supported");
      }
      out_message.content += text->get<std::string>();
    }
  } else {
    return WrongType(item + ".content", "a string or a list of text parts");
  }
  *out = std::move(out_message);
  return absl::OkStatus();
}

}  // namespace attnserve::http
