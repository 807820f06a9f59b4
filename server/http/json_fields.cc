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

const json* Field(const json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
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

absl::Status ReadMessageList(const json& list, const std::string& param,
                             std::vector<ChatMessage>* out) {
  for (size_t i = 0; i < list.size(); ++i) {
    const json& message = list[i];
    const std::string item = absl::StrCat(param, "[", i, "]");
    if (!message.is_object()) return WrongType(item, "an object");
    if (const json* type = Field(message, "type"); type != nullptr && *type != "message") {
      return InvalidParam(item + ".type", absl::StrCat("only message items are supported (not ",
                                                       type->dump(), ")"));
    }
    const json* role = Field(message, "role");
    if (role == nullptr || !role->is_string()) return WrongType(item + ".role", "a string");
    ChatMessage out_message{role->get<std::string>(), ""};
    const json* content = Field(message, "content");
    if (content == nullptr) {
      // Only an assistant message may carry no content (tool calls, which we do not serve).
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
    out->push_back(std::move(out_message));
  }
  return absl::OkStatus();
}

}  // namespace attnserve::http
