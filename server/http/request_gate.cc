#include "server/http/request_gate.h"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/http/json_fields.h"

namespace attnserve::http {
namespace {

using nlohmann::json;
using L = RequestShapeLimits;

// A field's value the server would not honour, or nullptr when it would: the reason, for
// the error message.
using Check = std::function<const char*(const json&)>;

// A field the decoder reads (its type and range are the decoder's to check).
const char* Honoured(const json&) { return nullptr; }
// A field that changes nothing at the value the SDKs send by default.
Check NoOpWhen(std::function<bool(const json&)> no_op, const char* why) {
  return [no_op = std::move(no_op), why](const json& v) { return no_op(v) ? nullptr : why; };
}
bool IsZero(const json& v) { return v.is_number() && v.get<double>() == 0.0; }
bool IsEmpty(const json& v) { return (v.is_array() || v.is_object()) && v.empty(); }
bool IsFalse(const json& v) { return v.is_boolean() && !v.get<bool>(); }
bool IsString(const json& v) { return v.is_string(); }
bool Any(const json&) { return true; }

constexpr char kNoTools[] =
    "is not supported here (tools are served on /v1/chat/completions and /v1/responses as "
    "tools and tool_choice)";
constexpr char kNoPenalty[] = "penalties are not supported (only 0)";

struct FieldRule {
  const char* name;
  Check check;
};

// Fields of the sampling and identity kind shared by the three generating routes.
std::vector<FieldRule> CommonRules() {
  return {
      {"model", Honoured},
      {"stream", Honoured},
      {"temperature", Honoured},
      {"top_p", Honoured},
      {"top_k", Honoured},
      {"seed", Honoured},
      // Identifiers for the provider's abuse monitoring and cache routing: they do not
      // change the answer (the prefix cache here needs no key).
      {"user", NoOpWhen(IsString, "must be a string")},
      {"safety_identifier", NoOpWhen(IsString, "must be a string")},
      {"prompt_cache_key", NoOpWhen(IsString, "must be a string")},
      {"service_tier",
       NoOpWhen([](const json& v) { return v == "auto" || v == "default"; },
                "only \"auto\" or \"default\" is served here")},
  };
}

// Where tools are not served (completions): accepted only empty.
std::vector<FieldRule> NoToolRules() {
  return {
      {"tools", NoOpWhen(IsEmpty, kNoTools)},
      {"parallel_tool_calls", NoOpWhen(Any, "")},  // meaningful only with tools
  };
}

std::vector<FieldRule> ChatRules(bool chat) {
  std::vector<FieldRule> rules = CommonRules();
  const std::vector<FieldRule> more = {
      {"stream_options", Honoured},
      {"max_tokens", Honoured},
      {"stop", Honoured},
      {"logprobs", Honoured},
      {"n", Honoured},
      {"ignore_eos", Honoured},
      {"frequency_penalty", NoOpWhen(IsZero, kNoPenalty)},
      {"presence_penalty", NoOpWhen(IsZero, kNoPenalty)},
      {"logit_bias", NoOpWhen(IsEmpty, "logit_bias is not supported (give none)")},
  };
  rules.insert(rules.end(), more.begin(), more.end());
  // Read (and every member of it checked) by ReadResponseFormat (response_format.h).
  rules.push_back({"response_format", Honoured});
  if (!chat) {
    const std::vector<FieldRule> no_tools = NoToolRules();
    rules.insert(rules.end(), no_tools.begin(), no_tools.end());
    rules.push_back({"prompt", Honoured});
    rules.push_back({"echo", NoOpWhen(IsFalse, "echo is not supported")});
    rules.push_back({"best_of", NoOpWhen([](const json& v) { return v == 1; },
                                         "only best_of=1 is supported")});
    rules.push_back({"suffix", NoOpWhen([](const json& v) { return v == ""; },
                                        "suffix is not supported")});
    return rules;
  }
  const std::vector<FieldRule> chat_rules = {
      {"messages", Honoured},
      {"max_completion_tokens", Honoured},
      {"top_logprobs", Honoured},
      // Read (and every member checked) by ReadChatTools (chat_tools.h).
      {"tools", Honoured},
      {"tool_choice", Honoured},
      {"parallel_tool_calls", Honoured},
      {"functions", NoOpWhen(IsEmpty, kNoTools)},
      {"function_call", NoOpWhen([](const json& v) { return v == "none" || v == "auto"; }, kNoTools)},
      {"store", NoOpWhen(IsFalse, "storing chat completions is not supported (use /v1/responses)")},
      {"metadata", NoOpWhen(IsEmpty, "metadata is kept only with store, which chat completions do not support here")},
      {"modalities", NoOpWhen([](const json& v) { return v == json::array({"text"}); },
                              "only the text modality is served")},
  };
  rules.insert(rules.end(), chat_rules.begin(), chat_rules.end());
  return rules;
}

std::vector<FieldRule> ResponsesRules() {
  std::vector<FieldRule> rules = CommonRules();
  const std::vector<FieldRule> more = {
      {"input", Honoured},
      {"instructions", Honoured},
      {"previous_response_id", Honoured},
      {"store", Honoured},
      {"conversation", Honoured},
      {"metadata", Honoured},
      {"max_output_tokens", Honoured},
      // Read (and every member checked) by ReadTools (chat_tools.h).
      {"tools", Honoured},
      {"tool_choice", Honoured},
      {"parallel_tool_calls", Honoured},
      {"text", Honoured},  // ReadTextFormat (response_format.h) reads and checks it
      {"truncation", NoOpWhen([](const json& v) { return v == "disabled"; },
                              "only truncation \"disabled\" is served (a prompt over the "
                              "context is refused)")},
      {"include", NoOpWhen(IsEmpty, "include is not supported (give none)")},
      {"background", NoOpWhen(IsFalse, "background responses are not supported")},
      {"reasoning", NoOpWhen(IsEmpty, "reasoning options are not supported (the models here do not reason)")},
  };
  rules.insert(rules.end(), more.begin(), more.end());
  return rules;
}

const std::vector<FieldRule>& RulesFor(RequestKind kind) {
  static const auto* completions = new std::vector<FieldRule>(ChatRules(false));
  static const auto* chat = new std::vector<FieldRule>(ChatRules(true));
  static const auto* responses = new std::vector<FieldRule>(ResponsesRules());
  static const auto* create =
      new std::vector<FieldRule>{{"metadata", Honoured}, {"items", Honoured}};
  static const auto* update = new std::vector<FieldRule>{{"metadata", Honoured}};
  static const auto* fork = new std::vector<FieldRule>{{"item_id", Honoured}};
  switch (kind) {
    case RequestKind::kCompletions: return *completions;
    case RequestKind::kChat: return *chat;
    case RequestKind::kResponses: return *responses;
    case RequestKind::kConversationCreate: return *create;
    case RequestKind::kConversationUpdate: return *update;
    case RequestKind::kConversationFork: return *fork;
  }
  return *fork;
}

absl::Status CheckFields(const json& body, RequestKind kind) {
  const std::vector<FieldRule>& rules = RulesFor(kind);
  for (const auto& [key, value] : body.items()) {
    if (IsAbsent(value)) continue;
    const bool known = std::any_of(rules.begin(), rules.end(),
                                   [&key = key](const FieldRule& r) { return key == r.name; });
    if (!known) return InvalidParam(ShownName(key), "unrecognized request argument (not served here)");
  }
  // In the rules' order, so the refusal names the field that matters (tools before
  // tool_choice), whatever the body's order.
  for (const FieldRule& rule : rules) {
    const json* value = Field(body, rule.name);  // null is as if absent
    if (value == nullptr) continue;
    if (const char* why = rule.check(*value); why != nullptr) return InvalidParam(rule.name, why);
  }
  return absl::OkStatus();
}

// Fields of one message or input item other than role, type and content: accepted only
// where they carry nothing (an SDK echoing back an assistant message sends them empty).
// `tools`: a chat message, whose tool_calls and tool_call_id the decoder reads.
absl::Status CheckMessageFields(const json& message, const std::string& item, bool tools) {
  // An item of another type (a tool call, its output) is the decoder's to refuse by type.
  if (const json* type = Field(message, "type"); type != nullptr && *type != "message") {
    return absl::OkStatus();
  }
  for (const auto& [key, value] : message.items()) {
    if (IsAbsent(value)) continue;
    if (key == "role" || key == "content" || key == "type") continue;
    // Output items fed back as input carry their id and status.
    if (key == "id" || key == "status") continue;
    if ((key == "refusal" || key == "annotations" || key == "audio" || key == "tool_calls" ||
         key == "function_call") &&
        IsEmpty(value)) {
      continue;
    }
    if (tools && key == "tool_calls" && value.is_array() && value.size() > L::kMaxToolCalls) {
      return InvalidParam(absl::StrCat(item, ".tool_calls"),
                          absl::StrCat("must have at most ", L::kMaxToolCalls, " calls"));
    }
    if (tools && (key == "tool_calls" || key == "tool_call_id")) continue;
    if (key == "tool_calls" || key == "function_call" || key == "tool_call_id") {
      return InvalidParam(absl::StrCat(item, ".", key), kNoTools);
    }
    return InvalidParam(absl::StrCat(item, ".", ShownName(key)),
                        "is not supported in a message (only role and content)");
  }
  const json* content = Field(message, "content");
  if (content == nullptr || !content->is_array()) return absl::OkStatus();
  if (content->size() > L::kMaxContentParts) {
    return InvalidParam(item + ".content",
                        absl::StrCat("must have at most ", L::kMaxContentParts, " parts"));
  }
  for (size_t p = 0; p < content->size(); ++p) {
    const json& part = (*content)[p];
    if (!part.is_object()) continue;  // the decoder names it
    for (const auto& [key, value] : part.items()) {
      if (IsAbsent(value) || key == "type" || key == "text") continue;
      if ((key == "annotations" || key == "logprobs") && IsEmpty(value)) continue;
      return InvalidParam(absl::StrCat(item, ".content[", p, "].", ShownName(key)),
                          "is not supported in a content part (only type and text)");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckMessages(const json& body, const char* param) {
  const json* list = Field(body, param);
  if (list == nullptr || !list->is_array()) return absl::OkStatus();  // the decoder names it
  if (list->size() > L::kMaxMessages) {
    return InvalidParam(param, absl::StrCat("must have at most ", L::kMaxMessages, " items (",
                                            list->size(), " given)"));
  }
  for (size_t i = 0; i < list->size(); ++i) {
    if (!(*list)[i].is_object()) continue;
    const bool tools = std::string_view(param) == "messages";
    if (absl::Status s = CheckMessageFields((*list)[i], absl::StrCat(param, "[", i, "]"), tools);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status CheckCounts(const json& body) {
  if (body.size() > L::kMaxFields) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request body has ", body.size(), " fields; at most ", L::kMaxFields));
  }
  for (const char* param : {"messages", "input", "items"}) {
    if (absl::Status s = CheckMessages(body, param); !s.ok()) return s;
  }
  if (const json* tools = Field(body, "tools"); tools != nullptr && tools->is_array() &&
                                                tools->size() > L::kMaxTools) {
    return InvalidParam("tools", absl::StrCat("must have at most ", L::kMaxTools, " tools"));
  }
  if (const json* stop = Field(body, "stop"); stop != nullptr && stop->is_array() &&
                                              stop->size() > L::kMaxStopStrings) {
    return InvalidParam("stop", absl::StrCat("must have at most ", L::kMaxStopStrings, " strings"));
  }
  if (const json* metadata = Field(body, "metadata")) return CheckMetadata(*metadata);
  return absl::OkStatus();
}

}  // namespace

int JsonNestingDepth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return limit + 1;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

absl::Status CheckMetadata(const json& metadata) {
  if (!metadata.is_object()) return WrongType("metadata", "an object");
  if (metadata.size() > L::kMaxMetadataKeys) {
    return InvalidParam("metadata", absl::StrCat("must have at most ", L::kMaxMetadataKeys, " keys"));
  }
  for (const auto& [key, value] : metadata.items()) {
    if (key.size() > L::kMaxMetadataKeyChars) {
      return InvalidParam("metadata", absl::StrCat("key '", key.substr(0, L::kMaxMetadataKeyChars),
                                                   "...' is longer than ",
                                                   L::kMaxMetadataKeyChars, " characters"));
    }
    if (!value.is_string()) {
      return InvalidParam("metadata", absl::StrCat("value of '", key, "' must be a string"));
    }
    if (value.get<std::string>().size() > L::kMaxMetadataValueChars) {
      return InvalidParam("metadata", absl::StrCat("value of '", key, "' is longer than ",
                                                   L::kMaxMetadataValueChars, " characters"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<json> ParseRequestBody(std::string_view text, RequestKind kind) {
  if (JsonNestingDepth(text, L::kMaxDepth) > L::kMaxDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request body nests deeper than ", L::kMaxDepth, " levels"));
  }
  json body = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded() || !body.is_object()) {
    return absl::InvalidArgumentError("the request body must be a JSON object");
  }
  if (absl::Status s = CheckCounts(body); !s.ok()) return s;
  if (absl::Status s = CheckFields(body, kind); !s.ok()) return s;
  return body;
}

}  // namespace attnserve::http
