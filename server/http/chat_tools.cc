#include "server/http/chat_tools.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "server/grammar/tool_calls.h"
#include "server/http/chat_template.h"
#include "server/http/json_fields.h"

namespace attnserve::http {
namespace {

using nlohmann::json;

// tools[i] (`tool`, `ordered` the same in declared order) into `out`; `flat`: the
// Responses API's shape, the function's members beside `type`.
absl::Status ReadTool(const json& tool, const nlohmann::ordered_json& ordered, size_t i,
                      bool flat, v1::ToolCallConstraint* out) {
  const std::string param = absl::StrCat("tools[", i, "]");
  if (!tool.is_object()) return WrongType(param, "a tool object");
  const json* type = Field(tool, "type");
  if (type == nullptr || *type != "function") {
    return InvalidParam(param + ".type", "only \"function\" tools are supported");
  }
  const json* function = &tool;
  std::string fparam = param;
  if (flat) {
    if (absl::Status s = OnlyMembers(tool, param, {"type", "name", "description", "parameters", "strict"});
        !s.ok()) {
      return s;
    }
  } else {
    if (absl::Status s = OnlyMembers(tool, param, {"type", "function"}); !s.ok()) return s;
    function = Field(tool, "function");
    if (function == nullptr || !function->is_object()) {
      return WrongType(param + ".function", "an object with the function's name");
    }
    fparam = param + ".function";
    if (absl::Status s = OnlyMembers(*function, fparam, {"name", "description", "parameters", "strict"});
        !s.ok()) {
      return s;
    }
  }
  const json* name = Field(*function, "name");
  if (name == nullptr || !name->is_string()) return WrongType(fparam + ".name", "a string");
  if (absl::Status s = grammar::CheckFunctionName(name->get<std::string>()); !s.ok()) {
    return InvalidParam(fparam + ".name", std::string(s.message()));
  }
  if (const json* d = Field(*function, "description"); d != nullptr && !d->is_string()) {
    return WrongType(fparam + ".description", "a string");
  }
  if (const json* s = Field(*function, "strict"); s != nullptr && !s->is_boolean()) {
    return WrongType(fparam + ".strict", "true or false");
  }
  v1::FunctionTool* f = out->add_functions();
  f->set_name(name->get<std::string>());
  if (const json* p = Field(*function, "parameters")) {
    if (!p->is_object()) return WrongType(fparam + ".parameters", "a JSON Schema (an object)");
    f->set_parameters_schema((flat ? ordered : ordered["function"])["parameters"].dump());
  }
  return absl::OkStatus();
}

// tool_choice into `c` (its functions read); false in *constrain for "none". `flat`:
// the Responses API's {"type": "function", "name": ...}.
absl::Status ReadToolChoice(const json& body, bool have_tools, bool flat,
                            v1::ToolCallConstraint* c, bool* constrain) {
  *constrain = have_tools;
  const json* choice = Field(body, "tool_choice");
  if (choice == nullptr || *choice == "auto") {
    c->set_choice(v1::ToolCallConstraint::CHOICE_AUTO);
    return absl::OkStatus();
  }
  if (*choice == "none") {
    *constrain = false;
    return absl::OkStatus();
  }
  if (*choice == "required") {
    if (!have_tools) return InvalidParam("tool_choice", "\"required\" needs tools");
    c->set_choice(v1::ToolCallConstraint::CHOICE_REQUIRED);
    return absl::OkStatus();
  }
  const char* shape =
      flat ? "must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\": ...}"
           : "must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": "
             "{\"name\": ...}}";
  if (!choice->is_object()) return InvalidParam("tool_choice", shape);
  if (absl::Status s = OnlyMembers(*choice, "tool_choice", {"type", flat ? "name" : "function"});
      !s.ok()) {
    return s;
  }
  const json* function = flat ? choice : Field(*choice, "function");
  if (Field(*choice, "type") == nullptr || (*choice)["type"] != "function" || function == nullptr ||
      !function->is_object()) {
    return InvalidParam("tool_choice", shape);
  }
  const std::string nparam = flat ? "tool_choice.name" : "tool_choice.function.name";
  if (!flat) {
    if (absl::Status s = OnlyMembers(*function, "tool_choice.function", {"name"}); !s.ok()) return s;
  }
  const json* name = Field(*function, "name");
  if (name == nullptr || !name->is_string()) return WrongType(nparam, "a string");
  bool declared = false;
  for (const v1::FunctionTool& f : c->functions()) declared = declared || f.name() == *name;
  if (!declared) return InvalidParam(nparam, "names no function among the tools");
  c->set_choice(v1::ToolCallConstraint::CHOICE_NAMED);
  c->set_function_name(name->get<std::string>());
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadChatTools(const json& body, std::string_view body_text, ChatTools* out) {
  return ReadTools(body, body_text, /*flat=*/false, out);
}

absl::Status ReadTools(const json& body, std::string_view body_text, bool flat, ChatTools* out) {
  const json* tools = Field(body, "tools");
  if (tools != nullptr && !tools->is_array()) return WrongType("tools", "a list of tools");
  const bool have_tools = tools != nullptr && !tools->empty();
  v1::ToolCallConstraint c;
  if (have_tools) {
    // The gate parsed these bytes already: they are JSON with this list.
    const nlohmann::ordered_json ordered =
        nlohmann::ordered_json::parse(body_text, nullptr, /*allow_exceptions=*/false)["tools"];
    std::set<std::string> names;
    for (size_t i = 0; i < tools->size(); ++i) {
      if (absl::Status s = ReadTool((*tools)[i], ordered[i], i, flat, &c); !s.ok()) return s;
      if (!names.insert(c.functions(int(i)).name()).second) {
        return InvalidParam(absl::StrCat("tools[", i, "].function.name"),
                            "is declared by an earlier tool too");
      }
      if (flat) {
        // The prompt shows every tool in the chat shape, as the templates expect it.
        nlohmann::ordered_json function = ordered[i];
        function.erase("type");
        out->definitions.push_back(ToolDefinitionText(
            nlohmann::ordered_json{{"type", "function"}, {"function", std::move(function)}}));
      } else {
        out->definitions.push_back(ToolDefinitionText(ordered[i]));
      }
    }
  }
  bool constrain = false;
  if (absl::Status s = ReadToolChoice(body, have_tools, flat, &c, &constrain); !s.ok()) return s;
  bool parallel = true;
  if (absl::Status s = ReadBool(body, "parallel_tool_calls", &parallel); !s.ok()) return s;
  c.set_parallel(parallel);
  if (constrain) out->constraint = std::move(c);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<grammar::ToolCallFormat>> ConstrainToolCalls(
    const ChatTools& tools, ChatTemplateKind kind, const std::string& format_param,
    v1::GenerateRequest* generate) {
  if (!tools.constraint.has_value()) return std::nullopt;
  if (generate->sampling().has_constraint()) {
    return InvalidParam(format_param,
                        "cannot be combined with tools (unless tool_choice is \"none\")");
  }
  const grammar::ToolCallFormat format = ToolCallFormatOf(kind);
  v1::ToolCallConstraint calls = *tools.constraint;
  calls.set_format(grammar::ToolCallFormatName(format));
  *generate->mutable_sampling()->mutable_constraint()->mutable_tool_calls() = std::move(calls);
  return format;
}

void FinishToolAnswer(grammar::ToolCallStreamParser& parser,
                      std::vector<grammar::ToolCallStreamParser::Event>* events) {
  std::vector<grammar::ToolCallStreamParser::Event> last;
  parser.Finish(&last);
  for (grammar::ToolCallStreamParser::Event& e : last) {
    if (e.kind != grammar::ToolCallStreamParser::Event::Kind::kContent) {
      events->push_back(std::move(e));
    }
  }
}

grammar::ParsedAnswer ReadToolAnswer(grammar::ToolCallFormat format, std::string_view text) {
  using Kind = grammar::ToolCallStreamParser::Event::Kind;
  grammar::ToolCallStreamParser parser(format);
  std::vector<grammar::ToolCallStreamParser::Event> events;
  parser.Feed(text, &events);
  FinishToolAnswer(parser, &events);
  grammar::ParsedAnswer out;
  size_t ended = 0;
  for (grammar::ToolCallStreamParser::Event& e : events) {
    if (e.kind == Kind::kContent) {
      out.content += e.text;
    } else if (e.kind == Kind::kCallStart) {
      out.calls.push_back({std::move(e.text), ""});
    } else if (e.kind == Kind::kArguments) {
      out.calls[size_t(e.index)].arguments += e.text;
    } else {
      ++ended;
    }
  }
  out.complete = ended == out.calls.size();
  return out;
}

absl::Status CheckStopWithConstraint(const v1::SamplingParams& sampling, const ChatTools& tools) {
  if (sampling.stop_size() == 0) return absl::OkStatus();
  const v1::Constraint& c = sampling.constraint();
  const char* constraint = nullptr;
  if (c.kind_case() == v1::Constraint::kJsonSchema) {
    constraint = "a json_schema response_format";
  } else if (c.kind_case() == v1::Constraint::kJsonObject) {
    constraint = "a json_object response_format";
  } else if (tools.constraint.has_value() &&
             tools.constraint->choice() != v1::ToolCallConstraint::CHOICE_AUTO) {
    constraint = "tool_choice \"required\" or a named function";
  }
  if (constraint == nullptr) return absl::OkStatus();
  return InvalidParam(
      "stop", absl::StrCat("cannot be combined with ", constraint,
                           ": the answer is constrained from its first byte, and a stop string "
                           "would cut it short of what the constraint requires (with "
                           "tool_choice \"auto\", stop strings end only the text before a call)"));
}

}  // namespace attnserve::http
