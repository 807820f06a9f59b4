#include "server/http/response_format.h"

#include <initializer_list>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "server/http/json_fields.h"
#include "server/service/constraints.h"

namespace attnserve::http {
namespace {

using nlohmann::json;

// OnlyMembers (json_fields.h), saying why a description is refused.
absl::Status OnlyFormatMembers(const json& object, const std::string& param,
                               std::initializer_list<const char*> allowed) {
  return OnlyMembers(object, param, allowed, [](const std::string& name) -> const char* {
    return name == "description" ? "is not supported (the schema alone constrains the answer; "
                                   "give no description)"
                                 : nullptr;
  });
}

// The members of a json_schema format (`spec`, at `param`): name, schema, strict.
absl::Status ReadSchemaSpec(const json& spec, const std::string& param,
                            v1::SamplingParams* sampling) {
  if (absl::Status s = OnlyFormatMembers(spec, param, {"name", "schema", "strict", "type"}); !s.ok()) {
    return s;
  }
  if (const json* name = Field(spec, "name"); name != nullptr && !name->is_string()) {
    return WrongType(param + ".name", "a string");
  }
  if (const json* strict = Field(spec, "strict"); strict != nullptr && !strict->is_boolean()) {
    return WrongType(param + ".strict", "true or false");
  }
  const json* schema = Field(spec, "schema");
  if (schema == nullptr) return InvalidParam(param + ".schema", "is required");
  if (!schema->is_object() && !schema->is_boolean()) {
    return WrongType(param + ".schema", "a JSON Schema (an object)");
  }
  sampling->mutable_constraint()->set_json_schema(schema->dump());
  return absl::OkStatus();
}

// One format object at `param`, of `type` text, json_object or json_schema; `flat`: the
// schema's members sit beside `type` (text.format) rather than under "json_schema".
absl::Status ReadFormat(const json& format, const std::string& param, bool flat,
                        v1::SamplingParams* sampling) {
  if (!format.is_object()) return WrongType(param, "an object with a type");
  const json* type = Field(format, "type");
  if (type == nullptr || !type->is_string()) {
    return InvalidParam(param + ".type",
                        "is required: \"text\", \"json_object\" or \"json_schema\"");
  }
  if (*type == "text" || *type == "json_object") {
    if (absl::Status s = OnlyFormatMembers(format, param, {"type"}); !s.ok()) return s;
    if (*type == "json_object") sampling->mutable_constraint()->set_json_object(true);
    return absl::OkStatus();
  }
  if (*type != "json_schema") {
    return InvalidParam(param + ".type", absl::StrCat("unknown type '", ShownName(type->get<std::string>()),
                                                      "'; valid: \"text\", \"json_object\", "
                                                      "\"json_schema\""));
  }
  if (flat) return ReadSchemaSpec(format, param, sampling);
  if (absl::Status s = OnlyFormatMembers(format, param, {"type", "json_schema"}); !s.ok()) return s;
  const json* spec = Field(format, "json_schema");
  if (spec == nullptr) return InvalidParam(param + ".json_schema", "is required");
  if (!spec->is_object()) return WrongType(param + ".json_schema", "an object");
  if (spec->contains("type")) {
    return InvalidParam(param + ".json_schema.type", "unrecognized member (not served here)");
  }
  return ReadSchemaSpec(*spec, param + ".json_schema", sampling);
}

// The schema at `path` in the body's text, its members in the order the client wrote
// them (the grammar writes properties in declared order; the parsed body has them sorted).
void KeepDeclaredOrder(std::string_view body_text, std::initializer_list<const char*> path,
                       v1::SamplingParams* sampling) {
  if (sampling->constraint().kind_case() != v1::Constraint::kJsonSchema) return;
  // The gate parsed these bytes already: they are JSON, and the path is there.
  nlohmann::ordered_json value =
      nlohmann::ordered_json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  for (const char* key : path) value = nlohmann::ordered_json(value[key]);
  sampling->mutable_constraint()->set_json_schema(value.dump());
}

}  // namespace

absl::Status ReadResponseFormat(const json& body, std::string_view body_text,
                                v1::SamplingParams* sampling) {
  const json* format = Field(body, "response_format");
  if (format == nullptr) return absl::OkStatus();
  if (absl::Status s = ReadFormat(*format, "response_format", /*flat=*/false, sampling); !s.ok()) {
    return s;
  }
  KeepDeclaredOrder(body_text, {"response_format", "json_schema", "schema"}, sampling);
  return absl::OkStatus();
}

absl::Status ReadTextFormat(const json& body, std::string_view body_text,
                            v1::SamplingParams* sampling, json* echo) {
  *echo = {{"format", {{"type", "text"}}}};
  const json* text = Field(body, "text");
  if (text == nullptr) return absl::OkStatus();
  if (!text->is_object()) return WrongType("text", "an object");
  if (absl::Status s = OnlyFormatMembers(*text, "text", {"format"}); !s.ok()) return s;
  const json* format = Field(*text, "format");
  if (format == nullptr) return absl::OkStatus();
  if (absl::Status s = ReadFormat(*format, "text.format", /*flat=*/true, sampling); !s.ok()) {
    return s;
  }
  KeepDeclaredOrder(body_text, {"text", "format", "schema"}, sampling);
  (*echo)["format"] = *format;
  return absl::OkStatus();
}

absl::Status NameConstraintError(const absl::Status& status, const std::string& param,
                                 bool flat_tools) {
  auto kind = status.GetPayload(service::kConstraintErrorPayload);
  if (!kind.has_value()) return status;
  const bool tools = std::string(*kind) == "tool_calls";
  const std::string field = tools ? "tools" : param;
  // Admission's message names its own field first ("sampling.constraint.json_schema: ").
  std::string message(status.message());
  if (const size_t colon = message.find(": "); colon != std::string::npos) {
    message = message.substr(colon + 2);
  }
  if (tools && flat_tools) {
    // "/tools/N/function/parameters" -> "/tools/N/parameters"
    for (size_t at = message.find("/tools/"); at != std::string::npos;
         at = message.find("/tools/", at + 1)) {
      size_t end = at + 7;
      while (end < message.size() && absl::ascii_isdigit(message[end])) ++end;
      if (end > at + 7 && message.compare(end, 20, "/function/parameters") == 0) {
        message.erase(end, 9);  // "/function"
      }
    }
  }
  absl::Status named(status.code(), absl::StrCat(field, ": ", message));
  named.SetPayload(kParamPayload, absl::Cord(field));
  return named;
}

}  // namespace attnserve::http
