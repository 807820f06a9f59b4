// Tool calls as constrained text (server/DESIGN.md §12): the envelope a chat template
// writes a call in, its `name` one of the declared functions and its `arguments` valid
// under that function's parameter schema; and the calls read back out of an answer, whole
// or as it streams.
//
// A call is the JSON object {"name": "<name>", "arguments": <arguments>} (exactly these
// bytes around the name and the arguments' JSON text) in one of two envelopes:
//
//   hermes (chatml templates: Hermes, Qwen)
//     <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>
//     parallel calls separated by "\n"
//   plain (the byte-level "User: ...\nAssistant: ..." template, llama2's and llama3's)
//     <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>
//     parallel calls separated by " ": the calls stay on the assistant's line
//
// An answer is free text (tool_choice auto only; none under required or a named
// function), then the calls, then nothing: the grammar ends after the last call.
// Function names are OpenAI's: 1 to 64 of [a-zA-Z0-9_-], so a name is its own JSON string.
//
// The arguments are the exact bytes the model wrote (whitespace included), never
// re-serialized: a client that sends them back in its history renders the same text
// (chat_template.h), which re-encodes to the same ids and hits the prefix cache.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "server/grammar/constraint.h"
#include "server/grammar/json_schema.h"

namespace attnserve::grammar {

struct FunctionSpec {
  std::string name;
  // A JSON Schema (ordered: properties are written in their declared order); null: any
  // object.
  nlohmann::ordered_json parameters;
};

enum class ToolChoice { kAuto, kRequired, kNamed };
enum class ToolCallFormat { kHermes, kPlain };

struct ToolCallSpec {
  std::vector<FunctionSpec> functions;
  ToolChoice choice = ToolChoice::kAuto;
  std::string function_name;  // kNamed
  bool parallel = true;
  ToolCallFormat format = ToolCallFormat::kHermes;
};

// "hermes", "plain".
const char* ToolCallFormatName(ToolCallFormat format);
// The format named `name` ("" is hermes, SamplingParams' default); INVALID_ARGUMENT
// listing the names otherwise.
absl::StatusOr<ToolCallFormat> ToolCallFormatByName(std::string_view name);

// The envelope's opening tag, "<tool_call>" in both formats: the lazy trigger of
// tool_choice auto, and what a free-text answer is scanned for.
inline constexpr std::string_view kToolCallOpening = "<tool_call>";

// OK for an OpenAI function name (1 to 64 of [a-zA-Z0-9_-]); INVALID_ARGUMENT otherwise.
absl::Status CheckFunctionName(std::string_view name);

// The constraint of `spec`: kRequired / kNamed from the first token, kAuto lazily from the
// envelope's opening tag (Constraint::trigger). INVALID_ARGUMENT naming the path
// ("/tools/1/function/parameters/...") for a schema outside json_schema.h's subset, no
// functions, a name that is not an OpenAI function name, duplicate names, or a named
// function that is not declared. Paths index `spec.functions`.
absl::StatusOr<Constraint> CompileToolCalls(const ToolCallSpec& spec,
                                            const JsonSchemaOptions& options = {});

// One call: the function's name and its arguments' JSON text as written.
struct ToolCall {
  std::string name;
  std::string arguments;
};

// The text of `calls` in `format`, separators included: what the model writes for them,
// byte for byte (chat templates render an assistant's calls with it).
std::string WriteToolCalls(ToolCallFormat format, const std::vector<ToolCall>& calls);

// An answer read back: the free text before the first call, then the calls.
struct ParsedAnswer {
  std::string content;
  std::vector<ToolCall> calls;
  // Every call is whole (false: the answer stopped inside the last one, at max_tokens;
  // its arguments are what was written of them).
  bool complete = true;
};

// Reads `text` (an answer generated under CompileToolCalls' constraint for `format`) as
// ToolCallStreamParser does, all at once. Bytes that do not follow the envelope stay
// content (a text that is not a call is never lost).
ParsedAnswer ParseToolCalls(ToolCallFormat format, std::string_view text);

// The same, incrementally, for streaming: fed an answer's bytes as they come, it says what
// they are. A call's start is known once its name is whole; its arguments follow in
// pieces whose concatenation is their exact text. Bytes that may begin an envelope are
// held until they do or do not. Not thread-safe: one turn's.
class ToolCallStreamParser {
 public:
  struct Event {
    enum class Kind {
      kContent,    // free text
      kCallStart,  // call `index` (0, 1, ...) of function `text`
      kArguments,  // a piece of call `index`'s arguments
      kCallEnd,    // call `index` is whole
    };
    Kind kind;
    int index = -1;
    std::string text;
  };

  explicit ToolCallStreamParser(ToolCallFormat format);

  // Appends the events that `bytes` complete to `*events`.
  void Feed(std::string_view bytes, std::vector<Event>* events);
  // The answer is over: held bytes that began no call become content; a call cut short
  // stays open (no kCallEnd), and the bytes of its closing envelope are dropped.
  void Finish(std::vector<Event>* events);

  int calls_started() const { return calls_; }

 private:
  enum class State { kText, kHeader, kName, kMid, kArguments, kClose, kBetween };
  void Step(char c, std::vector<Event>* events);
  // Emits `held_` as content and rescans what followed the point where the envelope
  // broke off as free text.
  void GiveUpEnvelope(std::vector<Event>* events);
  void Emit(Event::Kind kind, std::string_view text, std::vector<Event>* events);

  const ToolCallFormat format_;
  State state_ = State::kText;
  std::string held_;     // bytes of an envelope (or its start) not yet said
  std::string expect_;   // kHeader, kMid, kClose, kBetween: the literal being matched
  std::string name_;     // kName
  std::string pending_;  // kArguments: whitespace after the value, not yet said
  int calls_ = 0;
  // kArguments: a scan of the JSON value.
  int depth_ = 0;
  bool in_string_ = false;
  bool escaped_ = false;
  bool value_started_ = false;
  bool value_done_ = false;
  bool scalar_ = false;  // a number, true, false or null
};

}  // namespace attnserve::grammar
