// Tool calls as constrained text (server/DESIGN.md §12): the envelope a chat template
// writes a call in, its `name` one of the declared functions and its `arguments` valid
// under that function's parameter schema; and the calls read back out of an answer, whole
// or as it streams.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "server/grammar/constraint.h"
#include "server/grammar/json_schema.h"

namespace attnserve::grammar {

struct FunctionSpec {
  std::string name;
  nlohmann::json parameters;  // a JSON Schema; null: any object
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

// The constraint of `spec`: kRequired / kNamed from the first token, kAuto lazily from the
// envelope's opening tag (Constraint::trigger). INVALID_ARGUMENT naming the path
// ("/tools/1/function/parameters/...") for a schema outside json_schema.h's subset, no
// functions, duplicate names, or a named function that is not declared.
absl::StatusOr<Constraint> CompileToolCalls(const ToolCallSpec& spec,
                                            const JsonSchemaOptions& options = {});

}  // namespace attnserve::grammar
