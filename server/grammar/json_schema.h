// JSON Schema to grammar (server/DESIGN.md §12): the text of a JSON value valid under a
// schema, as rules of a GrammarBuilder. The subset: OpenAI's strict structured outputs
// and what llama.cpp's json-schema-to-grammar does exactly. Whitespace: see
// JsonSchemaOptions. Anything outside the subset is refused with INVALID_ARGUMENT naming
// the keyword and its JSON Pointer path in the schema ("unsupported keyword
// 'patternProperties' at /properties/a"), never ignored.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "server/grammar/grammar.h"

namespace attnserve::grammar {

struct JsonSchemaOptions {
  // Limits that refuse a schema before compiling it (each named in the refusal).
  int max_schema_bytes = 64 * 1024;
  int max_depth = 32;         // nesting of the schema document
  int max_rules = 4000;       // rules the compiled grammar may have
  int max_enum_values = 512;  // enum / const values, over the schema
};

// A rule matching exactly the JSON texts valid under `schema`, added to `builder` (the
// tool-call grammars embed argument schemas this way). `path` prefixes the JSON Pointer in
// errors (e.g. "/tools/0/function/parameters").
absl::StatusOr<int> AddJsonSchema(GrammarBuilder& builder, const nlohmann::json& schema,
                                  const std::string& path = "",
                                  const JsonSchemaOptions& options = {});
// A rule matching any JSON value (response_format json_object: any object).
int AddAnyJsonObject(GrammarBuilder& builder);

// The grammar of `schema` alone.
absl::StatusOr<std::shared_ptr<const Grammar>> CompileJsonSchema(
    const nlohmann::json& schema, const JsonSchemaOptions& options = {});

}  // namespace attnserve::grammar
