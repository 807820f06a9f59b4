// Tools on chat completions (server/grammar/tool_calls.h, server/DESIGN.md §12): the
// request's `tools`, `tool_choice` and `parallel_tool_calls` read into the definitions
// the chat template shows the model and the turn's SamplingParams.constraint, which
// admission compiles (refusing, naming the schema keyword and its path, a function's
// parameters it cannot honour exactly).
//
//   tools                [{"type": "function", "function": {"name", "description"?,
//                          "parameters"?, "strict"?}}]; parameters absent: any object;
//                          strict true or false: the schema is enforced either way
//   tool_choice          "auto" (default): free text or calls, constrained from the
//                          envelope's opening tag; "required": one call or more from the
//                          first token; {"type": "function", "function": {"name"}}: that
//                          function; "none": no call (the tools are still described)
//   parallel_tool_calls  true (default): one call or more; false: one
//
// Any other member, or a value of another shape, is refused naming it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "attnserve/v1/attnserve.pb.h"
#include "nlohmann/json.hpp"
#include "server/grammar/tool_calls.h"
#include "server/http/chat_template.h"

namespace attnserve::http {

struct ChatTools {
  // Each tool as the prompt shows it (ToolDefinitionText), in the request's order.
  std::vector<std::string> definitions;
  // The calls the answer may make (format unset: the front sets the model's); nullopt
  // with no tools or tool_choice "none".
  std::optional<v1::ToolCallConstraint> constraint;
};

// Reads `body`'s tool fields (`body_text`: the same body's bytes, read again to keep the
// order in which parameters declare their properties). INVALID_ARGUMENT with the param
// payload naming the member for a tool that is not a function, a member not served, a
// name that is not an OpenAI function name or given twice, a tool_choice naming no
// declared tool, or "required" / a named function with no tools.
absl::Status ReadChatTools(const nlohmann::json& body, std::string_view body_text,
                           ChatTools* out);

// The same for /v1/responses, whose shapes are flat: tools [{"type": "function", "name",
// "description"?, "parameters"?, "strict"?}] and tool_choice {"type": "function",
// "name"}; errors name "tools[i].name", "tool_choice.name". The definitions are shown to
// the model in the chat shape.
absl::Status ReadTools(const nlohmann::json& body, std::string_view body_text, bool flat,
                       ChatTools* out);

// Puts `tools.constraint` on `generate`'s sampling, its calls in the envelope of `kind`
// (ToolCallFormatOf), and returns that format, in which the answer is read back; nullopt
// with no constraint. INVALID_ARGUMENT naming `format_param` ("response_format",
// "text.format") when the request also constrains the answer's text.
absl::StatusOr<std::optional<grammar::ToolCallFormat>> ConstrainToolCalls(
    const ChatTools& tools, ChatTemplateKind kind, const std::string& format_param,
    v1::GenerateRequest* generate);

// Ends the answer `parser` read: appends the events ToolCallStreamParser::Finish gives,
// less its text, which is the start of an envelope cut short (an opening tag, a header
// or a name that did not become a call, held until the end): a truncated envelope is
// never content, wherever the answer stopped.
void FinishToolAnswer(grammar::ToolCallStreamParser& parser,
                      std::vector<grammar::ToolCallStreamParser::Event>* events);
// `text` read whole as grammar::ParseToolCalls reads it, less the same cut envelope.
grammar::ParsedAnswer ReadToolAnswer(grammar::ToolCallFormat format, std::string_view text);

// OK unless `request` has stop strings under a constraint that applies from the answer's
// first byte (response_format json_schema or json_object, tool_choice "required" or a
// named function: `tools`), where a stop string would cut the constrained answer and the
// answer would still say it was complete: INVALID_ARGUMENT naming "stop". Under
// tool_choice "auto" stop strings end only the text before a call (answer_stops.h).
absl::Status CheckStopWithConstraint(const v1::SamplingParams& sampling, const ChatTools& tools);

}  // namespace attnserve::http
